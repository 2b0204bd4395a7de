//! The relay on loopback sockets. Each test builds two connections: a *feeder* (the source
//! server's side) connected to the relay's source leg, and the relay's destination leg
//! connected to a *sink* (the destination server's side).

use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use ring::digest;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::{TcpSocket, TcpStream};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tokio::time::{sleep, timeout, Instant};

use super::*;

const MIB: usize = 1024 * 1024;
/// Long enough for any test here on a loaded machine; a hang fails instead of blocking.
const LIMIT: Duration = Duration::from_secs(60);

/// Pseudo-random bytes (xorshift64*), the same for the same seed.
fn data(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed | 1;
    let mut out = Vec::with_capacity(len + 8);
    while out.len() < len {
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        out.extend_from_slice(&x.wrapping_mul(0x2545_F491_4F6C_DD1D).to_le_bytes());
    }
    out.truncate(len);
    out
}

fn sha256(bytes: &[u8]) -> [u8; 32] {
    digest::digest(&digest::SHA256, bytes)
        .as_ref()
        .try_into()
        .unwrap()
}

/// Two connected loopback sockets, with kernel buffers of `buffers` bytes when given (the
/// kernel doubles the figure; set, it also turns off the buffers' autotuning).
async fn connected(buffers: Option<u32>) -> (TcpStream, TcpStream) {
    let socket = || {
        let s = TcpSocket::new_v4().unwrap();
        if let Some(size) = buffers {
            s.set_recv_buffer_size(size).unwrap();
            s.set_send_buffer_size(size).unwrap();
        }
        s
    };
    let listening = socket();
    listening.bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let listener = listening.listen(1).unwrap();
    let addr = listener.local_addr().unwrap();
    let (client, accepted) = tokio::join!(socket().connect(addr), listener.accept());
    (client.unwrap(), accepted.unwrap().0)
}

struct Legs {
    feeder: TcpStream,
    source: TcpStream,
    destination: TcpStream,
    sink: TcpStream,
}

async fn legs(buffers: Option<u32>) -> Legs {
    let (feeder, source) = connected(buffers).await;
    let (destination, sink) = connected(buffers).await;
    Legs {
        feeder,
        source,
        destination,
        sink,
    }
}

/// Write `bytes` and shut the write side (the source server's end of file).
fn feed(mut feeder: TcpStream, bytes: Arc<Vec<u8>>) -> JoinHandle<io::Result<TcpStream>> {
    tokio::spawn(async move {
        feeder.write_all(&bytes).await?;
        feeder.shutdown().await?;
        Ok(feeder)
    })
}

/// Write pseudo-random bytes until the connection fails; the count of bytes accepted.
fn feed_forever(mut feeder: TcpStream, fed: Arc<AtomicU64>) -> JoinHandle<io::Error> {
    tokio::spawn(async move {
        let chunk = data(64 * 1024, 7);
        loop {
            match feeder.write(&chunk).await {
                Ok(n) => {
                    fed.fetch_add(n as u64, Ordering::SeqCst);
                }
                Err(e) => return e,
            }
        }
    })
}

/// Read to the end of file: the bytes read, or how the connection ended otherwise.
fn sink(mut sink: TcpStream) -> JoinHandle<(Vec<u8>, io::Result<()>)> {
    tokio::spawn(async move {
        let mut got = Vec::new();
        let result = sink.read_to_end(&mut got).await.map(drop);
        (got, result)
    })
}

fn kernel() -> RelayOptions {
    RelayOptions::default()
}

fn user_space_hashing() -> RelayOptions {
    RelayOptions {
        sha256: true,
        ..RelayOptions::default()
    }
}

fn user_space_plain() -> RelayOptions {
    RelayOptions {
        splice: false,
        ..RelayOptions::default()
    }
}

/// Relay `bytes` with `options`, keeping the relay's legs open afterwards (so that the sink
/// can see its end of file only from the relay's shutdown, not from a close).
async fn relay_kept_open(bytes: Vec<u8>, options: &RelayOptions) -> (Relayed, Vec<u8>) {
    let Legs {
        feeder,
        source,
        destination,
        sink: sink_end,
    } = legs(None).await;
    let bytes = Arc::new(bytes);
    let fed = feed(feeder, bytes.clone());
    let sunk = sink(sink_end);
    let (mut source, mut destination) = (Stream::Plain(source), Stream::Plain(destination));
    let relayed = timeout(
        LIMIT,
        relay_on(
            &mut source,
            &mut destination,
            options,
            std::future::pending(),
        ),
    )
    .await
    .expect("the relay ends");
    // The relay's legs are still open here: the sink's end of file is the relay's shutdown.
    let (got, result) = timeout(Duration::from_secs(10), sunk)
        .await
        .expect("the sink sees the end of file while the relay's legs are open")
        .unwrap();
    result.unwrap();
    let _feeder = fed.await.unwrap().unwrap();
    drop((source, destination));
    (relayed, got)
}

