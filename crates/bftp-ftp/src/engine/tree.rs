//! One directory of a source tree, as a directory walk needs it: every entry with its kind
//! (file, directory, symbolic link, special), from MLSD where FEAT offers MLST, else from
//! LIST in the Unix `ls -l` format (vsftpd). NLST cannot tell a directory from a file or a
//! link, so it is not used here. Links and special files are reported, never followed.
//!
//! Hidden names: MLSD shows names starting with a dot (proFTPD and Pure-FTPd both do);
//! LIST is sent as `LIST -a` (vsftpd, proFTPD and Pure-FTPd honour it), and the `.` entry in
//! its output proves `-a` was honoured; without it the directory is listed again with plain
//! LIST and marked [`HiddenNames::NotShown`]. A listing whose final reply says it was cut
//! (Pure-FTPd's `-L` cap) is an error ([`ListError::Truncated`]), never a whole directory.

use crate::parse::unix_list::{list_hint, parse_list, ListKind};
use crate::parse::{check_argument, parse_mlsd, EntryKind, ModifyTime};
use crate::transcript::{Side, Transcript};

use super::listing::{cut_short, DataReply};
use bftp_core::reply::{CommandKind, Disposition, PermanentKind};
pub use bftp_core::tree::HiddenNames;

use super::{ActionError, ListError, Pair, RejectedName};

/// How a directory was listed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WalkMethod {
    Mlsd,
    /// LIST in the Unix `ls -l` format.
    List,
}

/// What a directory entry is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TreeKind {
    File,
    Dir,
    /// A symbolic link and its target as the server showed it.
    Symlink {
        target: String,
    },
    /// Anything else (a device, a pipe, an MLSD type bftpd does not copy), in the server's
    /// words.
    Special(String),
}

/// One entry of a listed directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TreeEntry {
    /// Checked, relative to the listed directory, no `/`.
    pub name: String,
    pub kind: TreeKind,
    pub size: Option<u64>,
    /// MLSD's `unique` fact (the same for two paths to one directory), if the server sent it.
    pub unique: Option<String>,
    /// MLSD's `modify` fact; `None` from LIST, whose display time is not a modify time.
    pub modified: Option<ModifyTime>,
    /// LIST only: the line's size and display date as one string
    /// ([`crate::parse::unix_list::list_hint`]), a sign of change for a server without
    /// MLSD, never a fact. `None` from MLSD.
    pub hint: Option<String>,
}

/// A directory's entries, in listing order, and the lines refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DirListing {
    pub entries: Vec<TreeEntry>,
    pub rejected: Vec<RejectedName>,
    pub method: WalkMethod,
    /// Whether names starting with a dot could be listed (MLSD, or LIST -a honoured).
    pub hidden: HiddenNames,
    /// MLSD's `unique` fact of the listed directory itself (`type=cdir`).
    pub unique: Option<String>,
    pub transcript: Transcript,
}

/// The kind of an entry by its MLSD `type` fact.
fn mlsd_kind(kind: EntryKind) -> TreeKind {
    match kind {
        EntryKind::File | EntryKind::Unspecified => TreeKind::File,
        EntryKind::Dir => TreeKind::Dir,
        // Pure-FTPd: `OS.unix=slink:TARGET` (TARGET empty as it answered);
        // proFTPD: `OS.unix=symlink`.
        EntryKind::Special(s) => match s.strip_prefix("os.unix=slink:") {
            Some(target) => TreeKind::Symlink {
                target: target.to_owned(),
            },
            None if s == "os.unix=symlink" => TreeKind::Symlink {
                target: String::new(),
            },
            None => TreeKind::Special(s),
        },
    }
}

/// The kind of an entry by its LIST line's type letter.
fn list_kind(kind: ListKind) -> TreeKind {
    match kind {
        ListKind::File => TreeKind::File,
        ListKind::Dir => TreeKind::Dir,
        ListKind::Symlink { target } => TreeKind::Symlink { target },
        ListKind::Special(c) => TreeKind::Special(format!("type {c}")),
    }
}

impl Pair {
    /// Every entry of `dir` on the source, each with its kind (see the module docs).
    pub async fn list_dir(&mut self, dir: &str) -> Result<DirListing, ListError> {
        let mut listing = self.read_dir(dir).await?;
        listing.transcript = self.recorder.take();
        Ok(listing)
    }

