//! Resuming a large copy that was cut off (RULES.md §14), relayed or third party alike.
//!
//! Before the bytes of a large replace copy move, bftpd records durably what the copy began
//! from ([`Base`]: the source's size and modify time, and the destination's size before).
//! When the copy is tried again, [`decide`] says whether it may go on from where it stopped
//! (`REST` with the offset on both servers) or must start again: only when the source is
//! unchanged, both servers offer `REST STREAM`, the destination does not refuse a restarted
//! STOR, and the destination's SIZE (asked now: the offset comes from the destination, never
//! from bftpd's memory) shows a part of this copy. A destination file that is exactly as it
//! was before the copy began may not be this copy's at all (a crash before STOR truncated it):
//! it is never resumed.
//!
//! Pure: the caller asks the servers and passes their answers.

/// What a copy began from, recorded before its first byte.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Base {
    /// The source's size when the copy began.
    pub size: u64,
    /// The source's modify time (MDTM) when the copy began.
    pub modified: Option<String>,
    /// The destination's size before the copy began (`None`: no file).
    pub dest_before: Option<u64>,
}

/// What the servers show now, when the copy is tried again.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Now {
    pub size: Option<u64>,
    pub modified: Option<String>,
    /// The destination file's size (`None`: no file, or no SIZE).
    pub dest_size: Option<u64>,
    /// `REST STREAM` in FEAT: source, destination.
    pub rest: [bool; 2],
    /// The destination is known to refuse a restarted STOR (proFTPD's stock
    /// `AllowStoreRestart off`), from the refusal memory.
    pub store_restart_refused: bool,
}

/// Go on from `offset`, or start again and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Decision {
    Resume { offset: u64 },
    Restart { why: String },
}

/// Whether a copy that began from `base` may go on, the servers showing `now`.
pub fn decide(base: &Base, now: &Now) -> Decision {
    let restart = |why: String| Decision::Restart { why };
    match now.size {
        Some(size) if size == base.size => {}
        Some(size) => {
            return restart(format!(
                "the source changed since the copy began: {} bytes then, {size} now",
                base.size
            ))
        }
        None => return restart("the source's size is not known now".into()),
    }
    match (&base.modified, &now.modified) {
        (Some(then), Some(now)) if then == now => {}
        (Some(then), Some(now)) => {
            return restart(format!(
                "the source changed since the copy began: modified {then} then, {now} now"
            ))
        }
        _ => return restart("no modify time (MDTM) shows the source unchanged".into()),
    }
    match now.rest {
        [false, _] => return restart("the source does not offer REST STREAM".into()),
        [_, false] => return restart("the destination does not offer REST STREAM".into()),
        _ => {}
    }
    if now.store_restart_refused {
        return restart(
            "the destination refuses a restarted STOR (proFTPD: AllowStoreRestart off)".into(),
        );
    }
    match now.dest_size {
        None | Some(0) => restart("nothing of the copy is on the destination".into()),
        Some(d) if Some(d) == base.dest_before => restart(format!(
            "the destination file has the size it had before the copy began ({d} bytes): it \
             may not be this copy's"
        )),
        Some(d) if d > base.size => restart(format!(
            "the destination file ({d} bytes) is larger than the source ({} bytes)",
            base.size
        )),
        Some(offset) => Decision::Resume { offset },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn base() -> Base {
        Base {
            size: 1000,
            modified: Some("20261206120000".into()),
            dest_before: Some(40),
        }
    }

    fn now() -> Now {
        Now {
            size: Some(1000),
            modified: Some("20261206120000".into()),
            dest_size: Some(600),
            rest: [true, true],
            store_restart_refused: false,
        }
    }

    #[test]
    fn when_a_cut_copy_may_go_on() {
        let resume = |offset| Decision::Resume { offset };
        // (what differs from a resumable case) -> resumed at, or a word of why not
        type Row = (&'static str, Base, Now, Result<Decision, &'static str>);
        let rows: Vec<Row> = vec![
            ("resumable", base(), now(), Ok(resume(600))),
            (
                "all there",
                base(),
                Now {
                    dest_size: Some(1000),
                    ..now()
                },
                Ok(resume(1000)),
            ),
            (
                "no file before",
                Base {
                    dest_before: None,
                    ..base()
                },
                now(),
                Ok(resume(600)),
            ),
            (
                "source grew",
                base(),
                Now {
                    size: Some(1001),
                    ..now()
                },
                Err("1000 bytes then, 1001 now"),
            ),
            (
                "source size unknown",
                base(),
                Now {
                    size: None,
                    ..now()
                },
                Err("size is not known"),
            ),
            (
                "source touched",
                base(),
                Now {
                    modified: Some("20261206120001".into()),
                    ..now()
                },
                Err("modified 20261206120000 then"),
            ),
            (
                "no MDTM then",
                Base {
                    modified: None,
                    ..base()
                },
                now(),
                Err("no modify time"),
            ),
            (
                "no MDTM now",
                base(),
                Now {
                    modified: None,
                    ..now()
                },
                Err("no modify time"),
            ),
            (
                "source without REST",
                base(),
                Now {
                    rest: [false, true],
                    ..now()
                },
                Err("source does not offer REST"),
            ),
            (
                "destination without REST",
                base(),
                Now {
                    rest: [true, false],
                    ..now()
                },
                Err("destination does not offer REST"),
            ),
            (
                "restarted STOR refused",
                base(),
                Now {
                    store_restart_refused: true,
                    ..now()
                },
                Err("AllowStoreRestart"),
            ),
            (
                "no destination file",
                base(),
                Now {
                    dest_size: None,
                    ..now()
                },
                Err("nothing of the copy"),
            ),
            (
                "empty destination file",
                base(),
                Now {
                    dest_size: Some(0),
                    ..now()
                },
                Err("nothing of the copy"),
            ),
            (
                "destination as before",
                base(),
                Now {
                    dest_size: Some(40),
                    ..now()
                },
                Err("may not be this copy's"),
            ),
            (
                "destination larger",
                base(),
                Now {
                    dest_size: Some(1001),
                    ..now()
                },
                Err("larger than the source"),
            ),
        ];
        for (case, base, now, want) in rows {
            let got = decide(&base, &now);
            match (&want, &got) {
                (Ok(want), got) => assert_eq!(got, want, "{case}"),
                (Err(word), Decision::Restart { why }) => {
                    assert!(why.contains(word), "{case}: {why:?} lacks {word:?}")
                }
                (Err(_), got) => panic!("{case}: {got:?}"),
            }
        }
    }
}
