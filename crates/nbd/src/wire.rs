//! NBD wire format: constants, typed messages, and pure encode/parse functions.
//!
//! Everything here works on byte slices: no I/O, no panics on any input. The server and the
//! client read fixed-size headers from the socket, then hand the bytes to these functions.
//!
//! All integers are big-endian ("network byte order").
//!
//! ```text
//! Handshake (fixed newstyle)
//!   S: u64 NBDMAGIC 0x4e42444d41474943 ("NBDMAGIC")
//!   S: u64 IHAVEOPT 0x49484156454f5054 ("IHAVEOPT")
//!   S: u16 handshake flags   (bit 0 FIXED_NEWSTYLE, bit 1 NO_ZEROES)
//!   C: u32 client flags      (bit 0 C_FIXED_NEWSTYLE, bit 1 C_NO_ZEROES; others: server closes)
//!
//! Option request (client, repeated until GO / EXPORT_NAME / ABORT)
//!   +---------------+-----------+-----------+----------------+
//!   | u64 IHAVEOPT  | u32 option| u32 length| length bytes   |
//!   +---------------+-----------+-----------+----------------+
//!   GO / INFO data:  u32 name length, name, u16 n, n x u16 info request
//!   LIST_META_CONTEXT / SET_META_CONTEXT data:
//!                    u32 name length, name, u32 n, n x (u32 query length, query)
//!
//! Option reply (server)
//!   +------------------------+-----------+---------------+-----------+-------------+
//!   | u64 0x0003e889045565a9 | u32 option| u32 reply type| u32 length| length bytes|
//!   +------------------------+-----------+---------------+-----------+-------------+
//!   REP_SERVER:       u32 name length, name
//!   REP_INFO:         u16 info type, then INFO_EXPORT: u64 size, u16 transmission flags
//!                                         INFO_BLOCK_SIZE: u32 min, u32 preferred, u32 max
//!   REP_META_CONTEXT: u32 context id, name
//!   REP_ERR_*:        (bit 31 set) optional message
//!
//! EXPORT_NAME answer (no option reply): u64 size, u16 transmission flags, 124 zero bytes
//! unless both sides set NO_ZEROES.
//!
//! Request (client), 28 bytes, then `length` bytes of payload for WRITE
//!   +----------------+-----------+----------+-----------+-----------+-----------+
//!   | u32 0x25609513 | u16 flags | u16 type | u64 cookie| u64 offset| u32 length|
//!   +----------------+-----------+----------+-----------+-----------+-----------+
//!
//! Simple reply (server), 16 bytes, then the data of a successful READ
//!   +----------------+-----------+-----------+
//!   | u32 0x67446698 | u32 error | u64 cookie|
//!   +----------------+-----------+-----------+
//!
//! Structured reply chunk (server), 20 bytes, then `length` bytes of payload
//!   +----------------+-----------+----------+-----------+-----------+
//!   | u32 0x668e33ef | u16 flags | u16 type | u64 cookie| u32 length|
//!   +----------------+-----------+----------+-----------+-----------+
//!   flags bit 0: DONE (last chunk of this reply)
//!   OFFSET_DATA (1):  u64 offset, data
//!   OFFSET_HOLE (2):  u64 offset, u32 hole length
//!   BLOCK_STATUS (5): u32 context id, n x (u32 extent length, u32 status flags)
//!   ERROR (32769):    u32 error, u16 message length, message
//! ```

use thiserror::Error;

pub const NBD_MAGIC: u64 = 0x4e42_444d_4147_4943;
pub const IHAVEOPT: u64 = 0x4948_4156_454f_5054;
pub const OPTION_REPLY_MAGIC: u64 = 0x0003_e889_0455_65a9;
pub const REQUEST_MAGIC: u32 = 0x2560_9513;
pub const SIMPLE_REPLY_MAGIC: u32 = 0x6744_6698;
pub const STRUCTURED_REPLY_MAGIC: u32 = 0x668e_33ef;

