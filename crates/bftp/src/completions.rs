//! `bftp completions SHELL`: the shell's completion script, generated from the clap
//! definitions so it cannot fall behind them.

use clap::{Args, CommandFactory};
use clap_complete::Shell;

use crate::exit::Exit;
use crate::Cli;

#[derive(Args, Debug)]
pub struct CompletionsArgs {
    /// The shell
    #[arg(value_name = "SHELL")]
    pub shell: Shell,
}

pub fn run(args: &CompletionsArgs) -> anyhow::Result<Exit> {
    let mut out = Vec::new();
    clap_complete::generate(args.shell, &mut Cli::command(), "bftp", &mut out);
    crate::output::emit(&String::from_utf8(out)?)?;
    Ok(Exit::Success)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_shell_completes_every_subcommand() {
        for shell in [Shell::Bash, Shell::Zsh, Shell::Fish] {
            let mut out = Vec::new();
            clap_complete::generate(shell, &mut Cli::command(), "bftp", &mut out);
            let script = String::from_utf8(out).unwrap();
            for sub in [
                "submit",
                "status",
                "cancel",
                "verify",
                "transfer",
                "--watch",
                "watch",
                "resume",
                "ready-suffix",
                "no-default-ignore",
            ] {
                assert!(script.contains(sub), "{shell}: no {sub}");
            }
        }
    }
}
