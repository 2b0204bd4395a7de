//! systemd's readiness protocol seen from the other side: a socket bftpd's `sd_notify`
//! messages arrive on.

use std::os::unix::net::UnixDatagram;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// A datagram socket standing in for systemd's NOTIFY_SOCKET.
pub struct Notify {
    sock: UnixDatagram,
    pub path: PathBuf,
}

impl Notify {
    pub fn bind(dir: &Path) -> Notify {
        let path = dir.join("notify.sock");
        let sock = UnixDatagram::bind(&path).unwrap();
        Notify { sock, path }
    }

    /// The next message (newline-separated assignments, the last newline dropped), or None
    /// after `limit`.
    pub fn recv(&self, limit: Duration) -> Option<String> {
        self.sock.set_read_timeout(Some(limit)).unwrap();
        let mut buf = [0u8; 4096];
        match self.sock.recv(&mut buf) {
            Ok(n) => Some(
                String::from_utf8_lossy(&buf[..n])
                    .trim_end_matches('\n')
                    .to_owned(),
            ),
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                None
            }
            Err(e) => panic!("notify socket: {e}"),
        }
    }
}
