//! HTTP/1.1 JSON over bftpd's Unix socket, one connection per request.

use std::io;
use std::path::PathBuf;

use anyhow::Context;
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::{Bytes, Incoming};
use hyper::client::conn::http1::SendRequest;
use hyper::{header, Method, Request, Response};
use hyper_util::rt::TokioIo;
use serde::de::DeserializeOwned;
use tokio::net::UnixStream;
use tokio::task::JoinHandle;

use crate::exit::{Exit, Failure};

/// No answer of bftpd is anywhere near this; a bigger one is a bug, not a job list.
const MAX_RESPONSE_BYTES: usize = 64 << 20;

pub struct Client {
    socket: PathBuf,
}

const JSON: &str = "application/json";
const NDJSON: &str = "application/x-ndjson";

/// One HTTP/1.1 connection; dropping it closes the socket.
struct Connection {
    /// Kept with the task: hyper shuts a connection down when its sender is gone.
    sender: SendRequest<Full<Bytes>>,
    task: JoinHandle<Result<(), hyper::Error>>,
}

impl Drop for Connection {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// A 2xx answer still arriving. Dropping it closes the connection, which tells bftpd that
/// nobody listens any more.
pub struct Streaming {
    body: Incoming,
    _conn: Connection,
}

impl Streaming {
    /// The next piece of the body as the connection delivered it; `None` at its end.
    pub async fn next_chunk(&mut self) -> anyhow::Result<Option<Bytes>> {
        while let Some(frame) = self.body.frame().await {
            let frame = frame.context("reading the answer")?;
            if let Ok(data) = frame.into_data() {
                return Ok(Some(data));
            }
        }
        Ok(None)
    }
}

async fn read_all(body: Incoming) -> anyhow::Result<Bytes> {
    Ok(Limited::new(body, MAX_RESPONSE_BYTES)
        .collect()
        .await
        .map_err(|e| anyhow::anyhow!("reading the response: {e}"))?
        .to_bytes())
}

/// A successful (2xx) answer: the body as received, for `--json`, and its typed reading.
#[derive(Debug)]
pub struct Reply<T> {
    pub raw: Bytes,
    pub value: T,
}

/// Why a request got no HTTP answer.
#[derive(Debug)]
pub enum TransportError {
    /// No connection was made: nothing reached bftpd.
    Connect(io::Error),
    /// The connection was made but the exchange failed: bftpd may or may not have acted.
    Exchange(anyhow::Error),
}

impl Client {
    pub fn new(socket: impl Into<PathBuf>) -> Self {
        Client {
            socket: socket.into(),
        }
    }

    pub async fn get<T: DeserializeOwned>(&self, path: &str) -> anyhow::Result<Reply<T>> {
        let (status, reason, body) = self
            .exchange(Method::GET, path, &[], None)
            .await
            .map_err(|e| self.transport_failure(e))?;
        decode(status, reason, body)
    }

    pub async fn post<T: DeserializeOwned>(
        &self,
        path: &str,
        headers: &[(&str, &str)],
        body: Option<Vec<u8>>,
    ) -> anyhow::Result<Reply<T>> {
        let (status, reason, body) = self
            .exchange(Method::POST, path, headers, body)
            .await
            .map_err(|e| self.transport_failure(e))?;
        decode(status, reason, body)
    }

    /// A DELETE: the 2xx body as received (empty for a 204), or the error as a [`Failure`].
    pub async fn delete(&self, path: &str) -> anyhow::Result<Bytes> {
        let (status, reason, body) = self
            .exchange(Method::DELETE, path, &[], None)
            .await
            .map_err(|e| self.transport_failure(e))?;
        if !(200..300).contains(&status) {
            return Err(Failure::from_response(status, reason, &body).into());
        }
        Ok(body)
    }

    /// One request on a fresh connection: status, reason phrase and body, whatever the status.
    pub async fn exchange(
        &self,
        method: Method,
        path: &str,
        headers: &[(&str, &str)],
        body: Option<Vec<u8>>,
    ) -> Result<(u16, &'static str, Bytes), TransportError> {
        let (resp, conn) = self.open(method, path, JSON, headers, body).await?;
        let status = resp.status();
        let body = read_all(resp.into_body())
            .await
            .map_err(TransportError::Exchange)?;
        drop(conn);
        Ok((
            status.as_u16(),
            status.canonical_reason().unwrap_or(""),
            body,
        ))
    }

