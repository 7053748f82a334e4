//! The NBD server: accept loop, fixed-newstyle negotiation, and the transmission phase.
//!
//! One thread per connection reads requests in order; a small pool of workers per
//! connection runs them against the export, so several requests are in flight and replies
//! go out in completion order (each reply is written whole; see `Replies`).
//!
//! Resource bounds (a client that pipelines requests and never reads the replies must not
//! be able to grow the server without limit):
//! - Memory: before a READ or WRITE is taken in, the reading thread charges its bytes
//!   (READ: the reply it will produce; WRITE: the payload it is about to read) to the
//!   connection's budget (`ServerConfig::connection_reply_budget`) and then to the server's
//!   (`server_reply_budget`). The charge travels with the request and then with its reply
//!   and is given back only once the reply is written to the socket (or dropped because
//!   the connection broke). While a budget is spent the reading thread stops reading
//!   requests: backpressure through the socket, the connection stays open. So the bytes of
//!   requests and replies held are at most `server_reply_budget` in total and
//!   `connection_reply_budget` per connection, except that one request larger than a
//!   budget is let through alone (see `budget`), so nothing deadlocks.
//!   Not charged: 64 KiB read-ahead per connection, up to `MAX_SPARE_BUFFERS` reusable
//!   buffers of at most `MAX_SPARE_BYTES` per connection, and small status replies.
//! - Threads: a connection costs one thread while idle; workers are started only when
//!   requests wait for one, up to `workers_per_connection` (4) while requests are fast and
//!   `workers_when_slow` (32) for reads once they are slow: a read that waits for a device
//!   holds its worker, so the workers are the queue depth the devices see (a disk reorders 32
//!   queued reads, not 4). Started workers stay until the connection closes. At most
//!   `max_connections` connections are served at once; more are closed at accept (the
//!   client sees the connection end before the greeting) and counted in
//!   `ServerStats::refused_connections`. So threads ≤ 1 + max_connections × (1 +
//!   max(workers_per_connection, workers_when_slow)).

use std::io::{self, IoSlice, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener};
use std::os::unix::net::UnixListener;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc::{sync_channel, Receiver};
use std::sync::{Arc, Mutex};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use crate::access::ClientAllowList;
use crate::budget::{BudgetStats, ByteBudget, Permit};
pub use crate::connection::Connection;
use crate::export::{BlockExport, ExportSource};
use crate::tls::{self, TlsPolicy};
use crate::wire::*;

/// How often blocked reads and the accept loop look at the stop flag.
const POLL_INTERVAL: Duration = Duration::from_millis(100);
/// A client must finish option haggling within this time.
const NEGOTIATION_LIMIT: Duration = Duration::from_secs(30);
/// A client that takes no reply bytes for this long is dropped (its threads end).
const WRITE_LIMIT: Duration = Duration::from_secs(60);
/// A WRITE larger than the maximum payload is read and discarded (keeping the stream in
/// sync) up to this size; beyond it the connection is closed.
const MAX_DRAINED_PAYLOAD: u32 = 256 << 20;
/// Metadata context id of base:allocation.
const BASE_ALLOCATION_ID: u32 = 1;

/// Tuning of a server.
#[derive(Clone, Copy, Debug)]
pub struct ServerConfig {
    /// Worker threads per connection (requests in flight at once) while requests are fast.
    pub workers_per_connection: usize,
    /// The same for reads while requests are slow (they ran `FAST_REQUEST` or longer on
    /// average: disks, remote leaves). A read waiting for a device holds a worker, so this
    /// is the queue depth the devices can see from one connection: a disk reorders what
    /// is queued (NCQ), and a device with latency serves requests side by side.
    pub workers_when_slow: usize,
    /// Requests read ahead and queued for the workers.
    pub queue_depth: usize,
    /// Bytes of READ replies and WRITE payloads one connection may hold before its
    /// requests stop being read (one larger request still runs, alone).
    pub connection_reply_budget: u64,
    /// The same bound over all connections together.
    pub server_reply_budget: u64,
    /// Connections served at once; more are closed at accept.
    pub max_connections: usize,
}

/// Default of `ServerConfig::connection_reply_budget`: two maximum-size READs.
pub const DEFAULT_CONNECTION_REPLY_BUDGET: u64 = 64 << 20;
/// Default of `ServerConfig::server_reply_budget`.
pub const DEFAULT_SERVER_REPLY_BUDGET: u64 = 256 << 20;
/// Default of `ServerConfig::max_connections`.
pub const DEFAULT_MAX_CONNECTIONS: usize = 256;

impl Default for ServerConfig {
    fn default() -> ServerConfig {
        ServerConfig {
            workers_per_connection: 4,
            workers_when_slow: 32,
            queue_depth: 8,
            connection_reply_budget: DEFAULT_CONNECTION_REPLY_BUDGET,
            server_reply_budget: DEFAULT_SERVER_REPLY_BUDGET,
            max_connections: DEFAULT_MAX_CONNECTIONS,
        }
    }
}

/// What a server holds now and has held at most (for tests and benchmarks).
#[derive(Clone, Copy, Debug, Default)]
pub struct ServerStats {
    /// Request and reply bytes charged over all connections.
    pub reply_bytes: BudgetStats,
    /// The most bytes one connection held at once.
    pub peak_connection_bytes: u64,
    /// Connections being served now.
    pub connections: usize,
    /// Connections closed at accept because `max_connections` were being served.
    pub refused_connections: u64,
}

/// State shared by every connection of one server.
struct Shared {
    budget: Arc<ByteBudget>,
    peak_connection_bytes: AtomicU64,
    connections: AtomicUsize,
    refused_connections: AtomicU64,
}

impl Shared {
    fn new(config: &ServerConfig) -> Arc<Shared> {
        Arc::new(Shared {
            budget: ByteBudget::new(config.server_reply_budget),
            peak_connection_bytes: AtomicU64::new(0),
            connections: AtomicUsize::new(0),
            refused_connections: AtomicU64::new(0),
        })
    }
}

/// Called with the address of each TCP client the allow-list turns away.
pub type RefusedClient = Arc<dyn Fn(SocketAddr) + Send + Sync>;

/// An NBD server over an `ExportSource`.
#[derive(Clone)]
pub struct NbdServer {
    source: Arc<dyn ExportSource>,
    config: ServerConfig,
    shared: Arc<Shared>,
    tls: TlsPolicy,
    allowed: Arc<ClientAllowList>,
    on_refused: Option<RefusedClient>,
}

/// A server running on its own thread; stops (and joins) when dropped.
pub struct RunningServer {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<io::Result<()>>>,
}

impl RunningServer {
    /// Stops accepting, closes every connection, and waits for the threads.
    pub fn stop(mut self) -> io::Result<()> {
        self.stop_and_join()
    }
    fn stop_and_join(&mut self) -> io::Result<()> {
        self.stop.store(true, Ordering::SeqCst);
        match self.thread.take().map(|t| t.join()) {
            Some(Ok(result)) => result,
            Some(Err(_)) => Err(io::Error::other("server thread panicked")),
            None => Ok(()),
        }
    }
}

