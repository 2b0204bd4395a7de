//! The relay's byte mover (SPEC §14): one file's bytes from the source's data connection to
//! the destination's, through bftpd, when the two servers will not talk to each other.
//!
//! [`relay`] takes both data connections and gives them back closed. It holds no file in
//! memory: on two plain TCP legs with no hash asked for, the kernel moves the bytes
//! (`splice(2)` from the source socket into a pipe of bounded size and from the pipe into the
//! destination socket, [`Mover::Kernel`]); otherwise (a TLS leg, or the stream's SHA-256 asked
//! for) they pass through one buffer of [`RelayOptions::buffer`] bytes ([`Mover::UserSpace`],
//! also [`relay_io`] for any reader and writer). Either way it reads from the source only
//! while that buffer (or pipe) has room, which only writing to the destination makes, so a
//! slow destination slows the source down (back-pressure) and a slow source slows nothing.
//!
//! At the source's end of file the destination's write side is shut down (a TLS leg sends
//! its close_notify first): that is how an FTP server in stream mode learns that the file is
//! complete. [`relay`] then waits for the destination to close its side (reading and
//! discarding what it sends, such as a TLS 1.3 server's session tickets), so that closing
//! cannot reset a connection whose server has not read the end yet. Any other end (cancel,
//! watchdog, an I/O error on either side) resets both connections, so that neither server
//! can take a cut stream for a whole file.
//!
//! The watchdog: the relay stops when no byte moved for [`RelayOptions::idle`], and at
//! [`RelayOptions::deadline`], the copy's own watchdog ([`Limits::transfer_timeout`] from the
//! copy's first command, as for a third-party copy).

mod gate;
mod kernel;
#[cfg(test)]
mod tests;

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::time::Duration;

use ring::digest;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::time::{Instant, Sleep};

use crate::limits::Limits;
use crate::tls::Stream;
use crate::transcript::Side;

pub use gate::{RelayGate, RelayPermit};

/// The user-space buffer of a relay unless told otherwise: large enough for TLS records and
/// few system calls, small enough that a thousand relays stay within a few hundred MiB.
pub const DEFAULT_BUFFER: usize = 256 * 1024;
/// The kernel pipe of a relay unless told otherwise (the largest an unprivileged process may
/// ask for by default, `/proc/sys/fs/pipe-max-size`).
pub const DEFAULT_PIPE: usize = 1024 * 1024;

/// How one relay runs.
#[derive(Debug, Clone)]
pub struct RelayOptions {
    /// Compute the SHA-256 of the stream as it passes (forces the user-space mover).
    pub sha256: bool,
    /// Let the kernel move the bytes when both legs are plain TCP and no hash is asked for.
    pub splice: bool,
    /// The user-space buffer: the most bytes read from the source and not yet written.
    pub buffer: usize,
    /// The kernel pipe's capacity: the most bytes spliced from the source and not yet into
    /// the destination (asked of the kernel with `F_SETPIPE_SZ`; never more is put in it).
    pub pipe: usize,
    /// No byte moved (read from the source or written to the destination) for this long:
    /// the relay is stalled and stops.
    pub idle: Duration,
    /// The copy's watchdog: the relay stops at this instant whatever moves.
    pub deadline: Option<Instant>,
    /// The daemon's caps: the relay moves no faster than its rate allows.
    pub gate: Option<std::sync::Arc<RelayGate>>,
}

impl Default for RelayOptions {
    fn default() -> Self {
        Self {
            sha256: false,
            splice: true,
            buffer: DEFAULT_BUFFER,
            pipe: DEFAULT_PIPE,
            idle: Duration::from_secs(120),
            deadline: None,
            gate: None,
        }
    }
}

impl RelayOptions {
    /// The options of a copy that began at `started`: its deadline is the copy's watchdog
    /// (`transfer_timeout` after its first command, as for a third-party copy); a data
    /// connection silent for as long as a server gets to answer one command
    /// (`reply_timeout`) is stalled.
    pub fn for_copy(limits: &Limits, started: Instant) -> Self {
        Self {
            idle: limits.reply_timeout,
            deadline: Some(started + limits.transfer_timeout),
            ..Self::default()
        }
    }
}

/// Who moved the bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Mover {
    /// `splice(2)` through a pipe: the bytes never entered user space.
    Kernel,
    /// Read into and written from one bounded buffer (TLS legs, or a hash asked for).
    UserSpace,
}

impl Mover {
    pub fn as_str(self) -> &'static str {
        match self {
            Mover::Kernel => "kernel",
            Mover::UserSpace => "user space",
        }
    }
}

