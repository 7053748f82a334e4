//! Reading and writing the four labels of a leaf (the format is `crate::label`).

use cairn_geometry::{label_offset, LABEL_SIZE};

use crate::error::VdevError;
use crate::label::{
    decode_label, encode_config, uberblock_slot_size, uberblock_slots, LabelConfig, LabelError,
    LeafLabels, Uberblock, CONFIG_OFFSET, UBERBLOCK_RING_OFFSET, UBERBLOCK_SIZE,
};
use crate::leaf::Leaf;

/// Reads and decodes all four labels of a leaf.
pub fn read_leaf_labels(leaf: &dyn Leaf) -> LeafLabels {
    let mut configs = Vec::with_capacity(4);
    let mut uberblocks = Vec::new();
    let mut newer_uberblock = None;
    let mut buf = vec![0u8; LABEL_SIZE as usize];
    for index in 0..4 {
        let offset = label_offset(leaf.size(), index);
        if let Err(e) = leaf.read_at(&mut buf, offset) {
            configs.push(Err(LabelError::BadConfig(format!("read failed: {e}"))));
            continue;
        }
        let label = decode_label(&buf);
        configs.push(label.config);
        uberblocks.extend(label.uberblocks.into_iter().map(|u| (index, u)));
        newer_uberblock = newer_uberblock.or(label.newer_uberblock);
    }
    LeafLabels {
        configs,
        uberblocks,
        newer_uberblock,
    }
}

/// Writes the config into all four labels (even labels first, then odd, so a torn update
/// leaves two good copies), keeping each label's uberblock ring.
pub fn write_leaf_config(leaf: &dyn Leaf, cfg: &LabelConfig) -> Result<(), VdevError> {
    let region = encode_config(cfg).map_err(|source| VdevError::Label {
        path: leaf.path().to_string(),
        source,
    })?;
    let mut head = vec![0u8; CONFIG_OFFSET];
    head.extend_from_slice(&region);
    for index in [0, 2, 1, 3] {
        let offset = label_offset(leaf.size(), index);
        leaf.write_at(&head, offset)
            .map_err(|e| VdevError::io(leaf.path(), e))?;
    }
    Ok(())
}

/// Writes an uberblock into its slot (`txg` mod slots) of every label of a leaf.
pub fn write_leaf_uberblock(leaf: &dyn Leaf, ub: &Uberblock, ashift: u32) -> Result<(), VdevError> {
    let slot_size = uberblock_slot_size(ashift);
    let slot = (ub.txg % uberblock_slots(ashift) as u64) as usize;
    let mut buf = vec![0u8; slot_size];
    buf[..UBERBLOCK_SIZE].copy_from_slice(&ub.encode());
    for index in [0, 2, 1, 3] {
        let offset = label_offset(leaf.size(), index)
            + UBERBLOCK_RING_OFFSET as u64
            + (slot * slot_size) as u64;
        leaf.write_at(&buf, offset)
            .map_err(|e| VdevError::io(leaf.path(), e))?;
    }
    Ok(())
}

/// Wipes all four labels (used by `destroy -f`-like paths and tests).
pub fn clear_leaf_labels(leaf: &dyn Leaf) -> Result<(), VdevError> {
    let zeros = vec![0u8; LABEL_SIZE as usize];
    for index in 0..4 {
        leaf.write_at(&zeros, label_offset(leaf.size(), index))
            .map_err(|e| VdevError::io(leaf.path(), e))?;
    }
    Ok(())
}
