//! A whole server session: the input is everything a client sends (handshake, options,
//! requests, payloads). The server must answer or close, never panic or hang.
#![no_main]

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use cairn_nbd::{ExportTable, MemoryExport, NbdServer};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let table = ExportTable::new()
        .with("", Arc::new(MemoryExport::new(1 << 20)))
        .with("ro", Arc::new(MemoryExport::new(1 << 20).read_only(true)));
    let server = NbdServer::new(Arc::new(table));
    let (client, server_end) = UnixStream::pair().unwrap();
    let serving = std::thread::spawn(move || {
        server.serve_connection(Box::new(server_end), Arc::new(AtomicBool::new(false)))
    });
    let mut reader = client.try_clone().unwrap();
    let draining = std::thread::spawn(move || {
        let mut sink = Vec::new();
        let _ = reader.read_to_end(&mut sink);
    });
    let mut client = client;
    let _ = client.write_all(data);
    let _ = client.shutdown(std::net::Shutdown::Write);
    serving.join().unwrap();
    draining.join().unwrap();
});
