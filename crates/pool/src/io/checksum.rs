//! Block checksums: fletcher4 (the default for data, as `checksum=on` in ZFS), blake3
//! (metadata, labels; a cryptographic hash for data on request), sha256.

use sha2::Digest;

/// Checksum algorithm of a block (the `checksum=` property).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum ChecksumKind {
    Blake3 = 1,
    Sha256 = 2,
    Fletcher4 = 3,
}

impl ChecksumKind {
    pub fn from_u8(v: u8) -> Option<ChecksumKind> {
        Some(match v {
            1 => ChecksumKind::Blake3,
            2 => ChecksumKind::Sha256,
            3 => ChecksumKind::Fletcher4,
            _ => return None,
        })
    }
    pub fn from_name(s: &str) -> Option<ChecksumKind> {
        Some(match s {
            "blake3" => ChecksumKind::Blake3,
            "sha256" => ChecksumKind::Sha256,
            "fletcher4" | "on" => ChecksumKind::Fletcher4,
            _ => return None,
        })
    }
    pub fn name(self) -> &'static str {
        match self {
            ChecksumKind::Blake3 => "blake3",
            ChecksumKind::Sha256 => "sha256",
            ChecksumKind::Fletcher4 => "fletcher4",
        }
    }

    /// The 256-bit checksum of `data`.
    pub fn digest(self, data: &[u8]) -> [u8; 32] {
        match self {
            ChecksumKind::Blake3 => *blake3::hash(data).as_bytes(),
            ChecksumKind::Sha256 => sha2::Sha256::digest(data).into(),
            ChecksumKind::Fletcher4 => fletcher4(data),
        }
    }
}

/// Fletcher-4 as ZFS defines it (zfs_fletcher.c): four 64-bit running sums over the data
/// taken as little-endian 32-bit words (a trailing partial word is zero-padded):
/// `a += w; b += a; c += b; d += c`.
///
/// The running sums are one long dependency chain, so the bulk is computed in `LANES`
/// interleaved lanes (word `i` goes to lane `i % LANES`), which the compiler turns into
/// SIMD adds, and the lanes are then combined into the serial result (see
/// `lane_coefficients`; OpenZFS's vectorized fletcher4 does the same). The rest of the
/// words continue serially from the combined sums.
pub fn fletcher4(data: &[u8]) -> [u8; 32] {
    // Short inputs are not worth the lanes' combination step.
    let bulk = match data.len() / LANE_BYTES * LANE_BYTES {
        n if n >= 16 * LANE_BYTES => n,
        _ => 0,
    };
    let mut sums = if bulk > 0 {
        combine_lanes(&lane_sums(&data[..bulk]))
    } else {
        [0u64; 4]
    };
    let mut words = data[bulk..].chunks_exact(4);
    for w in &mut words {
        step(&mut sums, u32::from_le_bytes([w[0], w[1], w[2], w[3]]));
    }
    let rest = words.remainder();
    if !rest.is_empty() {
        let mut w = [0u8; 4];
        w[..rest.len()].copy_from_slice(rest);
        step(&mut sums, u32::from_le_bytes(w));
    }
    sums_to_bytes(&sums)
}

/// The 32-byte checksum: the four sums, little-endian.
fn sums_to_bytes(sums: &[u64; 4]) -> [u8; 32] {
    let mut out = [0u8; 32];
    for (i, x) in sums.iter().enumerate() {
        out[i * 8..i * 8 + 8].copy_from_slice(&x.to_le_bytes());
    }
    out
}

const LANES: usize = 8;
const LANE_BYTES: usize = 4 * LANES;

#[inline(always)]
fn step(s: &mut [u64; 4], word: u32) {
    s[0] = s[0].wrapping_add(u64::from(word));
    s[1] = s[1].wrapping_add(s[0]);
    s[2] = s[2].wrapping_add(s[1]);
    s[3] = s[3].wrapping_add(s[2]);
}

