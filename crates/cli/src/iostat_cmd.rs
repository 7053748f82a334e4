//! `cairn iostat [-v] [-l] [-q] [-w] [-H] [-p] [--json] [POOL…] [INTERVAL [COUNT]]`, as
//! `zpool iostat`: capacity, operations and bandwidth per pool (and with `-v` per top-level
//! vdev and leaf). The first report covers the time since import (rates averaged over it);
//! each later one the interval before it.
//!
//! Figures come from the pool's leaves (`cairn_vdev::iostat`): a serving process answers
//! with a live snapshot over its control socket; otherwise the pool record holds the
//! snapshot the last process that held the pool saved, so `iostat` never opens the pool
//! (it must not stand in the way of the commands it watches).

use std::time::{Duration, Instant};

use cairn_geometry::format_zfs_size;
use cairn_pool::iostat::PoolIo;
use cairn_vdev::iostat::IoCounts;

use crate::iostat_format::{format_count, group_line, latency};
use clap::Args;

#[derive(Args, Debug)]
pub struct IostatArgs {
    /// Also every top-level vdev and leaf.
    #[arg(short = 'v')]
    verbose: bool,
    /// Average latencies, read and write: total_wait (queue + disk), disk_wait (in the
    /// device), queue_wait (waiting for an I/O thread or behind the job's earlier requests).
    #[arg(short = 'l')]
    latency: bool,
    /// Requests per I/O class, as zpool's: pend (jobs waiting for an I/O thread, pool row
    /// only: the queue is the process's) and activ (inside the device now).
    #[arg(short = 'q')]
    queues: bool,
    /// Latency histograms instead of the table: total_wait and disk_wait read/write,
    /// syncq_wait and asyncq_wait read/write, scrub and trim (queue waits per class).
    #[arg(short = 'w')]
    histograms: bool,
    /// Scripted: no headers, fields separated by tabs.
    #[arg(short = 'H')]
    scripted: bool,
    /// Exact numbers.
    #[arg(short = 'p')]
    parsable: bool,
    /// JSON: one object per report, {"pools": [PoolIo and the interval's rates]}.
    #[arg(long)]
    json: bool,
    /// Pools, then optionally INTERVAL (seconds) and COUNT.
    args: Vec<String>,
}

/// What the positional arguments say: pools, then the interval (seconds) and count.
type Operands = (Vec<String>, Option<f64>, Option<u64>);

/// The pools named and the interval/count that follow them (zpool's grammar: trailing
/// numbers are the interval and the count).
fn split_args(args: &[String]) -> Result<Operands, String> {
    let mut pools: Vec<String> = args.to_vec();
    let mut numbers = Vec::new();
    while let Some(last) = pools.last() {
        if numbers.len() == 2 || last.parse::<f64>().is_err() {
            break;
        }
        numbers.push(pools.pop().unwrap_or_default());
    }
    numbers.reverse();
    let interval = match numbers.first() {
        Some(s) => Some(
            s.parse::<f64>()
                .ok()
                .filter(|&i| i > 0.0)
                .ok_or_else(|| format!("bad interval '{s}': give seconds > 0"))?,
        ),
        None => None,
    };
    let count = match numbers.get(1) {
        Some(s) => Some(s.parse::<u64>().map_err(|_| format!("bad count '{s}'"))?),
        None => None,
    };
    Ok((pools, interval, count))
}

/// A snapshot of pool `name`: live from a serving process, else the pool record's.
fn snapshot(home: &cairn_pool::Home, name: &str) -> Result<PoolIo, String> {
    if let Some(answer) = crate::control::ask(home, name, "iostat") {
        if let Some(e) = answer.strip_prefix("error: ") {
            return Err(e.trim().to_string());
        }
        return serde_json::from_str(&answer)
            .map_err(|e| format!("pool '{name}': bad answer from its serving process: {e}"));
    }
    let record = home.load(name).map_err(|e| e.to_string())?;
    Ok(record.iostat.unwrap_or_else(|| PoolIo {
        pool: name.to_string(),
        ..PoolIo::default()
    }))
}

pub fn iostat(a: IostatArgs) -> Result<(), String> {
    let home = crate::home();
    let (mut pools, interval, count) = split_args(&a.args)?;
    if pools.is_empty() {
        pools = home.pool_names().map_err(|e| e.to_string())?;
    }
    if pools.is_empty() {
        println!("no pools available");
        return Ok(());
    }
    let take =
        || -> Result<Vec<PoolIo>, String> { pools.iter().map(|p| snapshot(&home, p)).collect() };
    let reports = count.unwrap_or(if interval.is_some() { u64::MAX } else { 1 });
    let mut previous: Option<Vec<PoolIo>> = None;
    let mut next_at = Instant::now();
    for _ in 0..reports {
        let now = take()?;
        let views: Vec<View> = now
            .iter()
            .enumerate()
            .map(|(i, io)| View::new(io, previous.as_ref().and_then(|p| p.get(i))))
            .collect();
        print!("{}", render(&views, &a));
        previous = Some(now);
        let Some(secs) = interval else { break };
        next_at += Duration::from_secs_f64(secs);
        std::thread::sleep(next_at.saturating_duration_since(Instant::now()));
    }
    Ok(())
}