/// Default TCP port of NBD.
pub const DEFAULT_PORT: u16 = 10809;

pub const HANDSHAKE_FLAG_FIXED_NEWSTYLE: u16 = 1 << 0;
pub const HANDSHAKE_FLAG_NO_ZEROES: u16 = 1 << 1;
pub const CLIENT_FLAG_FIXED_NEWSTYLE: u32 = 1 << 0;
pub const CLIENT_FLAG_NO_ZEROES: u32 = 1 << 1;

pub const FLAG_HAS_FLAGS: u16 = 1 << 0;
pub const FLAG_READ_ONLY: u16 = 1 << 1;
pub const FLAG_SEND_FLUSH: u16 = 1 << 2;
pub const FLAG_SEND_FUA: u16 = 1 << 3;
pub const FLAG_ROTATIONAL: u16 = 1 << 4;
pub const FLAG_SEND_TRIM: u16 = 1 << 5;
pub const FLAG_SEND_WRITE_ZEROES: u16 = 1 << 6;
pub const FLAG_SEND_DF: u16 = 1 << 7;
pub const FLAG_CAN_MULTI_CONN: u16 = 1 << 8;
pub const FLAG_SEND_FAST_ZERO: u16 = 1 << 11;

pub const OPT_EXPORT_NAME: u32 = 1;
pub const OPT_ABORT: u32 = 2;
pub const OPT_LIST: u32 = 3;
pub const OPT_STARTTLS: u32 = 5;
pub const OPT_INFO: u32 = 6;
pub const OPT_GO: u32 = 7;
pub const OPT_STRUCTURED_REPLY: u32 = 8;
pub const OPT_LIST_META_CONTEXT: u32 = 9;
pub const OPT_SET_META_CONTEXT: u32 = 10;

pub const REP_ACK: u32 = 1;
pub const REP_SERVER: u32 = 2;
pub const REP_INFO: u32 = 3;
pub const REP_META_CONTEXT: u32 = 4;
pub const REP_ERR_UNSUP: u32 = (1 << 31) + 1;
pub const REP_ERR_POLICY: u32 = (1 << 31) + 2;
pub const REP_ERR_INVALID: u32 = (1 << 31) + 3;
pub const REP_ERR_PLATFORM: u32 = (1 << 31) + 4;
pub const REP_ERR_TLS_REQD: u32 = (1 << 31) + 5;
pub const REP_ERR_UNKNOWN: u32 = (1 << 31) + 6;
pub const REP_ERR_SHUTDOWN: u32 = (1 << 31) + 7;
pub const REP_ERR_BLOCK_SIZE_REQD: u32 = (1 << 31) + 8;
pub const REP_ERR_TOO_BIG: u32 = (1 << 31) + 9;

pub const INFO_EXPORT: u16 = 0;
pub const INFO_NAME: u16 = 1;
pub const INFO_DESCRIPTION: u16 = 2;
pub const INFO_BLOCK_SIZE: u16 = 3;

pub const CMD_FLAG_FUA: u16 = 1 << 0;
pub const CMD_FLAG_NO_HOLE: u16 = 1 << 1;
pub const CMD_FLAG_DF: u16 = 1 << 2;
pub const CMD_FLAG_REQ_ONE: u16 = 1 << 3;
pub const CMD_FLAG_FAST_ZERO: u16 = 1 << 4;

pub const REPLY_FLAG_DONE: u16 = 1 << 0;
pub const REPLY_TYPE_NONE: u16 = 0;
pub const REPLY_TYPE_OFFSET_DATA: u16 = 1;
pub const REPLY_TYPE_OFFSET_HOLE: u16 = 2;
pub const REPLY_TYPE_BLOCK_STATUS: u16 = 5;
pub const REPLY_TYPE_ERROR: u16 = (1 << 15) + 1;
pub const REPLY_TYPE_ERROR_OFFSET: u16 = (1 << 15) + 2;

/// base:allocation status bits.
pub const STATE_HOLE: u32 = 1 << 0;
pub const STATE_ZERO: u32 = 1 << 1;

