//! A TCP proxy that makes a loopback control connection look like a far one.
//!
//! It listens on the *same* loopback address as the server it fronts (another port) and
//! forwards to the server's control port, holding every chunk for a fixed delay in each
//! direction and keeping the order of the chunks. So a client that talks to the proxy sees the
//! server's own address as its peer (the address check on PASV replies still passes) while the
//! data connections the servers open between themselves stay direct and fast: only the control
//! round trips pay the delay, as when the control host is far from two servers near each other.
//!
//! Each direction is one reader thread that stamps a chunk with its due time and one writer
//! thread that sleeps until then and writes it, so chunks in flight overlap (a pipelined burst
//! costs one delay, not one per chunk) and nothing is reordered. A half-close travels like a
//! chunk: it reaches the other side one delay later.
//!
//! The proxy also counts *turns*: the client's first send on a connection, and every client
//! send that follows something the server sent since the client's last send. With a client that waits for a reply before its next
//! command, turns are its sequential round trips on that connection.

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{IpAddr, Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};

/// Largest chunk read at once.
const CHUNK: usize = 64 * 1024;
/// How long a connection is held before it is closed while the proxy is down.
pub const DOWN_HOLD: Duration = Duration::from_millis(300);
/// How long connecting to the target may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// Who sent last on one proxied connection (for counting turns).
const NOBODY: u8 = 0;
const CLIENT: u8 = 1;
const SERVER: u8 = 2;

#[derive(Default)]
struct Stats {
    connections: AtomicU64,
    turns: AtomicU64,
    client_bytes: AtomicU64,
    server_bytes: AtomicU64,
}

struct Shared {
    stop: AtomicBool,
    stats: Stats,
    /// The delay each direction adds, in microseconds: read per chunk, so
    /// [`DelayProxy::set_delay`] applies to the connections already open too.
    delay_us: AtomicU64,
    /// Every socket pair the proxy holds, by connection, so dropping it closes them all.
    sockets: Mutex<HashMap<u64, [TcpStream; 2]>>,
    /// A server that is down ([`DelayProxy::set_down`]): each new connection is held a
    /// moment, sent nothing and closed; counted, with how many were held at once.
    down: AtomicBool,
    refused: AtomicU64,
    refusing: AtomicU64,
    max_refusing: AtomicU64,
}

/// A running delay proxy; dropping it stops it and closes every proxied connection.
pub struct DelayProxy {
    addr: SocketAddr,
    target: SocketAddr,
    shared: Arc<Shared>,
    acceptor: Option<thread::JoinHandle<()>>,
}

impl DelayProxy {
    /// A proxy on `listen_ip` (a free port) to `target`, delaying each direction by `delay`.
    pub fn start(listen_ip: IpAddr, target: SocketAddr, delay: Duration) -> Result<DelayProxy> {
        let listener = TcpListener::bind((listen_ip, 0))
            .with_context(|| format!("binding the delay proxy on {listen_ip}"))?;
        let addr = listener.local_addr()?;
        let shared = Arc::new(Shared {
            stop: AtomicBool::new(false),
            stats: Stats::default(),
            delay_us: AtomicU64::new(delay.as_micros() as u64),
            sockets: Mutex::new(HashMap::new()),
            down: AtomicBool::new(false),
            refused: AtomicU64::new(0),
            refusing: AtomicU64::new(0),
            max_refusing: AtomicU64::new(0),
        });
        let acceptor = {
            let shared = shared.clone();
            thread::Builder::new()
                .name(format!("delay-proxy-{}", addr.port()))
                .spawn(move || accept_loop(listener, target, shared))?
        };
        Ok(DelayProxy {
            addr,
            target,
            shared,
            acceptor: Some(acceptor),
        })
    }

    /// A proxy in front of `server`'s control port, on the server's own address.
    pub fn for_server(server: &crate::FtpServer, delay: Duration) -> Result<DelayProxy> {
        let target = server.addr();
        Self::start(target.ip(), target, delay)
    }

