//! What a member was about to do that must not happen twice, and how to settle it after an
//! interruption from what the servers show now.
//!
//! An intent is recorded durably in the member before an effect that cannot be repeated
//! safely (an append, a unique store, a delete). When bftpd finds one at the start of a
//! member (it stopped in the middle), [`resolve`] decides from a SIZE asked now whether the
//! effect happened, did not happen, or cannot be told; the executor only asks and records.
//!
//! The rules (each row of the table tests below):
//! - Append: destination SIZE now = before + source: the append happened; = before (or no
//!   file when it was empty before): it did not, do it again; anything else: `uncertain`.
//! - Unique store: only a name the server announced (its 125/150 reply) can be asked about.
//!   SIZE of it = the source size, and no other member claims that name: it is our complete
//!   copy; no such file: nothing was stored, do it again; anything else (another size, the
//!   name claimed by another member, no name announced, no source size known): `uncertain`,
//!   never deleted and never repeated (a second copy could be made, or another's file lost).
//! - Delete: do the DELE again (a file already gone is settled by the delete's own evidence).
//! - A SIZE that fails transiently: the intent stays and the member waits for a later
//!   attempt; one that fails for good (the server has no SIZE): `uncertain`.

/// What was about to happen, with the evidence needed to tell afterwards whether it did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Intent {
    /// APPE: the destination's size before it and the source's size.
    Append { before: u64, source_size: u64 },
    /// STOU: the source's size when it was asked (`None`: the server has no SIZE), and the
    /// name the server announced for the new file once it said it (`None`: not yet known).
    Unique {
        source_size: Option<u64>,
        announced: Option<String>,
    },
    /// DELE of a source file. `path`: the file (`None` in records written before the path
    /// was kept: the member's source path).
    Delete { path: Option<String> },
}

/// What a SIZE of the intent's target answers now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Probe {
    /// 213: this many bytes.
    Size(u64),
    /// 550: no such file.
    Absent,
    /// SIZE did not answer usefully; `transient`: worth asking again later.
    Failed { reason: String, transient: bool },
}

/// What the servers show now, for [`resolve`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Evidence {
    /// SIZE of the target ([`Intent::target`]); `None` when there is nothing to ask (a unique
    /// store whose name was never announced, a delete).
    pub size: Option<Probe>,
    /// Another member of the job records the target name as its own file.
    pub claimed_by_other: Option<String>,
}

/// What to do with the member.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// The effect happened: the member succeeded with `bytes` copied.
    Done { bytes: u64, evidence: String },
    /// The effect did not happen: clear the intent and do the member again.
    NotDone { evidence: String },
    /// Cannot be told: the member is `uncertain`, nothing is repeated or deleted.
    Uncertain { reason: String },
    /// Cannot be told now: the intent stays, the member waits for a later attempt.
    AskLater { reason: String },
    /// Do the DELE again.
    DeleteAgain,
}

impl Intent {
    /// The destination name (or source path for a delete) whose SIZE is the evidence, given
    /// the member's destination path (the directory for a unique store).
    pub fn target(&self, dest_path: &str) -> Option<String> {
        match self {
            Intent::Append { .. } => Some(dest_path.to_owned()),
            Intent::Unique { announced, .. } => announced.as_ref().map(|name| {
                if dest_path.is_empty() || name.starts_with('/') {
                    name.clone()
                } else {
                    format!("{}/{name}", dest_path.trim_end_matches('/'))
                }
            }),
            Intent::Delete { .. } => None,
        }
    }
}

