//! Listing the source directory for a wildcard job (RULES.md §4.4, §8).
//!
//! MLSD when FEAT offers MLST (RFC 3659), else NLST; either way over a data
//! connection from the source to the controller: listing data may flow to bftpd,
//! file bytes never do. The pattern is matched here with [`glob_match`], never by the
//! server (Pure-FTPd's NLST does not glob and lists `.` and `..`). Every name is
//! checked before use (no CR/LF/NUL, no `..`, no absolute path elsewhere); refused
//! names are returned, never dropped silently.
//!
//! "No match" arrives as 450, 550 or a 226 with an empty list depending on the server:
//! a 450/550 to NLST is told apart from a missing directory with CWD.

use std::net::{IpAddr, SocketAddr};

use bftp_core::reply::{CommandKind, Disposition, PermanentKind, TransientKind};
use bftp_core::tls::TlsPolicy;
use bftp_core::TransferType;
use tokio::io::AsyncReadExt;
use tokio::net::TcpStream;

use super::outcome::Fallback;
use super::{size_answer_of, verb, Pair, SizeAnswer};
use crate::parse::{
    check_argument, glob_match, is_privileged_port, parse_epsv, parse_mlsd, parse_nlst, parse_pasv,
    AddressError, EntryKind, ModifyTime, NameError, NlstListing, Reply,
};
use crate::session::{io_failure, SessionError};
use crate::tls::Stream;
use crate::transcript::{Side, Transcript};

/// SIZE commands sent at once while sorting NLST names (see `nlst_members`): replies of
/// a few dozen bytes each, a window's replies (a few KiB) far below any socket buffer. At
/// 20 ms a round trip, each window costs one: 300 names took five with 64.
pub(super) const SIZE_WINDOW: usize = 256;

/// One member of a wildcard job, as frozen at the first listing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Listed {
    /// Checked, relative to the listed directory, no `/`.
    pub name: String,
    pub size: Option<u64>,
    /// From MLSD's `modify` fact; `None` from NLST (not asked: it decides nothing).
    pub modified: Option<ModifyTime>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ListMethod {
    Mlsd,
    Nlst,
}

/// A listing line refused by the name checks (CR, LF, NUL, `..`, a foreign path).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RejectedName {
    /// The refused name, escaped (`\r`, `\n`, `\0`, `\xNN`) and cut: for display only.
    pub line: String,
    pub reason: String,
    /// The name, or its last `/` component, matches the job's pattern: a file of the job
    /// that cannot be copied, which the ledger must show (the others are not the job's).
    pub matched: bool,
}

/// Whether a refused name would have been a member: the pattern matches it whole, or its
/// last component (`../x.dat`, `/etc/x.dat` for `*.dat`).
fn refused_matches(pattern: &str, name: &str) -> bool {
    glob_match(pattern, name)
        || name
            .rsplit('/')
            .next()
            .is_some_and(|last| glob_match(pattern, last))
}

/// A name that matched the pattern but is not a plain file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Skipped {
    pub name: String,
    pub reason: String,
}

/// What [`Pair::list_source`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Listing {
    /// Plain files whose name matches the pattern, in listing order.
    pub members: Vec<Listed>,
    /// Lines whose name failed the checks (whether or not it would have matched).
    pub rejected: Vec<RejectedName>,
    /// Matching names that are directories or other non-files.
    pub skipped: Vec<Skipped>,
    pub method: ListMethod,
    pub fallbacks: Vec<Fallback>,
    pub transcript: Transcript,
}