impl Drop for RunningServer {
    fn drop(&mut self) {
        let _ = self.stop_and_join();
    }
}

impl NbdServer {
    pub fn new(source: Arc<dyn ExportSource>) -> NbdServer {
        let config = ServerConfig::default();
        NbdServer {
            source,
            shared: Shared::new(&config),
            config,
            tls: TlsPolicy::off(),
            allowed: Arc::new(ClientAllowList::default()),
            on_refused: None,
        }
    }

    /// Offers or requires TLS (NBD_OPT_STARTTLS).
    pub fn with_tls(mut self, tls: TlsPolicy) -> NbdServer {
        self.tls = tls;
        self
    }

    /// Serves only TCP clients the list allows; others are closed at accept, and
    /// `on_refused` (if any) hears of each.
    pub fn with_allowed_clients(
        mut self,
        allowed: ClientAllowList,
        on_refused: Option<RefusedClient>,
    ) -> NbdServer {
        self.allowed = Arc::new(allowed);
        self.on_refused = on_refused;
        self
    }

    /// Sets the tuning (before serving: it starts a new budget and new counters).
    pub fn with_config(mut self, config: ServerConfig) -> NbdServer {
        self.config = ServerConfig {
            workers_per_connection: config.workers_per_connection.max(1),
            workers_when_slow: config.workers_when_slow.max(1),
            queue_depth: config.queue_depth.max(1),
            connection_reply_budget: config.connection_reply_budget.max(1),
            server_reply_budget: config.server_reply_budget.max(1),
            max_connections: config.max_connections.max(1),
        };
        self.shared = Shared::new(&self.config);
        self
    }

    /// Bytes held, connections served and refused.
    pub fn stats(&self) -> ServerStats {
        ServerStats {
            reply_bytes: self.shared.budget.stats(),
            peak_connection_bytes: self.shared.peak_connection_bytes.load(Ordering::SeqCst),
            connections: self.shared.connections.load(Ordering::SeqCst),
            refused_connections: self.shared.refused_connections.load(Ordering::SeqCst),
        }
    }

    /// Serves TCP clients until `stop` is set; then closes connections and returns.
    pub fn serve_tcp(&self, listener: TcpListener, stop: Arc<AtomicBool>) -> io::Result<()> {
        listener.set_nonblocking(true)?;
        self.accept_loop(&stop, || match listener.accept() {
            Ok((s, peer)) if !self.allowed.allows(peer.ip()) => {
                // Reported before the client sees the close: whoever acts on the refusal
                // (an admin, a test stopping the server) finds it in the log.
                if let Some(report) = &self.on_refused {
                    report(peer);
                }
                let _ = s.shutdown(Shutdown::Both);
                Ok(None)
            }
            Ok((s, _)) => {
                s.set_nonblocking(false)?;
                let _ = s.set_nodelay(true);
                Ok(Some(Box::new(s) as Box<dyn Connection>))
            }
            Err(e) => Err(e),
        })
    }

    /// Serves unix-socket clients until `stop` is set; then closes connections and returns.
    pub fn serve_unix(&self, listener: UnixListener, stop: Arc<AtomicBool>) -> io::Result<()> {
        listener.set_nonblocking(true)?;
        self.accept_loop(&stop, || match listener.accept() {
            Ok((s, _)) => {
                s.set_nonblocking(false)?;
                Ok(Some(Box::new(s) as Box<dyn Connection>))
            }
            Err(e) => Err(e),
        })
    }

    /// Runs `serve_tcp` on a new thread.
    pub fn spawn_tcp(&self, listener: TcpListener) -> RunningServer {
        let stop = Arc::new(AtomicBool::new(false));
        let (server, flag) = (self.clone(), stop.clone());
        let thread = thread::spawn(move || server.serve_tcp(listener, flag));
        RunningServer {
            stop,
            thread: Some(thread),
        }
    }

    /// Runs `serve_unix` on a new thread.
    pub fn spawn_unix(&self, listener: UnixListener) -> RunningServer {
        let stop = Arc::new(AtomicBool::new(false));
        let (server, flag) = (self.clone(), stop.clone());
        let thread = thread::spawn(move || server.serve_unix(listener, flag));
        RunningServer {
            stop,
            thread: Some(thread),
        }
    }

    fn accept_loop(
        &self,
        stop: &Arc<AtomicBool>,
        mut accept: impl FnMut() -> io::Result<Option<Box<dyn Connection>>>,
    ) -> io::Result<()> {
        // Each connection's thread, and a handle on its socket to shut it down at stop
        // (that unblocks workers stuck writing to a client that stopped reading).
        let mut connections: Vec<(JoinHandle<()>, Box<dyn Connection>)> = Vec::new();
        while !stop.load(Ordering::SeqCst) {
            connections.retain(|(thread, _)| !thread.is_finished());
            self.shared
                .connections
                .store(connections.len(), Ordering::SeqCst);
            match accept() {
                Ok(Some(conn)) if connections.len() >= self.config.max_connections => {
                    conn.shutdown_both();
                    self.shared
                        .refused_connections
                        .fetch_add(1, Ordering::SeqCst);
                }
                Ok(Some(conn)) => {
                    let Ok(handle) = conn.try_clone_connection() else {
                        continue;
                    };
                    let (server, flag) = (self.clone(), stop.clone());
                    connections.push((thread::spawn(move || server.handle(conn, flag)), handle));
                }
                Ok(None) => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => thread::sleep(POLL_INTERVAL),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                // Transient accept failures (aborted handshakes, fd exhaustion): back off.
                Err(_) => thread::sleep(POLL_INTERVAL),
            }
        }
        // Connections see the stop flag within a poll interval and end their sessions
        // themselves (TLS: close_notify); what is still running after a second (a client
        // that takes no reply bytes) is cut off.
        let ends_by = Instant::now() + Duration::from_secs(1);
        while Instant::now() < ends_by && connections.iter().any(|(t, _)| !t.is_finished()) {
            thread::sleep(Duration::from_millis(10));
        }
        for (_, socket) in &connections {
            socket.shutdown_both();
        }
        for (thread, _) in connections {
            let _ = thread.join();
        }
        Ok(())
    }

    /// Serves one already-accepted connection from handshake to close, on this thread.
    /// Never panics on client input; returns when the client leaves or `stop` is set.
    pub fn serve_connection(&self, conn: Box<dyn Connection>, stop: Arc<AtomicBool>) {
        self.handle(conn, stop)
    }

