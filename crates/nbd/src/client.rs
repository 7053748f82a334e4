//! NBD client: one connection (fixed newstyle + OPT_GO, simple replies), and `NbdLeaf`,
//! a pool leaf over a few such connections that reconnects when the server goes away.

use std::fmt;
use std::io::{self, Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::os::unix::net::UnixStream;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use cairn_vdev::{Leaf, VdevError};

use crate::connection::Connection;
use crate::url::{parse_nbd_url, NbdAddress, NbdUrl};
use crate::wire::*;

/// Socket timeouts of client connections (a server that stops answering is "gone").
const IO_TIMEOUT: Duration = Duration::from_secs(20);
/// How long a connection attempt may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
/// Sector size reported when the server gives no block size.
pub const DEFAULT_SECTOR: u32 = 4096;

/// Why a client operation failed.
#[derive(Debug)]
pub enum ClientError {
    /// The server answered with an NBD error: the connection is still good.
    Server(u32),
    /// The connection failed (refused, reset, closed, protocol violation): reconnect.
    Transport(io::Error),
}

impl From<io::Error> for ClientError {
    fn from(e: io::Error) -> ClientError {
        ClientError::Transport(e)
    }
}

impl From<ClientError> for io::Error {
    fn from(e: ClientError) -> io::Error {
        match e {
            ClientError::Server(errno) => io::Error::from_raw_os_error(host_errno(errno)),
            ClientError::Transport(e) => e,
        }
    }
}

fn protocol(msg: impl Into<String>) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, msg.into())
}

/// One negotiated connection to an export.
pub struct NbdClient {
    stream: Box<dyn Connection>,
    size: u64,
    flags: u16,
    /// (min, preferred, max) when the server sent NBD_INFO_BLOCK_SIZE.
    block_sizes: Option<(u32, u32, u32)>,
    next_cookie: u64,
}

impl fmt::Debug for NbdClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("NbdClient")
            .field("size", &self.size)
            .field("flags", &self.flags)
            .field("block_sizes", &self.block_sizes)
            .finish()
    }
}

fn open_stream(address: &NbdAddress) -> io::Result<Box<dyn Connection>> {
    match address {
        NbdAddress::Unix(path) => {
            let s = UnixStream::connect(path)?;
            s.set_read_timeout(Some(IO_TIMEOUT))?;
            s.set_write_timeout(Some(IO_TIMEOUT))?;
            Ok(Box::new(s))
        }
        NbdAddress::Tcp { host, port } => {
            let mut last = io::Error::new(io::ErrorKind::NotFound, "host has no address");
            for addr in (host.as_str(), *port).to_socket_addrs()? {
                match TcpStream::connect_timeout(&addr, CONNECT_TIMEOUT) {
                    Ok(s) => {
                        s.set_nodelay(true)?;
                        s.set_read_timeout(Some(IO_TIMEOUT))?;
                        s.set_write_timeout(Some(IO_TIMEOUT))?;
                        return Ok(Box::new(s));
                    }
                    Err(e) => last = e,
                }
            }
            Err(last)
        }
    }
}

impl NbdClient {
    /// Connects and negotiates the URL's export.
    pub fn connect(url: &NbdUrl) -> io::Result<NbdClient> {
        let stream = open_stream(&url.address)?;
        let mut client = NbdClient {
            stream,
            size: 0,
            flags: 0,
            block_sizes: None,
            next_cookie: 1,
        };
        client.handshake(&url.export)?;
        Ok(client)
    }

    pub fn size(&self) -> u64 {
        self.size
    }
    pub fn transmission_flags(&self) -> u16 {
        self.flags
    }
    pub fn block_sizes(&self) -> Option<(u32, u32, u32)> {
        self.block_sizes
    }
    /// Largest request this client sends (the server's maximum, capped at 32 MiB).
    pub fn max_request(&self) -> u32 {
        self.block_sizes.map_or(MAX_PAYLOAD, |(_, _, max)| {
            max.clamp(MIN_BLOCK_SIZE, MAX_PAYLOAD)
        })
    }

