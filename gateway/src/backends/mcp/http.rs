//! A streamable HTTP MCP client for one upstream, in whichever revisions it speaks. It asks
//! `server/discover` first: an upstream that lists 2026-07-28 is spoken to statelessly, each
//! request carrying `_meta` and the routing headers. The 2025-11-25 `initialize` handshake and
//! its session come only when discovery fails, or when a request must go on the upstream's
//! 2025 path (a tool or prompt it serves only there, or a 2025 client's session-bound
//! request): [`Path`] says which path a request wants. Answers come as JSON or as a
//! server-sent event stream; notifications on that stream (progress) are handed to the caller.
//!
//! Server-to-client requests on a request's stream (elicitation, sampling) go to that
//! request's [`Asks`]; their answers are posted back to the upstream. Without a place to go
//! they are answered "not relayed".
//!
//! A request and its answer go over the HTTP backends' per-thread pools
//! ([`Upstreams::exchange`]), sent and read in the calling task. Only what is sent out of band
//! (answers to the upstream's requests, notifications, a cancel) goes through a
//! general-purpose client, since it may outlive the request it belongs to.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::ThreadId;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use serde_json::{json, Value};

use super::{
    ask, classify, client_capabilities, client_info, is_list_changed, with_modern_meta, Asks,
    Envelope, Failure, Incoming, Notifications, Params, Path, LEGACY, MODERN,
};
use crate::backends::http::Upstreams;
use crate::config::Target;

/// How one request is sent: statelessly in 2026-07-28, or in a 2025-11-25 session.
#[derive(Debug, Clone, PartialEq)]
enum Mode {
    Modern,
    Legacy { session: Option<String> },
}

/// What was learnt of the upstream once it was reached.
#[derive(Debug, Clone, PartialEq)]
struct Learnt {
    /// `server/discover` answered, listing 2026-07-28.
    modern: bool,
    /// The 2025-11-25 session (with the id the upstream gave, if any), once opened.
    session: Option<Option<String>>,
    /// A 2026-07-28 upstream refused the 2025 handshake: it has no 2025 path.
    legacy_refused: bool,
}

pub struct HttpConn {
    url: String,
    /// Where requests go, for the pool.
    target: Target,
    /// The HTTP backends' per-thread connection pools: a request and its answer are sent
    /// and read in the calling task, as a tool call to an HTTP backend is.
    pool: Arc<Upstreams>,
    headers: Vec<(String, String)>,
    /// What every pooled request carries, parsed once: the path, `host`, `authorization`
    /// from the URL's credentials, and the configured headers.
    fixed: Fixed,
    /// A client (and so a connection pool) per thread: a connection's task runs on the
    /// runtime that opened it, so a request on a serving thread uses connections that thread
    /// drives, not another's (see [`crate::serve::threads`]).
    clients: Mutex<HashMap<ThreadId, reqwest::Client>>,
    /// The client built when the upstream was configured; serves a thread whose own could
    /// not be built.
    first: reqwest::Client,
    /// `None` until the upstream is reached; kept until its 2025 session expires.
    learnt: tokio::sync::Mutex<Option<Learnt>>,
    next_id: AtomicU64,
    /// Told when the upstream says one of its lists changed.
    changed: Arc<tokio::sync::Notify>,
    /// The OAuth client whose token every request carries (`credentials`), and the
    /// `Authorization` value last attached, for the requests sent out of band.
    oauth: Option<OAuthSource>,
    bearer: Mutex<Option<hyper::header::HeaderValue>>,
}

/// Where an upstream's token comes from: the vault, as this client, under this name.
pub struct OAuthSource {
    pub vault: Arc<crate::credentials::Vault>,
    pub client: crate::config::OAuthClient,
    pub upstream: String,
}

fn build_client() -> Result<reqwest::Client, String> {
    reqwest::Client::builder()
        .tcp_nodelay(true)
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .map_err(|e| format!("cannot build the MCP client: {e}"))
}

/// The largest answer read from an upstream.
const MAX_ANSWER_BYTES: usize = 16 << 20;

