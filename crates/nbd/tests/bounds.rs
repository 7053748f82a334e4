//! Resource bounds of the server: a client that pipelines big READs and never reads the
//! replies is held back (the server stops reading its requests) instead of growing the
//! server's memory; idle connections cost one thread each; connections are capped.

use std::collections::HashMap;
use std::io::{Read, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use cairn_nbd::wire::*;
use cairn_nbd::{BlockExport, ExportTable, MemoryExport, NbdServer, ServerConfig};

const MIB: u64 = 1 << 20;
const SIZE: u64 = 64 * MIB;

/// Tests here count the process's threads: run them one at a time.
static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

/// An export whose every byte says where it is.
fn patterned() -> Arc<dyn BlockExport> {
    let export = MemoryExport::new(SIZE);
    let data: Vec<u8> = (0..SIZE).map(|i| (i * 7 + i / 4093) as u8).collect();
    export.write_at(&data, 0).unwrap();
    Arc::new(export)
}

fn start(
    export: Arc<dyn BlockExport>,
    config: ServerConfig,
) -> (
    tempfile::TempDir,
    std::path::PathBuf,
    NbdServer,
    cairn_nbd::RunningServer,
) {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("nbd.sock");
    let listener = UnixListener::bind(&socket).unwrap();
    let server =
        NbdServer::new(Arc::new(ExportTable::new().with("vol", export))).with_config(config);
    let running = server.spawn_unix(listener);
    (dir, socket, server, running)
}

/// Connects and negotiates the old-style way (EXPORT_NAME): transmission starts at once.
fn connect(socket: &Path) -> UnixStream {
    negotiate(UnixStream::connect(socket).unwrap())
}

fn negotiate(mut s: UnixStream) -> UnixStream {
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let mut greeting = [0u8; 18];
    s.read_exact(&mut greeting).unwrap();
    parse_greeting(&greeting).unwrap();
    let flags = CLIENT_FLAG_FIXED_NEWSTYLE | CLIENT_FLAG_NO_ZEROES;
    s.write_all(&flags.to_be_bytes()).unwrap();
    s.write_all(&encode_option(&ClientOption::ExportName("vol".into())))
        .unwrap();
    let mut answer = [0u8; 10];
    s.read_exact(&mut answer).unwrap();
    assert_eq!(u64::from_be_bytes(answer[..8].try_into().unwrap()), SIZE);
    s
}

fn threads() -> usize {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("Threads:"))
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}