#[tokio::test]
async fn the_kernel_relays_a_large_stream_byte_exact_and_counts_it() {
    let bytes = data(64 * MIB, 1);
    let (relayed, got) = relay_kept_open(bytes.clone(), &kernel()).await;
    assert_eq!(relayed.result, Ok(()));
    assert_eq!(relayed.mover, Mover::Kernel);
    assert_eq!(relayed.bytes, bytes.len() as u64);
    assert_eq!(relayed.sha256, None, "no hash asked for");
    assert_eq!(got.len(), bytes.len());
    assert!(got == bytes, "the destination got other bytes");
}

#[tokio::test]
async fn user_space_relays_a_large_stream_byte_exact_with_its_sha256() {
    let bytes = data(64 * MIB, 2);
    let (relayed, got) = relay_kept_open(bytes.clone(), &user_space_hashing()).await;
    assert_eq!(relayed.result, Ok(()));
    assert_eq!(relayed.mover, Mover::UserSpace);
    assert_eq!(relayed.bytes, bytes.len() as u64);
    assert_eq!(relayed.sha256, Some(sha256(&bytes)));
    let hex: String = sha256(&bytes).iter().map(|b| format!("{b:02x}")).collect();
    assert_eq!(relayed.sha256_hex(), Some(hex));
    assert!(got == bytes, "the destination got other bytes");
}

#[tokio::test]
async fn user_space_without_a_hash_relays_byte_exact_and_hashes_nothing() {
    let bytes = data(8 * MIB + 13, 3);
    let (relayed, got) = relay_kept_open(bytes.clone(), &user_space_plain()).await;
    assert_eq!(relayed.result, Ok(()));
    assert_eq!(relayed.mover, Mover::UserSpace);
    assert_eq!(relayed.bytes, bytes.len() as u64);
    assert_eq!(relayed.sha256, None);
    assert!(got == bytes, "the destination got other bytes");
}

#[tokio::test]
async fn an_empty_file_is_relayed_as_an_empty_file_on_both_movers() {
    for options in [kernel(), user_space_hashing(), user_space_plain()] {
        let (relayed, got) = relay_kept_open(Vec::new(), &options).await;
        assert_eq!(relayed.result, Ok(()), "{options:?}");
        assert_eq!(relayed.bytes, 0);
        assert!(got.is_empty());
        let expected = options.sha256.then(|| sha256(b""));
        assert_eq!(relayed.sha256, expected, "{options:?}");
    }
}

#[tokio::test]
async fn relay_closes_both_legs_after_a_complete_stream() {
    let Legs {
        feeder,
        source,
        destination,
        sink: sink_end,
    } = legs(None).await;
    let bytes = Arc::new(data(MIB, 4));
    let fed = feed(feeder, bytes.clone());
    let sunk = sink(sink_end);
    let relayed = relay(
        Stream::Plain(source),
        Stream::Plain(destination),
        &kernel(),
        std::future::pending(),
    )
    .await;
    assert_eq!(relayed.result, Ok(()));
    let (got, result) = sunk.await.unwrap();
    assert_eq!(result.map_err(|e| e.kind()), Ok(()), "a clean end of file");
    assert!(got == *bytes);
    let mut feeder = fed.await.unwrap().unwrap();
    let mut rest = Vec::new();
    assert_eq!(
        timeout(Duration::from_secs(10), feeder.read_to_end(&mut rest))
            .await
            .expect("the source leg is closed")
            .map_err(|e| e.kind()),
        Ok(0)
    );
}

/// Counts what the relay reads from its source and writes to its destination, and keeps
/// the largest difference seen at any poll: what the relay held at that moment.
#[derive(Default)]
struct Ledger {
    read: AtomicU64,
    written: AtomicU64,
    most_held: AtomicU64,
}

impl Ledger {
    fn observe(&self) {
        let held = self
            .read
            .load(Ordering::SeqCst)
            .saturating_sub(self.written.load(Ordering::SeqCst));
        self.most_held.fetch_max(held, Ordering::SeqCst);
    }
}

