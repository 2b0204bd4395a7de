//! The role order of a copy: who gets PASV/EPSV and who PORT/EPRT, the checks on the passive
//! side's address (RFC 2577), and the first data commands.

use super::*;

impl Attempt<'_> {
    pub(super) async fn prepare(&mut self) -> Phase {
        for (path, what) in [
            (&self.request.source_path, "source path"),
            (&self.request.dest_path, "destination path"),
        ] {
            if let Err(error) = check_argument(path) {
                let failure = Failure::BadPath {
                    path: path.clone(),
                    error,
                };
                self.pair.note(Side::Source, &format!("{what}: {failure}"));
                return self.permanent(PermanentKind::NameNotAllowed, failure);
            }
        }

        let source_path = self.request.source_path.clone();
        // Asked by the caller just now: not asked again, and then not evidence (the source
        // is asked again after the transfer). Asked here, moments before the RETR,
        // the answer is the source's side of the evidence.
        let known = self.request.source_size;
        let ahead_size = self.ahead.as_ref().map(|a| a.source_size);
        match match (known, ahead_size) {
            (Some(size), _) => SizeAnswer::Size(size),
            // Asked behind the previous copy's RETR, before this copy's STOR.
            (None, Some(size)) => SizeAnswer::Size(size),
            (None, None) => self.size_with_passive(&source_path).await,
        } {
            SizeAnswer::Size(size) => {
                if known.is_none() {
                    self.source_size_asked = Some(size);
                }
            }
            SizeAnswer::NoFile(result) => {
                return self.fail(Side::Source, &format!("SIZE {source_path}"), result, None)
            }
            SizeAnswer::Unavailable(reason) => self.fallback(Fallback::SizeUnavailable {
                side: Side::Source,
                reason,
            }),
            SizeAnswer::Failed(result, disposition) => {
                return self.fail(Side::Source, "SIZE", result, Some(disposition))
            }
        }

        if self.request.dest_command == DestCommand::Append {
            let dest_path = self.request.dest_path.clone();
            match self.pair.size_answer(Side::Destination, &dest_path).await {
                SizeAnswer::Size(size) => self.report.destination_size_before = Some(size),
                SizeAnswer::NoFile(_) => {
                    self.pair.note(
                        Side::Destination,
                        "no destination file yet: APPE creates it",
                    );
                    self.report.destination_size_before = Some(0);
                }
                SizeAnswer::Unavailable(reason) => self.fallback(Fallback::SizeUnavailable {
                    side: Side::Destination,
                    reason,
                }),
                SizeAnswer::Failed(result, disposition) => {
                    return self.fail(Side::Destination, "SIZE", result, Some(disposition))
                }
            }
        }

        let job_type = self.pair.params.transfer_type;
        if let Some(ahead) = &self.ahead {
            // Only image-type jobs pipeline, and both sides are in it (SIZE needs it): no
            // TYPE goes between the commands sent ahead and their replies.
            if self.pair.types == [Some(job_type), Some(job_type)] {
                let (data, verb) = (ahead.data, ahead.passive_verb);
                self.passive_verb = verb;
                self.orders.retain(|&side| side != Side::Source);
                return Phase::Port {
                    passive: Side::Source,
                    data,
                };
            }
            if let Err(error) = self.pair.settle_ahead("TYPE changed").await {
                return Phase::Done(Err(error));
            }
            self.ahead = None;
        }
        for side in [Side::Source, Side::Destination] {
            if let Err((result, disposition)) = self.pair.ensure_type(side, job_type).await {
                return self.fail(side, "TYPE", result, Some(disposition));
            }
        }

        if self.request.dest_command == DestCommand::Unique && !self.request.dest_path.is_empty() {
            // Remember where to come back to before leaving.
            let _ = self.pair.home(Side::Destination).await;
            let line = format!("CWD {}", self.request.dest_path);
            let result = self.pair.exchange(Side::Destination, &line).await;
            let disposition = self
                .pair
                .classify(Side::Destination, CommandKind::Cwd, &result);
            if disposition != Disposition::Done {
                return self.fail(Side::Destination, &line, result, Some(disposition));
            }
            self.changed_directory = true;
        }

        if let Plan::Relay(reason) = &self.pair.plan {
            return Phase::Relay {
                reason: reason.clone(),
            };
        }
        match self.orders.pop_front() {
            Some(passive) => Phase::Passive { passive },
            None => unreachable!("two role orders to start with"),
        }
    }

    pub(super) async fn passive(&mut self, passive: Side) -> Phase {
        let peer = self.pair.session(passive).peer();
        let peer_ip = peer.ip().to_canonical();
        let mut refused = Vec::new();
        for &command in self.pair.passive_commands(passive) {
            let result = if passive == Side::Source && self.passive_sent == Some(command) {
                self.passive_sent = None;
                self.pair.read_owed_step(passive, command).await
            } else {
                self.pair.exchange(passive, command).await
            };
            let kind = CommandKind::from_verb(command);
            match self.pair.classify(passive, kind, &result) {
                Disposition::Done => {
                    let Ok(reply) = result else {
                        unreachable!("Done is only classified from a reply")
                    };
                    self.passive_verb = if command == "EPSV" { "EPSV" } else { "PASV" };
                    if command == "EPSV" && peer_ip.is_ipv4() {
                        self.fallback(Fallback::ExtendedPassive {
                            side: passive,
                            reason: refused.join("; "),
                        });
                    }
                    return match self.announced(passive, command, &reply, peer_ip) {
                        Ok(phase) => phase,
                        Err(refusal) => self.next_order(refusal).await,
                    };
                }
                Disposition::NotSupported => {
                    let text = match &result {
                        Ok(reply) => format!("{command} answered {reply}"),
                        Err(e) => format!("{command}: {e}"),
                    };
                    refused.push(text);
                }
                disposition => return self.fail(passive, command, result, Some(disposition)),
            }
        }
        let refusal = Refusal::NoPassive {
            side: passive,
            host: self.pair.host(passive).to_owned(),
            replies: refused.join("; "),
        };
        self.next_order(refusal).await
    }

    /// The data address from a 227 or 229 reply, checked (RFC 2577). A privileged port is
    /// a refusal of this role order (`Err`): the other one may still work.
    pub(super) fn announced(
        &mut self,
        passive: Side,
        command: &str,
        reply: &Reply,
        peer_ip: IpAddr,
    ) -> Result<Phase, Refusal> {
        let host = self.pair.host(passive).to_owned();
        let port = if command == "PASV" {
            match reply.parse_numbers(parse_pasv) {
                Ok(addr) => {
                    let announced = IpAddr::V4(*addr.ip());
                    if announced != peer_ip {
                        self.pair.note(
                            passive,
                            &format!(
                                "PASV named {announced}, not the server's control address \
                                 {peer_ip}: host ignored (RFC 2577)"
                            ),
                        );
                        self.fallback(Fallback::ForeignPasvHostIgnored {
                            side: passive,
                            announced,
                            used: peer_ip,
                        });
                    }
                    addr.port()
                }
                Err(error) => {
                    return Ok(self.transient(
                        TransientKind::Protocol,
                        Failure::BadPassiveReply {
                            side: passive,
                            host,
                            command: command.to_owned(),
                            error,
                        },
                    ))
                }
            }
        } else {
            match reply.parse_numbers(parse_epsv) {
                Ok(port) => port,
                Err(error) => {
                    return Ok(self.transient(
                        TransientKind::Protocol,
                        Failure::BadPassiveReply {
                            side: passive,
                            host,
                            command: command.to_owned(),
                            error,
                        },
                    ))
                }
            }
        };
        if is_privileged_port(port) {
            return Err(Refusal::PrivilegedPort {
                side: passive,
                host,
                command: command.to_owned(),
                port,
            });
        }
        Ok(Phase::Port {
            passive,
            data: SocketAddr::new(peer_ip, port),
        })
    }

    pub(super) async fn port(&mut self, passive: Side, data: SocketAddr) -> Phase {
        let active = passive.other();
        let mut first_refusal: Option<(String, String)> = None;
        let port_line = port_argument(data).ok().map(|arg| format!("PORT {arg}"));
        let eprt_line = format!("EPRT {}", eprt_argument(data));
        // Sent ahead by the copy before, with the data command behind it: its reply, then
        // the data command's, are read here and in `active_start`.
        let sent = self.ahead.as_mut().and_then(|a| a.started.take());
        let lines: Vec<&String> = match &sent {
            Some(line) if line.starts_with("EPRT") => vec![line],
            Some(line) => vec![line, &eprt_line],
            None => port_line
                .iter()
                .chain(std::iter::once(&eprt_line))
                .collect(),
        };
        for line in lines {
            let ahead = sent.as_ref() == Some(line);
            let result = if ahead {
                let deadline = self.pair.reply_deadline();
                self.pair
                    .read_reply(active, &super::super::verb(line), deadline)
                    .await
            } else {
                self.pair.exchange(active, line).await
            };
            let kind = CommandKind::from_verb(&super::super::verb(line));
            let disposition = self.pair.classify(active, kind, &result);
            if ahead && disposition != Disposition::Done {
                // The data command behind a refused PORT answers too (425, 503): read it,
                // and note what it may have created.
                let deadline = self.pair.reply_deadline();
                let verb = self.command_verb(active);
                let behind = self.pair.read_reply(active, &verb, deadline).await;
                self.refused(active, &behind);
                if self.report.destination_touched {
                    self.clean_up().await;
                }
            }
            match disposition {
                Disposition::Done => {
                    self.port_verb = if line.starts_with("EPRT") {
                        "EPRT"
                    } else {
                        "PORT"
                    };
                    self.stor_sent = ahead;
                    if line.starts_with("EPRT") {
                        self.fallback(Fallback::ExtendedPort {
                            side: active,
                            reason: first_refusal
                                .as_ref()
                                .map(|(l, r)| format!("{l} answered {r}"))
                                .unwrap_or_else(|| "IPv6 address".into()),
                        });
                    }
                    return Phase::ActiveStart { passive };
                }
                Disposition::NotSupported | Disposition::Permanent(_) => {
                    if let Ok(reply) = &result {
                        first_refusal.get_or_insert((line.clone(), reply.to_string()));
                    }
                }
                disposition => return self.fail(active, line, result, Some(disposition)),
            }
        }
        let (line, reply) =
            first_refusal.unwrap_or_else(|| (eprt_line.clone(), "no usable reply".into()));
        let refusal = Refusal::Port {
            side: active,
            host: self.pair.host(active).to_owned(),
            line,
            reply,
        };
        self.next_order(refusal).await
    }
}