/// Why the source could not be listed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ListError {
    #[error("source server {host}: {command} answered {reply}")]
    Refused {
        host: String,
        command: String,
        reply: Reply,
        disposition: Disposition,
    },
    #[error("source server {host}: {command}: {error}")]
    Session {
        host: String,
        command: String,
        error: SessionError,
    },
    #[error(
        "the source directory {dir:?} does not exist or cannot be entered: CWD answered {reply}"
    )]
    DirectoryMissing { dir: String, reply: Reply },
    /// BSD servers put `ls` errors on the data connection and answer 226 (RFC 1068).
    #[error("the listing of {dir:?} holds error messages instead of names: {}", lines.join(" | "))]
    ErrorText { dir: String, lines: Vec<String> },
    #[error("source server {host}: unusable {command} reply: {error}")]
    BadPassiveReply {
        host: String,
        command: String,
        error: AddressError,
    },
    #[error("source server {host} announced the privileged data port {port}; refused (RFC 2577)")]
    PrivilegedPort { host: String, port: u16 },
    #[error("source server {host}: neither PASV nor EPSV is offered: {detail}")]
    NoPassiveMode { host: String, detail: String },
    #[error("data connection to {addr} failed: {detail}")]
    DataConnection { addr: SocketAddr, detail: String },
    #[error("the listing is larger than {limit} bytes")]
    TooLarge { limit: usize },
    /// The server said it cut the listing short (Pure-FTPd's `-L` cap).
    #[error("the server cut the listing short: {:?}{}", cut.said, cut.setting.map(|s| format!(" ({s})")).unwrap_or_default())]
    Truncated { cut: bftp_core::tree::ListingCut },
    #[error("{what} {value:?} cannot be sent in a command: {error}")]
    BadArgument {
        what: &'static str,
        value: String,
        error: NameError,
    },
    #[error("the connection pair was closed ({reason}); open a new one")]
    Closed { reason: String },
    /// The source's data policy requires TLS and the listing's data connection cannot
    /// have it.
    #[error("source server {host}: {detail}")]
    DataTls { host: String, detail: String },
}

impl ListError {
    /// The retry decision (RULES.md §5): a missing directory is a job-level permanent
    /// failure; transport trouble and code-less listings are transient.
    pub fn disposition(&self) -> Disposition {
        match self {
            ListError::Refused { disposition, .. } => *disposition,
            ListError::Session { error, .. } => {
                bftp_core::reply::classify(CommandKind::Nlst, error.outcome())
            }
            ListError::DirectoryMissing { .. } => {
                Disposition::Permanent(PermanentKind::FileUnavailable)
            }
            ListError::ErrorText { .. } | ListError::BadPassiveReply { .. } => {
                Disposition::Transient(TransientKind::Protocol)
            }
            ListError::DataConnection { .. } => {
                Disposition::Transient(TransientKind::DataConnection)
            }
            ListError::TooLarge { .. }
            | ListError::Truncated { .. }
            | ListError::BadArgument { .. }
            | ListError::PrivilegedPort { .. }
            | ListError::NoPassiveMode { .. }
            | ListError::DataTls { .. } => Disposition::Permanent(PermanentKind::CommandRejected),
            ListError::Closed { .. } => super::outcome::connection_gone(),
        }
    }
}

/// What the listing commands gave: the data of the one that worked, or the negative reply.
enum Fetched {
    Data {
        method: ListMethod,
        data: Vec<u8>,
        fallbacks: Vec<Fallback>,
    },
    Negative {
        command: String,
        reply: Reply,
        disposition: Disposition,
    },
}

/// Sorts listed names into members, refused and skipped ones, against the job's pattern and
/// secrets.
struct Names<'a> {
    scrubber: bftp_core::scrub::Scrubber,
    pattern: &'a str,
}

