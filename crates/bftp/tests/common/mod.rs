//! The `bftp` binary run as a user runs it, against a scripted bftpd on a Unix socket.

#![allow(dead_code)] // Each test binary uses its own part.

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};
use std::sync::mpsc;
use std::thread;
use std::time::Duration;

pub struct Env {
    pub dir: tempfile::TempDir,
}

impl Env {
    pub fn new() -> Env {
        Env {
            dir: tempfile::tempdir().unwrap(),
        }
    }

    pub fn socket(&self) -> PathBuf {
        self.dir.path().join("bftpd.sock")
    }

    fn command(&self, args: &[&str], env: &[(&str, &str)]) -> Command {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_bftp"));
        cmd.args(args)
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("HOME", self.dir.path())
            .env("BFTP_SOCKET", self.socket())
            .stdin(Stdio::null());
        for (k, v) in env {
            cmd.env(k, v);
        }
        cmd
    }

    /// Runs `bftp` to its end.
    pub fn bftp(&self, args: &[&str], env: &[(&str, &str)]) -> Output {
        self.command(args, env).output().unwrap()
    }

    /// Starts `bftp` with its stdout and stderr piped, for a test that reads as it runs.
    pub fn spawn(&self, args: &[&str]) -> Child {
        self.command(args, &[])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    }

    /// Answers one request with `status` and `body`; returns what it received.
    pub fn serve_once(
        &self,
        status: u16,
        body: &'static str,
    ) -> thread::JoinHandle<(String, String)> {
        let listener = UnixListener::bind(self.socket()).unwrap();
        thread::spawn(move || {
            let (mut stream, _) = listener.accept().unwrap();
            let received = read_request(&stream);
            write!(
                stream,
                "HTTP/1.1 {status} X\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                body.len()
            )
            .unwrap();
            received
        })
    }

    /// Answers one request with a 200 NDJSON stream in chunked encoding, driven step by step
    /// by the test.
    pub fn serve_stream(&self) -> StreamServer {
        let listener = UnixListener::bind(self.socket()).unwrap();
        let (steps, rx) = mpsc::channel::<Step>();
        let thread = thread::spawn(move || {
            let (mut stream, _) = listener.accept().unwrap();
            let (head, body) = read_request(&stream);
            stream
                .write_all(b"HTTP/1.1 200 OK\r\ncontent-type: application/x-ndjson\r\ntransfer-encoding: chunked\r\n\r\n")
                .unwrap();
            let mut client_closed = false;
            for step in rx {
                match step {
                    Step::Chunk(c) => {
                        write!(stream, "{:x}\r\n", c.len()).unwrap();
                        stream.write_all(&c).unwrap();
                        stream.write_all(b"\r\n").unwrap();
                        stream.flush().unwrap();
                    }
                    Step::End => {
                        stream.write_all(b"0\r\n\r\n").unwrap();
                        break;
                    }
                    Step::AwaitClose => {
                        // The client's close is a read of 0 bytes (or a reset).
                        let mut buf = [0u8; 64];
                        client_closed = matches!(stream.read(&mut buf), Ok(0) | Err(_));
                        break;
                    }
                }
            }
            Served {
                head,
                body,
                client_closed,
            }
        });
        StreamServer { steps, thread }
    }
}

pub enum Step {
    Chunk(Vec<u8>),
    /// The last chunk: the stream ends.
    End,
    /// Send nothing more; wait until the client closes the connection.
    AwaitClose,
}

pub struct Served {
    pub head: String,
    pub body: String,
    pub client_closed: bool,
}

pub struct StreamServer {
    steps: mpsc::Sender<Step>,
    thread: thread::JoinHandle<Served>,
}

impl StreamServer {
    pub fn chunk(&self, c: impl AsRef<[u8]>) {
        self.steps.send(Step::Chunk(c.as_ref().to_vec())).unwrap();
    }

    pub fn step(&self, s: Step) {
        self.steps.send(s).unwrap();
    }

    pub fn join(self) -> Served {
        drop(self.steps);
        self.thread.join().unwrap()
    }
}

/// The request head and body.
fn read_request(stream: &UnixStream) -> (String, String) {
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    let mut head = String::new();
    let mut len = 0usize;
    loop {
        let mut line = String::new();
        reader.read_line(&mut line).unwrap();
        if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
            len = v.trim().parse().unwrap();
        }
        head.push_str(&line);
        if line == "\r\n" {
            break;
        }
    }
    let mut body = vec![0u8; len];
    reader.read_exact(&mut body).unwrap();
    (head, String::from_utf8(body).unwrap())
}

/// A child's output, line by line as it comes, with a deadline so that a bug fails the test
/// instead of hanging it.
pub struct LinesOf(mpsc::Receiver<String>);

impl LinesOf {
    pub fn new(r: impl Read + Send + 'static) -> LinesOf {
        let (tx, rx) = mpsc::channel();
        thread::spawn(move || {
            for line in BufReader::new(r).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        LinesOf(rx)
    }

    pub fn next(&self) -> String {
        self.0
            .recv_timeout(Duration::from_secs(20))
            .expect("a line from bftp in time")
    }

    /// Every line still to come, until the stream closes.
    pub fn rest(&self) -> Vec<String> {
        let mut all = Vec::new();
        while let Ok(l) = self.0.recv_timeout(Duration::from_secs(20)) {
            all.push(l);
        }
        all
    }
}

pub fn code(o: &Output) -> i32 {
    o.status.code().expect("exited, not killed")
}

pub fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}
