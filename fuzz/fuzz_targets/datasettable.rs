//! A dataset table (with its pool section) from arbitrary bytes: decodes or errs, and what
//! decodes answers property and space questions.
#![no_main]
use cairn_objset::DatasetTable;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(t) = DatasetTable::decode(data) {
        for d in &t.datasets {
            let _ = t.property(d.id, "compression");
            let _ = t.used_total(d.id);
            let _ = t.bytes_total(d.id);
        }
        assert_eq!(DatasetTable::decode(&t.encode()).expect("re-encodes"), t);
    }
});
