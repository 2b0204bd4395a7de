//! Refusals that repeat: the start of a per-server capability memory.
//!
//! A transient reply (4yz) says "not now", but some servers send one for what their
//! configuration will never allow: proFTPD's stock `AllowStoreRestart off` answers every
//! APPE with `451 ...: Append/Restart not permitted, try again`. Retried as transient, such
//! a member waits out the whole retry policy (days). So bftpd remembers, per server and
//! command, the last transient refusal it got ([`RefusalMemory`], kept in the store), and
//! when the same refusal comes back unchanged on another attempt it ends the member for good
//! ([`settles`]), naming the server setting where it is a known one ([`known_refusal`]).
//!
//! Why the second sighting: one attempt's refusal is a "not now" that bftpd must believe;
//! the same code and the same words again after a backoff (or from the same server to
//! another job) is the server's configuration speaking, and a third, fourth... attempt
//! costs the operator hours for nothing. Only refusals of the command itself count: kinds
//! that depend on the moment (421 closing, 425/426 data connection, 450 busy, 452 storage,
//! a lost connection, an operator's override) never settle by repetition.
//!
//! Pure: the caller passes `now` and reads and writes the memory.

use crate::reply::{CommandKind, ReplyCode, TransientKind};
use crate::Timestamp;

/// How many attempts must have got the same refusal, unchanged, for it to be settled.
pub const REPEATS_TO_SETTLE: u32 = 2;

/// How long a sighting is evidence: a refusal seen again after longer than this starts the
/// count over (a week: more than the gap between two attempts of any usual retry policy,
/// short enough that an old, forgotten refusal does not end a new job's file at its first
/// attempt).
pub const MEMORY_WINDOW_MS: u64 = 7 * 24 * 3600 * 1000;

/// The longest refusal text kept (characters); longer texts are cut, the cut marked.
pub const MAX_TEXT_CHARS: usize = 300;

/// Which server and command a memory is about: the host as written in the job (compared
/// lower-case), its port, and the command verb (upper-case).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct RefusalKey {
    pub host: String,
    pub port: u16,
    pub command: String,
}

impl RefusalKey {
    pub fn new(host: &str, port: u16, command: &str) -> RefusalKey {
        let host = host.trim();
        let host = host
            .strip_prefix('[')
            .and_then(|h| h.strip_suffix(']'))
            .unwrap_or(host);
        RefusalKey {
            host: host.strip_suffix('.').unwrap_or(host).to_ascii_lowercase(),
            port,
            command: command.trim().to_ascii_uppercase(),
        }
    }
}

/// One attempt's transient refusal, as compared with the memory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sighting {
    pub code: ReplyCode,
    /// The reply's text, through [`comparable_text`].
    pub text: String,
    /// The job and attempt that got it: a repeat counts only from another attempt.
    pub job: u64,
    pub attempt: u32,
}

/// What bftpd remembers of a server's refusal of a command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RefusalMemory {
    pub code: ReplyCode,
    pub text: String,
    pub first_seen: Timestamp,
    pub last_seen: Timestamp,
    /// Attempts that got this refusal unchanged (one attempt counts once).
    pub count: u32,
    /// The job and attempt of the last sighting.
    pub last_job: u64,
    pub last_attempt: u32,
}

/// The memory after `seen`: the same code and text from another attempt counts one more;
/// from the same attempt (another file, a second try) only moves `last_seen`; a different
/// refusal, or one last seen longer than [`MEMORY_WINDOW_MS`] ago, replaces the memory,
/// counting from one.
pub fn observe(previous: Option<&RefusalMemory>, seen: &Sighting, now: Timestamp) -> RefusalMemory {
    let recent = |p: &RefusalMemory| now.0.saturating_sub(p.last_seen.0) <= MEMORY_WINDOW_MS;
    match previous {
        Some(p) if p.code == seen.code && p.text == seen.text && recent(p) => {
            let same_attempt = p.last_job == seen.job && p.last_attempt == seen.attempt;
            RefusalMemory {
                last_seen: now,
                count: if same_attempt {
                    p.count
                } else {
                    p.count.saturating_add(1)
                },
                last_job: seen.job,
                last_attempt: seen.attempt,
                ..p.clone()
            }
        }
        _ => RefusalMemory {
            code: seen.code,
            text: seen.text.clone(),
            first_seen: now,
            last_seen: now,
            count: 1,
            last_job: seen.job,
            last_attempt: seen.attempt,
        },
    }
}