struct Counted<T> {
    inner: T,
    ledger: Arc<Ledger>,
}

impl<T: AsyncRead + Unpin> AsyncRead for Counted<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let poll = Pin::new(&mut self.inner).poll_read(cx, buf);
        let n = buf.filled().len() - before;
        self.ledger.read.fetch_add(n as u64, Ordering::SeqCst);
        self.ledger.observe();
        poll
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for Counted<T> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.ledger.observe();
        let poll = Pin::new(&mut self.inner).poll_write(cx, buf);
        if let Poll::Ready(Ok(n)) = &poll {
            self.ledger.written.fetch_add(*n as u64, Ordering::SeqCst);
        }
        poll
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// A sink that reads `rate` bytes per second for `slow`, then as fast as it can; it
/// samples `fed - received` (bytes the feeder handed its kernel and the sink has not read)
/// every time it reads during the slow phase, and returns the largest, with what it read.
fn slow_sink(
    mut sink: TcpStream,
    rate: f64,
    slow: Duration,
    fed: Arc<AtomicU64>,
) -> JoinHandle<(u64, u64, Vec<u8>)> {
    tokio::spawn(async move {
        let started = Instant::now();
        let mut got = Vec::new();
        let mut in_flight_max = 0u64;
        let mut buf = vec![0u8; 16 * 1024];
        loop {
            let n = sink.read(&mut buf).await.unwrap();
            if n == 0 {
                break;
            }
            got.extend_from_slice(&buf[..n]);
            if started.elapsed() < slow {
                let in_flight = fed.load(Ordering::SeqCst).saturating_sub(got.len() as u64);
                in_flight_max = in_flight_max.max(in_flight);
                let due = started + Duration::from_secs_f64(got.len() as f64 / rate);
                tokio::time::sleep_until(due).await;
            }
        }
        (in_flight_max, fed.load(Ordering::SeqCst), got)
    })
}

/// Feed `bytes` in pieces, counting each piece the kernel accepted.
fn counted_feed(mut feeder: TcpStream, bytes: Arc<Vec<u8>>, fed: Arc<AtomicU64>) -> JoinHandle<()> {
    tokio::spawn(async move {
        let mut at = 0;
        while at < bytes.len() {
            let n = feeder.write(&bytes[at..]).await.unwrap();
            at += n;
            fed.fetch_add(n as u64, Ordering::SeqCst);
        }
        feeder.shutdown().await.unwrap();
    })
}

#[tokio::test]
async fn user_space_holds_no_more_than_its_buffer_when_the_destination_is_slow() {
    let Legs {
        feeder,
        source,
        destination,
        sink: sink_end,
    } = legs(None).await;
    let bytes = Arc::new(data(12 * MIB, 5));
    let fed = Arc::new(AtomicU64::new(0));
    let feeding = counted_feed(feeder, bytes.clone(), fed.clone());
    let sunk = slow_sink(sink_end, MIB as f64, Duration::from_secs(2), fed);
    let ledger = Arc::new(Ledger::default());
    let mut source = Counted {
        inner: source,
        ledger: ledger.clone(),
    };
    let mut destination = Counted {
        inner: destination,
        ledger: ledger.clone(),
    };
    let options = RelayOptions {
        sha256: true,
        // Smaller than what one read from the (autotuned) socket could return.
        buffer: 16 * 1024,
        ..RelayOptions::default()
    };
    let relayed = timeout(
        LIMIT,
        relay_io(
            &mut source,
            &mut destination,
            &options,
            std::future::pending(),
        ),
    )
    .await
    .unwrap();
    assert_eq!(relayed.result, Ok(()));
    assert_eq!(relayed.bytes, bytes.len() as u64);
    let most_held = ledger.most_held.load(Ordering::SeqCst);
    assert!(
        most_held <= options.buffer as u64,
        "the relay held {most_held} bytes, more than its buffer of {}",
        options.buffer
    );
    assert_eq!(ledger.read.load(Ordering::SeqCst), bytes.len() as u64);
    drop(destination);
    let (_, _, got) = sunk.await.unwrap();
    assert!(got == *bytes);
    feeding.await.unwrap();
}

