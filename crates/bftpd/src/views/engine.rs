//! Engine results as the API shows them: transcript lines, a server's last reply, the size
//! evidence of a copy, and one foreground file's result.

use bftp_api::{FileResult, ReplyView};
use bftp_ftp::{CopyOutcome, LastReply, SizeCheck, Transcript};

pub fn transcript_lines(t: &Transcript) -> Vec<String> {
    t.to_string().lines().map(str::to_string).collect()
}

pub fn reply_view(r: &LastReply) -> ReplyView {
    ReplyView {
        code: r.code.map(u16::from),
        text: format!("{}: {}", r.command, r.text),
    }
}

pub fn evidence(c: &SizeCheck) -> String {
    match c {
        SizeCheck::Equal {
            source,
            destination,
            destination_before: Some(before),
        } => {
            format!("sizes agree: destination grew from {before} to {destination} bytes by the source's {source}")
        }
        SizeCheck::Equal { destination, .. } => format!("sizes equal ({destination} bytes)"),
        SizeCheck::TextType {
            source,
            destination,
        } => format!(
            "text type: sizes not compared (source {}, destination {})",
            source.map_or("?".into(), |s| s.to_string()),
            destination.map_or("?".into(), |s| s.to_string())
        ),
        SizeCheck::NotAvailable(why) => {
            format!("no size evidence: {why}; both servers reported success")
        }
    }
}

pub fn file_result(name: &str, outcome: &CopyOutcome, seconds: f64) -> FileResult {
    let report = outcome.report();
    let (state, bytes, evidence_text, stored_as, detail) = match outcome {
        CopyOutcome::Succeeded {
            bytes,
            size_check,
            stou_name,
            ..
        } => (
            "succeeded",
            *bytes,
            Some(evidence(size_check)),
            stou_name.clone(),
            None,
        ),
        // A failed unique copy's file is left (bftp transfer cannot prove it is not another
        // copy's): its name is shown.
        CopyOutcome::Transient { failure, .. } => (
            "failed_transient",
            None,
            None,
            report.stou_left.last().cloned(),
            Some(failure.to_string()),
        ),
        CopyOutcome::Permanent { failure, .. } => (
            "failed_permanent",
            None,
            None,
            report.stou_left.last().cloned(),
            Some(failure.to_string()),
        ),
    };
    FileResult {
        name: name.to_string(),
        state: state.into(),
        bytes,
        evidence: evidence_text,
        stored_as,
        source_reply: report
            .source_final
            .as_ref()
            .or(report.source_reply.as_ref())
            .map(reply_view),
        dest_reply: report
            .destination_final
            .as_ref()
            .or(report.destination_reply.as_ref())
            .map(reply_view),
        fallbacks: report.fallbacks.iter().map(|f| format!("{f:?}")).collect(),
        tls: None,
        detail,
        seconds,
        proof: None,
        route: crate::lanes::route::travelled(report).map(|t| {
            Box::new(super::route_view(
                &t.route,
                t.relayed_bytes,
                t.stream_sha256.as_deref(),
            ))
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bftp_core::route::{RelayReason, Route};

    /// Issue 29: a foreground file's result says how the copy travelled, as a job's member
    /// does, by the same rule (`crate::lanes::route::travelled`).
    #[test]
    fn a_foreground_result_names_the_route() {
        let outcome = |route: Option<Route>| CopyOutcome::Succeeded {
            bytes: Some(4),
            size_check: SizeCheck::NotAvailable("no SIZE".into()),
            stou_name: None,
            report: bftp_ftp::AttemptReport {
                route,
                relayed: Some(bftp_ftp::RelayStats {
                    bytes: 4,
                    sha256: None,
                    mover: bftp_ftp::Mover::Kernel,
                    tls: [false, false],
                }),
                ..Default::default()
            },
        };
        let r = file_result("a", &outcome(None), 0.1);
        assert_eq!(r.route, None);
        let r = file_result(
            "a",
            &outcome(Some(Route::Relay(RelayReason::DataTls {
                detail: "no SSCN".into(),
            }))),
            0.1,
        );
        assert_eq!(
            r.route.map(|r| r.describe()).as_deref(),
            Some("relay (data TLS: no SSCN); 4 bytes relayed")
        );
    }
}
