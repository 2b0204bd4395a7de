//! A packet capture on the loopback interface (an `AF_PACKET` socket: the tests run as root),
//! to show what crossed a data connection in clear. It keeps no packets, only how many
//! frames held a marker the test chose: a file made of the marker repeated puts it into
//! every segment of a data connection that carries it in clear.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

/// Counting, on `lo`, the frames that contain a marker, until stopped.
pub struct Capture {
    stop: Arc<AtomicBool>,
    seen: Arc<AtomicU64>,
    bytes: Arc<AtomicU64>,
    thread: Option<JoinHandle<()>>,
}

impl Capture {
    /// Starts counting the frames on `lo` that contain `marker`.
    pub fn start(marker: &[u8]) -> io::Result<Capture> {
        let protocol = (libc::ETH_P_ALL as u16).to_be();
        // SAFETY: plain socket(2); the descriptor is owned at once.
        let fd = unsafe { libc::socket(libc::AF_PACKET, libc::SOCK_RAW, i32::from(protocol)) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `fd` is a new, valid descriptor that nothing else owns.
        let socket = unsafe { OwnedFd::from_raw_fd(fd) };
        // SAFETY: a NUL-terminated name.
        let index = unsafe { libc::if_nametoindex(c"lo".as_ptr()) };
        if index == 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: sockaddr_ll is plain data; zero is a valid start.
        let mut addr: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
        addr.sll_family = libc::AF_PACKET as u16;
        addr.sll_protocol = protocol;
        addr.sll_ifindex = index as i32;
        // SAFETY: `addr` is a valid sockaddr_ll of the size given.
        let bound = unsafe {
            libc::bind(
                socket.as_raw_fd(),
                std::ptr::addr_of!(addr).cast(),
                std::mem::size_of::<libc::sockaddr_ll>() as u32,
            )
        };
        if bound != 0 {
            return Err(io::Error::last_os_error());
        }
        let timeout = libc::timeval {
            tv_sec: 0,
            tv_usec: 100_000,
        };
        // SO_RCVBUFFORCE (root) passes net.core.rmem_max, which would cap SO_RCVBUF at a few
        // hundred KiB: a copy on loopback outruns the reader, and dropped frames would hide
        // what crossed in clear. Loopback's outgoing copies are skipped: each frame once.
        let big: libc::c_int = 64 << 20;
        let one: libc::c_int = 1;
        // SAFETY: valid options of the sizes given.
        unsafe {
            libc::setsockopt(
                socket.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_RCVTIMEO,
                std::ptr::addr_of!(timeout).cast(),
                std::mem::size_of::<libc::timeval>() as u32,
            );
            libc::setsockopt(
                socket.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_RCVBUFFORCE,
                std::ptr::addr_of!(big).cast(),
                std::mem::size_of::<libc::c_int>() as u32,
            );
            libc::setsockopt(
                socket.as_raw_fd(),
                libc::SOL_PACKET,
                libc::PACKET_IGNORE_OUTGOING,
                std::ptr::addr_of!(one).cast(),
                std::mem::size_of::<libc::c_int>() as u32,
            );
        }
        let stop = Arc::new(AtomicBool::new(false));
        let seen = Arc::new(AtomicU64::new(0));
        let bytes = Arc::new(AtomicU64::new(0));
        let marker = marker.to_vec();
        let thread = {
            let (stop, seen, bytes) = (stop.clone(), seen.clone(), bytes.clone());
            std::thread::spawn(move || {
                let mut buf = vec![0u8; 1 << 17];
                // Until stopped and the socket holds nothing more: frames still queued when
                // the test stops the capture were sent while it ran, and count. Other tests
                // keep loopback busy, so the drain after the stop is bounded in time.
                let mut drain_until = None;
                loop {
                    if stop.load(Ordering::Relaxed) {
                        let until = *drain_until.get_or_insert_with(|| {
                            std::time::Instant::now() + std::time::Duration::from_secs(2)
                        });
                        if std::time::Instant::now() > until {
                            break;
                        }
                    }
                    // SAFETY: `buf` is valid for its length. MSG_TRUNC makes the call
                    // return the frame's whole length even when it is longer than `buf`.
                    let n = unsafe {
                        libc::recv(
                            socket.as_raw_fd(),
                            buf.as_mut_ptr().cast(),
                            buf.len(),
                            libc::MSG_TRUNC,
                        )
                    };
                    if n <= 0 {
                        if stop.load(Ordering::Relaxed) {
                            break;
                        }
                        continue;
                    }
                    bytes.fetch_add(n as u64, Ordering::Relaxed);
                    let frame = &buf[..(n as usize).min(buf.len())];
                    if frame.windows(marker.len()).any(|w| w == marker.as_slice()) {
                        seen.fetch_add(1, Ordering::Relaxed);
                    }
                }
            })
        };
        Ok(Capture {
            stop,
            seen,
            bytes,
            thread: Some(thread),
        })
    }

    /// Stops and returns (frames that held the marker, bytes of all the frames seen).
    /// Loopback frames can be up to 64 KiB long (segmentation offload), so how many frames
    /// a copy takes varies with the machine; the bytes they carried do not.
    pub fn finish(mut self) -> (u64, u64) {
        self.stop_thread();
        (
            self.seen.load(Ordering::Relaxed),
            self.bytes.load(Ordering::Relaxed),
        )
    }

    fn stop_thread(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

impl Drop for Capture {
    fn drop(&mut self) {
        self.stop_thread();
    }
}
