use super::*;
use crate::client::testserver;
use crate::exit::{exit_of, Exit};
use crate::{Cli, Command};
use bftp_api::{EndpointSpec, RetrySpec, SubmitRequest};
use clap::{CommandFactory, Parser};

/// 2026-11-30T12:00:00Z
const NOW: Timestamp = Timestamp(1_796_040_000_000);

fn command(argv: &[&str]) -> Result<WatchCommand, clap::Error> {
    let mut full = vec!["bftp", "watch"];
    full.extend_from_slice(argv);
    match Cli::try_parse_from(full)?.command {
        Command::Watch(a) => Ok(a.command),
        _ => unreachable!(),
    }
}

fn no_sources() -> Sources {
    Sources::new(|_| None, None, None)
}

fn action_with(argv: &[&str], sources: &Sources) -> anyhow::Result<Action> {
    let cmd = command(argv).unwrap_or_else(|e| panic!("{argv:?}: {e}"));
    prepare(&cmd, sources, NOW)
}

fn action(argv: &[&str]) -> anyhow::Result<Action> {
    action_with(argv, &no_sources())
}

/// `bftp watch add SRC DST --every 10m` and `extra`, as the request it sends.
fn add(extra: &[&str]) -> anyhow::Result<WatchRequest> {
    let mut argv = vec!["add", "ftp://src/in", "ftp://dst/out", "--every", "10m"];
    argv.extend_from_slice(extra);
    match action(&argv)? {
        Action::Add(w) => Ok(w.request),
        a => panic!("{a:?}"),
    }
}

fn base() -> WatchRequest {
    let ep = |host: &str, path: &str| EndpointSpec {
        host: host.into(),
        port: Some(21),
        user: Some("anonymous".into()),
        path: path.into(),
        ..Default::default()
    };
    WatchRequest {
        job: SubmitRequest {
            source: ep("src", "in"),
            destination: Some(ep("dst", "out")),
            ..Default::default()
        },
        every: "10m".into(),
        ..Default::default()
    }
}

#[test]
fn each_flag_reaches_its_field() {
    type Edit = fn(&mut WatchRequest);
    let cases: &[(&[&str], Edit)] = &[
        (&[], |_| {}),
        (&["--move"], |r| r.job.disposition = Some("move".into())),
        (&["--disposition", "MOVE"], |r| {
            r.job.disposition = Some("move".into())
        }),
        (&["--disposition", "copy"], |r| {
            r.job.disposition = Some("copy".into())
        }),
        (&["--pattern", "*.csv", "--pattern", "*.txt"], |r| {
            r.patterns = vec!["*.csv".into(), "*.txt".into()]
        }),
        (&["--recursive"], |r| r.recursive = true),
        (&["-r"], |r| r.recursive = true),
        (&["--settle", " 0s "], |r| r.settle = Some("0s".into())),
        (&["--settle", "2m"], |r| r.settle = Some("2m".into())),
        (&["--ignore", "*.lock", "--ignore", "~*"], |r| {
            r.ignore = vec!["*.lock".into(), "~*".into()]
        }),
        (&["--no-default-ignore"], |r| r.no_default_ignore = true),
        (&["--ready-marker", "READY"], |r| {
            r.ready_marker = Some("READY".into())
        }),
        (&["--ready-suffix", ".done"], |r| {
            r.ready_suffix = Some(".done".into())
        }),
        (&["--notify-on", "always"], |r| {
            r.notify_on = Some("always".into())
        }),
        (&["--expect", "daily 05:00"], |r| {
            r.expect = Some("daily 05:00".into())
        }),
        (&["--expect", "6h"], |r| r.expect = Some("6h".into())),
        (
            &["--notify", "a@example.org", "--notify", "b@example.org"],
            |r| r.job.notify = vec!["a@example.org".into(), "b@example.org".into()],
        ),
        (&["--keyword", "feeds"], |r| {
            r.job.keyword = Some("feeds".into())
        }),
        (&["--proof", "HASH"], |r| r.job.proof = Some("hash".into())),
        (&["--data-path", "relay"], |r| {
            r.job.data_path = Some("relay".into())
        }),
        (&["--dest-command", "unique"], |r| {
            r.job.dest_command = Some("unique".into())
        }),
        (&["--type", "A", "--mode", "B", "--stru", "R"], |r| {
            r.job.transfer_type = Some("A".into());
            r.job.mode = Some("B".into());
            r.job.structure = Some("R".into());
        }),
        (&["--tls", "required", "--data-tls", "off,preferred"], |r| {
            r.job.source.tls = Some("required".into());
            r.job.source.data_tls = Some("off".into());
            let d = r.job.destination.as_mut().unwrap();
            d.tls = Some("required".into());
            d.data_tls = Some("preferred".into());
        }),
        (&["--source-acct", "sa", "--dest-acct", "da"], |r| {
            r.job.source.acct = Some("sa".into());
            r.job.destination.as_mut().unwrap().acct = Some("da".into());
        }),
        (
            &[
                "--retry-first",
                "5m",
                "--retry-factor",
                "3",
                "--retry-cap",
                "2h",
                "--max-attempts",
                "7",
                "--deadline",
                "1day",
            ],
            |r| {
                r.job.retry = RetrySpec {
                    first_interval: Some("5m".into()),
                    factor: Some(3.0),
                    cap: Some("2h".into()),
                    max_attempts: Some(7),
                    deadline: Some("1day".into()),
                }
            },
        ),
    ];
    for (flags, edit) in cases {
        let mut want = base();
        edit(&mut want);
        let got = add(flags).unwrap_or_else(|e| panic!("{flags:?}: {e:#}"));
        assert_eq!(got, want, "{flags:?}");
    }
}

