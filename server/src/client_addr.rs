//! Who a client is, for the per-client limits: its peer address, or — when
//! the peer is a configured trusted proxy — the address that proxy put in
//! `X-Forwarded-For`.
//!
//! An IPv6 client counts as its `/64` (one host is usually given a whole
//! `/64`, so counting single addresses would let it take any number of
//! slots); an IPv4-mapped IPv6 address counts as the IPv4 address.

use axum::http::HeaderMap;
use std::fmt;
use std::net::{IpAddr, Ipv6Addr};
use std::str::FromStr;

/// A proxy (an address or a network) whose `X-Forwarded-For` is believed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TrustedProxy {
    /// The network's first address (host bits cleared).
    network: IpAddr,
    /// Leading bits that must match: at most 32 (IPv4) or 128 (IPv6).
    prefix: u8,
}

impl TrustedProxy {
    /// Whether `ip` is this proxy, or in its network.
    pub fn contains(&self, ip: IpAddr) -> bool {
        match (self.network, canonical(ip)) {
            (IpAddr::V4(net), IpAddr::V4(ip)) => {
                masked(u128::from(u32::from(ip)), 32, self.prefix) == u128::from(u32::from(net))
            }
            (IpAddr::V6(net), IpAddr::V6(ip)) => {
                masked(u128::from(ip), 128, self.prefix) == u128::from(net)
            }
            _ => false,
        }
    }
}

/// `value` with all but its `prefix` leading bits (of `width`) cleared.
fn masked(value: u128, width: u8, prefix: u8) -> u128 {
    if prefix == 0 {
        return 0;
    }
    let host_bits = u32::from(width - prefix);
    value >> host_bits << host_bits
}

impl FromStr for TrustedProxy {
    type Err = String;

    /// `ADDRESS` or `ADDRESS/PREFIX`: `10.0.0.1`, `10.0.0.0/8`, `fd00::/8`.
    fn from_str(text: &str) -> Result<Self, String> {
        let (address, prefix) = match text.split_once('/') {
            Some((address, prefix)) => (address, Some(prefix)),
            None => (text, None),
        };
        let network = canonical(
            address
                .parse::<IpAddr>()
                .map_err(|_| format!("expected an IP address or ADDRESS/PREFIX, got {text:?}"))?,
        );
        let width = if network.is_ipv4() { 32 } else { 128 };
        let prefix = match prefix {
            None => width,
            Some(prefix) => match prefix.parse::<u8>() {
                Ok(prefix) if prefix <= width => prefix,
                _ => return Err(format!("prefix of {text:?} must be 0 ..= {width}")),
            },
        };
        let bits = match network {
            IpAddr::V4(ip) => u128::from(u32::from(ip)),
            IpAddr::V6(ip) => u128::from(ip),
        };
        let base = masked(bits, width, prefix);
        if base != bits {
            return Err(format!("{text:?} has host bits set"));
        }
        Ok(Self { network, prefix })
    }
}

impl fmt::Display for TrustedProxy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.network, self.prefix)
    }
}

/// An IPv4-mapped IPv6 address as IPv4; anything else as is.
fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    }
}

/// What the per-client limits count under: an IPv4 address, or an IPv6
/// `/64`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct ClientKey(IpAddr);

impl ClientKey {
    /// The key of a client at `ip`.
    pub(crate) fn of(ip: IpAddr) -> Self {
        match canonical(ip) {
            IpAddr::V6(v6) => {
                let prefix = u128::from(v6) >> 64 << 64;
                Self(IpAddr::V6(Ipv6Addr::from(prefix)))
            }
            v4 => Self(v4),
        }
    }
}

