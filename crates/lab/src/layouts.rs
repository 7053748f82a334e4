//! The 24-disk study (calomel.org, 24 × 4 TB 7200 rpm, bonnie++ sequential write / read of a
//! 16 GiB file, 26 layouts; and its SSD table, 24 × 256 GB SATA SSDs, 16 layouts) rerun
//! with `dd` on simulated disks, and ranked against the published orderings (Spearman's
//! rank correlation).
//!
//! ```text
//! Spearman's ρ = Pearson correlation of the ranks (ties share their mean rank):
//!   published write  108  106  237        ranks 2 1 3
//!   lab write        150  150  300        ranks 1.5 1.5 3
//!   ρ = cov(r1, r2) / (σ1 σ2) = 0.866
//! ```
//!
//! The lab's `dd` ignores what bonnie++ adds (4 threads, synchronous writes, the file
//! system's metadata, ZFS's write throttle and checksums), so absolute figures differ; the
//! test asks for the ordering. The study machine could not write faster than ~700 MB/s
//! whatever the layout; `run` takes that ceiling as a parameter.

use crate::dd::{self, DdJob, DdResult};
use crate::hdd::HddParams;
use crate::raid1::csv_rows;
use crate::spec::{parse_layout, DiskModel, LabError, LayoutSpec};
use crate::ssd::SsdParams;

const HDD_CSV: &str = include_str!("../data/hdd_24x4tb_layouts.csv");
const SSD_CSV: &str = include_str!("../data/ssd_24x256gb_layouts.csv");

/// Which of the study's tables.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Study {
    /// 24 × WD 4 TB 7200 rpm, 26 layouts.
    Hdd,
    /// 24 × Samsung 840 PRO 256 GB SSDs, 16 layouts.
    Ssd,
}

impl Study {
    fn table(self) -> &'static str {
        match self {
            Study::Hdd => HDD_CSV,
            Study::Ssd => SSD_CSV,
        }
    }

    fn disk(self) -> DiskModel {
        match self {
            Study::Hdd => DiskModel::Hdd(HddParams::wd_re_4tb()),
            Study::Ssd => DiskModel::Ssd(SsdParams::sata_256gb()),
        }
    }

    /// The study machine's write ceiling, visible in its own table: the fastest HDD
    /// layouts all write 689–696 MB/s (12 × raidz1, 24-disk stripe, 12 mirrors) whatever
    /// their disks; the 24-SSD stripe writes 1620 MB/s where its disks could take 11 GB/s.
    pub fn host_write_mbs(self) -> f64 {
        match self {
            Study::Hdd => STUDY_HOST_WRITE_MBS,
            Study::Ssd => 1650.0,
        }
    }

    /// The SSD machine's read ceiling: no layout reads faster than 2043 MB/s, though 24
    /// SSDs could deliver 13 GB/s. (The HDD layouts are slower than the host reads.)
    pub fn host_read_mbs(self) -> Option<f64> {
        match self {
            Study::Hdd => None,
            Study::Ssd => Some(2050.0),
        }
    }
}

/// One published row with the lab's figures beside it.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct LayoutRow {
    pub disks: usize,
    pub layout: String,
    pub lab_layout: String,
    pub published_write_mbs: f64,
    pub published_read_mbs: f64,
    pub write_mbs: f64,
    pub read_mbs: f64,
}

/// The study's output.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct LayoutsReport {
    pub study: Study,
    pub size: u64,
    pub host_write_mbs: Option<f64>,
    /// Measured on real devices (`--real`) rather than simulated disks.
    pub real_devices: bool,
    pub rows: Vec<LayoutRow>,
    pub spearman_write: f64,
    pub spearman_read: f64,
}

/// The HDD study machine's write ceiling (`Study::host_write_mbs`).
pub const STUDY_HOST_WRITE_MBS: f64 = 700.0;

/// Runs every layout of one of the study's tables with a file of `size` bytes on its
/// simulated disks, writes capped at `host_write_mbs` (`None`: the disks alone).
pub fn run(
    study: Study,
    size: u64,
    host_write_mbs: Option<f64>,
) -> Result<LayoutsReport, LabError> {
    let disk = study.disk();
    let job = DdJob {
        ashift: 12,
        bs: 1 << 20,
        size,
        host_write_mbs,
        host_read_mbs: study.host_read_mbs(),
    };
    let measure = |n: usize, spec: &LayoutSpec, lab: &str| {
        let DdResult {
            write_mbs,
            read_mbs,
            ..
        } = dd::run(&vec![disk.clone(); n], spec, lab, job);
        Ok::<_, LabError>(Some((write_mbs, read_mbs)))
    };
    let mut report = run_with(study, measure)?;
    report.size = size;
    report.host_write_mbs = host_write_mbs;
    Ok(report)
}

