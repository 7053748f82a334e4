//! How blocks are written: each dataset's data properties (compression, checksum, copies)
//! resolved through inheritance, block sizes, and the fixed properties of metadata.

use std::collections::HashMap;

use cairn_pool::io::bp::BlockKind;
use cairn_pool::io::checksum::ChecksumKind;
use cairn_pool::io::compress::{Compression, CompressionSetting};
use cairn_pool::io::pipeline::WriteProps;

use crate::core::{State, StoreCore};
use crate::dataset::{parse_size, DatasetTable};

impl StoreCore {
    /// Write props of every dataset, resolved through inheritance.
    pub(crate) fn write_props(&self, st: &State) -> HashMap<u32, WriteProps> {
        st.datasets
            .datasets
            .iter()
            .map(|d| (d.id, props_of(&st.datasets, d.id)))
            .collect()
    }
}

pub(crate) fn raw_props(kind: BlockKind, copies: usize) -> WriteProps {
    WriteProps {
        compression: CompressionSetting::OFF,
        checksum: ChecksumKind::Blake3,
        copies,
        kind,
        level: 0,
    }
}

pub(crate) fn default_data_props() -> WriteProps {
    WriteProps {
        compression: CompressionSetting::LZ4,
        checksum: ChecksumKind::Fletcher4,
        copies: 1,
        kind: BlockKind::Data,
        level: 0,
    }
}

/// Data write props of a dataset from its effective properties.
pub fn props_of(table: &DatasetTable, id: u32) -> WriteProps {
    let get = |k: &str| table.property(id, k).0;
    WriteProps {
        compression: CompressionSetting::parse(&get("compression"))
            .unwrap_or(CompressionSetting::LZ4),
        checksum: ChecksumKind::from_name(&get("checksum")).unwrap_or(ChecksumKind::Blake3),
        copies: get("copies").parse().unwrap_or(1),
        kind: BlockKind::Data,
        level: 0,
    }
}

/// Effective block size property (`recordsize` / `volblocksize`) in bytes.
pub fn size_property(table: &DatasetTable, id: u32, key: &str) -> u32 {
    parse_size(&table.property(id, key).0).unwrap_or(128 << 10) as u32
}

/// Compression of metadata is lz4; exposed for tests.
pub fn metadata_compression() -> Compression {
    Compression::Lz4
}
