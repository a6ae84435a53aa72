//! An MCP server run as a child process, speaking JSON-RPC (2025-11-25) one message per line
//! on its stdin and stdout. It gets only its configured `env` and `PATH`; its stderr goes to
//! our log. When it exits, every request waiting on it fails with `upstream.unavailable`, and
//! it is started again with a growing backoff (1 s doubling to 30 s) on the next request.
//!
//! Requests from the child to its client (elicitation, sampling) go to the [`Asks`] of the one
//! request in flight that takes them; stdio carries no link between a request and the
//! child's question, so with several such requests in flight (or none) the question is
//! answered "not relayed" rather than guessed at.

use std::collections::HashMap;
use std::process::Stdio;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, ChildStdin, Command};
use tokio::sync::oneshot;

use super::{
    ask, classify, client_capabilities, client_info, is_list_changed, not_relayed, Asks, Envelope,
    Failure, Incoming, Notifications, Params, LEGACY,
};

/// One running child.
struct Running {
    stdin: ChildStdin,
    /// Kept so the child is killed when this is dropped (a restart, or the gateway stopping).
    _child: Child,
    generation: u64,
}

#[derive(Default)]
struct Waiting {
    answers: HashMap<u64, oneshot::Sender<Result<Value, Failure>>>,
    /// Where progress notifications for a request go, by the progress token airlock set.
    progress: HashMap<String, Notifications>,
    /// Where the child's questions during a request go, by request id.
    asks: HashMap<u64, Asks>,
}

pub struct StdioConn {
    name: String,
    command: String,
    args: Vec<String>,
    env: Vec<(String, String)>,
    running: tokio::sync::Mutex<Option<Running>>,
    waiting: Arc<Mutex<Waiting>>,
    next_id: AtomicU64,
    generation: AtomicU64,
    /// When the last start failed or the child died, and the backoff then in force.
    backoff: Mutex<(Option<Instant>, Duration)>,
    /// Told when the child says one of its lists changed.
    changed: Arc<tokio::sync::Notify>,
}

impl StdioConn {
    pub fn new(
        name: &str,
        command: &str,
        args: Vec<String>,
        env: Vec<(String, String)>,
        changed: Arc<tokio::sync::Notify>,
    ) -> Arc<StdioConn> {
        Arc::new(StdioConn {
            changed,
            name: name.to_owned(),
            command: command.to_owned(),
            args,
            env,
            running: tokio::sync::Mutex::new(None),
            waiting: Arc::new(Mutex::new(Waiting::default())),
            next_id: AtomicU64::new(1),
            generation: AtomicU64::new(0),
            backoff: Mutex::new((None, Duration::from_secs(1))),
        })
    }

    pub async fn request(
        self: &Arc<Self>,
        method: &str,
        params: Params,
        timeout: Duration,
        notify: Option<Notifications>,
        asks: Option<Asks>,
    ) -> Result<Value, Failure> {
        tokio::time::timeout(timeout, self.request_inner(method, params, notify, asks))
            .await
            .map_err(|_| Failure::Timeout)?
    }

