//! The circuit breaker per FTP server (RULES.md §16.5), node-local: a transient failure to
//! connect or log in to a server (`host:port`) opens it; while it is open no job needing
//! that server starts (the start gate answers `host_down`), and one probe task per open
//! breaker connects (name, the address policy, TCP, the 220 greeting; no login) with a
//! backoff from `[ftp] probe_first` doubling to `probe_max`. A probe that gets its greeting,
//! or any login that succeeds, closes the breaker: every job that waited for the server is
//! made due at once and the scheduler woken. Which failures open it, and the backoff, are
//! `bftp_core::window`'s rules.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use bftp_core::window::{opens_breaker, probe_delay, Failure, Wait, WaitReason};
use bftp_core::Timestamp;
use bftp_ftp::AddressCheck;
use bftp_store::JobId;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio_util::sync::CancellationToken;

use crate::clock::Clock;
use crate::store::Store;

/// How probes are made (`[ftp] probe_first`, `probe_max`, and the engine's timeouts).
#[derive(Debug, Clone, Copy)]
pub struct ProbeSettings {
    /// `[ftp] breaker`: false, no breaker ever opens (every job keeps its own retries, §5).
    pub enabled: bool,
    pub first: Duration,
    pub max: Duration,
    pub connect_timeout: Duration,
    pub reply_timeout: Duration,
}

/// One server's breaker, as `bftp hosts` shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BreakerView {
    /// `host:port`, the host lower-case.
    pub host: String,
    /// `closed` or `open`.
    pub state: &'static str,
    /// When it opened (open) or last closed.
    pub since: Timestamp,
    /// The failure that opened it, or the last probe's.
    pub last_error: Option<String>,
    /// When the next probe goes (open only).
    pub next_probe: Option<Timestamp>,
    /// Probes made since it opened (closed: by the probe that closed it, if one did).
    pub probes: u32,
    /// Jobs waiting for it.
    pub waiting: usize,
}

#[derive(Debug)]
struct Server {
    open: bool,
    since: Timestamp,
    last_error: Option<String>,
    next_probe: Timestamp,
    probes: u32,
    waiting: BTreeSet<JobId>,
    /// Moves at each opening: a probe task of an earlier opening stops (one probe task).
    opening: u64,
}

/// Every server's breaker on this node.
pub struct Breaker {
    settings: ProbeSettings,
    check: Arc<dyn AddressCheck>,
    store: Store,
    clock: Clock,
    servers: Mutex<BTreeMap<String, Server>>,
    /// Rings the scheduler when waiting jobs were released (set once at wiring).
    wake: OnceLock<Arc<dyn Fn() + Send + Sync>>,
    /// Probes made in all (the metric).
    probes_total: std::sync::atomic::AtomicU64,
    stop: CancellationToken,
}

/// The key of a server.
pub fn server_key(host: &str, port: u16) -> String {
    format!("{}:{port}", host.to_ascii_lowercase())
}

impl Breaker {
    pub fn new(
        settings: ProbeSettings,
        check: Arc<dyn AddressCheck>,
        store: Store,
        clock: Clock,
    ) -> Arc<Breaker> {
        Arc::new(Breaker {
            settings,
            check,
            store,
            clock,
            servers: Mutex::default(),
            wake: OnceLock::new(),
            probes_total: Default::default(),
            stop: CancellationToken::new(),
        })
    }

    /// What to call when jobs were released (the scheduler's `notify`).
    pub fn set_wake(&self, wake: Arc<dyn Fn() + Send + Sync>) {
        let _ = self.wake.set(wake);
    }

    /// Stops the probes (at shutdown).
    pub fn stop(&self) {
        self.stop.cancel();
    }