    fn read_exact(&mut self, buf: &mut [u8]) -> io::Result<()> {
        self.stream.read_exact(buf)
    }

    fn handshake(&mut self, export: &str) -> io::Result<()> {
        let mut greeting = [0u8; 18];
        self.read_exact(&mut greeting)?;
        let flags = parse_greeting(&greeting).map_err(|e| protocol(e.to_string()))?;
        if flags & HANDSHAKE_FLAG_FIXED_NEWSTYLE == 0 {
            return Err(protocol("server does not speak fixed newstyle NBD"));
        }
        let no_zeroes = flags & HANDSHAKE_FLAG_NO_ZEROES != 0;
        let mut client_flags = CLIENT_FLAG_FIXED_NEWSTYLE;
        if no_zeroes {
            client_flags |= CLIENT_FLAG_NO_ZEROES;
        }
        self.stream.write_all(&client_flags.to_be_bytes())?;
        let go = ClientOption::Go {
            name: export.to_string(),
            requests: vec![INFO_BLOCK_SIZE],
        };
        self.stream.write_all(&encode_option(&go))?;
        loop {
            let (header, data) = self.read_option_reply()?;
            match header.reply_type {
                REP_ACK => break,
                REP_INFO => self.note_info(&data)?,
                REP_ERR_UNSUP => return self.export_name(export, no_zeroes),
                t if t & (1 << 31) != 0 => {
                    let msg = String::from_utf8_lossy(&data);
                    return Err(io::Error::new(
                        io::ErrorKind::NotFound,
                        format!("server refused export '{export}' (reply {t:#x}): {msg}"),
                    ));
                }
                _ => {}
            }
        }
        if self.size == 0 && self.flags == 0 {
            return Err(protocol("server sent no NBD_INFO_EXPORT"));
        }
        Ok(())
    }

    fn read_option_reply(&mut self) -> io::Result<(OptionReplyHeader, Vec<u8>)> {
        let mut header = [0u8; OPTION_REPLY_HEADER_LEN];
        self.read_exact(&mut header)?;
        let header = parse_option_reply_header(&header).map_err(|e| protocol(e.to_string()))?;
        if header.length > MAX_OPTION_LENGTH {
            return Err(protocol("option reply too long"));
        }
        let mut data = vec![0u8; header.length as usize];
        self.read_exact(&mut data)?;
        Ok((header, data))
    }

    fn note_info(&mut self, data: &[u8]) -> io::Result<()> {
        match parse_info(data).map_err(|e| protocol(e.to_string()))? {
            Info::Export { size, flags } => {
                self.size = size;
                self.flags = flags;
            }
            Info::BlockSize {
                min,
                preferred,
                max,
            } => self.block_sizes = Some((min, preferred, max)),
            Info::Other { .. } => {}
        }
        Ok(())
    }

    /// Old servers without OPT_GO: NBD_OPT_EXPORT_NAME.
    fn export_name(&mut self, export: &str, no_zeroes: bool) -> io::Result<()> {
        let opt = ClientOption::ExportName(export.to_string());
        self.stream.write_all(&encode_option(&opt))?;
        let mut answer = [0u8; 10];
        self.read_exact(&mut answer)?;
        let mut size = [0u8; 8];
        size.copy_from_slice(answer.get(..8).unwrap_or(&[0; 8]));
        self.size = u64::from_be_bytes(size);
        self.flags = u16::from_be_bytes([answer[8], answer[9]]);
        if !no_zeroes {
            let mut zeroes = [0u8; 124];
            self.read_exact(&mut zeroes)?;
        }
        Ok(())
    }