    /// Where clients connect.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    pub fn port(&self) -> u16 {
        self.addr.port()
    }

    pub fn target(&self) -> SocketAddr {
        self.target
    }

    /// The delay added in each direction (a round trip gains twice this).
    pub fn delay(&self) -> Duration {
        Duration::from_micros(self.shared.delay_us.load(Ordering::Relaxed))
    }

    /// Changes the delay for every chunk read from now on, on new and open connections (a
    /// benchmark's setup phase at full speed, its measured phase far). Chunks already in
    /// flight keep their due times; none is reordered.
    pub fn set_delay(&self, delay: Duration) {
        self.shared
            .delay_us
            .store(delay.as_micros() as u64, Ordering::Relaxed);
    }

    /// Connections accepted so far.
    pub fn connections(&self) -> u64 {
        self.shared.stats.connections.load(Ordering::Relaxed)
    }

    /// Client sends that followed a server send, summed over all connections so far.
    pub fn turns(&self) -> u64 {
        self.shared.stats.turns.load(Ordering::Relaxed)
    }

    /// Down (`true`): the server behind looks dead, every new connection is accepted, held
    /// [`DOWN_HOLD`] without a byte and closed (a server that hangs before its greeting);
    /// up again: forwarded as before. Connections open already stay as they are.
    pub fn set_down(&self, down: bool) {
        self.shared.down.store(down, Ordering::SeqCst);
    }

    /// Connections turned away while down, and the most held at once.
    pub fn refused(&self) -> (u64, u64) {
        (
            self.shared.refused.load(Ordering::SeqCst),
            self.shared.max_refusing.load(Ordering::SeqCst),
        )
    }

    /// Bytes forwarded from clients to the server, and from the server to clients.
    pub fn bytes(&self) -> (u64, u64) {
        (
            self.shared.stats.client_bytes.load(Ordering::Relaxed),
            self.shared.stats.server_bytes.load(Ordering::Relaxed),
        )
    }
}

impl Drop for DelayProxy {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        // Wake the acceptor with a connection of our own; it sees `stop` and returns.
        let _ = TcpStream::connect_timeout(&self.addr, Duration::from_secs(1));
        if let Some(acceptor) = self.acceptor.take() {
            let _ = acceptor.join();
        }
        let sockets = std::mem::take(
            &mut *self
                .shared
                .sockets
                .lock()
                .unwrap_or_else(|e| e.into_inner()),
        );
        for s in sockets.values().flatten() {
            let _ = s.shutdown(Shutdown::Both);
        }
    }
}

fn accept_loop(listener: TcpListener, target: SocketAddr, shared: Arc<Shared>) {
    for client in listener.incoming() {
        if shared.stop.load(Ordering::SeqCst) {
            return;
        }
        let Ok(client) = client else { continue };
        let id = shared.stats.connections.fetch_add(1, Ordering::Relaxed);
        let shared = shared.clone();
        if shared.down.load(Ordering::SeqCst) {
            shared.refused.fetch_add(1, Ordering::SeqCst);
            let now = shared.refusing.fetch_add(1, Ordering::SeqCst) + 1;
            shared.max_refusing.fetch_max(now, Ordering::SeqCst);
            let _ = thread::Builder::new()
                .name("delay-proxy-down".into())
                .spawn(move || {
                    thread::sleep(DOWN_HOLD);
                    let _ = client.shutdown(Shutdown::Both);
                    shared.refusing.fetch_sub(1, Ordering::SeqCst);
                });
            continue;
        }
        // A failed connection to the target closes the client: what a dead server looks like.
        let _ = thread::Builder::new()
            .name("delay-proxy-conn".into())
            .spawn(move || {
                if let Err(e) = proxy_one(id, client, target, &shared) {
                    eprintln!("delay proxy to {target}: {e:#}");
                }
                shared
                    .sockets
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .remove(&id);
            });
    }
}