    fn handle(&self, conn: Box<dyn Connection>, stop: Arc<AtomicBool>) {
        if conn.set_read_poll(Some(POLL_INTERVAL)).is_err()
            || conn.set_write_limit(Some(WRITE_LIMIT)).is_err()
        {
            return;
        }
        let Ok(writer) = conn.try_clone_connection() else {
            return;
        };
        let mut input = Input::new(conn, stop, Some(Instant::now() + NEGOTIATION_LIMIT));
        let mut output = writer;
        if let Ok(Some(session)) = negotiate(&*self.source, &self.tls, &mut input, &mut output) {
            input.deadline = None;
            transmit(session, input, output, self.config, &self.shared);
        } else {
            // After STARTTLS the output is the TLS half: close_notify first.
            output.close_gracefully();
            output.shutdown_both();
        }
    }
}

/// Why a connection ends.
#[derive(Debug)]
enum Closed {
    /// The client closed the stream (possibly mid-message).
    Eof,
    /// The server is stopping.
    Stopped,
    /// A socket error.
    Io,
    /// The client broke the protocol in a way the stream cannot recover from.
    Protocol,
}

/// Bytes read from the socket ahead of need: one `recv` takes in several small requests
/// (a 4 KiB WRITE is a header and a payload: two reads without it).
const INPUT_BUFFER: usize = 64 << 10;

/// The reading half of a connection: blocking reads that still notice the stop flag.
struct Input {
    conn: Box<dyn Connection>,
    stop: Arc<AtomicBool>,
    /// When set, reads give up at this instant (bounds negotiation).
    deadline: Option<Instant>,
    /// Read-ahead: `buffer[start..end]` arrived and is not consumed yet.
    buffer: Box<[u8]>,
    start: usize,
    end: usize,
}

impl Input {
    fn new(conn: Box<dyn Connection>, stop: Arc<AtomicBool>, deadline: Option<Instant>) -> Input {
        Input {
            conn,
            stop,
            deadline,
            buffer: vec![0u8; INPUT_BUFFER].into_boxed_slice(),
            start: 0,
            end: 0,
        }
    }

    /// Whether bytes of a next message are already read ahead.
    fn has_buffered(&self) -> bool {
        self.start < self.end
    }

    fn read_full(&mut self, buf: &mut [u8]) -> Result<(), Closed> {
        let mut filled = 0;
        while filled < buf.len() {
            let Some(rest) = buf.get_mut(filled..) else {
                return Err(Closed::Protocol);
            };
            // What the read-ahead holds first.
            if self.start < self.end {
                let n = rest.len().min(self.end - self.start);
                let (Some(dst), Some(src)) = (
                    rest.get_mut(..n),
                    self.buffer.get(self.start..self.start + n),
                ) else {
                    return Err(Closed::Protocol);
                };
                dst.copy_from_slice(src);
                self.start += n;
                filled += n;
                continue;
            }
            // Large remainders go straight into place; small ones refill the read-ahead.
            if rest.len() >= self.buffer.len() {
                filled += receive(&mut *self.conn, &self.stop, self.deadline, rest)?;
            } else {
                let n = receive(&mut *self.conn, &self.stop, self.deadline, &mut self.buffer)?;
                (self.start, self.end) = (0, n);
            }
        }
        Ok(())
    }

    /// Some bytes (at least one): from the read-ahead, or else one read from the socket.
    fn read_some(&mut self, buf: &mut [u8]) -> Result<usize, Closed> {
        if self.start < self.end {
            let n = buf.len().min(self.end - self.start);
            let (Some(dst), Some(src)) = (
                buf.get_mut(..n),
                self.buffer.get(self.start..self.start + n),
            ) else {
                return Err(Closed::Protocol);
            };
            dst.copy_from_slice(src);
            self.start += n;
            return Ok(n);
        }
        receive(&mut *self.conn, &self.stop, self.deadline, buf)
    }

    fn read_vec(&mut self, len: usize) -> Result<Vec<u8>, Closed> {
        let mut buf = vec![0u8; len];
        self.read_full(&mut buf)?;
        Ok(buf)
    }

    /// Reads and throws away `len` bytes.
    fn discard(&mut self, len: u64) -> Result<(), Closed> {
        let mut scratch = vec![0u8; len.min(1 << 20) as usize];
        let mut left = len;
        while left > 0 {
            let n = left.min(scratch.len() as u64) as usize;
            self.read_full(scratch.get_mut(..n).ok_or(Closed::Protocol)?)?;
            left -= n as u64;
        }
        Ok(())
    }
}

/// One read from `conn` into `target` (at least one byte), waiting while the read polls
/// and giving up when `stop` is set or the deadline passes.
fn receive(
    conn: &mut dyn Connection,
    stop: &AtomicBool,
    deadline: Option<Instant>,
    target: &mut [u8],
) -> Result<usize, Closed> {
    loop {
        match conn.read(target) {
            Ok(0) => return Err(Closed::Eof),
            Ok(n) => return Ok(n),
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) =>
            {
                if stop.load(Ordering::SeqCst) {
                    return Err(Closed::Stopped);
                }
                if deadline.is_some_and(|d| Instant::now() >= d) {
                    return Err(Closed::Eof);
                }
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(_) => return Err(Closed::Io),
        }
    }
}

fn send(out: &mut Box<dyn Connection>, bytes: &[u8]) -> Result<(), Closed> {
    out.write_all(bytes).map_err(|_| Closed::Io)
}

// ---------------------------------------------------------------------------------------
// Negotiation

/// What negotiation agreed on.
struct Session {
    export: Arc<dyn BlockExport>,
    structured: bool,
    base_allocation: bool,
}

/// Negotiation state carried between options.
#[derive(Default)]
struct Haggle {
    /// NBD_OPT_STARTTLS succeeded: the rest goes over TLS.
    encrypted: bool,
    structured: bool,
    /// Export name and whether base:allocation was selected for it.
    meta: Option<(String, bool)>,
}

/// Transmission flags of an export.
pub fn transmission_flags(export: &dyn BlockExport) -> u16 {
    let base = FLAG_HAS_FLAGS | FLAG_SEND_FLUSH | FLAG_CAN_MULTI_CONN;
    if export.read_only() {
        base | FLAG_READ_ONLY
    } else {
        base | FLAG_SEND_FUA | FLAG_SEND_TRIM | FLAG_SEND_WRITE_ZEROES | FLAG_SEND_FAST_ZERO
    }
}

/// Block sizes advertised for an export: (min, preferred, max).
pub fn block_sizes(export: &dyn BlockExport) -> (u32, u32, u32) {
    let preferred = export.preferred_block_size();
    let preferred = if preferred.is_power_of_two() {
        preferred.clamp(MIN_BLOCK_SIZE, MAX_PAYLOAD)
    } else {
        4096
    };
    (MIN_BLOCK_SIZE, preferred, MAX_PAYLOAD)
}

