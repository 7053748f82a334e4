//! The bench lab: a discrete-event, virtual-time disk simulator (a hard disk with seek
//! curve, rotation, zones, NCQ/SPTF, write cache and read-ahead; an SSD with queue-depth
//! scaling and a write cliff), mirror read policies, and the studies rerun on simulated
//! disks (`cairn bench lab raid1`).
//!
//! Time is virtual: a 60-second fio job costs a fraction of a second of CPU and the same
//! seed gives the same figures on any machine. Models and their limits: docs/bench/lab.md.

pub mod charts;
pub mod dd;
pub mod device;
pub mod figures;
pub mod fio;
pub mod hdd;
pub mod layouts;
pub mod mech;
/// The mirror read policies live in the vdev crate, so real mirrors and the lab share
/// one copy of the decision functions.
pub use cairn_vdev::readpolicy as policy;
pub mod raid1;
pub mod sim_leaf;
pub mod spec;
pub mod ssd;

pub use device::{Cmd, Device, Done, Op};
pub use hdd::{Hdd, HddParams, SectorFormat};
pub use policy::{DiskView, MirrorState, Policy};
pub use ssd::{Ssd, SsdParams};
