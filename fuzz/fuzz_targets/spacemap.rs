//! A space map from arbitrary bytes, loaded into a two-vdev allocator: decodes or errs, and
//! what decodes can be released as a txg sync releases deferred frees.
#![no_main]
use cairn_pool::io::alloc::{decode_space_map, Allocator, VdevAllocator};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let mut alloc = Allocator::new(vec![
        VdevAllocator::new(1 << 30, 12),
        VdevAllocator::new(1 << 30, 9),
    ]);
    if let Ok(deferred) = decode_space_map(data, &mut alloc) {
        for (_, dva) in &deferred {
            alloc.free(dva);
        }
    }
});
