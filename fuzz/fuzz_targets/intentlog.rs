//! Intent log blocks and log heads from arbitrary bytes (read at import), as they are and
//! sealed so that the records are decoded too.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    cairn_objset::fuzz_entry::intent_log(data);
});
