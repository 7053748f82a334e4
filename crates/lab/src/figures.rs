//! A simulated disk's headline figures, measured the way a datasheet (and `cairn plan`)
//! states them: sustained sequential rate, and random 4 KiB reads and writes per second.
//! `cairn plan`'s generic disks are checked against these in its tests, so the planner and
//! the lab describe one disk.
//!
//! ```text
//!  sequential   64 MiB from the start of the disk in 1 MiB reads, one at a time
//!               (the outer zone: where datasheets measure, and where an empty pool writes)
//!  random       4 KiB at offsets uniform over the whole disk, at queue depth `queue`;
//!               reads: 2,000; writes: 6,000, counted after the first 2,000 (the write
//!               cache full and destaging: the sustained rate, not the cache's)
//! ```
//! Virtual time and a fixed seed: the same model always gives the same figures.

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::device::{Cmd, Device, Done, Op};
use crate::spec::DiskModel;

/// What a disk does, as a datasheet states it.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize)]
pub struct DiskFigures {
    /// Sustained sequential read, MB/s (10^6 B/s), outer zone.
    pub seq_mbs: f64,
    /// Random 4 KiB reads per second.
    pub rand_read_iops: f64,
    /// Random 4 KiB writes per second, sustained.
    pub rand_write_iops: f64,
}

const SEQ_BYTES: u64 = 64 << 20;
const SEQ_CMD: u64 = 1 << 20;
const RANDOM_CMD: u64 = 4096;
const READS: usize = 2_000;
const WRITES: usize = 6_000;
const WRITES_WARMUP: usize = 2_000;

/// Measures `model` on a fresh simulated device each, random I/O at queue depth `queue`.
pub fn measure(model: &DiskModel, queue: usize) -> DiskFigures {
    let seq_ms = sequential_read_ms(model.build().as_mut());
    let reads = random(model.build().as_mut(), Op::Read, READS, queue);
    let writes = random(model.build().as_mut(), Op::Write, WRITES, queue);
    let warm = writes[WRITES_WARMUP - 1];
    let last = writes[WRITES - 1];
    DiskFigures {
        seq_mbs: SEQ_BYTES as f64 / 1e6 / (seq_ms / 1000.0),
        rand_read_iops: READS as f64 / (reads[READS - 1] / 1000.0),
        rand_write_iops: (WRITES - WRITES_WARMUP) as f64 / ((last - warm) / 1000.0),
    }
}

/// Virtual ms to read `SEQ_BYTES` from offset 0 in `SEQ_CMD` commands, one at a time.
fn sequential_read_ms(dev: &mut dyn Device) -> f64 {
    let cmds = (0..SEQ_BYTES / SEQ_CMD).map(|i| Cmd {
        id: i,
        op: Op::Read,
        offset: i * SEQ_CMD,
        len: SEQ_CMD,
    });
    let times = run_at_depth(dev, cmds, 1);
    times.last().copied().unwrap_or(0.0)
}

/// Completion times (ms, in completion order) of `n` random 4 KiB `op`s at depth `queue`.
fn random(dev: &mut dyn Device, op: Op, n: usize, queue: usize) -> Vec<f64> {
    let blocks = (dev.capacity() / RANDOM_CMD).max(1);
    let mut rng = StdRng::seed_from_u64(0x05ee_df16);
    let cmds: Vec<Cmd> = (0..n as u64)
        .map(|id| Cmd {
            id,
            op,
            offset: rng.gen_range(0..blocks) * RANDOM_CMD,
            len: RANDOM_CMD,
        })
        .collect();
    run_at_depth(dev, cmds.into_iter(), queue)
}

/// Runs `cmds` keeping `queue` of them in the device; the completion times in order.
fn run_at_depth(dev: &mut dyn Device, cmds: impl Iterator<Item = Cmd>, queue: usize) -> Vec<f64> {
    let mut cmds = cmds.peekable();
    let mut now = 0.0;
    let mut done: Vec<Done> = Vec::new();
    let mut times = Vec::new();
    loop {
        while dev.outstanding() < queue.max(1) {
            match cmds.next() {
                Some(cmd) => dev.submit(now, cmd),
                None => break,
            }
        }
        // A device with nothing to do has no next event: every command has completed.
        let Some(t) = dev.next_event() else {
            break;
        };
        now = t;
        dev.advance(now, &mut done);
        times.extend(done.drain(..).map(|d| d.time));
        if cmds.peek().is_none() && dev.outstanding() == 0 {
            break;
        }
    }
    times
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{HddParams, SsdParams};

    #[test]
    fn figures_are_deterministic_and_in_the_drives_range() {
        let hdd = DiskModel::Hdd(HddParams::wd_re_4tb());
        let a = measure(&hdd, 1);
        assert_eq!(a, measure(&hdd, 1), "one model, one result");
        // hdd_model.md: ~180 MB/s outer-zone, ~80 random reads per second at qd 1.
        assert!((150.0..230.0).contains(&a.seq_mbs), "{a:?}");
        assert!((60.0..110.0).contains(&a.rand_read_iops), "{a:?}");
        let deep = measure(&hdd, 32);
        assert!(
            deep.rand_read_iops > 1.5 * a.rand_read_iops,
            "NCQ: {deep:?}"
        );
        let ssd = measure(&DiskModel::Ssd(SsdParams::sata_256gb()), 32);
        assert!(ssd.rand_read_iops > 50_000.0, "{ssd:?}");
    }
}
