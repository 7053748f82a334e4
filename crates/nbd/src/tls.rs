//! TLS for the NBD server: the policy (`TlsMode`, `TlsPolicy`), loading PEM certificates
//! and keys into a rustls configuration, the server side of the handshake that follows an
//! acknowledged NBD_OPT_STARTTLS, and the two halves of an encrypted connection.
//!
//! The NBD spec ("TLS support") names three server modes; `TlsMode::Off` is NOTLS,
//! `TlsMode::Require` is FORCEDTLS and `TlsMode::On` is SELECTIVETLS with no TLS-only
//! export. rustls offers no TLS-PSK, so neither does this server: X.509 certificates only.
//!
//! An encrypted connection is split like a plain one: the reading thread owns a
//! `TlsReadHalf`, the replies go out through a `TlsWriteHalf` (behind `Replies::out` in
//! the server). Both share one `rustls::ServerConnection` behind a mutex, and each has its
//! own handle on the socket. Invariants that keep records in order and threads unblocked:
//! - The session lock is held only for rustls's in-memory work (taking ciphertext in,
//!   decrypting, encrypting, taking sealed records out), never across a socket read or
//!   write. So a reader blocked on `recv` never stops replies, and a writer blocked on a
//!   full socket never stops the reader (which keeps backpressure as in the plain path).
//! - Sealed records leave rustls only through the write half, which writes what it took
//!   out to the socket before it returns; the write half has one user at a time (the
//!   negotiating thread, then whoever holds `Replies::out`). So records reach the socket
//!   in the order rustls sealed them. The read half never writes: a record rustls queues
//!   while reading (a TLS 1.3 KeyUpdate answer) goes out before the next reply.
//! - Lock order: `Replies::out`, then the session; the read half takes only the session.

use std::fs::File;
use std::io::{self, BufReader, IoSlice, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use rustls::server::WebPkiClientVerifier;
use rustls::{RootCertStore, ServerConfig, ServerConnection};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use thiserror::Error;

use crate::connection::Connection;

/// Whether the server offers TLS, and whether it insists on it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum TlsMode {
    /// No TLS: NBD_OPT_STARTTLS gets NBD_REP_ERR_POLICY.
    #[default]
    Off,
    /// Plain and TLS clients are both served.
    On,
    /// Every option before NBD_OPT_STARTTLS (but NBD_OPT_ABORT) gets
    /// NBD_REP_ERR_TLS_REQD; NBD_OPT_EXPORT_NAME in plain text ends the session.
    Require,
}

/// What the server does about TLS: the mode and, unless it is `Off`, the configuration.
#[derive(Clone, Default)]
pub struct TlsPolicy {
    mode: TlsMode,
    config: Option<Arc<ServerConfig>>,
}

impl TlsPolicy {
    /// No TLS.
    pub fn off() -> TlsPolicy {
        TlsPolicy::default()
    }

    /// TLS offered (`On`) or insisted on (`Require`) with `config`.
    pub fn new(mode: TlsMode, config: Arc<ServerConfig>) -> TlsPolicy {
        match mode {
            TlsMode::Off => TlsPolicy::off(),
            _ => TlsPolicy {
                mode,
                config: Some(config),
            },
        }
    }

    pub fn mode(&self) -> TlsMode {
        self.mode
    }

    /// The configuration to start a session with, when TLS is offered.
    pub(crate) fn config(&self) -> Option<&Arc<ServerConfig>> {
        self.config.as_ref()
    }

    pub(crate) fn required(&self) -> bool {
        self.mode == TlsMode::Require
    }
}