/// Settles an intent left by an interrupted attempt from what the servers show now.
// Long on purpose: the whole rule as one match, row for row the table test below.
pub fn resolve(intent: &Intent, evidence: &Evidence) -> Decision {
    match intent {
        Intent::Delete { .. } => Decision::DeleteAgain,
        Intent::Append {
            before,
            source_size,
        } => {
            let complete = before + source_size;
            let now = match &evidence.size {
                Some(Probe::Size(n)) => *n,
                Some(Probe::Absent) => 0,
                Some(Probe::Failed { reason, transient }) => {
                    return size_failed("an interrupted append", reason, *transient)
                }
                None => {
                    return Decision::AskLater {
                        reason: "no SIZE of the destination was asked".into(),
                    }
                }
            };
            if now == complete && (*source_size > 0 || evidence.size != Some(Probe::Absent)) {
                Decision::Done {
                    bytes: *source_size,
                    evidence: format!(
                        "append resolved after an interruption: the destination grew from \
                         {before} to {now} bytes"
                    ),
                }
            } else if now == *before {
                Decision::NotDone {
                    evidence: format!(
                        "an interrupted append had not reached the destination ({now} bytes, \
                         as before it)"
                    ),
                }
            } else {
                Decision::Uncertain {
                    reason: format!(
                        "an interrupted append left the destination at {now} bytes; before it \
                         was {before}, a complete append gives {complete}: not repeated"
                    ),
                }
            }
        }
        Intent::Unique {
            source_size,
            announced,
        } => {
            let Some(name) = announced else {
                return Decision::Uncertain {
                    reason: "bftpd stopped during STOU before the server announced a name: a \
                             file with a name the server chose may exist on the destination; \
                             it was not repeated"
                        .into(),
                };
            };
            let now = match &evidence.size {
                Some(Probe::Size(n)) => *n,
                Some(Probe::Absent) => {
                    return Decision::NotDone {
                        evidence: format!(
                            "an interrupted STOU left no file {name:?}: nothing was stored"
                        ),
                    }
                }
                Some(Probe::Failed { reason, transient }) => {
                    return size_failed(
                        &format!("an interrupted STOU ({name:?})"),
                        reason,
                        *transient,
                    )
                }
                None => {
                    return Decision::AskLater {
                        reason: format!("no SIZE of {name:?} was asked"),
                    }
                }
            };
            if let Some(other) = &evidence.claimed_by_other {
                return Decision::Uncertain {
                    reason: format!(
                        "bftpd stopped during STOU; the announced name {name:?} ({now} bytes) \
                         is recorded as the copy of {other:?}: the server may have stored this \
                         file under another name; not repeated"
                    ),
                };
            }
            match source_size {
                Some(size) if *size == now => Decision::Done {
                    bytes: now,
                    evidence: format!(
                        "stored as {name:?}; resolved after an interruption: SIZE {now} bytes \
                         on both sides"
                    ),
                },
                Some(size) => Decision::Uncertain {
                    reason: format!(
                        "bftpd stopped during STOU; the announced file {name:?} has {now} bytes, \
                         the source {size}: not complete, not ours to delete for sure; not repeated"
                    ),
                },
                None => Decision::Uncertain {
                    reason: format!(
                        "bftpd stopped during STOU; the announced file {name:?} has {now} bytes \
                         and the source's size is unknown: not repeated"
                    ),
                },
            }
        }
    }
}

fn size_failed(what: &str, reason: &str, transient: bool) -> Decision {
    if transient {
        Decision::AskLater {
            reason: format!("cannot resolve {what} yet: {reason}"),
        }
    } else {
        Decision::Uncertain {
            reason: format!("cannot resolve {what}: SIZE failed ({reason}); not repeated"),
        }
    }
}

