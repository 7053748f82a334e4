//! `cairn bench sync-writes URI…`: synchronous 4 KiB random writes over NBD, one at a
//! time — each with FUA, or each followed by FLUSH — against any NBD server, so a cairn
//! volume and `nbdkit file` are measured by the same client in one run
//! (scripts/bench-sync.sh). fio's nbd engine has no FUA; this client does.

use std::time::{Duration, Instant};

use cairn_nbd::client::NbdClient;
use cairn_nbd::url::parse_nbd_url;
use rand::{Rng, SeedableRng};
use serde::Serialize;

#[derive(clap::Args, Debug, Clone)]
pub struct SyncWritesBenchArgs {
    /// NBD URIs to measure (`LABEL=URI` names one in the output).
    #[arg(required = true)]
    pub uris: Vec<String>,
    /// Seconds per workload and URI.
    #[arg(long, default_value_t = 10.0)]
    pub seconds: f64,
    /// Bytes of the export written to (at most its size).
    #[arg(long, default_value_t = 1 << 30)]
    pub span: u64,
    /// Request size.
    #[arg(long, default_value_t = 4096)]
    pub block: usize,
    /// Which workloads: `fua`, `flush` or `both`.
    #[arg(long, default_value = "both", value_parser = ["fua", "flush", "both"])]
    pub mode: String,
    /// Print JSON instead of the table.
    #[arg(long)]
    pub json: bool,
    /// Also write the JSON to this file.
    #[arg(long)]
    pub json_out: Option<std::path::PathBuf>,
}

/// One workload on one export.
#[derive(Clone, Debug, Serialize)]
pub struct SyncResult {
    pub label: String,
    /// `fua` (WRITE with FUA) or `flush` (WRITE, then FLUSH).
    pub mode: &'static str,
    pub writes: u64,
    pub iops: f64,
    pub mean_us: f64,
    pub p50_us: f64,
    pub p99_us: f64,
}

pub fn run(args: &SyncWritesBenchArgs) -> Result<(), Box<dyn std::error::Error>> {
    let mut results = Vec::new();
    for spec in &args.uris {
        // `LABEL=URI`; a bare URI (which may hold `=` itself, `?socket=`) is its own label.
        let (label, uri) = match spec.split_once('=') {
            Some((l, u)) if !l.contains([':', '/', '?']) => (l, u),
            _ => (spec.as_str(), spec.as_str()),
        };
        for mode in ["fua", "flush"] {
            if args.mode == mode || args.mode == "both" {
                results.push(measure(label, uri, mode, args)?);
            }
        }
    }
    let text = serde_json::to_string_pretty(&results)?;
    if let Some(path) = &args.json_out {
        std::fs::write(path, &text)?;
    }
    if args.json {
        println!("{text}");
        return Ok(());
    }
    println!(
        "{:<16} {:<6} {:>9} {:>10} {:>9} {:>9}",
        "export", "mode", "writes", "IOPS", "p50 µs", "p99 µs"
    );
    for r in &results {
        println!(
            "{:<16} {:<6} {:>9} {:>10.0} {:>9.1} {:>9.1}",
            r.label, r.mode, r.writes, r.iops, r.p50_us, r.p99_us
        );
    }
    Ok(())
}

fn measure(
    label: &str,
    uri: &str,
    mode: &'static str,
    args: &SyncWritesBenchArgs,
) -> Result<SyncResult, Box<dyn std::error::Error>> {
    let url = parse_nbd_url(uri)?;
    let mut client = NbdClient::connect(&url)?;
    let slots = (client.size().min(args.span) / args.block as u64).max(1);
    let mut rng = rand::rngs::StdRng::seed_from_u64(7);
    let mut buf = vec![0u8; args.block];
    let mut latencies = Vec::new();
    let start = Instant::now();
    let budget = Duration::from_secs_f64(args.seconds);
    while start.elapsed() < budget {
        rng.fill(&mut buf[..]);
        let offset = rng.gen_range(0..slots) * args.block as u64;
        let t = Instant::now();
        let failed = |e| format!("{label}: {mode} write at {offset}: {e:?}");
        client
            .write_at(&buf, offset, mode == "fua")
            .map_err(failed)?;
        if mode == "flush" {
            client.flush().map_err(failed)?;
        }
        latencies.push(t.elapsed().as_secs_f64() * 1e6);
    }
    let elapsed = start.elapsed().as_secs_f64();
    client.disconnect();
    if latencies.is_empty() {
        return Err(format!("{label}: no write finished in {} s", args.seconds).into());
    }
    latencies.sort_by(f64::total_cmp);
    let at = |q: f64| latencies[((latencies.len() - 1) as f64 * q) as usize];
    let mean_us = latencies.iter().sum::<f64>() / latencies.len() as f64;
    Ok(SyncResult {
        label: label.to_string(),
        mode,
        writes: latencies.len() as u64,
        iops: latencies.len() as f64 / elapsed,
        mean_us,
        p50_us: at(0.5),
        p99_us: at(0.99),
    })
}
