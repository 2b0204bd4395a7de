//! The webhook sender (bftpd `hooks::send`) against the test receiver: what each answer
//! makes of a delivery, and the targets it must refuse before, or instead of, sending.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use bftp_core::Timestamp;
use bftp_tests::pki::{Flaw, Pki};
use bftp_tests::webhook::{verify, Receiver, Reply};
use bftpd::hooks::config::{WebhookKey, WebhooksConfig};
use bftpd::hooks::send::{Sender, Sent};
use bftpd::hosts::policy::{HostPolicy, HostPolicyConfig};

const KEY: &[u8] = b"0123456789abcdef0123456789abcdef";
const BODY: &[u8] = br#"{"schema":"bftp.event.v1","id":"job-7-final","type":"job.finished"}"#;

fn sender_with(allow_loopback: bool, config: WebhooksConfig) -> Sender {
    let policy = HostPolicy::new(&HostPolicyConfig {
        allow_loopback,
        ..HostPolicyConfig::default()
    });
    Sender::new(&config, policy, WebhookKey::new(KEY)).unwrap()
}

fn sender(allow_loopback: bool) -> Sender {
    sender_with(
        allow_loopback,
        WebhooksConfig {
            timeout: Duration::from_secs(2),
            ..WebhooksConfig::default()
        },
    )
}

fn now() -> Timestamp {
    Timestamp::from_system(std::time::SystemTime::now())
}

async fn send(s: &Sender, target: &str) -> Sent {
    s.send(target, "job-7-final", "job.finished", BODY, now())
        .await
}

fn permanent(sent: Sent) -> String {
    match sent {
        Sent::Permanent { why } => why,
        other => panic!("not permanent: {other:?}"),
    }
}

fn transient(sent: Sent) -> String {
    match sent {
        Sent::Transient { why } => why,
        other => panic!("not transient: {other:?}"),
    }
}

#[tokio::test]
async fn webhook_delivered_signed_with_its_id_and_type() {
    let pki = Pki::new().unwrap();
    let rx = Receiver::start(&pki).unwrap();
    let s = sender(true);
    let got = send(&s, &rx.http_url("/hook?token=abc")).await;
    assert_eq!(got, Sent::Delivered { status: 200 });
    let req = &rx.wait_for(1, Duration::from_secs(5)).unwrap()[0];
    assert_eq!(req.method, "POST");
    assert_eq!(req.target, "/hook?token=abc");
    assert_eq!(req.body, BODY);
    assert_eq!(req.header("content-type"), Some("application/json"));
    assert_eq!(req.header("bftp-event-id"), Some("job-7-final"));
    assert_eq!(req.header("bftp-event-type"), Some("job.finished"));
    assert!(req
        .header("user-agent")
        .is_some_and(|u| u.starts_with("bftpd/")));
    verify(req, KEY, Duration::from_secs(60)).unwrap();
    assert!(verify(
        req,
        b"another key, 32 bytes long......",
        Duration::from_secs(60)
    )
    .is_err());
}

#[tokio::test]
async fn webhook_500_and_429_are_transient_404_permanent() {
    let pki = Pki::new().unwrap();
    let rx = Receiver::start(&pki).unwrap();
    rx.script([Reply::Status(500), Reply::Status(429), Reply::Status(404)]);
    let s = sender(true);
    // The receiver quotes the URL it was asked, its token too: the reason never holds it.
    let url = rx.http_url("/hook?token=s3cret-token");
    let why = transient(send(&s, &url).await);
    assert!(
        why.contains("answered HTTP 500 Internal Server Error: receiver says 500 to /hook?"),
        "{why}"
    );
    assert!(
        !why.contains("s3cret-token"),
        "the token in a reason: {why}"
    );
    let why = transient(send(&s, &url).await);
    assert!(why.contains("HTTP 429"), "{why}");
    let why = permanent(send(&s, &url).await);
    assert!(why.contains("HTTP 404"), "{why}");
    assert_eq!(send(&s, &url).await, Sent::Delivered { status: 200 });
    // The same event each time: a retry is recognisable by its id.
    let ids: Vec<_> = rx
        .received()
        .iter()
        .map(|r| r.header("bftp-event-id").unwrap_or("").to_string())
        .collect();
    assert_eq!(ids, ["job-7-final"; 4]);
}