    fn send_request(
        &mut self,
        command: Command,
        flags: u16,
        offset: u64,
        length: u32,
    ) -> io::Result<u64> {
        let cookie = self.next_cookie;
        self.next_cookie = self.next_cookie.wrapping_add(1);
        let req = Request {
            flags,
            command,
            cookie,
            offset,
            length,
        };
        self.stream.write_all(&encode_request(&req))?;
        Ok(cookie)
    }

    fn read_reply(&mut self, cookie: u64) -> Result<(), ClientError> {
        let mut header = [0u8; SIMPLE_REPLY_LEN];
        self.read_exact(&mut header)?;
        let reply = parse_simple_reply(&header).map_err(|e| protocol(e.to_string()))?;
        if reply.cookie != cookie {
            return Err(protocol("reply for an unknown request").into());
        }
        match reply.error {
            0 => Ok(()),
            e => Err(ClientError::Server(e)),
        }
    }

    /// Reads `buf.len()` bytes at `offset`, split into requests the server accepts.
    pub fn read_at(&mut self, buf: &mut [u8], offset: u64) -> Result<(), ClientError> {
        let step = self.max_request() as usize;
        for (i, piece) in buf.chunks_mut(step).enumerate() {
            let at = offset + (i * step) as u64;
            let cookie = self.send_request(Command::Read, 0, at, piece.len() as u32)?;
            self.read_reply(cookie)?;
            self.read_exact(piece)?;
        }
        Ok(())
    }

    /// Writes `buf` at `offset` (with FUA when `fua`).
    pub fn write_at(&mut self, buf: &[u8], offset: u64, fua: bool) -> Result<(), ClientError> {
        let step = self.max_request() as usize;
        let flags = if fua { CMD_FLAG_FUA } else { 0 };
        for (i, piece) in buf.chunks(step).enumerate() {
            let at = offset + (i * step) as u64;
            let cookie = self.send_request(Command::Write, flags, at, piece.len() as u32)?;
            self.stream.write_all(piece)?;
            self.read_reply(cookie)?;
        }
        Ok(())
    }

    /// NBD_CMD_FLUSH (a no-op when the server does not offer it).
    pub fn flush(&mut self) -> Result<(), ClientError> {
        if self.flags & FLAG_SEND_FLUSH == 0 {
            return Ok(());
        }
        let cookie = self.send_request(Command::Flush, 0, 0, 0)?;
        self.read_reply(cookie)
    }

    /// Sends NBD_CMD_DISC and closes.
    pub fn disconnect(mut self) {
        let _ = self.send_request(Command::Disconnect, 0, 0, 0);
        self.stream.shutdown_both();
    }
}

/// How an `NbdLeaf` behaves when the server goes away.
#[derive(Clone, Copy, Debug)]
pub struct NbdLeafOptions {
    /// How long to keep reconnecting before an I/O fails with ENXIO (leaf REMOVED).
    pub reconnect_window: Duration,
    /// Idle connections kept open for concurrent I/O.
    pub max_idle_connections: usize,
}

impl Default for NbdLeafOptions {
    fn default() -> NbdLeafOptions {
        NbdLeafOptions {
            reconnect_window: Duration::from_secs(3),
            max_idle_connections: 4,
        }
    }
}

/// A pool leaf backed by an NBD export.
pub struct NbdLeaf {
    url_text: String,
    url: NbdUrl,
    size: u64,
    sector: u32,
    options: NbdLeafOptions,
    idle: Mutex<Vec<NbdClient>>,
}

impl fmt::Debug for NbdLeaf {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("NbdLeaf")
            .field("url", &self.url_text)
            .field("size", &self.size)
            .field("sector", &self.sector)
            .finish()
    }
}

/// Sector size from the server's preferred block size (≥ 512, power of two), else 4096.
pub fn sector_from_block_sizes(block_sizes: Option<(u32, u32, u32)>) -> u32 {
    match block_sizes {
        Some((_, preferred, _)) if preferred >= 512 && preferred.is_power_of_two() => preferred,
        _ => DEFAULT_SECTOR,
    }
}