impl Names<'_> {
    fn holds_secret(&self, name: &str) -> bool {
        self.scrubber.scrub(name) != name
    }

    /// A matching name that holds a secret: refused.
    fn refuse_secret(&self, name: &str) -> RejectedName {
        RejectedName {
            matched: true,
            line: self.scrubber.scrub(name),
            reason: "the name contains one of the job's passwords or ACCT strings".into(),
        }
    }

    /// A line the parser refused, scrubbed, and whether the job's pattern names it.
    fn refused(&self, name: &str, line: &str, reason: &str) -> RejectedName {
        RejectedName {
            matched: refused_matches(self.pattern, name),
            line: self.scrubber.scrub_excerpt(line),
            reason: self.scrubber.scrub(reason),
        }
    }

    fn sort_mlsd(&self, data: &[u8], dir: &str, listing: &mut Listing) {
        let parsed = parse_mlsd(data, dir);
        listing.rejected = parsed
            .rejected
            .into_iter()
            .map(|r| self.refused(&r.name, &r.line, &r.reason.to_string()))
            .collect();
        for mut entry in parsed.entries {
            if !glob_match(self.pattern, &entry.name) {
                continue;
            }
            if self.holds_secret(&entry.name) {
                if matches!(entry.kind, EntryKind::File | EntryKind::Unspecified) {
                    listing.rejected.push(self.refuse_secret(&entry.name));
                    continue;
                }
                entry.name = self.scrubber.scrub(&entry.name);
            }
            match entry.kind {
                EntryKind::File | EntryKind::Unspecified => listing.members.push(Listed {
                    name: entry.name,
                    size: entry.size,
                    modified: entry.modify,
                }),
                EntryKind::Dir => listing.skipped.push(Skipped {
                    name: entry.name,
                    reason: "a directory".into(),
                }),
                EntryKind::Special(kind) => listing.skipped.push(Skipped {
                    name: entry.name,
                    reason: format!("not a plain file (type={kind})"),
                }),
            }
        }
    }

    /// The NLST names that match and may be copied; the refused ones go to `listing`.
    fn sort_nlst(&self, parsed: NlstListing, listing: &mut Listing) -> Vec<String> {
        listing.rejected = parsed
            .rejected
            .into_iter()
            .map(|r| self.refused(&r.name, &r.line, &r.reason.to_string()))
            .collect();
        let mut names = Vec::new();
        for name in parsed.names {
            if !glob_match(self.pattern, &name) {
                continue;
            }
            if self.holds_secret(&name) {
                listing.rejected.push(self.refuse_secret(&name));
            } else {
                names.push(name);
            }
        }
        names
    }
}

/// What a listing command gave.
pub(super) enum DataReply {
    /// The data and the final reply, which may say the listing was cut
    /// ([`bftp_core::tree::listing_cut`]).
    Data(Vec<u8>, Reply),
    /// The first or final reply was negative.
    Negative {
        command: String,
        reply: Reply,
        disposition: Disposition,
    },
}

/// A listing whose final reply says it was cut is refused: never taken as whole (RULES.md
/// §10). The count a reply may give counts the listing's non-empty lines.
pub(super) fn cut_short(data: &[u8], last: &Reply) -> Option<bftp_core::tree::ListingCut> {
    let lines = data
        .split(|&b| b == b'\n')
        .filter(|l| l.iter().any(|b| !b.is_ascii_whitespace()))
        .count();
    bftp_core::tree::listing_cut(&last.text(), lines)
}

/// `dir/name`, with `dir` as the job wrote it (`""` is the login directory).
pub(crate) fn join(dir: &str, name: &str) -> String {
    match dir {
        "" | "." => name.to_owned(),
        d if d.ends_with('/') => format!("{d}{name}"),
        d => format!("{d}/{name}"),
    }
}

impl Pair {
    /// List `dir` on the source and return the plain files whose names match
    /// `pattern` (see the module docs). Names come without the directory.
    pub async fn list_source(&mut self, dir: &str, pattern: &str) -> Result<Listing, ListError> {
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
        let (method, data, fallbacks) = match self.fetch_listing(dir).await? {
            Fetched::Data {
                method,
                data,
                fallbacks,
            } => (method, data, fallbacks),
            Fetched::Negative {
                command,
                reply,
                disposition,
            } => {
                return self
                    .negative_listing(dir, command, reply, disposition)
                    .await
            }
        };
        let mut listing = Listing {
            members: Vec::new(),
            rejected: Vec::new(),
            skipped: Vec::new(),
            method,
            fallbacks,
            transcript: Transcript::default(),
        };
        // Listing lines are the server's text too: scrubbed of the job's secrets as they are
        // read. A name holding a secret is refused (copying it would put the secret into the
        // ledger, the report and every status).
        let names = Names {
            scrubber: self.recorder.scrubber().clone(),
            pattern,
        };
        match method {
            ListMethod::Mlsd => names.sort_mlsd(&data, dir, &mut listing),
            ListMethod::Nlst => {
                let parsed = parse_nlst(&data, dir);
                if parsed.names.is_empty() && parsed.rejected.is_empty() {
                    self.check_directory(dir).await?;
                }
                if !parsed.error_text.is_empty() {
                    return Err(ListError::ErrorText {
                        dir: dir.to_owned(),
                        lines: parsed
                            .error_text
                            .iter()
                            .map(|l| names.scrubber.scrub_excerpt(l))
                            .collect(),
                    });
                }
                let matched = names.sort_nlst(parsed, &mut listing);
                self.nlst_members(dir, matched, &mut listing).await?;
            }
        }
        for rejected in &listing.rejected {
            self.note(
                Side::Source,
                &format!(
                    "listing line refused: \"{}\": {}",
                    rejected.line, rejected.reason
                ),
            );
        }
        listing.transcript = self.recorder.take();
        Ok(listing)
    }