/// Why the TLS configuration could not be built; each says what to do about it.
#[derive(Debug, Error)]
pub enum TlsSetupError {
    #[error("cannot read {what} {}: {source} (give a readable PEM file)", path.display())]
    Read {
        what: &'static str,
        path: PathBuf,
        source: io::Error,
    },
    #[error("{what} {} holds no PEM {expected} (expected a '-----BEGIN {expected}-----' block)", path.display())]
    Empty {
        what: &'static str,
        path: PathBuf,
        expected: &'static str,
    },
    #[error("{what} {} is not valid PEM: {detail}", path.display())]
    BadPem {
        what: &'static str,
        path: PathBuf,
        detail: String,
    },
    #[error("the private key {} does not go with the certificate {}: {detail} (give the key the certificate was issued for)", key.display(), cert.display())]
    KeyMismatch {
        cert: PathBuf,
        key: PathBuf,
        detail: String,
    },
    #[error("the client CA file {}: {detail}", path.display())]
    ClientCa { path: PathBuf, detail: String },
    #[error("TLS setup failed: {0}")]
    Other(String),
}

/// The files a TLS server configuration is made of (PEM).
#[derive(Clone, Debug)]
pub struct TlsFiles {
    /// The server's certificate, then any intermediate certificates.
    pub cert: PathBuf,
    /// The private key of that certificate (PKCS#8, PKCS#1 or SEC1).
    pub key: PathBuf,
    /// When set, clients must present a certificate issued by one of these CAs.
    pub client_ca: Option<PathBuf>,
}

fn open(what: &'static str, path: &Path) -> Result<BufReader<File>, TlsSetupError> {
    File::open(path)
        .map(BufReader::new)
        .map_err(|source| TlsSetupError::Read {
            what,
            path: path.to_path_buf(),
            source,
        })
}

/// Every certificate in a PEM file (at least one).
fn load_certificates(
    what: &'static str,
    path: &Path,
) -> Result<Vec<CertificateDer<'static>>, TlsSetupError> {
    let certs = CertificateDer::pem_reader_iter(open(what, path)?)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| TlsSetupError::BadPem {
            what,
            path: path.to_path_buf(),
            detail: e.to_string(),
        })?;
    if certs.is_empty() {
        return Err(TlsSetupError::Empty {
            what,
            path: path.to_path_buf(),
            expected: "CERTIFICATE",
        });
    }
    Ok(certs)
}

fn load_private_key(path: &Path) -> Result<PrivateKeyDer<'static>, TlsSetupError> {
    let what = "private key";
    PrivateKeyDer::from_pem_reader(open(what, path)?).map_err(|e| match e {
        rustls_pki_types::pem::Error::NoItemsFound => TlsSetupError::Empty {
            what,
            path: path.to_path_buf(),
            expected: "PRIVATE KEY",
        },
        other => TlsSetupError::BadPem {
            what,
            path: path.to_path_buf(),
            detail: other.to_string(),
        },
    })
}

/// Loads the certificate chain and key (and the client CAs) into a server configuration:
/// TLS 1.2 and 1.3 (the NBD spec requires 1.2), ring's cipher suites, no session tickets.
pub fn load_server_config(files: &TlsFiles) -> Result<Arc<ServerConfig>, TlsSetupError> {
    let certs = load_certificates("certificate", &files.cert)?;
    let key = load_private_key(&files.key)?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| TlsSetupError::Other(e.to_string()))?;
    let builder = match &files.client_ca {
        None => builder.with_no_client_auth(),
        Some(ca) => {
            let mut roots = RootCertStore::empty();
            for cert in load_certificates("client CA", ca)? {
                roots.add(cert).map_err(|e| TlsSetupError::ClientCa {
                    path: ca.clone(),
                    detail: e.to_string(),
                })?;
            }
            let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
                .build()
                .map_err(|e| TlsSetupError::ClientCa {
                    path: ca.clone(),
                    detail: e.to_string(),
                })?;
            builder.with_client_cert_verifier(verifier)
        }
    };
    // rustls checks that the key's public half is the certificate's.
    let mut config =
        builder
            .with_single_cert(certs, key)
            .map_err(|e| TlsSetupError::KeyMismatch {
                cert: files.cert.clone(),
                key: files.key.clone(),
                detail: e.to_string(),
            })?;
    config.send_tls13_tickets = 0;
    Ok(Arc::new(config))
}

