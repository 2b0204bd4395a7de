//! TLS for FTP connections (FTPS, RFC 4217) with rustls: which certificates a host must
//! present (`Trust`), the client configuration per host, the handshake with its refusal
//! reasons, and the one stream type a control or listing data connection reads and writes
//! (clear or TLS).
//!
//! How a certificate is checked, per host (the daemon's `[ftp.tls]` host entries):
//! - the system's roots (the default);
//! - a CA file (PEM) of the host: only certificates that chain to it, with the host name or
//!   address checked as usual;
//! - a pinned SHA-256 fingerprint of the server's certificate: that certificate and no
//!   other, whatever its issuer, name or dates (the handshake's signature is still checked);
//! - `insecure`: any certificate; only as an explicit per-host setting, and named in the
//!   report.
//!
//! One `ClientConfig` per host, kept for the daemon's life: its session cache lets a data
//! connection resume the control connection's TLS session, which most servers demand.

use std::fmt;
use std::io;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll};
use std::time::Duration;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::{verify_tls12_signature, verify_tls13_signature, CryptoProvider};
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{
    CertificateError, ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme,
};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio_rustls::client::TlsStream;
use tokio_rustls::TlsConnector;

/// How one host's certificate is checked.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Trust {
    /// The system's root certificates.
    System,
    /// The CA certificates (PEM) in this file.
    CaFile(PathBuf),
    /// Exactly the certificate with this SHA-256 fingerprint (32 bytes).
    Pinned([u8; 32]),
    /// Any certificate (an explicit per-host setting; the report names it).
    Insecure,
}

impl Trust {
    /// How a certificate was checked under this trust, as data for the ledger.
    pub fn check(&self) -> bftp_core::tls::CertificateCheck {
        use bftp_core::tls::CertificateCheck as C;
        match self {
            Trust::System => C::SystemRoots,
            Trust::CaFile(p) => C::CaFile(p.display().to_string()),
            Trust::Pinned(fp) => C::Pinned(hex(fp)),
            Trust::Insecure => C::Insecure,
        }
    }
}

impl fmt::Display for Trust {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Trust::System => f.write_str("system roots"),
            Trust::CaFile(p) => write!(f, "CA file {}", p.display()),
            Trust::Pinned(fp) => write!(f, "pinned SHA-256 {}", hex(fp)),
            Trust::Insecure => f.write_str("INSECURE: certificate not checked"),
        }
    }
}

/// One `[ftp.tls]` host entry: the host as a job names it (case-insensitive) and its trust.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HostTrust {
    pub host: String,
    pub trust: Trust,
}

/// Why the TLS settings could not be built (at start-up).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TlsSetupError {
    #[error("TLS CA file {path}: {detail}")]
    CaFile { path: String, detail: String },
    #[error("TLS fingerprint {value:?}: expected 64 hex digits (colons allowed)")]
    Fingerprint { value: String },
    #[error("the system's root certificates could not be loaded: {0}")]
    SystemRoots(String),
}

/// Parse a SHA-256 fingerprint written as hex, with or without colons, either case.
pub fn parse_fingerprint(value: &str) -> Result<[u8; 32], TlsSetupError> {
    let digits: String = value.chars().filter(|c| *c != ':').collect();
    let bad = || TlsSetupError::Fingerprint {
        value: value.to_owned(),
    };
    if digits.len() != 64 || !digits.is_ascii() {
        return Err(bad());
    }
    let mut out = [0u8; 32];
    for (i, byte) in out.iter_mut().enumerate() {
        *byte = u8::from_str_radix(&digits[2 * i..2 * i + 2], 16).map_err(|_| bad())?;
    }
    Ok(out)
}

/// Lower-case hex with colons, the way `openssl x509 -fingerprint` shows it.
pub fn hex(bytes: &[u8]) -> String {
    bytes
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect::<Vec<_>>()
        .join(":")
}

/// The SHA-256 fingerprint of a DER certificate.
pub fn fingerprint(der: &[u8]) -> [u8; 32] {
    let digest = ring::digest::digest(&ring::digest::SHA256, der);
    let mut out = [0u8; 32];
    out.copy_from_slice(digest.as_ref());
    out
}

/// Every host's TLS client configuration. Cheap to clone.
#[derive(Clone, Default)]
pub struct TlsTrust {
    inner: Arc<TrustInner>,
}

#[derive(Default)]
struct TrustInner {
    hosts: Vec<(String, Trust, Arc<ClientConfig>)>,
    /// Loaded at the first connection that needs it (tests and most jobs never do).
    system: OnceLock<Result<Arc<ClientConfig>, TlsSetupError>>,
}

impl fmt::Debug for TlsTrust {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list()
            .entries(self.inner.hosts.iter().map(|(h, t, _)| (h, t)))
            .finish()
    }
}

fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

