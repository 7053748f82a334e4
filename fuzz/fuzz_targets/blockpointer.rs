//! A block pointer from arbitrary bytes: decodes (and then encodes back) or errs.
#![no_main]
use cairn_pool::io::bp::BlockPointer;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(bp) = BlockPointer::decode(data) {
        let again = BlockPointer::decode(&bp.to_bytes()).expect("what decodes re-encodes");
        assert_eq!(again, bp);
    }
});
