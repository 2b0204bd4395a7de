//! The Unix socket: binding it safely, and serving HTTP/1.1 on each connection with the
//! caller's identity (SO_PEERCRED) attached to every request; and the optional TCP listener
//! that serves `/metrics` alone.
//!
//! Every connection holds a file descriptor, so none may be held for nothing: a connection
//! with no request under way is closed after `idle_timeout`; a request must arrive whole
//! (headers and body) within `header_read_timeout` of its first byte; one Unix user may hold
//! `max_connections_per_user` connections and all together `max_connections`, and a
//! connection over either limit gets an HTTP error at once and is closed. hyper's own
//! `header_read_timeout` is not used: it also runs while a connection waits for its next
//! request, so it could not be told apart from the idle bound.

use std::collections::HashMap;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context as TaskContext, Poll};
use std::time::Duration;

use anyhow::{bail, Context};
use axum::Router;
use http_body_util::{BodyExt, Limited};
use hyper::body::{Body, Bytes, Frame, Incoming, SizeHint};
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, UnixListener, UnixStream};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tower::ServiceExt;

use crate::api::identity::{AdminPolicy, Caller};
use crate::config::ApiConfig;

/// The largest request body read (axum's own default limit for a body, kept as it was).
const MAX_BODY: usize = 2 << 20;

/// Binds the socket with the configured mode and group. A socket file left by a crashed
/// daemon is replaced; one that a live daemon still answers on is an error.
pub async fn bind(path: &Path, mode: u32, group: Option<&str>) -> anyhow::Result<UnixListener> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)
            .with_context(|| format!("cannot create socket directory {}", dir.display()))?;
    }
    if path.exists() {
        if UnixStream::connect(path).await.is_ok() {
            bail!("another bftpd is already listening on {}", path.display());
        }
        std::fs::remove_file(path)
            .with_context(|| format!("cannot remove stale socket {}", path.display()))?;
    }
    let listener =
        UnixListener::bind(path).with_context(|| format!("cannot bind {}", path.display()))?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
        .with_context(|| format!("cannot chmod {}", path.display()))?;
    if let Some(name) = group {
        let g = nix::unistd::Group::from_name(name)
            .with_context(|| format!("cannot look up socket_group {name:?}"))?
            .with_context(|| format!("socket_group {name:?} does not exist"))?;
        nix::unistd::chown(path, None, Some(g.gid))
            .with_context(|| format!("cannot give {} to group {name}", path.display()))?;
    }
    Ok(listener)
}

/// Who a connection counts against.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Peer {
    /// A Unix user on the API socket.
    User(u32),
    /// A TCP client of the metrics listener.
    Tcp(IpAddr),
}

/// Why a connection is turned away.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// The peer already holds its share.
    PeerFull { limit: usize },
    /// All connections together are at the limit.
    Full { limit: usize },
}

/// The admission rule: a peer holding `of_peer` connections, with `total` open in all,
/// may open one more.
pub fn admit_rule(
    total: usize,
    of_peer: usize,
    max_total: usize,
    max_per_peer: usize,
) -> Result<(), Refusal> {
    if of_peer >= max_per_peer {
        Err(Refusal::PeerFull {
            limit: max_per_peer,
        })
    } else if total >= max_total {
        Err(Refusal::Full { limit: max_total })
    } else {
        Ok(())
    }
}

impl Refusal {
    /// The HTTP answer written at once, before the connection is closed. Written raw: the
    /// client may not even have sent its request yet, and none of it is read.
    fn response(&self, peer: Peer) -> Vec<u8> {
        let (status, kind, message) = match self {
            Refusal::PeerFull { limit } => (
                "429 Too Many Requests",
                "too_many_connections",
                format!(
                    "{} already has {limit} connections open to bftpd, the most one user may \
                     hold ([api] max_connections_per_user); close some and try again",
                    match peer {
                        Peer::User(uid) => format!("user {uid}"),
                        Peer::Tcp(ip) => format!("address {ip}"),
                    }
                ),
            ),
            Refusal::Full { limit } => (
                "503 Service Unavailable",
                "unavailable",
                format!(
                    "bftpd has {limit} connections open, its limit ([api] max_connections); \
                     try again shortly"
                ),
            ),
        };
        let body = serde_json::to_string(&bftp_api::ErrorBody {
            kind: kind.into(),
            message,
            job_id: None,
        })
        .unwrap_or_default();
        format!(
            "HTTP/1.1 {status}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\
             Connection: close\r\n\r\n{body}",
            body.len()
        )
        .into_bytes()
    }
}

