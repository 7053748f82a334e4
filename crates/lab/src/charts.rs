//! The studies' plots (`cairn bench lab … --plot FILE.svg|.png`): the lab's figures beside
//! the published ones, as grouped bar charts (`cairn_plot::bars`).

use cairn_plot::bars::{BarChart, BarGroup, PALETTE};
use cairn_plot::Rgb;

use crate::layouts::LayoutsReport;
use crate::raid1::{Report, IMPLS};

/// Greys for the published implementations, darkest first.
const PUBLISHED_GREYS: [Rgb; 4] = [
    Rgb(60, 60, 60),
    Rgb(110, 110, 110),
    Rgb(160, 160, 160),
    Rgb(200, 200, 200),
];

/// What our bars are called: the lab's figures or ones measured on real devices.
fn ours(real_devices: bool) -> &'static str {
    if real_devices {
        "real"
    } else {
        "lab"
    }
}

/// RAID1 study: per job, every published implementation and every lab policy as a fraction
/// of the best published figure of that job (random jobs in IOPS, sequential in KB/s: one
/// axis for both). Jobs without a published figure are left out.
pub fn raid1_chart(report: &Report) -> BarChart {
    let policies: Vec<_> = crate::policy::Policy::ALL
        .into_iter()
        .filter(|p| report.results.iter().any(|r| r.policy == *p))
        .collect();
    let mut series: Vec<(String, Rgb)> = IMPLS
        .iter()
        .zip(PUBLISHED_GREYS)
        .map(|((name, _), grey)| (format!("published {name}"), grey))
        .collect();
    series.extend(
        policies
            .iter()
            .zip(PALETTE.iter().cycle())
            .map(|(p, c)| (format!("{} {}", ours(report.real_devices), p.name()), *c)),
    );
    let mut keys: Vec<(u32, Option<&'static str>)> =
        report.results.iter().map(|r| (r.job, r.part)).collect();
    let mut seen = std::collections::HashSet::new();
    keys.retain(|k| seen.insert(*k));
    let groups = keys
        .into_iter()
        .filter_map(|(job, part)| {
            let seq = matches!(job, 2..=4 | 17..=20);
            let fig = |iops: f64, kbs: f64| if seq { kbs } else { iops };
            let published: Vec<Option<f64>> = IMPLS
                .iter()
                .map(|(name, _)| report.paper(job, part, name).map(|p| fig(p.iops, p.kbs)))
                .collect();
            let best = published.iter().flatten().copied().fold(0.0, f64::max);
            if best <= 0.0 {
                return None;
            }
            let lab = policies
                .iter()
                .map(|&p| report.lab(job, part, p).map(|r| fig(r.iops, r.kbs) / best));
            Some(BarGroup {
                label: format!("job {job}{}", part.unwrap_or("")),
                values: published
                    .iter()
                    .map(|v| v.map(|v| v / best))
                    .chain(lab)
                    .collect(),
            })
        })
        .collect();
    BarChart {
        title: match report.real_devices {
            true => "bench lab raid1 --real: RAID1 study, a mirror of the devices given",
            false => "bench lab raid1: RAID1 study, 2 simulated WD 4 TB disks",
        }
        .into(),
        subtitle: match report.real_devices {
            true => format!(
                "{} wall s per job; bar = figure / best published figure of the job",
                report.runtime_s
            ),
            false => format!(
                "seed {}, {} virtual s per job; bar = figure / best published figure of the job",
                report.seed, report.runtime_s
            ),
        },
        unit: "fraction of the best published figure".into(),
        log: false,
        series,
        groups,
    }
}

/// 24-disk study: per layout, published and lab write and read MB/s.
pub fn layouts_chart(report: &LayoutsReport) -> BarChart {
    let ours = ours(report.real_devices);
    let series = vec![
        ("published write".to_string(), Rgb(158, 202, 225)),
        (format!("{ours} write"), PALETTE[0]),
        ("published read".to_string(), Rgb(252, 174, 145)),
        (format!("{ours} read"), PALETTE[1]),
    ];
    let groups = report
        .rows
        .iter()
        .map(|r| BarGroup {
            label: format!("{} ({} disks)", r.layout, r.disks),
            values: vec![
                Some(r.published_write_mbs),
                Some(r.write_mbs),
                Some(r.published_read_mbs),
                Some(r.read_mbs),
            ],
        })
        .collect();
    BarChart {
        title: match (report.study, report.real_devices) {
            (_, true) => "bench lab layouts --real: 24-disk study's layouts on the devices given",
            (crate::layouts::Study::Hdd, false) => {
                "bench lab layouts: 24-disk study, simulated 4 TB HDDs"
            }
            (crate::layouts::Study::Ssd, false) => {
                "bench lab layouts --ssd: 24-disk study, simulated 256 GB SSDs"
            }
        }
        .into(),
        subtitle: format!(
            "write and read of {} MiB; Spearman rank correlation with the published order: write {:.2}, read {:.2}",
            report.size >> 20,
            report.spearman_write,
            report.spearman_read
        ),
        unit: "MB/s".into(),
        log: false,
        series,
        groups,
    }
}