    /// The listing's bytes: MLSD where FEAT offers MLST, else (or when MLSD is not
    /// supported after all) NLST, with the fallback taken.
    async fn fetch_listing(&mut self, dir: &str) -> Result<Fetched, ListError> {
        let mlsd = self
            .features()
            .await
            .iter()
            .any(|f| f.trim_start().to_ascii_uppercase().starts_with("MLST"));
        let mut fallbacks = Vec::new();
        if mlsd {
            match self.data_command("MLSD", dir).await? {
                DataReply::Data(data, last) => {
                    if let Some(cut) = cut_short(&data, &last) {
                        return Err(ListError::Truncated { cut });
                    }
                    return Ok(Fetched::Data {
                        method: ListMethod::Mlsd,
                        data,
                        fallbacks,
                    });
                }
                DataReply::Negative {
                    command,
                    reply,
                    disposition: Disposition::NotSupported,
                } => {
                    let fallback = Fallback::ListedWithNlst {
                        reason: format!("{command} answered {reply}"),
                    };
                    self.note(Side::Source, &fallback.to_string());
                    fallbacks.push(fallback);
                }
                DataReply::Negative {
                    command,
                    reply,
                    disposition,
                } => {
                    return Ok(Fetched::Negative {
                        command,
                        reply,
                        disposition,
                    })
                }
            }
        } else {
            fallbacks.push(Fallback::ListedWithNlst {
                reason: "FEAT does not offer MLST".into(),
            });
        }
        Ok(match self.data_command("NLST", dir).await? {
            DataReply::Data(data, last) => {
                if let Some(cut) = cut_short(&data, &last) {
                    return Err(ListError::Truncated { cut });
                }
                Fetched::Data {
                    method: ListMethod::Nlst,
                    data,
                    fallbacks,
                }
            }
            DataReply::Negative {
                command,
                reply,
                disposition,
            } => Fetched::Negative {
                command,
                reply,
                disposition,
            },
        })
    }

    /// NLST gives names only: SIZE tells a plain file (213, with its size) from a
    /// directory (550), which decides membership. No MDTM: the modification time decides
    /// nothing, and asking it per name cost a round trip per file (NLST members have no
    /// `modified`; MLSD members have it from the listing).
    ///
    /// The SIZE commands are pipelined, [`SIZE_WINDOW`] at a time, replies read in order
    /// (RFC 959 servers read commands one line at a time: vsftpd, proFTPD and Pure-FTPd
    /// answer a window of them in one go), so a directory of N names costs N / window
    /// round trips instead of 2 N.
    async fn nlst_members(
        &mut self,
        dir: &str,
        names: Vec<String>,
        listing: &mut Listing,
    ) -> Result<(), ListError> {
        if names.is_empty() {
            return Ok(());
        }
        if let Err((result, disposition)) =
            self.ensure_type(Side::Source, TransferType::Image).await
        {
            return Err(self.list_failure("TYPE", result, disposition));
        }
        let mut names = names.into_iter().peekable();
        while names.peek().is_some() {
            let window: Vec<String> = names.by_ref().take(SIZE_WINDOW).collect();
            let lines: Vec<String> = window
                .iter()
                .map(|name| format!("SIZE {}", join(dir, name)))
                .collect();
            let replies = self.pipelined(&lines).await?;
            // A refusal other than 550 fails the listing, but only after the whole window
            // was read: the connection stays in step.
            let mut failure = None;
            for (name, reply) in window.into_iter().zip(replies) {
                let result = Ok(reply);
                let disposition = self.classify(Side::Source, CommandKind::Size, &result);
                let size = match size_answer_of(result, disposition) {
                    SizeAnswer::Size(size) => Some(size),
                    SizeAnswer::Unavailable(_) => None,
                    SizeAnswer::NoFile(result) => {
                        listing.skipped.push(Skipped {
                            name,
                            reason: format!(
                                "SIZE answered {}: not a plain file (a directory?)",
                                describe(&result)
                            ),
                        });
                        continue;
                    }
                    SizeAnswer::Failed(result, disposition) => {
                        if failure.is_none() {
                            failure = Some(self.list_failure("SIZE", result, disposition));
                        }
                        continue;
                    }
                };
                listing.members.push(Listed {
                    name,
                    size,
                    modified: None,
                });
            }
            if let Some(failure) = failure {
                return Err(failure);
            }
        }
        Ok(())
    }

