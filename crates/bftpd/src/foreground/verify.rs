//! `bftp verify`: the engine's checks, from the daemon's vantage point (RULES.md §7).

use std::sync::Arc;

use bftp_api::{CheckView, DataPathVerdictView, VerifyResponse};
use bftp_core::JobSpec;
use bftp_ftp::{AddressCheck, Limits, Pair, ServerLogin, VerifyRequest};

use crate::views::engine::transcript_lines;

pub(super) fn logins(spec: &JobSpec) -> Option<(ServerLogin, ServerLogin)> {
    let dst = spec.destination.as_ref()?;
    Some((
        ServerLogin::from_endpoint(&spec.source),
        ServerLogin::from_endpoint(dst),
    ))
}

/// `bftp verify`: the engine's checks, from the daemon's vantage point; the data path
/// checked is the one the job would run with under `paths` (a relay `paths` forbids was
/// refused before: it is checked as third party only, as the job would run).
pub async fn verify(
    spec: &JobSpec,
    limits: &Limits,
    check: Arc<dyn AddressCheck>,
    paths: &crate::hosts::DataPathPolicy,
) -> VerifyResponse {
    let Some((src, dst)) = logins(spec) else {
        return VerifyResponse {
            ok: false,
            checks: vec![CheckView {
                name: "destination".into(),
                ok: false,
                detail: "a job without a destination has nothing to verify on a destination".into(),
            }],
            transcript: vec![],
            data_path: None,
        };
    };
    let request = VerifyRequest {
        source_path: spec.source.path.clone(),
        destination_path: spec
            .destination
            .as_ref()
            .map(|d| d.path.clone())
            .unwrap_or_default(),
        dest_command: spec.dest_command,
        proof: spec.proof,
        recursive: spec.recursive,
        data_path: paths.effective_data_path(spec),
    };
    let report = bftp_ftp::verify(&src, &dst, spec.params, limits, check.clone(), &request).await;
    let mut checks: Vec<CheckView> = report
        .checks
        .iter()
        .map(|c| CheckView {
            name: c.name.clone(),
            ok: c.ok,
            detail: c.detail.clone(),
        })
        .collect();
    let top_lists = report
        .check(bftp_ftp::CHECK_SOURCE_FILE)
        .is_some_and(|c| c.ok);
    if spec.recursive && top_lists {
        checks.push(source_tree(spec, &src, &dst, limits, check).await);
    }
    VerifyResponse {
        ok: checks.iter().all(|c| c.ok),
        checks,
        transcript: transcript_lines(&report.transcript),
        data_path: report
            .data_path
            .as_ref()
            .map(|v| verdict_view(spec.data_path, v)),
    }
}

/// The engine's finding about the data path, as words; `asked` is what the job asked for.
fn verdict_view(
    asked: Option<bftp_core::route::DataPath>,
    v: &bftp_ftp::DataPathVerdict,
) -> DataPathVerdictView {
    DataPathVerdictView {
        asked: asked.map(|p| p.as_str().to_owned()),
        path: v.path.as_str().to_owned(),
        would_take: v.would_take.as_str().to_owned(),
        reason: v.reason.as_str().to_owned(),
        detail: v.detail.clone(),
    }
}

pub const CHECK_SOURCE_TREE: &str = "source tree";

/// A recursive job's whole source tree, walked by the job's rules (`crate::lanes::walk`) on a pair
/// of its own: what a copy would make and copy, and what it would refuse.
async fn source_tree(
    spec: &JobSpec,
    src: &ServerLogin,
    dst: &ServerLogin,
    limits: &Limits,
    check: Arc<dyn AddressCheck>,
) -> CheckView {
    let walked = match Pair::open(src, dst, spec.params, limits, check).await {
        Ok(mut pair) => {
            let walked = crate::lanes::walk::walk_in_memory(&mut pair, spec.source_root()).await;
            pair.close().await;
            walked.map_err(|(reason, _)| reason)
        }
        Err(e) => Err(e.to_string()),
    };
    match walked {
        Ok(tree) => CheckView {
            name: CHECK_SOURCE_TREE.into(),
            ok: true,
            detail: tree_detail(&tree),
        },
        Err(detail) => CheckView {
            name: CHECK_SOURCE_TREE.into(),
            ok: false,
            detail,
        },
    }
}

/// How many refused entries [`tree_detail`] names; the rest are counted.
const REFUSED_SHOWN: usize = 20;

/// `N directories and M files (B bytes listed) would be copied`, then the refused entries
/// with their reasons.
fn tree_detail(tree: &crate::lanes::walk::Tree) -> String {
    let plural =
        |n: usize, one: &str, many: &str| format!("{n} {}", if n == 1 { one } else { many });
    let (refused, files): (Vec<_>, Vec<_>) = tree.members.iter().partition(|m| m.refused.is_some());
    let bytes: u64 = files.iter().filter_map(|m| m.size).sum();
    let mut out = format!(
        "{} (the root included) and {} ({}) would be copied",
        plural(tree.walk.listed.len(), "directory", "directories"),
        plural(files.len(), "file", "files"),
        plural(bytes as usize, "byte listed", "bytes listed"),
    );
    if refused.is_empty() {
        out.push_str("; nothing refused");
        return out;
    }
    out.push_str(&format!(
        "; {} refused (reported, not copied):",
        plural(refused.len(), "entry", "entries")
    ));
    for m in refused.iter().take(REFUSED_SHOWN) {
        let why = m.refused.as_deref().unwrap_or_default();
        out.push_str(&format!(
            " {:?}: {};",
            m.name,
            why.trim_start_matches("refused: ")
        ));
    }
    if refused.len() > REFUSED_SHOWN {
        out.push_str(&format!(" and {} more", refused.len() - REFUSED_SHOWN));
    }
    out.trim_end_matches(';').to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;
    use bftp_store::NewMember;

    #[test]
    fn a_tree_is_counted_and_its_refusals_named() {
        let m = |name: &str, size: u64, refused: Option<&str>| NewMember {
            name: name.into(),
            size: Some(size),
            modified: None,
            refused: refused.map(Into::into),
        };
        let mut tree = crate::lanes::walk::Tree::default();
        tree.walk.listed = vec!["".into(), "a".into(), "a/empty".into()];
        tree.members = vec![m("x", 3, None), m("a/y z", 4, None)];
        assert_eq!(
            tree_detail(&tree),
            "3 directories (the root included) and 2 files (7 bytes listed) would be copied; \
             nothing refused"
        );
        tree.members.push(m(
            "a/link",
            0,
            Some("refused: a symbolic link to \"x\": reported, not followed"),
        ));
        assert_eq!(
            tree_detail(&tree),
            "3 directories (the root included) and 2 files (7 bytes listed) would be copied; \
             1 entry refused (reported, not copied): \"a/link\": a symbolic link to \"x\": \
             reported, not followed"
        );
        tree.members
            .extend((0..25).map(|i| m(&format!("f{i}"), 0, Some("refused: a fifo"))));
        let d = tree_detail(&tree);
        assert!(d.contains("26 entries refused"), "{d}");
        assert!(d.ends_with("and 6 more"), "{d}");
    }
}
