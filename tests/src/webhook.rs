//! A webhook receiver started by a test: an HTTP and an HTTPS listener (a certificate from the
//! tests' PKI) on free loopback ports, recording every request (method, target, headers,
//! body, arrival time) and answering as the test scripts it: a status, an answer after a
//! delay, no answer at all (a receiver that hangs), a redirect. Unscripted requests get 200.
//!
//! It runs on a thread of its own with its own runtime, so a synchronous test, an async one
//! and a benchmark use it alike. [`verify`] is the example receiver's check of a request:
//! `bftp_core::event::verify` on the recorded header and body.

use std::collections::VecDeque;
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant, SystemTime};

use anyhow::{bail, Context, Result};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpListener;

use crate::pki::{Flaw, Pki};

/// The largest request head or body the receiver takes (bftpd's bodies are bounded well below).
const MAX_REQUEST: usize = 16 * 1024 * 1024;

/// One request as it arrived.
#[derive(Debug, Clone)]
pub struct Received {
    pub method: String,
    /// The request target: path and query.
    pub target: String,
    /// Names lowercase, in order.
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
    /// When its last byte arrived.
    pub at: SystemTime,
    /// Over the HTTPS listener.
    pub tls: bool,
}

impl Received {
    pub fn header(&self, name: &str) -> Option<&str> {
        let name = name.to_ascii_lowercase();
        self.headers
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, v)| v.as_str())
    }
}

/// How the receiver answers one request.
#[derive(Debug, Clone)]
pub enum Reply {
    /// This status at once, with a short text body.
    Status(u16),
    /// This status after this long.
    After(Duration, u16),
    /// Never an answer: the connection stays open, silent, until the client gives up.
    Hang,
    /// A redirect (301, 302, 307, 308) to this location.
    Redirect(u16, String),
    /// This status with a body of this many bytes (a receiver that answers too much); what
    /// the client took before it closed is [`Receiver::answered_bytes`].
    Long(u16, usize),
}

#[derive(Default)]
struct State {
    received: Vec<Received>,
    script: VecDeque<Reply>,
    connections: usize,
    /// Body bytes of `Reply::Long` answers written before the client closed.
    answered: usize,
}

struct Shared {
    state: Mutex<State>,
    arrived: Condvar,
}