/// What the user did not give is not sent: bftpd's defaults apply.
#[test]
fn defaults_are_absent_from_the_json() {
    let r = add(&[]).unwrap();
    let json = serde_json::to_value(&r).unwrap();
    let mut keys: Vec<&str> = json
        .as_object()
        .unwrap()
        .keys()
        .map(|k| k.as_str())
        .collect();
    keys.sort_unstable();
    assert_eq!(keys, ["every", "job"], "{json}");
    assert!(json["job"].get("disposition").is_none(), "{json}");
    assert!(json["job"].get("start").is_none(), "{json}");
    assert!(json["job"].get("recursive").is_none(), "{json}");
}

/// The watched directory and the destination directory go as given: the login directory,
/// a trailing slash, an absolute path. A recursive watch's jobs are not recursive ones.
#[test]
fn directories_go_as_given() {
    for (src, want) in [
        ("ftp://src", ""),
        ("ftp://src/", ""),
        ("ftp://src/in/", "in/"),
        ("ftp://src/%2Fdata/in", "/data/in"),
    ] {
        let a = action(&["add", src, "ftp://dst/", "--every", "1h", "--recursive"]);
        let Action::Add(w) = a.unwrap_or_else(|e| panic!("{src}: {e:#}")) else {
            panic!()
        };
        assert_eq!(w.request.job.source.path, want, "{src}");
        assert!(w.request.recursive && !w.request.job.recursive, "{src}");
    }
    // A recursive watch may ask for unique names: its jobs are wildcard jobs.
    add(&["--recursive", "--dest-command", "unique"]).unwrap();
}

#[test]
fn clap_refuses_conflicts_and_missing_parts() {
    let cases: &[&[&str]] = &[
        &[
            "add",
            "ftp://s/in",
            "ftp://d/out",
            "--every",
            "1m",
            "--ready-marker",
            "R",
            "--ready-suffix",
            ".ok",
        ],
        &["add", "ftp://s/in", "ftp://d/out"],
        &["add", "ftp://s/in", "--every", "1m"],
        &[
            "add",
            "ftp://s/in",
            "ftp://d/out",
            "--every",
            "1m",
            "--move",
            "--disposition",
            "copy",
        ],
        &[
            "add",
            "ftp://s/in",
            "ftp://d/out",
            "--every",
            "1m",
            "--notify-on",
            "sometimes",
        ],
        &[
            "add",
            "ftp://s/in",
            "ftp://d/out",
            "--every",
            "1m",
            "--start",
            "in 1h",
        ],
        &[
            "add",
            "ftp://s/in",
            "ftp://d/out",
            "--every",
            "1m",
            "--request-key",
            "k",
        ],
        &["show"],
        &["show", "x"],
        &["pause", "1", "2"],
        &["list", "7"],
        &[],
    ];
    for argv in cases {
        let e = command(argv)
            .err()
            .unwrap_or_else(|| panic!("{argv:?} parsed"));
        assert_eq!(e.exit_code(), 2, "{argv:?}: {e}");
    }
    let e = command(&[
        "add",
        "ftp://s/in",
        "ftp://d/out",
        "--every",
        "1m",
        "--ready-marker",
        "R",
        "--ready-suffix",
        ".ok",
    ])
    .err()
    .unwrap();
    assert!(e.to_string().contains("cannot be used with"), "{e}");
}

