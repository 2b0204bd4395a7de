//! The kernel's TCP sockets by netlink `sock_diag` (`NETLINK_SOCK_DIAG`, `inet_diag_req_v2`),
//! filtered by state in the kernel. /proc/net/tcp lists every socket, TIME_WAIT ones too,
//! and is slow to read when there are many: after a run of thousands of files, tens of
//! thousands of TIME_WAIT sockets made each reading take seconds (the wait for a killed
//! server's listening socket to close read it again and again: 18-19 s a server).

use std::net::{Ipv4Addr, SocketAddrV4};

/// `SOCK_DIAG_BY_FAMILY` (linux/sock_diag.h).
const SOCK_DIAG_BY_FAMILY: u16 = 20;
/// TCP states (include/net/tcp_states.h).
pub const TCP_LISTEN: u32 = 10;
const TCP_TIME_WAIT: u32 = 6;
const TCP_NEW_SYN_RECV: u32 = 12;

/// One socket: its inode, local address and TCP state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TcpSocket {
    pub inode: u64,
    pub local: SocketAddrV4,
    pub state: u8,
}

/// The states of every socket that has an inode: all but TIME_WAIT and the request sockets
/// of half-open connections (neither is a file: /proc/net/tcp shows them with inode 0).
pub fn states_with_inodes() -> u32 {
    !((1 << TCP_TIME_WAIT) | (1 << TCP_NEW_SYN_RECV))
}

/// The IPv4 TCP sockets in `states` (a bit mask, `1 << state`); `None` if netlink refused.
pub fn tcp_sockets(states: u32) -> Option<Vec<TcpSocket>> {
    use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
    // SAFETY: socket(2) takes no pointers.
    let fd = unsafe {
        libc::socket(
            libc::AF_NETLINK,
            libc::SOCK_DGRAM | libc::SOCK_CLOEXEC,
            libc::NETLINK_SOCK_DIAG,
        )
    };
    if fd < 0 {
        return None;
    }
    // SAFETY: a new fd that nothing else owns.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    // nlmsghdr (16 bytes) + inet_diag_req_v2 (56 bytes): family, protocol, ext, pad,
    // states, and an all-zero inet_diag_sockid (no address filter).
    let mut req = [0u8; 72];
    req[0..4].copy_from_slice(&72u32.to_ne_bytes());
    req[4..6].copy_from_slice(&SOCK_DIAG_BY_FAMILY.to_ne_bytes());
    let flags = (libc::NLM_F_REQUEST | libc::NLM_F_DUMP) as u16;
    req[6..8].copy_from_slice(&flags.to_ne_bytes());
    req[8..12].copy_from_slice(&1u32.to_ne_bytes());
    req[16] = libc::AF_INET as u8;
    req[17] = libc::IPPROTO_TCP as u8;
    req[20..24].copy_from_slice(&states.to_ne_bytes());
    // SAFETY: sockaddr_nl is plain data; all zero but the family is the kernel's address.
    let mut kernel: libc::sockaddr_nl = unsafe { std::mem::zeroed() };
    kernel.nl_family = libc::AF_NETLINK as libc::sa_family_t;
    // SAFETY: `req` and `kernel` outlive the call, with the lengths given.
    let sent = unsafe {
        libc::sendto(
            fd.as_raw_fd(),
            req.as_ptr().cast(),
            req.len(),
            0,
            (&kernel as *const libc::sockaddr_nl).cast(),
            std::mem::size_of::<libc::sockaddr_nl>() as libc::socklen_t,
        )
    };
    if sent != req.len() as isize {
        return None;
    }
    let mut out = Vec::new();
    let mut buf = vec![0u8; 1 << 16];
    loop {
        // SAFETY: `buf` outlives the call, with its length.
        let n = unsafe { libc::recv(fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len(), 0) };
        if n < 0 {
            if std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            return None;
        }
        let mut msgs = &buf[..n as usize];
        while msgs.len() >= 16 {
            let len = u32::from_ne_bytes(msgs[0..4].try_into().ok()?) as usize;
            let kind = u16::from_ne_bytes(msgs[4..6].try_into().ok()?);
            if len < 16 || len > msgs.len() {
                return None;
            }
            match kind {
                k if k == libc::NLMSG_DONE as u16 => return Some(out),
                k if k == libc::NLMSG_ERROR as u16 => return None,
                SOCK_DIAG_BY_FAMILY => out.push(parse(&msgs[16..len])?),
                _ => {}
            }
            msgs = &msgs[(len + 3) & !3..];
        }
    }
}

/// One `inet_diag_msg`: family, state, timer, retrans, then the sockid (source port at 4,
/// big-endian; source address at 8), then expires, rqueue, wqueue, uid and the inode at 68.
fn parse(m: &[u8]) -> Option<TcpSocket> {
    let port = u16::from_be_bytes(m.get(4..6)?.try_into().ok()?);
    let ip: [u8; 4] = m.get(8..12)?.try_into().ok()?;
    let inode = u32::from_ne_bytes(m.get(68..72)?.try_into().ok()?);
    Some(TcpSocket {
        inode: u64::from(inode),
        local: SocketAddrV4::new(Ipv4Addr::from(ip), port),
        state: *m.get(1)?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A listener of ours is found, by its address and as LISTEN, and is gone once closed.
    #[test]
    fn a_listener_is_listed_until_closed() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let std::net::SocketAddr::V4(addr) = l.local_addr().unwrap() else {
            unreachable!()
        };
        let find = |states| {
            tcp_sockets(states)
                .unwrap()
                .into_iter()
                .find(|s| s.local == addr)
        };
        let s = find(1 << TCP_LISTEN).expect("our listener");
        assert_eq!(u32::from(s.state), TCP_LISTEN);
        assert!(s.inode != 0);
        assert_eq!(find(states_with_inodes()), Some(s));
        // A connection to it: not a listener, also listed, with an inode of its own.
        let c = std::net::TcpStream::connect(addr).unwrap();
        let mine = c.local_addr().unwrap();
        assert!(tcp_sockets(states_with_inodes())
            .unwrap()
            .iter()
            .any(|s| std::net::SocketAddr::V4(s.local) == mine && s.inode != 0));
        drop(l);
        assert_eq!(find(1 << TCP_LISTEN), None);
        assert!(tcp_sockets(states_with_inodes())
            .unwrap()
            .iter()
            .all(|x| x.inode != s.inode));
    }
}