fn negotiate(
    source: &dyn ExportSource,
    tls: &TlsPolicy,
    input: &mut Input,
    out: &mut Box<dyn Connection>,
) -> Result<Option<Session>, Closed> {
    send(
        out,
        &encode_greeting(HANDSHAKE_FLAG_FIXED_NEWSTYLE | HANDSHAKE_FLAG_NO_ZEROES),
    )?;
    let mut flags = [0u8; 4];
    input.read_full(&mut flags)?;
    let client_flags = u32::from_be_bytes(flags);
    if client_flags & !(CLIENT_FLAG_FIXED_NEWSTYLE | CLIENT_FLAG_NO_ZEROES) != 0 {
        return Err(Closed::Protocol);
    }
    let no_zeroes = client_flags & CLIENT_FLAG_NO_ZEROES != 0;
    let mut haggle = Haggle::default();
    loop {
        let mut header = [0u8; OPTION_HEADER_LEN];
        input.read_full(&mut header)?;
        let header = parse_option_header(&header).map_err(|_| Closed::Protocol)?;
        if header.length > MAX_OPTION_LENGTH {
            return Err(Closed::Protocol);
        }
        if tls.required() && !haggle.encrypted && refuse_in_plain_text(&header, input, out)? {
            continue;
        }
        let data = input.read_vec(header.length as usize)?;
        let option = match parse_option(header.option, &data) {
            Ok(o) => o,
            Err(e) => {
                reply_error(out, header.option, REP_ERR_INVALID, &e.to_string())?;
                continue;
            }
        };
        if option == ClientOption::StartTls {
            start_tls(tls, &mut haggle, input, out)?;
            continue;
        }
        match answer_option(source, &mut haggle, out, option, no_zeroes)? {
            Next::Continue => {}
            Next::Abort => return Ok(None),
            Next::Transmit(session) => return Ok(Some(session)),
        }
    }
}

/// FORCEDTLS before STARTTLS (NBD spec, "TLS support"): every option but
/// NBD_OPT_STARTTLS and NBD_OPT_ABORT is answered NBD_REP_ERR_TLS_REQD (its data read and
/// dropped), and NBD_OPT_EXPORT_NAME, which cannot be answered with an error, ends the
/// session. Whether the option was refused (else it goes on to be answered).
fn refuse_in_plain_text(
    header: &OptionHeader,
    input: &mut Input,
    out: &mut Box<dyn Connection>,
) -> Result<bool, Closed> {
    match header.option {
        OPT_STARTTLS | OPT_ABORT => Ok(false),
        OPT_EXPORT_NAME => Err(Closed::Protocol),
        other => {
            input.discard(u64::from(header.length))?;
            let msg = "this server requires TLS: send NBD_OPT_STARTTLS first (nbds:// URIs do)";
            reply_error(out, other, REP_ERR_TLS_REQD, msg)?;
            Ok(true)
        }
    }
}

/// NBD_OPT_STARTTLS (NBD spec, "TLS support"): NBD_REP_ACK, then the TLS handshake; every
/// byte after it goes over TLS, and what was negotiated in plain text is forgotten. A
/// second STARTTLS is NBD_REP_ERR_INVALID; without TLS it is NBD_REP_ERR_POLICY (NOTLS
/// mode). A failed handshake ends the session (the ACK is sent: no way back to plain).
fn start_tls(
    policy: &TlsPolicy,
    haggle: &mut Haggle,
    input: &mut Input,
    out: &mut Box<dyn Connection>,
) -> Result<(), Closed> {
    let code = OPT_STARTTLS;
    if haggle.encrypted {
        return reply_error(out, code, REP_ERR_INVALID, "TLS is already on");
    }
    let Some(config) = policy.config() else {
        let msg = "this server does not offer TLS (cairn serve --tls=on or --tls=require)";
        return reply_error(out, code, REP_ERR_POLICY, msg);
    };
    // The client must wait for the ACK; bytes it sent before it would otherwise be taken
    // as the start of the TLS stream (plaintext injected into the session).
    if input.has_buffered() {
        return Err(Closed::Protocol);
    }
    let mut session = tls::new_session(config).map_err(|_| Closed::Io)?;
    send(out, &encode_option_reply(code, REP_ACK, &[]))?;
    let mut receive = |buf: &mut [u8]| {
        input
            .read_some(buf)
            .map_err(|closed| io::Error::other(format!("{closed:?}")))
    };
    tls::handshake(&mut session, &mut receive, &mut **out).map_err(|_| Closed::Protocol)?;
    let reading = std::mem::replace(&mut input.conn, Box::new(Detached));
    let writing = std::mem::replace(out, Box::new(Detached));
    let (read_half, write_half) = tls::split(session, reading, writing);
    input.conn = Box::new(read_half);
    *out = Box::new(write_half);
    *haggle = Haggle {
        encrypted: true,
        ..Haggle::default()
    };
    Ok(())
}

/// Stands in for a connection for the moment it is moved into its TLS halves.
struct Detached;

impl Read for Detached {
    fn read(&mut self, _: &mut [u8]) -> io::Result<usize> {
        Err(io::ErrorKind::NotConnected.into())
    }
}