/// The connections open now, per peer and in all.
#[derive(Debug)]
pub struct Admission {
    max_total: usize,
    max_per_peer: usize,
    open: Mutex<(usize, HashMap<Peer, usize>)>,
}

/// One admitted connection; dropping it gives its place back.
pub struct Slot {
    admission: Arc<Admission>,
    peer: Peer,
}

impl Admission {
    pub fn new(max_total: usize, max_per_peer: usize) -> Arc<Admission> {
        Arc::new(Admission {
            max_total,
            max_per_peer,
            open: Mutex::new((0, HashMap::new())),
        })
    }

    pub fn admit(self: &Arc<Self>, peer: Peer) -> Result<Slot, Refusal> {
        let mut open = self.open.lock().unwrap_or_else(|e| e.into_inner());
        let of_peer = open.1.get(&peer).copied().unwrap_or(0);
        admit_rule(open.0, of_peer, self.max_total, self.max_per_peer)?;
        open.0 += 1;
        *open.1.entry(peer).or_insert(0) += 1;
        Ok(Slot {
            admission: self.clone(),
            peer,
        })
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut open = self
            .admission
            .open
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        open.0 = open.0.saturating_sub(1);
        if let Some(n) = open.1.get_mut(&self.peer) {
            *n -= 1;
            if *n == 0 {
                open.1.remove(&self.peer);
            }
        }
    }
}

/// Descriptors kept out of the API's reach: the store's files, the log, the listeners, the
/// refusals in progress of both listeners, and per running job and connection pair its two
/// control connections and a listing's data connection, with room to spare.
pub fn descriptor_reserve(max_running_jobs: usize, parallel_pairs: usize) -> usize {
    64 + 2 * REFUSALS + 4 * max_running_jobs * parallel_pairs
}

/// How many API connections fit in an open-file limit of `nofile` with `reserve` kept
/// aside: `configured`, or fewer (the caller warns), or an error when not even a few fit.
pub fn connection_budget(configured: usize, reserve: usize, nofile: u64) -> Result<usize, String> {
    const AT_LEAST: usize = 8;
    let room = usize::try_from(nofile)
        .unwrap_or(usize::MAX)
        .saturating_sub(reserve);
    if room < AT_LEAST {
        return Err(format!(
            "the open-file limit is {nofile} descriptors; bftpd keeps {reserve} for its FTP \
             connections and store and needs room for at least {AT_LEAST} API connections \
             beside them: raise the limit (the unit's LimitNOFILE=) or lower \
             [scheduler] max_running_jobs or [ftp] parallel_pairs"
        ));
    }
    Ok(configured.min(room))
}

/// Raises the soft open-file limit to the hard one (systemd's default soft limit is 1,024
/// whatever the hard one is), and returns the soft limit now in force.
pub fn raise_nofile_limit() -> u64 {
    use nix::sys::resource::{getrlimit, setrlimit, Resource};
    let Ok((soft, hard)) = getrlimit(Resource::RLIMIT_NOFILE) else {
        return 1024;
    };
    if soft < hard && setrlimit(Resource::RLIMIT_NOFILE, hard, hard).is_ok() {
        return hard;
    }
    soft
}

/// The time bounds of one connection.
#[derive(Debug, Clone, Copy)]
pub struct Timeouts {
    pub header_read: Duration,
    pub idle: Duration,
}

impl From<&ApiConfig> for Timeouts {
    fn from(c: &ApiConfig) -> Timeouts {
        Timeouts {
            header_read: c.header_read_timeout,
            idle: c.idle_timeout,
        }
    }
}

/// What one connection is doing, as far as its bounds care.
#[derive(Debug, Clone, Copy)]
struct Activity {
    /// Requests being answered (hyper answers one at a time, but a finished request's
    /// streamed answer may still be going out).
    in_flight: usize,
    /// Since when no request has been under way.
    idle_since: Instant,
    /// The first byte of the next request, once it came.
    first_byte: Option<Instant>,
}

/// When the connection is closed if nothing changes: none while a request is under way.
fn expiry(a: &Activity, t: Timeouts) -> Option<Instant> {
    if a.in_flight > 0 {
        None
    } else {
        Some(match a.first_byte {
            Some(first) => first + t.header_read,
            None => a.idle_since + t.idle,
        })
    }
}

