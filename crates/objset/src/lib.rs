//! The copy-on-write object store (DESIGN.md §2 "objset" and the txg part of "pool").

pub mod codec;
pub mod dnode;
