//! Where each side's FTP password comes from. The first source that has one wins:
//!
//! 1. the URL (`ftp://user:pw@host/...`): accepted with a warning, it shows in `ps`;
//! 2. `--source-password-file F` / `--dest-password-file F`: the file's first line;
//! 3. `BFTP_SOURCE_PASSWORD` / `BFTP_DEST_PASSWORD`;
//! 4. `~/.netrc` (or `$NETRC`): the `machine` entry for the host (and the URL's user, if the
//!    URL names one; if it does not, the entry's login is used too, as ftp(1) and curl do),
//!    else `default`; its `account` fills in ACCT when no `--*-acct` was given;
//! 5. a prompt on the terminal, when stdin is a terminal and the user is not anonymous;
//! 6. none.

use std::cell::OnceCell;
use std::path::{Path, PathBuf};

use anyhow::Context;
use bftp_core::{Secret, ANONYMOUS};

use crate::exit::Failure;
use crate::netrc::Netrc;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Side {
    Source,
    Destination,
}

impl Side {
    pub fn name(self) -> &'static str {
        match self {
            Side::Source => "source",
            Side::Destination => "destination",
        }
    }

    pub fn env_var(self) -> &'static str {
        match self {
            Side::Source => "BFTP_SOURCE_PASSWORD",
            Side::Destination => "BFTP_DEST_PASSWORD",
        }
    }

    fn file_flag(self) -> &'static str {
        match self {
            Side::Source => "--source-password-file",
            Side::Destination => "--dest-password-file",
        }
    }
}

/// Where a password was found; shown to the user, never the password itself.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Origin {
    Url,
    File(PathBuf),
    Env(&'static str),
    Netrc(PathBuf),
    Prompt,
    None,
}

/// What the caller knows about one side before looking for its password.
pub struct Want<'a> {
    pub side: Side,
    pub host: &'a str,
    /// The user as the URL names it; `None` when the URL names none (anonymous so far).
    pub url_user: Option<&'a str>,
    pub url_password: Option<&'a Secret>,
    pub password_file: Option<&'a Path>,
}

/// One side's credentials after the search.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Found {
    pub user: String,
    pub password: Option<Secret>,
    /// `account` of the netrc entry that gave the password.
    pub netrc_account: Option<Secret>,
    pub origin: Origin,
}

type Prompt = Box<dyn Fn(&str) -> std::io::Result<String>>;
type EnvLookup = Box<dyn Fn(&str) -> Option<String>>;

/// The outside world the search reads: environment, netrc file, terminal. Injected so that
/// tests control it.
pub struct Sources {
    env: EnvLookup,
    netrc_path: Option<PathBuf>,
    netrc: OnceCell<Option<Netrc>>,
    /// `None` when there is no terminal to ask on.
    prompt: Option<Prompt>,
}

impl Sources {
    pub fn new(
        env: impl Fn(&str) -> Option<String> + 'static,
        netrc_path: Option<PathBuf>,
        prompt: Option<Prompt>,
    ) -> Self {
        Sources {
            env: Box::new(env),
            netrc_path,
            netrc: OnceCell::new(),
            prompt,
        }
    }

    /// The real process environment, `~/.netrc` and, if stdin is a terminal, rpassword.
    pub fn from_process() -> Self {
        use std::io::IsTerminal;
        let path = crate::netrc::default_path(
            std::env::var_os("NETRC").map(PathBuf::from),
            std::env::var_os("HOME").map(PathBuf::from),
        );
        let prompt: Option<Prompt> = if std::io::stdin().is_terminal() {
            Some(Box::new(|text: &str| rpassword::prompt_password(text)))
        } else {
            None
        };
        Sources::new(|k| std::env::var(k).ok(), path, prompt)
    }

    /// The netrc file, read at most once and only when a side gets that far.
    fn netrc(&self) -> anyhow::Result<Option<&Netrc>> {
        if let Some(n) = self.netrc.get() {
            return Ok(n.as_ref());
        }
        let loaded = match &self.netrc_path {
            Some(p) => Netrc::load(p).map_err(|e| Failure::invalid(format!("{e:#}")))?,
            None => None,
        };
        Ok(self.netrc.get_or_init(|| loaded).as_ref())
    }