fn leaf_error(url: &str, source: io::Error) -> VdevError {
    VdevError::Io {
        path: url.to_string(),
        source,
    }
}

impl NbdLeaf {
    /// Connects to `url` and checks the export is big enough to be a leaf.
    pub fn open(url_text: &str, options: NbdLeafOptions) -> Result<NbdLeaf, VdevError> {
        let url = parse_nbd_url(url_text)
            .map_err(|e| leaf_error(url_text, io::Error::new(io::ErrorKind::InvalidInput, e)))?;
        let client = NbdClient::connect(&url).map_err(|e| leaf_error(url_text, e))?;
        let size = client.size();
        if size < cairn_geometry::MIN_LEAF_SIZE {
            client.disconnect();
            return Err(VdevError::TooSmall {
                path: url_text.to_string(),
                size,
            });
        }
        let sector = sector_from_block_sizes(client.block_sizes());
        Ok(NbdLeaf {
            url_text: url_text.to_string(),
            url,
            size,
            sector,
            options,
            idle: Mutex::new(vec![client]),
        })
    }

    fn take_client(&self) -> io::Result<NbdClient> {
        let idle = self.idle.lock().unwrap_or_else(|e| e.into_inner()).pop();
        if let Some(c) = idle {
            return Ok(c);
        }
        let client = NbdClient::connect(&self.url)?;
        // A server that came back with a different disk behind the URL gets no I/O.
        let size = client.size();
        if size != self.size {
            client.disconnect();
            let msg = format!("export size changed from {} to {size} bytes", self.size);
            return Err(io::Error::other(msg));
        }
        Ok(client)
    }

    fn put_client(&self, client: NbdClient) {
        let mut idle = self.idle.lock().unwrap_or_else(|e| e.into_inner());
        if idle.len() < self.options.max_idle_connections {
            idle.push(client);
        }
    }

    /// Runs `op` on a connection; on transport failures reconnects with bounded backoff for
    /// up to the reconnect window, then fails with ENXIO (the device is gone).
    fn with_client<T>(
        &self,
        mut op: impl FnMut(&mut NbdClient) -> Result<T, ClientError>,
    ) -> io::Result<T> {
        let mut deadline: Option<Instant> = None;
        let mut backoff = Duration::from_millis(20);
        loop {
            let outcome = match self.take_client() {
                Ok(mut client) => {
                    let result = op(&mut client);
                    if !matches!(result, Err(ClientError::Transport(_))) {
                        self.put_client(client);
                    }
                    result
                }
                Err(e) => Err(ClientError::Transport(e)),
            };
            match outcome {
                Ok(v) => return Ok(v),
                Err(ClientError::Server(e)) => return Err(ClientError::Server(e).into()),
                Err(ClientError::Transport(_)) => {
                    let now = Instant::now();
                    let until = *deadline.get_or_insert(now + self.options.reconnect_window);
                    if now >= until {
                        return Err(io::Error::from_raw_os_error(libc::ENXIO));
                    }
                    std::thread::sleep(backoff.min(until - now));
                    backoff = (backoff * 2).min(Duration::from_millis(500));
                }
            }
        }
    }
}

impl Leaf for NbdLeaf {
    fn path(&self) -> &str {
        &self.url_text
    }
    fn size(&self) -> u64 {
        self.size
    }
    fn physical_sector_size(&self) -> u32 {
        self.sector
    }
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        self.with_client(|c| c.read_at(buf, offset))
    }
    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        self.with_client(|c| c.write_at(buf, offset, false))
    }
    fn flush(&self) -> io::Result<()> {
        self.with_client(|c| c.flush())
    }
}

impl Drop for NbdLeaf {
    fn drop(&mut self) {
        let idle = std::mem::take(&mut *self.idle.lock().unwrap_or_else(|e| e.into_inner()));
        for client in idle {
            client.disconnect();
        }
    }
}
