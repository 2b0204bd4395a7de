//! A report as a MIME message. Deterministic: the same report and envelope give the same
//! bytes, so every delivery of one outbox entry sends the same message.

use std::time::SystemTime;

use lettre::message::header::{ContentTransferEncoding, ContentType, HeaderName, HeaderValue};
use lettre::message::{Attachment, Body, Mailbox, MultiPart, SinglePart};
use lettre::Message;

use crate::error::MailError;
use crate::render::Report;

/// Who a report goes to, and the identity of the message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Envelope {
    pub from: String,
    pub to: Vec<String>,
    /// From [`message_id`], stored in the outbox entry so that every delivery reuses it.
    pub message_id: String,
    /// When the report was made (the outbox entry's time, not the delivery's).
    pub date: SystemTime,
}

/// The Message-ID of job `job_id`'s report made at `stamp_ms` (ms since the Unix epoch):
/// `<bftp.job-42.1764500000000@host>`. The domain keeps only the characters a domain may
/// have (`localhost` if none is left).
pub fn message_id(job_id: u64, stamp_ms: u64, domain: &str) -> String {
    let domain: String = domain
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-'))
        .collect();
    let domain = domain.trim_matches('.');
    let domain = if domain.is_empty() {
        "localhost"
    } else {
        domain
    };
    format!("<bftp.job-{job_id}.{stamp_ms}@{domain}>")
}

/// A short notice that is not a job's report (a watch's late-arrival alarm): a plain text
/// message with the same headers as a report's but `X-BFTP-Watch: <id>` for `X-BFTP-Job`.
/// The subject's line breaks become spaces; the text is quoted-printable.
pub fn build_watch_notice(
    watch_id: u64,
    subject: &str,
    text: &str,
    env: &Envelope,
) -> Result<Message, MailError> {
    let mailbox = |field: &'static str, address: &str| -> Result<Mailbox, MailError> {
        address.parse::<Mailbox>().map_err(|e| MailError::Address {
            field,
            address: address.escape_debug().to_string(),
            reason: e.to_string(),
        })
    };
    if !is_message_id(&env.message_id) {
        return Err(MailError::MessageId {
            id: env.message_id.escape_debug().to_string(),
        });
    }
    if env.to.is_empty() {
        return Err(MailError::NoRecipients { job_id: watch_id });
    }
    let mut builder = Message::builder()
        .from(mailbox("from", &env.from)?)
        .subject(subject.replace(['\r', '\n'], " "))
        .date(env.date)
        .message_id(Some(env.message_id.clone()))
        .raw_header(HeaderValue::new(
            HeaderName::new_from_ascii_str("Auto-Submitted"),
            "auto-generated".to_string(),
        ))
        .raw_header(HeaderValue::new(
            HeaderName::new_from_ascii_str("X-BFTP-Watch"),
            watch_id.to_string(),
        ));
    for to in &env.to {
        builder = builder.to(mailbox("to", to)?);
    }
    let text = text.replace("\r\n", "\n").replace('\n', "\r\n");
    let body =
        Body::new_with_encoding(text, ContentTransferEncoding::QuotedPrintable).map_err(|_| {
            MailError::Build {
                job_id: watch_id,
                reason: "the text cannot be quoted-printable".into(),
            }
        })?;
    builder
        .singlepart(
            SinglePart::builder()
                .header(ContentType::TEXT_PLAIN)
                .body(body),
        )
        .map_err(|e| MailError::Build {
            job_id: watch_id,
            reason: e.to_string(),
        })
}

/// The report as a `multipart/mixed` message: the text (UTF-8, quoted-printable), the JSON
/// as an attachment `bftp-job-<id>.json` (base64) and, for a large job, its ledger
/// `bftp-job-<id>.members.jsonl.gz` (`application/gzip`, base64). Headers: From, To,
/// Subject, Date, Message-ID, `Auto-Submitted: auto-generated` (RFC 3834: no auto-replies to
/// it) and `X-BFTP-Job: <id>`.
///
/// Linear in the report's size: lettre turns a text body's bare LFs into CRLF with one
/// `String::insert` each (quadratic: minutes for a 100,000-line text), so the text and the
/// JSON are handed over with CRLF already, which leaves it nothing to insert.
pub fn build_message(report: &Report, env: &Envelope) -> Result<Message, MailError> {
    let job_id = report.job_id;
    let mailbox = |field: &'static str, address: &str| -> Result<Mailbox, MailError> {
        address.parse::<Mailbox>().map_err(|e| MailError::Address {
            field,
            address: address.escape_debug().to_string(),
            reason: e.to_string(),
        })
    };
    if !is_message_id(&env.message_id) {
        return Err(MailError::MessageId {
            id: env.message_id.escape_debug().to_string(),
        });
    }
    if env.to.is_empty() {
        return Err(MailError::NoRecipients { job_id });
    }
    let mut builder = Message::builder()
        .from(mailbox("from", &env.from)?)
        .subject(report.subject.replace(['\r', '\n'], " "))
        .date(env.date)
        .message_id(Some(env.message_id.clone()))
        .raw_header(HeaderValue::new(
            HeaderName::new_from_ascii_str("Auto-Submitted"),
            "auto-generated".to_string(),
        ))
        .raw_header(HeaderValue::new(
            HeaderName::new_from_ascii_str("X-BFTP-Job"),
            job_id.to_string(),
        ));
    for to in &env.to {
        builder = builder.to(mailbox("to", to)?);
    }
    let build = |reason: String| MailError::Build { job_id, reason };
    // Quoted-printable and base64 both encode '=', so this boundary cannot occur in either
    // part, whatever a server put in a reply.
    let boundary = format!(
        "=_bftp-report-{job_id}-{}",
        env.message_id
            .chars()
            .filter(char::is_ascii_alphanumeric)
            .collect::<String>()
    );
    let (text, json) = text_bodies(report);
    let text = Body::new_with_encoding(text, ContentTransferEncoding::QuotedPrintable)
        .map_err(|_| build("the text cannot be quoted-printable".into()))?;
    let json = Body::new_with_encoding(json, ContentTransferEncoding::Base64)
        .map_err(|_| build("the JSON cannot be base64".into()))?;
    let json_type = ContentType::parse("application/json").map_err(|e| build(e.to_string()))?;
    let mut body = MultiPart::mixed()
        .boundary(boundary)
        .singlepart(
            SinglePart::builder()
                .header(ContentType::TEXT_PLAIN)
                .body(text),
        )
        .singlepart(Attachment::new(format!("bftp-job-{job_id}.json")).body(json, json_type));
    if let Some(ledger) = &report.ledger {
        // Bytes, not a String: lettre base64-encodes them as they are, with no line endings
        // to convert.
        let gzip = Body::new_with_encoding(ledger.gzip.clone(), ContentTransferEncoding::Base64)
            .map_err(|_| build("the ledger cannot be base64".into()))?;
        let gzip_type = ContentType::parse("application/gzip").map_err(|e| build(e.to_string()))?;
        body = body.singlepart(Attachment::new(ledger.file_name.clone()).body(gzip, gzip_type));
    }
    builder.multipart(body).map_err(|e| build(e.to_string()))
}

