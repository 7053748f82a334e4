//! Block checksums: blake3 (default), sha256, fletcher4.

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
            "blake3" | "on" => ChecksumKind::Blake3,
            "sha256" => ChecksumKind::Sha256,
            "fletcher4" => ChecksumKind::Fletcher4,
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
/// taken as little-endian 32-bit words (a trailing partial word is zero-padded).
pub fn fletcher4(data: &[u8]) -> [u8; 32] {
    let (mut a, mut b, mut c, mut d) = (0u64, 0u64, 0u64, 0u64);
    let mut words = data.chunks_exact(4);
    for w in &mut words {
        let v = u64::from(u32::from_le_bytes([w[0], w[1], w[2], w[3]]));
        a = a.wrapping_add(v);
        b = b.wrapping_add(a);
        c = c.wrapping_add(b);
        d = d.wrapping_add(c);
    }
    let rest = words.remainder();
    if !rest.is_empty() {
        let mut w = [0u8; 4];
        w[..rest.len()].copy_from_slice(rest);
        let v = u64::from(u32::from_le_bytes(w));
        a = a.wrapping_add(v);
        b = b.wrapping_add(a);
        c = c.wrapping_add(b);
        d = d.wrapping_add(c);
    }
    let mut out = [0u8; 32];
    for (i, x) in [a, b, c, d].iter().enumerate() {
        out[i * 8..i * 8 + 8].copy_from_slice(&x.to_le_bytes());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

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
