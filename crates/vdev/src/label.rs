//! Vdev labels: four copies per leaf of the pool's configuration and an uberblock ring.
//!
//! ```text
//!  leaf:  | L0 256K | L1 256K | reserved 3.5M | data area ........... | L2 256K | L3 256K |
//!         0        256K      512K            4M              (aligned size − 512K)
//!
//!  one label (256 KiB):
//!  +---------------+-------------------------------+------------------------------------+
//!  | blank 16 KiB  | config 112 KiB                | uberblock ring 128 KiB             |
//!  |               | header(64 B) + JSON payload   | slots of max(1 KiB, 2^ashift) ≤ 8K |
//!  +---------------+-------------------------------+------------------------------------+
//!  config header: magic "CAIRNCFG" | version u32 | payload length u32 | blake3(payload) 32 B | 16 B zero
//! ```
//! All integers are little-endian. Every decoder reads through `cairn_codec::Reader`, checks
//! magic, version, bounds and checksum and returns a `LabelError` (byte-level damage as its
//! `Decode` variant: what, at which byte); nothing read from a disk can make it panic. Reading and
//! writing the labels of a leaf is `crate::label_io`; this module is the format alone.

use cairn_codec::{DecodeError, Reader};
use serde::{Deserialize, Serialize};

use crate::config::PoolConfig;
pub use crate::config::PoolState;

pub use cairn_geometry::LABEL_SIZE;

/// Offset of the config region inside a label.
pub const CONFIG_OFFSET: usize = 16 << 10;
/// Size of the config region (header + payload).
pub const CONFIG_SIZE: usize = 112 << 10;
/// Offset of the uberblock ring inside a label.
pub const UBERBLOCK_RING_OFFSET: usize = 128 << 10;
/// Size of the uberblock ring.
pub const UBERBLOCK_RING_SIZE: usize = 128 << 10;

const CONFIG_MAGIC: &[u8; 8] = b"CAIRNCFG";
const CONFIG_HEADER_SIZE: usize = 64;
/// The newest label config version this cairn reads. It writes the lowest version that
/// holds the config (`PoolConfig::format_version`): 2 only for a pool with a hole vdev.
pub const CONFIG_VERSION: u32 = 2;

/// What can be wrong with a label or uberblock read from disk.
#[derive(Clone, Debug, thiserror::Error, PartialEq, Eq)]
pub enum LabelError {
    #[error("no cairn label (bad magic); the device is not part of a cairn pool")]
    BadMagic,
    #[error("{what} version {version} is newer than this cairn understands (it reads {known}); upgrade cairn")]
    UnsupportedVersion {
        what: &'static str,
        version: u32,
        known: u32,
    },
    #[error("label checksum mismatch (the label is damaged)")]
    BadChecksum,
    #[error("label config is not valid: {0}")]
    BadConfig(String),
    /// Byte-level damage: which structure, at which byte, why.
    #[error(transparent)]
    Decode(#[from] DecodeError),
    #[error("config too large for the label ({0} bytes; at most {max})", max = CONFIG_SIZE - CONFIG_HEADER_SIZE)]
    TooLarge(usize),
}

impl LabelError {
    /// Whether the label was written by a newer cairn (not damage: "upgrade cairn").
    pub fn is_newer_version(&self) -> bool {
        match self {
            LabelError::UnsupportedVersion { .. } => true,
            LabelError::Decode(e) => e.is_newer_version(),
            _ => false,
        }
    }
}

/// Reads a version field at the reader's position: newer than `known` is
/// `UnsupportedVersion`, 0 is damage.
fn read_version(r: &mut Reader, what: &'static str, known: u32) -> Result<u32, LabelError> {
    let at = r.position();
    let version = r.u32()?;
    if version > known {
        return Err(LabelError::UnsupportedVersion {
            what,
            version,
            known,
        });
    }
    if version == 0 {
        return Err(DecodeError::bad_value(what, at, "version 0").into());
    }
    Ok(version)
}

/// The config stored in every label of a leaf: the pool's whole tree plus who this leaf is.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LabelConfig {
    pub pool: PoolConfig,
    /// GUID of the leaf holding this label.
    pub leaf_guid: u64,
    /// GUID of the top-level vdev that leaf belongs to.
    pub top_guid: u64,
}