/// NBD error numbers (fixed by the protocol, not the host's errno values).
pub const NBD_EPERM: u32 = 1;
pub const NBD_EIO: u32 = 5;
pub const NBD_ENOMEM: u32 = 12;
pub const NBD_EINVAL: u32 = 22;
pub const NBD_ENOSPC: u32 = 28;
pub const NBD_EOVERFLOW: u32 = 75;
pub const NBD_ENOTSUP: u32 = 95;
pub const NBD_ESHUTDOWN: u32 = 108;

/// The one metadata context this server knows.
pub const BASE_ALLOCATION: &str = "base:allocation";

/// Largest READ/WRITE payload the server accepts (advertised as the maximum block size).
pub const MAX_PAYLOAD: u32 = 32 << 20;
/// Smallest block size (advertised minimum).
pub const MIN_BLOCK_SIZE: u32 = 512;
/// Largest option payload accepted during negotiation.
pub const MAX_OPTION_LENGTH: u32 = 64 << 10;
/// Longest string (export name, query) the protocol allows.
pub const MAX_STRING: usize = 4096;

pub const OPTION_HEADER_LEN: usize = 16;
pub const OPTION_REPLY_HEADER_LEN: usize = 20;
pub const REQUEST_LEN: usize = 28;
pub const SIMPLE_REPLY_LEN: usize = 16;
pub const STRUCTURED_HEADER_LEN: usize = 20;

/// Why bytes could not be parsed.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum WireError {
    #[error("message too short: need {need} bytes, have {have}")]
    Short { need: usize, have: usize },
    #[error("bad magic {found:#x}, expected {expected:#x}")]
    BadMagic { found: u64, expected: u64 },
    #[error("string of {0} bytes is longer than the protocol allows")]
    StringTooLong(usize),
    #[error("string is not UTF-8 or contains NUL")]
    BadString,
    #[error("{0} trailing bytes after the message")]
    Trailing(usize),
}

/// A cursor over a byte slice that never panics: every read returns a `WireError`.
struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn new(bytes: &'a [u8]) -> Reader<'a> {
        Reader { bytes, at: 0 }
    }
    fn take(&mut self, n: usize) -> Result<&'a [u8], WireError> {
        let end = self.at.checked_add(n).filter(|&e| e <= self.bytes.len());
        let end = end.ok_or(WireError::Short {
            need: self.at.saturating_add(n),
            have: self.bytes.len(),
        })?;
        let out = self.bytes.get(self.at..end).unwrap_or_default();
        self.at = end;
        Ok(out)
    }
    fn array<const N: usize>(&mut self) -> Result<[u8; N], WireError> {
        let mut out = [0u8; N];
        out.copy_from_slice(self.take(N)?);
        Ok(out)
    }
    fn u16(&mut self) -> Result<u16, WireError> {
        Ok(u16::from_be_bytes(self.array()?))
    }
    fn u32(&mut self) -> Result<u32, WireError> {
        Ok(u32::from_be_bytes(self.array()?))
    }
    fn u64(&mut self) -> Result<u64, WireError> {
        Ok(u64::from_be_bytes(self.array()?))
    }
    fn string(&mut self, len: usize) -> Result<String, WireError> {
        if len > MAX_STRING {
            return Err(WireError::StringTooLong(len));
        }
        let raw = self.take(len)?;
        let s = std::str::from_utf8(raw).map_err(|_| WireError::BadString)?;
        if s.contains('\0') {
            return Err(WireError::BadString);
        }
        Ok(s.to_string())
    }
    fn rest(&mut self) -> &'a [u8] {
        let out = self.bytes.get(self.at..).unwrap_or_default();
        self.at = self.bytes.len();
        out
    }
    fn finish(&self) -> Result<(), WireError> {
        match self.bytes.len().saturating_sub(self.at) {
            0 => Ok(()),
            n => Err(WireError::Trailing(n)),
        }
    }
}