#[tokio::test]
async fn the_kernel_relay_stalls_a_fast_source_behind_a_slow_destination() {
    const SOCKET_BUFFER: u32 = 32 * 1024;
    let Legs {
        feeder,
        source,
        destination,
        sink: sink_end,
    } = legs(Some(SOCKET_BUFFER)).await;
    let bytes = Arc::new(data(16 * MIB, 6));
    let fed = Arc::new(AtomicU64::new(0));
    let feeding = counted_feed(feeder, bytes.clone(), fed.clone());
    let slow = Duration::from_secs(3);
    let sunk = slow_sink(sink_end, MIB as f64, slow, fed.clone());
    let options = RelayOptions {
        pipe: 64 * 1024,
        ..RelayOptions::default()
    };
    let relaying = tokio::spawn({
        let options = options.clone();
        async move {
            relay(
                Stream::Plain(source),
                Stream::Plain(destination),
                &options,
                std::future::pending(),
            )
            .await
        }
    });
    // Halfway through the slow phase the feeder is blocked: it handed its kernel no more
    // than the sink read plus what the four socket buffers and the pipe hold.
    sleep(slow / 2).await;
    let fed_then = fed.load(Ordering::SeqCst);
    assert!(
        fed_then < bytes.len() as u64 / 2,
        "the source was not held back: {fed_then} bytes fed"
    );
    let relayed = timeout(LIMIT, relaying).await.unwrap().unwrap();
    assert_eq!(relayed.result, Ok(()));
    assert_eq!(relayed.mover, Mover::Kernel);
    assert_eq!(relayed.bytes, bytes.len() as u64);
    let (in_flight_max, _, got) = sunk.await.unwrap();
    // Each socket buffer: the kernel doubles the figure set. 64 KiB spare for the
    // loopback's segments in transit.
    let bound = options.pipe as u64 + 4 * 2 * u64::from(SOCKET_BUFFER) + 64 * 1024;
    assert!(
        in_flight_max <= bound,
        "{in_flight_max} bytes were between the feeder and the sink, more than {bound}"
    );
    assert!(got == *bytes);
    feeding.await.unwrap();
}

/// A relay between a feeder that never stops and a sink that reads everything, cancelled
/// after a moment: it ends `Cancelled` at once and resets both legs.
async fn cancel_mid_relay(options: RelayOptions) {
    let Legs {
        feeder,
        source,
        destination,
        sink: mut sink_end,
    } = legs(None).await;
    let fed = Arc::new(AtomicU64::new(0));
    let feeding = feed_forever(feeder, fed.clone());
    let sinking = tokio::spawn(async move {
        let mut buf = vec![0u8; 256 * 1024];
        loop {
            match sink_end.read(&mut buf).await {
                Ok(0) => return Ok(()),
                Ok(_) => {}
                Err(e) => return Err(e.kind()),
            }
        }
    });
    let (cancel, cancelled) = oneshot::channel::<()>();
    let relaying = tokio::spawn(async move {
        let relayed = relay(
            Stream::Plain(source),
            Stream::Plain(destination),
            &options,
            async {
                let _ = cancelled.await;
            },
        )
        .await;
        (relayed, Instant::now())
    });
    sleep(Duration::from_millis(300)).await;
    let asked = Instant::now();
    cancel.send(()).unwrap();
    let (relayed, ended) = timeout(LIMIT, relaying).await.unwrap().unwrap();
    assert_eq!(relayed.result, Err(RelayError::Cancelled));
    assert!(
        ended - asked < Duration::from_millis(500),
        "the cancel took {:?}",
        ended - asked
    );
    assert!(relayed.bytes > 0);
    assert_eq!(relayed.sha256, None, "a cut stream has no hash");
    // The destination sees a reset, not an end of file that would pass for the whole file.
    let sink_ended = timeout(Duration::from_secs(10), sinking)
        .await
        .expect("the destination leg is closed")
        .unwrap();
    assert_eq!(sink_ended, Err(io::ErrorKind::ConnectionReset));
    // The source's writes fail: its leg is closed too.
    let feed_error = timeout(Duration::from_secs(10), feeding)
        .await
        .expect("the source leg is closed")
        .unwrap();
    assert!(
        matches!(
            feed_error.kind(),
            io::ErrorKind::ConnectionReset | io::ErrorKind::BrokenPipe
        ),
        "{feed_error}"
    );
}

#[tokio::test]
async fn a_cancel_ends_a_kernel_relay_at_once_and_resets_both_legs() {
    cancel_mid_relay(kernel()).await;
}

#[tokio::test]
async fn a_cancel_ends_a_user_space_relay_at_once_and_resets_both_legs() {
    cancel_mid_relay(user_space_hashing()).await;
}

