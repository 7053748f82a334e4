//! A vdev label (config area and uberblock ring) from arbitrary bytes: decodes or errs.
#![no_main]
use cairn_vdev::label::{decode_config, decode_label, Uberblock};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = decode_label(data);
    let _ = decode_config(data);
    let _ = Uberblock::decode(data);
});