fn magic64(r: &mut Reader<'_>, expected: u64) -> Result<(), WireError> {
    let found = r.u64()?;
    if found != expected {
        return Err(WireError::BadMagic { found, expected });
    }
    Ok(())
}

fn magic32(r: &mut Reader<'_>, expected: u32) -> Result<(), WireError> {
    let found = r.u32()?;
    if found != expected {
        return Err(WireError::BadMagic {
            found: found.into(),
            expected: expected.into(),
        });
    }
    Ok(())
}

fn put_string32(out: &mut Vec<u8>, s: &str) {
    out.extend_from_slice(&(s.len() as u32).to_be_bytes());
    out.extend_from_slice(s.as_bytes());
}

// ---------------------------------------------------------------------------------------
// Handshake

/// The server's greeting: magic, IHAVEOPT, handshake flags (18 bytes).
pub fn encode_greeting(handshake_flags: u16) -> [u8; 18] {
    let mut out = [0u8; 18];
    out[..8].copy_from_slice(&NBD_MAGIC.to_be_bytes());
    out[8..16].copy_from_slice(&IHAVEOPT.to_be_bytes());
    out[16..].copy_from_slice(&handshake_flags.to_be_bytes());
    out
}

/// Parses the server's greeting; returns the handshake flags.
pub fn parse_greeting(bytes: &[u8]) -> Result<u16, WireError> {
    let mut r = Reader::new(bytes);
    magic64(&mut r, NBD_MAGIC)?;
    magic64(&mut r, IHAVEOPT)?;
    let flags = r.u16()?;
    r.finish()?;
    Ok(flags)
}

// ---------------------------------------------------------------------------------------
// Options

/// Option request header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OptionHeader {
    pub option: u32,
    pub length: u32,
}

/// Parses the 16-byte option header (checks the IHAVEOPT magic).
pub fn parse_option_header(bytes: &[u8]) -> Result<OptionHeader, WireError> {
    let mut r = Reader::new(bytes);
    magic64(&mut r, IHAVEOPT)?;
    let option = r.u32()?;
    let length = r.u32()?;
    r.finish()?;
    Ok(OptionHeader { option, length })
}

/// A client option with its data parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClientOption {
    ExportName(String),
    Abort,
    List,
    StartTls,
    Info {
        name: String,
        requests: Vec<u16>,
    },
    Go {
        name: String,
        requests: Vec<u16>,
    },
    StructuredReply,
    ListMetaContext {
        name: String,
        queries: Vec<String>,
    },
    SetMetaContext {
        name: String,
        queries: Vec<String>,
    },
    /// An option this implementation does not know (answered with ERR_UNSUP).
    Unknown {
        option: u32,
    },
}

/// Why option data was rejected: the option number (for the reply) and the parse error.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("option {option}: {error}")]
pub struct OptionError {
    pub option: u32,
    pub error: WireError,
}

/// Parses the data of option `option`.
pub fn parse_option(option: u32, data: &[u8]) -> Result<ClientOption, OptionError> {
    parse_option_data(option, data).map_err(|error| OptionError { option, error })
}

fn parse_option_data(option: u32, data: &[u8]) -> Result<ClientOption, WireError> {
    let mut r = Reader::new(data);
    let parsed = match option {
        OPT_EXPORT_NAME => ClientOption::ExportName(r.string(data.len())?),
        OPT_ABORT => ClientOption::Abort,
        OPT_LIST => ClientOption::List,
        OPT_STARTTLS => ClientOption::StartTls,
        OPT_INFO | OPT_GO => {
            let len = r.u32()? as usize;
            let name = r.string(len)?;
            let n = r.u16()?;
            let requests = (0..n).map(|_| r.u16()).collect::<Result<Vec<_>, _>>()?;
            if option == OPT_GO {
                ClientOption::Go { name, requests }
            } else {
                ClientOption::Info { name, requests }
            }
        }
        OPT_STRUCTURED_REPLY => ClientOption::StructuredReply,
        OPT_LIST_META_CONTEXT | OPT_SET_META_CONTEXT => {
            let len = r.u32()? as usize;
            let name = r.string(len)?;
            let n = r.u32()?;
            // Each query needs at least 4 bytes: a bogus count cannot make us allocate.
            let mut queries = Vec::with_capacity((n as usize).min(data.len() / 4));
            for _ in 0..n {
                let len = r.u32()? as usize;
                queries.push(r.string(len)?);
            }
            if option == OPT_SET_META_CONTEXT {
                ClientOption::SetMetaContext { name, queries }
            } else {
                ClientOption::ListMetaContext { name, queries }
            }
        }
        other => {
            r.rest();
            ClientOption::Unknown { option: other }
        }
    };
    r.finish()?;
    Ok(parsed)
}