/// Why a relay ended before the source's end of file.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RelayError {
    #[error("the relay was cancelled")]
    Cancelled,
    #[error("no byte moved for {idle:?}")]
    Idle { idle: Duration },
    #[error("the copy's watchdog expired")]
    Deadline,
    /// Reading the source's or writing the destination's data connection failed (`side`
    /// names which). `kind` is the error's kind, `detail` its text.
    #[error("the {side} data connection failed: {detail}")]
    Io {
        side: Side,
        kind: io::ErrorKind,
        detail: String,
    },
}

impl RelayError {
    fn io(side: Side, error: &io::Error) -> Self {
        RelayError::Io {
            side,
            kind: error.kind(),
            detail: error.to_string(),
        }
    }
}

/// What one relay did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Relayed {
    /// Bytes written to the destination (accepted by its connection): every byte counted,
    /// however the relay ended.
    pub bytes: u64,
    /// The SHA-256 of the whole stream, when it was asked for and the source's end of file
    /// was reached (a cut stream has no hash: it proves nothing).
    pub sha256: Option<[u8; 32]>,
    pub mover: Mover,
    /// `Ok`: the source's end of file was reached, every byte written and the destination's
    /// write side shut down.
    pub result: Result<(), RelayError>,
}

impl Relayed {
    pub fn is_complete(&self) -> bool {
        self.result.is_ok()
    }

    /// The stream's SHA-256 in lower-case hexadecimal, as servers' HASH replies are compared.
    pub fn sha256_hex(&self) -> Option<String> {
        self.sha256
            .map(|d| d.iter().map(|b| format!("{b:02x}")).collect())
    }
}

/// Relay one file from `source` to `destination` and close both: cleanly at the source's
/// end of file (the destination's write side shut down first, then its close awaited within
/// the watchdog), by reset otherwise. The
/// kernel moves the bytes when both are plain TCP, `options.splice` holds and no hash is
/// asked for (and a pipe could be made); the user-space buffer otherwise. `cancel` stops
/// the relay when it completes (a job's cancel, a shutdown).
pub async fn relay(
    mut source: Stream,
    mut destination: Stream,
    options: &RelayOptions,
    cancel: impl Future<Output = ()>,
) -> Relayed {
    arm_reset(source.tcp());
    arm_reset(destination.tcp());
    let relayed = relay_on(&mut source, &mut destination, options, cancel).await;
    if relayed.is_complete() {
        for stream in [&source, &destination] {
            // `None` restores the default close (the deprecation is about lingering closes
            // that block a thread; this one never lingers).
            #[allow(deprecated)]
            if let Err(error) = stream.tcp().set_linger(None) {
                tracing::debug!(%error, "SO_LINGER on a relay's data connection");
            }
        }
    }
    relayed
}

/// [`relay`] on borrowed connections, which it leaves open.
async fn relay_on(
    source: &mut Stream,
    destination: &mut Stream,
    options: &RelayOptions,
    cancel: impl Future<Output = ()>,
) -> Relayed {
    tokio::pin!(cancel);
    let mut watchdog = Watchdog::new(options, cancel);
    let relayed = match (&mut *source, &mut *destination) {
        (Stream::Plain(src), Stream::Plain(dst)) if options.splice && !options.sha256 => {
            match kernel::Pipe::new(options.pipe) {
                Ok(pipe) => {
                    kernel::relay(src, dst, &pipe, options.gate.as_deref(), &mut watchdog).await
                }
                Err(error) => {
                    tracing::debug!(%error, "no pipe for the relay: the bytes pass through user space");
                    copy(src, dst, options, &mut watchdog).await
                }
            }
        }
        (source, destination) => copy(source, destination, options, &mut watchdog).await,
    };
    if relayed.is_complete() {
        drain(destination, &mut watchdog).await;
    }
    relayed
}

/// After the destination's write side is shut down: read and discard what the destination
/// still sends (a TLS 1.3 server's session tickets) until it closes its side, within the
/// watchdog. A connection closed with unread bytes in it is reset, and a reset can cost the
/// server the file's last bytes. Best effort: the stream was already whole.
async fn drain<C: Future<Output = ()>>(destination: &mut Stream, watchdog: &mut Watchdog<'_, C>) {
    let mut scrap = [0u8; 4096];
    while let Ok(Ok(1..)) = watchdog.guard(destination.read(&mut scrap)).await {}
}

