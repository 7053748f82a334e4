//! NBD_OPT_STARTTLS and the TLS modes (NBD spec, "TLS support"), over a socket pair with a
//! rustls client: FORCEDTLS refuses plain options with NBD_REP_ERR_TLS_REQD and ends the
//! session on a plain NBD_OPT_EXPORT_NAME; after the upgrade options and transmission run
//! over TLS; a second STARTTLS is invalid; a server without TLS answers POLICY; garbage
//! instead of a ClientHello drops the connection. Certificates: tests/tls (made with
//! openssl, valid to 2126; the CA's key was not kept).

use std::io::{self, Read, Write};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use cairn_nbd::wire::*;
use cairn_nbd::{
    load_server_config, ExportTable, MemoryExport, NbdServer, TlsFiles, TlsMode, TlsPolicy,
    TlsSetupError,
};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use rustls::{ClientConfig, ClientConnection, RootCertStore, StreamOwned};

const EXPORT: &str = "vol";

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/tls")
        .join(name)
}

fn files() -> TlsFiles {
    TlsFiles {
        cert: fixture("server-cert.pem"),
        key: fixture("server-key.pem"),
        client_ca: None,
    }
}

fn server(mode: TlsMode) -> NbdServer {
    let table = ExportTable::new().with(EXPORT, Arc::new(MemoryExport::new(1 << 20)));
    let server = NbdServer::new(Arc::new(table));
    match mode {
        TlsMode::Off => server,
        mode => server.with_tls(TlsPolicy::new(mode, load_server_config(&files()).unwrap())),
    }
}

/// One client connection served on its own thread; the handle tells whether it panicked.
fn connect(server: &NbdServer) -> (Client<UnixStream>, JoinHandle<()>) {
    connect_until(server, Arc::new(AtomicBool::new(false)))
}

/// `connect`, with the flag that stops the server.
fn connect_until(
    server: &NbdServer,
    stop: Arc<AtomicBool>,
) -> (Client<UnixStream>, JoinHandle<()>) {
    let (ours, theirs) = UnixStream::pair().unwrap();
    ours.set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let server = server.clone();
    let thread = std::thread::spawn(move || server.serve_connection(Box::new(theirs), stop));
    let mut client = Client { s: ours };
    let flags = parse_greeting(&client.read_n(18)).unwrap();
    assert_eq!(
        flags & HANDSHAKE_FLAG_FIXED_NEWSTYLE,
        HANDSHAKE_FLAG_FIXED_NEWSTYLE
    );
    client.send(&(CLIENT_FLAG_FIXED_NEWSTYLE | CLIENT_FLAG_NO_ZEROES).to_be_bytes());
    (client, thread)
}

struct Client<S: Read + Write> {
    s: S,
}

impl<S: Read + Write> Client<S> {
    fn send(&mut self, bytes: &[u8]) {
        self.s.write_all(bytes).unwrap();
        self.s.flush().unwrap();
    }
    fn read_n(&mut self, n: usize) -> Vec<u8> {
        let mut buf = vec![0u8; n];
        self.s.read_exact(&mut buf).unwrap();
        buf
    }
    /// Sends an option; the reply types up to the final one.
    fn option(&mut self, opt: &ClientOption) -> Vec<u32> {
        self.send(&encode_option(opt));
        let mut types = Vec::new();
        loop {
            let h = parse_option_reply_header(&self.read_n(OPTION_REPLY_HEADER_LEN)).unwrap();
            self.read_n(h.length as usize);
            assert_eq!(h.option, option_code(opt));
            types.push(h.reply_type);
            if h.reply_type == REP_ACK || h.reply_type & (1 << 31) != 0 {
                return types;
            }
        }
    }
    /// Whether the server closed the connection (EOF or reset, or a TLS error).
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
    fn request(&mut self, command: Command, cookie: u64, offset: u64, length: u32) {
        let req = Request {
            flags: 0,
            command,
            cookie,
            offset,
            length,
        };
        self.send(&encode_request(&req));
    }
}