    /// [`Pair::list_dir`] without taking the transcript: a caller listing several
    /// directories takes it once, at the end.
    pub(super) async fn read_dir(&mut self, dir: &str) -> Result<DirListing, ListError> {
        if let Some(reason) = self.dead_reason() {
            return Err(ListError::Closed { reason });
        }
        if let Err(error) = check_argument(dir) {
            return Err(ListError::BadArgument {
                what: "directory",
                value: dir.to_owned(),
                error,
            });
        }
        let mlsd = self
            .features()
            .await
            .iter()
            .any(|f| f.trim_start().to_ascii_uppercase().starts_with("MLST"));
        let method = if mlsd {
            WalkMethod::Mlsd
        } else {
            WalkMethod::List
        };
        // A path starting with `-` would be read as options of LIST (proFTPD drops the
        // connection at `LIST -a -d`): `./` keeps it a path.
        let list_path = if dir.starts_with('-') {
            format!("./{dir}")
        } else {
            dir.to_owned()
        };
        let (data, hidden) = match method {
            WalkMethod::Mlsd => (self.walk_data("MLSD", dir).await?, HiddenNames::Shown),
            // `-a`: without it vsftpd and proFTPD hide names starting with a dot.
            WalkMethod::List => match self.walk_data("LIST -a", &list_path).await {
                Ok(data) if parse_list(&data, dir).dot_entry => (data, HiddenNames::Shown),
                // `-a` ignored (no `.` entry), or refused, or taken for a name: the plain
                // listing, said to be without hidden names.
                Ok(_) | Err(ListError::Refused { .. }) => {
                    self.note(
                        Side::Source,
                        "LIST -a showed no `.` entry: the server does not honour -a; names \
                         starting with a dot are not listed",
                    );
                    (
                        self.walk_data("LIST", &list_path).await?,
                        HiddenNames::of_list_a(false),
                    )
                }
                Err(e) => return Err(e),
            },
        };
        let scrubber = self.recorder.scrubber().clone();
        let refuse = |line: &str, reason: String| RejectedName {
            matched: true,
            line: scrubber.scrub_excerpt(line),
            reason: scrubber.scrub(&reason),
        };
        let mut listing = DirListing {
            entries: Vec::new(),
            rejected: Vec::new(),
            method,
            hidden,
            unique: None,
            transcript: Transcript::default(),
        };
        let holds_secret = |name: &str| scrubber.scrub(name) != name;
        match method {
            WalkMethod::Mlsd => {
                let parsed = parse_mlsd(&data, dir);
                listing.unique = parsed.cdir_unique;
                for r in parsed.rejected {
                    listing.rejected.push(refuse(&r.line, r.reason.to_string()));
                }
                for e in parsed.entries {
                    listing.entries.push(TreeEntry {
                        name: e.name,
                        kind: mlsd_kind(e.kind),
                        size: e.size,
                        unique: e.unique,
                        modified: e.modify,
                        hint: None,
                    });
                }
            }
            WalkMethod::List => {
                let parsed = parse_list(&data, dir);
                for r in parsed.rejected {
                    listing.rejected.push(refuse(&r.line, r.reason.to_string()));
                }
                for e in parsed.entries {
                    listing.entries.push(TreeEntry {
                        hint: e.size.map(|size| list_hint(size, &e.date)),
                        name: e.name,
                        kind: list_kind(e.kind),
                        size: e.size,
                        unique: None,
                        modified: None,
                    });
                }
            }
        }
        // proFTPD's MLSD says `type=file` for a FIFO (and its `UNIX.mode` has no type bits):
        // an empty "file" may be a special file, which its LIST line shows (`p`, `c`...).
        if method == WalkMethod::Mlsd && listing.entries.iter().any(may_be_special) {
            let data = self.walk_data("LIST -a", &list_path).await?;
            let special: Vec<(String, char)> = parse_list(&data, dir)
                .entries
                .into_iter()
                .filter_map(|e| match e.kind {
                    ListKind::Special(c) => Some((e.name, c)),
                    _ => None,
                })
                .collect();
            mark_special(&mut listing.entries, &special);
        }
        // A name holding a secret is refused, as in a wildcard listing.
        let (kept, secret): (Vec<_>, Vec<_>) = listing
            .entries
            .into_iter()
            .partition(|e| !holds_secret(&e.name));
        listing.entries = kept;
        for e in secret {
            listing.rejected.push(RejectedName {
                matched: true,
                line: scrubber.scrub(&e.name),
                reason: "the name contains one of the job's passwords or ACCT strings".into(),
            });
        }
        Ok(listing)
    }

