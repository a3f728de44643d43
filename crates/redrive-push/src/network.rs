//! Which addresses push requests may reach. A push endpoint is a URL anyone who can create
//! a subscription chooses, so by default the broker reaches only public addresses:
//! loopback, private (RFC 1918, IPv6 unique local), shared (CGNAT), link-local (cloud
//! metadata services live there), unspecified, multicast, broadcast and reserved
//! addresses are forbidden unless the operator allows them ([`NetworkPolicy`], the
//! `push_allowed_networks` setting).
//!
//! The check runs twice: when a subscription is created (every address its host
//! resolves to) and at every connection, through the push client's resolver
//! ([`GuardedResolver`], which drops forbidden addresses, so a name that later resolves
//! elsewhere — DNS rebinding — is still refused) and, for IP-literal URLs, which the
//! client does not resolve, by [`NetworkPolicy::check_literal`] before sending.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::str::FromStr;
use std::sync::Arc;

use reqwest::Url;

/// Most entries in an allowlist.
pub const MAX_ALLOWED_NETWORKS: usize = 256;

/// An address a push request may not reach.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "{host} resolves to {addr}, a {kind} address that push endpoints may not reach unless \
     push_allowed_networks allows it"
)]
pub struct Forbidden {
    /// The host of the URL.
    pub host: String,
    /// The forbidden address.
    pub addr: IpAddr,
    /// Which kind of address it is (loopback, private, link-local…).
    pub kind: &'static str,
}

/// An allowlist entry that cannot be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NetworkError {
    /// Neither an address, a network (`ADDR/PREFIX`) nor a host name.
    #[error("{0:?} is not an address, a network (ADDR/PREFIX) or a host name")]
    Invalid(String),
    /// Too many entries.
    #[error("at most {MAX_ALLOWED_NETWORKS} allowed networks")]
    TooMany,
}

/// One allowlist entry.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Allowed {
    /// Every address of a network.
    Net { addr: IpAddr, prefix: u8 },
    /// A host name (lower case), whatever it resolves to.
    Host(String),
}

impl Allowed {
    fn contains(&self, ip: IpAddr) -> bool {
        match (self, canonical(ip)) {
            (
                Allowed::Net {
                    addr: IpAddr::V4(n),
                    prefix,
                },
                IpAddr::V4(a),
            ) => {
                let mask = u32::MAX.checked_shl(32 - u32::from(*prefix)).unwrap_or(0);
                u32::from(*n) & mask == u32::from(a) & mask
            }
            (
                Allowed::Net {
                    addr: IpAddr::V6(n),
                    prefix,
                },
                IpAddr::V6(a),
            ) => {
                let mask = u128::MAX.checked_shl(128 - u32::from(*prefix)).unwrap_or(0);
                u128::from(*n) & mask == u128::from(a) & mask
            }
            _ => false,
        }
    }
}

impl FromStr for Allowed {
    type Err = NetworkError;

    fn from_str(s: &str) -> Result<Self, NetworkError> {
        let bad = || NetworkError::Invalid(s.to_owned());
        let s = s.trim();
        if let Some((addr, prefix)) = s.split_once('/') {
            let addr: IpAddr = addr.parse().map_err(|_| bad())?;
            let prefix: u8 = prefix.parse().map_err(|_| bad())?;
            let max = if addr.is_ipv4() { 32 } else { 128 };
            if prefix > max {
                return Err(bad());
            }
            return Ok(Allowed::Net {
                addr: canonical(addr),
                prefix,
            });
        }
        let literal = s.trim_start_matches('[').trim_end_matches(']');
        if let Ok(addr) = literal.parse::<IpAddr>() {
            let addr = canonical(addr);
            let prefix = if addr.is_ipv4() { 32 } else { 128 };
            return Ok(Allowed::Net { addr, prefix });
        }
        let host = s.to_ascii_lowercase();
        let valid = !host.is_empty()
            && host.len() <= 253
            && host.split('.').all(|label| {
                !label.is_empty()
                    && label.len() <= 63
                    && label
                        .bytes()
                        .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
            });
        if !valid {
            return Err(bad());
        }
        Ok(Allowed::Host(host))
    }
}

/// The addresses push requests may reach beyond the public ones: networks
/// (`10.1.0.0/16`, `::1/128`), single addresses, and host names (allowed whatever they
/// resolve to). The default allows nothing private.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NetworkPolicy {
    allowed: Vec<Allowed>,
}

impl NetworkPolicy {
    /// A policy allowing the given entries (see the type's docs) besides public addresses.
    pub fn allowing<S: AsRef<str>>(entries: &[S]) -> Result<Self, NetworkError> {
        if entries.len() > MAX_ALLOWED_NETWORKS {
            return Err(NetworkError::TooMany);
        }
        let allowed = entries
            .iter()
            .map(|e| e.as_ref().parse())
            .collect::<Result<_, _>>()?;
        Ok(NetworkPolicy { allowed })
    }