    /// A POST whose 2xx answer is read as it arrives (`application/x-ndjson`); an error
    /// answer is read whole and becomes a [`Failure`]. No timeout: the answer lasts as long
    /// as the work it reports.
    pub async fn post_streaming(&self, path: &str, body: Vec<u8>) -> anyhow::Result<Streaming> {
        let (resp, conn) = self
            .open(Method::POST, path, NDJSON, &[], Some(body))
            .await
            .map_err(|e| self.transport_failure(e))?;
        let status = resp.status();
        if !status.is_success() {
            let body = read_all(resp.into_body())
                .await
                .map_err(|e| self.transport_failure(TransportError::Exchange(e)))?;
            let reason = status.canonical_reason().unwrap_or("");
            return Err(Failure::from_response(status.as_u16(), reason, &body).into());
        }
        Ok(Streaming {
            body: resp.into_body(),
            _conn: conn,
        })
    }

    /// A GET whose 2xx answer is read as it arrives (`accept`, e.g. `text/event-stream`); an
    /// error answer is read whole and becomes a [`Failure`]. No timeout.
    pub async fn get_streaming(&self, path: &str, accept: &str) -> anyhow::Result<Streaming> {
        let (resp, conn) = self
            .open(Method::GET, path, accept, &[], None)
            .await
            .map_err(|e| self.transport_failure(e))?;
        let status = resp.status();
        if !status.is_success() {
            let body = read_all(resp.into_body())
                .await
                .map_err(|e| self.transport_failure(TransportError::Exchange(e)))?;
            let reason = status.canonical_reason().unwrap_or("");
            return Err(Failure::from_response(status.as_u16(), reason, &body).into());
        }
        Ok(Streaming {
            body: resp.into_body(),
            _conn: conn,
        })
    }

    /// Connects, sends the request and reads the response head.
    async fn open(
        &self,
        method: Method,
        path: &str,
        accept: &str,
        headers: &[(&str, &str)],
        body: Option<Vec<u8>>,
    ) -> Result<(Response<Incoming>, Connection), TransportError> {
        let stream = UnixStream::connect(&self.socket)
            .await
            .map_err(TransportError::Connect)?;
        let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .map_err(|e| TransportError::Exchange(e.into()))?;
        let mut conn = Connection {
            sender,
            task: tokio::spawn(conn),
        };
        let mut req = Request::builder()
            .method(method)
            .uri(path)
            .header(header::HOST, "localhost")
            .header(header::ACCEPT, accept)
            .header(
                header::USER_AGENT,
                concat!("bftp/", env!("CARGO_PKG_VERSION")),
            );
        if body.is_some() {
            req = req.header(header::CONTENT_TYPE, JSON);
        }
        for (name, value) in headers {
            req = req.header(*name, *value);
        }
        let req = req
            .body(Full::new(Bytes::from(body.unwrap_or_default())))
            .context("building the HTTP request")
            .map_err(TransportError::Exchange)?;
        let resp = conn
            .sender
            .send_request(req)
            .await
            .context("sending the request")
            .map_err(TransportError::Exchange)?;
        Ok((resp, conn))
    }

    /// The user-facing error for a request that got no answer.
    pub fn transport_failure(&self, e: TransportError) -> anyhow::Error {
        let socket = self.socket.display();
        match e {
            TransportError::Connect(e) if e.kind() == io::ErrorKind::PermissionDenied => {
                Failure::new(
                    Exit::PermissionDenied,
                    format!("permission denied on the bftpd socket {socket}: {e}"),
                )
                .into()
            }
            TransportError::Connect(e) => Failure::new(
                Exit::Unreachable,
                format!("bftpd is not running? could not connect to {socket}: {e}"),
            )
            .into(),
            TransportError::Exchange(e) => {
                e.context(format!("the connection to bftpd at {socket} failed"))
            }
        }
    }
}

/// A 2xx body read as `T`, or the error response as a [`Failure`].
pub fn decode<T: DeserializeOwned>(
    status: u16,
    reason: &str,
    body: Bytes,
) -> anyhow::Result<Reply<T>> {
    if !(200..300).contains(&status) {
        return Err(Failure::from_response(status, reason, &body).into());
    }
    let value = serde_json::from_slice(&body)
        .with_context(|| format!("bftpd's answer (HTTP {status}) is not the expected JSON"))?;
    Ok(Reply { raw: body, value })
}

/// `/v1/jobs?...` with the query form-encoded, as axum's `Query` reads it.
pub fn path_with_query(path: &str, pairs: &[(&str, String)]) -> String {
    if pairs.is_empty() {
        return path.to_string();
    }
    let mut q = url::form_urlencoded::Serializer::new(String::new());
    for (k, v) in pairs {
        q.append_pair(k, v);
    }
    format!("{path}?{}", q.finish())
}

#[cfg(test)]
pub(crate) mod testserver {
    //! A one-connection-per-request HTTP server on a Unix socket that records what it got
    //! and answers from a script: enough to check the bytes the client sends.