    /// Send `lines` to the source in one go and read one reply per line, in order (RFC 959
    /// servers read commands one line at a time and answer them in order): a window of
    /// questions costs one round trip. Keep a window's replies far below a socket buffer
    /// ([`SIZE_WINDOW`] commands). A line that cannot be sent, or a reply that does not
    /// come (the session is closed: the rest cannot be read), is the error.
    pub(super) async fn pipelined(&mut self, lines: &[String]) -> Result<Vec<Reply>, ListError> {
        for line in lines {
            if let Err(error) = self.src.send(line).await {
                let command = verb(line);
                let result = Err(error);
                self.remember(Side::Source, &command, &result);
                let kind = CommandKind::from_verb(&command);
                let disposition = self.classify(Side::Source, kind, &result);
                return Err(self.list_failure(&command, result, disposition));
            }
        }
        let mut replies = Vec::with_capacity(lines.len());
        for line in lines {
            let command = verb(line);
            let deadline = self.reply_deadline();
            match self.read_reply(Side::Source, &command, deadline).await {
                Ok(reply) => replies.push(reply),
                Err(error) => {
                    let result = Err(error);
                    let kind = CommandKind::from_verb(&command);
                    let disposition = self.classify(Side::Source, kind, &result);
                    return Err(self.list_failure(&command, result, disposition));
                }
            }
        }
        Ok(replies)
    }

    pub(super) fn list_failure(
        &self,
        command: &str,
        result: Result<Reply, SessionError>,
        disposition: Disposition,
    ) -> ListError {
        let host = self.host(Side::Source).to_owned();
        match result {
            Ok(reply) => ListError::Refused {
                host,
                command: command.to_owned(),
                reply,
                disposition,
            },
            Err(error) => ListError::Session {
                host,
                command: command.to_owned(),
                error,
            },
        }
    }

    /// A 450/550 to the listing command: an empty directory on some servers (no
    /// match), a missing one on all. CWD tells which.
    async fn negative_listing(
        &mut self,
        dir: &str,
        command: String,
        reply: Reply,
        disposition: Disposition,
    ) -> Result<Listing, ListError> {
        let no_files = matches!(reply.code().get(), 450 | 550);
        if !no_files {
            return Err(ListError::Refused {
                host: self.host(Side::Source).to_owned(),
                command,
                reply,
                disposition,
            });
        }
        self.check_directory(dir).await?;
        self.note(
            Side::Source,
            &format!("{command} answered {reply}: the directory exists, nothing listed"),
        );
        Ok(Listing {
            members: Vec::new(),
            rejected: Vec::new(),
            skipped: Vec::new(),
            method: ListMethod::Nlst,
            fallbacks: Vec::new(),
            transcript: self.recorder.take(),
        })
    }

    /// CWD to `dir` and back: vsftpd answers NLST of a missing directory with an
    /// empty 226, and several servers answer 450/550 for an empty one.
    pub(super) async fn check_directory(&mut self, dir: &str) -> Result<(), ListError> {
        if dir.is_empty() {
            return Ok(());
        }
        let home = self.home(Side::Source).await;
        let result = self.exchange(Side::Source, &format!("CWD {dir}")).await;
        match (
            self.classify(Side::Source, CommandKind::Cwd, &result),
            result,
        ) {
            (Disposition::Done, _) => {
                let back = match home {
                    Some(home) => format!("CWD {home}"),
                    None => "CDUP".into(),
                };
                let result = self.exchange(Side::Source, &back).await;
                if self.classify(Side::Source, CommandKind::Cwd, &result) != Disposition::Done {
                    self.src.close("could not return to the login directory");
                }
                Ok(())
            }
            (_, Ok(reply)) => Err(ListError::DirectoryMissing {
                dir: dir.to_owned(),
                reply,
            }),
            (disposition, Err(error)) => Err(self.list_failure("CWD", Err(error), disposition)),
        }
    }