impl HttpConn {
    pub fn new(
        url: &str,
        headers: Vec<(String, String)>,
        changed: Arc<tokio::sync::Notify>,
        pool: Arc<Upstreams>,
        oauth: Option<OAuthSource>,
    ) -> Result<HttpConn, String> {
        // Built once here so a client that cannot be built is an error at start.
        let client = build_client()?;
        let target = Target::parse(url)?;
        let fixed = Fixed::new(&target, &headers)?;
        Ok(HttpConn {
            url: url.to_owned(),
            target,
            pool,
            headers,
            fixed,
            clients: Mutex::new(HashMap::from([(
                std::thread::current().id(),
                client.clone(),
            )])),
            first: client,
            learnt: tokio::sync::Mutex::new(None),
            next_id: AtomicU64::new(1),
            changed,
            oauth,
            bearer: Mutex::new(None),
        })
    }

    /// The upstream's token, from the vault (cached there until shortly before it expires),
    /// kept for the requests sent out of band.
    async fn authorize(&self) -> Result<(), Failure> {
        let Some(o) = &self.oauth else {
            return Ok(());
        };
        let value = o
            .vault
            .authorization(&o.upstream, &o.client, "")
            .await
            .map_err(|r| Failure::Credentials(r.error.message))?;
        *self.bearer.lock().unwrap_or_else(|e| e.into_inner()) = Some(value);
        Ok(())
    }

    fn bearer(&self) -> Option<hyper::header::HeaderValue> {
        self.bearer
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// This thread's client, built on first use.
    fn client(&self) -> reqwest::Client {
        let mut clients = self.clients.lock().unwrap_or_else(|e| e.into_inner());
        match clients.entry(std::thread::current().id()) {
            std::collections::hash_map::Entry::Occupied(c) => c.get().clone(),
            std::collections::hash_map::Entry::Vacant(slot) => match build_client() {
                Ok(c) => slot.insert(c).clone(),
                // Built once already with the same settings; should another build fail, the
                // first client serves (its connections then cross threads).
                Err(_) => self.first.clone(),
            },
        }
    }

    /// Sends one request on the path `want` asks for (`None`: the client's revision, 2026-07-28
    /// for a caller that is no MCP client), or on the one path the upstream has. The upstream
    /// is reached first if it was not yet; a 2025 session the upstream forgot (404) is opened
    /// again once.
    pub async fn request(
        &self,
        method: &str,
        params: Params,
        timeout: Duration,
        notify: Option<Notifications>,
        asks: Option<Asks>,
        want: Option<Path>,
    ) -> Result<Value, Failure> {
        let want = want.unwrap_or_else(super::client_path);
        let fut = async {
            let mode = self.mode_for(want).await?;
            match self
                .post(&mode, method, &params, notify.clone(), asks.clone())
                .await
            {
                Err(Failure::Unavailable(why)) if why == SESSION_EXPIRED => {
                    self.forget_session().await;
                    let mode = self.mode_for(want).await?;
                    self.post(&mode, method, &params, notify, asks).await
                }
                other => other,
            }
            .map(|(r, _)| r)
        };
        tokio::time::timeout(timeout, fut)
            .await
            .map_err(|_| Failure::Timeout)?
    }

    /// The paths the upstream serves, reaching it first if needed: 2026-07-28 when it answers
    /// `server/discover`, and 2025-11-25 when it takes the handshake (opening the session
    /// that 2025 clients' session-bound requests then use).
    pub async fn paths(&self, timeout: Duration) -> Result<Vec<Path>, Failure> {
        let fut = async {
            let mut paths = Vec::new();
            if self.learn().await?.modern {
                paths.push(Path::Modern);
            }
            if matches!(self.mode_for(Path::Legacy).await?, Mode::Legacy { .. }) {
                paths.push(Path::Legacy);
            }
            Ok(paths)
        };
        tokio::time::timeout(timeout, fut)
            .await
            .map_err(|_| Failure::Timeout)?
    }

    /// The revision the upstream is spoken to in by default, once reached.
    pub async fn revision(&self) -> Option<&'static str> {
        let learnt = self.learnt.lock().await;
        learnt
            .as_ref()
            .map(|l| if l.modern { MODERN } else { LEGACY })
    }