#[test]
fn local_checks_are_exit_4() {
    let cases: &[(&[&str], &str)] = &[
        (&["--every", "soon"], "--every \"soon\": not a duration"),
        (&["--every", "0s"], "longer than 0s"),
        (
            &["--settle", "a while"],
            "--settle \"a while\": not a duration",
        ),
        (&["--delete"], "does not delete"),
        (&["--disposition", "delete"], "does not delete"),
        (&["--notify", "nobody"], "not a mailbox"),
        (&["--retry-factor", "0.5"], "factor"),
        (&["--tls", "sometimes"], "--tls"),
    ];
    for (extra, needle) in cases {
        // `--every` given twice: the last one counts, as clap does for a single value.
        let mut argv = vec!["add", "ftp://src/in", "ftp://dst/out"];
        if !extra.contains(&"--every") {
            argv.extend(["--every", "10m"]);
        }
        argv.extend_from_slice(extra);
        let err = action(&argv).expect_err(&format!("{extra:?}"));
        assert_eq!(exit_of(&err), Exit::Invalid, "{extra:?}: {err:#}");
        assert!(format!("{err:#}").contains(needle), "{extra:?}: {err:#}");
    }
    for (src, dst, needle) in [
        ("ftp://src/in/*.csv", "ftp://dst/out", "--pattern"),
        ("ftp://src/in*/x", "ftp://dst/out", "--pattern"),
        ("ftp://src/in", "ftp://dst/out/*", "wildcard"),
        ("http://src/in", "ftp://dst/out", "scheme"),
    ] {
        let err = action(&["add", src, dst, "--every", "1m"]).expect_err(src);
        assert_eq!(exit_of(&err), Exit::Invalid, "{src} {dst}: {err:#}");
        assert!(format!("{err:#}").contains(needle), "{src} {dst}: {err:#}");
    }
}

/// Passwords are found as for `submit`: the URL (with a warning), a password file, the
/// environment, ~/.netrc.
#[test]
fn passwords_are_found_as_for_submit() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("dpw");
    std::fs::write(&file, "dest-pw\n").unwrap();
    let netrc = dir.path().join("netrc");
    std::fs::write(&netrc, "machine src login carol password netrc-pw\n").unwrap();
    let sources = Sources::new(
        |k| (k == "BFTP_DEST_PASSWORD").then(|| "env-pw".to_string()),
        Some(netrc),
        None,
    );
    let get = |argv: &[&str]| match action_with(argv, &sources).unwrap() {
        Action::Add(w) => w,
        a => panic!("{a:?}"),
    };
    let w = get(&["add", "ftp://src/in", "ftp://bob@dst/out", "--every", "1m"]);
    let (s, d) = (&w.request.job.source, w.request.job.destination.unwrap());
    assert_eq!(
        (s.user.as_deref(), s.password.as_deref()),
        (Some("carol"), Some("netrc-pw"))
    );
    assert_eq!(
        (d.user.as_deref(), d.password.as_deref()),
        (Some("bob"), Some("env-pw"))
    );
    assert!(w.warnings.is_empty());
    let f = file.to_str().unwrap();
    let w = get(&[
        "add",
        "ftp://alice:s3cr%40t@src/in",
        "ftp://bob@dst/out",
        "--every",
        "1m",
        "--dest-password-file",
        f,
    ]);
    assert_eq!(w.request.job.source.password.as_deref(), Some("s3cr@t"));
    assert_eq!(
        w.request
            .job
            .destination
            .as_ref()
            .unwrap()
            .password
            .as_deref(),
        Some("dest-pw")
    );
    assert_eq!(w.warnings.len(), 1);
    assert!(w.warnings[0].contains("source password is in the URL"));
    let shown = format!("{w:?}");
    assert!(
        !shown.contains("s3cr") && !shown.contains("dest-pw"),
        "{shown}"
    );
}