/// A connection's activity, and a wake-up for its watchdog whenever its expiry may move.
struct Watch {
    activity: Mutex<Activity>,
    changed: tokio::sync::Notify,
}

type Shared = Arc<Watch>;

fn lock(a: &Shared) -> std::sync::MutexGuard<'_, Activity> {
    a.activity.lock().unwrap_or_else(|e| e.into_inner())
}

/// The connection's stream, noting when a request's first byte arrives.
struct Watched<S> {
    inner: S,
    activity: Shared,
}

impl<S: AsyncRead + Unpin> AsyncRead for Watched<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut TaskContext<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        let r = Pin::new(&mut this.inner).poll_read(cx, buf);
        if buf.filled().len() > before {
            let mut a = lock(&this.activity);
            if a.in_flight == 0 && a.first_byte.is_none() {
                a.first_byte = Some(Instant::now());
                drop(a);
                this.activity.changed.notify_one();
            }
        }
        r
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Watched<S> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut TaskContext<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write(cx, buf)
    }
    fn poll_flush(self: Pin<&mut Self>, cx: &mut TaskContext<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }
    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut TaskContext<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut TaskContext<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write_vectored(cx, bufs)
    }
    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
}

/// A request under way, from its head until its answer has gone out (or was dropped).
struct InFlight(Shared);

impl InFlight {
    /// Starts a request; returns it with the time its first byte came.
    fn begin(a: &Shared) -> (InFlight, Instant) {
        let mut g = lock(a);
        g.in_flight += 1;
        let first = g.first_byte.take().unwrap_or_else(Instant::now);
        drop(g);
        (InFlight(a.clone()), first)
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        let mut a = lock(&self.0);
        a.in_flight = a.in_flight.saturating_sub(1);
        if a.in_flight == 0 {
            a.idle_since = Instant::now();
            a.first_byte = None;
            drop(a);
            self.0.changed.notify_one();
        }
    }
}

/// An answer's body that ends the request when it is done.
struct Tracked {
    inner: axum::body::Body,
    _request: InFlight,
}

impl Body for Tracked {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut TaskContext<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        Pin::new(&mut self.get_mut().inner).poll_frame(cx)
    }
    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }
    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// Why a request ends its connection without an answer.
#[derive(Debug, thiserror::Error)]
enum RequestError {
    #[error("the request did not arrive within header_read_timeout ({0:?}) of its first byte")]
    Slow(Duration),
    #[error("reading the request body: {0}")]
    Body(String),
}

fn too_large() -> hyper::Response<axum::body::Body> {
    let body = serde_json::to_string(&bftp_api::ErrorBody {
        kind: "invalid_request".into(),
        message: format!("the request body is larger than {} MiB", MAX_BODY >> 20),
        job_id: None,
    })
    .unwrap_or_default();
    hyper::Response::builder()
        .status(hyper::StatusCode::PAYLOAD_TOO_LARGE)
        .header(hyper::header::CONTENT_TYPE, "application/json")
        .body(axum::body::Body::from(body))
        .unwrap_or_default()
}