/// One pool over one report's span: the counts in it and its length in seconds.
struct View<'a> {
    io: &'a PoolIo,
    before: Option<&'a PoolIo>,
    seconds: f64,
}

impl<'a> View<'a> {
    fn new(io: &'a PoolIo, before: Option<&'a PoolIo>) -> View<'a> {
        let since_ns = match before {
            Some(b) => b.taken_at_ns,
            None => io.imported_at.saturating_mul(1_000_000_000),
        };
        let seconds = (io.taken_at_ns.saturating_sub(since_ns) as f64 / 1e9).max(1e-3);
        View {
            io,
            before,
            seconds,
        }
    }

    /// The counts of leaf (top `t`, leaf `l`) in this span.
    fn leaf(&self, t: usize, l: usize) -> IoCounts {
        let now = &self.io.tops[t].leaves[l];
        let then = self
            .before
            .and_then(|b| b.leaf_counts(now.guid))
            .cloned()
            .unwrap_or_default();
        &now.io - &then
    }

    fn top(&self, t: usize) -> IoCounts {
        (0..self.io.tops[t].leaves.len())
            .fold(IoCounts::default(), |acc, l| &acc + &self.leaf(t, l))
    }

    fn pool(&self) -> IoCounts {
        (0..self.io.tops.len()).fold(IoCounts::default(), |acc, t| &acc + &self.top(t))
    }

    /// What `-v` shows under the pool, in order: each top-level vdev, then its leaves (a
    /// vdev that is one leaf is not shown twice).
    fn members(&self) -> Vec<Member<'a>> {
        let mut out = Vec::new();
        for (t, top) in self.io.tops.iter().enumerate() {
            out.push(Member {
                depth: 1,
                name: &top.name,
                space: Some((top.alloc, top.size)),
                counts: self.top(t),
            });
            if top.leaves.len() > 1 || top.name != top.leaves[0].path {
                for (l, leaf) in top.leaves.iter().enumerate() {
                    out.push(Member {
                        depth: 2,
                        name: &leaf.path,
                        space: None,
                        counts: self.leaf(t, l),
                    });
                }
            }
        }
        out
    }
}

/// A top-level vdev (depth 1) or leaf (depth 2) of a `-v` report.
struct Member<'a> {
    depth: usize,
    name: &'a str,
    /// (allocated, size) of a top-level vdev.
    space: Option<(u64, u64)>,
    counts: IoCounts,
}

fn render(views: &[View], a: &IostatArgs) -> String {
    if a.json {
        return render_json(views) + "\n";
    }
    if a.histograms {
        return views.iter().map(|v| render_histogram(v, a)).collect();
    }
    let mut rows: Vec<Vec<String>> = Vec::new();
    for v in views {
        let (alloc, size, _) = v.io.total();
        let pool = v.pool();
        let mut cells = row(&v.io.pool, Some((alloc, size)), &pool, v.seconds, a);
        if a.queues {
            cells.extend(crate::iostat_classes::queue_cells(&pool, a.parsable));
        }
        rows.push(cells);
        if a.verbose {
            for m in v.members() {
                let name = format!("{}{}", "  ".repeat(m.depth), m.name);
                rows.push(vdev_row(&name, m.space, &m.counts, v.seconds, a));
            }
        }
    }
    table(&rows, a)
}

/// A top-level vdev's or leaf's row: `row` and, with -q, its jobs and requests per class.
fn vdev_row(
    name: &str,
    space: Option<(u64, u64)>,
    c: &IoCounts,
    secs: f64,
    a: &IostatArgs,
) -> Vec<String> {
    let mut cells = row(name, space, c, secs, a);
    if a.queues {
        cells.extend(crate::iostat_classes::queue_cells(c, a.parsable));
    }
    cells
}

