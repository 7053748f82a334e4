//! GF(2^8) arithmetic with the RAID-Z field: polynomial x^8 + x^4 + x^3 + x^2 + 1 (0x11d),
//! generator 2. Every table here is built at compile time by `const fn`s, so there is no
//! run-time setup and nothing to initialise lazily.
//!
//! Elements are bytes; addition is XOR; multiplication goes through log/exp tables
//! (`a·b = 2^(log a + log b)`).

/// The field polynomial without the x^8 term (x^8 = x^4 + x^3 + x^2 + 1).
const POLY_LOW: u8 = 0x1d;

/// Multiplies by the generator 2: shift left, and reduce when x^7 was set.
pub const fn mul2(a: u8) -> u8 {
    let reduce = if a & 0x80 != 0 { POLY_LOW } else { 0 };
    (a << 1) ^ reduce
}

/// `EXP[i] = 2^i`, doubled to 510 entries so `EXP[log a + log b]` needs no reduction.
pub static EXP: [u8; 510] = build_exp();
/// `LOG[x] = log_2 x` for x ≠ 0 (`LOG[0]` is unused and 0).
pub static LOG: [u8; 256] = build_log();

const fn build_exp() -> [u8; 510] {
    let mut table = [0u8; 510];
    let mut value = 1u8;
    let mut i = 0;
    while i < 510 {
        table[i] = value;
        value = mul2(value);
        i += 1;
    }
    table
}

const fn build_log() -> [u8; 256] {
    let exp = build_exp();
    let mut table = [0u8; 256];
    let mut i = 0;
    while i < 255 {
        table[exp[i] as usize] = i as u8;
        i += 1;
    }
    table
}

/// `a · b` in GF(2^8).
pub fn mul(a: u8, b: u8) -> u8 {
    if a == 0 || b == 0 {
        return 0;
    }
    EXP[LOG[a as usize] as usize + LOG[b as usize] as usize]
}

/// Multiplicative inverse by logarithms; `a` must not be 0 (checks the `INVERSES` table).
#[cfg(test)]
pub fn inv(a: u8) -> u8 {
    assert!(a != 0, "0 has no inverse in GF(2^8)");
    EXP[(255 - LOG[a as usize] as usize) % 255]
}

/// `2^e` for any exponent (the multiplicative group has order 255).
pub fn pow2(e: usize) -> u8 {
    EXP[e % 255]
}

/// The coefficient of data column `data_index` (0-based among `ndata` data columns) in
/// parity row `row` (0 = P, 1 = Q, 2 = R): `(2^row)^(ndata − 1 − data_index)`.
pub fn parity_coef(row: usize, data_index: usize, ndata: usize) -> u8 {
    debug_assert!(row < 3 && data_index < ndata);
    pow2(row * (ndata - 1 - data_index))
}

/// Full multiplication table, `MUL_TABLE[c][x] = c·x` (64 KiB), used by the scalar kernel.
pub static MUL_TABLE: [[u8; 256]; 256] = build_mul_table();

const fn const_mul(a: u8, b: u8) -> u8 {
    // Shift-and-add ("Russian peasant") multiplication, usable in const context.
    let mut product = 0u8;
    let mut a = a;
    let mut b = b;
    while b != 0 {
        if b & 1 != 0 {
            product ^= a;
        }
        a = mul2(a);
        b >>= 1;
    }
    product
}

const fn build_mul_table() -> [[u8; 256]; 256] {
    let mut table = [[0u8; 256]; 256];
    let mut c = 0;
    while c < 256 {
        let mut x = 0;
        while x < 256 {
            table[c][x] = const_mul(c as u8, x as u8);
            x += 1;
        }
        c += 1;
    }
    table
}

/// Nibble tables for the pshufb kernels: `NIBBLE_TABLES[c] = [c·x for x in 0..16] ++
/// [c·(x<<4) for x in 0..16]`, so `c·b = lo[b & 15] ^ hi[b >> 4]`.
pub static NIBBLE_TABLES: [[u8; 32]; 256] = build_nibble_tables();

const fn build_nibble_tables() -> [[u8; 32]; 256] {
    let mut table = [[0u8; 32]; 256];
    let mut c = 0;
    while c < 256 {
        let mut x = 0;
        while x < 16 {
            table[c][x] = const_mul(c as u8, x as u8);
            table[c][16 + x] = const_mul(c as u8, (x << 4) as u8);
            x += 1;
        }
        c += 1;
    }
    table
}

