//! Scalar reference for tests and benchmarks: the formulas of the crate documentation
//! written as directly as possible (byte by byte, Horner form, explicit zero padding,
//! log/exp multiplication). Slow on purpose; shares no code with the kernels except the
//! log/exp tables.

use crate::gf;

/// Parity rows `0..nparity` of `data` (first column longest; shorter ones zero-padded),
/// each as long as the first data column.
pub fn generate(nparity: usize, data: &[&[u8]]) -> Vec<Vec<u8>> {
    assert!((1..=3).contains(&nparity) && !data.is_empty());
    let len = data[0].len();
    assert!(
        data.iter().all(|d| d.len() <= len),
        "first data column must be the longest"
    );
    let mut parity = vec![vec![0u8; len]; nparity];
    for offset in 0..len {
        let (mut p, mut q, mut r) = (0u8, 0u8, 0u8);
        for column in data {
            let d = column.get(offset).copied().unwrap_or(0);
            p ^= d;
            q = gf::mul(q, 2) ^ d;
            r = gf::mul(r, 4) ^ d;
        }
        for (row, value) in parity.iter_mut().zip([p, q, r]) {
            row[offset] = value;
        }
    }
    parity
}

/// `a · b` in the RAID-Z field (0x11d), for tests that want to state expectations.
pub fn gf_mul(a: u8, b: u8) -> u8 {
    gf::mul(a, b)
}

/// `2^e` in the RAID-Z field.
pub fn gf_pow2(e: usize) -> u8 {
    gf::pow2(e)
}