/// Whether a transient refusal of this kind is one that repetition may settle: a refusal
/// of the command itself (451 local error, an unlisted 4yz), not one that depends on the
/// moment.
pub fn repeatable(kind: TransientKind) -> bool {
    matches!(kind, TransientKind::LocalError | TransientKind::Unlisted(_))
}

/// Whether the member that got `kind` ends for good, the memory being `memory` (after this
/// sighting).
pub fn settles(kind: TransientKind, memory: &RefusalMemory) -> bool {
    repeatable(kind) && memory.count >= REPEATS_TO_SETTLE
}

/// The reply text as refusals are compared and stored: each of `arguments` (the command's
/// path, the file's name; those of three characters or more) replaced by `<path>`, so that
/// one refusal of two files reads the same; whitespace runs collapsed; at most
/// [`MAX_TEXT_CHARS`] characters.
pub fn comparable_text(text: &str, arguments: &[&str]) -> String {
    let mut args: Vec<&str> = arguments
        .iter()
        .map(|a| a.trim())
        // A name of one or two characters would match inside ordinary words.
        .filter(|a| a.chars().count() >= 3)
        .collect();
    // Longest first: a path is replaced whole before its file name could match inside it.
    args.sort_by_key(|a| std::cmp::Reverse(a.len()));
    let mut out = text.to_owned();
    for a in args {
        out = out.replace(a, "<path>");
    }
    let collapsed = out.split_whitespace().collect::<Vec<_>>().join(" ");
    match collapsed.char_indices().nth(MAX_TEXT_CHARS) {
        Some((at, _)) => format!("{}…", &collapsed[..at]),
        None => collapsed,
    }
}

/// A refusal whose cause is a known server setting.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KnownRefusal {
    /// The server software that says it.
    pub server: &'static str,
    /// The setting that allows the command.
    pub setting: &'static str,
    /// What the server refuses under its current setting.
    pub refuses: &'static str,
}

struct KnownEntry {
    commands: &'static [CommandKind],
    code: u16,
    /// Matched in the text ignoring ASCII case.
    words: &'static str,
    known: KnownRefusal,
}

/// Refusals whose cause is known, with the setting that ends them.
const KNOWN: &[KnownEntry] = &[
    // proFTPD mod_xfer, `AllowStoreRestart off` (its default): APPE, and STOR after REST.
    KnownEntry {
        commands: &[CommandKind::Appe, CommandKind::Stor],
        code: 451,
        words: "append/restart not permitted",
        known: KnownRefusal {
            server: "proFTPD",
            setting: "AllowStoreRestart on",
            refuses: "appending to a file (APPE) and resuming an upload",
        },
    },
    // proFTPD mod_xfer, `AllowOverwrite off` (its default): STOR onto an existing file.
    KnownEntry {
        commands: &[CommandKind::Stor, CommandKind::Appe],
        code: 550,
        words: "overwrite permission denied",
        known: KnownRefusal {
            server: "proFTPD",
            setting: "AllowOverwrite on",
            refuses: "replacing an existing file",
        },
    },
];

/// The known cause of this refusal of `command`, if the table has it.
pub fn known_refusal(command: CommandKind, code: ReplyCode, text: &str) -> Option<KnownRefusal> {
    let text = text.to_ascii_lowercase();
    KNOWN
        .iter()
        .find(|e| e.code == code.get() && e.commands.contains(&command) && text.contains(e.words))
        .map(|e| e.known)
}

/// What the ledger says of a member ended by a repeated refusal: the server, the command,
/// the refusal, how often and since when it came, and the setting that ends it where known.
/// `server` names the side and host (`the destination server ftp.example.net`).
pub fn explain(server: &str, command: &str, memory: &RefusalMemory) -> String {
    let mut out = format!(
        "{server} refused {command} with the same transient reply on {count} attempts \
         ({code} {text}): a refusal that comes back unchanged is the server's configuration, \
         not a passing condition, so the file is not retried",
        count = memory.count,
        code = memory.code,
        text = memory.text,
    );
    if let Some(k) = known_refusal(CommandKind::from_verb(command), memory.code, &memory.text) {
        out.push_str(&format!(
            "; {server_kind} refuses {refuses} unless the server's configuration has \
             `{setting}`",
            server_kind = k.server,
            refuses = k.refuses,
            setting = k.setting,
        ));
    }
    out
}

