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

/// Decoding coefficients for erased data columns, as a plain matrix (what a generic
/// erasure-code library such as ISA-L's `ec_encode_data` needs to compute the same thing as
/// [`crate::RaidzParity::reconstruct`]).
///
/// `missing_data` are 0-based data indices (ascending, at most `nparity`); all parity is
/// assumed present and rows P, Q, … (the first `missing_data.len()`) are used. Returns the
/// input columns, as indices into the full row (surviving data first, then the parity
/// columns used), and one coefficient row per missing data column, so that
/// `D_missing[k] = Σ_i rows[k][i] · column[inputs[i]]`.
pub fn decode_matrix(
    nparity: usize,
    ndata: usize,
    missing_data: &[usize],
) -> (Vec<usize>, Vec<Vec<u8>>) {
    let m = missing_data.len();
    assert!((1..=nparity).contains(&m) && nparity <= 3);
    assert!(missing_data.windows(2).all(|w| w[0] < w[1]) && missing_data[m - 1] < ndata);
    let mut square = [[0u8; 3]; 3];
    for (row, square_row) in square.iter_mut().enumerate().take(m) {
        for (entry, &x) in square_row.iter_mut().zip(missing_data) {
            *entry = gf::parity_coef(row, x, ndata);
        }
    }
    let inverse = gf::invert(&square, m).expect("RAID-Z submatrices are invertible");
    let surviving: Vec<usize> = (0..ndata).filter(|i| !missing_data.contains(i)).collect();
    let mut inputs: Vec<usize> = surviving.iter().map(|&i| nparity + i).collect();
    inputs.extend(0..m);
    let rows = (0..m)
        .map(|k| {
            let data_coefs = surviving.iter().map(|&i| {
                (0..m).fold(0u8, |acc, j| {
                    acc ^ gf::mul(inverse[k][j], gf::parity_coef(j, i, ndata))
                })
            });
            data_coefs.chain((0..m).map(|j| inverse[k][j])).collect()
        })
        .collect();
    (inputs, rows)
}

/// The RAID-Z coefficient matrix: `nparity` rows of `ndata` coefficients, `A[j][i] =
/// (2^j)^(n−1−i)`.
pub fn coefficient_matrix(nparity: usize, ndata: usize) -> Vec<Vec<u8>> {
    (0..nparity)
        .map(|j| (0..ndata).map(|i| gf::parity_coef(j, i, ndata)).collect())
        .collect()
}
