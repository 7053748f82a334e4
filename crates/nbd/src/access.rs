//! Who may connect over TCP: address ranges (`ADDR[/PREFIX]`), checked at accept.
//! Unix-socket clients are not checked (the socket file's permissions decide).

use std::net::IpAddr;
use std::str::FromStr;

use thiserror::Error;

/// An address range: `network/prefix` (a bare address is a /32 or /128).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AddressRange {
    network: IpAddr,
    prefix: u8,
}

/// Why an `ADDR[/PREFIX]` could not be read.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum AddressRangeError {
    #[error("'{0}' is not an IP address (give e.g. 192.0.2.7, 10.0.0.0/8 or fd00::/64)")]
    Address(String),
    #[error("'{text}': the prefix must be a number from 0 to {max}")]
    Prefix { text: String, max: u8 },
}

impl FromStr for AddressRange {
    type Err = AddressRangeError;

    fn from_str(text: &str) -> Result<AddressRange, AddressRangeError> {
        let (addr, prefix) = match text.split_once('/') {
            Some((addr, prefix)) => (addr, Some(prefix)),
            None => (text, None),
        };
        let network: IpAddr = addr
            .trim_start_matches('[')
            .trim_end_matches(']')
            .parse()
            .map_err(|_| AddressRangeError::Address(text.to_string()))?;
        let max = if network.is_ipv4() { 32 } else { 128 };
        let prefix = match prefix {
            None => max,
            Some(p) => p.parse::<u8>().ok().filter(|p| *p <= max).ok_or_else(|| {
                AddressRangeError::Prefix {
                    text: text.to_string(),
                    max,
                }
            })?,
        };
        Ok(AddressRange { network, prefix })
    }
}

/// The top `prefix` bits of a `bits`-bit number.
fn top_bits(value: u128, prefix: u8, bits: u8) -> u128 {
    if prefix == 0 {
        0
    } else {
        value >> (bits - prefix)
    }
}

impl AddressRange {
    /// Whether `addr` is in the range. An IPv4 client seen on an IPv6 socket
    /// (`::ffff:a.b.c.d`) matches IPv4 ranges.
    pub fn contains(&self, addr: IpAddr) -> bool {
        let addr = match addr {
            IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(addr, IpAddr::V4),
            v4 => v4,
        };
        match (self.network, addr) {
            (IpAddr::V4(net), IpAddr::V4(a)) => {
                let (net, a) = (u128::from(u32::from(net)), u128::from(u32::from(a)));
                top_bits(net, self.prefix, 32) == top_bits(a, self.prefix, 32)
            }
            (IpAddr::V6(net), IpAddr::V6(a)) => {
                top_bits(u128::from(net), self.prefix, 128)
                    == top_bits(u128::from(a), self.prefix, 128)
            }
            _ => false,
        }
    }
}

/// The TCP clients a server accepts: everyone when empty, else those in some range.
#[derive(Clone, Debug, Default)]
pub struct ClientAllowList {
    ranges: Vec<AddressRange>,
}

impl ClientAllowList {
    pub fn new(ranges: Vec<AddressRange>) -> ClientAllowList {
        ClientAllowList { ranges }
    }

    pub fn is_empty(&self) -> bool {
        self.ranges.is_empty()
    }

    pub fn allows(&self, addr: IpAddr) -> bool {
        self.ranges.is_empty() || self.ranges.iter().any(|r| r.contains(addr))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn ranges_match_by_prefix() {
        let lan: AddressRange = "192.0.2.0/24".parse().unwrap();
        assert!(lan.contains(ip("192.0.2.200")));
        assert!(!lan.contains(ip("192.0.3.1")));
        assert!(lan.contains(ip("::ffff:192.0.2.9")));
        let one: AddressRange = "127.0.0.1".parse().unwrap();
        assert!(one.contains(ip("127.0.0.1")));
        assert!(!one.contains(ip("127.0.0.2")));
        let all: AddressRange = "0.0.0.0/0".parse().unwrap();
        assert!(all.contains(ip("203.0.113.5")));
        assert!(!all.contains(ip("2001:db8::1")));
        let v6: AddressRange = "[fd00::]/8".parse().unwrap();
        assert!(v6.contains(ip("fdab::1")));
        assert!(!v6.contains(ip("fe80::1")));
    }

    #[test]
    fn bad_ranges_say_what_is_wrong() {
        assert!(matches!(
            "host.example".parse::<AddressRange>(),
            Err(AddressRangeError::Address(_))
        ));
        assert!(matches!(
            "10.0.0.0/33".parse::<AddressRange>(),
            Err(AddressRangeError::Prefix { max: 32, .. })
        ));
        assert!(matches!(
            "::1/x".parse::<AddressRange>(),
            Err(AddressRangeError::Prefix { max: 128, .. })
        ));
    }

    #[test]
    fn an_empty_list_allows_everyone() {
        assert!(ClientAllowList::default().allows(ip("198.51.100.1")));
        let list = ClientAllowList::new(vec!["10.0.0.0/8".parse().unwrap()]);
        assert!(list.allows(ip("10.1.2.3")));
        assert!(!list.allows(ip("127.0.0.1")));
    }
}
