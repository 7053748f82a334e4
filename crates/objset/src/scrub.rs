//! Scrub: walk every block reachable from the root and check every copy and column.