/// Encodes a config into a buffer of exactly `CONFIG_SIZE` bytes.
pub fn encode_config(cfg: &LabelConfig) -> Result<Vec<u8>, LabelError> {
    let payload = serde_json::to_vec(cfg).map_err(|e| LabelError::BadConfig(e.to_string()))?;
    if payload.len() > CONFIG_SIZE - CONFIG_HEADER_SIZE {
        return Err(LabelError::TooLarge(payload.len()));
    }
    let mut buf = vec![0u8; CONFIG_SIZE];
    buf[0..8].copy_from_slice(CONFIG_MAGIC);
    buf[8..12].copy_from_slice(&cfg.pool.format_version().to_le_bytes());
    buf[12..16].copy_from_slice(&(payload.len() as u32).to_le_bytes());
    buf[16..48].copy_from_slice(blake3::hash(&payload).as_bytes());
    buf[CONFIG_HEADER_SIZE..CONFIG_HEADER_SIZE + payload.len()].copy_from_slice(&payload);
    Ok(buf)
}

/// Decodes the config region of a label.
pub fn decode_config(buf: &[u8]) -> Result<LabelConfig, LabelError> {
    const WHAT: &str = "label config";
    let mut r = Reader::new(buf, WHAT);
    if r.fixed(CONFIG_MAGIC.len())? != CONFIG_MAGIC {
        return Err(LabelError::BadMagic);
    }
    read_version(&mut r, WHAT, CONFIG_VERSION)?;
    let len_at = r.position();
    let len = r.u32()? as usize;
    let sum = r.fixed(32)?;
    let _zero = r.fixed(CONFIG_HEADER_SIZE - r.position())?;
    if len > CONFIG_SIZE - CONFIG_HEADER_SIZE {
        return Err(DecodeError::bad_value(
            WHAT,
            len_at,
            format!("payload length {len} exceeds the config area"),
        )
        .into());
    }
    let payload = r.fixed(len)?;
    if blake3::hash(payload).as_bytes() != sum {
        return Err(LabelError::BadChecksum);
    }
    let cfg: LabelConfig =
        serde_json::from_slice(payload).map_err(|e| LabelError::BadConfig(e.to_string()))?;
    cfg.pool.validate().map_err(LabelError::BadConfig)?;
    Ok(cfg)
}

/// Size of one uberblock slot for a vdev of the given ashift (ZFS: max(1 KiB, 2^ashift), ≤ 8 KiB).
pub fn uberblock_slot_size(ashift: u32) -> usize {
    1usize << ashift.clamp(10, 13)
}

/// Number of uberblock slots in a label's ring.
pub fn uberblock_slots(ashift: u32) -> usize {
    UBERBLOCK_RING_SIZE / uberblock_slot_size(ashift)
}

const UBERBLOCK_MAGIC: u64 = 0x0063_6169_726e_7562; // "cairnub" (+ 0)
/// Current version of the uberblock encoding.
pub const UBERBLOCK_VERSION: u32 = 1;
/// Bytes reserved for the root block pointer (the object store fills it).
pub const ROOT_POINTER_SIZE: usize = 256;
/// Encoded uberblock size: header 48 B + root pointer + 32 B checksum.
pub const UBERBLOCK_SIZE: usize = 48 + ROOT_POINTER_SIZE + 32;

/// The root of the pool at one txg. The newest one whose tree verifies is the pool's state.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Uberblock {
    pub txg: u64,
    /// Sum of all leaf GUIDs: detects a label from another tree.
    pub guid_sum: u64,
    /// Seconds since the Unix epoch.
    pub timestamp: u64,
    /// Encoded root block pointer (all zero: empty pool).
    pub root: [u8; ROOT_POINTER_SIZE],
}

