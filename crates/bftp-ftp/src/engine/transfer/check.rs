//! The check after a copy: both servers' SIZE, what each answer means, and what the sizes
//! prove (`bftp_core::evidence::size_evidence`, RULES.md §4.2).

use super::*;

impl Attempt<'_> {
    /// One phase of the state machine (see `Phase::Check`): both servers' SIZE after the
    /// copy, what each answer means for the copy, then what the sizes prove
    /// (`bftp_core::evidence::size_evidence`).
    pub(super) async fn check(&mut self) -> Phase {
        self.pair.progress.send_replace(Progress::Checking {
            path: self.request.source_path.clone(),
        });
        let dest_name = self.checked_name();
        let [source_answer, dest_answer] = match self.ask_sizes(&dest_name).await {
            Ok(answers) => answers,
            Err(error) => return Phase::Done(Err(error)),
        };
        let source = match self.source_size(source_answer) {
            ControlFlow::Continue(size) => size,
            ControlFlow::Break(end) => return end,
        };
        let destination = match self.destination_size(dest_name, dest_answer).await {
            ControlFlow::Continue(size) => size,
            ControlFlow::Break(end) => return end,
        };
        self.by_sizes(source, destination).await
    }

    /// The name the copy is checked under: the destination path, or the name STOU chose
    /// (`Err`: why there is none to ask).
    pub(super) fn checked_name(&self) -> Result<String, String> {
        match self.request.dest_command {
            DestCommand::Unique => match self.report.stou_name.clone() {
                None => Err("the destination did not report the name STOU chose".to_owned()),
                Some(name) => match validate_server_path(&name, "") {
                    Ok(_) => Ok(name),
                    Err(error) => Err(Failure::BadStouName { name, error }.to_string()),
                },
            },
            _ => Ok(self.request.dest_path.clone()),
        }
    }

    /// SIZE on both sides after the copy: the source's answer (`None` where its size was
    /// asked right before the transfer) and the destination's (`None` without a name).
    pub(super) async fn ask_sizes(
        &mut self,
        dest_name: &Result<String, String>,
    ) -> Result<[Option<SizeAnswer>; 2], PairError> {
        let source_path = self.request.source_path.clone();
        // Both sizes at once: one round trip instead of two. The source only if its size
        // was not asked right before the transfer: a source that changed during the copy
        // shows as a mismatch either way (the bytes sent are not what SIZE said before).
        let next = match self.behind.take() {
            Some(behind) => self.read_behind(behind).await,
            None => None,
        };
        let [source_answer, dest_answer] = match (next, dest_name, self.source_size_asked) {
            (Some((behind, size, data)), Ok(name), Some(_)) => {
                let name = name.clone();
                [
                    None,
                    Some(self.size_with_next(&name, behind, size, data).await),
                ]
            }
            _ => {
                self.pair
                    .size_both(
                        self.source_size_asked
                            .is_none()
                            .then_some(source_path.as_str()),
                        dest_name.as_deref().ok(),
                    )
                    .await
            }
        };
        // The next file's STOR went out with this SIZE: unless the SIZE proves this copy
        // (nothing more to do on the destination), call that transfer off first.
        let proven = matches!(
            (&dest_answer, self.source_size_asked),
            (Some(SizeAnswer::Size(d)), Some(s)) if *d == s
        );
        if self.pair.in_flight() && !proven {
            self.pair
                .settle_ahead("the destination's SIZE did not prove the copy")
                .await?;
        }
        Ok([source_answer, dest_answer])
    }

    /// The source's size after the copy (`Err`: why there is none), or the copy's end when
    /// its SIZE failed.
    pub(super) fn source_size(
        &mut self,
        answer: Option<SizeAnswer>,
    ) -> ControlFlow<Phase, Result<u64, String>> {
        let answer = match (self.source_size_asked, answer) {
            (Some(size), _) => SizeAnswer::Size(size),
            (None, Some(answer)) => answer,
            (None, None) => unreachable!("the source is asked when its size is not known"),
        };
        ControlFlow::Continue(match answer {
            SizeAnswer::Size(size) => Ok(size),
            SizeAnswer::Unavailable(reason) => Err(reason),
            SizeAnswer::NoFile(result) => Err(format!(
                "SIZE answered {} after the transfer",
                describe(&result)
            )),
            SizeAnswer::Failed(result, disposition) => {
                return ControlFlow::Break(self.fail(
                    Side::Source,
                    "SIZE",
                    result,
                    Some(disposition),
                ))
            }
        })
    }

    /// The destination file's size after the copy (`Err`: why there is none), or the copy's
    /// end when its SIZE failed or found no file.
    pub(super) async fn destination_size(
        &mut self,
        dest_name: Result<String, String>,
        answer: Option<SizeAnswer>,
    ) -> ControlFlow<Phase, Result<u64, String>> {
        let (name, answer) = match (dest_name, answer) {
            (Err(reason), _) => return ControlFlow::Continue(Err(reason)),
            (Ok(_), None) => unreachable!("the destination is asked when it has a name"),
            (Ok(name), Some(answer)) => (name, answer),
        };
        ControlFlow::Continue(match answer {
            SizeAnswer::Size(size) => Ok(size),
            SizeAnswer::Unavailable(reason) => Err(reason),
            SizeAnswer::NoFile(Ok(reply)) => {
                // It said 226 and the file is not there: no evidence of a copy, and
                // maybe a copy under another name (the name's failure is remembered).
                self.clean_up().await;
                let host = self.pair.host(Side::Destination).to_owned();
                return ControlFlow::Break(self.transient(
                    TransientKind::FileBusy,
                    Failure::NotStoredAsNamed { host, name, reply },
                ));
            }
            SizeAnswer::NoFile(result) => {
                self.clean_up().await;
                return ControlFlow::Break(self.fail(
                    Side::Destination,
                    &format!("SIZE {name}"),
                    result,
                    Some(Disposition::Transient(TransientKind::FileBusy)),
                ));
            }
            SizeAnswer::Failed(result, disposition) => {
                return ControlFlow::Break(self.fail(
                    Side::Destination,
                    "SIZE",
                    result,
                    Some(disposition),
                ))
            }
        })
    }

    /// The copy's end by what both sizes prove (`bftp_core::evidence::size_evidence`): a
    /// success with its size evidence, or a transient failure on a size mismatch.
    pub(super) async fn by_sizes(
        &mut self,
        source: Result<u64, String>,
        destination: Result<u64, String>,
    ) -> Phase {
        let written = match self.request.dest_command {
            DestCommand::Append => Written::Appended {
                before: self.report.destination_size_before,
            },
            DestCommand::Replace | DestCommand::Unique => Written::Whole,
        };
        let transfer_type = self.pair.params.transfer_type;
        let (size_check, bytes) = match size_evidence(transfer_type, written, source, destination) {
            SizeEvidence::Checked { check, bytes } => (check, bytes),
            SizeEvidence::Mismatch {
                source,
                destination,
                expected,
            } => {
                self.clean_up().await;
                return self.transient(
                    TransientKind::DataConnection,
                    Failure::SizeMismatch {
                        source_size: source,
                        destination,
                        expected,
                    },
                );
            }
        };
        if let SizeCheck::NotAvailable(reason) = &size_check {
            self.pair
                .note(Side::Destination, &format!("no size evidence: {reason}"));
        }
        let stou_name = self.report.stou_name.clone();
        Phase::Done(Ok(CopyOutcome::Succeeded {
            bytes,
            size_check,
            stou_name,
            report: AttemptReport::default(),
        }))
    }
}