/// The option number of a parsed option.
pub fn option_code(opt: &ClientOption) -> u32 {
    match opt {
        ClientOption::ExportName(_) => OPT_EXPORT_NAME,
        ClientOption::Abort => OPT_ABORT,
        ClientOption::List => OPT_LIST,
        ClientOption::StartTls => OPT_STARTTLS,
        ClientOption::Info { .. } => OPT_INFO,
        ClientOption::Go { .. } => OPT_GO,
        ClientOption::StructuredReply => OPT_STRUCTURED_REPLY,
        ClientOption::ListMetaContext { .. } => OPT_LIST_META_CONTEXT,
        ClientOption::SetMetaContext { .. } => OPT_SET_META_CONTEXT,
        ClientOption::Unknown { option } => *option,
    }
}

/// Encodes an option request (header and data), as a client sends it.
pub fn encode_option(opt: &ClientOption) -> Vec<u8> {
    let mut data = Vec::new();
    match opt {
        ClientOption::ExportName(name) => data.extend_from_slice(name.as_bytes()),
        ClientOption::Info { name, requests } | ClientOption::Go { name, requests } => {
            put_string32(&mut data, name);
            data.extend_from_slice(&(requests.len() as u16).to_be_bytes());
            for r in requests {
                data.extend_from_slice(&r.to_be_bytes());
            }
        }
        ClientOption::ListMetaContext { name, queries }
        | ClientOption::SetMetaContext { name, queries } => {
            put_string32(&mut data, name);
            data.extend_from_slice(&(queries.len() as u32).to_be_bytes());
            for q in queries {
                put_string32(&mut data, q);
            }
        }
        _ => {}
    }
    let mut out = Vec::with_capacity(OPTION_HEADER_LEN + data.len());
    out.extend_from_slice(&IHAVEOPT.to_be_bytes());
    out.extend_from_slice(&option_code(opt).to_be_bytes());
    out.extend_from_slice(&(data.len() as u32).to_be_bytes());
    out.extend_from_slice(&data);
    out
}

/// Option reply header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OptionReplyHeader {
    pub option: u32,
    pub reply_type: u32,
    pub length: u32,
}

/// Encodes an option reply (header and data).
pub fn encode_option_reply(option: u32, reply_type: u32, data: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(OPTION_REPLY_HEADER_LEN + data.len());
    out.extend_from_slice(&OPTION_REPLY_MAGIC.to_be_bytes());
    out.extend_from_slice(&option.to_be_bytes());
    out.extend_from_slice(&reply_type.to_be_bytes());
    out.extend_from_slice(&(data.len() as u32).to_be_bytes());
    out.extend_from_slice(data);
    out
}

/// Parses the 20-byte option reply header.
pub fn parse_option_reply_header(bytes: &[u8]) -> Result<OptionReplyHeader, WireError> {
    let mut r = Reader::new(bytes);
    magic64(&mut r, OPTION_REPLY_MAGIC)?;
    let option = r.u32()?;
    let reply_type = r.u32()?;
    let length = r.u32()?;
    r.finish()?;
    Ok(OptionReplyHeader {
        option,
        reply_type,
        length,
    })
}