/// The text and the JSON as lettre is handed them: with CRLF line endings already, so that
/// its own conversion, one `String::insert` per bare LF, has nothing to do.
fn text_bodies(report: &Report) -> (String, String) {
    (
        crlf_line_endings(&report.text),
        crlf_line_endings(&report.json),
    )
}

/// `text` with every line ending CRLF, in one pass (see [`build_message`]).
pub(crate) fn crlf_line_endings(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + text.len() / 16);
    let mut after_cr = false;
    for c in text.chars() {
        if c == '\n' && !after_cr {
            out.push('\r');
        }
        after_cr = c == '\r';
        out.push(c);
    }
    out
}

/// `<left@right>` with printable ASCII and no spaces: what a Message-ID header may carry.
fn is_message_id(id: &str) -> bool {
    let Some(inner) = id.strip_prefix('<').and_then(|s| s.strip_suffix('>')) else {
        return false;
    };
    let Some((left, right)) = inner.split_once('@') else {
        return false;
    };
    !left.is_empty()
        && !right.is_empty()
        && inner
            .chars()
            .all(|c| c.is_ascii_graphic() && !matches!(c, '<' | '>' | '"' | '\\'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn message_id_is_stable_and_clean() {
        assert_eq!(
            message_id(42, 1_764_500_000_000, "files.example.org"),
            "<bftp.job-42.1764500000000@files.example.org>"
        );
        assert_eq!(
            message_id(42, 1_764_500_000_000, "files.example.org"),
            message_id(42, 1_764_500_000_000, "files.example.org")
        );
        assert_eq!(message_id(1, 2, "ev>il\r\nX: y"), "<bftp.job-1.2@evilXy>");
        assert_eq!(message_id(1, 2, ""), "<bftp.job-1.2@localhost>");
        assert_eq!(message_id(1, 2, "..."), "<bftp.job-1.2@localhost>");
    }

    /// Issue 27: lettre inserts a CR before each bare LF of a text body with one
    /// `String::insert` (quadratic: a 100,000-file report froze bftpd for minutes); what it
    /// is handed has none.
    #[test]
    fn lettre_is_handed_no_bare_line_feed() {
        let lines: String = (0..5000).map(|i| format!("line {i}\n")).collect();
        let report = Report {
            job_id: 1,
            subject: "s".into(),
            text: lines.clone(),
            json: lines,
            ledger: None,
        };
        let (text, json) = text_bodies(&report);
        for body in [text, json] {
            let bare = body
                .as_bytes()
                .windows(2)
                .filter(|w| w[1] == b'\n' && w[0] != b'\r')
                .count();
            assert_eq!(bare, 0);
            assert_eq!(body.matches("\r\n").count(), 5000);
        }
    }

    #[test]
    fn line_endings_become_crlf_once() {
        for (text, want) in [
            ("", ""),
            ("a\nb\n", "a\r\nb\r\n"),
            ("\n", "\r\n"),
            ("a\r\nb", "a\r\nb"),
            ("ü\n\n", "ü\r\n\r\n"),
            ("lone\rcr\n", "lone\rcr\r\n"),
        ] {
            assert_eq!(crlf_line_endings(text), want, "{text:?}");
        }
    }

    #[test]
    fn message_ids_are_checked() {
        for (id, ok) in [
            ("<bftp.job-1.2@h>", true),
            ("bftp.job-1.2@h", false),
            ("<bftp.job-1.2>", false),
            ("<a@b>\r\nBcc: x@y", false),
            ("<a b@c>", false),
            ("<@c>", false),
        ] {
            assert_eq!(is_message_id(id), ok, "{id:?}");
        }
    }
}