    /// Whether `host` (a name from a URL) is allowed by name.
    fn allows_host(&self, host: &str) -> bool {
        let host = host.trim_end_matches('.');
        self.allowed
            .iter()
            .any(|a| matches!(a, Allowed::Host(h) if h.eq_ignore_ascii_case(host)))
    }

    /// Checks one address that `host` stands for.
    pub fn check_addr(&self, host: &str, addr: IpAddr) -> Result<(), Forbidden> {
        if self.allows_host(host) || self.allowed.iter().any(|a| a.contains(addr)) {
            return Ok(());
        }
        match forbidden_kind(addr) {
            Some(kind) => Err(Forbidden {
                host: host.to_owned(),
                addr,
                kind,
            }),
            None => Ok(()),
        }
    }

    /// Checks a URL whose host is an IP literal (which a client connects to without
    /// resolving); other URLs pass (their names are checked by the resolver). An
    /// unparsable URL passes too: the request fails on its own.
    pub fn check_literal(&self, url: &str) -> Result<(), Forbidden> {
        let Ok(parsed) = Url::parse(url) else {
            return Ok(());
        };
        let Some(host) = parsed.host_str() else {
            return Ok(());
        };
        match literal_ip(host) {
            Some(addr) => self.check_addr(host, addr),
            None => Ok(()),
        }
    }

    /// Checks an endpoint URL when a subscription is created: an IP literal, or every
    /// address its host name resolves to now. A name that does not resolve passes (the
    /// resolver checks every connection).
    pub async fn check_url(&self, url: &str) -> Result<(), Forbidden> {
        let Ok(parsed) = Url::parse(url) else {
            return Ok(());
        };
        let Some(host) = parsed.host_str().map(str::to_owned) else {
            return Ok(());
        };
        if literal_ip(&host).is_some() {
            return self.check_literal(url);
        }
        if self.allows_host(&host) {
            return Ok(());
        }
        let port = parsed.port_or_known_default().unwrap_or(80);
        let Ok(addrs) = tokio::net::lookup_host((host.as_str(), port)).await else {
            return Ok(());
        };
        for a in addrs {
            self.check_addr(&host, a.ip())?;
        }
        Ok(())
    }
}

/// The address of a URL host that is an IP literal (IPv6 in brackets).
fn literal_ip(host: &str) -> Option<IpAddr> {
    host.trim_start_matches('[')
        .trim_end_matches(']')
        .parse()
        .ok()
}

/// IPv4-mapped IPv6 addresses as the IPv4 address they carry.
fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => ip,
        },
        v4 => v4,
    }
}

/// Why an address is not a public one, or `None` for a public address.
pub fn forbidden_kind(ip: IpAddr) -> Option<&'static str> {
    match canonical(ip) {
        IpAddr::V4(a) => forbidden_v4(a),
        IpAddr::V6(a) => forbidden_v6(a),
    }
}

fn in_v4(a: Ipv4Addr, net: [u8; 4], prefix: u32) -> bool {
    let mask = u32::MAX.checked_shl(32 - prefix).unwrap_or(0);
    u32::from(a) & mask == u32::from(Ipv4Addr::from(net)) & mask
}

fn forbidden_v4(a: Ipv4Addr) -> Option<&'static str> {
    if a == Ipv4Addr::new(169, 254, 169, 254) {
        return Some("cloud metadata");
    }
    let kinds: [([u8; 4], u32, &'static str); 12] = [
        ([0, 0, 0, 0], 8, "unspecified (this network)"),
        ([127, 0, 0, 0], 8, "loopback"),
        ([10, 0, 0, 0], 8, "private"),
        ([172, 16, 0, 0], 12, "private"),
        ([192, 168, 0, 0], 16, "private"),
        ([100, 64, 0, 0], 10, "shared (CGNAT)"),
        ([169, 254, 0, 0], 16, "link-local"),
        ([192, 0, 0, 0], 24, "IETF protocol assignment"),
        ([198, 18, 0, 0], 15, "benchmarking"),
        ([224, 0, 0, 0], 4, "multicast"),
        ([240, 0, 0, 0], 4, "reserved"),
        ([255, 255, 255, 255], 32, "broadcast"),
    ];
    kinds
        .iter()
        .find(|(net, prefix, _)| in_v4(a, *net, *prefix))
        .map(|(_, _, kind)| *kind)
}