#[tokio::test]
async fn webhook_timeout_is_transient() {
    let pki = Pki::new().unwrap();
    let rx = Receiver::start(&pki).unwrap();
    rx.script([Reply::Hang]);
    let s = sender_with(
        true,
        WebhooksConfig {
            timeout: Duration::from_secs(1),
            ..WebhooksConfig::default()
        },
    );
    let t = Instant::now();
    let why = transient(send(&s, &rx.http_url("/slow")).await);
    assert!(why.contains("no answer within 1s"), "{why}");
    assert!(t.elapsed() < Duration::from_secs(4), "{:?}", t.elapsed());
    assert_eq!(rx.count(), 1);
    // A slow answer within the timeout is delivered.
    rx.script([Reply::After(Duration::from_millis(300), 204)]);
    assert_eq!(
        send(&s, &rx.http_url("/slow")).await,
        Sent::Delivered { status: 204 }
    );
}

#[tokio::test]
async fn webhook_redirect_is_permanent_and_never_followed() {
    let pki = Pki::new().unwrap();
    let rx = Receiver::start(&pki).unwrap();
    let elsewhere = Receiver::start(&pki).unwrap();
    let to = elsewhere.http_url("/elsewhere?token=s3cret");
    for code in [301, 302, 307, 308] {
        rx.script([Reply::Redirect(code, to.clone())]);
        let why = permanent(send(&sender(true), &rx.http_url("/hook")).await);
        assert!(
            why.contains(&format!(
                "redirect not followed, Location: {}",
                elsewhere.http_url("/elsewhere")
            )),
            "{why}"
        );
        assert!(!why.contains("s3cret"), "{why}");
    }
    assert_eq!(rx.count(), 4);
    assert_eq!(
        elsewhere.connections(),
        0,
        "a request reached the redirect's target"
    );
}

#[tokio::test]
async fn webhook_to_loopback_is_refused_without_allow_loopback() {
    let pki = Pki::new().unwrap();
    let rx = Receiver::start(&pki).unwrap();
    let s = sender(false);
    let why = permanent(send(&s, &rx.http_url("/hook")).await);
    assert!(
        why.contains("refused by [policy]: 127.0.0.1 resolves to 127.0.0.1, a loopback address; the daemon's host policy does not allow loopback"),
        "{why}"
    );
    // A name is checked on what it resolves to, before any connection.
    let by_name = format!("http://localhost:{}/hook", rx.http_addr().port());
    let why = permanent(send(&s, &by_name).await);
    assert!(why.contains("localhost resolves to"), "{why}");
    assert!(why.contains("loopback"), "{why}");
    assert_eq!(rx.connections(), 0);
    // The same targets with allow_loopback are delivered.
    assert!(matches!(
        send(&sender(true), &by_name).await,
        Sent::Delivered { .. }
    ));
}

#[tokio::test]
async fn webhook_to_the_metadata_address_is_refused_without_a_connect() {
    let s = sender_with(
        true,
        WebhooksConfig {
            timeout: Duration::from_secs(20),
            ..WebhooksConfig::default()
        },
    );
    for target in [
        "http://169.254.169.254/latest/meta-data/",
        "http://[fd00:ec2::254]/latest/meta-data/",
    ] {
        let t = Instant::now();
        let why = permanent(send(&s, target).await);
        assert!(
            why.contains("which the daemon's host policy denies"),
            "{why}"
        );
        // A connect to an address nobody answers would take until the timeout.
        assert!(t.elapsed() < Duration::from_secs(1), "{:?}", t.elapsed());
    }
}

