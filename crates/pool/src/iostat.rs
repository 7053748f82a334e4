//! A pool's I/O statistics as `cairn iostat` shows them: per top-level vdev and leaf,
//! operations, bytes, time in the device and latency histograms since import.
//!
//! The counts live in each leaf (`cairn_vdev::iostat`); a snapshot (`PoolIo`) is kept in
//! the pool record at every `save_record`, so the next process that opens the pool goes on
//! counting from there, and `cairn iostat` can read it without opening the pool while
//! another process holds it. A serving process answers with a live snapshot instead.

use cairn_vdev::iostat::IoCounts;
use serde::{Deserialize, Serialize};

use cairn_geometry::{metaslab_layout, ZfsEra};
use cairn_vdev::top::TopVdev;

/// One leaf's I/O since import.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct LeafIo {
    pub guid: u64,
    pub path: String,
    pub io: IoCounts,
}

/// One top-level vdev: its space and its leaves.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct TopIo {
    /// `mirror-0`, `raidz2-1`, or the leaf's path for a single-disk vdev.
    pub name: String,
    /// Raw bytes allocated, and in all: the vdev's metaslabs (what can be allocated, as
    /// zpool counts a vdev's space and `list` SIZE sums it).
    pub alloc: u64,
    pub size: u64,
    pub leaves: Vec<LeafIo>,
}

/// A pool's I/O since import, at one moment.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct PoolIo {
    pub pool: String,
    /// When the pool was imported (or created) here, seconds since the Unix epoch.
    pub imported_at: u64,
    /// When this snapshot was taken, nanoseconds since the Unix epoch.
    pub taken_at_ns: u64,
    pub tops: Vec<TopIo>,
}

impl PoolIo {
    /// The pool's row: its tops' space and every leaf's counts added.
    pub fn total(&self) -> (u64, u64, IoCounts) {
        let alloc = self.tops.iter().map(|t| t.alloc).sum();
        let size = self.tops.iter().map(|t| t.size).sum();
        let io = self
            .tops
            .iter()
            .fold(IoCounts::default(), |acc, t| &acc + &t.total());
        (alloc, size, io)
    }

    /// The leaf counts of this snapshot by GUID (to go on counting from them).
    pub fn leaf_counts(&self, guid: u64) -> Option<&IoCounts> {
        self.tops
            .iter()
            .flat_map(|t| t.leaves.iter())
            .find(|l| l.guid == guid)
            .map(|l| &l.io)
    }
}

impl TopIo {
    pub fn total(&self) -> IoCounts {
        self.leaves
            .iter()
            .fold(IoCounts::default(), |acc, l| &acc + &l.io)
    }
}

impl TopIo {
    /// The I/O of `top` since import, now; `alloc` is its allocated bytes.
    pub fn of(top: &TopVdev, alloc: u64) -> TopIo {
        TopIo {
            name: cairn_vdev::config::top_display_name(top.shape(), top.config.id).unwrap_or_else(
                || {
                    top.children
                        .first()
                        .map(|c| c.path.clone())
                        .unwrap_or_default()
                },
            ),
            alloc,
            size: metaslab_layout(top.config.asize, ZfsEra::Cairn).total_bytes(),
            leaves: top
                .children
                .iter()
                .map(|c| LeafIo {
                    guid: c.guid,
                    path: c.path.clone(),
                    io: c.io_counts(),
                })
                .collect(),
        }
    }
}
