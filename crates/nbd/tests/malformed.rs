//! Bad input over a raw socket: the server answers with the spec's errors, or closes the
//! one connection, and keeps serving everybody else. It never panics and never hangs.

mod common;

use std::collections::HashSet;
use std::io::{self, Read, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use cairn_nbd::wire::*;
use cairn_nbd::{BlockExport, MemoryExport};
use common::*;

const SIZE: u64 = 16 << 20;

struct Raw {
    s: UnixStream,
}

impl Raw {
    fn connect(path: &Path) -> Raw {
        let s = UnixStream::connect(path).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        Raw { s }
    }
    fn send(&mut self, bytes: &[u8]) {
        self.s.write_all(bytes).unwrap();
    }
    fn read_n(&mut self, n: usize) -> Vec<u8> {
        let mut buf = vec![0u8; n];
        self.s.read_exact(&mut buf).unwrap();
        buf
    }
    fn greet(&mut self, client_flags: u32) {
        let flags = parse_greeting(&self.read_n(18)).unwrap();
        assert_eq!(
            flags,
            HANDSHAKE_FLAG_FIXED_NEWSTYLE | HANDSHAKE_FLAG_NO_ZEROES
        );
        self.send(&client_flags.to_be_bytes());
    }
    fn option_reply(&mut self) -> (OptionReplyHeader, Vec<u8>) {
        let h = parse_option_reply_header(&self.read_n(OPTION_REPLY_HEADER_LEN)).unwrap();
        let data = self.read_n(h.length as usize);
        (h, data)
    }
    /// Sends an option and returns the reply types up to the final one.
    fn option(&mut self, opt: &ClientOption) -> Vec<u32> {
        self.send(&encode_option(opt));
        self.reply_types()
    }
    fn reply_types(&mut self) -> Vec<u32> {
        let mut types = Vec::new();
        loop {
            let (h, _) = self.option_reply();
            types.push(h.reply_type);
            if h.reply_type == REP_ACK || h.reply_type & (1 << 31) != 0 {
                return types;
            }
        }
    }
    /// Full handshake into transmission; returns the transmission flags.
    fn open(path: &Path, name: &str, structured: bool) -> Raw {
        let mut c = Raw::connect(path);
        c.greet(CLIENT_FLAG_FIXED_NEWSTYLE | CLIENT_FLAG_NO_ZEROES);
        if structured {
            assert_eq!(c.option(&ClientOption::StructuredReply), vec![REP_ACK]);
            let set = ClientOption::SetMetaContext {
                name: name.into(),
                queries: vec![BASE_ALLOCATION.into()],
            };
            assert_eq!(c.option(&set), vec![REP_META_CONTEXT, REP_ACK]);
        }
        let go = ClientOption::Go {
            name: name.into(),
            requests: vec![INFO_BLOCK_SIZE],
        };
        assert_eq!(c.option(&go), vec![REP_INFO, REP_INFO, REP_ACK]);
        c
    }
    fn request(&mut self, command: Command, flags: u16, cookie: u64, offset: u64, length: u32) {
        let req = Request {
            flags,
            command,
            cookie,
            offset,
            length,
        };
        self.send(&encode_request(&req));
    }
    fn simple(&mut self) -> SimpleReply {
        parse_simple_reply(&self.read_n(SIMPLE_REPLY_LEN)).unwrap()
    }
    /// A command without data; returns the error of its (simple) reply.
    fn status_of(&mut self, command: Command, flags: u16, offset: u64, length: u32) -> u32 {
        self.request(command, flags, 7, offset, length);
        let r = self.simple();
        assert_eq!(r.cookie, 7);
        r.error
    }
    fn write(&mut self, flags: u16, offset: u64, data: &[u8]) -> u32 {
        self.request(Command::Write, flags, 9, offset, data.len() as u32);
        self.send(data);
        self.simple().error
    }
    fn read(&mut self, offset: u64, len: u32) -> Result<Vec<u8>, u32> {
        self.request(Command::Read, 0, 11, offset, len);
        let r = self.simple();
        if r.error != 0 {
            return Err(r.error);
        }
        Ok(self.read_n(len as usize))
    }
    /// Whether the server closed the connection (EOF or reset) within the read timeout.
    fn closed(&mut self) -> bool {
        let mut buf = [0u8; 64];
        loop {
            match self.s.read(&mut buf) {
                Ok(0) => return true,
                Ok(_) => continue,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return false,
                Err(_) => return true,
            }
        }
    }
}

fn memory(size: u64) -> Arc<dyn BlockExport> {
    Arc::new(MemoryExport::new(size))
}

/// Checks a server still serves: a write and read back on a fresh connection.
fn still_serving(path: &Path) {
    let mut c = Raw::open(path, "disk", false);
    assert_eq!(c.write(0, 4096, &[0x5a; 4096]), 0);
    assert_eq!(c.read(4096, 4096).unwrap(), vec![0x5a; 4096]);
}

#[test]
fn garbage_closes_only_that_connection() {
    let served = serve_unix(vec![("disk", memory(SIZE))]);
    let path = served.socket.as_path();

    let mut c = Raw::connect(path);
    c.greet(0x80); // unknown client flag
    assert!(c.closed(), "unknown client flags must close");

    let mut c = Raw::connect(path);
    c.greet(CLIENT_FLAG_FIXED_NEWSTYLE);
    c.send(&[0xee; 16]); // option header with a bad magic
    assert!(c.closed(), "bad option magic must close");

    let mut c = Raw::connect(path);
    c.greet(CLIENT_FLAG_FIXED_NEWSTYLE);
    let mut huge = IHAVEOPT.to_be_bytes().to_vec();
    huge.extend_from_slice(&OPT_GO.to_be_bytes());
    huge.extend_from_slice(&u32::MAX.to_be_bytes());
    c.send(&huge); // option length of 4 GiB
    assert!(c.closed(), "oversized option must close");

    let mut c = Raw::open(path, "disk", false);
    c.send(&[0xab; REQUEST_LEN]); // request with a bad magic
    assert!(c.closed(), "bad request magic must close");

    still_serving(path);
}

#[test]
fn option_errors_follow_the_spec() {
    let served = serve_unix(vec![("disk", memory(SIZE))]);
    let mut c = Raw::connect(&served.socket);
    c.greet(CLIENT_FLAG_FIXED_NEWSTYLE | CLIENT_FLAG_NO_ZEROES);
    let unknown = ClientOption::Unknown { option: 99 };
    assert_eq!(c.option(&unknown), vec![REP_ERR_UNSUP]);
    // A server without TLS refuses STARTTLS by policy (NBD spec, NOTLS mode).
    assert_eq!(c.option(&ClientOption::StartTls), vec![REP_ERR_POLICY]);
    let missing = ClientOption::Info {
        name: "nope".into(),
        requests: vec![],
    };
    assert_eq!(c.option(&missing), vec![REP_ERR_UNKNOWN]);
    // GO whose name length runs past the data.
    let mut bad = IHAVEOPT.to_be_bytes().to_vec();
    bad.extend_from_slice(&OPT_GO.to_be_bytes());
    bad.extend_from_slice(&4u32.to_be_bytes());
    bad.extend_from_slice(&100u32.to_be_bytes());
    c.send(&bad);
    assert_eq!(c.reply_types(), vec![REP_ERR_INVALID]);
    let meta = ClientOption::SetMetaContext {
        name: "disk".into(),
        queries: vec![BASE_ALLOCATION.into()],
    };
    assert_eq!(
        c.option(&meta),
        vec![REP_ERR_INVALID],
        "meta context needs structured replies"
    );
    assert_eq!(c.option(&ClientOption::List), vec![REP_SERVER, REP_ACK]);
    assert_eq!(c.option(&ClientOption::StructuredReply), vec![REP_ACK]);
    let list = ClientOption::ListMetaContext {
        name: "disk".into(),
        queries: vec![],
    };
    assert_eq!(c.option(&list), vec![REP_META_CONTEXT, REP_ACK]);
    let go = ClientOption::Go {
        name: "disk".into(),
        requests: vec![],
    };
    assert_eq!(c.option(&go), vec![REP_INFO, REP_INFO, REP_ACK]);
    // No context was selected: BLOCK_STATUS is refused with a structured ERROR chunk.
    c.request(Command::BlockStatus, 0, 3, 0, 4096);
    let h = parse_chunk_header(&c.read_n(STRUCTURED_HEADER_LEN)).unwrap();
    assert_eq!(
        (h.chunk_type, h.flags, h.cookie),
        (REPLY_TYPE_ERROR, REPLY_FLAG_DONE, 3)
    );
    let (err, _) = parse_error_payload(&c.read_n(h.length as usize)).unwrap();
    assert_eq!(err, NBD_EINVAL);

    let mut c = Raw::connect(&served.socket);
    c.greet(CLIENT_FLAG_FIXED_NEWSTYLE);
    assert_eq!(c.option(&ClientOption::Abort), vec![REP_ACK]);
    assert!(c.closed());
}

#[test]
fn bad_requests_get_errors_and_the_stream_stays_in_sync() {
    let served = serve_unix(vec![("disk", memory(SIZE))]);
    let mut c = Raw::open(&served.socket, "disk", false);
    assert_eq!(
        c.read(SIZE - 512, 1024),
        Err(NBD_EINVAL),
        "read past the end"
    );
    assert_eq!(
        c.read(u64::MAX - 10, 512),
        Err(NBD_EINVAL),
        "offset overflow"
    );
    assert_eq!(
        c.write(0, SIZE - 512, &[1; 1024]),
        NBD_ENOSPC,
        "write past the end"
    );
    assert_eq!(
        c.status_of(Command::Trim, 0, SIZE, 4096),
        NBD_EINVAL,
        "trim past the end"
    );
    assert_eq!(c.status_of(Command::WriteZeroes, 0, SIZE, 1), NBD_ENOSPC);
    assert_eq!(
        c.read(0, MAX_PAYLOAD + 1),
        Err(NBD_EOVERFLOW),
        "oversized read"
    );
    let big = vec![7u8; MAX_PAYLOAD as usize + 4096];
    assert_eq!(
        c.write(0, 0, &big),
        NBD_EOVERFLOW,
        "oversized write (payload drained)"
    );
    assert_eq!(
        c.status_of(Command::Unknown(42), 0, 0, 0),
        NBD_EINVAL,
        "unknown command"
    );
    assert_eq!(
        c.status_of(Command::Cache, 0, 0, 4096),
        NBD_EINVAL,
        "CACHE is not offered"
    );
    assert_eq!(
        c.status_of(Command::Flush, CMD_FLAG_FUA, 0, 0),
        NBD_EINVAL,
        "bad flag"
    );
    assert_eq!(
        c.status_of(Command::BlockStatus, 0, 0, 4096),
        NBD_EINVAL,
        "no context"
    );
    assert_eq!(
        c.write(CMD_FLAG_NO_HOLE, 0, &[1; 512]),
        NBD_EINVAL,
        "flag not for WRITE"
    );
    // Still in sync: good requests work on the same connection.
    assert_eq!(c.write(CMD_FLAG_FUA, 8192, &[3; 8192]), 0);
    assert_eq!(c.read(8192, 8192).unwrap(), vec![3; 8192]);
    let zero = CMD_FLAG_NO_HOLE | CMD_FLAG_FAST_ZERO;
    assert_eq!(c.status_of(Command::WriteZeroes, zero, 8192, 4096), 0);
    assert_eq!(c.read(8192, 4096).unwrap(), vec![0; 4096]);
    assert_eq!(c.status_of(Command::Flush, 0, 0, 0), 0);
    c.request(Command::Disconnect, 0, 1, 0, 0);
    assert!(c.closed());
}

/// MemoryExport without fast zeroing.
struct SlowZero(MemoryExport);

impl BlockExport for SlowZero {
    fn size(&self) -> u64 {
        self.0.size()
    }
    fn read_only(&self) -> bool {
        false
    }
    fn preferred_block_size(&self) -> u32 {
        self.0.preferred_block_size()
    }
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        self.0.read_at(buf, offset)
    }
    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        self.0.write_at(buf, offset)
    }
    fn flush(&self) -> io::Result<()> {
        Ok(())
    }
    fn trim(&self, offset: u64, len: u64) -> io::Result<()> {
        self.0.trim(offset, len)
    }
    fn write_zeroes(&self, offset: u64, len: u64, may_punch: bool) -> io::Result<()> {
        self.0.write_zeroes(offset, len, may_punch)
    }
    fn block_status(&self, offset: u64, len: u64) -> io::Result<Vec<(u32, u32)>> {
        self.0.block_status(offset, len)
    }
}