#[tokio::test]
async fn webhook_https_verified_with_the_test_ca_and_refused_with_an_unknown_one() {
    let pki = Pki::new().unwrap();
    let rx = Receiver::start(&pki).unwrap();
    let stranger = Receiver::start_with(&pki, Flaw::UnknownIssuer).unwrap();
    let with_ca = sender_with(
        true,
        WebhooksConfig {
            timeout: Duration::from_secs(5),
            ca_files: BTreeMap::from([("127.0.0.1".to_string(), pki.ca_file())]),
            ..WebhooksConfig::default()
        },
    );
    assert_eq!(
        send(&with_ca, &rx.https_url("/hook")).await,
        Sent::Delivered { status: 200 }
    );
    let req = &rx.received()[0];
    assert!(req.tls);
    verify(req, KEY, Duration::from_secs(60)).unwrap();

    let why = permanent(send(&with_ca, &stranger.https_url("/hook")).await);
    assert!(why.contains("certificate refused: unknown issuer"), "{why}");
    assert!(why.contains("ca.pem"), "{why}");
    // Without a CA file the system's roots decide, and they do not know the test CA either.
    let why = permanent(send(&sender(true), &rx.https_url("/hook")).await);
    assert!(why.contains("certificate refused: unknown issuer"), "{why}");
    assert_eq!(stranger.count(), 0);
    assert_eq!(rx.count(), 1);
}

#[tokio::test]
async fn webhook_sender_reads_at_most_64_kib_of_an_answer_and_refuses_an_oversized_event() {
    let s = sender_with(
        true,
        WebhooksConfig {
            max_body_bytes: 8192,
            timeout: Duration::from_secs(2),
            ..WebhooksConfig::default()
        },
    );
    let why = permanent(
        s.send(
            "http://192.0.2.1/x",
            "e",
            "job.finished",
            &[b' '; 8193],
            now(),
        )
        .await,
    );
    assert!(
        why.contains("more than [webhooks] max_body_bytes (8192)"),
        "{why}"
    );

    let pki = Pki::new().unwrap();
    let rx = Receiver::start(&pki).unwrap();
    const LONG: usize = 256 * 1024 * 1024;
    rx.script([Reply::Long(500, LONG)]);
    let t = Instant::now();
    let why = transient(send(&s, &rx.http_url("/chatty")).await);
    assert!(why.contains("HTTP 500"), "{why}");
    assert!(why.chars().count() < 400, "{why}");
    assert!(t.elapsed() < Duration::from_secs(2), "{:?}", t.elapsed());
    // What the receiver could write is the 64 KiB read plus the sockets' buffers.
    std::thread::sleep(Duration::from_millis(200));
    assert!(
        rx.answered_bytes() < 64 * 1024 * 1024,
        "{}",
        rx.answered_bytes()
    );
}

/// The README's few lines of Python verify what bftpd signs, and the fixed vector of
/// `bftp_core::event::sign`'s test.
#[tokio::test]
async fn the_readmes_python_receiver_verifies_what_bftpd_signs() {
    let readme = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../README.md"),
    )
    .unwrap();
    let code = readme
        .split("### Webhooks")
        .nth(1)
        .and_then(|s| s.split("```python\n").nth(1))
        .and_then(|s| s.split("```").next())
        .expect("the README's Python receiver under ### Webhooks");
    assert!(code.lines().count() <= 12, "not a few lines: {code}");

    let pki = Pki::new().unwrap();
    let rx = Receiver::start(&pki).unwrap();
    assert!(matches!(
        send(&sender(true), &rx.http_url("/hook")).await,
        Sent::Delivered { .. }
    ));
    let req = &rx.received()[0];
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("body"), &req.body).unwrap();
    let harness = r#"
import sys
body = open(sys.argv[1], "rb").read()
header, key = sys.argv[2], sys.argv[3].encode()
assert verify(header, key, body), "bftpd's request"
assert not verify(header, key, body + b" "), "another body"
assert not verify(header, b"another key", body), "another key"
assert not verify(header, key, body, now=int(header.split(",")[0][2:]) + 301), "too old"
assert verify("t=1700000000,v1=3361deb2717f73a04209bd47ccb31a949a1e36a5b25fab0e6f5df89d9f031de1",
              b"bftp-webhook-test-key",
              b'{"schema":"bftp.event.v1","id":"job-42-final","type":"job.finished"}',
              now=1700000000), "the fixed vector"
print("verified")
"#;
    let out = std::process::Command::new("/usr/bin/python3")
        .arg("-c")
        .arg(format!("{code}\n{harness}"))
        .arg(dir.path().join("body"))
        .arg(req.header("bftp-signature").unwrap())
        .arg(std::str::from_utf8(KEY).unwrap())
        .output()
        .unwrap();
    assert!(
        out.status.success() && String::from_utf8_lossy(&out.stdout).contains("verified"),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}
