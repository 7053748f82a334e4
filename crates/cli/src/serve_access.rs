//! Who may use `cairn serve`'s NBD exports, and how: TLS (`--tls`, `--tls-cert`,
//! `--tls-key`, `--tls-verify-peer --tls-ca`), read-only exports (`--nbd-read-only`) and
//! the TCP client allow-list (`--nbd-allow`). Checks every flag before the pool is opened
//! and says what to change when one is wrong.

use std::collections::HashSet;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use cairn_nbd::{
    load_server_config, AddressRange, ClientAllowList, NbdServer, TlsFiles, TlsMode, TlsPolicy,
};

/// `--tls`: whether NBD clients get TLS (NBD_OPT_STARTTLS).
#[derive(clap::ValueEnum, Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum TlsArg {
    /// No TLS (STARTTLS is refused).
    #[default]
    Off,
    /// Plain and TLS clients are both served.
    On,
    /// TLS only: plain clients are refused every option.
    Require,
}

#[derive(clap::Args, Debug, Clone, Default)]
pub struct NbdAccessArgs {
    /// TLS for NBD clients: off, on (plain and TLS), require (TLS only; clients use nbds://).
    #[arg(long = "tls", value_enum, default_value_t = TlsArg::Off, value_name = "off|on|require")]
    tls: TlsArg,
    /// The server's certificate (PEM; intermediates after it).
    #[arg(long = "tls-cert", value_name = "FILE")]
    tls_cert: Option<PathBuf>,
    /// The certificate's private key (PEM).
    #[arg(long = "tls-key", value_name = "FILE")]
    tls_key: Option<PathBuf>,
    /// Clients must present a certificate issued by the CA of --tls-ca.
    #[arg(long = "tls-verify-peer", requires = "tls_ca")]
    tls_verify_peer: bool,
    /// The CA (PEM) that client certificates must chain to (with --tls-verify-peer).
    #[arg(long = "tls-ca", value_name = "FILE")]
    tls_ca: Option<PathBuf>,
    /// Export this volume read-only (POOL/VOL or VOL; repeatable): writes get EPERM.
    #[arg(long = "nbd-read-only", value_name = "POOL/VOL")]
    read_only: Vec<String>,
    /// Serve only TCP clients from this address or network (repeatable); others are
    /// closed at accept. Default: every client.
    #[arg(long = "nbd-allow", value_name = "ADDR[/PREFIX]")]
    allow: Vec<String>,
}

impl NbdAccessArgs {
    /// Whether any of these flags was given (they need `--nbd` or `--nbd-socket`).
    pub fn any(&self) -> bool {
        self.tls != TlsArg::Off
            || self.tls_cert.is_some()
            || self.tls_key.is_some()
            || self.tls_ca.is_some()
            || !self.read_only.is_empty()
            || !self.allow.is_empty()
    }

    /// The TLS policy the flags ask for, with its certificates loaded.
    pub fn tls_policy(&self) -> Result<TlsPolicy, String> {
        let mode = match self.tls {
            TlsArg::Off => TlsMode::Off,
            TlsArg::On => TlsMode::On,
            TlsArg::Require => TlsMode::Require,
        };
        if self.tls_ca.is_some() && !self.tls_verify_peer {
            return Err("--tls-ca names the CA for client certificates: add --tls-verify-peer to check them".into());
        }
        if mode == TlsMode::Off {
            if self.tls_cert.is_some() || self.tls_key.is_some() || self.tls_ca.is_some() {
                return Err("certificates were given but --tls is off: add --tls=on (plain and TLS clients) or --tls=require (TLS only)".into());
            }
            return Ok(TlsPolicy::off());
        }
        let flag = if mode == TlsMode::On { "on" } else { "require" };
        let (Some(cert), Some(key)) = (&self.tls_cert, &self.tls_key) else {
            return Err(format!("--tls={flag} needs --tls-cert FILE and --tls-key FILE (PEM: the server's certificate and its private key)"));
        };
        let files = TlsFiles {
            cert: cert.clone(),
            key: key.clone(),
            client_ca: self.tls_ca.clone().filter(|_| self.tls_verify_peer),
        };
        let config = load_server_config(&files).map_err(|e| e.to_string())?;
        Ok(TlsPolicy::new(mode, config))
    }

    /// The TCP clients to serve (all when no `--nbd-allow`).
    pub fn allow_list(&self) -> Result<ClientAllowList, String> {
        let ranges = self
            .allow
            .iter()
            .map(|text| {
                text.parse::<AddressRange>()
                    .map_err(|e| format!("--nbd-allow {e}"))
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(ClientAllowList::new(ranges))
    }

    /// `server` with TLS and the allow-list applied (refused clients logged, one line each).
    pub fn apply(&self, server: NbdServer, tls: TlsPolicy) -> Result<NbdServer, String> {
        let allowed = self.allow_list()?;
        let report: cairn_nbd::RefusedClient = Arc::new(|peer: SocketAddr| {
            eprintln!("cairn: refused an NBD connection from {peer} (not in --nbd-allow)");
        });
        let on_refused = (!allowed.is_empty()).then_some(report);
        Ok(server
            .with_tls(tls)
            .with_allowed_clients(allowed, on_refused))
    }

    /// The `--nbd-read-only` volumes as full names (`POOL/VOL`).
    pub fn read_only_volumes(&self, pool: &str) -> HashSet<String> {
        self.read_only
            .iter()
            .map(|name| {
                if name.starts_with(&format!("{pool}/")) {
                    name.clone()
                } else {
                    format!("{pool}/{}", name.trim_start_matches('/'))
                }
            })
            .collect()
    }
}

/// One warning line for a TCP listener that other machines can reach without TLS.
pub fn warn_if_exposed(addr: SocketAddr, tls: TlsMode) {
    if tls == TlsMode::Off && !addr.ip().is_loopback() {
        eprintln!(
            "cairn: warning: NBD on {addr} is reachable beyond this machine without TLS: anyone who reaches it reads and writes the exported volumes (use --tls=require with --tls-cert/--tls-key, --nbd-allow, or a loopback address)"
        );
    }
}
