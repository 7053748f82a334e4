//! Serves one file as an NBD export (the protocol layer over a plain file, for trying
//! clients and for scripts/bench-nbd.sh).
//!
//! ```text
//! cargo run --release -p cairn-nbd --example serve_file -- \
//!     (--unix SOCKET | --tcp ADDR:PORT) [--name EXPORT] [--size BYTES] [--block-size N] [--read-only] FILE
//! ```
//! With `--size` the file is created (sparse) or resized. Runs until killed.

use std::net::TcpListener;
use std::os::unix::net::UnixListener;
use std::path::PathBuf;
use std::sync::Arc;

use cairn_nbd::{ExportTable, FileExport, NbdServer};

struct Args {
    unix: Option<PathBuf>,
    tcp: Option<String>,
    name: String,
    size: Option<u64>,
    block_size: u32,
    read_only: bool,
    file: PathBuf,
}

fn usage() -> ! {
    eprintln!(
        "usage: serve_file (--unix SOCKET | --tcp ADDR:PORT) [--name EXPORT] [--size BYTES] \
         [--block-size N] [--read-only] FILE"
    );
    std::process::exit(2)
}

fn parse_args() -> Args {
    let mut args = std::env::args().skip(1);
    let (mut unix, mut tcp, mut name, mut size) = (None, None, String::new(), None);
    let (mut block_size, mut read_only, mut file) = (4096, false, None);
    while let Some(a) = args.next() {
        let mut value = || args.next().unwrap_or_else(|| usage());
        match a.as_str() {
            "--unix" => unix = Some(PathBuf::from(value())),
            "--tcp" => tcp = Some(value()),
            "--name" => name = value(),
            "--size" => size = Some(value().parse().unwrap_or_else(|_| usage())),
            "--block-size" => block_size = value().parse().unwrap_or_else(|_| usage()),
            "--read-only" => read_only = true,
            _ if a.starts_with('-') => usage(),
            _ => file = Some(PathBuf::from(a)),
        }
    }
    let file = file.unwrap_or_else(|| usage());
    if unix.is_none() == tcp.is_none() {
        usage();
    }
    Args {
        unix,
        tcp,
        name,
        size,
        block_size,
        read_only,
        file,
    }
}

fn main() -> std::io::Result<()> {
    let args = parse_args();
    if let Some(size) = args.size {
        let f = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&args.file)?;
        f.set_len(size)?;
    }
    let export = FileExport::open(&args.file, args.read_only)?.with_block_size(args.block_size);
    let table = ExportTable::new().with(&args.name, Arc::new(export));
    let server = NbdServer::new(Arc::new(table));
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    if let Some(path) = args.unix {
        let _ = std::fs::remove_file(&path);
        let listener = UnixListener::bind(&path)?;
        eprintln!(
            "serving {} as '{}' on nbd+unix:///{}?socket={}",
            args.file.display(),
            args.name,
            args.name,
            path.display()
        );
        server.serve_unix(listener, stop)
    } else {
        let listener = TcpListener::bind(args.tcp.unwrap_or_default())?;
        let addr = listener.local_addr()?;
        eprintln!(
            "serving {} as '{}' on nbd://{addr}/{}",
            args.file.display(),
            args.name,
            args.name
        );
        server.serve_tcp(listener, stop)
    }
}