    /// The data of one listing of the walk, whole: a negative reply or a final reply that
    /// says the listing was cut is an error.
    async fn walk_data(&mut self, verb: &str, dir: &str) -> Result<Vec<u8>, ListError> {
        match self.data_command(verb, dir).await? {
            DataReply::Data(data, last) => match cut_short(&data, &last) {
                Some(cut) => Err(ListError::Truncated { cut }),
                None => Ok(data),
            },
            DataReply::Negative {
                command,
                reply,
                disposition,
            } => Err(ListError::Refused {
                host: self.host(Side::Source).to_owned(),
                command,
                reply,
                disposition,
            }),
        }
    }

    /// Make the directory `path` on the destination: MKD; a refused MKD of a directory that
    /// exists already (CWD into it works, then back to the login directory) is success.
    /// `Ok(true)`: made now; `Ok(false)`: it was there.
    pub async fn make_dir(&mut self, path: &str) -> Result<bool, ActionError> {
        let side = Side::Destination;
        self.usable_for(side, "MKD", path)?;
        let result = self.exchange(side, &format!("MKD {path}")).await;
        let refused = match (self.classify(side, CommandKind::Other, &result), result) {
            (Disposition::Done, Ok(_)) => return Ok(true),
            (Disposition::Permanent(_), Ok(reply)) => reply,
            (disposition, result) => {
                return Err(self.action_error(side, "MKD", result, disposition))
            }
        };
        let home = self.home(side).await;
        let result = self.exchange(side, &format!("CWD {path}")).await;
        if self.classify(side, CommandKind::Cwd, &result) != Disposition::Done {
            return Err(self.action_error(
                side,
                "MKD",
                Ok(refused),
                Disposition::Permanent(PermanentKind::FileUnavailable),
            ));
        }
        let back = match home {
            Some(home) => format!("CWD {home}"),
            None => "CDUP".into(),
        };
        let result = self.exchange(side, &back).await;
        if self.classify(side, CommandKind::Cwd, &result) != Disposition::Done {
            self.dst.close("could not return to the login directory");
        }
        Ok(false)
    }
}

/// An MLSD entry that a server may have listed as a file although it is not one: an empty
/// file (a FIFO, a device, a socket have no size of their own).
fn may_be_special(e: &TreeEntry) -> bool {
    e.kind == TreeKind::File && e.size == Some(0)
}

/// The entries the same directory's LIST shows as special (name, type letter) are special
/// files, whatever MLSD said of them.
fn mark_special(entries: &mut [TreeEntry], special: &[(String, char)]) {
    for e in entries.iter_mut().filter(|e| may_be_special(e)) {
        if let Some((_, c)) = special.iter().find(|(n, _)| *n == e.name) {
            e.kind = TreeKind::Special(format!("type {c}"));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_empty_mlsd_file_that_list_shows_as_special_is_special() {
        let entry = |name: &str, kind: TreeKind, size: Option<u64>| TreeEntry {
            name: name.into(),
            kind,
            size,
            unique: None,
            modified: None,
            hint: None,
        };
        let mut entries = vec![
            entry("pipe", TreeKind::File, Some(0)),
            entry("empty.txt", TreeKind::File, Some(0)),
            entry("full.txt", TreeKind::File, Some(5)),
            entry("dev", TreeKind::File, Some(0)),
            entry("d", TreeKind::Dir, None),
        ];
        assert!(entries.iter().filter(|e| may_be_special(e)).count() == 3);
        // LIST's specials; a name LIST shows special but MLSD gave a size is left alone.
        let special = [
            ("pipe".to_owned(), 'p'),
            ("dev".to_owned(), 'c'),
            ("full.txt".to_owned(), 'p'),
        ];
        mark_special(&mut entries, &special);
        let kinds: Vec<(&str, &TreeKind)> =
            entries.iter().map(|e| (e.name.as_str(), &e.kind)).collect();
        assert_eq!(
            kinds,
            [
                ("pipe", &TreeKind::Special("type p".into())),
                ("empty.txt", &TreeKind::File),
                ("full.txt", &TreeKind::File),
                ("dev", &TreeKind::Special("type c".into())),
                ("d", &TreeKind::Dir),
            ]
        );
    }
}