    /// FEAT of the source (RFC 2389), asked once per session. The 211 reply is
    /// multi-line; it is read as any reply.
    pub(super) async fn features(&mut self) -> Vec<String> {
        if let Some(features) = &self.source_features {
            return features.clone();
        }
        self.ask_features(Side::Source).await
    }

    /// Open a passive data connection from here to the source, send `verb dir`, read
    /// the data to the end and the final reply.
    pub(super) async fn data_command(
        &mut self,
        verb: &str,
        dir: &str,
    ) -> Result<DataReply, ListError> {
        self.listing_protection().await?;
        let addr = self.source_data_address().await?;
        let connect = tokio::time::timeout(self.limits.connect_timeout, TcpStream::connect(addr));
        let tcp = match connect.await {
            Ok(Ok(stream)) => stream,
            Ok(Err(e)) => {
                return Err(ListError::DataConnection {
                    addr,
                    detail: e.to_string(),
                })
            }
            Err(_) => {
                return Err(ListError::DataConnection {
                    addr,
                    detail: format!("no connection within {:?}", self.limits.connect_timeout),
                })
            }
        };
        let line = if dir.is_empty() {
            verb.to_owned()
        } else {
            format!("{verb} {dir}")
        };
        let kind = CommandKind::from_verb(verb);
        let result = self.exchange(Side::Source, &line).await;
        match (self.classify(Side::Source, kind, &result), result) {
            (Disposition::Preliminary, Ok(_)) => {}
            (Disposition::Done, Ok(reply)) => {
                // Done without a 1yz: nothing more to read on the control connection.
                let mut stream = self.listing_stream(tcp, addr).await?;
                return Ok(DataReply::Data(
                    self.read_data(&mut stream, addr).await?,
                    reply,
                ));
            }
            (disposition, Ok(reply)) => {
                return Ok(DataReply::Negative {
                    command: verb.to_owned(),
                    reply,
                    disposition,
                })
            }
            (disposition, Err(error)) => {
                return Err(self.list_failure(verb, Err(error), disposition))
            }
        }
        // Under PROT P the server starts its TLS handshake after the 1yz, not before.
        let mut stream = self.listing_stream(tcp, addr).await?;
        let data = self.read_data(&mut stream, addr).await;
        // proFTPD holds its final reply until the receiver closes.
        drop(stream);
        let deadline = self.reply_deadline();
        let result = self.read_reply(Side::Source, verb, deadline).await;
        // A listing left unread still has its final reply (226, or 426 for the closed data
        // connection): it is read first, so the connection stays in step for the next
        // listing of the walk.
        let data = data?;
        match (self.classify(Side::Source, kind, &result), result) {
            (Disposition::Done, Ok(reply)) => Ok(DataReply::Data(data, reply)),
            (disposition, Ok(reply)) => Ok(DataReply::Negative {
                command: verb.to_owned(),
                reply,
                disposition,
            }),
            (disposition, Err(error)) => Err(self.list_failure(verb, Err(error), disposition)),
        }
    }

    /// PROT P before a listing when the source's data policy asks for TLS (a copy in clear
    /// may have set PROT C); under `required`, a listing that cannot be TLS is refused.
    async fn listing_protection(&mut self) -> Result<(), ListError> {
        let policy = self.logins[0].tls.data;
        if policy == TlsPolicy::Off {
            return Ok(());
        }
        let protected = match self.src.set_prot(true).await {
            Ok(done) => done,
            Err(error) => {
                return Err(ListError::Session {
                    host: self.logins[0].host.clone(),
                    command: "PROT".into(),
                    error,
                })
            }
        };
        if !protected && policy == TlsPolicy::Required {
            return Err(ListError::DataTls {
                host: self.logins[0].host.clone(),
                detail: "the data policy requires TLS and PROT P is not in force (no TLS on the control connection, or PROT P refused)".into(),
            });
        }
        Ok(())
    }