/// GFNI bit matrices: `AFFINE_MATRICES[c]` is the 8×8 matrix over GF(2) of "multiply by c"
/// in the layout `vgf2p8affineqb` expects. For output bit `i` the instruction takes the
/// parity of `matrix.byte[7 − i] & x`; since `c·x = ⊕_k x_k·(c·2^k)`, bit `k` of that row
/// byte is bit `i` of `c·2^k`. (`vgf2p8mulb` is not usable: it hard-wires polynomial 0x11b.)
pub static AFFINE_MATRICES: [u64; 256] = build_affine_matrices();

const fn build_affine_matrices() -> [u64; 256] {
    let mut table = [0u64; 256];
    let mut c = 0;
    while c < 256 {
        let mut matrix = 0u64;
        let mut out_bit = 0;
        while out_bit < 8 {
            let mut row = 0u8;
            let mut k = 0;
            while k < 8 {
                let image = const_mul(c as u8, 1u8 << k);
                row |= ((image >> out_bit) & 1) << k;
                k += 1;
            }
            matrix |= (row as u64) << (8 * (7 - out_bit));
            out_bit += 1;
        }
        table[c] = matrix;
        c += 1;
    }
    table
}

/// `INVERSES[a] = a⁻¹` (`INVERSES[0]` is unused and 0).
static INVERSES: [u8; 256] = build_inverses();

const fn build_inverses() -> [u8; 256] {
    let mut table = [0u8; 256];
    let mut a = 1;
    while a < 256 {
        let mut b = 1;
        while const_mul(a as u8, b as u8) != 1 {
            b += 1;
        }
        table[a] = b as u8;
        a += 1;
    }
    table
}

/// Inverts a square matrix of size `size` ≤ 3 (Gauss–Jordan, table lookups only: this runs
/// on every reconstruct call). Returns `None` if singular.
pub fn invert(matrix: &[[u8; 3]; 3], size: usize) -> Option<[[u8; 3]; 3]> {
    assert!((1..=3).contains(&size));
    let times = |a: u8, b: u8| MUL_TABLE[a as usize][b as usize];
    let mut work = *matrix;
    let mut inverse = [[0u8; 3]; 3];
    for (i, row) in inverse.iter_mut().enumerate().take(size) {
        row[i] = 1;
    }
    for col in 0..size {
        let pivot = (col..size).find(|&r| work[r][col] != 0)?;
        work.swap(col, pivot);
        inverse.swap(col, pivot);
        let scale = INVERSES[work[col][col] as usize];
        for j in 0..size {
            work[col][j] = times(work[col][j], scale);
            inverse[col][j] = times(inverse[col][j], scale);
        }
        for r in 0..size {
            let factor = work[r][col];
            if r == col || factor == 0 {
                continue;
            }
            for j in 0..size {
                work[r][j] ^= times(factor, work[col][j]);
                inverse[r][j] ^= times(factor, inverse[col][j]);
            }
        }
    }
    Some(inverse)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tables_agree_with_shift_and_add() {
        for a in 0..=255u8 {
            for b in 0..=255u8 {
                assert_eq!(mul(a, b), const_mul(a, b));
                assert_eq!(MUL_TABLE[a as usize][b as usize], mul(a, b));
            }
        }
    }

    #[test]
    fn generator_has_order_255() {
        assert_eq!(pow2(255), 1);
        assert!((1..255).all(|e| pow2(e) != 1));
        assert_eq!(pow2(8), 0x1d);
    }

    #[test]
    fn inverse_times_value_is_one() {
        for a in 1..=255u8 {
            assert_eq!(mul(a, inv(a)), 1);
            assert_eq!(INVERSES[a as usize], inv(a));
        }
    }

    #[test]
    #[allow(clippy::needless_range_loop)] // index form reads like the matrix product formula
    fn invert_3x3_roundtrip() {
        let m = [[1, 1, 1], [4, 2, 1], [16, 4, 1]];
        let inv_m = invert(&m, 3).unwrap();
        for i in 0..3 {
            for j in 0..3 {
                let v = (0..3).fold(0u8, |acc, k| acc ^ mul(m[i][k], inv_m[k][j]));
                assert_eq!(v, u8::from(i == j));
            }
        }
        assert!(invert(&[[1, 1, 0], [1, 1, 0], [0, 0, 0]], 2).is_none());
    }
}