    /// What the upstream speaks, asking it if it was never reached: `server/discover` first,
    /// the 2025 handshake only when discovery fails (DESIGN §15). Nothing is kept while it
    /// cannot be reached.
    async fn learn(&self) -> Result<Learnt, Failure> {
        let mut learnt = self.learnt.lock().await;
        if let Some(l) = learnt.as_ref() {
            return Ok(l.clone());
        }
        let discovered = self
            .send(&Mode::Modern, "server/discover", json!({}), None)
            .await;
        let found = match discovered {
            Ok(found) if lists_modern(&found) => Learnt {
                modern: true,
                session: None,
                legacy_refused: false,
            },
            Ok(_) | Err(_) => match self.handshake().await {
                Ok(session) => Learnt {
                    modern: false,
                    session: Some(session),
                    legacy_refused: false,
                },
                Err(f) => {
                    return Err(match discovered {
                        Ok(_) => Failure::Unavailable(
                            "the MCP server speaks neither 2026-07-28 (its `server/discover` does not list it) nor 2025-11-25".into(),
                        ),
                        // The upstream could not be reached at all: say so, not that the
                        // handshake failed.
                        Err(d) if !answered(&d) => d,
                        Err(_) => f,
                    });
                }
            },
        };
        *learnt = Some(found.clone());
        Ok(found)
    }

    /// How a request that wants `want` is sent: on that path when the upstream serves it,
    /// else on the one it has. The 2025 session is opened here the first time one needs it.
    async fn mode_for(&self, want: Path) -> Result<Mode, Failure> {
        let known = self.learn().await?;
        if known.modern && (want == Path::Modern || known.legacy_refused) {
            return Ok(Mode::Modern);
        }
        let mut learnt = self.learnt.lock().await;
        let Some(l) = learnt.as_mut() else {
            // Forgotten since (an expired session of a 2025-only upstream): reach it again.
            drop(learnt);
            return Box::pin(self.mode_for(want)).await;
        };
        if let Some(session) = &l.session {
            return Ok(Mode::Legacy {
                session: session.clone(),
            });
        }
        if l.legacy_refused {
            return Ok(Mode::Modern);
        }
        match self.handshake().await {
            Ok(session) => {
                l.session = Some(session.clone());
                Ok(Mode::Legacy { session })
            }
            Err(f) if l.modern && answered(&f) => {
                l.legacy_refused = true;
                Ok(Mode::Modern)
            }
            Err(f) => Err(f),
        }
    }

    /// Forgets an expired 2025 session: the next request on that path opens another (for a
    /// 2025-only upstream, the upstream is reached again from the start).
    async fn forget_session(&self) {
        let mut learnt = self.learnt.lock().await;
        match learnt.as_mut() {
            Some(l) if l.modern => l.session = None,
            _ => *learnt = None,
        }
    }

    /// The 2025-11-25 handshake: `initialize`, then `notifications/initialized`; the session
    /// id the upstream gave, if any.
    async fn handshake(&self) -> Result<Option<String>, Failure> {
        let init = json!({
            "protocolVersion": LEGACY,
            "capabilities": client_capabilities(),
            "clientInfo": client_info(),
        });
        let (result, session) = self
            .post(
                &Mode::Legacy { session: None },
                "initialize",
                &init.into(),
                None,
                None,
            )
            .await?;
        let version = result
            .get("protocolVersion")
            .and_then(Value::as_str)
            .unwrap_or("");
        if version != LEGACY {
            tracing::warn!(url = %self.url, version, "MCP server chose another protocol version; speaking 2025-11-25 to it");
        }
        let mode = Mode::Legacy {
            session: session.clone(),
        };
        self.notify_upstream(&mode, "notifications/initialized", json!({}))
            .await;
        Ok(session)
    }

    async fn send(
        &self,
        mode: &Mode,
        method: &str,
        params: Value,
        notify: Option<Notifications>,
    ) -> Result<Value, Failure> {
        self.post(mode, method, &params.into(), notify, None)
            .await
            .map(|(r, _)| r)
    }