#[test]
fn read_only_and_fast_zero_refusals() {
    let ro: Arc<dyn BlockExport> = Arc::new(MemoryExport::new(SIZE).read_only(true));
    let slow: Arc<dyn BlockExport> = Arc::new(SlowZero(MemoryExport::new(SIZE)));
    let served = serve_unix(vec![("ro", ro), ("slow", slow)]);
    let mut c = Raw::open(&served.socket, "ro", false);
    assert_eq!(c.write(0, 0, &[1; 512]), NBD_EPERM);
    assert_eq!(c.status_of(Command::Trim, 0, 0, 4096), NBD_EPERM);
    assert_eq!(c.status_of(Command::WriteZeroes, 0, 0, 4096), NBD_EPERM);
    assert_eq!(c.read(0, 512).unwrap(), vec![0; 512]);
    let mut c = Raw::open(&served.socket, "slow", false);
    assert_eq!(
        c.status_of(Command::WriteZeroes, CMD_FLAG_FAST_ZERO, 0, 4096),
        NBD_ENOTSUP
    );
    assert_eq!(c.status_of(Command::WriteZeroes, 0, 0, 4096), 0);
}

#[test]
fn structured_replies_and_block_status() {
    let export = Arc::new(MemoryExport::new(SIZE));
    export.write_at(&[9; 4096], 1 << 20).unwrap();
    let served = serve_unix(vec![("disk", export)]);
    let mut c = Raw::open(&served.socket, "disk", true);
    c.request(Command::Read, 0, 5, 1 << 20, 4096);
    let h = parse_chunk_header(&c.read_n(STRUCTURED_HEADER_LEN)).unwrap();
    assert_eq!(
        (h.chunk_type, h.flags, h.cookie, h.length),
        (REPLY_TYPE_OFFSET_DATA, REPLY_FLAG_DONE, 5, 8 + 4096)
    );
    let payload = c.read_n(h.length as usize);
    assert_eq!(payload[..8], (1u64 << 20).to_be_bytes());
    assert!(payload[8..].iter().all(|&b| b == 9));
    c.request(Command::Read, 0, 6, SIZE, 1);
    let h = parse_chunk_header(&c.read_n(STRUCTURED_HEADER_LEN)).unwrap();
    assert_eq!((h.chunk_type, h.cookie), (REPLY_TYPE_ERROR, 6));
    assert_eq!(
        parse_error_payload(&c.read_n(h.length as usize)).unwrap().0,
        NBD_EINVAL
    );
    c.request(Command::BlockStatus, 0, 8, 0, 2 << 20);
    let h = parse_chunk_header(&c.read_n(STRUCTURED_HEADER_LEN)).unwrap();
    assert_eq!(
        (h.chunk_type, h.flags),
        (REPLY_TYPE_BLOCK_STATUS, REPLY_FLAG_DONE)
    );
    let (id, extents) = parse_block_status_payload(&c.read_n(h.length as usize)).unwrap();
    let chunk = cairn_nbd::export::MEMORY_CHUNK as u32;
    assert_eq!(id, 1);
    assert_eq!(
        extents,
        vec![(1 << 20, 3), (chunk, 0), ((1 << 20) - chunk, 3)]
    );
    c.request(Command::BlockStatus, CMD_FLAG_REQ_ONE, 9, 0, 2 << 20);
    let h = parse_chunk_header(&c.read_n(STRUCTURED_HEADER_LEN)).unwrap();
    let (_, extents) = parse_block_status_payload(&c.read_n(h.length as usize)).unwrap();
    assert_eq!(extents, vec![(1 << 20, 3)]);
}

