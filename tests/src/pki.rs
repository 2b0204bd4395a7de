//! A test PKI made with rcgen in a temporary directory: one CA, and server certificates it
//! (or a stranger CA) signs, with IP SANs for the loopback addresses the test servers listen
//! on (127.0.0.1 to 127.0.0.3). Used by the FTPS end-to-end tests and by `bench-tls`.

use std::path::PathBuf;

use anyhow::{Context, Result};
use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, KeyPair};

use crate::ServerTls;

/// One CA in a temporary directory (`ca.pem`), and the server certificates it signs.
pub struct Pki {
    dir: tempfile::TempDir,
    ca: rcgen::Certificate,
    ca_key: KeyPair,
}

/// How a server certificate is made wrong.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Flaw {
    None,
    /// Its only SAN is another address.
    WrongName,
    /// Its validity ended in 2020.
    Expired,
    /// Signed by a CA bftpd does not know.
    UnknownIssuer,
}

fn ca(name: &str) -> Result<(rcgen::Certificate, KeyPair)> {
    let key = KeyPair::generate()?;
    let mut p = CertificateParams::new(Vec::<String>::new())?;
    p.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    p.distinguished_name.push(DnType::CommonName, name);
    Ok((p.self_signed(&key)?, key))
}

impl Pki {
    pub fn new() -> Result<Pki> {
        let dir = tempfile::Builder::new()
            .prefix("bftp-pki-")
            .tempdir()
            .context("PKI directory")?;
        // The FTP servers read their keys as root before they drop privileges; the files
        // stay private.
        let (ca, ca_key) = ca("bftp test CA")?;
        std::fs::write(dir.path().join("ca.pem"), ca.pem())?;
        Ok(Pki { dir, ca, ca_key })
    }

    /// The CA's certificate (PEM): what a client trusts.
    pub fn ca_file(&self) -> PathBuf {
        self.dir.path().join("ca.pem")
    }

    /// A server certificate for the loopback addresses the tests use, with `flaw`; returns
    /// the server's TLS options (explicit FTPS, TLS demanded before USER if `required`) and
    /// the certificate's DER (for a fingerprint).
    pub fn server(&self, name: &str, flaw: Flaw, required: bool) -> Result<(ServerTls, Vec<u8>)> {
        let sans: Vec<String> = match flaw {
            Flaw::WrongName => vec!["127.0.0.9".into()],
            _ => vec!["127.0.0.1".into(), "127.0.0.2".into(), "127.0.0.3".into()],
        };
        let key = KeyPair::generate()?;
        let mut p = CertificateParams::new(sans)?;
        p.distinguished_name.push(DnType::CommonName, name);
        if flaw == Flaw::Expired {
            p.not_before = rcgen::date_time_ymd(2019, 1, 1);
            p.not_after = rcgen::date_time_ymd(2020, 1, 1);
        }
        let cert = if flaw == Flaw::UnknownIssuer {
            let (other, other_key) = ca("a stranger CA")?;
            p.signed_by(&key, &other, &other_key)?
        } else {
            p.signed_by(&key, &self.ca, &self.ca_key)?
        };
        let cert_path = self.dir.path().join(format!("{name}.pem"));
        let key_path = self.dir.path().join(format!("{name}.key"));
        std::fs::write(&cert_path, cert.pem())?;
        std::fs::write(&key_path, key.serialize_pem())?;
        let tls = ServerTls {
            cert: cert_path,
            key: key_path,
            ca: self.ca_file(),
            required,
            implicit: false,
        };
        Ok((tls, cert.der().to_vec()))
    }
}
