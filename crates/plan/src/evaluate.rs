//! Everything the planner reports about one layout, and the Pareto front.

use crate::disks::Disk;
use crate::enumerate::{Layout, LayoutKind};
use crate::perf::{pool_perf, Perf};
use crate::reliability::{
    group_loss_rate, mtbf_hours_from_afr, p_loss_within, p_unrecoverable_read, HOURS_PER_YEAR,
};
use cairn_geometry::{
    format_df_size, format_zfs_size, leaf_asize, pool_space, PoolSpace, VdevSpaceInput, ZfsEra,
};

/// Settings shared by every layout of one run.
#[derive(Clone, Debug)]
pub struct PlanContext {
    /// Every disk given, largest first.
    pub disks: Vec<Disk>,
    pub ashift: u32,
    pub recordsize: u64,
    pub era: ZfsEra,
    pub years: f64,
    /// Resilver speed, MB/s.
    pub rebuild_mbs: f64,
    /// Hours until a failed disk is replaced when there is no hot spare.
    pub replace_hours: f64,
    /// Fraction of the pool that is allocated (what a resilver has to copy and read).
    pub fill: f64,
}

impl PlanContext {
    /// The disk figures used for speed and risk: the largest size, the slowest speed and
    /// the worst AFR and BER among the disks given (identical disks: that disk).
    pub fn reference_disk(&self) -> Disk {
        let mut reference = self.disks[0].clone();
        for disk in &self.disks[1..] {
            reference.bytes = reference.bytes.max(disk.bytes);
            reference.seq_mbs = reference.seq_mbs.min(disk.seq_mbs);
            reference.rand_read_iops = reference.rand_read_iops.min(disk.rand_read_iops);
            reference.rand_write_iops = reference.rand_write_iops.min(disk.rand_write_iops);
            reference.afr = reference.afr.max(disk.afr);
            reference.ber = reference.ber.max(disk.ber);
        }
        reference
    }
}

/// One row of the plan.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Evaluation {
    pub layout: String,
    pub zpool: String,
    pub kind: LayoutKind,
    pub groups: usize,
    pub width: usize,
    pub spares: usize,
    pub disks_used: usize,
    /// `zfs list` AVAIL of the empty pool.
    pub avail_bytes: u64,
    /// `zpool list` SIZE.
    pub size_bytes: u64,
    pub dspace_bytes: u64,
    pub slop_bytes: u64,
    /// Sum of the raw sizes of all disks given, spares included.
    pub raw_bytes: u64,
    pub avail_zfs: String,
    pub avail_df: String,
    pub size_zfs: String,
    /// AVAIL / raw bytes of all disks.
    pub efficiency: f64,
    /// Parity (or extra copies) as a fraction of the space a `recordsize` block allocates.
    pub parity_overhead: f64,
    /// RAID-Z padding (skip sectors) as a fraction of the same.
    pub padding_overhead: f64,
    /// Disks that can fail in any combination without data loss.
    pub tolerates_min: usize,
    /// Disks that can fail, at best (each group losing as many as it tolerates).
    pub tolerates_max: usize,
    pub mttdl_hours: f64,
    /// Probability of losing data within `years`.
    pub p_loss: f64,
    /// Time to resilver one disk.
    pub rebuild_hours: f64,
    pub seq_read_mbs: f64,
    pub seq_write_mbs: f64,
    pub rand_read_iops: f64,
    pub rand_write_iops: f64,
    /// Geometric mean of the four speed figures relative to one disk.
    pub perf_score: f64,
    /// Not beaten on capacity, speed and integrity at once by another layout.
    pub pareto: bool,
}

/// Capacity of `layout` over `context.disks` — only through `cairn_geometry::pool_space`,
/// so `cairn create -n` and `cairn list` print the same bytes.
pub fn layout_space(layout: &Layout, context: &PlanContext) -> PoolSpace {
    pool_space(
        &vdev_inputs(layout, &context.disks, context.ashift),
        context.era,
    )
}