/// Relay from any reader to any writer through the user-space buffer, shutting `destination`
/// down at the source's end of file. Both stay the caller's, open: a caller that closes a
/// connection with unread bytes in it (a TLS 1.3 server's session tickets) resets it.
pub async fn relay_io<R, W>(
    source: &mut R,
    destination: &mut W,
    options: &RelayOptions,
    cancel: impl Future<Output = ()>,
) -> Relayed
where
    R: AsyncRead + Unpin + ?Sized,
    W: AsyncWrite + Unpin + ?Sized,
{
    tokio::pin!(cancel);
    let mut watchdog = Watchdog::new(options, cancel);
    copy(source, destination, options, &mut watchdog).await
}

/// Close `tcp` with a reset (`SO_LINGER` zero) when it is dropped: the server sees an error,
/// not an end of file. A relay's data connections are armed so from the moment they are
/// opened: a copy dropped half-way (a cancel) cannot end in a clean close that a server would
/// take for a whole file. [`relay`] disarms them once the stream is whole.
pub fn arm_reset(tcp: &tokio::net::TcpStream) {
    if let Err(error) = tcp.set_zero_linger() {
        tracing::debug!(%error, "SO_LINGER on a relay's data connection");
    }
}

/// The user-space mover: read into the buffer only when it is empty, write all of it, again.
async fn copy<R, W, C>(
    source: &mut R,
    destination: &mut W,
    options: &RelayOptions,
    watchdog: &mut Watchdog<'_, C>,
) -> Relayed
where
    R: AsyncRead + Unpin + ?Sized,
    W: AsyncWrite + Unpin + ?Sized,
    C: Future<Output = ()>,
{
    let mut hash = options
        .sha256
        .then(|| digest::Context::new(&digest::SHA256));
    let mut buffer = vec![0u8; options.buffer.max(1)];
    let mut bytes = 0u64;
    let result = async {
        let step = match &options.gate {
            Some(gate) => gate.step(buffer.len()),
            None => buffer.len(),
        };
        loop {
            let read = watchdog
                .guard(source.read(&mut buffer[..step]))
                .await?
                .map_err(|e| RelayError::io(Side::Source, &e))?;
            if read == 0 {
                break;
            }
            watchdog.moved();
            if let Some(gate) = &options.gate {
                watchdog.guard(gate.take(read)).await?;
            }
            if let Some(hash) = &mut hash {
                hash.update(&buffer[..read]);
            }
            let mut start = 0;
            while start < read {
                let written = watchdog
                    .guard(destination.write(&buffer[start..read]))
                    .await?
                    .map_err(|e| RelayError::io(Side::Destination, &e))?;
                if written == 0 {
                    let e = io::Error::from(io::ErrorKind::WriteZero);
                    return Err(RelayError::io(Side::Destination, &e));
                }
                start += written;
                bytes += written as u64;
                watchdog.moved();
            }
        }
        watchdog
            .guard(destination.shutdown())
            .await?
            .map_err(|e| RelayError::io(Side::Destination, &e))
    }
    .await;
    let sha256 = match (&result, hash) {
        (Ok(()), Some(hash)) => hash.finish().as_ref().try_into().ok(),
        _ => None,
    };
    Relayed {
        bytes,
        sha256,
        mover: Mover::UserSpace,
        result,
    }
}

/// Cancel, idle timer and deadline around each step of a mover.
struct Watchdog<'c, C> {
    cancel: Pin<&'c mut C>,
    idle_for: Duration,
    idle: Pin<Box<Sleep>>,
    deadline: Option<Pin<Box<Sleep>>>,
}

impl<'c, C: Future<Output = ()>> Watchdog<'c, C> {
    fn new(options: &RelayOptions, cancel: Pin<&'c mut C>) -> Self {
        Self {
            cancel,
            idle_for: options.idle,
            idle: Box::pin(tokio::time::sleep(options.idle)),
            deadline: options
                .deadline
                .map(|d| Box::pin(tokio::time::sleep_until(d))),
        }
    }

    /// A byte moved: the idle timer starts again.
    fn moved(&mut self) {
        self.idle.as_mut().reset(Instant::now() + self.idle_for);
    }

    /// `step`, unless the relay is cancelled or a watchdog expires first.
    async fn guard<T>(&mut self, step: impl Future<Output = T>) -> Result<T, RelayError> {
        let slot = &mut self.deadline;
        let deadline = async move {
            match slot {
                Some(deadline) => deadline.as_mut().await,
                None => std::future::pending().await,
            }
        };
        let idle = self.idle_for;
        tokio::select! {
            biased;
            () = &mut self.cancel => Err(RelayError::Cancelled),
            () = deadline => Err(RelayError::Deadline),
            () = &mut self.idle => Err(RelayError::Idle { idle }),
            out = step => Ok(out),
        }
    }
}
