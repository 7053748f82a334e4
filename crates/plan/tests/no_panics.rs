//! Arbitrary user input gives errors, never panics.

use cairn_plan::disks::{parse_disk_spec, DiskKind};
use cairn_plan::enumerate::parse_layout;
use cairn_plan::parse::{parse_block_size, parse_fraction, parse_rate_mbs, parse_size};
use proptest::prelude::*;

proptest! {
    #[test]
    fn parsers_never_panic(text in "\\PC{0,24}") {
        let _ = parse_size(&text);
        let _ = parse_block_size(&text);
        let _ = parse_rate_mbs(&text);
        let _ = parse_fraction(&text);
        let _ = parse_disk_spec(&text, DiskKind::Hdd);
        let _ = parse_layout(&text);
    }

    #[test]
    fn size_like_input_never_panics(count in 0u32..5000, value in 0.0f64..1e25, unit in "(B|KB|GB|TB|PB|TiB|GiB|PiB|x)?") {
        let _ = parse_disk_spec(&format!("{count}x{value}{unit}"), DiskKind::Ssd);
        let _ = parse_size(&format!("{value}{unit}"));
    }
}
