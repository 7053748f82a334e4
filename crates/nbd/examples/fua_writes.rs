//! 4 KiB random writes with NBD_CMD_FLAG_FUA at queue depth 1, for scripts/bench-nbd.sh:
//! fio's nbd engine never sets FUA (it passes no flags to `nbd_aio_pwrite`), so the
//! benchmark runs this for its FUA workload. Prints the result in the shape of fio's JSON
//! (`jobs[0].write.{iops,bw_bytes,lat_ns.mean}`), so the script reads both alike.
//!
//! `cargo run --release -p cairn-nbd --example fua_writes URI SIZE_BYTES SECONDS`

use std::time::{Duration, Instant};

use cairn_nbd::{parse_nbd_url, NbdClient};

const BLOCK: usize = 4096;

/// xorshift64*: a fixed sequence of offsets, the same for every target.
struct Offsets(u64);

impl Offsets {
    fn next_block(&mut self, blocks: u64) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) % blocks
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let (Some(uri), Some(size), Some(seconds)) = (
        args.get(1),
        args.get(2).and_then(|s| s.parse::<u64>().ok()),
        args.get(3).and_then(|s| s.parse::<f64>().ok()),
    ) else {
        eprintln!("usage: fua_writes URI SIZE_BYTES SECONDS");
        std::process::exit(2);
    };
    let url = parse_nbd_url(uri).unwrap_or_else(|e| {
        eprintln!("fua_writes: {uri}: {e}");
        std::process::exit(2);
    });
    let mut client = NbdClient::connect(&url).unwrap_or_else(|e| {
        eprintln!("fua_writes: cannot connect to {uri}: {e}");
        std::process::exit(1);
    });
    let blocks = (size.min(client.size()) / BLOCK as u64).max(1);
    let data: Vec<u8> = (0..BLOCK).map(|i| (i * 131 % 251) as u8).collect();
    let mut offsets = Offsets(0x9e37_79b9_7f4a_7c15);
    let (mut done, mut errors, mut busy) = (0u64, 0u64, Duration::ZERO);
    let start = Instant::now();
    while start.elapsed().as_secs_f64() < seconds {
        let offset = offsets.next_block(blocks) * BLOCK as u64;
        let t = Instant::now();
        if client.write_at(&data, offset, true).is_err() {
            errors += 1;
        }
        busy += t.elapsed();
        done += 1;
    }
    let elapsed = start.elapsed().as_secs_f64();
    let iops = done as f64 / elapsed;
    let mean_ns = busy.as_nanos() as f64 / done.max(1) as f64;
    client.disconnect();
    println!(
        "{{\"jobs\": [{{\"error\": {errors}, \"write\": {{\"iops\": {iops}, \"bw_bytes\": {}, \
         \"lat_ns\": {{\"mean\": {mean_ns}}}, \"total_ios\": {done}}}}}]}}",
        iops * BLOCK as f64
    );
}
