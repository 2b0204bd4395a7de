//! The host policy as the engine's address check, re-applied at every connect, so a DNS
//! change after submit cannot reach a denied address.

use std::net::IpAddr;

use bftp_ftp::AddressCheck;

use crate::hosts::policy::HostPolicy;

/// The host policy, as the engine's check of every address it is about to connect to.
pub struct PolicyCheck(pub HostPolicy);

impl AddressCheck for PolicyCheck {
    fn check(&self, host: &str, addrs: &[IpAddr]) -> Result<(), String> {
        self.0.check_all(host, addrs).map_err(|e| e.to_string())
    }
}
