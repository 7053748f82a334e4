//! The per-class parts of `cairn iostat`: `-q`'s pend/activ columns per I/O class and
//! `-w`'s histograms (total_wait, disk_wait, syncq_wait, asyncq_wait, scrub, trim), laid
//! out as zpool's. The counts come from `IoCounts::classes` (`cairn_vdev::class_stats`).

use std::collections::BTreeMap;

use cairn_vdev::io_class::IoClass;
use cairn_vdev::iostat::{IoCounts, HIST_BUCKETS};

use crate::iostat_format::{format_count, group_line, latency};

/// `-q`'s column groups, zpool's names and order, and the class each counts.
pub(crate) const QUEUES: [(&str, IoClass); 6] = [
    ("syncq_read", IoClass::SyncRead),
    ("syncq_write", IoClass::SyncWrite),
    ("asyncq_read", IoClass::AsyncRead),
    ("asyncq_write", IoClass::AsyncWrite),
    ("scrubq_read", IoClass::Scrub),
    ("trimq_write", IoClass::Trim),
];

/// A count as zpool prints it: exact with -p, else compact (1.5K).
fn count(n: u64, parsable: bool) -> String {
    if parsable {
        n.to_string()
    } else {
        format_count(n as f64)
    }
}

/// `-q`'s cells of a row: per class, pend (jobs queued for an I/O thread for the row's
/// leaves) then activ (their requests inside the devices).
pub(crate) fn queue_cells(c: &IoCounts, parsable: bool) -> Vec<String> {
    let mut cells = Vec::with_capacity(2 * QUEUES.len());
    for (_, class) in QUEUES {
        let k = c.classes.get(&class);
        cells.push(count(k.map_or(0, |k| k.pending), parsable));
        cells.push(count(k.map_or(0, |k| k.active), parsable));
    }
    cells
}

/// Jobs queued for an I/O thread now, per class (`--json`'s `pending`).
pub(crate) fn pending_of(c: &IoCounts) -> BTreeMap<IoClass, u64> {
    c.classes.iter().map(|(&k, v)| (k, v.pending)).collect()
}

/// `-w`'s columns, left to right: the histogram each shows.
fn histogram_columns(c: &IoCounts) -> [&[u64]; 10] {
    let queue = |class: IoClass| -> &[u64] {
        c.classes
            .get(&class)
            .map_or(&[], |k| k.queue_hist.as_slice())
    };
    [
        &c.read_total_hist,
        &c.write_total_hist,
        &c.read_hist,
        &c.write_hist,
        queue(IoClass::SyncRead),
        queue(IoClass::SyncWrite),
        queue(IoClass::AsyncRead),
        queue(IoClass::AsyncWrite),
        queue(IoClass::Scrub),
        queue(IoClass::Trim),
    ]
}

/// `-w` for one pool: a row per latency bucket, labelled with the bucket's upper bound
/// (2^(i+1) - 1 ns: 1ns, 3ns, 7ns, … 1us, 2us, … as zpool's), every bucket shown.
pub(crate) fn histogram(pool: &str, c: &IoCounts, scripted: bool, parsable: bool) -> String {
    const W: usize = 5;
    let name_w = pool.len().max(10);
    let mut out = String::new();
    if !scripted {
        let mut head1 = vec![pool];
        for group in ["total_wait", "disk_wait", "syncq_wait", "asyncq_wait"] {
            head1.extend([group, ""]);
        }
        out += &group_line(&head1, name_w, W);
        let head2 = ["read", "write"].repeat(4);
        let mut line = format!("{:<name_w$}", "latency");
        for h in head2.iter().chain(&["scrub", "trim"]) {
            line += &format!("  {h:>W$}");
        }
        out += &(line + "\n");
        out += &"-".repeat(name_w);
        out += &format!("  {}", "-".repeat(W)).repeat(10);
        out += "\n";
    }
    let columns = histogram_columns(c);
    for i in 0..HIST_BUCKETS {
        let label = latency((1u64 << (i + 1)) - 1, 1, parsable);
        let cells = columns
            .iter()
            .map(|h| count(h.get(i).copied().unwrap_or(0), parsable));
        out += &if scripted {
            std::iter::once(label)
                .chain(cells)
                .collect::<Vec<_>>()
                .join("\t")
        } else {
            cells.fold(format!("{label:<name_w$}"), |l, c| {
                l + &format!("  {c:>W$}")
            })
        };
        out += "\n";
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histogram_rows_are_labelled_as_zpool_labels_them() {
        let mut read_hist = vec![0; HIST_BUCKETS];
        read_hist[10] = 3; // 1024..2047 ns: zpool's "2us" row
        let c = IoCounts {
            read_hist,
            ..IoCounts::default()
        };
        let out = histogram("tank", &c, false, false);
        let lines: Vec<&str> = out.lines().collect();
        assert!(lines[0].contains("total_wait") && lines[0].contains("asyncq_wait"));
        assert!(lines[1].ends_with("scrub   trim"), "{}", lines[1]);
        let labels: Vec<&str> = lines[3..]
            .iter()
            .map(|l| l.split_whitespace().next().unwrap())
            .collect();
        assert_eq!(&labels[..4], ["1ns", "3ns", "7ns", "15ns"]);
        assert_eq!(labels[9], "1us");
        assert_eq!(labels[15], "65us");
        assert_eq!(labels[24], "33ms");
        assert_eq!(labels[29], "1s");
        let row: Vec<&str> = lines[3 + 10].split_whitespace().collect();
        assert_eq!(
            row,
            ["2us", "0", "0", "3", "0", "0", "0", "0", "0", "0", "0"]
        );
    }
}
