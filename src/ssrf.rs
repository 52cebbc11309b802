//! The SSRF guard: which addresses count as internal (loopback, private, link-local,
//! CGNAT, unique-local, unspecified, multicast, reserved, and IPv6 forms that embed such
//! an IPv4 address), and a DNS resolver for the sender that hands the HTTP client only
//! public addresses, so that the address checked is the address connected to (no DNS
//! rebinding between a check and the connection).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use reqwest::dns::{Addrs, Name, Resolve, Resolving};

/// The destination was refused: it is, or resolves only to, internal addresses.
#[derive(Debug, thiserror::Error)]
#[error("blocked_destination: {host} is not a public address ({addrs})")]
pub struct Blocked {
    pub host: String,
    pub addrs: String,
}

impl Blocked {
    pub fn new(host: &str, addrs: &[IpAddr]) -> Self {
        let addrs: Vec<String> = addrs.iter().map(IpAddr::to_string).collect();
        Self {
            host: host.to_string(),
            addrs: addrs.join(", "),
        }
    }
}

/// Whether `ip` is a public, routable unicast address.
pub fn is_public(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => is_public_v4(v4),
        IpAddr::V6(v6) => is_public_v6(v6),
    }
}

fn is_public_v4(ip: Ipv4Addr) -> bool {
    let [a, b, c, _] = ip.octets();
    let internal = ip.is_unspecified()
        || a == 0
        || ip.is_loopback()
        || ip.is_private()
        || ip.is_link_local()
        || (a == 100 && (64..128).contains(&b)) // CGNAT 100.64.0.0/10
        || (a == 192 && b == 0 && c == 0) // IETF protocol assignments
        || ip.is_documentation()
        || (a == 198 && (18..20).contains(&b)) // benchmarking 198.18.0.0/15
        || ip.is_multicast()
        || a >= 240; // reserved and broadcast
    !internal
}

fn is_public_v6(ip: Ipv6Addr) -> bool {
    if let Some(v4) = embedded_v4(ip) {
        return is_public_v4(v4);
    }
    let first = ip.segments()[0];
    let internal = ip.is_unspecified()
        || ip.is_loopback()
        || ip.is_multicast()
        || (first & 0xfe00) == 0xfc00 // unique local fc00::/7
        || (first & 0xffc0) == 0xfe80 // link-local fe80::/10
        || (first & 0xffc0) == 0xfec0 // site-local fec0::/10
        || (first == 0x2001 && ip.segments()[1] == 0x0db8); // documentation
    !internal
}

/// The IPv4 address inside an IPv4-mapped, IPv4-compatible, NAT64 or 6to4 address.
fn embedded_v4(ip: Ipv6Addr) -> Option<Ipv4Addr> {
    let s = ip.segments();
    let tail = |hi: u16, lo: u16| Ipv4Addr::from(((hi as u32) << 16) | lo as u32);
    match s {
        [0, 0, 0, 0, 0, 0xffff, hi, lo] => Some(tail(hi, lo)),
        [0, 0, 0, 0, 0, 0, hi, lo] if hi != 0 => Some(tail(hi, lo)),
        [0x64, 0xff9b, 0, 0, 0, 0, hi, lo] => Some(tail(hi, lo)),
        [0x2002, hi, lo, ..] => Some(tail(hi, lo)),
        _ => None,
    }
}

/// Resolves with the system resolver and keeps only public addresses; a name with none
/// fails with `Blocked`.
pub struct PublicOnlyResolver;

impl Resolve for PublicOnlyResolver {
    fn resolve(&self, name: Name) -> Resolving {
        Box::pin(async move {
            let host = name.as_str().to_string();
            let found: Vec<SocketAddr> =
                tokio::net::lookup_host((host.as_str(), 0)).await?.collect();
            let public: Vec<SocketAddr> = found
                .iter()
                .copied()
                .filter(|a| is_public(a.ip()))
                .collect();
            if public.is_empty() {
                let ips: Vec<IpAddr> = found.iter().map(SocketAddr::ip).collect();
                return Err(Box::new(Blocked::new(&host, &ips)) as _);
            }
            Ok(Box::new(public.into_iter()) as Addrs)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn public(s: &str) -> bool {
        is_public(s.parse().unwrap())
    }

    #[test]
    fn internal_addresses_are_not_public() {
        for ip in [
            "0.0.0.0",
            "0.1.2.3",
            "127.0.0.1",
            "127.255.255.254",
            "10.0.0.1",
            "172.16.0.1",
            "172.31.255.255",
            "192.168.0.1",
            "169.254.169.254",
            "100.64.0.1",
            "100.127.255.255",
            "192.0.0.8",
            "192.0.2.1",
            "198.18.0.1",
            "224.0.0.1",
            "240.0.0.1",
            "255.255.255.255",
            "::",
            "::1",
            "fc00::1",
            "fdff::1",
            "fe80::1",
            "febf::1",
            "fec0::1",
            "ff02::1",
            "2001:db8::1",
            "::ffff:127.0.0.1",
            "::ffff:10.0.0.1",
            "::127.0.0.1",
            "64:ff9b::a9fe:a9fe",
            "2002:c0a8:0101::1",
        ] {
            assert!(!public(ip), "{ip}");
        }
    }

    #[test]
    fn public_addresses_are_public() {
        for ip in [
            "1.1.1.1",
            "8.8.8.8",
            "93.184.216.34",
            "100.63.255.255",
            "100.128.0.1",
            "172.32.0.1",
            "198.20.0.1",
            "2606:4700::1111",
            "::ffff:8.8.8.8",
            "2002:0808:0808::1",
        ] {
            assert!(public(ip), "{ip}");
        }
    }
}
