//! Forwarding a call to its backend: exactly the canonical args that were fingerprinted, over
//! pooled HTTP/1.1 connections with `TCP_NODELAY` and the route's timeout, or to a built-in
//! demo tool.
//!
//! A pooled connection is driven by the task that forwards the call, not by a connection task
//! of its own: the request is written and the answer read with no hand-off between tasks (a
//! lone forward to a loopback backend measured 66 µs through a general-purpose client with a
//! connection task, 38 µs driven in the task). TLS backends are verified against
//! `server.upstream_ca` alone when it is set, else the system's roots.
//!
//! It never retries a call that may have reached the backend: a call that failed after approval
//! needs a new decision. The one retry is of a request that was never sent, because the pooled
//! connection it was given had been closed by the backend meanwhile. It does not touch the
//! store; the pipeline records what this returns.

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};
use std::thread::ThreadId;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http1::SendRequest;
use hyper_util::rt::TokioIo;
use serde_json::{json, Value};

use crate::config::{Config, Target, ToolRoute, Upstream};
use crate::error::{ApiError, Code};

/// The largest backend answer kept; a larger one is `upstream.too_large`.
const MAX_RESPONSE_BYTES: usize = 16 << 20;

/// Idle connections kept per backend origin and serving thread, and for how long.
const MAX_IDLE_PER_ORIGIN: usize = 256;
const IDLE_TIMEOUT: Duration = Duration::from_secs(90);

/// What the backend answered.
#[derive(Debug, Clone, PartialEq)]
pub struct Answer {
    pub status: u16,
    /// JSON, or a string when the body was not JSON.
    pub body: Value,
}

/// Headers that tie a forwarded call to its decision.
pub struct CallHeaders<'a> {
    pub call_id: &'a str,
    pub fingerprint: &'a str,
    pub approval_id: Option<&'a str>,
    /// A resume of a suspended call: sent as `airlock-resume: <call id>` (DESIGN §11).
    pub resume: bool,
    /// The route's credential (`credentials`): headers only airlock holds.
    pub credential: &'a [(hyper::header::HeaderName, hyper::header::HeaderValue)],
}

/// An HTTP/1.1 connection to a backend: the handle requests are sent through, and the
/// connection itself, polled by whoever sends.
struct Conn {
    send: SendRequest<Full<Bytes>>,
    io: Pin<Box<dyn Future<Output = hyper::Result<()>> + Send>>,
    idle_since: Instant,
}

impl Conn {
    /// Whether a pooled connection can take a request: not idle too long, and not closed by
    /// the backend meanwhile (polled once, without waiting, to notice a close).
    fn usable(&mut self) -> bool {
        if self.idle_since.elapsed() > IDLE_TIMEOUT || self.send.is_closed() {
            return false;
        }
        let mut cx = Context::from_waker(Waker::noop());
        self.io.as_mut().poll(&mut cx).is_pending() && self.send.is_ready()
    }
}

pub struct Upstreams {
    /// Idle connections by origin and by the thread that made them: a connection's socket
    /// answers to its thread's runtime, so a request on another serving thread would be
    /// woken through that one (see [`crate::serve::threads`]).
    idle: Mutex<HashMap<ThreadId, HashMap<String, Vec<Conn>>>>,
    tls: tokio_rustls::TlsConnector,
}

impl Upstreams {
    pub fn new(config: &Config) -> Result<Upstreams, String> {
        let ca =
            match &config.upstream_ca {
                Some(ca) => Some(std::fs::read(ca).map_err(|e| {
                    format!("server.upstream_ca: cannot read {}: {e}", ca.display())
                })?),
                None => None,
            };
        let mut tls =
            airlock_storage::tls_client_config(ca.as_deref()).map_err(|e| {
                match &config.upstream_ca {
                    Some(ca) => format!("server.upstream_ca: {}: {e}", ca.display()),
                    None => format!("cannot set up TLS to upstreams: {e}"),
                }
            })?;
        tls.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(Upstreams {
            idle: Mutex::new(HashMap::new()),
            tls: tokio_rustls::TlsConnector::from(Arc::new(tls)),
        })
    }

    /// Sends `canonical_args` to the route's backend.
    pub async fn forward(
        &self,
        route: &ToolRoute,
        tool: &str,
        canonical_args: &str,
        headers: CallHeaders<'_>,
    ) -> Result<(Answer, Duration), ApiError> {
        let start = Instant::now();
        let answer = match &route.upstream {
            Upstream::Builtin(name) => builtin(name, tool, canonical_args, headers.resume),
            Upstream::Http(target) => {
                let timeout = route.timeout;
                match tokio::time::timeout(timeout, self.http(target, canonical_args, &headers))
                    .await
                {
                    Ok(answer) => answer,
                    Err(_) => Err(ApiError::new(
                        Code::UpstreamTimeout,
                        format!("the backend did not answer within {timeout:?}"),
                    )),
                }
            }
        }?;
        Ok((answer, start.elapsed()))
    }

