//! NBD (Network Block Device) for cairn: a server that exports volumes over the NBD
//! protocol (fixed newstyle, structured replies, base:allocation, multi-conn), and a client
//! leaf so a pool's disks can be NBD exports on other machines.
//!
//! - [`wire`]: message layouts and pure encode/parse functions.
//! - [`export`]: the [`BlockExport`] / [`ExportSource`] traits and test backends.
//! - [`server`]: [`NbdServer`] (TCP and unix sockets).
//! - [`tls`]: NBD_OPT_STARTTLS with rustls: [`TlsPolicy`], certificates, the encrypted stream.
//! - [`access`]: [`ClientAllowList`], the TCP clients a server accepts.
//! - [`client`]: [`NbdClient`] and [`NbdLeaf`] (a `cairn_vdev::Leaf`).

pub mod access;
pub mod budget;
pub mod client;
pub mod connection;
pub mod export;
pub mod server;
pub mod tls;
pub mod url;
pub mod wire;

use cairn_vdev::{Leaf, VdevError};

pub use access::{AddressRange, AddressRangeError, ClientAllowList};
pub use client::{NbdClient, NbdLeaf, NbdLeafOptions};
pub use export::{BlockExport, ExportSource, ExportTable, FileExport, MemoryExport};
pub use server::{NbdServer, RefusedClient, RunningServer, ServerConfig, ServerStats};
pub use tls::{load_server_config, TlsFiles, TlsMode, TlsPolicy, TlsSetupError};
pub use url::{parse_nbd_url, NbdAddress, NbdUrl};

/// Whether a device spec is an NBD URL (`nbd://HOST[:PORT]/EXPORT`, `nbd+unix:///EXPORT?socket=PATH`).
pub fn is_nbd_url(spec: &str) -> bool {
    spec.starts_with("nbd://") || spec.starts_with("nbd+unix://")
}

/// Opens an NBD export as a leaf: connects, negotiates, checks the size (at least 64 MiB).
/// I/O reconnects when the server goes away and fails with ENXIO when it stays away.
pub fn open_nbd_leaf(url: &str) -> Result<Box<dyn Leaf>, VdevError> {
    Ok(Box::new(NbdLeaf::open(url, NbdLeafOptions::default())?))
}
