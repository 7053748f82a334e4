//! A dnode from arbitrary bytes: decodes (and then encodes back) or errs.
#![no_main]
use cairn_objset::dnode::{Dnode, DNODE_SIZE};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(d) = Dnode::decode(data) {
        let mut bytes = [0u8; DNODE_SIZE];
        d.encode(&mut bytes);
        assert_eq!(Dnode::decode(&bytes).expect("what decodes re-encodes"), d);
    }
});