#[test]
fn many_requests_in_flight_all_answered() {
    let served = serve_unix(vec![("disk", memory(SIZE))]);
    let mut c = Raw::open(&served.socket, "disk", false);
    let n = 200u64;
    for i in 0..n {
        c.request(
            Command::Write,
            CMD_FLAG_FUA * (i % 2) as u16,
            i,
            i * 4096,
            4096,
        );
        c.send(&[i as u8; 4096]);
    }
    let cookies: HashSet<u64> = (0..n)
        .map(|_| {
            let r = c.simple();
            assert_eq!(r.error, 0);
            r.cookie
        })
        .collect();
    assert_eq!(cookies.len(), n as usize);
    for i in 0..n {
        c.request(Command::Read, 0, 1000 + i, i * 4096, 4096);
    }
    for _ in 0..n {
        let r = c.simple();
        let i = r.cookie - 1000;
        assert_eq!(c.read_n(4096), vec![i as u8; 4096]);
    }
}

#[test]
fn clients_vanishing_mid_request_do_not_hurt_the_server() {
    let served = serve_unix(vec![("disk", memory(SIZE))]);
    let path = served.socket.as_path();
    {
        let mut c = Raw::open(path, "disk", false);
        c.request(Command::Write, 0, 1, 0, 1 << 20);
        c.send(&[1; 1000]); // then vanish mid-payload
    }
    {
        let mut c = Raw::open(path, "disk", false);
        c.send(
            &encode_request(&Request {
                flags: 0,
                command: Command::Read,
                cookie: 1,
                offset: 0,
                length: 8,
            })[..10],
        );
    }
    {
        let mut c = Raw::connect(path);
        c.greet(CLIENT_FLAG_FIXED_NEWSTYLE);
        c.send(&IHAVEOPT.to_be_bytes()); // vanish mid option header
    }
    {
        // Many reads queued, then gone before reading the replies.
        let mut c = Raw::open(path, "disk", false);
        for i in 0..64 {
            c.request(Command::Read, 0, i, 0, 1 << 20);
        }
    }
    still_serving(path);
}