impl Shared {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The receiver; stopped on drop.
pub struct Receiver {
    http: SocketAddr,
    https: SocketAddr,
    shared: Arc<Shared>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Receiver {
    /// HTTP and HTTPS listeners on 127.0.0.1, the HTTPS one with a certificate `pki`'s CA
    /// signs (for 127.0.0.1).
    pub fn start(pki: &Pki) -> Result<Receiver> {
        Receiver::start_with(pki, Flaw::None)
    }

    /// As [`Receiver::start`], with a certificate that has `flaw` (e.g. an unknown issuer).
    pub fn start_with(pki: &Pki, flaw: Flaw) -> Result<Receiver> {
        static SERIAL: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = SERIAL.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let (tls, _der) = pki.server(&format!("webhook-receiver-{n}"), flaw, false)?;
        let config = server_config(&tls.cert, &tls.key)?;
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
        let shared = Arc::new(Shared {
            state: Mutex::new(State::default()),
            arrived: Condvar::new(),
        });
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .context("the receiver's runtime")?;
        // Bound here, served on the receiver's thread: a caller may be inside a runtime.
        let bind = || -> Result<std::net::TcpListener> {
            let l = std::net::TcpListener::bind((Ipv4Addr::LOCALHOST, 0))?;
            l.set_nonblocking(true)?;
            Ok(l)
        };
        let (http, https) = (bind()?, bind()?);
        let (http_addr, https_addr) = (http.local_addr()?, https.local_addr()?);
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let s = shared.clone();
        let thread = std::thread::Builder::new()
            .name("webhook-receiver".into())
            .spawn(move || {
                rt.block_on(async move {
                    let (Ok(http), Ok(https)) =
                        (TcpListener::from_std(http), TcpListener::from_std(https))
                    else {
                        return;
                    };
                    let plain = accept_loop(http, None, s.clone());
                    let secure = accept_loop(https, Some(acceptor), s);
                    tokio::select! {
                        _ = plain => {}
                        _ = secure => {}
                        _ = stop_rx => {}
                    }
                });
                // Connections still open (a hanging answer) end with the runtime.
                rt.shutdown_timeout(Duration::from_millis(100));
            })?;
        Ok(Receiver {
            http: http_addr,
            https: https_addr,
            shared,
            stop: Some(stop_tx),
            thread: Some(thread),
        })
    }

    /// `http://127.0.0.1:PORT{path}`.
    pub fn http_url(&self, path: &str) -> String {
        format!("http://{}{path}", self.http)
    }

    /// `https://127.0.0.1:PORT{path}`.
    pub fn https_url(&self, path: &str) -> String {
        format!("https://{}{path}", self.https)
    }

    pub fn http_addr(&self) -> SocketAddr {
        self.http
    }

    pub fn https_addr(&self) -> SocketAddr {
        self.https
    }

    /// Answers for the next requests, in order; after them, 200.
    pub fn script(&self, replies: impl IntoIterator<Item = Reply>) {
        self.shared.lock().script.extend(replies);
    }

    /// Every request so far, in arrival order.
    pub fn received(&self) -> Vec<Received> {
        self.shared.lock().received.clone()
    }

    pub fn count(&self) -> usize {
        self.shared.lock().received.len()
    }

    /// TCP connections accepted on either listener (a refused target makes none).
    pub fn connections(&self) -> usize {
        self.shared.lock().connections
    }

    /// Body bytes of the `Reply::Long` answers that the clients took.
    pub fn answered_bytes(&self) -> usize {
        self.shared.lock().answered
    }

    /// Waits until `n` requests have arrived; all of them, or an error after `limit`.
    pub fn wait_for(&self, n: usize, limit: Duration) -> Result<Vec<Received>> {
        let deadline = Instant::now() + limit;
        let mut state = self.shared.lock();
        while state.received.len() < n {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                bail!(
                    "the webhook receiver got {} requests in {limit:?}, not {n}",
                    state.received.len()
                );
            }
            state = self
                .shared
                .arrived
                .wait_timeout(state, left)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
        Ok(state.received.clone())
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// The example receiver's check: the request's `Bftp-Signature` against its body and the
/// daemon's key, within `tolerance` of now.
pub fn verify(
    request: &Received,
    key: &[u8],
    tolerance: Duration,
) -> Result<(), bftp_core::event::VerifyError> {
    let now = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let header = request
        .header(bftp_core::event::SIGNATURE_HEADER)
        .unwrap_or("");
    bftp_core::event::verify(header, key, &request.body, now, tolerance)
}

fn server_config(cert: &std::path::Path, key: &std::path::Path) -> Result<rustls::ServerConfig> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(cert)
        .context("the receiver's certificate")?
        .collect::<Result<_, _>>()
        .context("the receiver's certificate")?;
    let key = PrivateKeyDer::from_pem_file(key).context("the receiver's key")?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    Ok(rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_no_client_auth()
        .with_single_cert(certs, key)?)
}

async fn accept_loop(
    listener: TcpListener,
    tls: Option<tokio_rustls::TlsAcceptor>,
    shared: Arc<Shared>,
) {
    loop {
        let Ok((tcp, _)) = listener.accept().await else {
            continue;
        };
        shared.lock().connections += 1;
        let shared = shared.clone();
        match &tls {
            None => {
                tokio::spawn(serve(tcp, false, shared));
            }
            Some(acceptor) => {
                let acceptor = acceptor.clone();
                tokio::spawn(async move {
                    // A client that refuses the certificate ends here.
                    if let Ok(stream) = acceptor.accept(tcp).await {
                        serve(stream, true, shared).await;
                    }
                });
            }
        }
    }
}

/// HTTP/1.1 requests on one connection (kept alive), each recorded and answered.
async fn serve<S: AsyncRead + AsyncWrite + Unpin>(mut io: S, tls: bool, shared: Arc<Shared>) {
    let mut buf: Vec<u8> = Vec::new();
    loop {
        let request = match read_request(&mut io, &mut buf, tls).await {
            Ok(Some(r)) => r,
            Ok(None) | Err(_) => return,
        };
        // Like many receivers, it quotes what it was asked (a webhook URL's token included).
        let asked = request.target.clone();
        let reply = {
            let mut state = shared.lock();
            state.received.push(request);
            shared.arrived.notify_all();
            state.script.pop_front().unwrap_or(Reply::Status(200))
        };
        let (status, location) = match reply {
            Reply::Long(status, len) => {
                let head = format!(
                    "HTTP/1.1 {status} {}\r\nContent-Type: text/plain\r\nContent-Length: {len}\r\n\r\n",
                    reason(status)
                );
                if io.write_all(head.as_bytes()).await.is_err() {
                    return;
                }
                let chunk = vec![b'x'; 64 * 1024];
                let mut left = len;
                while left > 0 {
                    let n = left.min(chunk.len());
                    if io.write_all(&chunk[..n]).await.is_err() {
                        return;
                    }
                    shared.lock().answered += n;
                    left -= n;
                }
                continue;
            }
            Reply::Status(s) => (s, None),
            Reply::After(wait, s) => {
                tokio::time::sleep(wait).await;
                (s, None)
            }
            Reply::Hang => {
                // Silent until the client closes (read returns 0) or the receiver stops.
                let mut sink = [0u8; 1024];
                while matches!(io.read(&mut sink).await, Ok(n) if n > 0) {}
                return;
            }
            Reply::Redirect(s, to) => (s, Some(to)),
        };
        let body = format!("receiver says {status} to {asked}\n");
        let mut head = format!(
            "HTTP/1.1 {status} {}\r\nContent-Type: text/plain\r\nContent-Length: {}\r\n",
            reason(status),
            body.len()
        );
        if let Some(to) = location {
            head.push_str(&format!("Location: {to}\r\n"));
        }
        head.push_str("\r\n");
        if io.write_all(head.as_bytes()).await.is_err()
            || io.write_all(body.as_bytes()).await.is_err()
            || io.flush().await.is_err()
        {
            return;
        }
    }
}

/// One request from `io` (`buf` holds what was read past the previous one); `None` when the
/// client closed the connection between requests.
async fn read_request<S: AsyncRead + Unpin>(
    io: &mut S,
    buf: &mut Vec<u8>,
    tls: bool,
) -> Result<Option<Received>> {
    let head_end = loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i;
        }
        if buf.len() > MAX_REQUEST {
            bail!("request head too long");
        }
        let mut chunk = [0u8; 16 * 1024];
        let n = io.read(&mut chunk).await?;
        if n == 0 {
            return Ok(None);
        }
        buf.extend_from_slice(&chunk[..n]);
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).into_owned();
    let mut lines = head.split("\r\n");
    let mut first = lines.next().unwrap_or("").split(' ');
    let method = first.next().unwrap_or("").to_string();
    let target = first.next().unwrap_or("").to_string();
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    let len: usize = headers
        .iter()
        .find(|(n, _)| n == "content-length")
        .and_then(|(_, v)| v.parse().ok())
        .unwrap_or(0);
    if len > MAX_REQUEST {
        bail!("request body too long");
    }
    let body_start = head_end + 4;
    while buf.len() < body_start + len {
        let mut chunk = [0u8; 64 * 1024];
        let n = io.read(&mut chunk).await?;
        if n == 0 {
            bail!("the client closed the connection in a body");
        }
        buf.extend_from_slice(&chunk[..n]);
    }
    let body = buf[body_start..body_start + len].to_vec();
    buf.drain(..body_start + len);
    Ok(Some(Received {
        method,
        target,
        headers,
        body,
        at: SystemTime::now(),
        tls,
    }))
}

fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        204 => "No Content",
        301 => "Moved Permanently",
        302 => "Found",
        307 => "Temporary Redirect",
        308 => "Permanent Redirect",
        400 => "Bad Request",
        404 => "Not Found",
        408 => "Request Timeout",
        429 => "Too Many Requests",
        500 => "Internal Server Error",
        503 => "Service Unavailable",
        _ => "Status",
    }
}