/// The memory of one name at one destination: the command verb and the destination path
/// (`STOR in/trail `), kept beside the per-command memories. A name is the file's, not the
/// server's: one name's repeated refusal says nothing about another's.
pub fn name_key(host: &str, port: u16, verb: &str, path: &str) -> RefusalKey {
    let server = RefusalKey::new(host, port, verb);
    RefusalKey {
        command: format!("{} {path}", server.command),
        ..server
    }
}

/// How a destination can fail a name the same way on every attempt, whatever the moment:
/// the failures that [`name_settles`] may end by repetition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NameFailure {
    /// The server confirmed the upload (2yz) and then has no file under the name asked:
    /// it stored the bytes under a name of its own (Pure-FTPd turns a trailing space into
    /// `_`), or something removed the file at once.
    NotStoredAsNamed,
    /// A transient refusal (4yz) of the data command for this name.
    Refused(TransientKind),
}

/// RULES.md §5: whether a name's failure, seen unchanged on `memory.count` attempts (the
/// memory of [`name_key`], after this sighting), ends the member for good. A name the server
/// never stores as asked comes back the same way after any backoff, and each attempt
/// leaves another file under the server's own name; a refusal of a name by a kind that
/// depends on the moment (a busy file, storage, the connection) does not settle.
pub fn name_settles(failure: NameFailure, memory: &RefusalMemory) -> bool {
    let by_kind = match failure {
        NameFailure::NotStoredAsNamed => true,
        NameFailure::Refused(kind) => repeatable(kind),
    };
    by_kind && memory.count >= REPEATS_TO_SETTLE
}

/// What is known to make a server store or refuse a name differently from what was asked:
/// the hint the explanation gives, where the name has such a trait.
pub fn name_trait(name: &str) -> Option<&'static str> {
    let last = name.rsplit('/').next().unwrap_or(name);
    if last.ends_with(' ') {
        Some("the name ends with a space, which some servers change (Pure-FTPd stores it as `_`)")
    } else if last.starts_with(' ') {
        Some("the name starts with a space, which some servers drop or change")
    } else if name.contains('\\') {
        Some("the name holds a backslash, which some servers refuse (Pure-FTPd: 553)")
    } else {
        None
    }
}

