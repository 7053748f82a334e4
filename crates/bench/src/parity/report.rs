//! Results: the JSON document and the human table.

use super::{Implementation, Op, Shape};
use cairn_parity::Kernel;
use serde::Serialize;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum Cache {
    /// The same stripe again and again (L1/L2/L3-resident).
    Hot,
    /// A new stripe every call, from a ring much larger than the last-level cache.
    Cold,
}

/// One figure.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Record {
    pub cache: Cache,
    pub op: &'static str,
    pub nparity: usize,
    pub ndata: usize,
    pub col_bytes: usize,
    pub implementation: String,
    #[serde(skip)]
    pub is_isal: bool,
    /// GB/s of data columns processed (10^9 bytes per second).
    pub gbps: f64,
    /// Output equal to the reference (hot runs only).
    pub verified: Option<bool>,
}

impl Record {
    pub(crate) fn new(
        cache: Cache,
        op: Op,
        shape: Shape,
        implementation: Implementation,
        bytes_per_sec: f64,
        verified: Option<bool>,
    ) -> Record {
        Record {
            cache,
            op: op.name(),
            nparity: op.nparity(),
            ndata: shape.ndata,
            col_bytes: shape.col_bytes,
            implementation: implementation.name(),
            is_isal: implementation.is_isal(),
            gbps: bytes_per_sec / 1e9,
            verified,
        }
    }
}

/// The whole run, as written by `--json`.
#[derive(Debug, Serialize)]
pub(crate) struct BenchReport {
    pub tool: &'static str,
    pub date_utc: String,
    pub cpu: String,
    pub kernels: Vec<&'static str>,
    pub best_kernel: &'static str,
    pub isal: Option<String>,
    pub isal_unavailable: Option<String>,
    pub reps: usize,
    pub unit: &'static str,
    pub copy_hot_gbps: f64,
    pub copy_cold_gbps: Option<f64>,
    pub results: Vec<Record>,
}

impl BenchReport {
    pub(crate) fn new(kernels: &[Kernel], reps: usize, isal: Result<&str, &String>) -> BenchReport {
        BenchReport {
            tool: "cairn bench parity",
            date_utc: utc_now(),
            cpu: cpu_model(),
            kernels: kernels.iter().map(|k| k.name()).collect(),
            best_kernel: Kernel::best().name(),
            isal: isal.ok().map(str::to_string),
            isal_unavailable: isal.err().cloned(),
            reps,
            unit: "GB/s of data columns (1e9 B/s), single thread, median of reps",
            copy_hot_gbps: 0.0,
            copy_cold_gbps: None,
            results: Vec::new(),
        }
    }

    pub(crate) fn print_header(&self) {
        println!("cairn bench parity — {} — {}", self.cpu, self.date_utc);
        println!(
            "GB/s of data (data bytes / time), single thread, median of {} reps",
            self.reps
        );
        match (&self.isal, &self.isal_unavailable) {
            (Some(path), _) => println!("ISA-L: {path}"),
            (None, Some(why)) => println!("ISA-L not found ({why})"),
            _ => {}
        }
    }

    pub(crate) fn print_copy(&self) {
        print!(
            "memory copy reference: hot (1 MiB) {:.1} GB/s",
            self.copy_hot_gbps
        );
        match self.copy_cold_gbps {
            Some(cold) => println!(", out of cache {cold:.1} GB/s"),
            None => println!(),
        }
        println!();
        let mut header = format!("{:<5} {:<11} {:<15}", "cache", "shape", "op");
        for k in &self.kernels {
            header += &format!(" {k:>11}");
        }
        header += &format!(
            " | {:>6} {:<19} {:>11}",
            "ISA-L", "(best entry point)", "cairn/ISA-L"
        );
        println!("{header}");
    }

    /// Prints one row per op for a (cache, shape) group.
    pub(crate) fn print_group(
        &self,
        cache: Cache,
        ndata: usize,
        col_bytes: usize,
        records: &[Record],
    ) {
        let mut ops: Vec<&str> = Vec::new();
        for r in records {
            if !ops.contains(&r.op) {
                ops.push(r.op);
            }
        }
        for op in ops {
            let of_op: Vec<&Record> = records.iter().filter(|r| r.op == op).collect();
            let shape = format!("{}+{} {}", ndata, of_op[0].nparity, size_name(col_bytes));
            let cache_name = if cache == Cache::Hot { "hot" } else { "cold" };
            let mut line = format!("{cache_name:<5} {shape:<11} {op:<15}");
            for k in &self.kernels {
                match of_op.iter().find(|r| !r.is_isal && r.implementation == *k) {
                    Some(r) => line += &format!(" {:>10.1}{}", r.gbps, mark(r)),
                    None => line += &format!(" {:>11}", "-"),
                }
            }
            let best_cairn = of_op
                .iter()
                .filter(|r| !r.is_isal)
                .map(|r| r.gbps)
                .fold(0.0, f64::max);
            let best_isal = of_op
                .iter()
                .filter(|r| r.is_isal)
                .max_by(|a, b| a.gbps.total_cmp(&b.gbps));
            match best_isal {
                Some(r) => {
                    let entry = r.implementation.trim_start_matches("isal ");
                    line += &format!(
                        " | {:>5.1}{} {:<19} {:>10.2}x",
                        r.gbps,
                        mark(r),
                        entry,
                        best_cairn / r.gbps
                    );
                }
                None => line += " |      -",
            }
            println!("{line}");
        }
    }

    pub(crate) fn print_footer(&self) {
        if self.results.iter().any(|r| r.verified == Some(false)) {
            println!("\n! marks figures whose output differed from the reference");
        }
        println!();
        if self.isal.is_none() {
            println!("ISA-L not found: no peer figures");
        }
    }
}

fn mark(record: &Record) -> &'static str {
    if record.verified == Some(false) {
        "!"
    } else {
        " "
    }
}

fn size_name(bytes: usize) -> String {
    if bytes >= 1 << 20 && bytes.is_multiple_of(1 << 20) {
        format!("{}M", bytes >> 20)
    } else {
        format!("{}K", bytes >> 10)
    }
}

fn cpu_model() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|info| {
            info.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split(':').nth(1))
                .map(|m| m.trim().to_string())
        })
        .unwrap_or_else(|| std::env::consts::ARCH.to_string())
}

/// Current UTC time as `YYYY-MM-DDTHH:MM:SSZ` (civil-from-days, no date crate needed).
fn utc_now() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let (days, rem) = (secs / 86_400, secs % 86_400);
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}
