//! The I/O pipeline and allocator under the object store: block pointers, checksums,
//! compression, metaslab allocation and space maps.

pub mod alloc;
pub mod bp;
pub mod cache;
pub mod checksum;
pub mod compress;
pub mod pipeline;