/// A source that sends `first` bytes and then nothing, its connection open.
async fn idle_source(options: RelayOptions) {
    let Legs {
        mut feeder,
        source,
        destination,
        sink: sink_end,
    } = legs(None).await;
    feeder.write_all(&data(1000, 8)).await.unwrap();
    let sunk = sink(sink_end);
    let started = Instant::now();
    let relayed = timeout(
        LIMIT,
        relay(
            Stream::Plain(source),
            Stream::Plain(destination),
            &options,
            std::future::pending(),
        ),
    )
    .await
    .unwrap();
    let took = started.elapsed();
    assert_eq!(relayed.result, Err(RelayError::Idle { idle: options.idle }));
    assert_eq!(relayed.bytes, 1000);
    assert!(took >= options.idle, "{took:?}");
    assert!(took < options.idle + Duration::from_secs(2), "{took:?}");
    let (got, result) = sunk.await.unwrap();
    assert_eq!(got.len(), 1000);
    assert_eq!(
        result.map_err(|e| e.kind()),
        Err(io::ErrorKind::ConnectionReset)
    );
    drop(feeder);
}

#[tokio::test]
async fn an_idle_source_trips_the_watchdog_of_the_kernel_relay() {
    idle_source(RelayOptions {
        idle: Duration::from_millis(400),
        ..kernel()
    })
    .await;
}

#[tokio::test]
async fn an_idle_source_trips_the_watchdog_of_the_user_space_relay() {
    idle_source(RelayOptions {
        idle: Duration::from_millis(400),
        ..user_space_hashing()
    })
    .await;
}

#[tokio::test]
async fn a_trickling_source_is_stopped_by_the_copy_deadline() {
    for options in [kernel(), user_space_hashing()] {
        let Legs {
            mut feeder,
            source,
            destination,
            sink: sink_end,
        } = legs(None).await;
        let trickle = tokio::spawn(async move {
            while feeder.write_all(b"x").await.is_ok() {
                sleep(Duration::from_millis(50)).await;
            }
        });
        let sunk = sink(sink_end);
        let options = RelayOptions {
            idle: Duration::from_secs(30),
            deadline: Some(Instant::now() + Duration::from_millis(500)),
            ..options
        };
        let relayed = timeout(
            Duration::from_secs(5),
            relay(
                Stream::Plain(source),
                Stream::Plain(destination),
                &options,
                std::future::pending(),
            ),
        )
        .await
        .expect("the deadline stops the relay");
        assert_eq!(relayed.result, Err(RelayError::Deadline));
        assert!(relayed.bytes > 0);
        let _ = sunk.await;
        trickle.abort();
    }
}

/// The sink reads a little and closes its connection while the source has much more.
async fn destination_closes_early(options: RelayOptions) {
    let Legs {
        feeder,
        source,
        destination,
        sink: mut sink_end,
    } = legs(None).await;
    let fed = Arc::new(AtomicU64::new(0));
    let feeding = feed_forever(feeder, fed);
    let mut first = vec![0u8; 256 * 1024];
    let relaying = tokio::spawn(async move {
        relay(
            Stream::Plain(source),
            Stream::Plain(destination),
            &options,
            std::future::pending(),
        )
        .await
    });
    sink_end.read_exact(&mut first).await.unwrap();
    drop(sink_end);
    let relayed = timeout(LIMIT, relaying).await.unwrap().unwrap();
    match &relayed.result {
        Err(RelayError::Io { side, kind, .. }) => {
            assert_eq!(*side, Side::Destination);
            assert!(
                matches!(
                    kind,
                    io::ErrorKind::BrokenPipe | io::ErrorKind::ConnectionReset
                ),
                "{kind:?}"
            );
        }
        other => panic!("{other:?}"),
    }
    assert!(relayed.bytes >= first.len() as u64);
    assert_eq!(relayed.sha256, None);
    feeding.abort();
}

#[tokio::test]
async fn a_destination_that_closes_early_is_a_destination_error_for_the_kernel() {
    destination_closes_early(kernel()).await;
}

#[tokio::test]
async fn a_destination_that_closes_early_is_a_destination_error_in_user_space() {
    destination_closes_early(user_space_hashing()).await;
}

