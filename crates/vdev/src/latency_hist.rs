//! Latency histograms with power-of-two buckets, as `zpool iostat -w` shows them: bucket
//! `i` counts requests that took [2^i, 2^(i+1)) ns (bucket 0 also takes 0 ns). Used by the
//! leaf counters (`crate::iostat`) and their per-class parts (`crate::class_stats`).

/// Latency histogram buckets: 1 ns to 2^37 ns (~137 s) and more in the last.
pub const HIST_BUCKETS: usize = 38;

/// Histogram bucket of a latency.
pub fn bucket_of(ns: u64) -> usize {
    (63 - ns.max(1).leading_zeros() as usize).min(HIST_BUCKETS - 1)
}

/// Adds or subtracts two histograms bucket by bucket (the shorter one padded with 0: a
/// snapshot from an older pool record may have none).
pub(crate) fn zip_hist(a: &[u64], b: &[u64], f: impl Fn(u64, u64) -> u64) -> Vec<u64> {
    (0..a.len().max(b.len()))
        .map(|i| {
            f(
                a.get(i).copied().unwrap_or(0),
                b.get(i).copied().unwrap_or(0),
            )
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_are_powers_of_two() {
        assert_eq!(bucket_of(0), 0);
        assert_eq!(bucket_of(1), 0);
        assert_eq!(bucket_of(2), 1);
        assert_eq!(bucket_of(1023), 9);
        assert_eq!(bucket_of(1024), 10);
        assert_eq!(bucket_of(u64::MAX), HIST_BUCKETS - 1);
    }
}