#[test]
fn routes() {
    let route = |argv: &[&str]| {
        let (m, p) = action(argv).unwrap().route();
        format!("{m} {p}")
    };
    assert_eq!(
        route(&["add", "ftp://s/in", "ftp://d/out", "--every", "1m"]),
        "POST /v1/watches"
    );
    assert_eq!(route(&["list"]), "GET /v1/watches");
    assert_eq!(route(&["list", "--all"]), "GET /v1/watches?all=true");
    assert_eq!(route(&["show", "3"]), "GET /v1/watches/3");
    assert_eq!(route(&["pause", "3"]), "POST /v1/watches/3/pause");
    assert_eq!(route(&["resume", "3"]), "POST /v1/watches/3/resume");
    assert_eq!(route(&["remove", "3"]), "DELETE /v1/watches/3");
}

/// `watch add --help` speaks of directories, and keeps `submit`'s flags it does not take
/// out of sight.
#[test]
fn add_help_is_a_watchs() {
    let help = Cli::command()
        .find_subcommand_mut("watch")
        .unwrap()
        .find_subcommand_mut("add")
        .unwrap()
        .render_long_help()
        .to_string();
    for want in [
        "The watched directory",
        "--every <DURATION>",
        "--ready-suffix",
        "--notify-on <WHEN>",
        "--retry-first",
        "--source-password-file",
        "copy|move",
        "Exit codes:",
    ] {
        assert!(help.contains(want), "no {want}: {help}");
    }
    for absent in [
        "--delete",
        "--start",
        "--request-key",
        "multi-file job",
        "With verify",
        "find the job later",
    ] {
        assert!(!help.contains(absent), "{absent}: {help}");
    }
}

fn view_json(id: u64) -> String {
    serde_json::to_string(&render::tests::view(id)).unwrap()
}

#[tokio::test]
async fn add_posts_the_request_and_prints_the_watch() {
    let body = view_json(3);
    let srv = testserver::start(vec![(201, &body), (201, &body)]);
    let client = Client::new(&srv.socket);
    let a = action(&[
        "add",
        "ftp://src/in",
        "ftp://dst/out",
        "--every",
        "10m",
        "--move",
        "--pattern",
        "*.csv",
    ])
    .unwrap();
    let out = run(&client, &a, false).await.unwrap();
    assert!(
        out.starts_with("watch 3 added: active, every 10m\n"),
        "{out}"
    );
    let json = run(&client, &a, true).await.unwrap();
    assert_eq!(
        serde_json::from_str::<serde_json::Value>(&json).unwrap(),
        serde_json::from_str::<serde_json::Value>(&body).unwrap()
    );
    let reqs = srv.requests.lock().unwrap().clone();
    assert_eq!(reqs[0].request_line(), "POST /v1/watches HTTP/1.1");
    assert_eq!(
        reqs[0].header("content-type").as_deref(),
        Some("application/json")
    );
    let sent: WatchRequest = serde_json::from_slice(&reqs[0].body).unwrap();
    let Action::Add(w) = &a else { unreachable!() };
    assert_eq!(sent, w.request);
    assert_eq!(sent.job.disposition.as_deref(), Some("move"));
    assert_eq!(sent.patterns, ["*.csv"]);
}