fn builder() -> rustls::ConfigBuilder<ClientConfig, rustls::WantsVerifier> {
    // The ring provider's safe defaults always build.
    ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .unwrap_or_else(|_| ClientConfig::builder())
}

fn with_roots(roots: RootCertStore) -> Arc<ClientConfig> {
    Arc::new(
        builder()
            .with_root_certificates(roots)
            .with_no_client_auth(),
    )
}

fn with_verifier(verifier: Arc<dyn ServerCertVerifier>) -> Arc<ClientConfig> {
    Arc::new(
        builder()
            .dangerous()
            .with_custom_certificate_verifier(verifier)
            .with_no_client_auth(),
    )
}

fn load_ca_file(path: &Path) -> Result<RootCertStore, TlsSetupError> {
    use rustls::pki_types::pem::PemObject;
    let err = |detail: String| TlsSetupError::CaFile {
        path: path.display().to_string(),
        detail,
    };
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(path)
        .map_err(|e| err(e.to_string()))?
        .collect::<Result<_, _>>()
        .map_err(|e| err(e.to_string()))?;
    if certs.is_empty() {
        return Err(err("no certificate in it".into()));
    }
    let mut roots = RootCertStore::empty();
    for c in certs {
        roots.add(c).map_err(|e| err(e.to_string()))?;
    }
    Ok(roots)
}

impl TlsTrust {
    /// Build the per-host configurations (reading every CA file now, so a bad one stops
    /// the daemon at start, not a job later).
    pub fn new(hosts: Vec<HostTrust>) -> Result<TlsTrust, TlsSetupError> {
        let mut built = Vec::new();
        for h in hosts {
            let config = match &h.trust {
                Trust::System => None,
                Trust::CaFile(path) => Some(with_roots(load_ca_file(path)?)),
                Trust::Pinned(fp) => Some(with_verifier(Arc::new(AnyCert {
                    pin: Some(*fp),
                    provider: provider(),
                }))),
                Trust::Insecure => Some(with_verifier(Arc::new(AnyCert {
                    pin: None,
                    provider: provider(),
                }))),
            };
            if let Some(config) = config {
                built.push((h.host.to_ascii_lowercase(), h.trust, config));
            }
        }
        Ok(TlsTrust {
            inner: Arc::new(TrustInner {
                hosts: built,
                system: OnceLock::new(),
            }),
        })
    }

    /// The configuration and trust for `host`.
    pub fn for_host(&self, host: &str) -> Result<(Arc<ClientConfig>, Trust), TlsSetupError> {
        let host = host.to_ascii_lowercase();
        if let Some((_, trust, config)) = self.inner.hosts.iter().find(|(h, _, _)| *h == host) {
            return Ok((config.clone(), trust.clone()));
        }
        let system = self.inner.system.get_or_init(|| {
            let loaded = rustls_native_certs::load_native_certs();
            if loaded.certs.is_empty() {
                let detail = loaded
                    .errors
                    .first()
                    .map(|e| e.to_string())
                    .unwrap_or_else(|| "none found".into());
                return Err(TlsSetupError::SystemRoots(detail));
            }
            let mut roots = RootCertStore::empty();
            roots.add_parsable_certificates(loaded.certs);
            Ok(with_roots(roots))
        });
        system.clone().map(|c| (c, Trust::System))
    }
}

/// A pinned certificate (`pin`), or any certificate (`None`, insecure); the handshake's
/// signatures are checked either way, so the peer holds the key of what it showed.
#[derive(Debug)]
struct AnyCert {
    pin: Option<[u8; 32]>,
    provider: Arc<CryptoProvider>,
}

impl ServerCertVerifier for AnyCert {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        match self.pin {
            Some(pin) if fingerprint(end_entity) != pin => Err(rustls::Error::InvalidCertificate(
                CertificateError::ApplicationVerificationFailure,
            )),
            _ => Ok(ServerCertVerified::assertion()),
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls12_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls13_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.provider
            .signature_verification_algorithms
            .supported_schemes()
    }
}

/// Why a TLS handshake gave no connection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HandshakeError {
    /// The server's certificate was refused: permanent.
    Certificate { reason: String },
    /// Anything else (reset, a protocol error, no answer): transient, but never a reason
    /// to go on in clear.
    Failed { detail: String },
}

/// The words a report shows for a refused certificate.
pub fn certificate_reason(e: &CertificateError, trust: &Trust) -> String {
    match e {
        CertificateError::Expired | CertificateError::ExpiredContext { .. } => {
            "the certificate has expired".into()
        }
        CertificateError::NotValidYet | CertificateError::NotValidYetContext { .. } => {
            "the certificate is not valid yet".into()
        }
        CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. } => {
            "wrong name: the certificate is not valid for this host name or address".into()
        }
        CertificateError::UnknownIssuer => {
            format!("unknown issuer: no trusted CA ({trust}) signed it")
        }
        CertificateError::BadSignature => "the certificate's signature is bad".into(),
        CertificateError::Revoked => "the certificate is revoked".into(),
        CertificateError::ApplicationVerificationFailure => {
            format!("the certificate is not the pinned one ({trust})")
        }
        other => format!("{other:?}"),
    }
}