fn forbidden_v6(a: Ipv6Addr) -> Option<&'static str> {
    let bits = u128::from(a);
    let within = |net: u128, prefix: u32| {
        let mask = u128::MAX.checked_shl(128 - prefix).unwrap_or(0);
        bits & mask == net & mask
    };
    if a == Ipv6Addr::new(0xfd00, 0xec2, 0, 0, 0, 0, 0, 0x254) {
        return Some("cloud metadata");
    }
    if a.is_unspecified() {
        return Some("unspecified");
    }
    if a.is_loopback() {
        return Some("loopback");
    }
    let kinds: [(u128, u32, &'static str); 6] = [
        (0xfc00 << 112, 7, "private (unique local)"),
        (0xfe80 << 112, 10, "link-local"),
        (0xfec0 << 112, 10, "site-local"),
        (0xff00 << 112, 8, "multicast"),
        // IPv4-compatible (deprecated) and NAT64 addresses carry an IPv4 address that
        // could be a forbidden one.
        (0, 96, "IPv4-compatible"),
        (0x0064_ff9b << 96, 96, "NAT64"),
    ];
    kinds
        .iter()
        .find(|(net, prefix, _)| within(*net, *prefix))
        .map(|(_, _, kind)| *kind)
}

/// The push client's resolver: the system resolver, with the addresses the policy
/// forbids removed. A name left with none fails to resolve, with the reason.
#[derive(Debug, Clone)]
pub struct GuardedResolver {
    policy: NetworkPolicy,
}

impl GuardedResolver {
    /// A resolver enforcing `policy`.
    pub fn new(policy: NetworkPolicy) -> Arc<Self> {
        Arc::new(GuardedResolver { policy })
    }
}

impl reqwest::dns::Resolve for GuardedResolver {
    fn resolve(&self, name: reqwest::dns::Name) -> reqwest::dns::Resolving {
        let policy = self.policy.clone();
        Box::pin(async move {
            let host = name.as_str().to_owned();
            let found: Vec<SocketAddr> =
                tokio::net::lookup_host((host.as_str(), 0)).await?.collect();
            let mut refused = None;
            let kept: Vec<SocketAddr> = found
                .into_iter()
                .filter(|a| match policy.check_addr(&host, a.ip()) {
                    Ok(()) => true,
                    Err(e) => {
                        refused.get_or_insert(e);
                        false
                    }
                })
                .collect();
            match (kept.is_empty(), refused) {
                (true, Some(e)) => Err(Box::new(e) as Box<dyn std::error::Error + Send + Sync>),
                _ => Ok(Box::new(kept.into_iter()) as reqwest::dns::Addrs),
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn private_and_special_addresses_are_forbidden_by_default() {
        let p = NetworkPolicy::default();
        for a in [
            "127.0.0.1",
            "127.9.9.9",
            "10.0.0.1",
            "172.16.0.1",
            "172.31.255.255",
            "192.168.1.1",
            "100.64.0.1",
            "169.254.169.254",
            "169.254.1.1",
            "0.0.0.0",
            "224.0.0.1",
            "255.255.255.255",
            "::1",
            "::",
            "fe80::1",
            "fc00::1",
            "fd00:ec2::254",
            "ff02::1",
            "::ffff:127.0.0.1",
            "::ffff:10.0.0.1",
            "64:ff9b::a00:1",
        ] {
            assert!(p.check_addr("h", ip(a)).is_err(), "{a}");
        }
        for a in ["8.8.8.8", "172.32.0.1", "100.128.0.1", "2606:4700::1111"] {
            assert!(p.check_addr("h", ip(a)).is_ok(), "{a}");
        }
        assert_eq!(
            p.check_addr("h", ip("169.254.169.254")).unwrap_err().kind,
            "cloud metadata"
        );
    }

    #[test]
    fn an_allowlist_opens_networks_addresses_and_names() {
        let p = NetworkPolicy::allowing(&["127.0.0.0/8", "::1", "10.1.0.0/16", "Hooks.Internal"])
            .unwrap();
        assert!(p.check_addr("h", ip("127.0.0.1")).is_ok());
        assert!(p.check_addr("h", ip("::ffff:127.0.0.2")).is_ok());
        assert!(p.check_addr("h", ip("::1")).is_ok());
        assert!(p.check_addr("h", ip("10.1.200.3")).is_ok());
        assert!(p.check_addr("h", ip("10.2.0.1")).is_err());
        assert!(p.check_addr("h", ip("169.254.169.254")).is_err());
        assert!(p.check_addr("hooks.internal", ip("10.9.9.9")).is_ok());
        assert!(p.check_literal("http://10.2.0.1/x").is_err());
        assert!(p.check_literal("http://[::1]:80/x").is_ok());
        assert!(p.check_literal("http://127.0.0.1:9/x").is_ok());
        assert!(
            NetworkPolicy::default()
                .check_literal("http://[::ffff:7f00:1]/")
                .is_err()
        );
        for bad in ["10.0.0.0/33", "::/129", "a b", "", "x/y"] {
            assert!(NetworkPolicy::allowing(&[bad]).is_err(), "{bad}");
        }
    }
}
