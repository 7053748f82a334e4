//! The copy-on-write object store (docs/design.md, and the txg sync of "pool").
//!
//! A pool holds objects (files, directories, volumes, tables), each a tree of checksummed
//! blocks under a dnode; dnodes live in the object table, whose root is in the root block
//! that each txg's uberblock points to. Nothing live is ever overwritten.

pub mod autosnap;
pub(crate) mod block_sets;
pub mod calendar;
pub mod clone;
pub(crate) mod clone_send;
pub mod codec;
pub mod config;
pub mod core;
pub mod dataset;
pub mod diff;
pub mod dir;
pub mod dir2;
pub(crate) mod dir_ops;
pub(crate) mod dircache;
pub mod dnode;
pub mod error;
pub mod fs;
pub mod fuzz_entry;
pub mod history;
pub(crate) mod id_map;
pub(crate) mod intent_format;
pub mod intent_log;
pub(crate) mod intent_names;
pub mod intent_state;
pub mod object;
pub mod object_io;
pub mod posix;
pub(crate) mod prefetch;
pub mod promote;
pub mod property_values;
pub mod props;
pub mod quota;
pub mod read_latency;
pub(crate) mod readahead;
pub mod receive;
pub(crate) mod receive_clone;
pub mod rename;
pub mod resilver;
mod rollback_moved;
pub mod root;
pub mod scan_state;
pub mod scrub;
pub mod send;
pub mod snapshot;
pub mod snapshot_ops;
pub mod snapshot_read;
pub mod space;
pub mod store;
pub mod stream;
pub mod txg;
pub(crate) mod unlinked;
pub mod vdev_changes;
pub mod walk;
pub mod writer;
pub mod xattr;

pub use config::StoreConfig;
pub use core::StoreCore;
pub use dataset::{DatasetKind, DatasetTable};
pub use error::StoreError;
pub use fs::{DatasetInfo, ErrorLog, ListEntry, Resolved};
pub use intent_log::ReplayReport;
pub use intent_state::SyncPolicy;
pub use space::PoolUsage;
pub use store::{read_error_log, Store};
