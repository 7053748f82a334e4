//! A root block (with its error log) from arbitrary bytes: decodes or errs.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    cairn_objset::root::fuzz_decode(data);
});
