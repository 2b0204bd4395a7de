//! The Unix socket: binding it safely, and serving HTTP/1.1 on each connection with the
//! caller's identity (SO_PEERCRED) attached to every request.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::time::Duration;

use anyhow::{bail, Context};
use axum::Router;
use hyper_util::rt::TokioIo;
use tokio::net::{UnixListener, UnixStream};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tower::ServiceExt;

use crate::identity::AdminPolicy;

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

/// Accepts connections until `shutdown` fires, then lets open connections finish their
/// current request (bounded by `grace`).
pub async fn serve(
    listener: UnixListener,
    app: Router,
    admins: AdminPolicy,
    shutdown: CancellationToken,
    grace: Duration,
) {
    let tracker = TaskTracker::new();
    loop {
        let stream = tokio::select! {
            _ = shutdown.cancelled() => break,
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(e) => {
                    // EMFILE and friends: back off briefly instead of spinning.
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        let cred = match stream.peer_cred() {
            Ok(c) => c,
            Err(e) => {
                tracing::warn!(error = %e, "cannot read the peer's credentials; connection refused");
                continue;
            }
        };
        let caller = admins.caller(cred.uid(), cred.gid());
        let app = app.clone();
        let token = shutdown.clone();
        tracker.spawn(async move {
            let svc = hyper::service::service_fn(move |mut req: hyper::Request<hyper::body::Incoming>| {
                req.extensions_mut().insert(caller);
                app.clone().oneshot(req)
            });
            let conn = hyper::server::conn::http1::Builder::new().serve_connection(TokioIo::new(stream), svc);
            tokio::pin!(conn);
            tokio::select! {
                r = conn.as_mut() => if let Err(e) = r { tracing::debug!(error = %e, "connection ended with an error") },
                _ = token.cancelled() => {
                    conn.as_mut().graceful_shutdown();
                    let _ = conn.await;
                }
            }
        });
    }
    tracker.close();
    if tokio::time::timeout(grace, tracker.wait()).await.is_err() {
        tracing::warn!("connections still open after the grace period; closing them");
    }
}
