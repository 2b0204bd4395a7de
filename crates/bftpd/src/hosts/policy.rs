//! The host policy (RULES.md §8): which addresses a job may make the daemon connect to, checked on
//! every address a name resolves to, so that bftpd is no tool for reaching internal services.

use std::net::IpAddr;

use ipnet::IpNet;

use serde::Deserialize;

/// Which addresses jobs may name (RULES.md §8), checked on every address a host resolves to.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HostPolicyConfig {
    /// Address ranges jobs may reach. Default: all public unicast space.
    #[serde(default = "default_allow")]
    pub allow: Vec<IpNet>,
    /// Ranges refused even inside `allow`. The defaults (link-local, which holds the cloud
    /// metadata addresses, and unspecified/multicast) are always added.
    #[serde(default)]
    pub deny: Vec<IpNet>,
    /// Loopback is refused unless this is true (a daemon on a shared host is no tool for
    /// reaching its local services).
    #[serde(default)]
    pub allow_loopback: bool,
}

fn default_allow() -> Vec<IpNet> {
    vec![
        "0.0.0.0/0".parse().expect("literal"),
        "::/0".parse().expect("literal"),
    ]
}

impl Default for HostPolicyConfig {
    fn default() -> Self {
        HostPolicyConfig {
            allow: default_allow(),
            deny: Vec::new(),
            allow_loopback: false,
        }
    }
}

/// Always refused: link-local (which holds 169.254.169.254 and the other cloud metadata
/// endpoints), the unspecified addresses, multicast and broadcast, and AWS's IPv6 metadata.
const ALWAYS_DENIED: &[&str] = &[
    "169.254.0.0/16",
    "fe80::/10",
    "0.0.0.0/8",
    "::/128",
    "224.0.0.0/4",
    "ff00::/8",
    "255.255.255.255/32",
    "fd00:ec2::254/128",
];

#[derive(Debug, Clone)]
pub struct HostPolicy {
    allow: Vec<IpNet>,
    deny: Vec<IpNet>,
    allow_loopback: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PolicyError {
    #[error("{host} resolves to {addr}, a loopback address; the daemon's host policy does not allow loopback")]
    Loopback { host: String, addr: IpAddr },
    #[error("{host} resolves to {addr}, which the daemon's host policy denies ({net})")]
    Denied {
        host: String,
        addr: IpAddr,
        net: IpNet,
    },
    #[error(
        "{host} resolves to {addr}, which is outside the ranges the daemon's host policy allows"
    )]
    NotAllowed { host: String, addr: IpAddr },
    #[error("{host} does not resolve to any address")]
    NoAddress { host: String },
}

impl HostPolicy {
    pub fn new(cfg: &HostPolicyConfig) -> HostPolicy {
        let mut deny = cfg.deny.clone();
        deny.extend(
            ALWAYS_DENIED
                .iter()
                .map(|s| s.parse::<IpNet>().expect("literal network")),
        );
        HostPolicy {
            allow: cfg.allow.clone(),
            deny,
            allow_loopback: cfg.allow_loopback,
        }
    }

    pub fn check_addr(&self, host: &str, addr: IpAddr) -> Result<(), PolicyError> {
        let addr = canonical(addr);
        if addr.is_loopback() {
            return if self.allow_loopback {
                Ok(())
            } else {
                Err(PolicyError::Loopback {
                    host: host.into(),
                    addr,
                })
            };
        }
        if let Some(net) = self.deny.iter().find(|n| n.contains(&addr)) {
            return Err(PolicyError::Denied {
                host: host.into(),
                addr,
                net: *net,
            });
        }
        if !self.allow.iter().any(|n| n.contains(&addr)) {
            return Err(PolicyError::NotAllowed {
                host: host.into(),
                addr,
            });
        }
        Ok(())
    }

    /// Every address must pass: a name that also resolves to a denied address is refused.
    pub fn check_all(&self, host: &str, addrs: &[IpAddr]) -> Result<(), PolicyError> {
        if addrs.is_empty() {
            return Err(PolicyError::NoAddress { host: host.into() });
        }
        addrs.iter().try_for_each(|a| self.check_addr(host, *a))
    }
}

/// `::ffff:127.0.0.1` is 127.0.0.1: judge mapped addresses as the IPv4 address they are.
fn canonical(addr: IpAddr) -> IpAddr {
    match addr {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map(IpAddr::V4).unwrap_or(addr),
        v4 => v4,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(allow_loopback: bool, deny: &[&str]) -> HostPolicy {
        HostPolicy::new(&HostPolicyConfig {
            allow_loopback,
            deny: deny.iter().map(|d| d.parse().unwrap()).collect(),
            ..HostPolicyConfig::default()
        })
    }

    /// allow_loopback, extra deny ranges, address, Ok or a piece of the error.
    type Case = (
        bool,
        &'static [&'static str],
        &'static str,
        Result<(), &'static str>,
    );

    #[test]
    fn policy_table() {
        let cases: &[Case] = &[
            (false, &[], "192.0.2.10", Ok(())),
            (false, &[], "127.0.0.1", Err("loopback")),
            (true, &[], "127.0.0.1", Ok(())),
            (false, &[], "::1", Err("loopback")),
            (false, &[], "::ffff:127.0.0.1", Err("loopback")),
            (
                false,
                &[],
                "169.254.169.254",
                Err("denies (169.254.0.0/16)"),
            ),
            (true, &[], "fe80::1", Err("denies")),
            (true, &[], "fd00:ec2::254", Err("denies")),
            (
                false,
                &["10.0.0.0/8"],
                "10.1.2.3",
                Err("denies (10.0.0.0/8)"),
            ),
            (false, &[], "0.0.0.0", Err("denies")),
        ];
        for (lo, deny, addr, want) in cases {
            let got = policy(*lo, deny)
                .check_addr("h", addr.parse().unwrap())
                .map_err(|e| e.to_string());
            match (got, want) {
                (Ok(()), Ok(())) => {}
                (Err(e), Err(needle)) => assert!(e.contains(needle), "{addr}: {e}"),
                (got, want) => panic!("{addr}: got {got:?}, want {want:?}"),
            }
        }
    }

    #[test]
    fn allow_list_limits_and_any_bad_address_refuses() {
        let p = HostPolicy::new(&HostPolicyConfig {
            allow: vec!["192.0.2.0/24".parse().unwrap()],
            deny: vec![],
            allow_loopback: false,
        });
        assert!(p
            .check_addr("h", "198.51.100.1".parse().unwrap())
            .unwrap_err()
            .to_string()
            .contains("outside"));
        let mixed = [
            "192.0.2.1".parse().unwrap(),
            "169.254.169.254".parse().unwrap(),
        ];
        assert!(p.check_all("h", &mixed).is_err());
        assert!(p
            .check_all("h", &[])
            .unwrap_err()
            .to_string()
            .contains("does not resolve"));
    }
}