    fn servers(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, Server>> {
        self.servers.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether job `id` must wait for the server: its breaker is open. The job is then
    /// released when the server's probe succeeds; `until` is the next probe (never now:
    /// a probe under way answers soon).
    pub fn wait_for(&self, id: JobId, host: &str, port: u16, now: Timestamp) -> Option<Wait> {
        let key = server_key(host, port);
        let mut servers = self.servers();
        let s = servers.get_mut(&key).filter(|s| s.open)?;
        s.waiting.insert(id);
        let soon = now.saturating_add(self.settings.first.max(Duration::from_millis(200)));
        Some(Wait {
            reason: WaitReason::HostDown,
            host: Some(key),
            until: s.next_probe.max(soon),
        })
    }

    /// A connection or login to the server failed (`job`: the job whose attempt it was,
    /// released with the others when the server is back). Opens the breaker when the rule
    /// says so, and starts its probe.
    pub fn failed(
        self: &Arc<Self>,
        host: &str,
        port: u16,
        failure: Failure,
        error: &str,
        job: Option<JobId>,
    ) {
        if !self.settings.enabled || !opens_breaker(failure) {
            return;
        }
        let key = server_key(host, port);
        let now = self.clock.now();
        let start_probe = {
            let mut servers = self.servers();
            let s = servers.entry(key.clone()).or_insert_with(|| Server {
                open: false,
                since: now,
                last_error: None,
                next_probe: now,
                probes: 0,
                waiting: BTreeSet::new(),
                opening: 0,
            });
            s.last_error = Some(error.to_owned());
            s.waiting.extend(job);
            if s.open {
                None
            } else {
                s.open = true;
                s.opening += 1;
                s.since = now;
                s.probes = 0;
                s.next_probe =
                    now.saturating_add(probe_delay(self.settings.first, self.settings.max, 0));
                Some(s.opening)
            }
        };
        if let Some(opening) = start_probe {
            tracing::warn!(server = %key, %error, "server down: its jobs wait, one probe at a time tells when it is back");
            let me = Arc::clone(self);
            let (host, key2) = (host.to_owned(), key);
            tokio::spawn(async move { me.probe_loop(host, port, key2, opening).await });
        }
    }

    /// A login to the server succeeded: it is up.
    pub fn succeeded(&self, host: &str, port: u16) {
        let key = server_key(host, port);
        let is_open = self.servers().get(&key).is_some_and(|s| s.open);
        if is_open {
            self.close(&key, None);
        }
    }

    /// Closes the breaker and releases the jobs that waited for it.
    fn close(&self, key: &str, probes: Option<u32>) {
        let now = self.clock.now();
        let waiting: Vec<JobId> = {
            let mut servers = self.servers();
            let Some(s) = servers.get_mut(key).filter(|s| s.open) else {
                return;
            };
            s.open = false;
            s.since = now;
            if let Some(n) = probes {
                s.probes = n;
            }
            std::mem::take(&mut s.waiting).into_iter().collect()
        };
        tracing::info!(server = %key, released = waiting.len(), "server back: the jobs that waited for it are due now");
        // Each job made due at once, then the scheduler woken (a job that started, finished
        // or is held elsewhere meanwhile is left as it is).
        let (store, wake) = (self.store.clone(), self.wake.get().cloned());
        tokio::spawn(async move {
            // Written together: their durable writes share a group commit.
            let releases = waiting.into_iter().map(|id| {
                store.call(move |s| match s.defer(id, now, None, now) {
                    Ok(_) => Ok(()),
                    Err(e) => {
                        tracing::debug!(job = id.0, error = %e, "not released: it moved meanwhile");
                        Ok(())
                    }
                })
            });
            for released in futures_util::future::join_all(releases).await {
                if let Err(e) = released {
                    tracing::warn!(error = %e, "cannot release a job that waited for a server; it starts at its next probe time");
                }
            }
            if let Some(wake) = wake {
                wake();
            }
        });
    }

    /// One probe at a time, with backoff, until the server answers or the breaker closed
    /// otherwise (a login succeeded), or shutdown.
    async fn probe_loop(self: Arc<Self>, host: String, port: u16, key: String, opening: u64) {
        let current = |s: &Server| s.open && s.opening == opening;
        loop {
            let next = match self.servers().get(&key) {
                Some(s) if current(s) => s.next_probe,
                _ => return,
            };
            tokio::select! {
                () = self.stop.cancelled() => return,
                () = self.clock.sleep_until(next) => {}
            }
            if !self.servers().get(&key).is_some_and(current) {
                return;
            }
            self.probes_total
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let result = tokio::select! {
                () = self.stop.cancelled() => return,
                r = probe(&host, port, &*self.check, self.settings) => r,
            };
            let probes = {
                let mut servers = self.servers();
                let Some(s) = servers.get_mut(&key).filter(|s| current(s)) else {
                    return;
                };
                s.probes += 1;
                if let Err(e) = &result {
                    s.last_error = Some(e.clone());
                    s.next_probe = self.clock.now().saturating_add(probe_delay(
                        self.settings.first,
                        self.settings.max,
                        s.probes,
                    ));
                }
                s.probes
            };
            match result {
                Ok(()) => {
                    self.close(&key, Some(probes));
                    return;
                }
                Err(e) => {
                    tracing::info!(server = %key, probes, error = %e, "server still down");
                }
            }
        }
    }

    /// Every server's breaker that was ever opened on this node, by name.
    pub fn breaker_view(&self) -> Vec<BreakerView> {
        self.servers()
            .iter()
            .map(|(k, s)| BreakerView {
                host: k.clone(),
                state: if s.open { "open" } else { "closed" },
                since: s.since,
                last_error: s.last_error.clone(),
                next_probe: s.open.then_some(s.next_probe),
                probes: s.probes,
                waiting: s.waiting.len(),
            })
            .collect()
    }

    /// The Prometheus series: `bftp_host_breaker_open{host}` (1 open, 0 closed) per server
    /// ever opened, and `bftp_host_probes_total`.
    pub fn metrics_series(&self) -> String {
        let mut out = String::from(
            "# HELP bftp_host_breaker_open Whether the server's circuit breaker is open (it is down and probed).\n\
             # TYPE bftp_host_breaker_open gauge\n",
        );
        for v in self.breaker_view() {
            let host: String = v.host.escape_default().collect();
            out.push_str(&format!(
                "bftp_host_breaker_open{{host=\"{host}\"}} {}\n",
                u8::from(v.state == "open")
            ));
        }
        out.push_str(&format!(
            "# HELP bftp_host_probes_total Probes of servers that were down.\n\
             # TYPE bftp_host_probes_total counter\n\
             bftp_host_probes_total {}\n",
            self.probes_total.load(std::sync::atomic::Ordering::Relaxed)
        ));
        out
    }
}

/// One probe: the name resolved, the addresses through the address policy (as every FTP
/// connection), a TCP connection and a 2xx greeting; then QUIT, no login.
pub async fn probe(
    host: &str,
    port: u16,
    check: &dyn AddressCheck,
    settings: ProbeSettings,
) -> Result<(), String> {
    let addrs: Vec<std::net::SocketAddr> = tokio::time::timeout(
        settings.connect_timeout,
        tokio::net::lookup_host((host, port)),
    )
    .await
    .map_err(|_| format!("{host}: the name did not resolve in time"))?
    .map_err(|e| format!("{host}: the name did not resolve: {e}"))?
    .collect();
    let ips: Vec<std::net::IpAddr> = addrs.iter().map(|a| a.ip()).collect();
    check
        .check(host, &ips)
        .map_err(|why| format!("{host}: the address check refused it: {why}"))?;
    let mut last = format!("{host}: no address");
    for addr in addrs {
        let conn = tokio::time::timeout(
            settings.connect_timeout,
            tokio::net::TcpStream::connect(addr),
        )
        .await;
        let stream = match conn {
            Ok(Ok(s)) => s,
            Ok(Err(e)) => {
                last = format!("{host}: connecting to {addr} failed: {e}");
                continue;
            }
            Err(_) => {
                last = format!("{host}: connecting to {addr} timed out");
                continue;
            }
        };
        let mut reader = BufReader::new(stream);
        let greeting = tokio::time::timeout(settings.reply_timeout, async {
            let mut line = String::new();
            loop {
                line.clear();
                let n = reader.read_line(&mut line).await?;
                if n == 0 || line.len() > 4096 {
                    return Ok::<_, std::io::Error>(None);
                }
                let b = line.as_bytes();
                if b.len() >= 4 && b[..3].iter().all(u8::is_ascii_digit) && b[3] == b' ' {
                    return Ok(Some(line.trim_end().to_owned()));
                }
            }
        })
        .await;
        match greeting {
            Ok(Ok(Some(g))) if g.starts_with('2') => {
                let _ = reader.get_mut().write_all(b"QUIT\r\n").await;
                return Ok(());
            }
            Ok(Ok(Some(g))) => last = format!("{host}: the greeting was {g:?}"),
            Ok(Ok(None)) => last = format!("{host}: the connection closed before the greeting"),
            Ok(Err(e)) => last = format!("{host}: reading the greeting failed: {e}"),
            Err(_) => last = format!("{host}: no greeting within {:?}", settings.reply_timeout),
        }
    }
    Err(last)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings() -> ProbeSettings {
        ProbeSettings {
            enabled: true,
            first: Duration::from_millis(50),
            max: Duration::from_millis(100),
            connect_timeout: Duration::from_secs(2),
            reply_timeout: Duration::from_secs(2),
        }
    }

    /// A server on loopback that greets with `greeting` (none: closes at once).
    async fn server(greeting: Option<&'static str>) -> u16 {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = l.local_addr().unwrap().port();
        tokio::spawn(async move {
            while let Ok((mut s, _)) = l.accept().await {
                if let Some(g) = greeting {
                    let _ = s.write_all(g.as_bytes()).await;
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
        });
        port
    }

    #[tokio::test]
    async fn a_probe_wants_the_greeting_through_the_address_check() {
        let allow = bftp_ftp::AllowAll;
        let up = server(Some("220-hello\r\n220 ready\r\n")).await;
        assert_eq!(probe("127.0.0.1", up, &allow, settings()).await, Ok(()));
        let busy = server(Some("421 not now\r\n")).await;
        let e = probe("127.0.0.1", busy, &allow, settings())
            .await
            .unwrap_err();
        assert!(e.contains("421 not now"), "{e}");
        let mute = server(None).await;
        let e = probe("127.0.0.1", mute, &allow, settings())
            .await
            .unwrap_err();
        assert!(e.contains("closed before the greeting"), "{e}");
        let refuse = |_: &str, _: &[std::net::IpAddr]| Err("loopback refused".to_string());
        let e = probe("127.0.0.1", up, &refuse, settings())
            .await
            .unwrap_err();
        assert!(
            e.contains("address check refused it: loopback refused"),
            "{e}"
        );
    }

    #[tokio::test]
    async fn down_opens_busy_does_not_and_a_login_closes_it() {
        let (_dir, store) = crate::testkit::store();
        let b = Breaker::new(
            settings(),
            Arc::new(bftp_ftp::AllowAll),
            store.into(),
            Clock::system(),
        );
        let (id, now) = (JobId(7), b.clock.now());
        b.failed(
            "Ftp.Example",
            21,
            Failure::TooManyConnections,
            "421 too many",
            Some(id),
        );
        b.failed(
            "ftp.example",
            21,
            Failure::Permanent,
            "530 login incorrect",
            Some(id),
        );
        assert_eq!(b.wait_for(id, "ftp.example", 21, now), None);
        b.failed(
            "Ftp.Example",
            21,
            Failure::Unreachable,
            "connection refused",
            Some(id),
        );
        let w = b.wait_for(JobId(8), "FTP.example", 21, now).unwrap();
        assert_eq!(
            (w.reason, w.host.as_deref()),
            (WaitReason::HostDown, Some("ftp.example:21"))
        );
        assert!(w.until > now, "a wait is never due at once");
        assert_eq!(
            b.wait_for(id, "ftp.example", 2121, now),
            None,
            "another port"
        );
        let v = b.breaker_view();
        assert_eq!(
            (v[0].state, v[0].waiting, v[0].last_error.as_deref()),
            ("open", 2, Some("connection refused"))
        );
        assert!(b
            .metrics_series()
            .contains("bftp_host_breaker_open{host=\"ftp.example:21\"} 1"));
        b.succeeded("ftp.example", 21);
        assert_eq!(b.wait_for(id, "ftp.example", 21, now), None);
        let v = b.breaker_view();
        assert_eq!((v[0].state, v[0].waiting), ("closed", 0));
        b.stop();
    }
}