/// Serves one admitted connection until it ends, its bounds close it or shutdown does.
async fn serve_connection<S>(
    stream: S,
    app: Router,
    caller: Option<Caller>,
    timeouts: Timeouts,
    token: CancellationToken,
    slot: Slot,
) where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let activity: Shared = Arc::new(Watch {
        activity: Mutex::new(Activity {
            in_flight: 0,
            idle_since: Instant::now(),
            first_byte: None,
        }),
        changed: tokio::sync::Notify::new(),
    });
    let svc_activity = activity.clone();
    let svc = hyper::service::service_fn(move |req: hyper::Request<Incoming>| {
        let app = app.clone();
        let (request, first) = InFlight::begin(&svc_activity);
        async move {
            let deadline = first + timeouts.header_read;
            let (mut parts, body) = req.into_parts();
            let body =
                match tokio::time::timeout_at(deadline, Limited::new(body, MAX_BODY).collect())
                    .await
                {
                    Err(_) => return Err(RequestError::Slow(timeouts.header_read)),
                    Ok(Err(e))
                        if e.downcast_ref::<http_body_util::LengthLimitError>()
                            .is_some() =>
                    {
                        return Ok(too_large().map(|inner| Tracked {
                            inner,
                            _request: request,
                        }))
                    }
                    Ok(Err(e)) => return Err(RequestError::Body(e.to_string())),
                    Ok(Ok(collected)) => collected.to_bytes(),
                };
            if let Some(caller) = caller {
                parts.extensions.insert(caller);
            }
            let req = hyper::Request::from_parts(parts, axum::body::Body::from(body));
            let resp = match app.oneshot(req).await {
                Ok(resp) => resp,
                Err(never) => match never {},
            };
            Ok::<_, RequestError>(resp.map(|inner| Tracked {
                inner,
                _request: request,
            }))
        }
    });
    let io = Watched {
        inner: stream,
        activity: activity.clone(),
    };
    let conn = hyper::server::conn::http1::Builder::new().serve_connection(TokioIo::new(io), svc);
    tokio::pin!(conn);
    loop {
        let now = Instant::now();
        let expires = expiry(&lock(&activity), timeouts);
        if expires.is_some_and(|t| t <= now) {
            tracing::debug!(
                "closing an API connection that is idle or too slow to send its request"
            );
            break;
        }
        // While a request is under way nothing expires until it ends, which wakes us.
        let wake = expires.unwrap_or(now + Duration::from_secs(3600));
        tokio::select! {
            _ = activity.changed.notified() => {}
            r = conn.as_mut() => {
                if let Err(e) = r {
                    tracing::debug!(error = %e, "connection ended with an error");
                }
                break;
            }
            _ = tokio::time::sleep_until(wake) => {}
            _ = token.cancelled() => {
                conn.as_mut().graceful_shutdown();
                let _ = conn.await;
                break;
            }
        }
    }
    drop(slot);
}

/// Refusals that wait for the client's request at once, each holding its descriptor for at
/// most [`REFUSAL_WAIT`]; beyond them a refusal is written and the connection closed at
/// once. (An HTTP client that has not sent its request yet reads an early answer as a
/// broken connection, so a refusal waits for the request when it can.)
pub const REFUSALS: usize = 16;
const REFUSAL_WAIT: Duration = Duration::from_secs(2);

/// A connection's stream, as far as a refusal needs it.
trait Refusable: AsyncRead + AsyncWrite + Unpin + Send + 'static {
    fn try_write_now(&self, buf: &[u8]) -> io::Result<usize>;
    fn try_read_now(&self, buf: &mut [u8]) -> io::Result<usize>;
}

impl Refusable for UnixStream {
    fn try_write_now(&self, buf: &[u8]) -> io::Result<usize> {
        self.try_write(buf)
    }
    fn try_read_now(&self, buf: &mut [u8]) -> io::Result<usize> {
        self.try_read(buf)
    }
}

impl Refusable for tokio::net::TcpStream {
    fn try_write_now(&self, buf: &[u8]) -> io::Result<usize> {
        self.try_write(buf)
    }
    fn try_read_now(&self, buf: &mut [u8]) -> io::Result<usize> {
        self.try_read(buf)
    }
}

/// Drains what the client already sent, so that closing does not reset the connection
/// before the answer is read.
fn drain<S: Refusable>(stream: &S) {
    let mut buf = [0u8; 4096];
    for _ in 0..16 {
        match stream.try_read_now(&mut buf) {
            Ok(n) if n > 0 => continue,
            _ => break,
        }
    }
}

/// Answers a connection over its limit with `why` and closes it.
fn refuse<S: Refusable>(
    stream: S,
    peer: Peer,
    why: Refusal,
    refusing: &Arc<tokio::sync::Semaphore>,
    tracker: &TaskTracker,
) {
    let Ok(permit) = refusing.clone().try_acquire_owned() else {
        let _ = stream.try_write_now(&why.response(peer));
        drain(&stream);
        return;
    };
    tracker.spawn(async move {
        let _permit = permit;
        let mut stream = stream;
        let answer = why.response(peer);
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let deadline = Instant::now() + REFUSAL_WAIT;
        let _ = tokio::time::timeout_at(deadline, async {
            let mut head = Vec::new();
            let mut buf = [0u8; 4096];
            while !head.windows(4).any(|w| w == b"\r\n\r\n") && head.len() < 16 * 1024 {
                match stream.read(&mut buf).await {
                    Ok(0) | Err(_) => break,
                    Ok(n) => head.extend_from_slice(&buf[..n]),
                }
            }
        })
        .await;
        // Answered even when no request came: a client that sends nothing learns why too.
        let _ = tokio::time::timeout(Duration::from_secs(1), stream.write_all(&answer)).await;
        drain(&stream);
    });
}