    /// The protocol's headers of a request in `mode` (beyond the content type, what it
    /// accepts and the configured headers), each handed to `add`.
    fn protocol_headers<'a>(
        mode: &'a Mode,
        method: &'a str,
        params: &'a Value,
        mut add: impl FnMut(&'static str, &'a str),
    ) {
        match mode {
            Mode::Modern => {
                add("mcp-protocol-version", MODERN);
                add("mcp-method", method);
                let name = match method {
                    "tools/call" | "prompts/get" => params.get("name"),
                    "resources/read" => params.get("uri"),
                    "tasks/get" | "tasks/update" | "tasks/cancel" => params.get("taskId"),
                    _ => None,
                };
                if let Some(n) = name.and_then(Value::as_str) {
                    add("mcp-name", n);
                }
            }
            Mode::Legacy { session } => {
                if method != "initialize" {
                    add("mcp-protocol-version", LEGACY);
                }
                if let Some(s) = session {
                    add("mcp-session-id", s.as_str());
                }
            }
        }
    }

    /// A request sent out of band (a notification, an answer to the upstream's request),
    /// through a general-purpose client: it may outlive the request it belongs to.
    fn builder(&self, mode: &Mode, method: &str, params: &Value) -> reqwest::RequestBuilder {
        let mut req = self
            .client()
            .post(&self.url)
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream");
        let mut extra: Vec<(&str, &str)> = Vec::new();
        Self::protocol_headers(mode, method, params, |k, v| extra.push((k, v)));
        let configured = self.headers.iter().map(|(k, v)| (k.as_str(), v.as_str()));
        for (k, v) in configured.chain(extra) {
            req = req.header(k, v);
        }
        if let Some(b) = self.bearer() {
            req = req.header(hyper::header::AUTHORIZATION, b);
        }
        req
    }

    /// A request of ours for the pool: POST to the upstream's path, with `body`. Its fixed
    /// headers were parsed when the upstream was configured; only the protocol's are made here.
    fn pooled(
        &self,
        mode: &Mode,
        method: &str,
        params: &Value,
        body: String,
    ) -> Result<hyper::Request<Full<Bytes>>, Failure> {
        use hyper::header::{HeaderName, HeaderValue};
        let mut req = hyper::Request::new(Full::new(Bytes::from(body)));
        *req.method_mut() = hyper::Method::POST;
        *req.uri_mut() = self.fixed.path.clone();
        let h = req.headers_mut();
        h.insert(hyper::header::HOST, self.fixed.host.clone());
        h.insert(
            hyper::header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        h.insert(
            hyper::header::ACCEPT,
            HeaderValue::from_static("application/json, text/event-stream"),
        );
        if let Some(basic) = &self.fixed.basic {
            h.insert(hyper::header::AUTHORIZATION, basic.clone());
        }
        for (k, v) in &self.fixed.headers {
            h.append(k.clone(), v.clone());
        }
        if let Some(b) = self.bearer() {
            h.insert(hyper::header::AUTHORIZATION, b);
        }
        let mut bad = None;
        Self::protocol_headers(mode, method, params, |k, v| {
            match HeaderValue::from_str(v) {
                Ok(v) => {
                    h.append(HeaderName::from_static(k), v);
                }
                Err(_) => bad = Some(k),
            }
        });
        match bad {
            Some(k) => Err(Failure::Unavailable(format!(
                "cannot make the request: its `{k}` is not a valid header value"
            ))),
            None => Ok(req),
        }
    }

    /// One JSON-RPC request; returns its result and the session id the answer named.
    async fn post(
        &self,
        mode: &Mode,
        method: &str,
        params: &Params,
        notify: Option<Notifications>,
        asks: Option<Asks>,
    ) -> Result<(Value, Option<String>), Failure> {
        let modern;
        let params = if *mode == Mode::Modern {
            modern = Params {
                fields: with_modern_meta(params.fields.clone()),
                arguments: params.arguments.clone(),
            };
            &modern
        } else {
            params
        };
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        // Dropped before the answer (the client cancelled, or the request timed out), a
        // 2025 upstream is told `notifications/cancelled`; a 2026 one reads the closed
        // response stream as the cancel.
        let mut guard = CancelOnDrop {
            conn: self,
            mode,
            request: match mode {
                Mode::Legacy { session: Some(_) } if method != "initialize" => Some(id),
                _ => None,
            },
        };
        let body = serde_json::to_string(&Envelope {
            jsonrpc: "2.0",
            id,
            method,
            params,
        })
        .map_err(|e| Failure::Unavailable(format!("cannot write the request: {e}")))?;
        self.authorize().await?;
        let req = self.pooled(mode, method, &params.fields, body)?;
        let read =
            |resp: hyper::Response<hyper::body::Incoming>| self.read(resp, mode, id, notify, asks);
        let url = &self.url;
        let answer = self
            .pool
            .exchange(&self.target, req, read, |e| {
                Failure::Unavailable(format!("cannot reach {url}: {e}"))
            })
            .await
            .and_then(|r| r);
        guard.request = None;
        answer
    }

    /// Reads the answer to request `id`: JSON, or an event stream whose notifications go to
    /// `notify` and whose requests to `asks`, until the answer.
    async fn read(
        &self,
        resp: hyper::Response<hyper::body::Incoming>,
        mode: &Mode,
        id: u64,
        notify: Option<Notifications>,
        asks: Option<Asks>,
    ) -> Result<(Value, Option<String>), Failure> {
        let status = resp.status().as_u16();
        if status == 404 && matches!(mode, Mode::Legacy { session: Some(_) }) {
            return Err(Failure::Unavailable(SESSION_EXPIRED.into()));
        }
        let session = resp
            .headers()
            .get("mcp-session-id")
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        let is_sse = resp
            .headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .is_some_and(|c| c.starts_with("text/event-stream"));
        let mut body = resp.into_body();
        if is_sse {
            return self
                .events(&mut body, mode, id, notify, asks)
                .await
                .map(|v| (v, session));
        }
        let mut bytes: Vec<u8> = Vec::new();
        while let Some(frame) = body.frame().await {
            let frame =
                frame.map_err(|e| Failure::Unavailable(format!("cannot read the answer: {e}")))?;
            if let Ok(data) = frame.into_data() {
                if bytes.len() + data.len() > MAX_ANSWER_BYTES {
                    return Err(Failure::Unavailable("the answer is too large".into()));
                }
                bytes.extend_from_slice(&data);
            }
        }
        let msg: Value = serde_json::from_slice(&bytes).map_err(|_| {
            Failure::Unavailable(format!(
                "HTTP {status} with a body that is not JSON-RPC: {}",
                String::from_utf8_lossy(&bytes[..bytes.len().min(200)])
            ))
        })?;
        match classify(msg, Some(id)) {
            Incoming::Answer(r) => r.map(|v| (v, session)),
            _ => Err(Failure::Unavailable(format!(
                "HTTP {status} without an answer to the request"
            ))),
        }
    }

    /// Reads an event stream until the answer to request `id`: notifications go to `notify`
    /// (a list change is acted on here), the upstream's requests to `asks`, each answered
    /// by a POST of its own while the stream goes on.
    async fn events(
        &self,
        body: &mut hyper::body::Incoming,
        mode: &Mode,
        id: u64,
        notify: Option<Notifications>,
        asks: Option<Asks>,
    ) -> Result<Value, Failure> {
        let mut buf: Vec<u8> = Vec::new();
        loop {
            let Some(frame) = body.frame().await else {
                return Err(Failure::Unavailable(
                    "the event stream ended without an answer".into(),
                ));
            };
            let frame =
                frame.map_err(|e| Failure::Unavailable(format!("the event stream broke: {e}")))?;
            let Ok(chunk) = frame.into_data() else {
                continue;
            };
            buf.extend_from_slice(&chunk);
            if buf.len() > MAX_ANSWER_BYTES {
                return Err(Failure::Unavailable("the answer is too large".into()));
            }
            while let Some((event, rest)) = split_event(&buf) {
                buf = rest;
                let Some(msg) =
                    event_data(&event).and_then(|data| serde_json::from_str::<Value>(&data).ok())
                else {
                    continue;
                };
                match classify(msg, Some(id)) {
                    Incoming::Answer(r) => return r,
                    Incoming::Notification(n) if is_list_changed(&n) => {
                        self.changed.notify_one();
                    }
                    Incoming::Notification(n) => {
                        if let Some(tx) = &notify {
                            let _ = tx.send(n);
                        }
                    }
                    Incoming::Request(r) => {
                        let reply = self.builder(mode, "", &Value::Null);
                        let asks = asks.clone();
                        tokio::spawn(async move {
                            let mut answer = ask(asks.as_ref(), &r).await;
                            answer["jsonrpc"] = json!("2.0");
                            answer["id"] = r["id"].clone();
                            if let Err(e) = reply.body(answer.to_string()).send().await {
                                tracing::warn!("cannot answer an MCP server's request: {e}");
                            }
                        });
                    }
                    Incoming::Other => {}
                }
            }
        }
    }

    async fn notify_upstream(&self, mode: &Mode, method: &str, params: Value) {
        let body = json!({"jsonrpc": "2.0", "method": method, "params": params});
        if let Err(e) = self
            .builder(mode, method, &params)
            .body(body.to_string())
            .send()
            .await
        {
            tracing::debug!(url = %self.url, "cannot send {method}: {e}");
        }
    }
}