    async fn request_inner(
        self: &Arc<Self>,
        method: &str,
        mut params: Params,
        notify: Option<Notifications>,
        asks: Option<Asks>,
    ) -> Result<Value, Failure> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = oneshot::channel();
        let token = notify
            .as_ref()
            .map(|_| format!("airlock-{}-{id}", self.name));
        {
            let mut w = self.waiting.lock().unwrap_or_else(|e| e.into_inner());
            w.answers.insert(id, tx);
            if let Some(a) = asks {
                w.asks.insert(id, a);
            }
            if let (Some(t), Some(n)) = (&token, notify) {
                w.progress.insert(t.clone(), n);
                if let Some(p) = params.fields.as_object_mut() {
                    let meta = p.entry("_meta").or_insert_with(|| json!({}));
                    meta["progressToken"] = Value::String(t.clone());
                }
            }
        }
        let mut guard = InFlight {
            conn: self.clone(),
            id,
            token,
            answered: false,
        };
        let line = serde_json::to_string(&Envelope {
            jsonrpc: "2.0",
            id,
            method,
            params: &params,
        })
        .map_err(|e| Failure::Unavailable(format!("cannot write the request: {e}")));
        let sent = match line {
            Ok(line) => self.write_line(line).await,
            Err(e) => Err(e),
        };
        let result = match sent {
            Ok(()) => rx
                .await
                .unwrap_or_else(|_| Err(Failure::Unavailable("the MCP server exited".into()))),
            Err(e) => Err(e),
        };
        guard.answered = true;
        result
    }

    /// Writes one message, starting the child first if it is not running.
    async fn write_line(self: &Arc<Self>, mut line: String) -> Result<(), Failure> {
        let mut running = self.running.lock().await;
        if running.is_none() {
            *running = Some(self.start().await?);
        }
        line.push('\n');
        let Some(r) = running.as_mut() else {
            return Err(Failure::Unavailable("not running".into()));
        };
        if let Err(e) = r.stdin.write_all(line.as_bytes()).await {
            *running = None;
            return Err(Failure::Unavailable(format!(
                "cannot write to the MCP server: {e}"
            )));
        }
        Ok(())
    }

    /// Starts the child (honouring the backoff) and runs the `initialize` handshake.
    async fn start(self: &Arc<Self>) -> Result<Running, Failure> {
        {
            let b = self.backoff.lock().unwrap_or_else(|e| e.into_inner());
            if let (Some(at), wait) = *b {
                if at.elapsed() < wait {
                    return Err(Failure::Unavailable(format!(
                        "the MCP server exited; restarting it in {:?}",
                        wait - at.elapsed()
                    )));
                }
            }
        }
        let mut cmd = Command::new(&self.command);
        cmd.args(&self.args)
            .env_clear()
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        if let Ok(path) = std::env::var("PATH") {
            cmd.env("PATH", path);
        }
        for (k, v) in &self.env {
            cmd.env(k, v);
        }
        let mut child = cmd.spawn().map_err(|e| {
            self.failed();
            Failure::Unavailable(format!("cannot start `{}`: {e}", self.command))
        })?;
        let generation = self.generation.fetch_add(1, Ordering::Relaxed) + 1;
        let (Some(stdin), Some(stdout), Some(stderr)) =
            (child.stdin.take(), child.stdout.take(), child.stderr.take())
        else {
            return Err(Failure::Unavailable("no pipes to the child".into()));
        };
        let name = self.name.clone();
        tokio::spawn(async move {
            let mut lines = BufReader::new(stderr).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                tracing::info!(mcp_server = %name, "stderr: {line}");
            }
        });
        let me = Arc::downgrade(self);
        tokio::spawn(async move {
            let mut lines = BufReader::new(stdout).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                let Some(me) = me.upgrade() else { return };
                me.dispatch(&line).await;
            }
            if let Some(me) = me.upgrade() {
                me.exited(generation).await;
            }
        });
        let mut running = Running {
            stdin,
            _child: child,
            generation,
        };
        self.handshake(&mut running).await?;
        *self.backoff.lock().unwrap_or_else(|e| e.into_inner()) = (None, Duration::from_secs(1));
        tracing::info!(mcp_server = %self.name, "MCP server started");
        Ok(running)
    }

    /// The `initialize` handshake, written directly: the caller holds the lock on `running`.
    async fn handshake(&self, running: &mut Running) -> Result<(), Failure> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = oneshot::channel();
        self.waiting
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .answers
            .insert(id, tx);
        let init = json!({"jsonrpc": "2.0", "id": id, "method": "initialize", "params": {
            "protocolVersion": LEGACY, "capabilities": client_capabilities(), "clientInfo": client_info(),
        }});
        write_line(&mut running.stdin, &init)
            .await
            .map_err(|e| Failure::Unavailable(format!("cannot write to the MCP server: {e}")))?;
        match tokio::time::timeout(Duration::from_secs(30), rx).await {
            Ok(Ok(Ok(_))) => {}
            Ok(Ok(Err(e))) => {
                self.failed();
                return Err(e);
            }
            _ => {
                self.failed();
                return Err(Failure::Unavailable(
                    "the MCP server did not answer `initialize`".into(),
                ));
            }
        }
        let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
        write_line(&mut running.stdin, &initialized)
            .await
            .map_err(|e| Failure::Unavailable(format!("cannot write to the MCP server: {e}")))?;
        Ok(())
    }

    fn failed(&self) {
        let mut b = self.backoff.lock().unwrap_or_else(|e| e.into_inner());
        let next = if b.0.is_some() {
            (b.1 * 2).min(Duration::from_secs(30))
        } else {
            Duration::from_secs(1)
        };
        *b = (Some(Instant::now()), next);
    }

    /// The child's stdout closed: it is gone. Everything waiting fails now.
    async fn exited(&self, generation: u64) {
        tracing::warn!(mcp_server = %self.name, "MCP server exited");
        // Fail the waiting first: a start in progress holds `running` while it waits.
        let answers: Vec<_> = self
            .waiting
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .answers
            .drain()
            .collect();
        for (_, tx) in answers {
            let _ = tx.send(Err(Failure::Unavailable("the MCP server exited".into())));
        }
        self.failed();
        let mut running = self.running.lock().await;
        if running.as_ref().is_some_and(|r| r.generation == generation) {
            *running = None;
        }
    }

    async fn dispatch(self: &Arc<Self>, line: &str) {
        let Ok(msg) = serde_json::from_str::<Value>(line) else {
            tracing::warn!(mcp_server = %self.name, "not JSON-RPC on stdout: {line}");
            return;
        };
        let id = msg.get("id").and_then(Value::as_u64).unwrap_or(0);
        match classify(msg, None) {
            Incoming::Answer(r) => {
                let tx = self
                    .waiting
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .answers
                    .remove(&id);
                if let Some(tx) = tx {
                    let _ = tx.send(r);
                }
            }
            Incoming::Notification(n) if is_list_changed(&n) => self.changed.notify_one(),
            Incoming::Notification(n) => {
                let token = n
                    .pointer("/params/progressToken")
                    .and_then(Value::as_str)
                    .map(str::to_owned);
                if let Some(t) = token {
                    let w = self.waiting.lock().unwrap_or_else(|e| e.into_inner());
                    if let Some(tx) = w.progress.get(&t) {
                        let _ = tx.send(n);
                    }
                }
            }
            Incoming::Request(r) => {
                let asks = {
                    let w = self.waiting.lock().unwrap_or_else(|e| e.into_inner());
                    match w.asks.values().collect::<Vec<_>>().as_slice() {
                        [only] => Some((*only).clone()),
                        _ => None,
                    }
                };
                // Answered by another task: the child may send more while its question waits.
                let me = self.clone();
                tokio::spawn(async move {
                    let mut answer = match &asks {
                        Some(a) => ask(Some(a), &r).await,
                        None => not_relayed(r.get("method").and_then(Value::as_str).unwrap_or("")),
                    };
                    answer["jsonrpc"] = json!("2.0");
                    answer["id"] = r["id"].clone();
                    let mut running = me.running.lock().await;
                    if let Some(run) = running.as_mut() {
                        let _ = write_line(&mut run.stdin, &answer).await;
                    }
                });
            }
            Incoming::Other => {}
        }
    }
}

/// A request sent to the child and not yet answered. Dropped unanswered (the client
/// cancelled, or the request timed out), it tells the child `notifications/cancelled`.
/// Either way it forgets the request's waiting entries.
struct InFlight {
    conn: Arc<StdioConn>,
    id: u64,
    token: Option<String>,
    answered: bool,
}

impl Drop for InFlight {
    fn drop(&mut self) {
        {
            let mut w = self.conn.waiting.lock().unwrap_or_else(|e| e.into_inner());
            w.answers.remove(&self.id);
            w.asks.remove(&self.id);
            if let Some(t) = &self.token {
                w.progress.remove(t);
            }
        }
        if self.answered {
            return;
        }
        let (conn, id) = (self.conn.clone(), self.id);
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            rt.spawn(async move {
                let cancel = json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
                    "params": {"requestId": id, "reason": "cancelled by airlock's client"}});
                let mut running = conn.running.lock().await;
                if let Some(r) = running.as_mut() {
                    let _ = write_line(&mut r.stdin, &cancel).await;
                }
            });
        }
    }
}

async fn write_line(stdin: &mut ChildStdin, v: &Value) -> std::io::Result<()> {
    let mut line = v.to_string();
    line.push('\n');
    stdin.write_all(line.as_bytes()).await
}