fn client_config() -> Arc<ClientConfig> {
    let mut roots = RootCertStore::empty();
    for cert in CertificateDer::pem_file_iter(fixture("ca-cert.pem")).unwrap() {
        roots.add(cert.unwrap()).unwrap();
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    Arc::new(config)
}

/// STARTTLS (expecting ACK), then the client side of the handshake.
fn upgrade(mut plain: Client<UnixStream>) -> Client<StreamOwned<ClientConnection, UnixStream>> {
    assert_eq!(plain.option(&ClientOption::StartTls), vec![REP_ACK]);
    let name = ServerName::try_from("localhost").unwrap();
    let session = ClientConnection::new(client_config(), name).unwrap();
    let mut s = StreamOwned::new(session, plain.s);
    while s.conn.is_handshaking() {
        s.conn.complete_io(&mut s.sock).unwrap();
    }
    Client { s }
}

fn go() -> ClientOption {
    ClientOption::Go {
        name: EXPORT.into(),
        requests: vec![],
    }
}

#[test]
fn require_refuses_plain_options_and_ends_a_plain_export_name() {
    let server = server(TlsMode::Require);
    let (mut c, thread) = connect(&server);
    assert_eq!(c.option(&ClientOption::List), vec![REP_ERR_TLS_REQD]);
    assert_eq!(c.option(&go()), vec![REP_ERR_TLS_REQD]);
    assert_eq!(
        c.option(&ClientOption::StructuredReply),
        vec![REP_ERR_TLS_REQD]
    );
    assert_eq!(
        c.option(&ClientOption::Unknown { option: 99 }),
        vec![REP_ERR_TLS_REQD]
    );
    assert_eq!(c.option(&ClientOption::Abort), vec![REP_ACK]);
    assert!(c.closed());
    thread.join().unwrap();

    // NBD_OPT_EXPORT_NAME cannot be refused with an error: the session ends.
    let (mut c, thread) = connect(&server);
    c.send(&encode_option(&ClientOption::ExportName(EXPORT.into())));
    assert!(c.closed(), "a plain EXPORT_NAME under require must close");
    thread.join().unwrap();
}

#[test]
fn after_starttls_everything_runs_over_tls() {
    let server = server(TlsMode::Require);
    let (c, thread) = connect(&server);
    let mut c = upgrade(c);
    assert_eq!(c.option(&ClientOption::List), vec![REP_SERVER, REP_ACK]);
    assert_eq!(c.option(&ClientOption::StartTls), vec![REP_ERR_INVALID]);
    assert_eq!(c.option(&go()), vec![REP_INFO, REP_INFO, REP_ACK]);
    let data: Vec<u8> = (0..128 * 1024).map(|i| (i * 7 % 251) as u8).collect();
    c.request(Command::Write, 1, 4096, data.len() as u32);
    c.send(&data);
    let reply = parse_simple_reply(&c.read_n(SIMPLE_REPLY_LEN)).unwrap();
    assert_eq!((reply.cookie, reply.error), (1, 0));
    c.request(Command::Read, 2, 4096, data.len() as u32);
    let reply = parse_simple_reply(&c.read_n(SIMPLE_REPLY_LEN)).unwrap();
    assert_eq!((reply.cookie, reply.error), (2, 0));
    assert!(c.read_n(data.len()) == data, "read back over TLS differs");
    c.request(Command::Disconnect, 3, 0, 0);
    assert!(c.closed());
    thread.join().unwrap();
}

#[test]
fn on_serves_plain_and_tls_clients() {
    let server = server(TlsMode::On);
    let (mut plain, thread) = connect(&server);
    assert_eq!(plain.option(&ClientOption::List), vec![REP_SERVER, REP_ACK]);
    assert_eq!(plain.option(&go()), vec![REP_INFO, REP_INFO, REP_ACK]);
    drop(plain);
    thread.join().unwrap();
    let (c, thread) = connect(&server);
    let mut tls = upgrade(c);
    assert_eq!(tls.option(&ClientOption::List), vec![REP_SERVER, REP_ACK]);
    drop(tls);
    thread.join().unwrap();
}

#[test]
fn starttls_without_tls_is_refused_by_policy() {
    let server = server(TlsMode::Off);
    let (mut c, thread) = connect(&server);
    assert_eq!(c.option(&ClientOption::StartTls), vec![REP_ERR_POLICY]);
    assert_eq!(c.option(&ClientOption::List), vec![REP_SERVER, REP_ACK]);
    drop(c);
    thread.join().unwrap();
}

/// Reads until the session ends: whether it ended with TLS close_notify (rustls reads
/// 0 bytes then; a socket closed without it is an UnexpectedEof error).
fn ends_with_close_notify(c: &mut Client<StreamOwned<ClientConnection, UnixStream>>) -> bool {
    let mut buf = [0u8; 4096];
    loop {
        match c.s.read(&mut buf) {
            Ok(0) => return true,
            Ok(_) => continue,
            Err(e) => {
                assert_eq!(e.kind(), io::ErrorKind::UnexpectedEof, "{e}");
                return false;
            }
        }
    }
}

/// The side that ends a TLS session shuts TLS down first (NBD spec): the server sends
/// close_notify when it stops, when a client breaks the protocol, and when the client
/// disconnects.
#[test]
fn the_server_ends_tls_sessions_with_close_notify() {
    let server = server(TlsMode::Require);
    let stop = Arc::new(AtomicBool::new(false));
    let (c, thread) = connect_until(&server, stop.clone());
    let mut c = upgrade(c);
    assert_eq!(c.option(&go()), vec![REP_INFO, REP_INFO, REP_ACK]);
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    assert!(ends_with_close_notify(&mut c), "stopping");
    thread.join().unwrap();

    let (c, thread) = connect(&server);
    let mut c = upgrade(c);
    assert_eq!(c.option(&go()), vec![REP_INFO, REP_INFO, REP_ACK]);
    c.send(&[0xde; 28]); // no request magic
    assert!(ends_with_close_notify(&mut c), "a broken request");
    thread.join().unwrap();

    let (c, thread) = connect(&server);
    let mut c = upgrade(c);
    assert_eq!(c.option(&ClientOption::Abort), vec![REP_ACK]);
    assert!(ends_with_close_notify(&mut c), "an aborted negotiation");
    thread.join().unwrap();
}

#[test]
fn garbage_instead_of_a_client_hello_drops_the_connection() {
    let server = server(TlsMode::Require);
    let (mut c, thread) = connect(&server);
    assert_eq!(c.option(&ClientOption::StartTls), vec![REP_ACK]);
    c.send(&[0x16, 0x03, 0x01, 0xff, 0xff, 1, 2, 3, 4, 5, 6, 7, 8]);
    c.send(&[0u8; 70000]);
    assert!(c.closed());
    thread.join().unwrap();
    // Bytes sent right behind STARTTLS, before the ACK, are refused too.
    let (mut c, thread) = connect(&server);
    let mut both = encode_option(&ClientOption::StartTls);
    both.extend_from_slice(b"plaintext pretending to be TLS");
    c.send(&both);
    assert!(c.closed());
    thread.join().unwrap();
}

#[test]
fn bad_certificate_files_say_what_is_wrong() {
    let missing = TlsFiles {
        cert: fixture("no-such-cert.pem"),
        ..files()
    };
    let err = load_server_config(&missing).unwrap_err();
    assert!(matches!(err, TlsSetupError::Read { .. }), "{err}");
    assert!(err.to_string().contains("no-such-cert.pem"), "{err}");

    let mismatched = TlsFiles {
        key: fixture("other-key.pem"),
        ..files()
    };
    let err = load_server_config(&mismatched).unwrap_err();
    assert!(matches!(err, TlsSetupError::KeyMismatch { .. }), "{err}");

    let key_as_cert = TlsFiles {
        cert: fixture("server-key.pem"),
        ..files()
    };
    let err = load_server_config(&key_as_cert).unwrap_err();
    assert!(matches!(err, TlsSetupError::Empty { .. }), "{err}");

    let cert_as_key = TlsFiles {
        key: fixture("server-cert.pem"),
        ..files()
    };
    let err = load_server_config(&cert_as_key).unwrap_err();
    assert!(matches!(err, TlsSetupError::Empty { .. }), "{err}");
}
