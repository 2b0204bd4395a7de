//! The kernel mover: `splice(2)` from the source socket into a pipe and from the pipe into
//! the destination socket, driven by tokio's readiness of the two sockets. The bytes never
//! enter user space; the pipe is the only buffer, and no more than its capacity is put in it.

use std::future::Future;
use std::io;
use std::os::fd::OwnedFd;

use nix::errno::Errno;
use nix::fcntl::{fcntl, splice, FcntlArg, OFlag, SpliceFFlags};
use nix::unistd::pipe2;
use tokio::io::{AsyncWriteExt, Interest};
use tokio::net::TcpStream;

use super::{Mover, RelayError, RelayGate, Relayed, Watchdog};
use crate::transcript::Side;

/// Capacity of a pipe whose size could not be read (Linux's default).
const DEFAULT_PIPE_CAPACITY: usize = 64 * 1024;

/// A non-blocking pipe and the most bytes the relay puts in it.
pub(super) struct Pipe {
    read: OwnedFd,
    write: OwnedFd,
    capacity: usize,
}

impl Pipe {
    /// A pipe sized for `wanted` bytes: the kernel rounds the size up to a power of two
    /// pages and refuses more than `/proc/sys/fs/pipe-max-size` (then the default stays),
    /// but the relay never holds more than `wanted` in it.
    pub(super) fn new(wanted: usize) -> io::Result<Self> {
        let (read, write) = pipe2(OFlag::O_NONBLOCK | OFlag::O_CLOEXEC)?;
        let wanted = wanted.max(1);
        let asked = i32::try_from(wanted).unwrap_or(i32::MAX);
        if let Err(error) = fcntl(&write, FcntlArg::F_SETPIPE_SZ(asked)) {
            tracing::debug!(%error, wanted, "F_SETPIPE_SZ for a relay's pipe");
        }
        let size = fcntl(&write, FcntlArg::F_GETPIPE_SZ)
            .ok()
            .and_then(|n| usize::try_from(n).ok())
            .unwrap_or(DEFAULT_PIPE_CAPACITY);
        Ok(Self {
            read,
            write,
            capacity: wanted.min(size),
        })
    }
}

const FLAGS: SpliceFFlags = SpliceFFlags::SPLICE_F_MOVE.union(SpliceFFlags::SPLICE_F_NONBLOCK);

/// Move the bytes until the source's end of file, then shut the destination's write side.
pub(super) async fn relay<C: Future<Output = ()>>(
    source: &TcpStream,
    destination: &mut TcpStream,
    pipe: &Pipe,
    gate: Option<&RelayGate>,
    watchdog: &mut Watchdog<'_, C>,
) -> Relayed {
    // Under a rate cap, at most one step's worth goes into the pipe at a time.
    let capacity = gate.map_or(pipe.capacity, |g| g.step(pipe.capacity));
    let mut bytes = 0u64;
    let result = async {
        let dst: &TcpStream = destination;
        // Bytes in the pipe: spliced from the source, not yet into the destination.
        let mut in_pipe = 0usize;
        let mut eof = false;
        // The pipe refused more before `capacity` (a socket's segments fill its slots partly):
        // no reading until some of it went out.
        let mut pipe_full = false;
        loop {
            if eof && in_pipe == 0 {
                break;
            }
            // At least one holds: bytes in the pipe, or an empty pipe before the end of file.
            let can_write = in_pipe > 0;
            let can_read = !eof && !pipe_full && in_pipe < capacity;
            let (side, ready) = watchdog
                .guard(async {
                    tokio::select! {
                        biased;
                        r = dst.writable(), if can_write => (Side::Destination, r),
                        r = source.readable(), if can_read => (Side::Source, r),
                    }
                })
                .await?;
            ready.map_err(|e| RelayError::io(side, &e))?;
            match side {
                Side::Destination => {
                    let out = dst.try_io(Interest::WRITABLE, || {
                        splice(&pipe.read, None, dst, None, in_pipe, FLAGS).map_err(io::Error::from)
                    });
                    match out {
                        Ok(n) => {
                            in_pipe -= n;
                            bytes += n as u64;
                            pipe_full = false;
                            watchdog.moved();
                        }
                        Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                        Err(e) => return Err(RelayError::io(Side::Destination, &e)),
                    }
                }
                Side::Source => {
                    let room = capacity - in_pipe;
                    let held = in_pipe;
                    let out = source.try_io(Interest::READABLE, || {
                        match splice(source, None, &pipe.write, None, room, FLAGS) {
                            Ok(n) => Ok(Some(n)),
                            // With bytes in it, the pipe may be what is full: the socket's
                            // readiness is kept (an empty pipe always has room, so there
                            // EAGAIN is the socket's and clears it).
                            Err(Errno::EAGAIN) if held > 0 => Ok(None),
                            Err(e) => Err(io::Error::from(e)),
                        }
                    });
                    match out {
                        Ok(Some(0)) => eof = true,
                        Ok(Some(n)) => {
                            in_pipe += n;
                            watchdog.moved();
                            if let Some(gate) = gate {
                                watchdog.guard(gate.take(n)).await?;
                            }
                        }
                        Ok(None) => pipe_full = true,
                        Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                        Err(e) => return Err(RelayError::io(Side::Source, &e)),
                    }
                }
            }
        }
        watchdog
            .guard(destination.shutdown())
            .await?
            .map_err(|e| RelayError::io(Side::Destination, &e))
    }
    .await;
    Relayed {
        bytes,
        sha256: None,
        mover: Mover::Kernel,
        result,
    }
}
