//! A misbehaving client against the NBD server, in one process: CONNECTIONS connections each
//! pipeline READS_PER_CONNECTION 32 MiB READs and never read a reply. Prints the serving
//! process's peak RSS (VmHWM from /proc/self/status) as a table and as JSON.
//!
//! `cargo run --release -p cairn-nbd --example rss_flood [CONNECTIONS] [READS_PER_CONNECTION] [SECONDS]`
//!
//! Bounded: sends at most CONNECTIONS × READS requests, holds them SECONDS, then closes.
//! Uses only the server's public API, so the same file runs against older servers.

use std::io::{Read, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::sync::Arc;
use std::time::{Duration, Instant};

use cairn_nbd::wire::*;
use cairn_nbd::{ExportTable, MemoryExport, NbdServer};

const READ_LEN: u32 = 32 << 20;
const EXPORT_SIZE: u64 = 1 << 30;

fn status_kib(field: &str) -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

fn connect(socket: &std::path::Path) -> std::io::Result<UnixStream> {
    let mut s = UnixStream::connect(socket)?;
    let mut greeting = [0u8; 18];
    s.read_exact(&mut greeting)?;
    let flags = CLIENT_FLAG_FIXED_NEWSTYLE | CLIENT_FLAG_NO_ZEROES;
    s.write_all(&flags.to_be_bytes())?;
    s.write_all(&encode_option(&ClientOption::ExportName("vol".into())))?;
    let mut answer = [0u8; 10];
    s.read_exact(&mut answer)?;
    Ok(s)
}

fn flood(mut s: UnixStream, reads: u64) {
    let mut burst = Vec::new();
    for i in 0..reads {
        let offset = i * u64::from(READ_LEN) % (EXPORT_SIZE - u64::from(READ_LEN));
        burst.extend_from_slice(&encode_request(&Request {
            flags: 0,
            command: Command::Read,
            cookie: i,
            offset,
            length: READ_LEN,
        }));
    }
    // Blocks once the server stops reading (backpressure); the socket is closed at exit.
    let _ = s.set_write_timeout(Some(Duration::from_secs(30)));
    let _ = s.write_all(&burst);
    std::thread::sleep(Duration::from_secs(3600));
}

fn main() -> std::io::Result<()> {
    let arg = |i: usize, default: u64| {
        std::env::args()
            .nth(i)
            .and_then(|a| a.parse().ok())
            .unwrap_or(default)
    };
    let (connections, reads, seconds) = (arg(1, 6), arg(2, 10), arg(3, 5));
    let dir = std::env::temp_dir().join(format!("cairn-rss-flood-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let socket = dir.join("nbd.sock");
    let export = Arc::new(MemoryExport::new(EXPORT_SIZE));
    let server = NbdServer::new(Arc::new(ExportTable::new().with("vol", export)));
    let running = server.spawn_unix(UnixListener::bind(&socket)?);
    let rss_before = status_kib("VmRSS:");
    for _ in 0..connections {
        let s = connect(&socket)?;
        std::thread::spawn(move || flood(s, reads));
    }
    let end = Instant::now() + Duration::from_secs(seconds);
    let mut rss_max = 0;
    while Instant::now() < end {
        rss_max = rss_max.max(status_kib("VmRSS:"));
        std::thread::sleep(Duration::from_millis(50));
    }
    let hwm = status_kib("VmHWM:");
    let threads = status_kib("Threads:");
    let asked = (connections * reads * u64::from(READ_LEN)) >> 20;
    println!("connections  reads/conn  asked_MiB  rss_before_MiB  peak_rss_MiB  threads");
    println!(
        "{connections:>11}  {reads:>10}  {asked:>9}  {:>14}  {:>12}  {threads:>7}",
        rss_before >> 10,
        hwm >> 10
    );
    println!(
        "{{\"connections\":{connections},\"reads_per_connection\":{reads},\"read_bytes\":{READ_LEN},\"asked_mib\":{asked},\"rss_before_mib\":{},\"peak_rss_mib\":{},\"sampled_rss_max_mib\":{},\"threads\":{threads}}}",
        rss_before >> 10,
        hwm >> 10,
        rss_max >> 10
    );
    drop(running);
    let _ = std::fs::remove_dir_all(&dir);
    std::process::exit(0)
}