/// Data of a REP_INFO / INFO_EXPORT reply.
pub fn encode_info_export(size: u64, flags: u16) -> Vec<u8> {
    let mut out = Vec::with_capacity(12);
    out.extend_from_slice(&INFO_EXPORT.to_be_bytes());
    out.extend_from_slice(&size.to_be_bytes());
    out.extend_from_slice(&flags.to_be_bytes());
    out
}

/// Data of a REP_INFO / INFO_BLOCK_SIZE reply.
pub fn encode_info_block_size(min: u32, preferred: u32, max: u32) -> Vec<u8> {
    let mut out = Vec::with_capacity(14);
    out.extend_from_slice(&INFO_BLOCK_SIZE.to_be_bytes());
    for v in [min, preferred, max] {
        out.extend_from_slice(&v.to_be_bytes());
    }
    out
}

/// A REP_INFO payload, parsed (client side).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Info {
    Export { size: u64, flags: u16 },
    BlockSize { min: u32, preferred: u32, max: u32 },
    Other { info_type: u16 },
}

/// Parses a REP_INFO payload.
pub fn parse_info(data: &[u8]) -> Result<Info, WireError> {
    let mut r = Reader::new(data);
    let info = match r.u16()? {
        INFO_EXPORT => Info::Export {
            size: r.u64()?,
            flags: r.u16()?,
        },
        INFO_BLOCK_SIZE => Info::BlockSize {
            min: r.u32()?,
            preferred: r.u32()?,
            max: r.u32()?,
        },
        other => {
            r.rest();
            Info::Other { info_type: other }
        }
    };
    r.finish()?;
    Ok(info)
}

/// Data of a REP_SERVER reply (one export name).
pub fn encode_rep_server(name: &str) -> Vec<u8> {
    let mut out = Vec::with_capacity(4 + name.len());
    put_string32(&mut out, name);
    out
}

/// Data of a REP_META_CONTEXT reply.
pub fn encode_rep_meta_context(id: u32, name: &str) -> Vec<u8> {
    let mut out = Vec::with_capacity(4 + name.len());
    out.extend_from_slice(&id.to_be_bytes());
    out.extend_from_slice(name.as_bytes());
    out
}

/// The answer to EXPORT_NAME: size, flags and (unless NO_ZEROES) 124 zero bytes.
pub fn encode_export_name_answer(size: u64, flags: u16, no_zeroes: bool) -> Vec<u8> {
    let mut out = Vec::with_capacity(134);
    out.extend_from_slice(&size.to_be_bytes());
    out.extend_from_slice(&flags.to_be_bytes());
    if !no_zeroes {
        out.extend_from_slice(&[0u8; 124]);
    }
    out
}

// ---------------------------------------------------------------------------------------
// Transmission

/// A transmission-phase command.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Command {
    Read,
    Write,
    Disconnect,
    Flush,
    Trim,
    Cache,
    WriteZeroes,
    BlockStatus,
    Unknown(u16),
}

impl Command {
    pub fn from_code(code: u16) -> Command {
        match code {
            0 => Command::Read,
            1 => Command::Write,
            2 => Command::Disconnect,
            3 => Command::Flush,
            4 => Command::Trim,
            5 => Command::Cache,
            6 => Command::WriteZeroes,
            7 => Command::BlockStatus,
            other => Command::Unknown(other),
        }
    }
    pub fn code(self) -> u16 {
        match self {
            Command::Read => 0,
            Command::Write => 1,
            Command::Disconnect => 2,
            Command::Flush => 3,
            Command::Trim => 4,
            Command::Cache => 5,
            Command::WriteZeroes => 6,
            Command::BlockStatus => 7,
            Command::Unknown(c) => c,
        }
    }
    /// Command flags that are meaningful for this command.
    pub fn allowed_flags(self) -> u16 {
        match self {
            Command::Read => CMD_FLAG_DF,
            Command::Write => CMD_FLAG_FUA,
            Command::Trim => CMD_FLAG_FUA,
            Command::WriteZeroes => CMD_FLAG_FUA | CMD_FLAG_NO_HOLE | CMD_FLAG_FAST_ZERO,
            Command::BlockStatus => CMD_FLAG_REQ_ONE,
            _ => 0,
        }
    }
}