impl Write for Detached {
    fn write(&mut self, _: &[u8]) -> io::Result<usize> {
        Err(io::ErrorKind::NotConnected.into())
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl Connection for Detached {
    fn try_clone_connection(&self) -> io::Result<Box<dyn Connection>> {
        Err(io::ErrorKind::NotConnected.into())
    }
    fn shutdown_both(&self) {}
    fn set_read_poll(&self, _: Option<Duration>) -> io::Result<()> {
        Ok(())
    }
    fn set_write_limit(&self, _: Option<Duration>) -> io::Result<()> {
        Ok(())
    }
}

enum Next {
    Continue,
    Abort,
    Transmit(Session),
}

fn reply_error(
    out: &mut Box<dyn Connection>,
    option: u32,
    kind: u32,
    msg: &str,
) -> Result<(), Closed> {
    send(out, &encode_option_reply(option, kind, msg.as_bytes()))
}

/// Answers one option of the negotiation: what comes next (more options, the end, or
/// transmission with the chosen export).
fn answer_option(
    source: &dyn ExportSource,
    haggle: &mut Haggle,
    out: &mut Box<dyn Connection>,
    option: ClientOption,
    no_zeroes: bool,
) -> Result<Next, Closed> {
    let code = option_code(&option);
    match option {
        ClientOption::ExportName(name) => {
            let export = source.open(&name).ok_or(Closed::Protocol)?;
            let answer =
                encode_export_name_answer(export.size(), transmission_flags(&*export), no_zeroes);
            send(out, &answer)?;
            Ok(Next::Transmit(session_for(haggle, &name, export)))
        }
        ClientOption::Abort => {
            let _ = send(out, &encode_option_reply(code, REP_ACK, &[]));
            Ok(Next::Abort)
        }
        ClientOption::List => {
            answer_list(source, out, code)?;
            Ok(Next::Continue)
        }
        ClientOption::Info { name, .. } | ClientOption::Go { name, .. } => {
            answer_info_or_go(source, haggle, out, code, &name)
        }
        ClientOption::StructuredReply => {
            answer_structured_reply(haggle, out, code)?;
            Ok(Next::Continue)
        }
        ClientOption::ListMetaContext { name, queries }
        | ClientOption::SetMetaContext { name, queries } => {
            let set = code == OPT_SET_META_CONTEXT;
            answer_meta_context(source, haggle, out, code, set, name, &queries)?;
            Ok(Next::Continue)
        }
        // STARTTLS is answered by `start_tls` before this.
        ClientOption::StartTls | ClientOption::Unknown { .. } => {
            reply_error(out, code, REP_ERR_UNSUP, "option not supported")?;
            Ok(Next::Continue)
        }
    }
}

/// LIST: a server reply per export name, then the ack.
fn answer_list(
    source: &dyn ExportSource,
    out: &mut Box<dyn Connection>,
    code: u32,
) -> Result<(), Closed> {
    for name in source.list() {
        send(
            out,
            &encode_option_reply(code, REP_SERVER, &encode_rep_server(&name)),
        )?;
    }
    send(out, &encode_option_reply(code, REP_ACK, &[]))
}

/// INFO and GO: the export's size, flags and block sizes, then the ack; GO then starts
/// transmission. An unknown export is an error reply, and negotiation goes on.
fn answer_info_or_go(
    source: &dyn ExportSource,
    haggle: &Haggle,
    out: &mut Box<dyn Connection>,
    code: u32,
    name: &str,
) -> Result<Next, Closed> {
    let Some(export) = source.open(name) else {
        reply_error(
            out,
            code,
            REP_ERR_UNKNOWN,
            &format!("no export named '{name}'"),
        )?;
        return Ok(Next::Continue);
    };
    let (min, preferred, max) = block_sizes(&*export);
    let flags = transmission_flags(&*export);
    send(
        out,
        &encode_option_reply(code, REP_INFO, &encode_info_export(export.size(), flags)),
    )?;
    let sizes = encode_info_block_size(min, preferred, max);
    send(out, &encode_option_reply(code, REP_INFO, &sizes))?;
    send(out, &encode_option_reply(code, REP_ACK, &[]))?;
    if code == OPT_GO {
        Ok(Next::Transmit(session_for(haggle, name, export)))
    } else {
        Ok(Next::Continue)
    }
}

/// STRUCTURED_REPLY: acked once; asking again is an error.
fn answer_structured_reply(
    haggle: &mut Haggle,
    out: &mut Box<dyn Connection>,
    code: u32,
) -> Result<(), Closed> {
    if haggle.structured {
        reply_error(
            out,
            code,
            REP_ERR_INVALID,
            "structured replies already negotiated",
        )
    } else {
        haggle.structured = true;
        send(out, &encode_option_reply(code, REP_ACK, &[]))
    }
}

fn session_for(haggle: &Haggle, name: &str, export: Arc<dyn BlockExport>) -> Session {
    let base_allocation =
        haggle.structured && matches!(&haggle.meta, Some((meta_name, true)) if meta_name == name);
    Session {
        export,
        structured: haggle.structured,
        base_allocation,
    }
}

/// Whether a metadata-context query selects base:allocation. For LIST, namespace queries
/// ("base:") and an empty query list match too.
fn query_selects_base_allocation(query: &str, listing: bool) -> bool {
    query == BASE_ALLOCATION || (listing && query == "base:")
}

fn answer_meta_context(
    source: &dyn ExportSource,
    haggle: &mut Haggle,
    out: &mut Box<dyn Connection>,
    code: u32,
    set: bool,
    name: String,
    queries: &[String],
) -> Result<(), Closed> {
    if !haggle.structured {
        return reply_error(
            out,
            code,
            REP_ERR_INVALID,
            "negotiate structured replies first",
        );
    }
    if source.open(&name).is_none() {
        return reply_error(
            out,
            code,
            REP_ERR_UNKNOWN,
            &format!("no export named '{name}'"),
        );
    }
    let selected = if queries.is_empty() {
        !set
    } else {
        queries
            .iter()
            .any(|q| query_selects_base_allocation(q, !set))
    };
    if selected {
        let id = if set { BASE_ALLOCATION_ID } else { 0 };
        let data = encode_rep_meta_context(id, BASE_ALLOCATION);
        send(out, &encode_option_reply(code, REP_META_CONTEXT, &data))?;
    }
    if set {
        haggle.meta = Some((name, selected));
    }
    send(out, &encode_option_reply(code, REP_ACK, &[]))
}

// ---------------------------------------------------------------------------------------
// Transmission

/// A request ready for a worker: the header and, for WRITE, its payload.
struct Job {
    request: Request,
    payload: Vec<u8>,
    /// The bytes this request and its reply are charged (given back once it is answered).
    charge: Option<Charge>,
}

/// Bytes charged to the connection's budget and to the server's.
struct Charge {
    // Fields drop in this order: the server's bytes go back before the connection's, so a
    // connection's next request (which may skip the server budget when the connection
    // holds nothing) never sees its connection empty while the server still counts it.
    _server: Permit,
    _connection: Permit,
}

/// Most buffers one `writev` takes.
const MAX_WRITEV: usize = 64;
/// READ reply buffers kept for reuse per connection, and the largest kept.
const MAX_SPARE_BUFFERS: usize = 8;
const MAX_SPARE_BYTES: usize = 4 << 20;

/// A reply, how many of its bytes to send (a reused buffer may be longer), and what it is
/// charged (given back once it is written).
type Reply = (Vec<u8>, usize, Option<Charge>);

/// Replies waiting for the socket.
#[derive(Default)]
struct Outbox {
    queue: Vec<Reply>,
    /// A worker is writing replies to the socket.
    sending: bool,
}

/// The writing half of a connection, shared by the workers. A worker that finds nobody
/// sending becomes the sender: it writes its reply and then every reply queued meanwhile,
/// many per `writev`, so under load one system call (and one wake-up of the client)
/// carries several replies; when nothing else is in flight a reply goes out at once.
/// Each reply is written whole, so replies never interleave.
struct Replies {
    out: Mutex<Box<dyn Connection>>,
    outbox: Mutex<Outbox>,
    /// Sent READ reply buffers, reused so a READ neither allocates nor zeroes its buffer.
    spare: Mutex<Vec<Vec<u8>>>,
    structured: bool,
    broken: AtomicBool,
    /// Requests handed to the workers and not finished yet.
    queued: AtomicUsize,
    /// Moving average of how long requests take to run, in nanoseconds.
    recent_run_ns: AtomicU64,
}

/// Requests that take less than this on average may run one by one on the reading thread.
const FAST_REQUEST: Duration = Duration::from_micros(50);

/// Workers a connection may start for `job`: more for a read while requests are slow
/// (`ServerConfig`). Writes land in the open txg and take the store's lock in turn, so
/// more workers for them only add contention (1 MiB writes at queue depth 8 on tmpfs
/// lost about a tenth with them, docs/bench/nbd.md); a started worker takes any job.
fn worker_limit(config: &ServerConfig, replies: &Replies, job: &Job) -> usize {
    if job.request.command == Command::Read && !replies.requests_are_fast() {
        config.workers_when_slow.max(config.workers_per_connection)
    } else {
        config.workers_per_connection
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Writes every reply of `batch` whole, `MAX_WRITEV` at a time.
fn write_all_vectored(out: &mut dyn Write, batch: &[Reply]) -> io::Result<()> {
    for chunk in batch.chunks(MAX_WRITEV) {
        let mut slices: Vec<IoSlice<'_>> = chunk
            .iter()
            .map(|(buf, len, _)| IoSlice::new(buf.get(..*len).unwrap_or(buf)))
            .collect();
        let mut rest = &mut slices[..];
        while !rest.is_empty() {
            match out.write_vectored(rest) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(n) => IoSlice::advance_slices(&mut rest, n),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
    }
    Ok(())
}

impl Replies {
    fn new(out: Box<dyn Connection>, structured: bool) -> Replies {
        Replies {
            out: Mutex::new(out),
            outbox: Mutex::new(Outbox::default()),
            spare: Mutex::new(Vec::new()),
            structured,
            broken: AtomicBool::new(false),
            queued: AtomicUsize::new(0),
            recent_run_ns: AtomicU64::new(0),
        }
    }

    /// Whether recent requests ran in less than `FAST_REQUEST` on average.
    fn requests_are_fast(&self) -> bool {
        u128::from(self.recent_run_ns.load(Ordering::Relaxed)) < FAST_REQUEST.as_nanos()
    }

    /// Sends the first `len` bytes of `reply` (now, or by the worker that is sending).
    fn send(&self, reply: Vec<u8>, len: usize, charge: Option<Charge>) {
        {
            let mut outbox = lock(&self.outbox);
            if outbox.sending {
                outbox.queue.push((reply, len, charge));
                return;
            }
            outbox.sending = true;
        }
        let mut batch = vec![(reply, len, charge)];
        let mut out = lock(&self.out);
        loop {
            if !self.broken.load(Ordering::SeqCst)
                && write_all_vectored(&mut **out, &batch).is_err()
            {
                self.broken.store(true, Ordering::SeqCst);
                out.shutdown_both();
            }
            for (buf, _, _charge) in batch.drain(..) {
                self.recycle(buf);
            }
            let mut outbox = lock(&self.outbox);
            if outbox.queue.is_empty() {
                outbox.sending = false;
                return;
            }
            std::mem::swap(&mut batch, &mut outbox.queue);
        }
    }

    fn send_all(&self, reply: Vec<u8>) {
        let len = reply.len();
        self.send(reply, len, None);
    }

    /// A buffer of at least `len` bytes for a READ reply (contents arbitrary).
    fn buffer(&self, len: usize) -> Vec<u8> {
        let mut spare = lock(&self.spare);
        let best = spare
            .iter()
            .enumerate()
            .filter(|(_, b)| b.len() >= len)
            .min_by_key(|(_, b)| b.len())
            .map(|(i, _)| i);
        match best {
            Some(i) => spare.swap_remove(i),
            None => vec![0u8; len],
        }
    }

    /// Keeps a sent buffer for later READs (the largest few within bounds).
    fn recycle(&self, buf: Vec<u8>) {
        if buf.len() < 4096 || buf.len() > MAX_SPARE_BYTES {
            return;
        }
        let mut spare = lock(&self.spare);
        spare.push(buf);
        if spare.len() > MAX_SPARE_BUFFERS {
            if let Some(i) = spare
                .iter()
                .enumerate()
                .min_by_key(|(_, b)| b.len())
                .map(|(i, _)| i)
            {
                spare.swap_remove(i);
            }
        }
    }

    /// Success or failure of a command without data.
    fn status(&self, cookie: u64, error: u32) {
        self.send_all(encode_simple_reply(&SimpleReply { error, cookie }).to_vec());
    }

    /// A failed READ or BLOCK_STATUS (a structured ERROR chunk when negotiated).
    fn failure(&self, cookie: u64, error: u32, message: &str) {
        if self.structured {
            let payload = encode_error_payload(error, message);
            self.send_all(encode_chunk(
                REPLY_FLAG_DONE,
                REPLY_TYPE_ERROR,
                cookie,
                &payload,
            ));
        } else {
            self.status(cookie, error);
        }
    }
}

/// The error a request earns before it runs, if any.
pub fn check_request(
    req: &Request,
    export: &dyn BlockExport,
    base_allocation: bool,
) -> Option<u32> {
    let cmd = req.command;
    if matches!(cmd, Command::Unknown(_) | Command::Cache) {
        return Some(NBD_EINVAL);
    }
    if req.flags & !cmd.allowed_flags() != 0 {
        return Some(NBD_EINVAL);
    }
    let writes = matches!(cmd, Command::Write | Command::Trim | Command::WriteZeroes);
    if writes && export.read_only() {
        return Some(NBD_EPERM);
    }
    if matches!(cmd, Command::Read | Command::Write) && req.length > MAX_PAYLOAD {
        return Some(NBD_EOVERFLOW);
    }
    if cmd == Command::BlockStatus && (!base_allocation || req.length == 0) {
        return Some(NBD_EINVAL);
    }
    let in_range = req
        .offset
        .checked_add(u64::from(req.length))
        .is_some_and(|end| end <= export.size());
    if !in_range && cmd != Command::Flush && cmd != Command::Disconnect {
        let past_end = if matches!(cmd, Command::Write | Command::WriteZeroes) {
            NBD_ENOSPC
        } else {
            NBD_EINVAL
        };
        return Some(past_end);
    }
    None
}

/// The budgets a connection's reading thread charges before taking a request in.
struct Budgets<'a> {
    connection: Arc<ByteBudget>,
    shared: &'a Shared,
}

impl Budgets<'_> {
    /// Charges `bytes` to the connection, then to the server, waiting while either is
    /// spent. `None` when the server stops or the connection breaks meanwhile. A
    /// connection's only request in flight does not wait for the server's budget:
    /// otherwise a few connections whose clients never read could hold all of it and
    /// starve one whose client does (the server bound is then its budget plus one request
    /// per connection).
    fn charge(&self, bytes: u64, input: &Input, replies: &Replies) -> Option<Charge> {
        let give_up = || input.stop.load(Ordering::SeqCst) || replies.broken.load(Ordering::SeqCst);
        let connection = self.connection.acquire(bytes, POLL_INTERVAL, give_up)?;
        let alone = || self.connection.stats().used == bytes;
        let server = match self
            .shared
            .budget
            .acquire(bytes, POLL_INTERVAL, || give_up() || alone())
        {
            Some(permit) => permit,
            // Everything else this connection held was written meanwhile (or it never
            // held anything): its one request goes ahead.
            None if alone() && !give_up() => self.shared.budget.acquire_now(bytes),
            None => return None,
        };
        self.shared
            .peak_connection_bytes
            .fetch_max(self.connection.stats().used, Ordering::SeqCst);
        Some(Charge {
            _server: server,
            _connection: connection,
        })
    }
}

/// Bytes a request holds until it is answered: its WRITE payload or READ reply.
fn request_cost(req: &Request, structured: bool) -> u64 {
    let head = if structured {
        STRUCTURED_HEADER_LEN + 8
    } else {
        SIMPLE_REPLY_LEN
    };
    match req.command {
        Command::Read if req.length <= MAX_PAYLOAD => u64::from(req.length) + head as u64,
        Command::Write if req.length <= MAX_PAYLOAD => u64::from(req.length),
        _ => 0,
    }
}

fn transmit(
    session: Session,
    mut input: Input,
    output: Box<dyn Connection>,
    config: ServerConfig,
    shared: &Shared,
) {
    let replies = Arc::new(Replies::new(output, session.structured));
    let export = session.export.clone();
    let budgets = Budgets {
        connection: ByteBudget::new(config.connection_reply_budget),
        shared,
    };
    let (queue, jobs) = sync_channel::<Job>(config.queue_depth);
    let jobs = Arc::new(Mutex::new(jobs));
    // Started when requests wait for one (an idle connection costs only this thread);
    // they run until the queue closes, so a queued job always has a worker.
    let mut workers: Vec<JoinHandle<()>> = Vec::new();
    let mut polite = true;
    while !replies.broken.load(Ordering::SeqCst) {
        match next_job(&mut input, &replies, &session, &budgets) {
            // Run a quick request here and save the thread hand-off when nothing else is in
            // flight, if no further request has arrived (queue depth 1) or requests take
            // only microseconds (running a burst one by one here costs less than handing
            // each to a worker); and a quick WRITE whenever requests are fast, even while
            // workers still finish earlier ones: writes take the store's state lock in
            // turn, so on workers they only add hand-offs and contention for it, while
            // reads of cached blocks copy outside it and gain from running on several
            // cores. Otherwise the workers run it while the next request is read: a burst
            // of slow requests (disk latency, a lock) runs on all of them. A FLUSH, or a
            // small write with FUA, runs here only when it is alone (nothing in flight,
            // nothing more received): then it holds up no other request, and a sync
            // writer (queue depth 1: fsync, O_DSYNC, a database's commit) saves two
            // hand-offs per request.
            Ok(Some(job))
                if (is_quick(&job)
                    && ((replies.queued.load(Ordering::SeqCst) == 0
                        && (!input.has_buffered() || replies.requests_are_fast()))
                        || (job.request.command == Command::Write
                            && replies.requests_are_fast())))
                    || (is_sync(&job)
                        && replies.queued.load(Ordering::SeqCst) == 0
                        && !input.has_buffered()) =>
            {
                timed_run(job, &replies, &*export)
            }
            Ok(Some(job)) => {
                let in_flight = replies.queued.fetch_add(1, Ordering::SeqCst) + 1;
                if in_flight > workers.len()
                    && workers.len() < worker_limit(&config, &replies, &job)
                {
                    let (jobs, replies, export) = (jobs.clone(), replies.clone(), export.clone());
                    workers.push(thread::spawn(move || work(&jobs, &replies, &*export)));
                }
                if queue.send(job).is_err() {
                    break;
                }
            }
            Ok(None) => {}
            Err(closed) => {
                polite = !matches!(closed, Closed::Io);
                break;
            }
        }
    }
    drop(queue);
    for w in workers {
        let _ = w.join();
    }
    let mut out = lock(&replies.out);
    // TLS: close_notify whoever ends the session (the NBD spec: the side that ends it
    // shuts TLS down first; a client that left gets it back), unless the socket failed.
    if polite && !replies.broken.load(Ordering::SeqCst) {
        out.close_gracefully();
    }
    out.shutdown_both();
}

/// Reads one request; answers it directly when it is invalid. `Err` ends the connection.
fn next_job(
    input: &mut Input,
    replies: &Replies,
    session: &Session,
    budgets: &Budgets<'_>,
) -> Result<Option<Job>, Closed> {
    let mut header = [0u8; REQUEST_LEN];
    input.read_full(&mut header)?;
    let request = parse_request(&header).map_err(|_| Closed::Protocol)?;
    if request.command == Command::Disconnect {
        return Err(Closed::Eof);
    }
    let error = check_request(&request, &*session.export, session.base_allocation);
    // Charged before the payload is read: backpressure stops here while budgets are spent.
    let cost = if error.is_none() || request.command == Command::Write {
        request_cost(&request, session.structured)
    } else {
        0
    };
    let charge = if cost > 0 {
        Some(
            budgets
                .charge(cost, input, replies)
                .ok_or(Closed::Stopped)?,
        )
    } else {
        None
    };
    let mut payload = Vec::new();
    if request.command == Command::Write {
        if request.length > MAX_PAYLOAD {
            if request.length > MAX_DRAINED_PAYLOAD {
                return Err(Closed::Protocol);
            }
            input.discard(u64::from(request.length))?;
        } else {
            payload = input.read_vec(request.length as usize)?;
        }
    }
    match error {
        Some(e) if matches!(request.command, Command::Read | Command::BlockStatus) => {
            replies.failure(request.cookie, e, "invalid request");
            Ok(None)
        }
        Some(e) => {
            replies.status(request.cookie, e);
            Ok(None)
        }
        None => Ok(Some(Job {
            request,
            payload,
            charge,
        })),
    }
}

fn work(jobs: &Mutex<Receiver<Job>>, replies: &Replies, export: &dyn BlockExport) {
    loop {
        let job = {
            let rx = jobs.lock().unwrap_or_else(|e| e.into_inner());
            rx.recv()
        };
        let Ok(job) = job else {
            return;
        };
        timed_run(job, replies, export);
        replies.queued.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Runs a request and folds its duration into the connection's recent average.
fn timed_run(job: Job, replies: &Replies, export: &dyn BlockExport) {
    let started = Instant::now();
    run(job, replies, export);
    let took = u64::try_from(started.elapsed().as_nanos()).unwrap_or(u64::MAX);
    // A racy average (concurrent updates may lose a sample) is good enough here.
    let avg = replies.recent_run_ns.load(Ordering::Relaxed);
    let next = avg - avg / 8 + took / 8;
    replies.recent_run_ns.store(next, Ordering::Relaxed);
}

/// Requests worth running on the reading thread when nothing else is in flight: small
/// reads and writes (a FLUSH or a big transfer would hold up reading the next request).
fn is_quick(job: &Job) -> bool {
    let small = job.request.length <= 256 << 10;
    let fua = job.request.flags & CMD_FLAG_FUA != 0;
    matches!(job.request.command, Command::Read | Command::Write) && small && !fua
}

/// A FLUSH, or a small write with FUA: a request a sync writer waits on.
fn is_sync(job: &Job) -> bool {
    let small = job.request.length <= 256 << 10;
    let fua = job.request.flags & CMD_FLAG_FUA != 0;
    match job.request.command {
        Command::Flush => true,
        Command::Write => small && fua,
        _ => false,
    }
}

fn run(job: Job, replies: &Replies, export: &dyn BlockExport) {
    let req = job.request;
    let fua = req.flags & CMD_FLAG_FUA != 0;
    let len = u64::from(req.length);
    let then_flush = |r: io::Result<()>| r.and_then(|()| if fua { export.flush() } else { Ok(()) });
    let result = match req.command {
        Command::Read => return run_read(&req, job.charge, replies, export),
        Command::BlockStatus => return run_block_status(&req, replies, export),
        Command::Write => then_flush(export.write_at(&job.payload, req.offset)),
        Command::Flush => export.flush(),
        Command::Trim => then_flush(export.trim(req.offset, len)),
        Command::WriteZeroes => {
            if req.flags & CMD_FLAG_FAST_ZERO != 0 && !export.fast_zero() {
                Err(io::Error::from_raw_os_error(libc::ENOTSUP))
            } else {
                let may_punch = req.flags & CMD_FLAG_NO_HOLE == 0;
                then_flush(export.write_zeroes(req.offset, len, may_punch))
            }
        }
        _ => Err(io::Error::from_raw_os_error(libc::EINVAL)),
    };
    replies.status(req.cookie, result.as_ref().err().map_or(0, nbd_errno));
}

fn run_read(req: &Request, charge: Option<Charge>, replies: &Replies, export: &dyn BlockExport) {
    let len = req.length as usize;
    // The reply header goes in front of the data so the reply is written in one call.
    let head = if replies.structured {
        STRUCTURED_HEADER_LEN + 8
    } else {
        SIMPLE_REPLY_LEN
    };
    let total = head + len;
    let mut reply = replies.buffer(total);
    let result = match reply.get_mut(head..total) {
        Some(data) => export.read_at(data, req.offset),
        None => Err(io::Error::from_raw_os_error(libc::EINVAL)),
    };
    if let Err(e) = result {
        replies.recycle(reply);
        replies.failure(req.cookie, nbd_errno(&e), &e.to_string());
        return;
    }
    if replies.structured {
        let chunk = ChunkHeader {
            flags: REPLY_FLAG_DONE,
            chunk_type: REPLY_TYPE_OFFSET_DATA,
            cookie: req.cookie,
            length: (8 + len) as u32,
        };
        if let Some(dst) = reply.get_mut(..STRUCTURED_HEADER_LEN) {
            dst.copy_from_slice(&encode_chunk_header(&chunk));
        }
        if let Some(dst) = reply.get_mut(STRUCTURED_HEADER_LEN..head) {
            dst.copy_from_slice(&req.offset.to_be_bytes());
        }
    } else if let Some(dst) = reply.get_mut(..head) {
        dst.copy_from_slice(&encode_simple_reply(&SimpleReply {
            error: 0,
            cookie: req.cookie,
        }));
    }
    replies.send(reply, total, charge);
}

/// Trims extents to the request (and to one extent with REQ_ONE); never returns zero lengths.
fn clamp_extents(extents: Vec<(u32, u32)>, length: u32, req_one: bool) -> Vec<(u32, u32)> {
    let mut out = Vec::new();
    let mut left = length;
    for (len, flags) in extents {
        if left == 0 || (req_one && !out.is_empty()) {
            break;
        }
        let len = len.min(left);
        if len > 0 {
            out.push((len, flags));
            left -= len;
        }
    }
    if out.is_empty() {
        out.push((length, 0));
    }
    out
}

fn run_block_status(req: &Request, replies: &Replies, export: &dyn BlockExport) {
    match export.block_status(req.offset, u64::from(req.length)) {
        Ok(extents) => {
            let req_one = req.flags & CMD_FLAG_REQ_ONE != 0;
            let extents = clamp_extents(extents, req.length, req_one);
            let payload = encode_block_status_payload(BASE_ALLOCATION_ID, &extents);
            replies.send_all(encode_chunk(
                REPLY_FLAG_DONE,
                REPLY_TYPE_BLOCK_STATUS,
                req.cookie,
                &payload,
            ));
        }
        Err(e) => replies.failure(req.cookie, nbd_errno(&e), &e.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::export::MemoryExport;

    fn req(command: Command, flags: u16, offset: u64, length: u32) -> Request {
        Request {
            flags,
            command,
            cookie: 1,
            offset,
            length,
        }
    }

    #[test]
    fn request_checks_follow_the_spec() {
        let rw = MemoryExport::new(1 << 20);
        let ro = MemoryExport::new(1 << 20).read_only(true);
        assert_eq!(
            check_request(&req(Command::Read, 0, 0, 4096), &rw, false),
            None
        );
        assert_eq!(
            check_request(&req(Command::Read, 0, 1 << 20, 1), &rw, false),
            Some(NBD_EINVAL)
        );
        assert_eq!(
            check_request(&req(Command::Write, 0, 1 << 20, 1), &rw, false),
            Some(NBD_ENOSPC)
        );
        assert_eq!(
            check_request(&req(Command::Write, 0, 0, 1), &ro, false),
            Some(NBD_EPERM)
        );
        assert_eq!(
            check_request(&req(Command::Read, 0, 0, MAX_PAYLOAD + 1), &rw, false),
            Some(NBD_EOVERFLOW)
        );
        assert_eq!(
            check_request(&req(Command::Unknown(99), 0, 0, 0), &rw, false),
            Some(NBD_EINVAL)
        );
        assert_eq!(
            check_request(&req(Command::BlockStatus, 0, 0, 10), &rw, false),
            Some(NBD_EINVAL)
        );
        assert_eq!(
            check_request(&req(Command::BlockStatus, 0, 0, 10), &rw, true),
            None
        );
        assert_eq!(
            check_request(&req(Command::Read, CMD_FLAG_FUA, 0, 1), &rw, false),
            Some(NBD_EINVAL)
        );
        assert_eq!(
            check_request(&req(Command::Read, 0, u64::MAX, 2), &rw, false),
            Some(NBD_EINVAL)
        );
        assert_eq!(
            check_request(&req(Command::Flush, 0, 0, 0), &rw, false),
            None
        );
    }

    #[test]
    fn extents_are_clamped() {
        assert_eq!(
            clamp_extents(vec![(10, 0), (10, 3)], 15, false),
            vec![(10, 0), (5, 3)]
        );
        assert_eq!(
            clamp_extents(vec![(10, 0), (10, 3)], 15, true),
            vec![(10, 0)]
        );
        assert_eq!(clamp_extents(vec![], 15, true), vec![(15, 0)]);
    }
}
