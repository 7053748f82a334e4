//! The on-disk codec lives in the `cairn-codec` crate (below the pool layer, so the block
//! pointer, label and space map decoders use it too); objset code keeps `crate::codec`.

pub use cairn_codec::*;