    async fn http(
        &self,
        target: &Target,
        body: &str,
        h: &CallHeaders<'_>,
    ) -> Result<Answer, ApiError> {
        let mut req = hyper::Request::post(target.path.as_str())
            .header(hyper::header::HOST, target.authority.as_str())
            .header(hyper::header::CONTENT_TYPE, "application/json")
            .header("airlock-call-id", h.call_id)
            .header("airlock-fingerprint", h.fingerprint);
        if let Some(a) = h.approval_id {
            req = req.header("airlock-approval-id", a);
        }
        if h.resume {
            req = req.header("airlock-resume", h.call_id);
        }
        if let Some(basic) = &target.basic {
            req = req.header(hyper::header::AUTHORIZATION, basic.as_str());
        }
        for (name, value) in h.credential {
            req = req.header(name, value);
        }
        let req = req
            .body(Full::new(Bytes::copy_from_slice(body.as_bytes())))
            .map_err(|e| unreachable_backend(&e))?;
        let read = |resp: hyper::Response<hyper::body::Incoming>| async move {
            let status = resp.status().as_u16();
            let mut body = resp.into_body();
            let mut bytes = Vec::new();
            while let Some(frame) = body.frame().await {
                if let Ok(data) = frame.map_err(|e| unreachable_backend(&e))?.into_data() {
                    if bytes.len() + data.len() > MAX_RESPONSE_BYTES {
                        return Err(ApiError::new(
                            Code::UpstreamTooLarge,
                            format!(
                                "the backend's answer is larger than {MAX_RESPONSE_BYTES} bytes"
                            ),
                        ));
                    }
                    bytes.extend_from_slice(&data);
                }
            }
            let body = serde_json::from_slice(&bytes)
                .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&bytes).into_owned()));
            Ok(Answer { status, body })
        };
        self.exchange(target, req, read, |e| unreachable_backend(&e))
            .await?
    }

    /// Sends `req` to `target` over one of this thread's pooled connections (a new one when
    /// none is idle) and reads the answer with `read`, both in the calling task, which drives
    /// the connection meanwhile; the connection goes back to the pool if it is still open
    /// when `read` is done. A request never sent, because the pooled connection it was given
    /// had been closed by the backend meanwhile, goes on another; nothing that may have been
    /// sent is sent again. `unreachable` says why a connection failed, in the caller's terms.
    pub(crate) async fn exchange<T, F, Fut, E>(
        &self,
        target: &Target,
        mut req: hyper::Request<Full<Bytes>>,
        read: F,
        unreachable: impl Fn(&dyn std::fmt::Display) -> E,
    ) -> Result<T, E>
    where
        F: FnOnce(hyper::Response<hyper::body::Incoming>) -> Fut,
        Fut: Future<Output = T>,
    {
        let mut read = Some(read);
        loop {
            let (mut conn, pooled) = match self.checkout(&target.origin) {
                Some(conn) => (conn, true),
                None => (
                    self.connect(target)
                        .await
                        .map_err(|e| unreachable(&e.message))?,
                    false,
                ),
            };
            let sent = conn.send.try_send_request(req);
            let exchange = async {
                match sent.await {
                    Ok(resp) => match read.take() {
                        Some(read) => Ok(read(resp).await),
                        None => Err(None),
                    },
                    Err(e) => Err(Some(e)),
                }
            };
            let (result, open) = drive(&mut conn, exchange).await;
            match result {
                Ok(answer) => {
                    if open {
                        self.checkin(&target.origin, conn);
                    }
                    return Ok(answer);
                }
                Err(Some(mut e)) => match e.take_message() {
                    // Never sent: a pooled connection the backend had closed. Another one.
                    Some(unsent) if pooled => req = unsent,
                    _ => return Err(unreachable(e.error())),
                },
                Err(None) => return Err(unreachable(&"the answer was read already")),
            }
        }
    }

    /// An idle connection to `origin` this thread made that can take a request, newest first.
    fn checkout(&self, origin: &str) -> Option<Conn> {
        let mut idle = self.idle.lock().unwrap_or_else(|e| e.into_inner());
        let conns = idle
            .get_mut(&std::thread::current().id())?
            .get_mut(origin)?;
        while let Some(mut conn) = conns.pop() {
            if conn.usable() {
                return Some(conn);
            }
        }
        None
    }

    fn checkin(&self, origin: &str, mut conn: Conn) {
        conn.idle_since = Instant::now();
        let mut idle = self.idle.lock().unwrap_or_else(|e| e.into_inner());
        let conns = idle
            .entry(std::thread::current().id())
            .or_default()
            .entry(origin.to_owned())
            .or_default();
        if conns.len() < MAX_IDLE_PER_ORIGIN {
            conns.push(conn);
        }
    }

    async fn connect(&self, target: &Target) -> Result<Conn, ApiError> {
        let tcp = tokio::net::TcpStream::connect((target.host.as_str(), target.port))
            .await
            .map_err(|e| unreachable_backend(&e))?;
        tcp.set_nodelay(true).map_err(|e| unreachable_backend(&e))?;
        if !target.tls {
            return handshake(TokioIo::new(tcp)).await;
        }
        let name = rustls::pki_types::ServerName::try_from(target.host.clone())
            .map_err(|e| unreachable_backend(&e))?;
        let tls = self
            .tls
            .connect(name, tcp)
            .await
            .map_err(|e| unreachable_backend(&e))?;
        handshake(TokioIo::new(tls)).await
    }
}