/// Whether a unique file that a failed or aborted copy may have left is provably ours, and
/// so may be deleted: its name was announced to this session, no other member (of this job,
/// or of any job of this daemon lately) claims it, and it is not larger than the source.
/// After a SIZE mismatch on a completed STOU the name is never ours to delete: the server may
/// have stored our bytes elsewhere and the file under that name may be another's.
pub fn unique_partial_is_ours(
    claimed_by_other: bool,
    mismatch_after_completion: bool,
    size_now: &Probe,
    source_size: Option<u64>,
) -> bool {
    if claimed_by_other || mismatch_after_completion {
        return false;
    }
    match (size_now, source_size) {
        (Probe::Size(n), Some(source)) => *n <= source,
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(size: Option<Probe>) -> Evidence {
        Evidence {
            size,
            claimed_by_other: None,
        }
    }

    fn failed(transient: bool) -> Option<Probe> {
        Some(Probe::Failed {
            reason: "421 closing".into(),
            transient,
        })
    }

    #[derive(Debug, PartialEq)]
    enum D {
        Done(u64),
        NotDone,
        Uncertain,
        AskLater,
        DeleteAgain,
    }

    fn short(d: Decision) -> D {
        match d {
            Decision::Done { bytes, .. } => D::Done(bytes),
            Decision::NotDone { .. } => D::NotDone,
            Decision::Uncertain { .. } => D::Uncertain,
            Decision::AskLater { .. } => D::AskLater,
            Decision::DeleteAgain => D::DeleteAgain,
        }
    }

    #[test]
    fn append_rows() {
        let appe = Intent::Append {
            before: 100,
            source_size: 50,
        };
        let empty = Intent::Append {
            before: 0,
            source_size: 50,
        };
        let rows: Vec<(&str, &Intent, Evidence, D)> = vec![
            (
                "crash before APPE",
                &appe,
                ev(Some(Probe::Size(100))),
                D::NotDone,
            ),
            (
                "crash after the 150",
                &appe,
                ev(Some(Probe::Size(120))),
                D::Uncertain,
            ),
            (
                "crash after the 226",
                &appe,
                ev(Some(Probe::Size(150))),
                D::Done(50),
            ),
            (
                "a size that fits neither",
                &appe,
                ev(Some(Probe::Size(170))),
                D::Uncertain,
            ),
            (
                "the file is gone",
                &appe,
                ev(Some(Probe::Absent)),
                D::Uncertain,
            ),
            (
                "new file, crash before APPE",
                &empty,
                ev(Some(Probe::Absent)),
                D::NotDone,
            ),
            (
                "new file, crash after the 226",
                &empty,
                ev(Some(Probe::Size(50))),
                D::Done(50),
            ),
            ("SIZE fails for now", &appe, ev(failed(true)), D::AskLater),
            (
                "SIZE fails for good",
                &appe,
                ev(failed(false)),
                D::Uncertain,
            ),
        ];
        for (row, intent, evidence, want) in rows {
            assert_eq!(short(resolve(intent, &evidence)), want, "{row}");
        }
    }

    #[test]
    fn unique_rows() {
        let named = Intent::Unique {
            source_size: Some(1000),
            announced: Some("STOU.3".into()),
        };
        let unnamed = Intent::Unique {
            source_size: Some(1000),
            announced: None,
        };
        let no_size = Intent::Unique {
            source_size: None,
            announced: Some("STOU.3".into()),
        };
        let claimed = Evidence {
            size: Some(Probe::Size(1000)),
            claimed_by_other: Some("b.dat".into()),
        };
        let rows: Vec<(&str, &Intent, Evidence, D)> = vec![
            (
                "crash before the STOU (no name yet)",
                &unnamed,
                ev(None),
                D::Uncertain,
            ),
            (
                "crash after the 150, nothing stored",
                &named,
                ev(Some(Probe::Absent)),
                D::NotDone,
            ),
            (
                "crash after the 150, partial",
                &named,
                ev(Some(Probe::Size(400))),
                D::Uncertain,
            ),
            (
                "crash after the 226, complete",
                &named,
                ev(Some(Probe::Size(1000))),
                D::Done(1000),
            ),
            (
                "a size that fits neither",
                &named,
                ev(Some(Probe::Size(5000))),
                D::Uncertain,
            ),
            (
                "the name is another member's",
                &named,
                claimed,
                D::Uncertain,
            ),
            (
                "source size unknown",
                &no_size,
                ev(Some(Probe::Size(1000))),
                D::Uncertain,
            ),
            ("SIZE fails for now", &named, ev(failed(true)), D::AskLater),
            (
                "SIZE fails for good",
                &named,
                ev(failed(false)),
                D::Uncertain,
            ),
        ];
        for (row, intent, evidence, want) in rows {
            assert_eq!(short(resolve(intent, &evidence)), want, "{row}");
        }
    }

    #[test]
    fn delete_is_done_again() {
        let d = Intent::Delete { path: None };
        assert_eq!(short(resolve(&d, &ev(None))), D::DeleteAgain);
    }

    #[test]
    fn targets() {
        let u = |a: &str| Intent::Unique {
            source_size: None,
            announced: Some(a.into()),
        };
        assert_eq!(u("STOU.1").target("in"), Some("in/STOU.1".into()));
        assert_eq!(u("STOU.1").target("in/"), Some("in/STOU.1".into()));
        assert_eq!(u("STOU.1").target(""), Some("STOU.1".into()));
        assert_eq!(u("/srv/in/x").target("in"), Some("/srv/in/x".into()));
        let a = Intent::Append {
            before: 0,
            source_size: 1,
        };
        assert_eq!(a.target("in/a"), Some("in/a".into()));
    }

    #[test]
    fn partial_unique_files_are_deleted_only_when_provably_ours() {
        let rows = [
            // (claimed, mismatch after 226, SIZE now, source size, delete?)
            (false, false, Probe::Size(10), Some(100), true),
            (false, false, Probe::Size(100), Some(100), true),
            (false, false, Probe::Size(101), Some(100), false),
            (true, false, Probe::Size(10), Some(100), false),
            (false, true, Probe::Size(10), Some(100), false),
            (false, false, Probe::Size(10), None, false),
            (false, false, Probe::Absent, Some(100), false),
            (
                false,
                false,
                Probe::Failed {
                    reason: "x".into(),
                    transient: true,
                },
                Some(100),
                false,
            ),
        ];
        for (claimed, mismatch, size, source, want) in rows {
            assert_eq!(
                unique_partial_is_ours(claimed, mismatch, &size, source),
                want,
                "{claimed} {mismatch} {size:?} {source:?}"
            );
        }
    }
}