impl Uberblock {
    pub fn encode(&self) -> [u8; UBERBLOCK_SIZE] {
        let mut b = [0u8; UBERBLOCK_SIZE];
        b[0..8].copy_from_slice(&UBERBLOCK_MAGIC.to_le_bytes());
        b[8..12].copy_from_slice(&UBERBLOCK_VERSION.to_le_bytes());
        b[16..24].copy_from_slice(&self.txg.to_le_bytes());
        b[24..32].copy_from_slice(&self.guid_sum.to_le_bytes());
        b[32..40].copy_from_slice(&self.timestamp.to_le_bytes());
        b[48..48 + ROOT_POINTER_SIZE].copy_from_slice(&self.root);
        seal_uberblock(&mut b);
        b
    }

    /// Decodes a slot; `Ok(None)` for an empty (never written) slot.
    pub fn decode(buf: &[u8]) -> Result<Option<Uberblock>, LabelError> {
        const WHAT: &str = "uberblock";
        if buf.len() < UBERBLOCK_SIZE {
            return Err(DecodeError::truncated(
                WHAT,
                buf.len(),
                format!("{} bytes of {UBERBLOCK_SIZE}", buf.len()),
            )
            .into());
        }
        let b = &buf[..UBERBLOCK_SIZE];
        if b.iter().all(|&x| x == 0) {
            return Ok(None);
        }
        let mut r = Reader::new(b, WHAT);
        if r.u64()? != UBERBLOCK_MAGIC {
            return Err(LabelError::BadMagic);
        }
        // The checksum first: every version keeps magic, version and this trailer in place
        // (docs/format.md), so a version only counts once the bytes are known whole — a
        // damaged version field is damage, a verified higher one is a newer cairn.
        if blake3::hash(&b[..UBERBLOCK_SIZE - 32]).as_bytes() != &b[UBERBLOCK_SIZE - 32..] {
            return Err(LabelError::BadChecksum);
        }
        read_version(&mut r, WHAT, UBERBLOCK_VERSION)?;
        let _zero = r.u32()?;
        let (txg, guid_sum, timestamp) = (r.u64()?, r.u64()?, r.u64()?);
        let _zero = r.u64()?;
        let mut root = [0u8; ROOT_POINTER_SIZE];
        root.copy_from_slice(r.fixed(ROOT_POINTER_SIZE)?);
        Ok(Some(Uberblock {
            txg,
            guid_sum,
            timestamp,
            root,
        }))
    }
}

/// Writes the checksum trailer of an encoded uberblock (blake3 of bytes 0..304 at 304;
/// every version keeps it there).
pub fn seal_uberblock(b: &mut [u8; UBERBLOCK_SIZE]) {
    let sum = blake3::hash(&b[..UBERBLOCK_SIZE - 32]);
    b[UBERBLOCK_SIZE - 32..].copy_from_slice(sum.as_bytes());
}

/// Everything found in the four labels of one leaf.
#[derive(Clone, Debug)]
pub struct LeafLabels {
    /// Decoded config of each label (index 0..4), or why it could not be read.
    pub configs: Vec<Result<LabelConfig, LabelError>>,
    /// Every valid uberblock found in any label's ring, with the label index.
    pub uberblocks: Vec<(usize, Uberblock)>,
    /// Why an uberblock whose checksum verifies could not be read because a newer cairn
    /// wrote it (the first one found), if any.
    pub newer_uberblock: Option<LabelError>,
}

impl LeafLabels {
    /// The valid config with the highest txg.
    pub fn best_config(&self) -> Option<&LabelConfig> {
        self.configs
            .iter()
            .filter_map(|c| c.as_ref().ok())
            .max_by_key(|c| c.pool.txg)
    }
    /// The newest valid uberblock.
    pub fn best_uberblock(&self) -> Option<&Uberblock> {
        self.uberblocks.iter().map(|(_, u)| u).max_by_key(|u| u.txg)
    }
    /// Why no label could be read (the first label's error), for messages.
    pub fn first_error(&self) -> Option<&LabelError> {
        self.configs.iter().find_map(|c| c.as_ref().err())
    }

