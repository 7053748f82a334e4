//! A whole server session under TLS (`--tls=require`): a rustls client negotiates
//! STARTTLS and the handshake, then the input is everything it sends inside the
//! encrypted stream (options, requests, payloads) — the NBD parsing behind the TLS layer.
//! With the input's first byte odd, the rest goes raw after the STARTTLS ACK instead (the
//! TLS layer gets arbitrary records). The server must answer or close, never panic or
//! hang.
#![no_main]

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, OnceLock};

use cairn_nbd::wire::{encode_option, ClientOption, CLIENT_FLAG_FIXED_NEWSTYLE};
use cairn_nbd::{
    load_server_config, ExportTable, MemoryExport, NbdServer, TlsFiles, TlsMode, TlsPolicy,
};
use libfuzzer_sys::fuzz_target;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use rustls::{ClientConfig, ClientConnection, RootCertStore, StreamOwned};

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/tls")
        .join(name)
}

fn server() -> NbdServer {
    let files = TlsFiles {
        cert: fixture("server-cert.pem"),
        key: fixture("server-key.pem"),
        client_ca: None,
    };
    let tls = TlsPolicy::new(TlsMode::Require, load_server_config(&files).unwrap());
    let table = ExportTable::new()
        .with("", Arc::new(MemoryExport::new(1 << 20)))
        .with("ro", Arc::new(MemoryExport::new(1 << 20).read_only(true)));
    NbdServer::new(Arc::new(table)).with_tls(tls)
}

fn client_config() -> Arc<ClientConfig> {
    static CONFIG: OnceLock<Arc<ClientConfig>> = OnceLock::new();
    CONFIG
        .get_or_init(|| {
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
        })
        .clone()
}

/// The greeting, the client flags and STARTTLS, up to the server's ACK.
fn start_tls(client: &mut UnixStream) -> std::io::Result<()> {
    let mut greeting = [0u8; 18];
    client.read_exact(&mut greeting)?;
    client.write_all(&CLIENT_FLAG_FIXED_NEWSTYLE.to_be_bytes())?;
    client.write_all(&encode_option(&ClientOption::StartTls))?;
    let mut ack = [0u8; 20];
    client.read_exact(&mut ack)
}

/// Sends `data` inside TLS, then ends the session.
fn send_encrypted(client: UnixStream, data: &[u8]) -> std::io::Result<()> {
    let name = ServerName::try_from("localhost").unwrap();
    let session = ClientConnection::new(client_config(), name).unwrap();
    let mut s = StreamOwned::new(session, client);
    while s.conn.is_handshaking() {
        s.conn.complete_io(&mut s.sock)?;
    }
    let reader = s.sock.try_clone()?;
    let draining = std::thread::spawn(move || {
        let mut sink = Vec::new();
        let _ = (&reader).read_to_end(&mut sink);
    });
    let sent = s.write_all(data).and_then(|()| {
        s.conn.send_close_notify();
        s.flush()
    });
    // The server ends the session after the client's end of stream (or its own error).
    let _ = s.sock.shutdown(std::net::Shutdown::Write);
    let _ = draining.join();
    sent
}

/// libFuzzer's `main` leaves SIGPIPE at its default (a Rust `main`, as cairn's, ignores
/// it): the client's TLS writes (writev) to a session the server has already ended would
/// kill the run.
fn ignore_sigpipe() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    // SAFETY: setting a signal's disposition to SIG_IGN, once, before any thread of ours
    // writes to a socket.
    ONCE.call_once(|| unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_IGN);
    });
}

fuzz_target!(|data: &[u8]| {
    ignore_sigpipe();
    let Some((&mode, data)) = data.split_first() else {
        return;
    };
    let server = server();
    let (mut client, server_end) = UnixStream::pair().unwrap();
    client
        .set_read_timeout(Some(std::time::Duration::from_secs(5)))
        .unwrap();
    let serving = std::thread::spawn(move || {
        server.serve_connection(Box::new(server_end), Arc::new(AtomicBool::new(false)))
    });
    if start_tls(&mut client).is_ok() {
        if mode & 1 == 1 {
            let _ = client.write_all(data);
            let _ = client.shutdown(std::net::Shutdown::Write);
            let mut sink = Vec::new();
            let _ = client.read_to_end(&mut sink);
        } else {
            let _ = send_encrypted(client, data);
        }
    }
    serving.join().unwrap();
});
