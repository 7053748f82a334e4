//! Dirty time logs: the txg ranges a leaf missed while it could not take writes.
//!
//! A range is `[start, end)`. Ranges are kept sorted and merged, so a leaf that misses a
//! long stretch of txgs costs one entry. A block needs repair on a leaf when its birth txg
//! falls in one of the leaf's ranges; a subtree whose pointer's birth is below the first
//! range's start cannot hold such a block (a parent is never older than its children).

/// Adds `txg` to `ranges`, extending or merging neighbours.
pub fn add_txg(ranges: &mut Vec<(u64, u64)>, txg: u64) {
    add_range(ranges, (txg, txg.saturating_add(1)));
}

/// Adds `[start, end)` to `ranges`.
pub fn add_range(ranges: &mut Vec<(u64, u64)>, range: (u64, u64)) {
    if range.0 >= range.1 {
        return;
    }
    ranges.push(range);
    ranges.sort_unstable();
    let mut merged: Vec<(u64, u64)> = Vec::with_capacity(ranges.len());
    for &(s, e) in ranges.iter() {
        match merged.last_mut() {
            Some(last) if s <= last.1 => last.1 = last.1.max(e),
            _ => merged.push((s, e)),
        }
    }
    *ranges = merged;
}

/// Whether a block born in `birth` falls in one of `ranges`.
pub fn contains(ranges: &[(u64, u64)], birth: u64) -> bool {
    ranges.iter().any(|&(s, e)| (s..e).contains(&birth))
}

/// The earliest txg of any range (subtrees born before it need no visit).
pub fn first_txg(ranges: &[(u64, u64)]) -> Option<u64> {
    ranges.iter().map(|r| r.0).min()
}

/// Human form for `status`: `txg 10-14, 20`.
pub fn describe(ranges: &[(u64, u64)]) -> String {
    ranges
        .iter()
        .map(|&(s, e)| match e {
            u64::MAX => "everything".to_string(),
            // Ranges come from labels: no arithmetic that could overflow on odd values.
            e if e == s.saturating_add(1) => format!("{s}"),
            e => format!("{s}-{}", e.saturating_sub(1)),
        })
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn txgs_merge_into_ranges() {
        let mut r = Vec::new();
        for t in [5, 6, 7, 9, 8, 20] {
            add_txg(&mut r, t);
        }
        assert_eq!(r, vec![(5, 10), (20, 21)]);
        assert!(contains(&r, 9) && !contains(&r, 10) && contains(&r, 20));
        assert_eq!(first_txg(&r), Some(5));
        assert_eq!(describe(&r), "5-9, 20");
        add_range(&mut r, (0, u64::MAX));
        assert_eq!(r, vec![(0, u64::MAX)]);
    }
}