/// Top-level vdevs of `layout` over `disks` (largest first): the spares take the largest
/// disks (a spare must be able to replace any disk), then each vdev takes the next
/// `width` disks and is sized by its smallest.
pub fn vdev_inputs(layout: &Layout, disks: &[Disk], ashift: u32) -> Vec<VdevSpaceInput> {
    let shape = layout.shape();
    disks[layout.spares.min(disks.len())..]
        .chunks(layout.width)
        .take(layout.groups)
        .map(|group| VdevSpaceInput {
            shape,
            min_leaf_asize: group.iter().map(|d| leaf_asize(d.bytes)).min().unwrap_or(0),
            ashift,
        })
        .collect()
}

/// (parity, padding) as fractions of what one `recordsize` block allocates.
fn block_overheads(layout: &Layout, recordsize: u64, ashift: u32) -> (f64, f64) {
    let shape = layout.shape();
    let sector = 1u64 << ashift;
    let data = recordsize.div_ceil(sector) * sector;
    match layout.kind {
        LayoutKind::Stripe => (0.0, 0.0),
        LayoutKind::Mirror => ((layout.width - 1) as f64 / layout.width as f64, 0.0),
        _ => {
            let asize = shape.block_asize(recordsize, ashift);
            let data_columns = shape.data_disks() as u64;
            let parity =
                shape.redundancy() as u64 * (data / sector).div_ceil(data_columns) * sector;
            let padding = asize - data - parity;
            (parity as f64 / asize as f64, padding as f64 / asize as f64)
        }
    }
}

/// Evaluates one layout.
pub fn evaluate(layout: &Layout, context: &PlanContext) -> Evaluation {
    let space = layout_space(layout, context);
    let disk = context.reference_disk();
    let raw_bytes: u64 = context.disks.iter().map(|d| d.bytes).sum();
    let (parity_overhead, padding_overhead) =
        block_overheads(layout, context.recordsize, context.ashift);
    let risk = risk(layout, context, &disk);
    let perf: Perf = pool_perf(layout.shape(), layout.groups, &disk);
    Evaluation {
        layout: layout.label(),
        zpool: layout.zpool_grammar(),
        kind: layout.kind,
        groups: layout.groups,
        width: layout.width,
        spares: layout.spares,
        disks_used: layout.disks_used(),
        avail_bytes: space.avail,
        size_bytes: space.size,
        dspace_bytes: space.dspace,
        slop_bytes: space.slop,
        raw_bytes,
        avail_zfs: format_zfs_size(space.avail),
        avail_df: format_df_size(space.avail),
        size_zfs: format_zfs_size(space.size),
        efficiency: space.avail as f64 / raw_bytes.max(1) as f64,
        parity_overhead,
        padding_overhead,
        tolerates_min: layout.shape().redundancy(),
        tolerates_max: layout.shape().redundancy() * layout.groups,
        mttdl_hours: risk.mttdl_hours,
        p_loss: risk.p_loss,
        rebuild_hours: risk.rebuild_hours,
        seq_read_mbs: perf.seq_read_mbs,
        seq_write_mbs: perf.seq_write_mbs,
        rand_read_iops: perf.rand_read_iops,
        rand_write_iops: perf.rand_write_iops,
        perf_score: perf.score(&disk),
        pareto: false,
    }
}

struct Risk {
    mttdl_hours: f64,
    p_loss: f64,
    rebuild_hours: f64,
}