/// Why a request in a 2025 session found no session: it is opened again.
const SESSION_EXPIRED: &str = "session expired";

/// Whether a `server/discover` result lists 2026-07-28.
fn lists_modern(found: &Value) -> bool {
    found
        .get("supportedVersions")
        .and_then(Value::as_array)
        .is_some_and(|v| v.iter().any(|x| x == MODERN))
}

/// Whether the upstream answered (with a JSON-RPC error, or an HTTP status that is not an
/// answer), as opposed to not being reached: an answer refusing a revision is kept, an
/// unreachable upstream is asked again.
fn answered(f: &Failure) -> bool {
    match f {
        Failure::Rpc(_) => true,
        Failure::Unavailable(why) => why.starts_with("HTTP "),
        Failure::Timeout | Failure::Credentials(_) => false,
    }
}

/// What every pooled request to one upstream carries, parsed from its configuration once.
struct Fixed {
    path: hyper::Uri,
    host: hyper::header::HeaderValue,
    basic: Option<hyper::header::HeaderValue>,
    headers: Vec<(hyper::header::HeaderName, hyper::header::HeaderValue)>,
}

impl Fixed {
    fn new(target: &Target, headers: &[(String, String)]) -> Result<Fixed, String> {
        use hyper::header::{HeaderName, HeaderValue};
        let value = |what: &str, v: &str| {
            HeaderValue::from_str(v).map_err(|e| format!("{what} is not a valid header value: {e}"))
        };
        Ok(Fixed {
            path: target
                .path
                .parse()
                .map_err(|e| format!("the URL's path does not parse: {e}"))?,
            host: value("the URL's host", &target.authority)?,
            basic: match &target.basic {
                Some(b) => Some(value("the URL's credentials", b)?),
                None => None,
            },
            headers: headers
                .iter()
                .map(|(k, v)| {
                    let name = HeaderName::from_bytes(k.as_bytes())
                        .map_err(|e| format!("header `{k}` is not a valid name: {e}"))?;
                    Ok((name, value(&format!("header `{k}`"), v)?))
                })
                .collect::<Result<_, String>>()?,
        })
    }
}

