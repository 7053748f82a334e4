//! Entry points for the fuzz targets (`fuzz/`, docs/bench/fuzz.md) into decoders of bytes
//! read from disk that are private to this crate. Each decodes and drops what it got:
//! only that nothing panics, overflows or allocates without bound is checked.

use crate::id_map::{decode_map, CLONE_MAGIC, RECEIVE_MAGIC};
use crate::intent_format::{LogBlock, LogHead, LOG_HEADER};

/// An intent log block (read at import, `crate::intent_log`) and a log head (the root
/// block's pointer to the chain).
/// The block is decoded as it is, then sealed (magic and checksum made to hold) so that
/// its header and records are decoded too.
pub fn intent_log(bytes: &[u8]) {
    let _ = LogBlock::decode(bytes);
    let _ = LogHead::decode(bytes);
    if bytes.len() >= LOG_HEADER {
        let mut sealed = bytes.to_vec();
        LogBlock::seal(&mut sealed);
        assert!(LogBlock::verifies(&sealed));
        let _ = LogBlock::decode(&sealed);
    }
}

/// A snapshot's dead list and dnode override list (`crate::snapshot`), the clone map and
/// the receive map (`crate::id_map`), and an object record of a send stream
/// (`crate::stream`).
pub fn object_lists(bytes: &[u8]) {
    let _ = crate::snapshot::BlockList::decode(bytes);
    let _ = crate::snapshot::DnodeList::decode(bytes);
    let _ = decode_map(bytes, CLONE_MAGIC);
    let _ = decode_map(bytes, RECEIVE_MAGIC);
    let _ = crate::stream::decode_object(bytes);
}
