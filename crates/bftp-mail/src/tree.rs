//! The files of a recursive job in the text report, grouped by directory so that a tree of
//! 10,000 files stays readable: the counts of each directory first, then every file that did
//! not succeed with its replies and detail, then the succeeded files one line each under
//! their directory. The JSON attachment has every member in full.

use std::collections::BTreeMap;
use std::fmt::Write;

use bftp_api::MemberView;

/// The directory of a member's relative path (`""` for the root) and its last component.
fn split(name: &str) -> (&str, &str) {
    match name.rsplit_once('/') {
        Some((dir, file)) => (dir, file),
        None => ("", name),
    }
}

fn shown(dir: &str) -> String {
    if dir.is_empty() {
        "./".into()
    } else {
        format!("{dir}/")
    }
}

/// Appends the grouped file sections of `members` to `t`.
pub(crate) fn files_by_directory(members: &[MemberView], t: &mut String) {
    let mut dirs: BTreeMap<&str, BTreeMap<&str, usize>> = BTreeMap::new();
    for m in members {
        *dirs
            .entry(split(&m.name).0)
            .or_default()
            .entry(m.state.as_str())
            .or_default() += 1;
    }
    let _ = writeln!(
        t,
        "\nFiles ({}) in {} directories",
        members.len(),
        dirs.len()
    );
    for (dir, counts) in &dirs {
        let total: usize = counts.values().sum();
        let states: Vec<String> = counts.iter().map(|(s, n)| format!("{n} {s}")).collect();
        let _ = writeln!(
            t,
            "  {:<40} {total:>6} files: {}",
            shown(dir),
            states.join(", ")
        );
    }
    let failed: Vec<&MemberView> = members.iter().filter(|m| m.state != "succeeded").collect();
    if !failed.is_empty() {
        let _ = writeln!(t, "\nNot copied ({})", failed.len());
        for m in failed {
            let _ = writeln!(t, "  {:<26} {:>6}  {}", m.state, m.attempts, m.name);
            if let Some(r) = &m.source_reply {
                let code = r.code.map_or("---".to_string(), |c| c.to_string());
                let _ = writeln!(t, "      {:<13}{code} {}", "source:", r.text);
            }
            if let Some(r) = &m.dest_reply {
                let code = r.code.map_or("---".to_string(), |c| c.to_string());
                let _ = writeln!(t, "      {:<13}{code} {}", "destination:", r.text);
            }
            if let Some(route) = &m.route {
                let _ = writeln!(t, "      {:<13}{}", "route:", route.describe());
            }
            if let Some(d) = &m.detail {
                let _ = writeln!(t, "      {:<13}{d}", "detail:");
            }
        }
    }
    let mut ok: BTreeMap<&str, Vec<&MemberView>> = BTreeMap::new();
    for m in members.iter().filter(|m| m.state == "succeeded") {
        ok.entry(split(&m.name).0).or_default().push(m);
    }
    if !ok.is_empty() {
        let n: usize = ok.values().map(Vec::len).sum();
        let _ = writeln!(
            t,
            "\nCopied ({n}; bytes, proof, name; a file not copied by plain fxp has its route \
             under it)"
        );
        for (dir, files) in ok {
            let _ = writeln!(t, "  {}", shown(dir));
            for m in files {
                let bytes = m.bytes.map_or_else(|| "-".to_string(), |b| b.to_string());
                let proof = m.proof.as_deref().unwrap_or("-");
                let _ = writeln!(t, "    {bytes:>12} {proof:<8} {}", split(&m.name).1);
                // One line a file would double the text for nothing said: the plain third
                // party goes without one.
                if let Some(route) = m.route.as_ref().filter(|r| r.path != "fxp") {
                    let _ = writeln!(t, "        {:<13}{}", "route:", route.describe());
                }
            }
        }
    }
}