    use std::path::PathBuf;
    use std::sync::{Arc, Mutex};

    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::UnixListener;

    #[derive(Clone, Debug)]
    pub struct Recorded {
        pub head: String,
        pub body: Vec<u8>,
    }

    impl Recorded {
        pub fn header(&self, name: &str) -> Option<String> {
            self.head.lines().skip(1).find_map(|l| {
                let (k, v) = l.split_once(':')?;
                k.trim()
                    .eq_ignore_ascii_case(name)
                    .then(|| v.trim().to_string())
            })
        }
        pub fn request_line(&self) -> &str {
            self.head.lines().next().unwrap_or("")
        }
    }

    pub struct TestServer {
        pub _dir: tempfile::TempDir,
        pub socket: PathBuf,
        pub requests: Arc<Mutex<Vec<Recorded>>>,
    }

    /// What the server sends back on one connection.
    pub enum Answer {
        /// With a content-length.
        Whole(u16, String),
        /// A 200 in chunked encoding, one write per chunk.
        Chunked(Vec<String>),
    }

    /// Serves each `(status, body)` in turn, one per connection.
    pub fn start(answers: Vec<(u16, &str)>) -> TestServer {
        serve(
            answers
                .into_iter()
                .map(|(s, b)| Answer::Whole(s, b.to_string()))
                .collect(),
        )
    }