/// A new server session for one connection.
pub(crate) fn new_session(config: &Arc<ServerConfig>) -> io::Result<ServerConnection> {
    let mut session = ServerConnection::new(config.clone()).map_err(io::Error::other)?;
    // Plaintext taken per write: a large reply is sealed and sent in pieces of this size.
    session.set_buffer_limit(Some(SEAL_CHUNK));
    Ok(session)
}

/// Bytes of plaintext sealed per round by the write half.
const SEAL_CHUNK: usize = 256 << 10;
/// Ciphertext taken from the socket per read.
const RECEIVE_CHUNK: usize = 64 << 10;

fn lock(session: &Mutex<ServerConnection>) -> MutexGuard<'_, ServerConnection> {
    session.lock().unwrap_or_else(|e| e.into_inner())
}

fn invalid(e: rustls::Error) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, e)
}

/// Writes every record rustls has sealed to `out`.
fn send_sealed(session: &mut ServerConnection, out: &mut dyn Write) -> io::Result<()> {
    while session.wants_write() {
        session.write_tls(out)?;
    }
    out.flush()
}

/// The server side of the TLS handshake right after NBD_REP_ACK to NBD_OPT_STARTTLS.
/// `receive` reads ciphertext (`Ok(0)`: the client left). Bytes that follow the client's
/// last handshake message in the same read stay in the session for the read half.
/// A failed handshake sends rustls's alert (best effort) and is an error: the NBD spec
/// says the server MUST then terminate the session.
pub(crate) fn handshake(
    session: &mut ServerConnection,
    receive: &mut dyn FnMut(&mut [u8]) -> io::Result<usize>,
    out: &mut dyn Write,
) -> io::Result<()> {
    let mut buf = vec![0u8; RECEIVE_CHUNK];
    while session.is_handshaking() {
        send_sealed(session, out)?;
        let n = receive(&mut buf)?;
        if n == 0 {
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
        let mut pending = buf.get(..n).unwrap_or_default();
        while !pending.is_empty() {
            if session.read_tls(&mut pending)? == 0 {
                return Err(io::ErrorKind::InvalidData.into());
            }
            if let Err(e) = session.process_new_packets() {
                let _ = send_sealed(session, out);
                return Err(invalid(e));
            }
        }
    }
    send_sealed(session, out)
}

/// The reading half of an encrypted connection.
pub(crate) struct TlsReadHalf {
    socket: Box<dyn Connection>,
    session: Arc<Mutex<ServerConnection>>,
    /// Ciphertext received and not yet taken by rustls: `incoming[start..end]`.
    incoming: Box<[u8]>,
    start: usize,
    end: usize,
}

/// The writing half of an encrypted connection.
pub(crate) struct TlsWriteHalf {
    socket: Box<dyn Connection>,
    session: Arc<Mutex<ServerConnection>>,
    /// Sealed records on their way to the socket (kept to reuse the allocation).
    sealed: Vec<u8>,
    /// A socket write failed: records may be lost, so nothing more can be sent.
    broken: bool,
}

/// Splits a session whose handshake is done into its two halves, over the two handles on
/// one socket that the plain connection had.
pub(crate) fn split(
    session: ServerConnection,
    reading: Box<dyn Connection>,
    writing: Box<dyn Connection>,
) -> (TlsReadHalf, TlsWriteHalf) {
    let session = Arc::new(Mutex::new(session));
    let read = TlsReadHalf {
        socket: reading,
        session: session.clone(),
        incoming: vec![0u8; RECEIVE_CHUNK].into_boxed_slice(),
        start: 0,
        end: 0,
    };
    let write = TlsWriteHalf {
        socket: writing,
        session,
        sealed: Vec::new(),
        broken: false,
    };
    (read, write)
}

impl TlsReadHalf {
    /// Plaintext already decrypted, or decrypted from ciphertext already received.
    /// `Ok(None)`: the socket must be read first.
    fn decrypted(&mut self, out: &mut [u8]) -> io::Result<Option<usize>> {
        let mut session = lock(&self.session);
        loop {
            match session.reader().read(out) {
                Ok(n) => return Ok(Some(n)),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) => return Err(e),
            }
            if self.start >= self.end {
                return Ok(None);
            }
            let mut pending = self.incoming.get(self.start..self.end).unwrap_or_default();
            let taken = session.read_tls(&mut pending)?;
            if taken == 0 {
                return Err(io::ErrorKind::InvalidData.into());
            }
            self.start += taken;
            session.process_new_packets().map_err(invalid)?;
        }
    }
}