    /// Why a newer cairn has written to this leaf: a verified uberblock of a newer
    /// version, or a label config of a newer version where no label decodes (a newer
    /// config beside older ones that decode is a torn update; the older ones are read).
    /// Such a leaf must not be opened at an older txg nor written over unasked.
    pub fn written_by_newer_cairn(&self) -> Option<&LabelError> {
        if let Some(e) = &self.newer_uberblock {
            return Some(e);
        }
        if self.best_config().is_some() {
            return None;
        }
        self.configs
            .iter()
            .filter_map(|c| c.as_ref().err())
            .find(|e| e.is_newer_version())
    }
}

/// One label decoded: its config, the uberblocks of its ring, and the first ring slot that
/// a newer cairn wrote (checksum verified, version above ours).
#[derive(Clone, Debug)]
pub struct DecodedLabel {
    pub config: Result<LabelConfig, LabelError>,
    pub uberblocks: Vec<Uberblock>,
    pub newer_uberblock: Option<LabelError>,
}

/// Decodes one whole label (256 KiB) read from disk. Uberblock slots are multiples of
/// 1 KiB whatever the ashift, so the ring is scanned at 1 KiB steps.
pub fn decode_label(buf: &[u8]) -> DecodedLabel {
    let mut out = DecodedLabel {
        config: Err(
            DecodeError::truncated("label", buf.len(), format!("{} bytes", buf.len())).into(),
        ),
        uberblocks: Vec::new(),
        newer_uberblock: None,
    };
    if buf.len() < LABEL_SIZE as usize {
        return out;
    }
    out.config = decode_config(&buf[CONFIG_OFFSET..CONFIG_OFFSET + CONFIG_SIZE]);
    let ring = &buf[UBERBLOCK_RING_OFFSET..UBERBLOCK_RING_OFFSET + UBERBLOCK_RING_SIZE];
    for slot in ring.chunks_exact(1 << 10) {
        match Uberblock::decode(slot) {
            Ok(Some(ub)) => out.uberblocks.push(ub),
            Ok(None) => {}
            Err(e) if e.is_newer_version() => {
                out.newer_uberblock.get_or_insert(e);
            }
            // Damage: the other slots and labels hold the other txgs.
            Err(_) => {}
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uberblock_round_trip_and_rejects_damage() {
        let ub = Uberblock {
            txg: 42,
            guid_sum: 7,
            timestamp: 1_700_000_000,
            root: [3u8; ROOT_POINTER_SIZE],
        };
        let enc = ub.encode();
        assert_eq!(Uberblock::decode(&enc).unwrap(), Some(ub));
        let mut bad = enc;
        bad[20] ^= 1;
        assert_eq!(Uberblock::decode(&bad), Err(LabelError::BadChecksum));
        assert_eq!(Uberblock::decode(&[0u8; UBERBLOCK_SIZE]), Ok(None));
        let e = Uberblock::decode(&[1u8; 10]).unwrap_err();
        assert_eq!(e.to_string(), "corrupt uberblock: 10 bytes of 336");
        assert!(matches!(e, LabelError::Decode(ref d) if d.offset == 10));
    }

    #[test]
    fn newer_versions_ask_for_an_upgrade_and_version_0_is_damage() {
        let ub = Uberblock {
            txg: 1,
            guid_sum: 2,
            timestamp: 3,
            root: [0u8; ROOT_POINTER_SIZE],
        };
        let mut b = ub.encode();
        b[8] = UBERBLOCK_VERSION as u8 + 1;
        seal_uberblock(&mut b);
        let e = Uberblock::decode(&b).unwrap_err();
        assert!(e.is_newer_version(), "{e}");
        assert!(e.to_string().contains("upgrade cairn"), "{e}");
        // A higher version whose checksum does not verify is damage, not a newer cairn.
        let mut torn = b;
        torn[100] ^= 1;
        assert_eq!(Uberblock::decode(&torn), Err(LabelError::BadChecksum));
        b[8] = 0;
        seal_uberblock(&mut b);
        let e = Uberblock::decode(&b).unwrap_err();
        assert!(!e.is_newer_version());
        assert_eq!(e.to_string(), "corrupt uberblock: version 0");
        let mut c = vec![0u8; CONFIG_SIZE];
        c[0..8].copy_from_slice(CONFIG_MAGIC);
        c[8..12].copy_from_slice(&(CONFIG_VERSION + 1).to_le_bytes());
        let e = decode_config(&c).unwrap_err();
        assert!(e.is_newer_version(), "{e}");
        assert_eq!(
            e.to_string(),
            "label config version 3 is newer than this cairn understands (it reads 2); upgrade cairn"
        );
    }

    #[test]
    fn config_decoder_rejects_garbage() {
        assert_eq!(
            decode_config(&[0u8; 100]).unwrap_err(),
            LabelError::BadMagic
        );
        let mut b = vec![0u8; CONFIG_SIZE];
        b[0..8].copy_from_slice(CONFIG_MAGIC);
        b[8..12].copy_from_slice(&CONFIG_VERSION.to_le_bytes());
        b[12..16].copy_from_slice(&u32::MAX.to_le_bytes());
        let e = decode_config(&b).unwrap_err();
        assert!(
            matches!(e, LabelError::Decode(ref d) if d.offset == 12),
            "{e}"
        );
        assert!(e
            .to_string()
            .starts_with("corrupt label config: payload length"));
        b[12..16].copy_from_slice(&4u32.to_le_bytes());
        assert_eq!(decode_config(&b).unwrap_err(), LabelError::BadChecksum);
    }

    proptest::proptest! {
        #[test]
        fn decoders_never_panic(data in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..600)) {
            let _ = decode_config(&data);
            let _ = Uberblock::decode(&data);
            let mut with_magic = CONFIG_MAGIC.to_vec();
            with_magic.extend_from_slice(&data);
            let _ = decode_config(&with_magic);
        }
    }
}

#[cfg(test)]
mod hole_tests {
    use super::*;
    use crate::config::{LeafConfig, PoolConfig, TopConfig};
    use cairn_geometry::VdevShape;

    fn config_with(vdevs: Vec<TopConfig>) -> LabelConfig {
        LabelConfig {
            pool: PoolConfig::new("tank", 1, 5, None, vdevs, Default::default()),
            leaf_guid: 11,
            top_guid: 10,
        }
    }

    fn disk(id: u32, guid: u64) -> TopConfig {
        TopConfig {
            id,
            guid,
            shape: VdevShape::Disk,
            ashift: 12,
            asize: 1 << 30,
            leaves: vec![LeafConfig::new(guid + 1, format!("/d{id}"), 1 << 30)],
            log: false,
            hole: false,
        }
    }

    /// A config with a hole is version 2 (a version-1 reader refuses it with "upgrade
    /// cairn" instead of taking the hole for a log device without leaves); one without
    /// stays version 1, readable by older releases. A hole with leaves or space is damage.
    #[test]
    fn a_hole_raises_the_config_version_and_round_trips() {
        let plain = config_with(vec![disk(0, 10)]);
        let enc = encode_config(&plain).unwrap();
        assert_eq!(enc[8..12], 1u32.to_le_bytes());
        assert_eq!(decode_config(&enc).unwrap(), plain);
        let holed = config_with(vec![disk(0, 10), TopConfig::hole(1, 12), disk(2, 20)]);
        let enc = encode_config(&holed).unwrap();
        assert_eq!(enc[8..12], 2u32.to_le_bytes());
        assert_eq!(decode_config(&enc).unwrap(), holed);
        let mut bad = holed.clone();
        bad.pool.vdevs[1]
            .leaves
            .push(LeafConfig::new(7, "/x".into(), 1 << 30));
        let e = decode_config(&encode_config(&bad).unwrap()).unwrap_err();
        assert!(e.to_string().contains("a hole with leaves or space"), "{e}");
        let mut bad = holed;
        bad.pool.vdevs[1].asize = 1 << 20;
        assert!(decode_config(&encode_config(&bad).unwrap()).is_err());
        let only_holes = config_with(vec![TopConfig::hole(0, 12)]);
        let e = decode_config(&encode_config(&only_holes).unwrap()).unwrap_err();
        assert!(e.to_string().contains("no data vdevs"), "{e}");
    }
}