/// What the ledger says of a member ended because its name failed the same way on
/// repeated attempts.
pub fn explain_name(
    server: &str,
    name: &str,
    failure: NameFailure,
    memory: &RefusalMemory,
) -> String {
    let what = match failure {
        NameFailure::NotStoredAsNamed => format!(
            "confirmed the upload of {name:?} and then had no file under that name \
             ({code} {text}) on {count} attempts: it stores this name as another one, and \
             bftpd cannot prove a file under the server's own name is its copy, so none is \
             deleted",
            code = memory.code,
            text = memory.text,
            count = memory.count,
        ),
        NameFailure::Refused(_) => format!(
            "refused the name {name:?} with the same transient reply on {count} attempts \
             ({code} {text})",
            code = memory.code,
            text = memory.text,
            count = memory.count,
        ),
    };
    let mut out = format!("{server} {what}; the file is not retried");
    if let Some(t) = name_trait(name) {
        out.push_str(&format!(" ({t})"));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn code(n: u16) -> ReplyCode {
        ReplyCode::new(n).unwrap()
    }

    fn seen(n: u16, text: &str, job: u64, attempt: u32) -> Sighting {
        Sighting {
            code: code(n),
            text: text.into(),
            job,
            attempt,
        }
    }

    const PROFTPD_451: &str = "<path>: Append/Restart not permitted, try again";

    #[test]
    fn a_name_failed_the_same_way_on_repeated_attempts_settles() {
        use TransientKind as T;
        let memory = |count| RefusalMemory {
            code: code(550),
            text: "Can't check for file existence".into(),
            first_seen: Timestamp(0),
            last_seen: Timestamp(0),
            count,
            last_job: 1,
            last_attempt: count,
        };
        // (failure, attempts that saw it unchanged, settles)
        let table: &[(NameFailure, u32, bool)] = &[
            (NameFailure::NotStoredAsNamed, 1, false),
            (NameFailure::NotStoredAsNamed, 2, true),
            (NameFailure::NotStoredAsNamed, 7, true),
            (NameFailure::Refused(T::LocalError), 1, false),
            (NameFailure::Refused(T::LocalError), 2, true),
            (NameFailure::Refused(T::Unlisted(code(454))), 2, true),
            // Kinds of the moment never settle by repetition.
            (NameFailure::Refused(T::FileBusy), 5, false),
            (NameFailure::Refused(T::Storage), 5, false),
            (NameFailure::Refused(T::DataConnection), 5, false),
            (NameFailure::Refused(T::Reconnect), 5, false),
        ];
        for &(failure, count, settles) in table {
            assert_eq!(
                name_settles(failure, &memory(count)),
                settles,
                "{failure:?} on {count} attempts"
            );
        }
        // One name's memory is not another's, nor the command's.
        let a = name_key("Ftp.Example", 21, "stor", "in/trail ");
        assert_eq!(a.command, "STOR in/trail ");
        assert_eq!(a.host, "ftp.example");
        assert_ne!(a, name_key("ftp.example", 21, "STOR", "in/trail_"));
        assert_ne!(a, RefusalKey::new("ftp.example", 21, "STOR"));
        // The traits the explanation names.
        let traits: &[(&str, Option<&str>)] = &[
            ("in/trail ", Some("ends with a space")),
            ("in/ lead", Some("starts with a space")),
            ("in/back\\slash", Some("backslash")),
            ("in/plain.dat", None),
            ("dir /file", None),
        ];
        for &(name, t) in traits {
            let got = name_trait(name);
            assert_eq!(got.is_some(), t.is_some(), "{name:?}: {got:?}");
            if let (Some(got), Some(t)) = (got, t) {
                assert!(got.contains(t), "{name:?}: {got}");
            }
        }
        let text = explain_name(
            "the destination server 127.0.0.2",
            "in/trail ",
            NameFailure::NotStoredAsNamed,
            &memory(2),
        );
        assert!(
            text.contains("\"in/trail \"")
                && text.contains("on 2 attempts")
                && text.contains("Pure-FTPd stores it as `_`"),
            "{text}"
        );
    }

    #[test]
    fn known_refusals_table() {
        use CommandKind as C;
        // (command, code, text, setting)
        let table: &[(C, u16, &str, Option<&str>)] = &[
            (
                C::Appe,
                451,
                "/in/log.txt: Append/Restart not permitted, try again",
                Some("AllowStoreRestart on"),
            ),
            (
                C::Appe,
                451,
                "APPEND/RESTART NOT PERMITTED",
                Some("AllowStoreRestart on"),
            ),
            (
                C::Stor,
                451,
                "f: Append/Restart not permitted, try again",
                Some("AllowStoreRestart on"),
            ),
            (
                C::Stor,
                550,
                "in/f.bin: Overwrite permission denied",
                Some("AllowOverwrite on"),
            ),
            // Another code, command or text: not that refusal.
            (C::Appe, 450, "Append/Restart not permitted", None),
            (C::Retr, 451, "Append/Restart not permitted", None),
            (C::Appe, 451, "Requested action aborted: local error", None),
            (C::Retr, 550, "Overwrite permission denied", None),
        ];
        for &(command, n, text, setting) in table {
            assert_eq!(
                known_refusal(command, code(n), text).map(|k| k.setting),
                setting,
                "{command:?} {n} {text}"
            );
        }
    }

    #[test]
    fn memory_counts_attempts_not_sightings() {
        let t = |ms| Timestamp(ms);
        // (sighting, count after)
        let steps: &[(Sighting, u32)] = &[
            (seen(451, PROFTPD_451, 1, 1), 1),
            // The same attempt again (another file of the job): still one attempt.
            (seen(451, PROFTPD_451, 1, 1), 1),
            // The next attempt: two.
            (seen(451, PROFTPD_451, 1, 2), 2),
            // Another job's attempt, the same refusal: three.
            (seen(451, PROFTPD_451, 7, 1), 3),
            // Changed text: a new memory.
            (seen(451, "Disk error", 7, 2), 1),
            // Changed code: a new memory.
            (seen(452, "Disk error", 7, 3), 1),
        ];
        let mut memory: Option<RefusalMemory> = None;
        for (i, (s, count)) in steps.iter().enumerate() {
            let next = observe(memory.as_ref(), s, t(i as u64 * 1000));
            assert_eq!(next.count, *count, "step {i}");
            assert_eq!((next.last_job, next.last_attempt), (s.job, s.attempt));
            assert_eq!(next.last_seen, t(i as u64 * 1000));
            memory = Some(next);
        }
        let m = memory.unwrap();
        assert_eq!(
            (m.code, m.text.as_str(), m.first_seen),
            (code(452), "Disk error", t(5000))
        );
        // Seen again within the window: counted; after it: the count starts over.
        let again = |ms| observe(Some(&m), &seen(452, "Disk error", 8, 1), t(ms));
        assert_eq!(again(5000 + MEMORY_WINDOW_MS).count, 2);
        let after = again(5001 + MEMORY_WINDOW_MS);
        assert_eq!(
            (after.count, after.first_seen),
            (1, t(5001 + MEMORY_WINDOW_MS))
        );
        // The first sighting's time stays while the refusal is unchanged.
        let a = observe(None, &seen(451, PROFTPD_451, 1, 1), t(10));
        let b = observe(Some(&a), &seen(451, PROFTPD_451, 1, 2), t(20));
        assert_eq!((b.first_seen, b.last_seen), (t(10), t(20)));
    }

    #[test]
    fn settles_only_repeatable_kinds_on_the_second_attempt() {
        use TransientKind as T;
        let once = observe(None, &seen(451, PROFTPD_451, 1, 1), Timestamp(0));
        let twice = observe(Some(&once), &seen(451, PROFTPD_451, 1, 2), Timestamp(1));
        // (kind, settles once, settles twice)
        let table: &[(TransientKind, bool, bool)] = &[
            (T::LocalError, false, true),
            (T::Unlisted(code(455)), false, true),
            (T::Reconnect, false, false),
            (T::DataConnection, false, false),
            (T::FileBusy, false, false),
            (T::Storage, false, false),
            (T::Protocol, false, false),
            (T::Overridden(code(550)), false, false),
            (
                T::Transport(crate::reply::TransportFailure::Reset),
                false,
                false,
            ),
        ];
        for &(kind, a, b) in table {
            assert_eq!(settles(kind, &once), a, "{kind:?} once");
            assert_eq!(settles(kind, &twice), b, "{kind:?} twice");
        }
    }

    #[test]
    fn comparable_text_table() {
        let long = "x".repeat(MAX_TEXT_CHARS + 10);
        let cut = format!("{}…", "x".repeat(MAX_TEXT_CHARS));
        // (text, arguments, expected)
        let table: &[(&str, &[&str], &str)] = &[
            (
                "/in/a.txt: Append/Restart not permitted, try again",
                &["/in/a.txt", "a.txt"],
                PROFTPD_451,
            ),
            // The same refusal of another file reads the same.
            (
                "/in/b.txt: Append/Restart not permitted, try again",
                &["a.txt", "/in/b.txt", "b.txt"],
                PROFTPD_451,
            ),
            // Only the name echoed.
            ("b.txt: busy", &["/in/b.txt", "b.txt"], "<path>: busy"),
            // Whitespace runs, line breaks of a multi-line reply.
            ("a  b\n c", &[], "a b c"),
            // Empty and very short arguments change nothing.
            ("text", &["", "  ", "t", "ex"], "text"),
            (&long, &[], &cut),
        ];
        for &(text, args, expected) in table {
            assert_eq!(comparable_text(text, args), expected, "{text:?}");
        }
    }

    #[test]
    fn keys_compare_host_and_verb_without_case() {
        assert_eq!(
            RefusalKey::new("FTP.Example.NET.", 21, "appe"),
            RefusalKey::new("ftp.example.net", 21, "APPE")
        );
        assert_eq!(RefusalKey::new("[::1]", 21, "APPE").host, "::1");
        assert_ne!(
            RefusalKey::new("h", 21, "APPE"),
            RefusalKey::new("h", 2121, "APPE")
        );
    }

    #[test]
    fn explanation_names_the_setting_where_known() {
        let first = observe(None, &seen(451, PROFTPD_451, 1, 1), Timestamp(0));
        let m = observe(Some(&first), &seen(451, PROFTPD_451, 1, 2), Timestamp(1));
        let text = explain("the destination server 127.0.0.3", "APPE", &m);
        for needle in [
            "the destination server 127.0.0.3 refused APPE",
            "on 2 attempts",
            "451 <path>: Append/Restart not permitted, try again",
            "proFTPD",
            "`AllowStoreRestart on`",
        ] {
            assert!(text.contains(needle), "{needle:?} not in {text}");
        }
        let other = observe(None, &seen(451, "Local error", 1, 1), Timestamp(0));
        let text = explain("the source server h", "RETR", &other);
        assert!(!text.contains('`'), "{text}");
        assert!(text.contains("451 Local error"), "{text}");
    }
}