/// HTTP/1.1 over an open stream.
async fn handshake<T>(io: T) -> Result<Conn, ApiError>
where
    T: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
{
    let (send, conn) = hyper::client::conn::http1::handshake(io)
        .await
        .map_err(|e| unreachable_backend(&e))?;
    Ok(Conn {
        send,
        io: Box::pin(conn),
        idle_since: Instant::now(),
    })
}

/// Runs `exchange` while polling the connection that carries it. Returns its result, and
/// whether the connection is still open and ready for another request.
async fn drive<T>(conn: &mut Conn, exchange: impl Future<Output = T>) -> (T, bool) {
    tokio::pin!(exchange);
    let mut closed = false;
    let result = std::future::poll_fn(|cx| {
        if let Poll::Ready(out) = exchange.as_mut().poll(cx) {
            return Poll::Ready(out);
        }
        // Once the connection has ended, the exchange learns it from its own future.
        if !closed && conn.io.as_mut().poll(cx).is_ready() {
            closed = true;
            return exchange.as_mut().poll(cx);
        }
        Poll::Pending
    })
    .await;
    (result, !closed && conn.send.is_ready())
}

fn unreachable_backend(e: &dyn std::fmt::Display) -> ApiError {
    ApiError::new(
        Code::UpstreamUnavailable,
        format!("the backend could not be reached: {e}"),
    )
}