fn wait_until(limit: Duration, mut ready: impl FnMut() -> bool) -> bool {
    let end = Instant::now() + limit;
    while Instant::now() < end {
        if ready() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    ready()
}

#[test]
fn undrained_pipelined_reads_are_held_to_the_budgets_then_all_answered() {
    let _serial = serial();
    let export = patterned();
    let expected = {
        let mut all = vec![0u8; SIZE as usize];
        export.read_at(&mut all, 0).unwrap();
        all
    };
    let config = ServerConfig {
        connection_reply_budget: 4 * MIB,
        server_reply_budget: 6 * MIB,
        ..ServerConfig::default()
    };
    let (_dir, socket, server, _running) = start(export, config);
    const CONNECTIONS: usize = 3;
    const READS: u64 = 40;
    const LEN: u32 = 1 << 20;
    let mut clients: Vec<UnixStream> = (0..CONNECTIONS).map(|_| connect(&socket)).collect();
    // Every request sent, no reply read: 120 MiB of replies asked for.
    for (c, s) in clients.iter_mut().enumerate() {
        let mut burst = Vec::new();
        for i in 0..READS {
            let offset = (c as u64 * READS + i) * 4096 % (SIZE - u64::from(LEN));
            burst.extend_from_slice(&encode_request(&Request {
                flags: 0,
                command: Command::Read,
                cookie: offset,
                offset,
                length: LEN,
            }));
        }
        s.write_all(&burst).unwrap();
    }
    // Both budgets fill up and stay full while nobody reads.
    let stats = || server.stats();
    assert!(wait_until(Duration::from_secs(10), || stats()
        .reply_bytes
        .used
        >= 4 * MIB));
    std::thread::sleep(Duration::from_millis(500));
    let held = stats();
    let per_reply = u64::from(LEN) + SIMPLE_REPLY_LEN as u64;
    // The server budget, plus one request per connection (which never waits for it).
    let bound = 6 * MIB + CONNECTIONS as u64 * per_reply;
    assert!(
        held.reply_bytes.peak <= bound,
        "server held {} bytes, bound {bound}",
        held.reply_bytes.peak
    );
    assert!(
        held.peak_connection_bytes <= 4 * MIB,
        "a connection held {} bytes, budget 4 MiB",
        held.peak_connection_bytes
    );
    assert!(held.reply_bytes.used >= 4 * per_reply, "{held:?}");
    // Drain one client after the other: the others, still not reading, hold the whole
    // server budget, yet each connection's next request gets its bytes (no starvation);
    // every reply arrives whole and right.
    let expected = Arc::new(expected);
    let drains: Vec<_> = clients
        .into_iter()
        .map(|mut s| {
            let expected = expected.clone();
            std::thread::scope(|_| {
                let mut seen = HashMap::new();
                for _ in 0..READS {
                    let mut head = [0u8; SIMPLE_REPLY_LEN];
                    s.read_exact(&mut head).unwrap();
                    let reply = parse_simple_reply(&head).unwrap();
                    assert_eq!(reply.error, 0);
                    let mut data = vec![0u8; LEN as usize];
                    s.read_exact(&mut data).unwrap();
                    let at = reply.cookie as usize;
                    assert!(
                        data == expected[at..at + LEN as usize],
                        "READ at {at} wrong"
                    );
                    assert!(seen.insert(reply.cookie, ()).is_none());
                }
            })
        })
        .collect();
    assert_eq!(drains.len(), CONNECTIONS);
    assert!(wait_until(Duration::from_secs(5), || stats()
        .reply_bytes
        .used
        == 0));
    assert!(stats().reply_bytes.peak <= bound);
}

#[test]
fn a_read_larger_than_the_budget_runs_alone() {
    let _serial = serial();
    let config = ServerConfig {
        connection_reply_budget: MIB,
        server_reply_budget: MIB,
        ..ServerConfig::default()
    };
    let (_dir, socket, server, _running) = start(patterned(), config);
    let mut s = connect(&socket);
    for cookie in 0..3u64 {
        s.write_all(&encode_request(&Request {
            flags: 0,
            command: Command::Read,
            cookie,
            offset: cookie * 4096,
            length: 8 << 20,
        }))
        .unwrap();
    }
    for _ in 0..3 {
        let mut head = [0u8; SIMPLE_REPLY_LEN];
        s.read_exact(&mut head).unwrap();
        assert_eq!(parse_simple_reply(&head).unwrap().error, 0);
        let mut data = vec![0u8; 8 << 20];
        s.read_exact(&mut data).unwrap();
    }
    // One at a time: never two 8 MiB replies held together.
    let peak = server.stats().reply_bytes.peak;
    assert!(peak <= (8 << 20) + 64, "peak {peak}");
}

#[test]
fn idle_connections_cost_one_thread_each() {
    let _serial = serial();
    let (_dir, socket, server, _running) = start(patterned(), ServerConfig::default());
    let before = threads();
    // Connected 50 at a time before negotiating, so one accept poll takes in many.
    let mut clients = Vec::new();
    for _ in 0..4 {
        let opened: Vec<UnixStream> = (0..50)
            .map(|_| UnixStream::connect(&socket).unwrap())
            .collect();
        clients.extend(opened.into_iter().map(negotiate));
    }
    assert!(wait_until(Duration::from_secs(5), || server
        .stats()
        .connections
        == 200));
    let with_idle = threads();
    assert!(
        with_idle <= before + 200 + 4,
        "200 idle connections took {} threads",
        with_idle - before
    );
    drop(clients);
    assert!(wait_until(Duration::from_secs(5), || threads() <= before + 4));
}

#[test]
fn connections_beyond_the_cap_are_closed_at_accept() {
    let _serial = serial();
    let config = ServerConfig {
        max_connections: 4,
        ..ServerConfig::default()
    };
    let (_dir, socket, server, _running) = start(patterned(), config);
    let served: Vec<UnixStream> = (0..4).map(|_| connect(&socket)).collect();
    assert!(wait_until(Duration::from_secs(5), || server
        .stats()
        .connections
        == 4));
    let mut extra = UnixStream::connect(&socket).unwrap();
    extra
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let mut byte = [0u8; 1];
    assert_eq!(extra.read(&mut byte).unwrap(), 0, "refused with EOF");
    // (The count may land just after the close.)
    assert!(wait_until(Duration::from_secs(5), || server
        .stats()
        .refused_connections
        == 1));
    // Once one leaves, a new client is served.
    drop(served);
    assert!(wait_until(Duration::from_secs(5), || server
        .stats()
        .connections
        == 0
        || server.stats().connections < 4));
    std::thread::sleep(Duration::from_millis(300));
    let _again = connect(&socket);
}

/// An export whose reads take `delay` each, side by side (a device with latency that serves
/// requests in parallel: an SSD, a remote leaf, a disk reordering its queue); counts the
/// reads running at once.
struct SlowReads {
    inner: Arc<dyn BlockExport>,
    delay: Duration,
    running: std::sync::atomic::AtomicUsize,
    most: std::sync::atomic::AtomicUsize,
}

impl BlockExport for SlowReads {
    fn size(&self) -> u64 {
        self.inner.size()
    }
    fn read_only(&self) -> bool {
        self.inner.read_only()
    }
    fn preferred_block_size(&self) -> u32 {
        self.inner.preferred_block_size()
    }
    fn read_at(&self, buf: &mut [u8], offset: u64) -> std::io::Result<()> {
        use std::sync::atomic::Ordering::SeqCst;
        let now = self.running.fetch_add(1, SeqCst) + 1;
        self.most.fetch_max(now, SeqCst);
        std::thread::sleep(self.delay);
        self.running.fetch_sub(1, SeqCst);
        self.inner.read_at(buf, offset)
    }
    fn write_at(&self, buf: &[u8], offset: u64) -> std::io::Result<()> {
        self.inner.write_at(buf, offset)
    }
    fn flush(&self) -> std::io::Result<()> {
        self.inner.flush()
    }
    fn trim(&self, offset: u64, len: u64) -> std::io::Result<()> {
        self.inner.trim(offset, len)
    }
    fn write_zeroes(&self, offset: u64, len: u64, may_punch: bool) -> std::io::Result<()> {
        self.inner.write_zeroes(offset, len, may_punch)
    }
    fn block_status(&self, offset: u64, len: u64) -> std::io::Result<Vec<(u32, u32)>> {
        self.inner.block_status(offset, len)
    }
}

/// A client keeping 32 reads in flight on one connection: while requests are slow the
/// device sees many of them at once (up to `workers_when_slow`), not just
/// `workers_per_connection`; with 4 workers for every request, 32 reads of 20 ms would
/// take 8 rounds of the device's latency per 32.
#[test]
fn slow_requests_reach_the_device_side_by_side() {
    let _serial = serial();
    let slow = Arc::new(SlowReads {
        inner: patterned(),
        delay: Duration::from_millis(20),
        running: Default::default(),
        most: Default::default(),
    });
    let (_dir, socket, _server, _running) = start(slow.clone(), ServerConfig::default());
    let mut s = connect(&socket);
    const IN_FLIGHT: u64 = 32;
    const READS: u64 = 256;
    let request = |cookie: u64| {
        encode_request(&Request {
            flags: 0,
            command: Command::Read,
            cookie,
            offset: cookie * 4096,
            length: 4096,
        })
    };
    for cookie in 0..IN_FLIGHT {
        s.write_all(&request(cookie)).unwrap();
    }
    for next in IN_FLIGHT..READS + IN_FLIGHT {
        let mut head = [0u8; SIMPLE_REPLY_LEN];
        s.read_exact(&mut head).unwrap();
        assert_eq!(parse_simple_reply(&head).unwrap().error, 0);
        let mut data = [0u8; 4096];
        s.read_exact(&mut data).unwrap();
        if next < READS {
            s.write_all(&request(next)).unwrap();
        }
    }
    let most = slow.most.load(std::sync::atomic::Ordering::SeqCst);
    let limits = ServerConfig::default();
    assert!(
        most > 2 * limits.workers_per_connection && most <= limits.workers_when_slow + 1,
        "{most} reads ran at once"
    );
}