/// TLS handshake as a client on `tcp`, for `host` (a name or an address: an address is
/// checked against the certificate's IP SANs).
pub(crate) async fn handshake(
    config: Arc<ClientConfig>,
    trust: &Trust,
    host: &str,
    tcp: TcpStream,
    timeout: Duration,
) -> Result<TlsStream<TcpStream>, HandshakeError> {
    let name = ServerName::try_from(host.to_owned()).map_err(|e| HandshakeError::Failed {
        detail: format!("{host} is not a TLS server name: {e}"),
    })?;
    let connector = TlsConnector::from(config);
    match tokio::time::timeout(timeout, connector.connect(name, tcp)).await {
        Ok(Ok(stream)) => Ok(stream),
        Ok(Err(e)) => Err(handshake_error(&e, trust)),
        Err(_) => Err(HandshakeError::Failed {
            detail: format!("no TLS handshake within {timeout:?}"),
        }),
    }
}

fn handshake_error(e: &io::Error, trust: &Trust) -> HandshakeError {
    let inner = e
        .get_ref()
        .and_then(|inner| inner.downcast_ref::<rustls::Error>());
    match inner {
        Some(rustls::Error::InvalidCertificate(c)) => HandshakeError::Certificate {
            reason: certificate_reason(c, trust),
        },
        Some(other) => HandshakeError::Failed {
            detail: format!("TLS handshake failed: {other}"),
        },
        None => HandshakeError::Failed {
            detail: format!("TLS handshake failed: {e}"),
        },
    }
}

/// `TLS 1.3`, `TLS 1.2`, for the report.
pub(crate) fn version_name(stream: &TlsStream<TcpStream>) -> String {
    match stream.get_ref().1.protocol_version() {
        Some(rustls::ProtocolVersion::TLSv1_3) => "TLS 1.3".into(),
        Some(rustls::ProtocolVersion::TLSv1_2) => "TLS 1.2".into(),
        Some(other) => format!("{other:?}"),
        None => "TLS".into(),
    }
}

/// A connection read and written in clear or through TLS.
#[derive(Debug)]
pub enum Stream {
    Plain(TcpStream),
    Tls(Box<TlsStream<TcpStream>>),
}

impl Stream {
    pub fn is_tls(&self) -> bool {
        matches!(self, Stream::Tls(_))
    }

    /// The TCP connection under the stream.
    pub fn tcp(&self) -> &TcpStream {
        match self {
            Stream::Plain(tcp) => tcp,
            Stream::Tls(tls) => tls.get_ref().0,
        }
    }
}

impl AsyncRead for Stream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_read(cx, buf),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Stream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_write(cx, buf),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_flush(cx),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_shutdown(cx),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_shutdown(cx),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fingerprints_parse_with_or_without_colons() {
        let plain = "00112233445566778899aabbccddeeff00112233445566778899AABBCCDDEEFF";
        let fp = parse_fingerprint(plain).unwrap();
        assert_eq!(fp[1], 0x11);
        assert_eq!(parse_fingerprint(&hex(&fp)).unwrap(), fp);
        for bad in ["", "00:11", &plain[..62], &format!("{}zz", &plain[..62])] {
            assert!(parse_fingerprint(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn refusal_reasons_name_the_cause() {
        let t = Trust::System;
        assert!(certificate_reason(&CertificateError::Expired, &t).contains("expired"));
        assert!(certificate_reason(&CertificateError::NotValidForName, &t).contains("wrong name"));
        assert!(certificate_reason(&CertificateError::UnknownIssuer, &t).contains("unknown issuer"));
        let pinned = Trust::Pinned([7; 32]);
        assert!(
            certificate_reason(&CertificateError::ApplicationVerificationFailure, &pinned)
                .contains("pinned")
        );
    }

    #[test]
    fn host_entries_are_found_case_insensitively_and_others_use_the_system() {
        let trust = TlsTrust::new(vec![HostTrust {
            host: "FTP.Example.org".into(),
            trust: Trust::Insecure,
        }])
        .unwrap();
        // Only the host entry is asked for: the system roots are not loaded by this test.
        assert_eq!(
            trust.for_host("ftp.example.ORG").unwrap().1,
            Trust::Insecure
        );
        let missing = TlsTrust::new(vec![HostTrust {
            host: "h".into(),
            trust: Trust::CaFile("/nonexistent/ca.pem".into()),
        }]);
        assert!(matches!(missing, Err(TlsSetupError::CaFile { .. })));
    }
}