    pub fn find(&self, want: &Want<'_>) -> anyhow::Result<Found> {
        let user = want.url_user.unwrap_or(ANONYMOUS).to_string();
        let found = |user: String, password: Option<Secret>, origin| Found {
            user,
            password,
            netrc_account: None,
            origin,
        };
        if let Some(pw) = want.url_password {
            return Ok(found(user, Some(pw.clone()), Origin::Url));
        }
        if let Some(path) = want.password_file {
            let pw = read_password_file(path, want.side)?;
            return Ok(found(user, Some(pw), Origin::File(path.to_path_buf())));
        }
        if let Some(pw) = (self.env)(want.side.env_var()) {
            return Ok(found(
                user,
                Some(Secret::new(pw)),
                Origin::Env(want.side.env_var()),
            ));
        }
        if let Some(entry) = self.netrc()?.and_then(|n| n.find(want.host, want.url_user)) {
            if let Some(pw) = &entry.password {
                let user = want
                    .url_user
                    .or(entry.login.as_deref())
                    .unwrap_or(ANONYMOUS)
                    .to_string();
                let path = self.netrc_path.clone().unwrap_or_default();
                return Ok(Found {
                    user,
                    password: Some(pw.clone()),
                    netrc_account: entry.account.clone(),
                    origin: Origin::Netrc(path),
                });
            }
        }
        if let Some(prompt) = &self.prompt {
            if user != ANONYMOUS {
                let text = format!("Password for {user}@{} ({}): ", want.host, want.side.name());
                let pw = prompt(&text).context("reading the password from the terminal")?;
                let pw = (!pw.is_empty()).then(|| Secret::new(pw));
                return Ok(found(user, pw, Origin::Prompt));
            }
        }
        Ok(found(user, None, Origin::None))
    }
}