fn proxy_one(id: u64, client: TcpStream, target: SocketAddr, shared: &Arc<Shared>) -> Result<()> {
    let server = match TcpStream::connect_timeout(&target, CONNECT_TIMEOUT) {
        Ok(s) => s,
        Err(e) => {
            let _ = client.shutdown(Shutdown::Both);
            return Err(e).with_context(|| format!("connecting to {target}"));
        }
    };
    let _ = client.set_nodelay(true);
    let _ = server.set_nodelay(true);
    {
        let mut sockets = shared.sockets.lock().unwrap_or_else(|e| e.into_inner());
        if shared.stop.load(Ordering::SeqCst) {
            return Ok(());
        }
        sockets.insert(id, [client.try_clone()?, server.try_clone()?]);
    }
    let last = Arc::new(AtomicU8::new(NOBODY));
    let up = pump(
        client.try_clone()?,
        server.try_clone()?,
        Side::Client,
        last.clone(),
        shared.clone(),
    )?;
    let down = pump(server, client, Side::Server, last, shared.clone())?;
    for handle in up.into_iter().chain(down) {
        let _ = handle.join();
    }
    Ok(())
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Side {
    /// Reads what the client sends, writes it to the server.
    Client,
    /// Reads what the server sends, writes it to the client.
    Server,
}

/// What travels from a direction's reader to its writer.
enum Item {
    Data(Instant, Vec<u8>),
    /// The sender half-closed (or failed): shut the other side's write half when due.
    Eof(Instant),
}

/// Starts the reader and writer threads of one direction, `from` to `to`.
fn pump(
    from: TcpStream,
    to: TcpStream,
    side: Side,
    last: Arc<AtomicU8>,
    shared: Arc<Shared>,
) -> Result<Vec<thread::JoinHandle<()>>> {
    let (tx, rx) = mpsc::channel::<Item>();
    let reader = thread::Builder::new()
        .name("delay-proxy-read".into())
        .spawn(move || read_side(from, side, &last, &shared, &tx))?;
    let writer = thread::Builder::new()
        .name("delay-proxy-write".into())
        .spawn(move || write_side(to, &rx))?;
    Ok(vec![reader, writer])
}

/// Reads chunks, stamps each with its due time, counts turns and bytes.
fn read_side(
    mut from: TcpStream,
    side: Side,
    last: &AtomicU8,
    shared: &Shared,
    tx: &mpsc::Sender<Item>,
) {
    let stats = &shared.stats;
    // Read once a chunk is in: a chunk is due the delay after it arrived.
    let delay = || Duration::from_micros(shared.delay_us.load(Ordering::Relaxed));
    let mut buf = vec![0u8; CHUNK];
    loop {
        match from.read(&mut buf) {
            Ok(0) | Err(_) => {
                let _ = tx.send(Item::Eof(Instant::now() + delay()));
                return;
            }
            Ok(n) => {
                let due = Instant::now() + delay();
                let (me, bytes) = match side {
                    Side::Client => (CLIENT, &stats.client_bytes),
                    Side::Server => (SERVER, &stats.server_bytes),
                };
                if last.swap(me, Ordering::SeqCst) != CLIENT && side == Side::Client {
                    stats.turns.fetch_add(1, Ordering::Relaxed);
                }
                bytes.fetch_add(n as u64, Ordering::Relaxed);
                trace(side, &buf[..n]);
                if tx.send(Item::Data(due, buf[..n].to_vec())).is_err() {
                    return;
                }
            }
        }
    }
}

/// `BFTP_DELAY_TRACE=1`: every chunk on stderr with the time it was read (for a profile of
/// where a client's round trips go).
fn trace(side: Side, data: &[u8]) {
    static START: std::sync::OnceLock<Option<Instant>> = std::sync::OnceLock::new();
    let Some(start) =
        START.get_or_init(|| std::env::var_os("BFTP_DELAY_TRACE").map(|_| Instant::now()))
    else {
        return;
    };
    let dir = match side {
        Side::Client => "->",
        Side::Server => "<-",
    };
    let text = String::from_utf8_lossy(data).replace("\r\n", " | ");
    eprintln!(
        "{:>9.3} ms {dir} {text}",
        start.elapsed().as_secs_f64() * 1e3
    );
}

/// Writes each chunk when it is due, in the order read; a half-close is passed on when due.
fn write_side(mut to: TcpStream, rx: &mpsc::Receiver<Item>) {
    for item in rx {
        let due = match &item {
            Item::Data(due, _) | Item::Eof(due) => *due,
        };
        let now = Instant::now();
        if due > now {
            thread::sleep(due - now);
        }
        match item {
            Item::Data(_, data) => {
                if to.write_all(&data).is_err() {
                    let _ = to.shutdown(Shutdown::Both);
                    return;
                }
            }
            Item::Eof(_) => {
                let _ = to.shutdown(Shutdown::Write);
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;

    const LOOPBACK: IpAddr = IpAddr::V4(Ipv4Addr::LOCALHOST);

    /// An echo server on loopback: writes back whatever it reads, closes on EOF.
    fn echo_server() -> SocketAddr {
        let listener = TcpListener::bind((LOOPBACK, 0)).expect("bind echo");
        let addr = listener.local_addr().expect("echo addr");
        thread::spawn(move || {
            for conn in listener.incoming().flatten() {
                thread::spawn(move || {
                    let mut conn = conn;
                    let mut buf = [0u8; 4096];
                    while let Ok(n) = conn.read(&mut buf) {
                        if n == 0 || conn.write_all(&buf[..n]).is_err() {
                            break;
                        }
                    }
                });
            }
        });
        addr
    }

    fn connect(proxy: &DelayProxy) -> TcpStream {
        let s = TcpStream::connect(proxy.addr()).expect("connect to proxy");
        s.set_nodelay(true).expect("nodelay");
        s.set_read_timeout(Some(Duration::from_secs(5)))
            .expect("timeout");
        s
    }

    fn round_trip(s: &mut TcpStream, msg: &[u8]) -> Duration {
        let start = Instant::now();
        s.write_all(msg).expect("write");
        let mut got = vec![0u8; msg.len()];
        s.read_exact(&mut got).expect("read echo");
        assert_eq!(got, msg);
        start.elapsed()
    }

    #[test]
    fn a_round_trip_through_the_proxy_takes_twice_the_delay() {
        let delay = Duration::from_millis(20);
        let proxy = DelayProxy::start(LOOPBACK, echo_server(), delay).expect("proxy");
        assert_eq!(
            proxy.addr().ip(),
            LOOPBACK,
            "listens on the target's own address"
        );
        let mut s = connect(&proxy);
        let rtts: Vec<Duration> = (0..5)
            .map(|i| round_trip(&mut s, &[b'a' + i; 10]))
            .collect();
        for rtt in &rtts {
            assert!(
                *rtt >= 2 * delay,
                "round trip {rtt:?} shorter than 2 x {delay:?}"
            );
            assert!(
                *rtt < 2 * delay + Duration::from_millis(15),
                "round trip {rtt:?} much longer than 2 x {delay:?}"
            );
        }
        assert_eq!(proxy.turns(), 5, "each exchange is one turn");
        assert_eq!(proxy.connections(), 1);
        assert_eq!(proxy.bytes(), (50, 50));
    }

    #[test]
    fn a_burst_pays_one_delay_and_keeps_its_order() {
        let delay = Duration::from_millis(30);
        let proxy = DelayProxy::start(LOOPBACK, echo_server(), delay).expect("proxy");
        let mut s = connect(&proxy);
        let mut sent = Vec::new();
        let start = Instant::now();
        for i in 0..200u32 {
            let line = format!("line {i}\r\n");
            s.write_all(line.as_bytes()).expect("write");
            sent.extend_from_slice(line.as_bytes());
        }
        let mut got = vec![0u8; sent.len()];
        s.read_exact(&mut got).expect("read echo");
        let took = start.elapsed();
        assert_eq!(got, sent, "every byte back, in order");
        assert!(took >= 2 * delay, "{took:?}");
        assert!(
            took < 4 * delay,
            "200 writes in a row cost {took:?}: chunks in flight must overlap"
        );
        assert_eq!(
            proxy.turns(),
            1,
            "writes without a reply between are one turn"
        );
    }

    #[test]
    fn a_half_close_reaches_the_other_side_after_the_delay() {
        let delay = Duration::from_millis(25);
        let proxy = DelayProxy::start(LOOPBACK, echo_server(), delay).expect("proxy");
        let mut s = connect(&proxy);
        s.write_all(b"bye").expect("write");
        let start = Instant::now();
        s.shutdown(Shutdown::Write).expect("shutdown");
        let mut rest = Vec::new();
        s.read_to_end(&mut rest).expect("read to EOF");
        assert_eq!(rest, b"bye");
        assert!(start.elapsed() >= 2 * delay, "{:?}", start.elapsed());
    }

    #[test]
    fn dropping_the_proxy_closes_its_connections() {
        let proxy =
            DelayProxy::start(LOOPBACK, echo_server(), Duration::from_millis(1)).expect("proxy");
        let mut s = connect(&proxy);
        round_trip(&mut s, b"x");
        let addr = proxy.addr();
        drop(proxy);
        let mut buf = [0u8; 1];
        assert!(
            matches!(s.read(&mut buf), Ok(0) | Err(_)),
            "connection closed"
        );
        assert!(
            TcpStream::connect_timeout(&addr, Duration::from_secs(1)).is_err(),
            "nothing listens any more"
        );
    }

    #[test]
    fn a_dead_target_closes_the_client() {
        // A port nobody listens on: bind, note, close.
        let dead = TcpListener::bind((LOOPBACK, 0))
            .and_then(|l| l.local_addr())
            .expect("probe port");
        let proxy = DelayProxy::start(LOOPBACK, dead, Duration::from_millis(1)).expect("proxy");
        let mut s = connect(&proxy);
        let mut buf = [0u8; 1];
        assert!(matches!(s.read(&mut buf), Ok(0) | Err(_)));
    }
}
