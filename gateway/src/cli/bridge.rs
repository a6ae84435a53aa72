//! `airlock mcp stdio --url URL` (the command line's side: it is a client of `/mcp`, and the
//! MCP front end knows nothing of it): a local MCP server on stdin and stdout that forwards every
//! message to a gateway's `/mcp`, for clients that can only spawn processes.
//!
//! It adds the bearer token and the headers each revision needs (the session id it was
//! given for 2025-11-25; `MCP-Protocol-Version`, `Mcp-Method` and `Mcp-Name` from the body for
//! 2026-07-28), and writes back every message of the answer, JSON or event stream, one per
//! line. Requests run concurrently, so a call held for approval does not block the others.
//! It decides nothing: the gateway does.

use std::sync::Arc;

use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::sync::{mpsc, Mutex};

/// Runs the bridge until stdin closes; returns the process exit code.
pub async fn run(url: String, token: String) -> u8 {
    let client = match reqwest::Client::builder().tcp_nodelay(true).build() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("error[client.error]: {e}");
            return 1;
        }
    };
    let session: Arc<Mutex<Option<String>>> = Arc::new(Mutex::new(None));
    let (out_tx, mut out_rx) = mpsc::unbounded_channel::<String>();
    let writer = tokio::spawn(async move {
        let mut stdout = tokio::io::stdout();
        while let Some(line) = out_rx.recv().await {
            if stdout.write_all(line.as_bytes()).await.is_err()
                || stdout.write_all(b"\n").await.is_err()
                || stdout.flush().await.is_err()
            {
                break;
            }
        }
    });
    let mut lines = BufReader::new(tokio::io::stdin()).lines();
    let mut tasks = tokio::task::JoinSet::new();
    while let Ok(Some(line)) = lines.next_line().await {
        if line.trim().is_empty() {
            continue;
        }
        let msg: Value = match serde_json::from_str(&line) {
            Ok(v) => v,
            Err(e) => {
                let _ = out_tx.send(
                    json!({"jsonrpc": "2.0", "id": null, "error": {"code": -32700, "message": format!("not JSON: {e}")}})
                        .to_string(),
                );
                continue;
            }
        };
        let (client, url, token, session, out) = (
            client.clone(),
            url.clone(),
            token.clone(),
            session.clone(),
            out_tx.clone(),
        );
        // `initialize` must finish (its session id known) before anything else is sent.
        let is_init = msg.get("method").and_then(Value::as_str) == Some("initialize");
        let task = async move { forward(&client, &url, &token, &session, &out, line, &msg).await };
        if is_init {
            task.await;
        } else {
            tasks.spawn(task);
        }
    }
    while tasks.join_next().await.is_some() {}
    drop(out_tx);
    let _ = writer.await;
    0
}

async fn forward(
    client: &reqwest::Client,
    url: &str,
    token: &str,
    session: &Mutex<Option<String>>,
    out: &mpsc::UnboundedSender<String>,
    line: String,
    msg: &Value,
) {
    let id = msg.get("id").cloned().unwrap_or(Value::Null);
    let method = msg.get("method").and_then(Value::as_str);
    let mut req = client
        .post(url)
        .bearer_auth(token)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream");
    req = with_revision_headers(req, msg, method, session).await;
    let reply_error = |message: String| {
        if !id.is_null() {
            let _ = out.send(
                json!({"jsonrpc": "2.0", "id": id, "error": {"code": -32603, "message": message}})
                    .to_string(),
            );
        }
    };
    let mut resp = match req.body(line).send().await {
        Ok(r) => r,
        Err(e) => return reply_error(format!("cannot reach the gateway at {url}: {e}")),
    };
    if let Some(s) = resp
        .headers()
        .get("mcp-session-id")
        .and_then(|v| v.to_str().ok())
    {
        *session.lock().await = Some(s.to_owned());
    }
    let status = resp.status().as_u16();
    let sse = resp
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|c| c.starts_with("text/event-stream"));
    if sse {
        if let Err(e) = relay_events(&mut resp, out).await {
            reply_error(format!("the answer broke off: {e}"));
        }
        return;
    }
    let text = resp.text().await.unwrap_or_default();
    if text.trim().is_empty() {
        // 202 for a notification, or 204.
        if status >= 400 {
            reply_error(format!("the gateway answered HTTP {status}"));
        }
        return;
    }
    match serde_json::from_str::<Value>(&text) {
        Ok(v) if v.get("jsonrpc").is_some() => {
            let _ = out.send(v.to_string());
        }
        // A refusal before JSON-RPC (401, 403, 503): said as a JSON-RPC error.
        Ok(v) => reply_error(format!(
            "HTTP {status} {}: {}",
            v.pointer("/error/code")
                .and_then(Value::as_str)
                .unwrap_or(""),
            v.pointer("/error/message")
                .and_then(Value::as_str)
                .unwrap_or("")
        )),
        Err(_) => reply_error(format!("HTTP {status}: {text}")),
    }
}

/// The headers each revision needs: a 2026-07-28 request's version, method and name from its
/// body; a 2025-11-25 request's session (after `initialize`).
async fn with_revision_headers(
    mut req: reqwest::RequestBuilder,
    msg: &Value,
    method: Option<&str>,
    session: &Mutex<Option<String>>,
) -> reqwest::RequestBuilder {
    let modern = msg
        .pointer("/params/_meta/io.modelcontextprotocol~1protocolVersion")
        .and_then(Value::as_str);
    if let Some(v) = modern {
        req = req.header("mcp-protocol-version", v);
        if let Some(m) = method {
            req = req.header("mcp-method", m);
        }
        let name = match method {
            Some("tools/call" | "prompts/get") => msg.pointer("/params/name"),
            Some("resources/read") => msg.pointer("/params/uri"),
            _ => None,
        };
        if let Some(n) = name.and_then(Value::as_str) {
            req = req.header("mcp-name", n);
        }
    } else if method != Some("initialize") {
        if let Some(s) = session.lock().await.as_ref() {
            req = req
                .header("mcp-session-id", s.as_str())
                .header("mcp-protocol-version", crate::backends::mcp::LEGACY);
        }
    }
    req
}

/// Every event of an event-stream answer, one message a line, as it arrives.
async fn relay_events(
    resp: &mut reqwest::Response,
    out: &mpsc::UnboundedSender<String>,
) -> Result<(), reqwest::Error> {
    let mut buf = String::new();
    loop {
        match resp.chunk().await {
            Ok(Some(chunk)) => buf.push_str(&String::from_utf8_lossy(&chunk)),
            Ok(None) => break,
            Err(e) => return Err(e),
        }
        while let Some(end) = buf.find("\n\n") {
            let event: String = buf.drain(..end + 2).collect();
            let data: Vec<&str> = event
                .lines()
                .filter_map(|l| l.strip_prefix("data:"))
                .map(str::trim_start)
                .collect();
            if !data.is_empty() {
                let _ = out.send(data.join("\n"));
            }
        }
    }
    Ok(())
}
