//! The report bftpd mails when a job reaches a final state (RULES.md §3, §4.6, §8), and its
//! delivery.
//!
//! - [`render`] turns a finished or cancelled job into a [`Report`]: a subject, a plain-text
//!   body for people and a JSON document (schema [`REPORT_SCHEMA`]) for programs. Pure: no
//!   I/O, no clock; every secret the daemon hands in is scrubbed from every rendered string.
//! - [`ReportBuilder`] makes the same report from members given one at a time; a job of
//!   more than [`FULL_REPORT_MAX_MEMBERS`] is reported in brief, its files in a gzip
//!   attachment of JSON lines, so that any job's report takes linear time and bounded memory.
//! - [`build_message`] wraps a report into a MIME message with a stable Message-ID
//!   ([`message_id`]), so a repeated delivery of the same outbox entry is recognizable.
//! - [`Mailer`] delivers it over SMTP (plain, STARTTLS or implicit TLS) or through a sendmail
//!   binary, and classifies every failure as [`SendError::Transient`] (retry) or
//!   [`SendError::Permanent`] (give up); [`next_delay`] is the outbox's backoff.

mod config;
mod deliver;
mod error;
mod ledger;
mod message;
mod render;
mod retry;
mod scrub;
mod tree;

pub use config::{MailConfig, MailRetry, SmtpTls, TransportConfig};
pub use deliver::{classify_sendmail_exit, Class, Mailer, SendError};
pub use error::MailError;
pub use ledger::{
    ReportBuilder, FULL_REPORT_MAX_MEMBERS, LEDGER_MAX_BYTES, LEDGER_NOT_COPIED_MARGIN,
    NOT_COPIED_IN_TEXT,
};
pub use message::{build_message, build_watch_notice, message_id, Envelope};
pub use render::{render, Ledger, Report, ReportInput, REPORT_SCHEMA};
pub use retry::next_delay;