/// The demo tools: they show what would run and run nothing. `demo.deploy` asks which
/// environment mid-call (it suspends, DESIGN §11) and, resumed, says where it would deploy.
fn builtin(name: &str, tool: &str, body: &str, resume: bool) -> Result<Answer, ApiError> {
    let sent: Value = serde_json::from_str(body).unwrap_or(Value::Null);
    let args = if resume {
        sent["args"].clone()
    } else {
        sent.clone()
    };
    let body = match name {
        "demo.deploy" if !resume => {
            return Ok(Answer {
                status: 202,
                body: json!({"suspend": {
                    "payload": {"question": "which environment?", "service": args.get("service")},
                    "resume_schema": {
                        "type": "object",
                        "properties": {"environment": {
                            "type": "string",
                            "enum": ["staging", "production"],
                            "description": "where to deploy",
                        }},
                        "required": ["environment"],
                        "additionalProperties": false,
                    },
                }}),
            })
        }
        "demo.deploy" => json!({
            "tool": tool,
            "service": args.get("service"),
            "environment": sent["resume_data"]["environment"],
            "deployed": false,
            "note": "demo tool: it shows where it would deploy and deploys nothing",
        }),
        "demo.echo" => json!({"tool": tool, "echo": args}),
        "demo.shell_preview" => json!({
            "tool": tool,
            "command": args.get("command").cloned().unwrap_or(Value::Null),
            "executed": false,
            "note": "demo tool: it shows the command that was approved and runs nothing",
        }),
        other => {
            return Err(ApiError::new(
                Code::ToolUnknown,
                format!("no built-in tool `{other}`"),
            ))
        }
    };
    Ok(Answer { status: 200, body })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn backend_urls_name_their_origin_host_header_path_and_credentials() {
        let t = Target::parse("http://127.0.0.1:8080/run?x=1").unwrap();
        assert_eq!(
            (t.tls, t.host.as_str(), t.port, t.origin.as_str()),
            (false, "127.0.0.1", 8080, "http://127.0.0.1:8080")
        );
        assert_eq!(
            (t.authority.as_str(), t.path.as_str()),
            ("127.0.0.1:8080", "/run?x=1")
        );
        assert_eq!(t.basic, None);

        let t = Target::parse("https://tools.internal").unwrap();
        assert_eq!((t.tls, t.port, t.path.as_str()), (true, 443, "/"));
        assert_eq!(t.authority, "tools.internal");

        let t = Target::parse("http://[::1]:9000/x").unwrap();
        assert_eq!((t.host.as_str(), t.port), ("::1", 9000));
        assert_eq!(t.authority, "[::1]:9000");

        // Credentials become a Basic header and never reach the Host header.
        let t = Target::parse("https://ops%40corp:p%3Ass+w@api.internal:8443/tool").unwrap();
        assert_eq!(t.authority, "api.internal:8443");
        assert_eq!(t.origin, "https://api.internal:8443");
        use base64::Engine as _;
        let decoded = base64::engine::general_purpose::STANDARD
            .decode(t.basic.unwrap().strip_prefix("Basic ").unwrap())
            .unwrap();
        assert_eq!(String::from_utf8(decoded).unwrap(), "ops@corp:p:ss+w");

        for bad in ["ftp://x/y", "http://", "not a url", "/relative"] {
            assert!(Target::parse(bad).is_err(), "{bad}");
        }
    }

    /// Reads one HTTP/1.1 request (headers and a `content-length` body) from `stream`.
    async fn read_request(stream: &mut tokio::net::TcpStream) -> Option<Vec<u8>> {
        use tokio::io::AsyncReadExt;
        let mut buf = Vec::new();
        let mut chunk = [0u8; 4096];
        loop {
            if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                let head = String::from_utf8_lossy(&buf[..end]).to_lowercase();
                let len: usize = head
                    .lines()
                    .find_map(|l| l.strip_prefix("content-length:"))
                    .map_or(0, |v| v.trim().parse().unwrap());
                if buf.len() >= end + 4 + len {
                    return Some(buf[end + 4..end + 4 + len].to_vec());
                }
            }
            match stream.read(&mut chunk).await {
                Ok(0) | Err(_) => return None,
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
            }
        }
    }

    fn upstreams() -> Upstreams {
        let tls = airlock_storage::tls_client_config(None).unwrap();
        Upstreams {
            idle: Mutex::new(HashMap::new()),
            tls: tokio_rustls::TlsConnector::from(Arc::new(tls)),
        }
    }

    const HEADERS: CallHeaders<'static> = CallHeaders {
        credential: &[],
        call_id: "call_1",
        fingerprint: "sha256:00",
        approval_id: None,
        resume: false,
    };

    #[tokio::test]
    async fn a_pooled_connection_the_backend_closed_is_replaced_and_each_call_sent_once() {
        use tokio::io::AsyncWriteExt;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let target =
            Target::parse(&format!("http://{}/tool", listener.local_addr().unwrap())).unwrap();
        // Each connection answers one request, keep-alive, then the backend closes it.
        let backend = tokio::spawn(async move {
            let mut bodies = Vec::new();
            for _ in 0..2 {
                let (mut stream, _) = listener.accept().await.unwrap();
                bodies.push(read_request(&mut stream).await.unwrap());
                stream
                    .write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 11\r\n\r\n{\"ok\":true}")
                    .await
                    .unwrap();
            }
            bodies
        });
        let ups = upstreams();
        for n in 1..=2 {
            let args = format!("{{\"n\":{n}}}");
            let answer = ups.http(&target, &args, &HEADERS).await.unwrap();
            assert_eq!(
                (answer.status, answer.body.clone()),
                (200, json!({"ok": true}))
            );
        }
        let bodies = backend.await.unwrap();
        assert_eq!(bodies, vec![b"{\"n\":1}".to_vec(), b"{\"n\":2}".to_vec()]);
    }

    #[tokio::test]
    async fn a_request_the_backend_read_but_never_answered_is_not_sent_again() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/tool", listener.local_addr().unwrap());
        let seen = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let counter = seen.clone();
        tokio::spawn(async move {
            loop {
                let (mut stream, _) = listener.accept().await.unwrap();
                if read_request(&mut stream).await.is_some() {
                    counter.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                }
                // Closed without an answer: the call may have run.
            }
        });
        let target = Target::parse(&url).unwrap();
        let e = upstreams().http(&target, "{}", &HEADERS).await.unwrap_err();
        assert_eq!(e.code, Code::UpstreamUnavailable, "{}", e.message);
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert_eq!(seen.load(std::sync::atomic::Ordering::SeqCst), 1);
    }
}
