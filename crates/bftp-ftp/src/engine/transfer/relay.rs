//! A copy through bftpd (RULES.md §14): when the servers will not talk to each other,
//! bftpd opens a passive data connection to each (PASV/EPSV on both, each address checked
//! as in a third-party copy: the server's control address with the port it announced, never
//! a port below 1024), sends STOR/APPE/STOU to the destination and RETR to the source, and
//! moves the bytes itself ([`crate::relay`]): the kernel on two plain legs, a bounded buffer
//! on TLS legs or when the stream's hash is asked for.
//!
//! Round trips: in clear, the destination's passive command goes out with the source's SIZE
//! (`destination_passive_ahead`), and the two data commands go out in one round trip (RETR
//! written before STOR's reply is read). A resumed copy sends each `REST` right before its
//! command, and a STOU waits for its name to be recorded before the source is asked: those
//! are sent one after the other, the destination first. Whatever the order, no byte reaches
//! the destination before both servers accepted their commands, and a side that refuses
//! leaves the other's data connection reset (never closed cleanly: a clean close is an end of
//! file, and the server would take an empty or cut stream for the whole file), its replies
//! read so that the pair stays in step.
//!
//! The copy then ends as a third-party one does: both final replies within the watchdog
//! ([`Attempt::completion`]), then the size check; a relay also has its own count of the
//! bytes it moved, which must equal the source's size in image type.

use bftp_core::route::{RelayReason, Route};
use tokio::net::TcpStream;

use super::*;
use crate::engine::outcome::RelayStats;
use crate::relay::{self, RelayError, RelayOptions};

