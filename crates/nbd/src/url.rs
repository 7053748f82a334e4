//! NBD URLs (the subset of the NBD URI standard cairn uses for leaves):
//! `nbd://HOST[:PORT]/EXPORT` and `nbd+unix:///EXPORT?socket=PATH`.

use std::path::PathBuf;

use thiserror::Error;

use crate::wire::DEFAULT_PORT;

/// Where the server listens.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NbdAddress {
    Tcp { host: String, port: u16 },
    Unix(PathBuf),
}

/// A parsed NBD URL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NbdUrl {
    pub address: NbdAddress,
    pub export: String,
}

#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum UrlError {
    #[error(
        "'{0}' is not an NBD URL (nbd://HOST[:PORT]/EXPORT or nbd+unix:///EXPORT?socket=PATH)"
    )]
    NotNbd(String),
    #[error("'{0}': missing host")]
    MissingHost(String),
    #[error("'{0}': bad port")]
    BadPort(String),
    #[error("'{0}': nbd+unix URLs need ?socket=PATH and no host")]
    MissingSocket(String),
    #[error("'{0}': bad %-escape")]
    BadEscape(String),
}

/// Decodes %XX escapes.
fn percent_decode(s: &str, url: &str) -> Result<String, UrlError> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while let Some(&b) = bytes.get(i) {
        if b == b'%' {
            let hex = bytes
                .get(i + 1..i + 3)
                .and_then(|h| std::str::from_utf8(h).ok())
                .and_then(|h| u8::from_str_radix(h, 16).ok())
                .ok_or_else(|| UrlError::BadEscape(url.to_string()))?;
            out.push(hex);
            i += 3;
        } else {
            out.push(b);
            i += 1;
        }
    }
    String::from_utf8(out).map_err(|_| UrlError::BadEscape(url.to_string()))
}

/// Parses `nbd://HOST[:PORT]/EXPORT` or `nbd+unix:///EXPORT?socket=PATH`.
pub fn parse_nbd_url(url: &str) -> Result<NbdUrl, UrlError> {
    if let Some(rest) = url.strip_prefix("nbd+unix://") {
        return parse_unix(rest, url);
    }
    let rest = url
        .strip_prefix("nbd://")
        .ok_or_else(|| UrlError::NotNbd(url.to_string()))?;
    let (authority, path) = rest.split_once('/').unwrap_or((rest, ""));
    let path = path.split_once('?').map_or(path, |(p, _)| p);
    let (host, port) = split_host_port(authority, url)?;
    Ok(NbdUrl {
        address: NbdAddress::Tcp { host, port },
        export: percent_decode(path, url)?,
    })
}

fn split_host_port(authority: &str, url: &str) -> Result<(String, u16), UrlError> {
    let (host, port) = if let Some(v6) = authority.strip_prefix('[') {
        let (host, after) = v6
            .split_once(']')
            .ok_or_else(|| UrlError::MissingHost(url.to_string()))?;
        (host, after.strip_prefix(':'))
    } else {
        match authority.rsplit_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (authority, None),
        }
    };
    if host.is_empty() {
        return Err(UrlError::MissingHost(url.to_string()));
    }
    let port = match port {
        Some(p) => p.parse().map_err(|_| UrlError::BadPort(url.to_string()))?,
        None => DEFAULT_PORT,
    };
    Ok((host.to_string(), port))
}

fn parse_unix(rest: &str, url: &str) -> Result<NbdUrl, UrlError> {
    let rest = rest
        .strip_prefix('/')
        .ok_or_else(|| UrlError::MissingSocket(url.to_string()))?;
    let (path, query) = rest.split_once('?').unwrap_or((rest, ""));
    let socket = query
        .split('&')
        .find_map(|kv| kv.strip_prefix("socket="))
        .filter(|s| !s.is_empty())
        .ok_or_else(|| UrlError::MissingSocket(url.to_string()))?;
    Ok(NbdUrl {
        address: NbdAddress::Unix(PathBuf::from(percent_decode(socket, url)?)),
        export: percent_decode(path, url)?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_tcp_and_unix_urls() {
        let u = parse_nbd_url("nbd://10.0.0.1:10810/disk%201").unwrap();
        assert_eq!(
            u.address,
            NbdAddress::Tcp {
                host: "10.0.0.1".into(),
                port: 10810
            }
        );
        assert_eq!(u.export, "disk 1");
        let u = parse_nbd_url("nbd://host").unwrap();
        assert_eq!(u.export, "");
        let u = parse_nbd_url("nbd://[::1]/x").unwrap();
        assert_eq!(
            u.address,
            NbdAddress::Tcp {
                host: "::1".into(),
                port: DEFAULT_PORT
            }
        );
        let u = parse_nbd_url("nbd+unix:///vol?socket=/run/s.sock").unwrap();
        assert_eq!(u.address, NbdAddress::Unix("/run/s.sock".into()));
        assert_eq!(u.export, "vol");
        assert!(parse_nbd_url("nbd+unix:///vol").is_err());
        assert!(parse_nbd_url("nbd://:99/x").is_err());
        assert!(parse_nbd_url("nbd://h:notaport/x").is_err());
        assert!(parse_nbd_url("file:///x").is_err());
    }
}