#[test]
fn stop_is_bounded_even_with_idle_clients() {
    let mut served = serve_unix(vec![("disk", memory(SIZE))]);
    let mut idle_in_negotiation = Raw::connect(&served.socket);
    idle_in_negotiation.greet(CLIENT_FLAG_FIXED_NEWSTYLE);
    let mut idle_in_transmission = Raw::open(&served.socket, "disk", false);
    // A client that queues many big reads and never reads the replies: workers block
    // writing to it until the stop shuts its socket down.
    let mut not_reading = Raw::open(&served.socket, "disk", false);
    for i in 0..32 {
        not_reading.request(Command::Read, 0, i, 0, 1 << 20);
    }
    std::thread::sleep(Duration::from_millis(300));
    let started = Instant::now();
    served.server.take().unwrap().stop().unwrap();
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "stop took {:?}",
        started.elapsed()
    );
    assert!(idle_in_negotiation.closed());
    assert!(idle_in_transmission.closed());
}

#[test]
fn export_name_for_old_clients() {
    let served = serve_unix(vec![("disk", memory(SIZE))]);
    for no_zeroes in [true, false] {
        let mut c = Raw::connect(&served.socket);
        let flags = if no_zeroes { CLIENT_FLAG_NO_ZEROES } else { 0 };
        c.greet(CLIENT_FLAG_FIXED_NEWSTYLE | flags);
        c.send(&encode_option(&ClientOption::ExportName("disk".into())));
        let answer = c.read_n(10);
        assert_eq!(answer[..8], SIZE.to_be_bytes());
        let tflags = u16::from_be_bytes([answer[8], answer[9]]);
        assert!(tflags & FLAG_HAS_FLAGS != 0 && tflags & FLAG_CAN_MULTI_CONN != 0);
        if !no_zeroes {
            assert_eq!(c.read_n(124), vec![0; 124]);
        }
        assert_eq!(c.write(0, 0, &[8; 512]), 0);
        assert_eq!(c.read(0, 512).unwrap(), vec![8; 512]);
    }
    // An unknown name cannot be refused politely with EXPORT_NAME: the server closes.
    let mut c = Raw::connect(&served.socket);
    c.greet(CLIENT_FLAG_FIXED_NEWSTYLE);
    c.send(&encode_option(&ClientOption::ExportName("nope".into())));
    assert!(c.closed());
}