/// Runs the layouts of one of the study's tables with `measure(disks, layout, its
/// name)`, which gives (write MB/s, read MB/s), or `None` to leave the layout out (e.g.
/// more disks than a real run has). The report's `size` and `host_write_mbs` are left at
/// 0 and `None`, and `real_devices` false, for the caller to fill in.
pub fn run_with<E: From<LabError>>(
    study: Study,
    mut measure: impl FnMut(usize, &LayoutSpec, &str) -> Result<Option<(f64, f64)>, E>,
) -> Result<LayoutsReport, E> {
    let mut rows = Vec::new();
    for r in csv_rows(study.table(), "disks,") {
        let (Some(n), Some(w), Some(rd), Some(lab)) = (
            r.first().and_then(|x| x.parse::<usize>().ok()),
            r.get(3).and_then(|x| x.parse::<f64>().ok()),
            r.get(5).and_then(|x| x.parse::<f64>().ok()),
            r.get(6),
        ) else {
            continue;
        };
        let spec = parse_layout(lab, n)?;
        let Some((write_mbs, read_mbs)) = measure(n, &spec, lab)? else {
            continue;
        };
        rows.push(LayoutRow {
            disks: n,
            layout: r[1].clone(),
            lab_layout: lab.clone(),
            published_write_mbs: w,
            published_read_mbs: rd,
            write_mbs,
            read_mbs,
        });
    }
    let col = |f: fn(&LayoutRow) -> f64| rows.iter().map(f).collect::<Vec<f64>>();
    let spearman_write = spearman(&col(|r| r.published_write_mbs), &col(|r| r.write_mbs));
    let spearman_read = spearman(&col(|r| r.published_read_mbs), &col(|r| r.read_mbs));
    Ok(LayoutsReport {
        study,
        size: 0,
        host_write_mbs: None,
        real_devices: false,
        rows,
        spearman_write,
        spearman_read,
    })
}

/// Ranks from 1, ties sharing their mean rank.
fn ranks(v: &[f64]) -> Vec<f64> {
    let mut idx: Vec<usize> = (0..v.len()).collect();
    idx.sort_by(|&a, &b| v[a].total_cmp(&v[b]));
    let mut out = vec![0.0; v.len()];
    let mut i = 0;
    while i < idx.len() {
        let mut j = i;
        while j + 1 < idx.len() && v[idx[j + 1]] == v[idx[i]] {
            j += 1;
        }
        let mean = (i + j) as f64 / 2.0 + 1.0;
        for &k in &idx[i..=j] {
            out[k] = mean;
        }
        i = j + 1;
    }
    out
}

/// Spearman's rank correlation of two equally long series (0 when undefined).
pub fn spearman(a: &[f64], b: &[f64]) -> f64 {
    if a.len() != b.len() || a.len() < 2 {
        return 0.0;
    }
    let (ra, rb) = (ranks(a), ranks(b));
    let n = ra.len() as f64;
    let (ma, mb) = (ra.iter().sum::<f64>() / n, rb.iter().sum::<f64>() / n);
    let cov: f64 = ra.iter().zip(&rb).map(|(x, y)| (x - ma) * (y - mb)).sum();
    let va: f64 = ra.iter().map(|x| (x - ma).powi(2)).sum();
    let vb: f64 = rb.iter().map(|y| (y - mb).powi(2)).sum();
    if va == 0.0 || vb == 0.0 {
        0.0
    } else {
        cov / (va * vb).sqrt()
    }
}

impl LayoutsReport {
    /// The side-by-side table.
    pub fn table(&self) -> String {
        let mut out = format!(
            "{:>5}  {:<32} {:<12} | published write  read | {:>4} write   read\n",
            "disks",
            "layout",
            "lab layout",
            if self.real_devices { "real" } else { "lab" }
        );
        for r in &self.rows {
            out += &format!(
                "{:>5}  {:<32} {:<12} | {:>15.0} {:>5.0} | {:>9.0} {:>6.0}\n",
                r.disks,
                r.layout,
                r.lab_layout,
                r.published_write_mbs,
                r.published_read_mbs,
                r.write_mbs,
                r.read_mbs
            );
        }
        out += &format!(
            "Spearman rank correlation with the published ordering: write {:.2}, read {:.2}\n",
            self.spearman_write, self.spearman_read
        );
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn worked_example_of_the_module_comment() {
        let rho = spearman(&[108.0, 106.0, 237.0], &[150.0, 150.0, 300.0]);
        assert!((rho - 0.866).abs() < 0.001, "{rho}");
        assert_eq!(ranks(&[3.0, 1.0, 3.0]), vec![2.5, 1.0, 2.5]);
    }

    #[test]
    fn every_layout_of_both_tables_parses() {
        for (study, count) in [(Study::Hdd, 26), (Study::Ssd, 16)] {
            let rows = csv_rows(study.table(), "disks,");
            assert_eq!(rows.len(), count);
            for r in rows {
                let n: usize = r[0].parse().unwrap_or(0);
                assert!(parse_layout(&r[6], n).is_ok(), "{r:?}");
            }
        }
    }
}