/// MTTDL and P(loss) of the pool: groups fail independently; MTTR = resilver time, plus
/// the replacement delay when there is no hot spare.
fn risk(layout: &Layout, context: &PlanContext, disk: &Disk) -> Risk {
    let copied_bytes = disk.bytes as f64 * context.fill;
    let rebuild_hours = copied_bytes / (context.rebuild_mbs * 1e6) / 3600.0;
    let mttr = rebuild_hours
        + if layout.spares > 0 {
            0.0
        } else {
            context.replace_hours
        };
    let mtbf = mtbf_hours_from_afr(disk.afr);
    let tolerates = layout.shape().redundancy();
    let survivors_read = layout.width.saturating_sub(tolerates) as f64 * copied_bytes;
    let p_ure = p_unrecoverable_read(survivors_read, disk.ber);
    let group_rate = group_loss_rate(layout.width, tolerates, mtbf, mttr.max(1e-9), p_ure);
    let pool_rate = group_rate * layout.groups as f64;
    Risk {
        mttdl_hours: 1.0 / pool_rate,
        p_loss: p_loss_within(pool_rate, context.years * HOURS_PER_YEAR),
        rebuild_hours,
    }
}

/// Marks the layouts no other layout beats on capacity, speed and integrity at once.
pub fn mark_pareto(evaluations: &mut [Evaluation]) {
    let points: Vec<(f64, f64, f64)> = evaluations
        .iter()
        .map(|e| (e.avail_bytes as f64, e.perf_score, -e.p_loss))
        .collect();
    for (i, evaluation) in evaluations.iter_mut().enumerate() {
        let me = points[i];
        evaluation.pareto = !points.iter().any(|&other| dominates(other, me));
    }
}

fn dominates(a: (f64, f64, f64), b: (f64, f64, f64)) -> bool {
    let no_worse = a.0 >= b.0 && a.1 >= b.1 && a.2 >= b.2;
    let better = a.0 > b.0 || a.1 > b.1 || a.2 > b.2;
    no_worse && better
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::disks::{generic_disk, DiskKind};

    fn context(disks: usize) -> PlanContext {
        PlanContext {
            disks: vec![generic_disk(DiskKind::Hdd, 4_000_787_030_016, "4TB"); disks],
            ashift: 12,
            recordsize: 128 << 10,
            era: ZfsEra::Cairn,
            years: 5.0,
            rebuild_mbs: 90.0,
            replace_hours: 24.0,
            fill: 1.0,
        }
    }

    #[test]
    fn overheads_at_recordsize() {
        let (parity, padding) = block_overheads(&Layout::raidz(2, 1, 6), 128 << 10, 12);
        assert!((parity - 1.0 / 3.0).abs() < 1e-12);
        assert_eq!(padding, 0.0);
        // 20 KiB on raidz1 of 5: 5 data, 2 parity, 1 skip of 8 sectors.
        let (parity, padding) = block_overheads(&Layout::raidz(1, 1, 5), 20 << 10, 12);
        assert_eq!((parity, padding), (0.25, 0.125));
        assert_eq!(
            block_overheads(&Layout::mirror(4, 2), 128 << 10, 12),
            (0.5, 0.0)
        );
    }

    #[test]
    fn pareto_front_keeps_extremes() {
        let context = context(24);
        let mut rows: Vec<Evaluation> = crate::enumerate::enumerate_layouts(24)
            .iter()
            .map(|l| evaluate(l, &context))
            .collect();
        mark_pareto(&mut rows);
        let stripe = rows.iter().find(|r| r.kind == LayoutKind::Stripe).unwrap();
        assert!(stripe.pareto, "most capacity and speed");
        let safest = rows
            .iter()
            .min_by(|a, b| a.p_loss.total_cmp(&b.p_loss))
            .unwrap();
        assert!(safest.pareto);
        assert!(rows.iter().any(|r| !r.pareto));
    }

    #[test]
    fn spares_take_the_largest_disks() {
        let mut context = context(3);
        context.disks[0].bytes *= 2;
        let inputs = vdev_inputs(&Layout::mirror(1, 2).with_spares(1), &context.disks, 12);
        assert_eq!(inputs.len(), 1);
        assert_eq!(inputs[0].min_leaf_asize, leaf_asize(context.disks[2].bytes));
    }
}