/// The feeder sends some bytes and resets its connection.
async fn source_resets(options: RelayOptions) {
    let Legs {
        mut feeder,
        source,
        destination,
        sink: sink_end,
    } = legs(None).await;
    let sunk = sink(sink_end);
    let relaying = tokio::spawn(async move {
        relay(
            Stream::Plain(source),
            Stream::Plain(destination),
            &options,
            std::future::pending(),
        )
        .await
    });
    feeder.write_all(&data(100_000, 9)).await.unwrap();
    sleep(Duration::from_millis(200)).await;
    feeder.set_zero_linger().unwrap();
    drop(feeder);
    let relayed = timeout(LIMIT, relaying).await.unwrap().unwrap();
    match &relayed.result {
        Err(RelayError::Io { side, kind, .. }) => {
            assert_eq!(*side, Side::Source);
            assert_eq!(*kind, io::ErrorKind::ConnectionReset);
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(relayed.bytes, 100_000);
    let (_, result) = sunk.await.unwrap();
    assert_eq!(
        result.map_err(|e| e.kind()),
        Err(io::ErrorKind::ConnectionReset)
    );
}

#[tokio::test]
async fn a_source_that_resets_is_a_source_error_for_the_kernel() {
    source_resets(kernel()).await;
}

#[tokio::test]
async fn a_source_that_resets_is_a_source_error_in_user_space() {
    source_resets(user_space_hashing()).await;
}

#[test]
fn the_options_of_a_copy_follow_its_limits() {
    let limits = Limits::default();
    let started = Instant::now();
    let options = RelayOptions::for_copy(&limits, started);
    assert_eq!(options.deadline, Some(started + limits.transfer_timeout));
    assert_eq!(options.idle, limits.reply_timeout);
    assert!(options.splice && !options.sha256);
}

/// A TLS server (the FTP server's side of a `PROT P` data connection) and the relay's TLS
/// client leg, over loopback, the server's certificate pinned.
async fn tls_connected() -> (tokio_rustls::server::TlsStream<TcpStream>, Stream) {
    use rustls::pki_types::{PrivateKeyDer, PrivatePkcs8KeyDer};

    let key = rcgen::KeyPair::generate().unwrap();
    let cert = rcgen::CertificateParams::new(vec!["127.0.0.1".to_owned()])
        .unwrap()
        .self_signed(&key)
        .unwrap();
    let der = cert.der().clone();
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let server = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(
            vec![der.clone()],
            PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der())),
        )
        .unwrap();
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(server));
    let hosts = crate::tls::TlsTrust::new(vec![crate::tls::HostTrust {
        host: "127.0.0.1".into(),
        trust: crate::tls::Trust::Pinned(crate::tls::fingerprint(&der)),
    }])
    .unwrap();
    let (config, trust) = hosts.for_host("127.0.0.1").unwrap();
    let (server_tcp, client_tcp) = connected(None).await;
    let (server, client) = tokio::join!(
        acceptor.accept(server_tcp),
        crate::tls::handshake(
            config,
            &trust,
            "127.0.0.1",
            client_tcp,
            Duration::from_secs(10)
        )
    );
    (server.unwrap(), Stream::Tls(Box::new(client.unwrap())))
}

#[tokio::test]
async fn two_tls_legs_are_relayed_in_user_space_and_the_destination_gets_its_close_notify() {
    for options in [kernel(), user_space_hashing()] {
        let bytes = Arc::new(data(8 * MIB + 5, 10));
        let (mut feeder, source) = tls_connected().await;
        let (mut sink_end, destination) = tls_connected().await;
        let feeding = tokio::spawn({
            let bytes = bytes.clone();
            async move {
                feeder.write_all(&bytes).await.unwrap();
                // close_notify, then the TCP end: the source's end of file.
                feeder.shutdown().await.unwrap();
                feeder
            }
        });
        let sinking = tokio::spawn(async move {
            let mut got = Vec::new();
            // An end without close_notify would be an UnexpectedEof error here.
            let result = sink_end.read_to_end(&mut got).await.map_err(|e| e.kind());
            (got, result)
        });
        let relayed = timeout(
            LIMIT,
            relay(source, destination, &options, std::future::pending()),
        )
        .await
        .unwrap();
        assert_eq!(relayed.result, Ok(()), "{options:?}");
        assert_eq!(
            relayed.mover,
            Mover::UserSpace,
            "TLS legs pass through user space"
        );
        assert_eq!(relayed.bytes, bytes.len() as u64);
        assert_eq!(relayed.sha256, options.sha256.then(|| sha256(&bytes)));
        let (got, result) = sinking.await.unwrap();
        assert_eq!(result, Ok(got.len()));
        assert!(got == *bytes, "the destination got other bytes");
        drop(feeding.await.unwrap());
    }
}