/// The first line of the file, without its line ending.
fn read_password_file(path: &Path, side: Side) -> anyhow::Result<Secret> {
    let bytes = std::fs::read(path).map_err(|e| {
        Failure::invalid(format!(
            "{} {}: cannot read the {} password file: {e}",
            side.file_flag(),
            path.display(),
            side.name()
        ))
    })?;
    let text = String::from_utf8(bytes).map_err(|_| {
        Failure::invalid(format!(
            "{} {}: the file is not UTF-8 text",
            side.file_flag(),
            path.display()
        ))
    })?;
    let line = text.split('\n').next().unwrap_or("");
    let line = line.strip_suffix('\r').unwrap_or(line);
    if line.is_empty() {
        return Err(Failure::invalid(format!(
            "{} {}: the first line is empty",
            side.file_flag(),
            path.display()
        ))
        .into());
    }
    Ok(Secret::new(line))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;
    use std::rc::Rc;

    struct World {
        _dir: tempfile::TempDir,
        pw_file: PathBuf,
        netrc: PathBuf,
    }

    fn world() -> World {
        let dir = tempfile::tempdir().unwrap();
        let pw_file = dir.path().join("pw");
        std::fs::write(&pw_file, "from-file\r\nsecond line\n").unwrap();
        let netrc = dir.path().join("netrc");
        std::fs::write(
            &netrc,
            "machine h login alice password from-netrc account acct-netrc\n\
             machine anon.example login anonymous password guest@example.org\n",
        )
        .unwrap();
        World {
            _dir: dir,
            pw_file,
            netrc,
        }
    }

    fn sources(
        env: Option<&'static str>,
        netrc: Option<&Path>,
        prompt: Option<&'static str>,
    ) -> (Sources, Rc<Cell<u32>>) {
        let asked = Rc::new(Cell::new(0));
        let counter = asked.clone();
        let prompt: Option<Prompt> = prompt.map(|answer| {
            Box::new(move |_: &str| {
                counter.set(counter.get() + 1);
                Ok(answer.to_string())
            }) as Prompt
        });
        let env = move |k: &str| {
            (k == "BFTP_SOURCE_PASSWORD")
                .then_some(env)
                .flatten()
                .map(String::from)
        };
        (
            Sources::new(env, netrc.map(Path::to_path_buf), prompt),
            asked,
        )
    }

    fn want<'a>(
        url_user: Option<&'a str>,
        url_pw: Option<&'a Secret>,
        file: Option<&'a Path>,
    ) -> Want<'a> {
        Want {
            side: Side::Source,
            host: "h",
            url_user,
            url_password: url_pw,
            password_file: file,
        }
    }

    #[test]
    fn precedence() {
        let w = world();
        let url_pw = Secret::new("from-url");
        let (all, _) = sources(Some("from-env"), Some(&w.netrc), Some("typed"));
        let cases: Vec<(&str, Want<'_>, &Sources, &str, Origin)> = vec![
            (
                "url beats all",
                want(Some("alice"), Some(&url_pw), Some(&w.pw_file)),
                &all,
                "from-url",
                Origin::Url,
            ),
            (
                "file beats env",
                want(Some("alice"), None, Some(&w.pw_file)),
                &all,
                "from-file",
                Origin::File(w.pw_file.clone()),
            ),
            (
                "env beats netrc",
                want(Some("alice"), None, None),
                &all,
                "from-env",
                Origin::Env("BFTP_SOURCE_PASSWORD"),
            ),
        ];
        for (name, want, src, pw, origin) in cases {
            let f = src.find(&want).unwrap();
            assert_eq!(f.password.as_ref().map(Secret::expose), Some(pw), "{name}");
            assert_eq!(f.origin, origin, "{name}");
        }
        let (no_env, asked) = sources(None, Some(&w.netrc), Some("typed"));
        let f = no_env.find(&want(Some("alice"), None, None)).unwrap();
        assert_eq!(f.password.as_ref().map(Secret::expose), Some("from-netrc"));
        assert_eq!(
            f.netrc_account.as_ref().map(Secret::expose),
            Some("acct-netrc")
        );
        assert_eq!(f.origin, Origin::Netrc(w.netrc.clone()));
        assert_eq!(asked.get(), 0);
        // netrc has no entry for bob on h: the prompt asks.
        let f = no_env.find(&want(Some("bob"), None, None)).unwrap();
        assert_eq!(
            (f.password.as_ref().map(Secret::expose), f.origin),
            (Some("typed"), Origin::Prompt)
        );
        assert_eq!(asked.get(), 1);
    }

    #[test]
    fn netrc_supplies_the_login_when_the_url_has_none() {
        let w = world();
        let (s, _) = sources(None, Some(&w.netrc), None);
        let f = s.find(&want(None, None, None)).unwrap();
        assert_eq!(f.user, "alice");
        assert_eq!(f.password.as_ref().map(Secret::expose), Some("from-netrc"));
        let anon = Want {
            host: "anon.example",
            ..want(None, None, None)
        };
        let f = s.find(&anon).unwrap();
        assert_eq!(
            (f.user.as_str(), f.password.as_ref().map(Secret::expose)),
            ("anonymous", Some("guest@example.org"))
        );
    }

    #[test]
    fn no_prompt_for_anonymous_or_without_a_terminal() {
        let (with_tty, asked) = sources(None, None, Some("typed"));
        let f = with_tty.find(&want(None, None, None)).unwrap();
        assert_eq!(
            (f.user.as_str(), f.password, f.origin),
            ("anonymous", None, Origin::None)
        );
        let f = with_tty.find(&want(Some("anonymous"), None, None)).unwrap();
        assert_eq!(f.origin, Origin::None);
        assert_eq!(asked.get(), 0);
        let (no_tty, _) = sources(None, None, None);
        let f = no_tty.find(&want(Some("alice"), None, None)).unwrap();
        assert_eq!((f.password, f.origin), (None, Origin::None));
    }

    #[test]
    fn password_file_problems_are_invalid_input() {
        let dir = tempfile::tempdir().unwrap();
        let empty = dir.path().join("empty");
        std::fs::write(&empty, "\nsecret-on-line-2\n").unwrap();
        let (s, _) = sources(None, None, None);
        for path in [empty, dir.path().join("absent")] {
            let err = s.find(&want(Some("u"), None, Some(&path))).unwrap_err();
            assert_eq!(crate::exit::exit_of(&err), crate::exit::Exit::Invalid);
            let msg = format!("{err:#}");
            assert!(
                msg.contains("--source-password-file") && !msg.contains("secret"),
                "{msg}"
            );
        }
    }

    #[test]
    fn broken_netrc_is_invalid_input_without_its_values() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("netrc");
        std::fs::write(&path, "machine h login u password two words\n").unwrap();
        let (s, _) = sources(None, Some(&path), None);
        let err = s.find(&want(Some("u"), None, None)).unwrap_err();
        assert_eq!(crate::exit::exit_of(&err), crate::exit::Exit::Invalid);
        let msg = format!("{err:#}");
        assert!(msg.contains("line 1") && !msg.contains("words"), "{msg}");
    }
}
