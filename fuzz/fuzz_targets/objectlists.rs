//! Objects read whole from disk besides tables and directories: an object's xattrs, a
//! snapshot's dead list and dnode override list, an indirect block, the clone and receive
//! maps, and a send stream's object record.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = cairn_objset::xattr::decode(data);
    let _ = cairn_objset::object::decode_indirect(data);
    cairn_objset::fuzz_entry::object_lists(data);
});