impl std::fmt::Display for ClientKey {
    /// The address (an IPv6 `/64` as its first address): how the shared
    /// history names a client's admission set.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

/// Whether `peer` is one of `trusted`.
pub(crate) fn is_trusted(peer: IpAddr, trusted: &[TrustedProxy]) -> bool {
    trusted.iter().any(|proxy| proxy.contains(peer))
}

/// The client of a request that came from `peer`: `peer` itself, unless it
/// is a trusted proxy. Then `X-Forwarded-For` is read from the right (each
/// proxy appends the address it received from): the first address that is
/// not itself a trusted proxy is the client. An entry that is not an IP
/// address ends the walk (what lies left of it was written by the client
/// and is not believed); with nothing usable, the client is the rightmost
/// address walked, or `peer`.
pub(crate) fn client_ip(peer: IpAddr, headers: &HeaderMap, trusted: &[TrustedProxy]) -> IpAddr {
    if !is_trusted(peer, trusted) {
        return peer;
    }
    let mut client = peer;
    let forwarded = headers
        .get_all("x-forwarded-for")
        .iter()
        .filter_map(|value| value.to_str().ok())
        .collect::<Vec<_>>()
        .join(",");
    for entry in forwarded.rsplit(',') {
        let Ok(ip) = entry.trim().parse::<IpAddr>() else {
            break;
        };
        client = ip;
        if !is_trusted(ip, trusted) {
            break;
        }
    }
    client
}

#[cfg(test)]
mod tests {
    use super::{client_ip, ClientKey, TrustedProxy};
    use axum::http::{HeaderMap, HeaderValue};
    use std::net::IpAddr;

    fn ip(text: &str) -> IpAddr {
        text.parse().unwrap()
    }

    fn forwarded(values: &[&str]) -> HeaderMap {
        let mut headers = HeaderMap::new();
        for value in values {
            headers.append("x-forwarded-for", HeaderValue::from_str(value).unwrap());
        }
        headers
    }

    #[test]
    fn trusted_proxies_parse_and_match_their_networks() {
        let net: TrustedProxy = "10.1.0.0/16".parse().unwrap();
        assert!(net.contains(ip("10.1.200.3")));
        assert!(!net.contains(ip("10.2.0.1")));
        assert!(net.contains(ip("::ffff:10.1.0.9")), "IPv4-mapped counts");
        let host: TrustedProxy = "fd00::1".parse().unwrap();
        assert!(host.contains(ip("fd00::1")) && !host.contains(ip("fd00::2")));
        let all: TrustedProxy = "0.0.0.0/0".parse().unwrap();
        assert!(all.contains(ip("203.0.113.7")) && !all.contains(ip("::1")));
        for bad in ["10.1.0.1/16", "10.0.0.0/33", "nope", "::/129", "10.0.0.0/x"] {
            assert!(bad.parse::<TrustedProxy>().is_err(), "{bad}");
        }
    }

    #[test]
    fn forwarded_for_is_believed_only_from_a_trusted_proxy() {
        let trusted = ["10.0.0.0/8".parse().unwrap()];
        let spoofed = forwarded(&["198.51.100.1"]);
        // A direct client cannot name another address.
        assert_eq!(
            client_ip(ip("203.0.113.9"), &spoofed, &trusted),
            ip("203.0.113.9")
        );
        // Behind the proxy: the rightmost address that is not a proxy; what
        // the client wrote further left is ignored.
        let chain = forwarded(&["198.51.100.1, 203.0.113.9", "10.0.0.2"]);
        assert_eq!(
            client_ip(ip("10.0.0.1"), &chain, &trusted),
            ip("203.0.113.9")
        );
        // Garbage ends the walk at the last address a proxy wrote.
        let garbage = forwarded(&["203.0.113.9, junk, 10.0.0.3"]);
        assert_eq!(
            client_ip(ip("10.0.0.1"), &garbage, &trusted),
            ip("10.0.0.3")
        );
        // No header: the proxy itself.
        assert_eq!(
            client_ip(ip("10.0.0.1"), &HeaderMap::new(), &trusted),
            ip("10.0.0.1")
        );
    }

    #[test]
    fn an_ipv6_client_counts_as_its_slash_64() {
        assert_eq!(
            ClientKey::of(ip("2001:db8:1:2:aaaa::1")),
            ClientKey::of(ip("2001:db8:1:2:bbbb::7"))
        );
        assert_ne!(
            ClientKey::of(ip("2001:db8:1:2::1")),
            ClientKey::of(ip("2001:db8:1:3::1"))
        );
        assert_eq!(
            ClientKey::of(ip("::ffff:192.0.2.1")),
            ClientKey::of(ip("192.0.2.1"))
        );
        assert_ne!(
            ClientKey::of(ip("192.0.2.1")),
            ClientKey::of(ip("192.0.2.2"))
        );
    }
}