/// Per-lane sums `[a, b, c, d][lane]` over `data` (a multiple of `LANE_BYTES`).
fn lane_sums(data: &[u8]) -> [[u64; LANES]; 4] {
    #[cfg(target_arch = "x86_64")]
    {
        if std::arch::is_x86_feature_detected!("avx512f") {
            // SAFETY: the CPU has AVX-512F (checked just above).
            return unsafe { lane_sums_avx512(data) };
        }
        if std::arch::is_x86_feature_detected!("avx2") {
            // SAFETY: the CPU has AVX2 (checked just above).
            return unsafe { lane_sums_avx2(data) };
        }
    }
    lane_sums_portable(data)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
fn lane_sums_avx512(data: &[u8]) -> [[u64; LANES]; 4] {
    lane_sums_portable(data)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
fn lane_sums_avx2(data: &[u8]) -> [[u64; LANES]; 4] {
    lane_sums_portable(data)
}

/// The lane loop; written so that it vectorizes (one vector add per sum and row).
#[inline(always)]
fn lane_sums_portable(data: &[u8]) -> [[u64; LANES]; 4] {
    let (mut a, mut b, mut c, mut d) = ([0u64; LANES], [0u64; LANES], [0u64; LANES], [0u64; LANES]);
    for row in data.chunks_exact(LANE_BYTES) {
        let mut x = [0u64; LANES];
        for (l, w) in row.chunks_exact(4).enumerate() {
            x[l] = u64::from(u32::from_le_bytes([w[0], w[1], w[2], w[3]]));
        }
        for l in 0..LANES {
            a[l] = a[l].wrapping_add(x[l]);
            b[l] = b[l].wrapping_add(a[l]);
            c[l] = c[l].wrapping_add(b[l]);
            d[l] = d[l].wrapping_add(c[l]);
        }
    }
    [a, b, c, d]
}

/// The serial sums from the lane sums.
fn combine_lanes(lanes: &[[u64; LANES]; 4]) -> [u64; 4] {
    let coeffs = lane_coefficients();
    let mut out = [0u64; 4];
    out[0] = lanes[0].iter().fold(0u64, |s, &x| s.wrapping_add(x));
    for (k, row) in coeffs.iter().enumerate() {
        let mut sum = 0u64;
        for (j, c) in row.iter().enumerate() {
            for (basis, coeff) in c.iter().enumerate() {
                sum = sum.wrapping_add(coeff.wrapping_mul(lanes[basis][j]));
            }
        }
        out[k + 1] = sum;
    }
    out
}

/// How lane sums combine into the serial `b`, `c`, `d`.
///
/// Over n words the serial sums weigh word i by binomials of `n - i`:
/// `a = Σ x`, `b = Σ (n-i) x`, `c = Σ C(n-i+1, 2) x`, `d = Σ C(n-i+2, 3) x`. In lane `j`
/// (m words, word i = t·LANES + j), with `u = m - t`, the lane's own sums weigh its words by
/// `1, u, C(u+1,2), C(u+2,3)`, and `n - i = LANES·u - j`. So the serial weight of sum k,
/// `C(LANES·u - j + k - 1, k)`, is a polynomial in `u` of degree k, written here in the
/// lanes' basis from its values at u = 0..3. Result: `[sum k-1][lane j][basis]`.
fn lane_coefficients() -> &'static [[[u64; 4]; LANES]; 3] {
    static COEFFS: std::sync::OnceLock<[[[u64; 4]; LANES]; 3]> = std::sync::OnceLock::new();
    COEFFS.get_or_init(|| {
        let mut out = [[[0u64; 4]; LANES]; 3];
        for (k, row) in (1..=3i128).zip(out.iter_mut()) {
            for (j, c) in row.iter_mut().enumerate() {
                // C(x + k - 1, k) = x (x+1) … (x+k-1) / k! with x = LANES·u - j.
                let weight = |u: i128| {
                    let x = LANES as i128 * u - j as i128;
                    let num: i128 = (0..k).map(|r| x + r).product();
                    let fact: i128 = (1..=k).product();
                    num / fact
                };
                let q0 = weight(0);
                let (r1, r2, r3) = (weight(1) - q0, weight(2) - q0, weight(3) - q0);
                // Basis values at u = 1, 2, 3: u → 1, 2, 3; C(u+1,2) → 1, 3, 6;
                // C(u+2,3) → 1, 4, 10. Solved for the coefficients:
                let cubic = r3 - 3 * r2 + 3 * r1;
                let quad = r2 - 2 * r1 - 2 * cubic;
                let lin = r1 - cubic - quad;
                *c = [q0, lin, quad, cubic].map(|v| v as u64);
            }
        }
        out
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The definition, one word at a time.
    fn fletcher4_serial(data: &[u8]) -> [u8; 32] {
        let mut s = [0u64; 4];
        for w in data.chunks(4) {
            let mut b = [0u8; 4];
            b[..w.len()].copy_from_slice(w);
            step(&mut s, u32::from_le_bytes(b));
        }
        sums_to_bytes(&s)
    }

    #[test]
    fn fletcher4_lanes_match_the_serial_definition() {
        use rand::{RngCore, SeedableRng};
        let mut rng = rand::rngs::StdRng::seed_from_u64(4);
        let mut data = vec![0u8; 300_000];
        rng.fill_bytes(&mut data);
        for len in [
            0, 1, 3, 4, 31, 32, 511, 512, 513, 4096, 4099, 131072, 131075, 300_000,
        ] {
            assert_eq!(
                fletcher4(&data[..len]),
                fletcher4_serial(&data[..len]),
                "len {len}"
            );
        }
        // Large words make every sum wrap around 2^64.
        let ones = vec![0xFFu8; 1 << 20];
        assert_eq!(fletcher4(&ones), fletcher4_serial(&ones));
        assert_eq!(
            lane_sums(&ones[..4096]),
            lane_sums_portable(&ones[..4096]),
            "the SIMD build of the lane loop"
        );
    }

    proptest::proptest! {
        #[test]
        fn fletcher4_matches_serial_on_any_input(data in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..5000)) {
            proptest::prop_assert_eq!(fletcher4(&data), fletcher4_serial(&data));
        }
    }

    #[test]
    fn fletcher4_known_answer() {
        // words 1, 2: after 1: a=b=c=d=1; after 2: a=3, b=1+3=4, c=1+4=5, d=1+5=6
        let data = [1u8, 0, 0, 0, 2, 0, 0, 0];
        let f = fletcher4(&data);
        let get = |i: usize| u64::from_le_bytes(f[i * 8..i * 8 + 8].try_into().unwrap());
        assert_eq!((get(0), get(1), get(2), get(3)), (3, 4, 5, 6));
    }

    #[test]
    fn digests_differ_and_detect_flips() {
        let mut data = vec![7u8; 4096];
        for kind in [
            ChecksumKind::Blake3,
            ChecksumKind::Sha256,
            ChecksumKind::Fletcher4,
        ] {
            let a = kind.digest(&data);
            data[100] ^= 1;
            assert_ne!(a, kind.digest(&data), "{}", kind.name());
            data[100] ^= 1;
            assert_eq!(ChecksumKind::from_name(kind.name()), Some(kind));
        }
    }
}
