//! Why a role order could not move bytes: a server refused the foreign address.

use super::*;

/// Why one role order could not move bytes because a server refused a foreign
/// address: the evidence for [`JobFailure::FxpRefused`].
#[derive(Debug, Clone)]
pub(super) enum Refusal {
    /// The active side refused PORT/EPRT to the passive server's address.
    Port {
        side: Side,
        host: String,
        line: String,
        reply: String,
    },
    /// The passive side refused the data connection from the active server.
    DataConnection {
        side: Side,
        host: String,
        command: String,
        reply: String,
    },
    /// The passive side said nothing after the active side connected (Pure-FTPd
    /// drops a foreign data connection and keeps waiting).
    Silence {
        side: Side,
        host: String,
        command: String,
    },
    /// Neither PASV nor EPSV on this side.
    NoPassive {
        side: Side,
        host: String,
        replies: String,
    },
    /// This side announced a data port below 1024, which PORT must not name (RFC 2577).
    PrivilegedPort {
        side: Side,
        host: String,
        command: String,
        port: u16,
    },
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Refusal::Port {
                side,
                host,
                line,
                reply,
            } => write!(f, "the {side} server {host} refused {line}: {reply}"),
            Refusal::DataConnection {
                side,
                host,
                command,
                reply,
            } => write!(
                f,
                "the {side} server {host} refused the data connection from the other server: \
                 {command} answered {reply}"
            ),
            Refusal::Silence {
                side,
                host,
                command,
            } => write!(
                f,
                "the {side} server {host} did not answer {command} after the other server \
                 connected (Pure-FTPd waits silently when it refuses a foreign data connection)"
            ),
            Refusal::NoPassive {
                side,
                host,
                replies,
            } => write!(
                f,
                "the {side} server {host} offers no passive mode ({replies})"
            ),
            Refusal::PrivilegedPort {
                side,
                host,
                command,
                port,
            } => {
                let failure = Failure::PrivilegedPort {
                    side: *side,
                    host: host.clone(),
                    command: command.clone(),
                    port: *port,
                };
                write!(f, "{failure}")
            }
        }
    }
}

impl Refusal {
    pub(super) fn side(&self) -> Side {
        match self {
            Refusal::Port { side, .. }
            | Refusal::DataConnection { side, .. }
            | Refusal::Silence { side, .. }
            | Refusal::NoPassive { side, .. }
            | Refusal::PrivilegedPort { side, .. } => *side,
        }
    }
}

pub(super) fn describe(result: &Result<Reply, SessionError>) -> String {
    match result {
        Ok(reply) => reply.to_string(),
        Err(error) => error.to_string(),
    }
}