/// MemoryExport whose writes take a while, counting how many run at once.
struct SlowWrites {
    inner: MemoryExport,
    running: std::sync::atomic::AtomicUsize,
    most: std::sync::atomic::AtomicUsize,
}

impl BlockExport for SlowWrites {
    fn size(&self) -> u64 {
        self.inner.size()
    }
    fn read_only(&self) -> bool {
        false
    }
    fn preferred_block_size(&self) -> u32 {
        self.inner.preferred_block_size()
    }
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        self.inner.read_at(buf, offset)
    }
    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        use std::sync::atomic::Ordering::SeqCst;
        let now = self.running.fetch_add(1, SeqCst) + 1;
        self.most.fetch_max(now, SeqCst);
        std::thread::sleep(Duration::from_millis(30));
        self.running.fetch_sub(1, SeqCst);
        self.inner.write_at(buf, offset)
    }
    fn flush(&self) -> io::Result<()> {
        Ok(())
    }
    fn trim(&self, offset: u64, len: u64) -> io::Result<()> {
        self.inner.trim(offset, len)
    }
    fn write_zeroes(&self, offset: u64, len: u64, may_punch: bool) -> io::Result<()> {
        self.inner.write_zeroes(offset, len, may_punch)
    }
    fn block_status(&self, offset: u64, len: u64) -> io::Result<Vec<(u32, u32)>> {
        self.inner.block_status(offset, len)
    }
}

/// Requests that arrive together run on the workers at once, even when the workers were
/// idle (a request runs on the reading thread only when no other one has arrived).
#[test]
fn pipelined_slow_requests_run_in_parallel() {
    let export = Arc::new(SlowWrites {
        inner: MemoryExport::new(SIZE),
        running: Default::default(),
        most: Default::default(),
    });
    let served = serve_unix(vec![("disk", export.clone() as Arc<dyn BlockExport>)]);
    let mut c = Raw::open(&served.socket, "disk", false);
    let n = 8u64;
    // All requests in one send, so the server receives them together.
    let mut burst = Vec::new();
    for i in 0..n {
        burst.extend_from_slice(&encode_request(&Request {
            flags: 0,
            command: Command::Write,
            cookie: i,
            offset: i * 512,
            length: 512,
        }));
        burst.extend_from_slice(&[i as u8; 512]);
    }
    c.send(&burst);
    for _ in 0..n {
        assert_eq!(c.simple().error, 0);
    }
    let most = export.most.load(std::sync::atomic::Ordering::SeqCst);
    assert!(most > 1, "{n} pipelined writes ran one at a time");
}