/// A request header (the payload of a WRITE follows it on the wire).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Request {
    pub flags: u16,
    pub command: Command,
    pub cookie: u64,
    pub offset: u64,
    pub length: u32,
}

/// Parses a 28-byte request header.
pub fn parse_request(bytes: &[u8]) -> Result<Request, WireError> {
    let mut r = Reader::new(bytes);
    magic32(&mut r, REQUEST_MAGIC)?;
    let flags = r.u16()?;
    let command = Command::from_code(r.u16()?);
    let cookie = r.u64()?;
    let offset = r.u64()?;
    let length = r.u32()?;
    r.finish()?;
    Ok(Request {
        flags,
        command,
        cookie,
        offset,
        length,
    })
}

/// Encodes a request header.
pub fn encode_request(req: &Request) -> [u8; REQUEST_LEN] {
    let mut out = [0u8; REQUEST_LEN];
    out[0..4].copy_from_slice(&REQUEST_MAGIC.to_be_bytes());
    out[4..6].copy_from_slice(&req.flags.to_be_bytes());
    out[6..8].copy_from_slice(&req.command.code().to_be_bytes());
    out[8..16].copy_from_slice(&req.cookie.to_be_bytes());
    out[16..24].copy_from_slice(&req.offset.to_be_bytes());
    out[24..28].copy_from_slice(&req.length.to_be_bytes());
    out
}

/// A simple reply header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SimpleReply {
    pub error: u32,
    pub cookie: u64,
}

pub fn encode_simple_reply(reply: &SimpleReply) -> [u8; SIMPLE_REPLY_LEN] {
    let mut out = [0u8; SIMPLE_REPLY_LEN];
    out[0..4].copy_from_slice(&SIMPLE_REPLY_MAGIC.to_be_bytes());
    out[4..8].copy_from_slice(&reply.error.to_be_bytes());
    out[8..16].copy_from_slice(&reply.cookie.to_be_bytes());
    out
}

pub fn parse_simple_reply(bytes: &[u8]) -> Result<SimpleReply, WireError> {
    let mut r = Reader::new(bytes);
    magic32(&mut r, SIMPLE_REPLY_MAGIC)?;
    let error = r.u32()?;
    let cookie = r.u64()?;
    r.finish()?;
    Ok(SimpleReply { error, cookie })
}

/// A structured reply chunk header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChunkHeader {
    pub flags: u16,
    pub chunk_type: u16,
    pub cookie: u64,
    pub length: u32,
}

pub fn encode_chunk_header(h: &ChunkHeader) -> [u8; STRUCTURED_HEADER_LEN] {
    let mut out = [0u8; STRUCTURED_HEADER_LEN];
    out[0..4].copy_from_slice(&STRUCTURED_REPLY_MAGIC.to_be_bytes());
    out[4..6].copy_from_slice(&h.flags.to_be_bytes());
    out[6..8].copy_from_slice(&h.chunk_type.to_be_bytes());
    out[8..16].copy_from_slice(&h.cookie.to_be_bytes());
    out[16..20].copy_from_slice(&h.length.to_be_bytes());
    out
}

pub fn parse_chunk_header(bytes: &[u8]) -> Result<ChunkHeader, WireError> {
    let mut r = Reader::new(bytes);
    magic32(&mut r, STRUCTURED_REPLY_MAGIC)?;
    let flags = r.u16()?;
    let chunk_type = r.u16()?;
    let cookie = r.u64()?;
    let length = r.u32()?;
    r.finish()?;
    Ok(ChunkHeader {
        flags,
        chunk_type,
        cookie,
        length,
    })
}