/// After an accept error (EMFILE and friends): back off briefly instead of spinning.
async fn accept_failed(e: io::Error) {
    tracing::warn!(error = %e, "accept failed");
    tokio::time::sleep(Duration::from_millis(50)).await;
}

/// A listener the accept loop serves: the API's Unix socket or the metrics' TCP port.
trait Listener {
    type Stream: Refusable;
    async fn accept_one(&self) -> io::Result<Self::Stream>;
    /// Who is on the other end (what admission counts) and, where the listener serves the
    /// API, the caller; `None`: the connection is dropped (already logged).
    fn identify(&self, stream: &Self::Stream) -> Option<(Peer, Option<Caller>)>;
}

/// The API socket: the caller is the Unix user on the other end.
struct ApiSocket {
    listener: UnixListener,
    admins: AdminPolicy,
}

impl Listener for ApiSocket {
    type Stream = UnixStream;

    async fn accept_one(&self) -> io::Result<UnixStream> {
        self.listener.accept().await.map(|(stream, _)| stream)
    }

    fn identify(&self, stream: &UnixStream) -> Option<(Peer, Option<Caller>)> {
        match stream.peer_cred() {
            Ok(cred) => Some((
                Peer::User(cred.uid()),
                Some(self.admins.caller(cred.uid(), cred.gid())),
            )),
            Err(e) => {
                tracing::warn!(error = %e, "cannot read the peer's credentials; connection refused");
                None
            }
        }
    }
}

/// The metrics port: no caller (no job data is served there); each client address is one peer.
struct MetricsPort(TcpListener);

impl Listener for MetricsPort {
    type Stream = tokio::net::TcpStream;

    async fn accept_one(&self) -> io::Result<tokio::net::TcpStream> {
        self.0.accept().await.map(|(stream, _)| stream)
    }

    fn identify(&self, stream: &tokio::net::TcpStream) -> Option<(Peer, Option<Caller>)> {
        match stream.peer_addr() {
            Ok(addr) => Some((Peer::Tcp(addr.ip()), None)),
            Err(e) => {
                tracing::warn!(error = %e, "cannot read a metrics client's address; connection refused");
                None
            }
        }
    }
}

/// Accepts connections until `shutdown` fires, each admitted against its peer's and the
/// total limit (or answered with the refusal), then lets open connections finish their
/// current request (bounded by `grace`).
async fn accept_loop<L: Listener>(
    listener: L,
    app: Router,
    admission: Arc<Admission>,
    timeouts: Timeouts,
    shutdown: CancellationToken,
    grace: Duration,
) {
    let tracker = TaskTracker::new();
    let refusing = Arc::new(tokio::sync::Semaphore::new(REFUSALS));
    loop {
        let stream = tokio::select! {
            _ = shutdown.cancelled() => break,
            accepted = listener.accept_one() => match accepted {
                Ok(stream) => stream,
                Err(e) => {
                    accept_failed(e).await;
                    continue;
                }
            },
        };
        let Some((peer, caller)) = listener.identify(&stream) else {
            continue;
        };
        let slot = match admission.admit(peer) {
            Ok(slot) => slot,
            Err(why) => {
                tracing::debug!(?peer, ?why, "connection refused");
                refuse(stream, peer, why, &refusing, &tracker);
                continue;
            }
        };
        tracker.spawn(serve_connection(
            stream,
            app.clone(),
            caller,
            timeouts,
            shutdown.clone(),
            slot,
        ));
    }
    tracker.close();
    if tokio::time::timeout(grace, tracker.wait()).await.is_err() {
        tracing::warn!("connections still open after the grace period; closing them");
    }
}

/// Serves the API on its Unix socket until `shutdown` fires.
pub async fn serve(
    listener: UnixListener,
    app: Router,
    admins: AdminPolicy,
    admission: Arc<Admission>,
    timeouts: Timeouts,
    shutdown: CancellationToken,
    grace: Duration,
) {
    let socket = ApiSocket { listener, admins };
    accept_loop(socket, app, admission, timeouts, shutdown, grace).await
}

/// Binds the metrics listener of `[metrics] listen`.
pub async fn bind_metrics(addr: SocketAddr) -> anyhow::Result<TcpListener> {
    TcpListener::bind(addr)
        .await
        .with_context(|| format!("[metrics]: cannot listen on {addr}"))
}

