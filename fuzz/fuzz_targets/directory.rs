//! A directory from arbitrary bytes: decodes or errs.
#![no_main]
use cairn_objset::dir::Directory;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = Directory::decode(data);
});
