//! `bftp man`: the manual pages, generated from the clap definitions (clap_mangen).

use std::path::PathBuf;

use anyhow::Context;
use clap::{Args, CommandFactory};

use crate::exit::Exit;
use crate::Cli;

#[derive(Args, Debug)]
pub struct ManArgs {
    /// Write bftp.1 and a page per subcommand (bftp-submit.1, ...) into this directory
    /// instead of printing bftp(1)
    #[arg(long, value_name = "DIR")]
    pub dir: Option<PathBuf>,
}

pub fn run(args: &ManArgs) -> anyhow::Result<Exit> {
    let cmd = Cli::command();
    match &args.dir {
        Some(dir) => clap_mangen::generate_to(cmd, dir)
            .with_context(|| format!("writing manual pages to {}", dir.display()))?,
        None => crate::output::emit(&page(cmd)?)?,
    }
    Ok(Exit::Success)
}

fn page(cmd: clap::Command) -> anyhow::Result<String> {
    let mut out = Vec::new();
    clap_mangen::Man::new(cmd)
        .render(&mut out)
        .context("rendering the manual page")?;
    Ok(String::from_utf8(out)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_page_names_every_subcommand_and_the_exit_codes() {
        let page = page(Cli::command()).unwrap();
        assert!(
            page.starts_with(".ie") || page.contains(".TH bftp 1"),
            "{page}"
        );
        for sub in [
            "submit",
            "status",
            "cancel",
            "verify",
            "transfer",
            "watch",
            "completions",
        ] {
            assert!(
                page.contains(&format!("bftp\\-{sub}(1)")),
                "no {sub}: {page}"
            );
        }
        assert!(page.contains("permission denied"), "{page}");
    }

    #[test]
    fn a_directory_gets_a_page_per_subcommand() {
        let dir = tempfile::tempdir().unwrap();
        run(&ManArgs {
            dir: Some(dir.path().to_path_buf()),
        })
        .unwrap();
        for name in [
            "bftp.1",
            "bftp-submit.1",
            "bftp-status.1",
            "bftp-man.1",
            "bftp-watch.1",
            "bftp-watch-add.1",
            "bftp-watch-remove.1",
        ] {
            let p = dir.path().join(name);
            assert!(std::fs::metadata(&p).is_ok_and(|m| m.len() > 0), "{name}");
        }
    }
}