    /// Serves each answer in turn, one per connection.
    pub fn serve(answers: Vec<Answer>) -> TestServer {
        let dir = tempfile::tempdir().unwrap();
        let socket = dir.path().join("bftpd.sock");
        let listener = UnixListener::bind(&socket).unwrap();
        let requests = Arc::new(Mutex::new(Vec::new()));
        let rec = requests.clone();
        tokio::spawn(async move {
            for answer in answers {
                let (mut s, _) = listener.accept().await.unwrap();
                let mut buf = Vec::new();
                let head_end = loop {
                    let mut chunk = [0u8; 4096];
                    let n = s.read(&mut chunk).await.unwrap();
                    assert!(n > 0, "client closed early");
                    buf.extend_from_slice(&chunk[..n]);
                    if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                        break i + 4;
                    }
                };
                let head = String::from_utf8(buf[..head_end].to_vec()).unwrap();
                let len: usize = head
                    .lines()
                    .find_map(|l| {
                        let (k, v) = l.split_once(':')?;
                        k.eq_ignore_ascii_case("content-length")
                            .then(|| v.trim().parse().unwrap())
                    })
                    .unwrap_or(0);
                while buf.len() < head_end + len {
                    let mut chunk = [0u8; 4096];
                    let n = s.read(&mut chunk).await.unwrap();
                    assert!(n > 0, "client closed early");
                    buf.extend_from_slice(&chunk[..n]);
                }
                rec.lock().unwrap().push(Recorded {
                    head,
                    body: buf[head_end..].to_vec(),
                });
                match answer {
                    Answer::Whole(status, body) => {
                        let resp = format!(
                            "HTTP/1.1 {status} X\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                            body.len()
                        );
                        s.write_all(resp.as_bytes()).await.unwrap();
                    }
                    Answer::Chunked(chunks) => {
                        s.write_all(b"HTTP/1.1 200 OK\r\ncontent-type: application/x-ndjson\r\ntransfer-encoding: chunked\r\nconnection: close\r\n\r\n")
                            .await
                            .unwrap();
                        for c in chunks {
                            let c = format!("{:x}\r\n{c}\r\n", c.len());
                            s.write_all(c.as_bytes()).await.unwrap();
                            s.flush().await.unwrap();
                        }
                        s.write_all(b"0\r\n\r\n").await.unwrap();
                    }
                }
                s.shutdown().await.unwrap();
            }
        });
        TestServer {
            _dir: dir,
            socket,
            requests,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bftp_api::Health;

    #[tokio::test]
    async fn get_sends_host_and_reads_json() {
        let srv = testserver::start(vec![(200, r#"{"status":"ok","version":"0.1.0"}"#)]);
        let client = Client::new(&srv.socket);
        let reply: Reply<Health> = client.get("/v1/health").await.unwrap();
        assert_eq!(reply.value.status, "ok");
        let req = srv.requests.lock().unwrap()[0].clone();
        assert_eq!(req.request_line(), "GET /v1/health HTTP/1.1");
        assert_eq!(req.header("host").as_deref(), Some("localhost"));
    }

    #[tokio::test]
    async fn missing_socket_is_exit_3_and_names_the_path() {
        let dir = tempfile::tempdir().unwrap();
        let socket = dir.path().join("nope.sock");
        let err = Client::new(&socket)
            .get::<Health>("/v1/health")
            .await
            .unwrap_err();
        assert_eq!(crate::exit::exit_of(&err), Exit::Unreachable);
        let msg = format!("{err:#}");
        assert!(
            msg.starts_with("bftpd is not running? could not connect to "),
            "{msg}"
        );
        assert!(msg.contains(&socket.display().to_string()), "{msg}");
    }

    #[tokio::test]
    async fn refused_socket_is_exit_3() {
        let dir = tempfile::tempdir().unwrap();
        let socket = dir.path().join("stale.sock");
        drop(std::os::unix::net::UnixListener::bind(&socket).unwrap());
        let err = Client::new(&socket)
            .get::<Health>("/v1/health")
            .await
            .unwrap_err();
        assert_eq!(crate::exit::exit_of(&err), Exit::Unreachable, "{err:#}");
    }

    #[tokio::test]
    async fn error_statuses_map_to_exit_codes() {
        let body = r#"{"kind":"not_found","message":"no job 7"}"#;
        let srv = testserver::start(vec![(404, body), (400, body), (500, "boom")]);
        let client = Client::new(&srv.socket);
        for want in [Exit::NotFound, Exit::Invalid, Exit::Unexpected] {
            let err = client.get::<Health>("/v1/jobs/7").await.unwrap_err();
            assert_eq!(crate::exit::exit_of(&err), want, "{err:#}");
        }
    }

    #[tokio::test]
    async fn a_streamed_answer_is_read_piece_by_piece() {
        let pieces = ["{\"a\":", "1}\n{\"b\"", ":2}\n"];
        let srv = testserver::serve(vec![testserver::Answer::Chunked(
            pieces.iter().map(|p| p.to_string()).collect(),
        )]);
        let mut stream = Client::new(&srv.socket)
            .post_streaming("/v1/transfer", b"{}".to_vec())
            .await
            .unwrap();
        let mut got = Vec::new();
        while let Some(piece) = stream.next_chunk().await.unwrap() {
            assert!(!piece.is_empty());
            got.extend_from_slice(&piece);
        }
        assert_eq!(got, pieces.concat().as_bytes());
        let req = srv.requests.lock().unwrap()[0].clone();
        assert_eq!(req.request_line(), "POST /v1/transfer HTTP/1.1");
        assert_eq!(
            req.header("accept").as_deref(),
            Some("application/x-ndjson")
        );
        assert_eq!(req.body, b"{}");
    }

    #[tokio::test]
    async fn a_refused_stream_is_a_failure_with_its_exit_code() {
        let body = r#"{"kind":"unavailable","message":"shutting down"}"#;
        let srv = testserver::start(vec![(503, body)]);
        let err = Client::new(&srv.socket)
            .post_streaming("/v1/transfer", b"{}".to_vec())
            .await
            .err()
            .unwrap();
        assert_eq!(crate::exit::exit_of(&err), Exit::Unreachable);
        assert_eq!(
            format!("{err:#}"),
            "shutting down [HTTP 503 Service Unavailable]"
        );
    }

    #[tokio::test]
    async fn delete_reads_an_empty_answer_and_maps_errors() {
        let srv = testserver::start(vec![
            (204, ""),
            (404, r#"{"kind":"not_found","message":"no watch 3"}"#),
        ]);
        let client = Client::new(&srv.socket);
        assert!(client.delete("/v1/watches/3").await.unwrap().is_empty());
        let err = client.delete("/v1/watches/3").await.unwrap_err();
        assert_eq!(crate::exit::exit_of(&err), Exit::NotFound);
        let req = srv.requests.lock().unwrap()[0].clone();
        assert_eq!(req.request_line(), "DELETE /v1/watches/3 HTTP/1.1");
    }

    #[test]
    fn eacces_is_exit_7() {
        let client = Client::new("/run/bftpd/bftpd.sock");
        let denied = std::io::Error::from(std::io::ErrorKind::PermissionDenied);
        let err = client.transport_failure(TransportError::Connect(denied));
        assert_eq!(crate::exit::exit_of(&err), Exit::PermissionDenied);
        assert!(
            format!("{err:#}").contains("/run/bftpd/bftpd.sock"),
            "{err:#}"
        );
    }

    #[test]
    fn query_is_form_encoded() {
        let p = path_with_query(
            "/v1/jobs",
            &[("keyword", "a b&c=d".into()), ("all", "true".into())],
        );
        assert_eq!(p, "/v1/jobs?keyword=a+b%26c%3Dd&all=true");
        assert_eq!(path_with_query("/v1/jobs", &[]), "/v1/jobs");
    }
}
