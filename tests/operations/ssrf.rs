//! The SSRF guard against the IANA special-purpose address registries (`tests/data/`):
//! for every block, its first, middle and last address are public exactly when the most
//! specific block holding them is marked globally reachable; a translated address
//! (`64:ff9b::/96`) is public when the IPv4 address inside it is. Callback URLs that
//! carry credentials are refused.

use crate::support;

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use postback::delivery::ssrf::is_public;
use serde_json::json;

/// A registry block: its first address as a number, its prefix length, whether it is
/// globally reachable, and its name.
struct Block {
    first: u128,
    len: u32,
    global: bool,
    name: String,
}

fn registry(csv: &str, v6: bool) -> Vec<Block> {
    csv.lines()
        .skip(1)
        .map(|line| {
            let (cidr, rest) = line.split_once(',').unwrap();
            let (name, global) = rest.rsplit_once(',').unwrap();
            let (addr, len) = cidr.split_once('/').unwrap();
            let first = match v6 {
                true => u128::from(addr.parse::<Ipv6Addr>().unwrap()),
                false => u128::from(u32::from(addr.parse::<Ipv4Addr>().unwrap())),
            };
            Block {
                first,
                len: len.parse().unwrap(),
                global: global == "True",
                name: name.trim_matches('"').to_string(),
            }
        })
        .collect()
}

fn ip(n: u128, v6: bool) -> IpAddr {
    match v6 {
        true => IpAddr::V6(Ipv6Addr::from(n)),
        false => IpAddr::V4(Ipv4Addr::from(n as u32)),
    }
}

/// Walks every block of a registry.
fn walk(csv: &str, v6: bool) {
    let bits = if v6 { 128 } else { 32 };
    let blocks = registry(csv, v6);
    let size = |b: &Block| 1u128.checked_shl(bits - b.len).unwrap_or(0).wrapping_sub(1);
    let holds = |b: &Block, n: u128| n >= b.first && n - b.first <= size(b);
    for block in &blocks {
        let last = block.first + size(block);
        for n in [block.first, block.first + size(block) / 2, last] {
            let most_specific = blocks
                .iter()
                .filter(|b| holds(b, n))
                .max_by_key(|b| b.len)
                .unwrap();
            let addr = ip(n, v6);
            let expected = match (addr, most_specific.name.as_str()) {
                (IpAddr::V6(a), "IPv4-IPv6 Translat.") if most_specific.len == 96 => {
                    let v4 = Ipv4Addr::from((u128::from(a) & 0xffff_ffff) as u32);
                    is_public(IpAddr::V4(v4))
                }
                _ => most_specific.global,
            };
            assert_eq!(
                is_public(addr),
                expected,
                "{addr} in {} ({}/{})",
                most_specific.name,
                ip(most_specific.first, v6),
                most_specific.len
            );
        }
    }
}

#[test]
fn every_ipv4_registry_block_is_judged_as_the_registry_says() {
    walk(
        include_str!("../data/iana-ipv4-special-registry.csv"),
        false,
    );
}

#[test]
fn every_ipv6_registry_block_is_judged_as_the_registry_says() {
    walk(include_str!("../data/iana-ipv6-special-registry.csv"), true);
}

#[test]
fn multicast_and_addresses_outside_global_unicast_are_not_public_and_the_rest_is() {
    for internal in [
        "224.0.0.1",
        "239.255.255.255",
        "ff02::1",
        "ff0e::1",
        "::127.0.0.1",
        "4000::1",
        "fec0::1",
    ] {
        assert!(!is_public(internal.parse().unwrap()), "{internal}");
    }
    for public in [
        "1.1.1.1",
        "8.8.8.8",
        "100.128.0.1",
        "2606:4700::1111",
        "2a00:1450::1",
        "64:ff9b::808:808",
    ] {
        assert!(is_public(public.parse().unwrap()), "{public}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn callback_urls_with_credentials_are_refused() {
    let (_redis, _receiver, pb) = support::start(&[]).await;
    for url in [
        "http://user:pw@merchant.example/cb",
        "https://user@merchant.example/cb",
        "http://:pw@merchant.example/",
    ] {
        let (status, answer) = pb
            .notify(json!({"url": url, "body": {}, "delay": "1h"}))
            .await;
        assert_eq!(
            (status, answer["error"]["field"].as_str()),
            (422, Some("url")),
            "{url}: {answer}"
        );
        assert!(
            !answer.to_string().contains("pw@"),
            "the credentials are not echoed: {answer}"
        );
    }
}