/// A whole structured chunk (header and payload) in one buffer.
pub fn encode_chunk(flags: u16, chunk_type: u16, cookie: u64, payload: &[u8]) -> Vec<u8> {
    let header = ChunkHeader {
        flags,
        chunk_type,
        cookie,
        length: payload.len() as u32,
    };
    let mut out = Vec::with_capacity(STRUCTURED_HEADER_LEN + payload.len());
    out.extend_from_slice(&encode_chunk_header(&header));
    out.extend_from_slice(payload);
    out
}

/// Payload of an ERROR chunk.
pub fn encode_error_payload(error: u32, message: &str) -> Vec<u8> {
    let msg = message.as_bytes();
    let msg = msg.get(..msg.len().min(MAX_STRING)).unwrap_or_default();
    let mut out = Vec::with_capacity(6 + msg.len());
    out.extend_from_slice(&error.to_be_bytes());
    out.extend_from_slice(&(msg.len() as u16).to_be_bytes());
    out.extend_from_slice(msg);
    out
}

/// Parses an ERROR chunk payload: (error, message).
pub fn parse_error_payload(data: &[u8]) -> Result<(u32, String), WireError> {
    let mut r = Reader::new(data);
    let error = r.u32()?;
    let len = r.u16()? as usize;
    let msg = r.take(len)?;
    r.rest(); // ERROR_OFFSET adds an offset after the message.
    Ok((error, String::from_utf8_lossy(msg).into_owned()))
}

/// Payload of a BLOCK_STATUS chunk.
pub fn encode_block_status_payload(context_id: u32, extents: &[(u32, u32)]) -> Vec<u8> {
    let mut out = Vec::with_capacity(4 + 8 * extents.len());
    out.extend_from_slice(&context_id.to_be_bytes());
    for (len, flags) in extents {
        out.extend_from_slice(&len.to_be_bytes());
        out.extend_from_slice(&flags.to_be_bytes());
    }
    out
}

/// Parses a BLOCK_STATUS chunk payload: (context id, extents).
pub fn parse_block_status_payload(data: &[u8]) -> Result<(u32, Vec<(u32, u32)>), WireError> {
    let mut r = Reader::new(data);
    let id = r.u32()?;
    let mut extents = Vec::with_capacity(data.len() / 8);
    while r.at < data.len() {
        extents.push((r.u32()?, r.u32()?));
    }
    Ok((id, extents))
}

/// Maps an I/O error from a backend to the NBD error number sent to the client.
pub fn nbd_errno(err: &std::io::Error) -> u32 {
    match err.raw_os_error() {
        Some(libc::EPERM) | Some(libc::EROFS) => NBD_EPERM,
        Some(libc::ENOMEM) => NBD_ENOMEM,
        Some(libc::EINVAL) => NBD_EINVAL,
        Some(libc::ENOSPC) | Some(libc::EDQUOT) | Some(libc::EFBIG) => NBD_ENOSPC,
        Some(libc::EOVERFLOW) => NBD_EOVERFLOW,
        Some(libc::ENOTSUP) => NBD_ENOTSUP,
        Some(libc::ESHUTDOWN) => NBD_ESHUTDOWN,
        _ => match err.kind() {
            std::io::ErrorKind::PermissionDenied => NBD_EPERM,
            std::io::ErrorKind::InvalidInput => NBD_EINVAL,
            std::io::ErrorKind::Unsupported => NBD_ENOTSUP,
            std::io::ErrorKind::OutOfMemory => NBD_ENOMEM,
            _ => NBD_EIO,
        },
    }
}

/// Maps an NBD error number back to the host's errno (client side).
pub fn host_errno(nbd_error: u32) -> i32 {
    match nbd_error {
        NBD_EPERM => libc::EPERM,
        NBD_ENOMEM => libc::ENOMEM,
        NBD_EINVAL => libc::EINVAL,
        NBD_ENOSPC => libc::ENOSPC,
        NBD_EOVERFLOW => libc::EOVERFLOW,
        NBD_ENOTSUP => libc::ENOTSUP,
        NBD_ESHUTDOWN => libc::ESHUTDOWN,
        _ => libc::EIO,
    }
}