impl Read for TlsReadHalf {
    fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
        loop {
            if let Some(n) = self.decrypted(out)? {
                return Ok(n);
            }
            // Not under the session lock: the writer goes on while this waits.
            let n = self.socket.read(&mut self.incoming)?;
            (self.start, self.end) = (0, n);
            if n == 0 {
                // The socket ended: rustls tells a clean close (close_notify, Ok(0) next)
                // from a cut one (UnexpectedEof next).
                let mut session = lock(&self.session);
                session.read_tls(&mut io::empty())?;
                session.process_new_packets().map_err(invalid)?;
            }
        }
    }
}

impl Write for TlsWriteHalf {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.write_vectored(&[IoSlice::new(buf)])
    }

    fn write_vectored(&mut self, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
        if self.broken {
            return Err(io::ErrorKind::BrokenPipe.into());
        }
        let taken = {
            let mut session = lock(&self.session);
            let taken = session.writer().write_vectored(bufs)?;
            while session.wants_write() {
                session.write_tls(&mut self.sealed)?;
            }
            taken
        };
        let sent = self.socket.write_all(&self.sealed);
        self.sealed.clear();
        if sent.is_err() {
            self.broken = true;
        }
        sent.map(|()| taken)
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// The read half never writes (see the invariants above).
impl Write for TlsReadHalf {
    fn write(&mut self, _: &[u8]) -> io::Result<usize> {
        Err(io::ErrorKind::Unsupported.into())
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// The write half never reads.
impl Read for TlsWriteHalf {
    fn read(&mut self, _: &mut [u8]) -> io::Result<usize> {
        Err(io::ErrorKind::Unsupported.into())
    }
}

impl Connection for TlsReadHalf {
    /// The halves share one session: a third handle could not keep records in order.
    fn try_clone_connection(&self) -> io::Result<Box<dyn Connection>> {
        Err(io::ErrorKind::Unsupported.into())
    }
    fn shutdown_both(&self) {
        self.socket.shutdown_both();
    }
    fn set_read_poll(&self, interval: Option<Duration>) -> io::Result<()> {
        self.socket.set_read_poll(interval)
    }
    fn set_write_limit(&self, limit: Option<Duration>) -> io::Result<()> {
        self.socket.set_write_limit(limit)
    }
}

impl Connection for TlsWriteHalf {
    fn try_clone_connection(&self) -> io::Result<Box<dyn Connection>> {
        Err(io::ErrorKind::Unsupported.into())
    }
    fn shutdown_both(&self) {
        self.socket.shutdown_both();
    }
    fn set_read_poll(&self, interval: Option<Duration>) -> io::Result<()> {
        self.socket.set_read_poll(interval)
    }
    fn set_write_limit(&self, limit: Option<Duration>) -> io::Result<()> {
        self.socket.set_write_limit(limit)
    }
    /// Sends close_notify (the NBD spec: the side that ends the session SHOULD shut TLS
    /// down first). Best effort: the connection ends either way.
    fn close_gracefully(&mut self) {
        if self.broken {
            return;
        }
        lock(&self.session).send_close_notify();
        let _ = self.write_vectored(&[]);
    }
}