impl Attempt<'_> {
    /// One phase of the state machine (see `Phase::Relay`).
    pub(super) async fn relay(&mut self, reason: RelayReason) -> Phase {
        if let Err(error) = self.reopen_closed("before the relay").await {
            return Phase::Done(Err(error));
        }
        let legs = match self.pair.protect_relay_legs().await {
            Ok(legs) => legs,
            Err(error) => return Phase::Done(Err(error)),
        };
        let job_type = self.pair.params.transfer_type;
        for side in [Side::Source, Side::Destination] {
            if let Err((result, disposition)) = self.pair.ensure_type(side, job_type).await {
                return self.fail(side, "TYPE", result, Some(disposition));
            }
        }
        // The daemon's cap on relays at once: the wait is not the copy's, so its watchdog
        // starts again once admitted.
        let gate = self.pair.relay_gate.clone();
        let _permit = match &gate {
            Some(gate) => Some(gate.admit().await),
            None => None,
        };
        let now = Instant::now();
        self.pair.deadline = Some(now + self.pair.limits.transfer_timeout);
        self.pair
            .note(Side::Source, &format!("relay through bftpd: {reason}"));

        let mut addresses = [None, None];
        for side in [Side::Source, Side::Destination] {
            match self.relay_address(side).await {
                Ok(addr) => addresses[index(side)] = Some(addr),
                Err(end) => return end,
            }
        }
        let [Some(src_addr), Some(dst_addr)] = addresses else {
            unreachable!("both addresses were asked")
        };
        let connect = self.pair.limits.connect_timeout;
        let (src_tcp, dst_tcp) = tokio::join!(
            connect_data(src_addr, connect),
            connect_data(dst_addr, connect)
        );
        let (src_tcp, dst_tcp) = match (src_tcp, dst_tcp) {
            (Ok(s), Ok(d)) => (s, d),
            (Err(detail), _) => return self.relay_failed(Side::Source, src_addr, detail),
            (_, Err(detail)) => return self.relay_failed(Side::Destination, dst_addr, detail),
        };
        // From here on a connection dropped before the relay's end is reset, not closed.
        relay::arm_reset(&src_tcp);
        relay::arm_reset(&dst_tcp);

        if let Err(end) = self.rest(Side::Destination).await {
            return end;
        }
        // Both data commands in one round trip, RETR written before STOR's reply is read,
        // unless the copy resumes (each REST goes right before its command) or is a STOU
        // (its name is recorded before the source is asked for a byte).
        let src_line = self.command_line(Side::Source);
        let together = self.resume.unwrap_or(0) == 0
            && self.request.dest_command != DestCommand::Unique
            && self.send_ahead(Side::Source, &src_line).await;
        let dst_line = self.command_line(Side::Destination);
        let result = self.pair.exchange(Side::Destination, &dst_line).await;
        let kind = CommandKind::from_verb(&super::super::verb(&dst_line));
        let disposition = self.pair.classify(Side::Destination, kind, &result);
        let dst_final = match (disposition, result) {
            (Disposition::Preliminary, Ok(reply)) => {
                self.accepted(Side::Destination, &reply);
                None
            }
            (Disposition::Done, Ok(reply)) => {
                self.accepted(Side::Destination, &reply);
                Some(reply)
            }
            (disposition, result) => {
                drop((dst_tcp, src_tcp));
                if together {
                    // The source was asked already: its reply, and its final one after the
                    // reset, keep the connection in step.
                    self.drain_final(Side::Source).await;
                    if self.pair.last[0].as_ref().is_some_and(|r| {
                        r.code
                            .is_some_and(|c| c.class() == bftp_core::reply::ReplyClass::Preliminary)
                    }) {
                        self.drain_final(Side::Source).await;
                    }
                }
                self.refused(Side::Destination, &result);
                self.clean_up().await;
                return self.fail(Side::Destination, &dst_line, result, Some(disposition));
            }
        };
        self.announce().await;

        if let Err(end) = self.rest(Side::Source).await {
            drop((dst_tcp, src_tcp));
            if dst_final.is_none() {
                self.drain_final(Side::Destination).await;
            }
            self.clean_up().await;
            return end;
        }
        let result = if together {
            let deadline = self.pair.reply_deadline();
            self.pair.read_reply(Side::Source, "RETR", deadline).await
        } else {
            self.pair.exchange(Side::Source, &src_line).await
        };
        let disposition = self.pair.classify(Side::Source, CommandKind::Retr, &result);
        let src_final = match (disposition, result) {
            (Disposition::Preliminary, Ok(_)) => None,
            (Disposition::Done, Ok(reply)) => Some(reply),
            (disposition, result) => {
                // The destination waits for bytes on a connection that is reset now: its
                // final reply says so, then its partial file goes.
                drop(dst_tcp);
                drop(src_tcp);
                if dst_final.is_none() {
                    self.drain_final(Side::Destination).await;
                }
                self.clean_up().await;
                return self.fail(Side::Source, &src_line, result, Some(disposition));
            }
        };
        self.report.route = Some(Route::Relay(reason));
        self.pair.progress.send_replace(Progress::Transferring {
            path: self.request.source_path.clone(),
            since: SystemTime::now(),
        });

        // Under PROT P each server starts its TLS handshake after its 1yz.
        let wait = connect.max(self.pair.limits.reply_timeout);
        let streams = {
            let (src, dst) = (&self.pair.src, &self.pair.dst);
            tokio::join!(
                src.data_stream(src_tcp, wait),
                dst.data_stream(dst_tcp, wait)
            )
        };
        let (source, destination) = match streams {
            (Ok(s), Ok(d)) => (s, d),
            (s, d) => {
                let (side, detail) = match (s, d) {
                    (Err(detail), _) => (Side::Source, detail),
                    (_, Err(detail)) => (Side::Destination, detail),
                    _ => unreachable!("one of the two failed"),
                };
                self.pair.note(side, &format!("relay: {detail}"));
                return self
                    .relay_finals(
                        src_final,
                        dst_final,
                        None,
                        Some(format!("the {side} {detail}")),
                    )
                    .await;
            }
        };
        let mut options = RelayOptions::for_copy(&self.pair.limits, now);
        options.deadline = self.pair.deadline;
        // A resumed copy's stream is only the file's tail: its hash would prove nothing.
        options.sha256 = self.pair.stream_hash && self.report.resumed_from.is_none();
        options.gate = gate;
        let relayed = relay::relay(source, destination, &options, std::future::pending()).await;
        self.report.relayed = Some(RelayStats {
            bytes: relayed.bytes,
            sha256: relayed.sha256_hex(),
            mover: relayed.mover,
            tls: legs,
        });
        let error = match &relayed.result {
            Ok(()) => {
                self.pair.note(
                    Side::Destination,
                    &format!(
                        "relayed {} bytes ({} mover)",
                        relayed.bytes,
                        relayed.mover.as_str()
                    ),
                );
                None
            }
            Err(error) => {
                let side = match error {
                    RelayError::Io { side, .. } => *side,
                    _ => Side::Destination,
                };
                self.pair.note(
                    side,
                    &format!("relay stopped after {} bytes: {error}", relayed.bytes),
                );
                Some(error.to_string())
            }
        };
        self.relay_finals(src_final, dst_final, Some(relayed.bytes), error)
            .await
    }

    /// Both final replies after the bytes moved (or failed to); then the byte count against
    /// the source's size.
    async fn relay_finals(
        &mut self,
        src_final: Option<Reply>,
        dst_final: Option<Reply>,
        bytes: Option<u64>,
        error: Option<String>,
    ) -> Phase {
        // The destination's command went out first: it is the "active" side of the phase's
        // bookkeeping (whose final may be in already), the source the passive one.
        let phase = self.completion(Side::Source, dst_final, src_final).await;
        match (phase, error) {
            (Phase::Check, Some(error)) => {
                // Both servers were content, but bftpd did not move the whole stream.
                self.clean_up().await;
                self.transient(
                    TransientKind::DataConnection,
                    Failure::Relay {
                        error,
                        bytes: bytes.unwrap_or(0),
                    },
                )
            }
            (Phase::Check, None) => {
                // A resumed copy moves only what follows its offset.
                let known = self
                    .source_size_asked
                    .or(self.request.source_size)
                    .map(|size| size.saturating_sub(self.resume.unwrap_or(0)));
                match (bytes, known) {
                    (Some(bytes), Some(size))
                        if self.pair.params.transfer_type == TransferType::Image
                            && bytes != size =>
                    {
                        self.clean_up().await;
                        self.transient(
                            TransientKind::DataConnection,
                            Failure::SizeMismatch {
                                source_size: size,
                                destination: bytes,
                                expected: size,
                            },
                        )
                    }
                    _ => Phase::Check,
                }
            }
            (phase, _) => phase,
        }
    }

    /// A relay of a replace copy in clear: the destination's passive command goes out with
    /// the source's SIZE (one round trip for both servers' first steps). Only where nothing
    /// else goes to the destination before the relay reads its reply: no TLS to settle (PROT
    /// and SSCN are sent without reading owed replies first), its TYPE already the job's, no
    /// REST to send first.
    pub(super) async fn destination_passive_ahead(&mut self) {
        let job_type = self.pair.params.transfer_type;
        let ready = matches!(self.pair.plan, Plan::Relay(_))
            && self.request.dest_command == DestCommand::Replace
            && self.resume.unwrap_or(0) == 0
            && self.pair.plain_data()
            && self.pair.types[index(Side::Destination)] == Some(job_type)
            && self.pair.owed[index(Side::Destination)] == 0;
        if !ready {
            return;
        }
        let verb = self.pair.passive_commands(Side::Destination)[0];
        if self
            .pair
            .session(Side::Destination)
            .send(verb)
            .await
            .is_ok()
        {
            self.pair.owed[index(Side::Destination)] += 1;
            self.dst_passive_sent = Some(verb);
        }
    }

    /// Writes `line` to `side` without reading its reply (read later with `read_reply`):
    /// whether it went out.
    async fn send_ahead(&mut self, side: Side, line: &str) -> bool {
        self.pair.drain_owed(side).await;
        match self.pair.session(side).send(line).await {
            Ok(()) => true,
            Err(error) => {
                let result = Err(error);
                self.pair.remember(side, &super::super::verb(line), &result);
                false
            }
        }
    }

    /// The data address of `side` for the relay, checked as for a third-party copy (RFC
    /// 2577); `Err`: the copy's end.
    async fn relay_address(&mut self, side: Side) -> Result<SocketAddr, Phase> {
        let peer_ip = self.pair.session(side).peer().ip().to_canonical();
        let mut refused = Vec::new();
        for &command in self.pair.passive_commands(side) {
            let sent = match side {
                Side::Source => &mut self.passive_sent,
                Side::Destination => &mut self.dst_passive_sent,
            };
            let result = if *sent == Some(command) {
                *sent = None;
                self.pair.read_owed_step(side, command).await
            } else {
                self.pair.exchange(side, command).await
            };
            let kind = CommandKind::from_verb(command);
            match self.pair.classify(side, kind, &result) {
                Disposition::Done => {
                    let Ok(reply) = result else {
                        unreachable!("Done is only classified from a reply")
                    };
                    return match self.announced(side, command, &reply, peer_ip) {
                        Ok(Phase::Port { data, .. }) => Ok(data),
                        Ok(end) => Err(end),
                        Err(refusal) => Err(no_passive(format!(
                            "a relay needs a usable passive mode on both servers: {refusal}"
                        ))),
                    };
                }
                Disposition::NotSupported => refused.push(describe(&result)),
                disposition => return Err(self.fail(side, command, result, Some(disposition))),
            }
        }
        Err(no_passive(format!(
            "a relay needs passive mode on both servers, and the {side} server {} offers none \
             ({})",
            self.pair.host(side),
            refused.join("; ")
        )))
    }

    /// The data connection to `side` could not be opened: transient (the commands were not
    /// sent, nothing was touched).
    fn relay_failed(&mut self, side: Side, addr: SocketAddr, detail: String) -> Phase {
        self.pair.note(
            side,
            &format!("relay: no data connection to {addr}: {detail}"),
        );
        self.transient(
            TransientKind::DataConnection,
            Failure::Relay {
                error: format!("no data connection to the {side} at {addr}: {detail}"),
                bytes: 0,
            },
        )
    }
}

/// A job-level failure: neither role order of a third-party copy nor a relay can work.
fn no_passive(detail: String) -> Phase {
    Phase::Done(Err(PairError {
        failure: JobFailure::NoPassiveMode { detail },
        disposition: Disposition::Permanent(PermanentKind::CommandRejected),
        transcript: Default::default(),
    }))
}

/// A plain TCP connection to a server's data port, within `timeout`.
async fn connect_data(addr: SocketAddr, timeout: std::time::Duration) -> Result<TcpStream, String> {
    match tokio::time::timeout(timeout, TcpStream::connect(addr)).await {
        Ok(Ok(stream)) => {
            let _ = stream.set_nodelay(true);
            Ok(stream)
        }
        Ok(Err(error)) => Err(error.to_string()),
        Err(_) => Err(format!("no connection within {timeout:?}")),
    }
}
