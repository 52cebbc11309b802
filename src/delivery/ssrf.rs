//! The SSRF guard: which addresses count as internal (every block the IANA IPv4 and IPv6
//! special-purpose address registries mark as not globally reachable, multicast, IPv6
//! outside global unicast, and NAT64 forms of an internal IPv4 address), and `Blocked`,
//! the refusal of a destination. `egress` applies it to the addresses it resolves, and
//! `CallbackUrl` to literal addresses at registration.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// The setting that lets callbacks go to internal addresses, which each refusal names as
/// the operator's way out.
pub const ALLOW_PRIVATE: &str = "delivery.allow_private_networks";

/// The destination was refused: it is, or resolves only to, internal addresses.
#[derive(Debug, thiserror::Error)]
#[error("blocked_destination: {host} is not a public address ({addrs}); {ALLOW_PRIVATE} allows it")]
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

/// IPv4 blocks of the IANA IPv4 Special-Purpose Address Registry, with whether each is
/// globally reachable (`N/A` counts as not), and multicast; the most specific block
/// holding an address decides. An address in none is public.
const V4_BLOCKS: &[([u8; 4], u8, bool)] = &[
    ([0, 0, 0, 0], 8, false),
    ([10, 0, 0, 0], 8, false),
    ([100, 64, 0, 0], 10, false),
    ([127, 0, 0, 0], 8, false),
    ([169, 254, 0, 0], 16, false),
    ([172, 16, 0, 0], 12, false),
    ([192, 0, 0, 0], 24, false),
    ([192, 0, 0, 9], 32, true),
    ([192, 0, 0, 10], 32, true),
    ([192, 0, 2, 0], 24, false),
    ([192, 88, 99, 0], 24, false),
    ([192, 168, 0, 0], 16, false),
    ([198, 18, 0, 0], 15, false),
    ([198, 51, 100, 0], 24, false),
    ([203, 0, 113, 0], 24, false),
    ([224, 0, 0, 0], 4, false),
    ([240, 0, 0, 0], 4, false),
];

/// IPv6 blocks of the IANA IPv6 Special-Purpose Address Registry within global unicast
/// (`2000::/3`; everything outside it, but the NAT64 prefix, is not public), as
/// `V4_BLOCKS`.
const V6_BLOCKS: &[([u16; 8], u8, bool)] = &[
    ([0x2001, 0, 0, 0, 0, 0, 0, 0], 23, false),
    ([0x2001, 1, 0, 0, 0, 0, 0, 1], 128, true),
    ([0x2001, 1, 0, 0, 0, 0, 0, 2], 128, true),
    ([0x2001, 1, 0, 0, 0, 0, 0, 3], 128, true),
    ([0x2001, 3, 0, 0, 0, 0, 0, 0], 32, true),
    ([0x2001, 4, 0x112, 0, 0, 0, 0, 0], 48, true),
    ([0x2001, 0x20, 0, 0, 0, 0, 0, 0], 28, true),
    ([0x2001, 0x30, 0, 0, 0, 0, 0, 0], 28, true),
    ([0x2001, 0xdb8, 0, 0, 0, 0, 0, 0], 32, false),
    ([0x2002, 0, 0, 0, 0, 0, 0, 0], 16, false),
    ([0x3fff, 0, 0, 0, 0, 0, 0, 0], 20, false),
];

/// The NAT64 well-known prefix, `64:ff9b::/96`: public when the IPv4 address in its last
/// 32 bits is.
const NAT64: u128 = 0x0064_ff9b_0000_0000_0000_0000_0000_0000;

fn is_public_v4(ip: Ipv4Addr) -> bool {
    let n = u128::from(u32::from(ip));
    let blocks = V4_BLOCKS
        .iter()
        .map(|(a, len, global)| (u128::from(u32::from_be_bytes(*a)), *len, *global));
    most_specific(n, 32, blocks).unwrap_or(true)
}

fn is_public_v6(ip: Ipv6Addr) -> bool {
    let n = u128::from(ip);
    if n >> 32 == NAT64 >> 32 {
        return is_public_v4(Ipv4Addr::from(n as u32));
    }
    if n >> 125 != 0b001 {
        return false;
    }
    let blocks = V6_BLOCKS
        .iter()
        .map(|(a, len, global)| (u128::from(Ipv6Addr::from(*a)), *len, *global));
    most_specific(n, 128, blocks).unwrap_or(true)
}

/// Whether the most specific of `blocks` (first address, prefix length, globally
/// reachable) holding `n` is globally reachable; `None` when none holds it.
fn most_specific(
    n: u128,
    bits: u32,
    blocks: impl Iterator<Item = (u128, u8, bool)>,
) -> Option<bool> {
    blocks
        .filter(|(first, len, _)| {
            let host_bits = bits - u32::from(*len);
            n.checked_shr(host_bits).unwrap_or(0) == first.checked_shr(host_bits).unwrap_or(0)
        })
        .max_by_key(|(_, len, _)| *len)
        .map(|(_, _, global)| global)
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
            "::ffff:8.8.8.8",
            "2002:0808:0808::1",
            "2001::1",
            "64:ff9b:1::1",
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
            "64:ff9b::808:808",
        ] {
            assert!(public(ip), "{ip}");
        }
    }
}