    async fn listing_stream(&self, tcp: TcpStream, addr: SocketAddr) -> Result<Stream, ListError> {
        self.src
            .data_stream(
                tcp,
                self.limits.connect_timeout.max(self.limits.reply_timeout),
            )
            .await
            .map_err(|detail| ListError::DataConnection { addr, detail })
    }

    async fn read_data(&self, stream: &mut Stream, addr: SocketAddr) -> Result<Vec<u8>, ListError> {
        let limit = self.limits.max_listing_bytes;
        let mut data = Vec::new();
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            let read = tokio::time::timeout(self.limits.reply_timeout, stream.read(&mut buf));
            match read.await {
                Ok(Ok(0)) => return Ok(data),
                Ok(Ok(n)) => {
                    if data.len() + n > limit {
                        return Err(ListError::TooLarge { limit });
                    }
                    data.extend_from_slice(&buf[..n]);
                }
                // A TLS server that closes without close_notify: the end of the data, as
                // in clear; the final reply still decides whether the listing is whole.
                Ok(Err(e)) if stream.is_tls() && e.kind() == std::io::ErrorKind::UnexpectedEof => {
                    return Ok(data)
                }
                Ok(Err(e)) => {
                    return Err(ListError::DataConnection {
                        addr,
                        detail: format!("{e} ({:?})", io_failure(&e)),
                    })
                }
                Err(_) => {
                    return Err(ListError::DataConnection {
                        addr,
                        detail: format!("no data within {:?}", self.limits.reply_timeout),
                    })
                }
            }
        }
    }

    /// PASV (or EPSV) on the source; the address is its control peer with the port
    /// it announced (a foreign host in the reply is ignored, RFC 2577).
    async fn source_data_address(&mut self) -> Result<SocketAddr, ListError> {
        let peer_ip = self.src.peer().ip().to_canonical();
        let host = self.host(Side::Source).to_owned();
        let mut refused = Vec::new();
        for &command in self.passive_commands(Side::Source) {
            let result = self.exchange(Side::Source, command).await;
            let disposition = self.classify(Side::Source, CommandKind::from_verb(command), &result);
            let reply = match (disposition, result) {
                (Disposition::Done, Ok(reply)) => reply,
                (Disposition::NotSupported, Ok(reply)) => {
                    refused.push(format!("{command} answered {reply}"));
                    continue;
                }
                (disposition, result) => {
                    return Err(self.list_failure(command, result, disposition))
                }
            };
            let port = if command == "PASV" {
                let addr = reply.parse_numbers(parse_pasv).map_err(|error| {
                    ListError::BadPassiveReply {
                        host: host.clone(),
                        command: command.into(),
                        error,
                    }
                })?;
                if IpAddr::V4(*addr.ip()) != peer_ip {
                    self.note(
                        Side::Source,
                        &format!("PASV named {}, host ignored (RFC 2577)", addr.ip()),
                    );
                }
                addr.port()
            } else {
                reply
                    .parse_numbers(parse_epsv)
                    .map_err(|error| ListError::BadPassiveReply {
                        host: host.clone(),
                        command: command.into(),
                        error,
                    })?
            };
            if is_privileged_port(port) {
                return Err(ListError::PrivilegedPort { host, port });
            }
            return Ok(SocketAddr::new(peer_ip, port));
        }
        Err(ListError::NoPassiveMode {
            host,
            detail: refused.join("; "),
        })
    }
}

fn describe(result: &Result<Reply, SessionError>) -> String {
    match result {
        Ok(reply) => reply.to_string(),
        Err(error) => error.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::join;

    #[test]
    fn join_paths() {
        assert_eq!(join("", "a"), "a");
        assert_eq!(join(".", "a"), "a");
        assert_eq!(join("/", "a"), "/a");
        assert_eq!(join("pub", "a"), "pub/a");
        assert_eq!(join("/pub/", "a"), "/pub/a");
    }
}
