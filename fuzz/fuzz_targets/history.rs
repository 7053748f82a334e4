//! The pool history object and the events file from arbitrary bytes: parse what parses,
//! skip the rest.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = cairn_objset::history::parse_records(data);
    if let Ok(text) = std::str::from_utf8(data) {
        let _ = cairn_pool::events::parse(text);
    }
});