#[tokio::test]
async fn each_verb_reads_its_answer() {
    let one = view_json(3);
    let mut paused = render::tests::view(3);
    paused.state = "paused".into();
    let paused = serde_json::to_string(&paused).unwrap();
    let list = serde_json::to_string(&WatchList {
        watches: vec![render::tests::view(3)],
    })
    .unwrap();
    let srv = testserver::start(vec![
        (200, &list),
        (200, &one),
        (200, &paused),
        (200, &one),
        (204, ""),
        (204, ""),
    ]);
    let client = Client::new(&srv.socket);
    let out = |argv: &'static [&'static str], json: bool| {
        let client = &client;
        async move { run(client, &action(argv).unwrap(), json).await.unwrap() }
    };
    let l = out(&["list", "--all"], false).await;
    assert!(l.starts_with("ID  STATE") && l.contains("\n3 "), "{l}");
    let s = out(&["show", "3"], false).await;
    assert!(s.starts_with("watch 3\n  state"), "{s}");
    assert_eq!(out(&["pause", "3"], false).await, "watch 3: paused\n");
    let r = out(&["resume", "3"], false).await;
    assert!(r.starts_with("watch 3: active, next poll "), "{r}");
    assert_eq!(
        out(&["remove", "3"], false).await,
        "watch 3 removed; the jobs it made stay\n"
    );
    assert_eq!(out(&["remove", "3"], true).await, "", "204: no JSON");
    let lines: Vec<String> = srv
        .requests
        .lock()
        .unwrap()
        .iter()
        .map(|r| r.request_line().to_string())
        .collect();
    assert_eq!(
        lines,
        [
            "GET /v1/watches?all=true HTTP/1.1",
            "GET /v1/watches/3 HTTP/1.1",
            "POST /v1/watches/3/pause HTTP/1.1",
            "POST /v1/watches/3/resume HTTP/1.1",
            "DELETE /v1/watches/3 HTTP/1.1",
            "DELETE /v1/watches/3 HTTP/1.1",
        ]
    );
}

#[tokio::test]
async fn json_is_bftpds_answer_as_is() {
    // A field this bftp does not know is kept, in its place.
    let raw = view_json(3).replacen('{', r#"{"future_field":[1],"#, 1);
    let srv = testserver::start(vec![(200, &raw)]);
    let out = run(&Client::new(&srv.socket), &Action::Show(3), true)
        .await
        .unwrap();
    assert_eq!(out, output::pretty_json(raw.as_bytes()).unwrap());
    assert!(out.starts_with("{\n  \"future_field\""), "{out}");
}

#[tokio::test]
async fn errors_keep_their_exit_codes() {
    let srv = testserver::start(vec![
        (404, r#"{"kind":"not_found","message":"no watch 9"}"#),
        (
            400,
            r#"{"kind":"invalid_request","message":"--every: at least 1m"}"#,
        ),
        (404, r#"{"kind":"not_found","message":"no watch 9"}"#),
    ]);
    let client = Client::new(&srv.socket);
    let err = run(&client, &Action::Show(9), false).await.unwrap_err();
    assert_eq!(exit_of(&err), Exit::NotFound);
    assert_eq!(
        format!("{err:#}"),
        "watch 9: no watch 9 [HTTP 404 Not Found]"
    );
    let a = action(&["add", "ftp://s/in", "ftp://d/out", "--every", "1s"]).unwrap();
    let err = run(&client, &a, false).await.unwrap_err();
    assert_eq!(exit_of(&err), Exit::Invalid);
    assert_eq!(
        format!("{err:#}"),
        "adding the watch: --every: at least 1m [HTTP 400 Bad Request]"
    );
    let err = run(&client, &Action::Remove(9), false).await.unwrap_err();
    assert_eq!(exit_of(&err), Exit::NotFound);
    assert!(
        format!("{err:#}").starts_with("removing watch 9: "),
        "{err:#}"
    );
}

#[tokio::test]
async fn no_daemon_is_exit_3_and_a_lost_add_says_what_to_check() {
    let dir = tempfile::tempdir().unwrap();
    let a = action(&["add", "ftp://s/in", "ftp://d/out", "--every", "1m"]).unwrap();
    let err = run(&Client::new(dir.path().join("absent.sock")), &a, false)
        .await
        .unwrap_err();
    assert_eq!(exit_of(&err), Exit::Unreachable);

    // Connected, then closed without an answer: the watch may exist; not sent twice.
    let socket = dir.path().join("mute.sock");
    let listener = tokio::net::UnixListener::bind(&socket).unwrap();
    let accepted = tokio::spawn(async move {
        use tokio::io::AsyncReadExt;
        let mut n = 0;
        while let Ok(Ok((mut s, _))) =
            tokio::time::timeout(Duration::from_millis(500), listener.accept()).await
        {
            let mut buf = vec![0u8; 65536];
            let _ = s.read(&mut buf).await;
            n += 1;
        }
        n
    });
    let err = run(&Client::new(&socket), &a, false).await.unwrap_err();
    let msg = format!("{err:#}");
    assert!(
        msg.starts_with("adding the watch: bftpd may or may not have made the watch"),
        "{msg}"
    );
    assert_eq!(accepted.await.unwrap(), 1);
}
