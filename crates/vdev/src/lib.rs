//! The vdev layer: leaf devices, labels, and top-level vdevs (disk, mirror, raidz) with
//! block I/O that generates parity, reads only data columns, and rebuilds around failures.
//!
//! Layering (docs/design.md): the pool crate builds a `TopVdev` per top-level vdev from the
//! config in the labels and calls `write_block` / `read_block`; this crate calls the
//! `cairn-parity` kernels and the `cairn-geometry` map, and nothing above it.

pub mod batch;
pub mod class_stats;
pub mod config;
pub mod dtl;
pub mod error;
pub mod fault;
pub mod io_class;
pub mod iostat;
pub mod label;
pub mod label_io;
pub mod latency_hist;
pub mod leaf;
pub mod metered;
pub mod readpolicy;
pub mod rebuild;
pub mod scan;
pub mod threads;
pub mod top;

pub use config::{
    FailMode, LeafConfig, Owner, PoolConfig, PoolProps, PropError, ResilverCheckpoint,
    ResilverTarget, SpareConfig, TopConfig, DTL_EVERYTHING,
};
pub use error::VdevError;
pub use fault::{CrashLeaf, FaultLeaf, FaultSwitches, PowerCut};
pub use label::{LabelConfig, LabelError, PoolState, Uberblock};
pub use leaf::{FileLeaf, Leaf, LeafOptions};
pub use readpolicy::Policy as ReadPolicy;
pub use top::{Child, IoReport, Slot, TopVdev};

/// A new random 64-bit GUID (never 0).
pub fn new_guid() -> u64 {
    loop {
        let g: u64 = rand::random();
        if g != 0 {
            return g;
        }
    }
}
