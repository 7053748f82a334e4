//! The pool layer: lifecycle (create, import, export, destroy), configuration, health and
//! space accounting over the vdev layer. The copy-on-write object store builds on this.

pub mod block_io;
pub mod devices;
pub mod devices_in_use;
pub mod error;
pub mod events;
pub mod health;
pub mod home;
pub mod io;
pub mod iostat;
pub mod leaf_slots;
pub mod leaves;
pub mod owner;
pub mod pool;
pub mod reshape_in_use;
pub mod spare_groups_in_use;
pub mod spec;
pub mod status;
pub mod suspended_io;
pub mod suspension;
pub mod vdev_tree;

pub use error::PoolError;
pub use home::Home;
pub use leaf_slots::{LeafIdentity, LeafSlot, StaleLeaf};
pub use pool::{config_space, CreateOptions, CreateOutcome, FoundPool, Health, Pool};