/// One row: name, capacity, operations and bandwidth per second, and the -l columns.
fn row(
    name: &str,
    space: Option<(u64, u64)>,
    c: &IoCounts,
    secs: f64,
    a: &IostatArgs,
) -> Vec<String> {
    let size = |b: u64| {
        if a.parsable {
            b.to_string()
        } else {
            format_zfs_size(b)
        }
    };
    let rate = |n: u64| {
        let per_sec = n as f64 / secs;
        if a.parsable {
            format!("{}", per_sec.round() as u64)
        } else {
            format_count(per_sec)
        }
    };
    let mut cells = vec![name.to_string()];
    match space {
        Some((alloc, total)) => {
            cells.push(size(alloc));
            cells.push(size(total.saturating_sub(alloc)));
        }
        None => cells.extend(["-".to_string(), "-".to_string()]),
    }
    cells.push(rate(c.read_ops));
    cells.push(rate(c.write_ops));
    cells.push(size((c.read_bytes as f64 / secs) as u64));
    cells.push(size((c.write_bytes as f64 / secs) as u64));
    if a.latency {
        // total_wait = queue + disk, as zpool's total_wait is the sum of its parts.
        let total = |disk: u64, queue: u64| disk.saturating_add(queue);
        cells.push(latency(
            total(c.read_wait_ns, c.read_queue_ns),
            c.read_ops,
            a.parsable,
        ));
        cells.push(latency(
            total(c.write_wait_ns, c.write_queue_ns),
            c.write_ops,
            a.parsable,
        ));
        cells.push(latency(c.read_wait_ns, c.read_ops, a.parsable));
        cells.push(latency(c.write_wait_ns, c.write_ops, a.parsable));
        cells.push(latency(c.read_queue_ns, c.read_ops, a.parsable));
        cells.push(latency(c.write_queue_ns, c.write_ops, a.parsable));
    }
    cells
}

fn table(rows: &[Vec<String>], a: &IostatArgs) -> String {
    if a.scripted {
        return rows.iter().map(|r| r.join("\t") + "\n").collect();
    }
    let mut head1 = vec!["", "capacity", "", "operations", "", "bandwidth", ""];
    let mut head2 = vec!["pool", "alloc", "free", "read", "write", "read", "write"];
    if a.latency {
        head1.extend(["total_wait", "", "disk_wait", "", "queue_wait", ""]);
        head2.extend(["read", "write", "read", "write", "read", "write"]);
    }
    if a.queues {
        for (group, _) in crate::iostat_classes::QUEUES {
            head1.extend([group, ""]);
            head2.extend(["pend", "activ"]);
        }
    }
    let name_w = rows
        .iter()
        .map(|r| r[0].len())
        .chain([10])
        .max()
        .unwrap_or(10);
    let w = 6;
    let line = |cells: &[&str], dash: bool| -> String {
        let mut s = if dash {
            "-".repeat(name_w)
        } else {
            format!("{:<name_w$}", cells[0])
        };
        for c in &cells[1..] {
            s += "  ";
            s += &if dash {
                "-".repeat(w)
            } else {
                format!("{c:>w$}")
            };
        }
        s.trim_end().to_string() + "\n"
    };
    let mut out = group_line(&head1, name_w, w);
    out += &line(&head2, false);
    out += &line(&head2, true);
    for r in rows {
        let cells: Vec<&str> = r.iter().map(String::as_str).collect();
        out += &line(&cells, false);
    }
    out += &line(&head2, true);
    out
}

/// `-w`: how many requests took how long, per latency bucket, for the pool; with `-v`
/// then for each top-level vdev and each of its leaves, a block each (as `zpool iostat
/// -wv`).
fn render_histogram(v: &View, a: &IostatArgs) -> String {
    let block = |name: &str, c: &IoCounts| {
        crate::iostat_classes::histogram(name, c, a.scripted, a.parsable)
    };
    let mut out = block(&v.io.pool, &v.pool());
    if !a.verbose {
        return out;
    }
    for m in v.members() {
        out += "\n";
        out += &block(m.name, &m.counts);
    }
    out
}

fn render_json(views: &[View]) -> String {
    let pools: Vec<serde_json::Value> = views
        .iter()
        .map(|v| {
            let c = v.pool();
            serde_json::json!({
                "snapshot": v.io,
                "seconds": v.seconds,
                "read_ops_per_sec": c.read_ops as f64 / v.seconds,
                "write_ops_per_sec": c.write_ops as f64 / v.seconds,
                "read_bytes_per_sec": c.read_bytes as f64 / v.seconds,
                "write_bytes_per_sec": c.write_bytes as f64 / v.seconds,
                // The interval's counts per I/O class (-q activ, -w histograms) and the
                // jobs waiting for an I/O thread now (-q pend).
                "classes": c.classes,
                "pending": crate::iostat_classes::pending_of(&v.io.total().2),
            })
        })
        .collect();
    serde_json::json!({ "pools": pools }).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trailing_numbers_are_interval_and_count() {
        let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>();
        assert_eq!(
            split_args(&s(&["tank"])).unwrap(),
            (s(&["tank"]), None, None)
        );
        assert_eq!(
            split_args(&s(&["tank", "2"])).unwrap(),
            (s(&["tank"]), Some(2.0), None)
        );
        assert_eq!(
            split_args(&s(&["a", "b", "0.5", "3"])).unwrap(),
            (s(&["a", "b"]), Some(0.5), Some(3))
        );
        assert_eq!(
            split_args(&s(&["1", "2", "3"])).unwrap(),
            (s(&["1"]), Some(2.0), Some(3))
        );
        assert!(split_args(&s(&["tank", "0"])).is_err());
        assert!(split_args(&s(&["tank", "1", "2.5"])).is_err());
    }
}