/// Splits the first complete event (ended by a blank line) off an SSE buffer.
fn split_event(buf: &[u8]) -> Option<(String, Vec<u8>)> {
    let find = |sep: &[u8]| {
        buf.windows(sep.len())
            .position(|w| w == sep)
            .map(|i| (i, sep.len()))
    };
    let (i, len) = [find(b"\r\n\r\n"), find(b"\n\n"), find(b"\r\r")]
        .into_iter()
        .flatten()
        .min()?;
    Some((
        String::from_utf8_lossy(&buf[..i]).into_owned(),
        buf[i + len..].to_vec(),
    ))
}

/// The `data:` lines of one event, joined.
fn event_data(event: &str) -> Option<String> {
    let lines: Vec<&str> = event
        .lines()
        .filter_map(|l| l.strip_prefix("data:"))
        .map(|l| l.strip_prefix(' ').unwrap_or(l))
        .collect();
    (!lines.is_empty()).then(|| lines.join("\n"))
}

/// Sends `notifications/cancelled` for request `request` when dropped with one still set
/// (made only then: most requests are answered).
struct CancelOnDrop<'a> {
    conn: &'a HttpConn,
    mode: &'a Mode,
    request: Option<u64>,
}

impl Drop for CancelOnDrop<'_> {
    fn drop(&mut self) {
        let (Some(id), Ok(rt)) = (self.request.take(), tokio::runtime::Handle::try_current())
        else {
            return;
        };
        let note = json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
            "params": {"requestId": id, "reason": "cancelled by airlock's client"}});
        let req = self
            .conn
            .builder(self.mode, "notifications/cancelled", &note["params"])
            .body(note.to_string());
        rt.spawn(async move {
            let _ = req.send().await;
        });
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn events_split_on_blank_lines_and_join_data_lines() {
        let buf = b"event: message\r\ndata: {\"a\":1}\r\n\r\ndata: x\ndata: y\n\npartial";
        let (e, rest) = split_event(buf).unwrap();
        assert_eq!(event_data(&e).unwrap(), "{\"a\":1}");
        let (e, rest) = split_event(&rest).unwrap();
        assert_eq!(event_data(&e).unwrap(), "x\ny");
        assert!(split_event(&rest).is_none());
        assert_eq!(rest, b"partial");
    }
}