/// Serves `app` (the metrics router: no job data) on TCP, under the same bounds as the
/// socket, each client address counted as one peer.
pub async fn serve_metrics(
    listener: TcpListener,
    app: Router,
    admission: Arc<Admission>,
    timeouts: Timeouts,
    shutdown: CancellationToken,
    grace: Duration,
) {
    let port = MetricsPort(listener);
    accept_loop(port, app, admission, timeouts, shutdown, grace).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn admission_table() {
        // (total, of_peer, max_total, max_per_peer) -> result
        type Case = ((usize, usize, usize, usize), Result<(), Refusal>);
        let cases: &[Case] = &[
            ((0, 0, 10, 2), Ok(())),
            ((5, 1, 10, 2), Ok(())),
            ((5, 2, 10, 2), Err(Refusal::PeerFull { limit: 2 })),
            ((10, 0, 10, 2), Err(Refusal::Full { limit: 10 })),
            // The peer's own limit is named first: it is the one the caller can act on.
            ((10, 2, 10, 2), Err(Refusal::PeerFull { limit: 2 })),
            ((9, 1, 10, 2), Ok(())),
        ];
        for &((total, of_peer, max_total, max_per_peer), ref want) in cases {
            assert_eq!(
                &admit_rule(total, of_peer, max_total, max_per_peer),
                want,
                "{total} {of_peer} {max_total} {max_per_peer}"
            );
        }
    }

    #[test]
    fn slots_are_counted_per_peer_and_given_back() {
        let a = Admission::new(3, 2);
        let alice = Peer::User(1000);
        let bob = Peer::User(1001);
        let a1 = a.admit(alice).unwrap();
        let _a2 = a.admit(alice).unwrap();
        assert_eq!(a.admit(alice).err(), Some(Refusal::PeerFull { limit: 2 }));
        let _b1 = a.admit(bob).unwrap();
        assert_eq!(a.admit(bob).err(), Some(Refusal::Full { limit: 3 }));
        drop(a1);
        let _b2 = a.admit(bob).unwrap();
        assert_eq!(a.open.lock().unwrap().0, 3);
    }

    #[test]
    fn refusals_are_http_answers_naming_the_limit() {
        let r =
            String::from_utf8(Refusal::PeerFull { limit: 32 }.response(Peer::User(1000))).unwrap();
        assert!(r.starts_with("HTTP/1.1 429 "), "{r}");
        let body = &r[r.find("\r\n\r\n").unwrap() + 4..];
        let v: serde_json::Value = serde_json::from_str(body).unwrap();
        assert_eq!(v["kind"], "too_many_connections");
        assert!(v["message"]
            .as_str()
            .unwrap()
            .contains("user 1000 already has 32 connections"));
        assert!(r.contains(&format!("Content-Length: {}\r\n", body.len())));
        let r = String::from_utf8(Refusal::Full { limit: 512 }.response(Peer::User(1))).unwrap();
        assert!(r.starts_with("HTTP/1.1 503 "), "{r}");
    }

    #[test]
    fn budget_keeps_the_reserve() {
        let reserve = descriptor_reserve(8, 4);
        assert_eq!(reserve, 224);
        // The defaults fit systemd's default soft limit of 1,024.
        assert_eq!(connection_budget(512, reserve, 1024), Ok(512));
        assert_eq!(connection_budget(512, reserve, 256), Ok(32));
        assert_eq!(connection_budget(512, reserve, 232), Ok(8));
        let e = connection_budget(512, reserve, 231).unwrap_err();
        assert!(e.contains("LimitNOFILE"), "{e}");
        assert_eq!(connection_budget(512, reserve, u64::MAX), Ok(512));
    }

    #[test]
    fn expiry_table() {
        let t0 = Instant::now();
        let t = Timeouts {
            header_read: Duration::from_secs(10),
            idle: Duration::from_secs(30),
        };
        let a = |in_flight, first_byte| Activity {
            in_flight,
            idle_since: t0,
            first_byte,
        };
        let s = Duration::from_secs;
        // Nothing sent: the idle bound.
        assert_eq!(expiry(&a(0, None), t), Some(t0 + s(30)));
        // A request begun: the header bound, counted from its first byte.
        assert_eq!(expiry(&a(0, Some(t0 + s(25))), t), Some(t0 + s(35)));
        // A request under way (its answer may stream for hours): no bound.
        assert_eq!(expiry(&a(1, None), t), None);
    }
}
