//! A directory from arbitrary bytes: a DIR1 list (`Directory::decode`) and the DIR2 blocks
//! (header, pointer table, leaf) decode or err; a DIR2 header or leaf that decodes
//! re-encodes to the same value.
#![no_main]
use cairn_objset::dir::Directory;
use cairn_objset::dir2::{decode_table, Header, Leaf};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = Directory::decode(data);
    if let Ok(h) = Header::decode(data) {
        assert_eq!(Header::decode(&h.encode()), Ok(h));
    }
    let next_block = 17 + data.first().map_or(1, |&b| u64::from(b));
    let _ = decode_table(data, next_block);
    // As it is, and behind a leaf's magic (so that the fuzzer reaches the entries sooner).
    let mut behind_magic = b"DLF2".to_vec();
    behind_magic.extend_from_slice(data);
    for bytes in [data, &behind_magic[..]] {
        if let Ok(leaf) = Leaf::decode(bytes) {
            assert_eq!(Leaf::decode(&leaf.encode()), Ok(leaf));
        }
    }
});
