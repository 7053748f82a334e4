//! Block compression: off, lz4 (default), zstd levels 1..19.
//!
//! Like ZFS, a block is stored compressed only if that saves at least 1/8 of its size
//! (lz4's "early abort"); otherwise it is stored as is and the pointer says `Off`.
//! Compressed payloads start with their length (u32 LE), as ZFS's lz4 blocks do, because
//! the stored block is padded to the sector size.

/// Compression of a stored block (the `compression=` property maps onto it).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Compression {
    Off = 0,
    Lz4 = 1,
    Zstd = 2,
}

/// The `compression=` property value: algorithm and zstd level.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CompressionSetting {
    pub algorithm: Compression,
    pub zstd_level: i32,
}

impl CompressionSetting {
    pub const OFF: CompressionSetting = CompressionSetting {
        algorithm: Compression::Off,
        zstd_level: 0,
    };
    pub const LZ4: CompressionSetting = CompressionSetting {
        algorithm: Compression::Lz4,
        zstd_level: 0,
    };

    /// Parses `off`, `on`/`lz4`, `zstd`, `zstd-N` (1..=19).
    pub fn parse(s: &str) -> Option<CompressionSetting> {
        match s {
            "off" => Some(Self::OFF),
            "on" | "lz4" => Some(Self::LZ4),
            "zstd" => Some(CompressionSetting {
                algorithm: Compression::Zstd,
                zstd_level: 3,
            }),
            _ => {
                let level: i32 = s.strip_prefix("zstd-")?.parse().ok()?;
                (1..=19).contains(&level).then_some(CompressionSetting {
                    algorithm: Compression::Zstd,
                    zstd_level: level,
                })
            }
        }
    }
}

impl Compression {
    pub fn from_u8(v: u8) -> Option<Compression> {
        Some(match v {
            0 => Compression::Off,
            1 => Compression::Lz4,
            2 => Compression::Zstd,
            _ => return None,
        })
    }
}

/// Bytes of a large block compressed first as a probe (early abort).
const PROBE_BYTES: usize = 8 << 10;
/// Blocks at least this large are probed before being compressed whole.
const PROBE_MIN_BLOCK: usize = 32 << 10;

/// Whether a quick lz4 pass over the start of a large block saves at least 1/16: if not,
/// the block is almost surely incompressible (random, already compressed) and compressing
/// it whole would be wasted work — the "early abort" OpenZFS 2.2 applies before zstd.
fn worth_compressing(data: &[u8]) -> bool {
    if data.len() < PROBE_MIN_BLOCK {
        return true;
    }
    let probe = &data[..PROBE_BYTES];
    lz4_flex::block::compress(probe).len() <= PROBE_BYTES - PROBE_BYTES / 16
}

/// Compresses `data`; returns `None` when the result would not save 1/8 (store it raw).
pub fn compress(setting: CompressionSetting, data: &[u8]) -> Option<Vec<u8>> {
    if setting.algorithm == Compression::Off || !worth_compressing(data) {
        return None;
    }
    let limit = data.len() - data.len() / 8;
    let body = match setting.algorithm {
        Compression::Off => return None,
        Compression::Lz4 => lz4_flex::block::compress(data),
        Compression::Zstd => zstd::bulk::compress(data, setting.zstd_level).ok()?,
    };
    if body.len() + 4 > limit {
        return None;
    }
    let mut out = Vec::with_capacity(body.len() + 4);
    out.extend_from_slice(&(body.len() as u32).to_le_bytes());
    out.extend_from_slice(&body);
    Some(out)
}

/// Why a stored block could not be decompressed.
#[derive(Debug, thiserror::Error)]
#[error("cannot decompress a {algorithm:?} block: {why}")]
pub struct DecompressError {
    pub algorithm: Compression,
    pub why: String,
}

/// Decompresses `data` (the first `payload` bytes are meaningful) into exactly `lsize` bytes.
/// `decompress` of a buffer the caller gives up: an uncompressed block comes back as is
/// (trimmed to `lsize`), without a copy.
pub fn decompress_owned(
    algorithm: Compression,
    mut data: Vec<u8>,
    lsize: usize,
) -> Result<Vec<u8>, DecompressError> {
    if algorithm == Compression::Off && data.len() >= lsize {
        data.truncate(lsize);
        return Ok(data);
    }
    decompress(algorithm, &data, lsize)
}

pub fn decompress(
    algorithm: Compression,
    data: &[u8],
    lsize: usize,
) -> Result<Vec<u8>, DecompressError> {
    let err = |why: String| DecompressError { algorithm, why };
    match algorithm {
        Compression::Off => {
            let mut v = data
                .get(..lsize)
                .ok_or_else(|| err("short block".into()))?
                .to_vec();
            v.resize(lsize, 0);
            Ok(v)
        }
        Compression::Lz4 => {
            let body = payload(data).ok_or_else(|| err("bad length header".into()))?;
            let mut out = vec![0u8; lsize];
            let n =
                lz4_flex::block::decompress_into(body, &mut out).map_err(|e| err(e.to_string()))?;
            if n != lsize {
                return Err(err(format!("{n} bytes instead of {lsize}")));
            }
            Ok(out)
        }
        Compression::Zstd => {
            let body = payload(data).ok_or_else(|| err("bad length header".into()))?;
            let out = zstd::bulk::decompress(body, lsize).map_err(|e| err(e.to_string()))?;
            if out.len() != lsize {
                return Err(err(format!("{} bytes instead of {lsize}", out.len())));
            }
            Ok(out)
        }
    }
}

/// The compressed bytes after the length header, if the header fits the block.
fn payload(data: &[u8]) -> Option<&[u8]> {
    let len = u32::from_le_bytes(data.get(..4)?.try_into().ok()?) as usize;
    data.get(4..4usize.checked_add(len)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_gives_up_on_noise() {
        let text: Vec<u8> = b"cairn stores blocks. "
            .iter()
            .cycle()
            .take(65536)
            .copied()
            .collect();
        for s in ["lz4", "zstd", "zstd-19"] {
            let setting = CompressionSetting::parse(s).unwrap();
            let c = compress(setting, &text).expect("text compresses");
            assert!(c.len() < text.len() / 4);
            assert_eq!(decompress(setting.algorithm, &c, text.len()).unwrap(), text);
            let mut padded = c.clone();
            padded.resize(c.len().next_multiple_of(4096), 0);
            assert_eq!(
                decompress(setting.algorithm, &padded, text.len()).unwrap(),
                text
            );
        }
        use rand::{RngCore, SeedableRng};
        let mut noise = vec![0u8; 65536];
        rand::rngs::StdRng::seed_from_u64(5).fill_bytes(&mut noise);
        assert!(compress(CompressionSetting::LZ4, &noise).is_none());
        assert!(CompressionSetting::parse("zstd-20").is_none());
        assert!(CompressionSetting::parse("gzip").is_none());
    }

    #[test]
    fn garbage_input_is_an_error_not_a_panic() {
        let junk = vec![0xffu8; 100];
        assert!(decompress(Compression::Lz4, &junk, 4096).is_err());
        assert!(decompress(Compression::Zstd, &junk, 4096).is_err());
        assert!(decompress(Compression::Off, &junk, 4096).is_err());
    }
}
