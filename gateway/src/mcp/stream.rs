//! A `tools/call` answered on an event stream (DESIGN §10): the upstream's progress and log
//! notifications relayed while the call runs, a held call's "still waiting" every 10 s to a
//! client with a progress token, a 2025 client's URL elicitation of the inbox link and its
//! completion, a 2025 upstream's requests put to the client, and the answer as the last
//! event. A 2025 session's `notifications/cancelled` ends the stream and the call.
//!
//! [`super::calls`] chooses when a call streams; this only runs one.

use std::sync::Arc;
use std::time::Duration;

use airlock_policy::ToolCall;
use airlock_storage::Principal;
use bytes::Bytes;
use hyper::Response;
use serde_json::{json, Value};
use tokio::sync::mpsc;

use super::relay::{client_asks_taken, relayed_out};
use super::results::{input_request, link, tool_result};
use super::wire;
use super::{Exchange, McpFront};
use crate::auth::random_hex;
use crate::backends::mcp::{not_relayed, Ask, InputRelay, CLIENT_ASKS, INPUT_RELAY, NOTIFICATIONS};
use crate::body::Body;
use crate::error::{ApiError, Code};
use crate::pipeline::{self, suspend, Front, Hold, Outcome, Pending};
use crate::state::Gateway;

/// How often a held call tells a client with a progress token that it still waits.
const PROGRESS_EVERY: Duration = Duration::from_secs(10);

/// Runs the call on an event stream: the upstream's progress and log notifications are
/// relayed (progress under the client's token), a held call tells a client with a progress
/// token every 10 s that it still waits, and the answer is the last event. A 2025-11-25
/// client that opens URLs is sent an `elicitation/create` (mode `url`, the inbox link) on
/// this stream while its call waits, and `notifications/elicitation/complete` once decided.
#[allow(clippy::too_many_arguments)]
pub(super) fn stream_with_progress(
    gw: Arc<Gateway>,
    front: Arc<McpFront>,
    principal: Principal,
    exchange: Exchange,
    id: Value,
    call: ToolCall,
    hold: Hold,
    front_tag: Front,
    token: Option<Value>,
    cancel: Option<(String, tokio_util::sync::CancellationToken)>,
    input: InputRelay,
) -> Response<Body> {
    let (tx, rx) = mpsc::channel::<Bytes>(16);
    tokio::spawn(async move {
        let (up_tx, up_rx) = mpsc::unbounded_channel::<Value>();
        let (ask_tx, asks_rx) = mpsc::unbounded_channel::<Ask>();
        let mut relay = Relay {
            tx,
            up_rx,
            asks_rx,
            token,
            ticks: 0,
            cancel: cancel.as_ref().map(|(_, t)| t.clone()),
            logs: exchange.logs,
            // An upstream's requests go to a 2025 session's client, what it declared.
            session: exchange.session.clone().map(|sid| (front.clone(), sid)),
            takes: client_asks_taken(&exchange),
            max_wait: gw.config.max_hold,
            ask_tx,
            input,
        };
        let _done = cancel.map(|(sid, _)| Done {
            front: front.clone(),
            sid,
            id: id.clone(),
        });
        let elicit = !exchange.modern() && exchange.url_elicitation();
        let first = NOTIFICATIONS.scope(
            up_tx.clone(),
            pipeline::run_call(
                &gw,
                principal.clone(),
                call.clone(),
                if elicit { Hold::Async } else { hold },
                front_tag,
            ),
        );
        let Some(outcome) = relay.drive(first).await else {
            return;
        };
        let s = Streamed {
            gw,
            front,
            principal,
            exchange,
            call,
            up_tx,
        };
        let outcome = match outcome {
            Ok(Outcome::Pending(p)) if elicit => match s.approval_by_url(&mut relay, p).await {
                Some(o) => o,
                None => return,
            },
            other => other,
        };
        let Some(outcome) = s.input_on_stream(&mut relay, outcome).await else {
            return;
        };
        relayed_out(&s.gw, &s.principal, &s.call, &outcome).await;
        let result = tool_result(&s.gw, &s.front, &s.principal, &s.exchange, &s.call, outcome);
        let _ = relay.tx.send(sse(&wire::result(id, result))).await;
    });
    crate::body::sse_response(rx)
}

/// A call being answered on its event stream, and what its steps share.
struct Streamed {
    gw: Arc<Gateway>,
    front: Arc<McpFront>,
    principal: Principal,
    exchange: Exchange,
    call: ToolCall,
    /// Where the upstream's notifications for the call go (relayed on the stream).
    up_tx: mpsc::UnboundedSender<Value>,
}

impl Streamed {
    /// A held call of a 2025 client that opens URLs: the inbox link as an `elicitation/create`
    /// on the stream, then the wait for the decision, then `notifications/elicitation/complete`
    /// once decided. `None` when the stream went away.
    async fn approval_by_url(
        &self,
        relay: &mut Relay,
        p: Pending,
    ) -> Option<Result<Outcome, ApiError>> {
        let (approval_id, call_id) = (p.approval_id.clone(), p.call_id.clone());
        let ask = json!({"jsonrpc": "2.0", "id": format!("airlock-elicitation-{approval_id}"),
        "method": "elicitation/create", "params": {
            "mode": "url",
            "url": link(&self.gw, &approval_id),
            "elicitationId": approval_id,
            "message": format!("`{}` needs approval. Open the link to see the call and decide; the call continues once it is decided.", self.call.tool),
        }});
        if relay.tx.send(sse(&ask)).await.is_err() {
            return None;
        }
        let gw = &self.gw;
        let wait = NOTIFICATIONS.scope(
            self.up_tx.clone(),
            pipeline::call_outcome(gw, &self.principal, &call_id, gw.config.hold_timeout, true),
        );
        let outcome = relay.drive(wait).await?;
        if !matches!(outcome, Ok(Outcome::Pending(_))) {
            let done = wire::notification(
                "notifications/elicitation/complete",
                json!({"elicitationId": approval_id}),
            );
            let _ = relay.tx.send(sse(&done)).await;
        }
        Some(outcome)
    }

    /// A suspended call asks the client for its input on this stream (2025-11-25): a form
    /// when the client fills forms and the schema is flat, else the inbox's resume form by
    /// URL. Each answer resumes it; it may suspend again. `None` when the stream went away.
    async fn input_on_stream(
        &self,
        relay: &mut Relay,
        mut outcome: Result<Outcome, ApiError>,
    ) -> Option<Result<Outcome, ApiError>> {
        let (gw, front, exchange) = (&self.gw, &self.front, &self.exchange);
        while let Ok(Outcome::Suspended(v)) = &outcome {
            let v = v.clone();
            let form = exchange.form_elicitation() && suspend::is_flat(&v.resume_schema);
            let (Some(sid), true) = (&exchange.session, form || exchange.url_elicitation()) else {
                break;
            };
            let ask_id = format!("airlock-input-{}-{}", v.call_id, v.count);
            let params = input_request(gw, &v, form)["params"].clone();
            let ask = json!({"jsonrpc": "2.0", "id": ask_id, "method": "elicitation/create", "params": params});
            let reply = front.expect_reply(sid, &ask_id);
            if relay.tx.send(sse(&ask)).await.is_err() {
                front.forget_reply(sid, &ask_id);
                return None;
            }
            let (gw2, principal2, call_id) =
                (gw.clone(), self.principal.clone(), v.call_id.clone());
            let wait = gw.config.max_hold;
            let step = NOTIFICATIONS.scope(self.up_tx.clone(), async move {
                if !form {
                    return suspend::wait_resumed(&gw2, &call_id, wait).await;
                }
                match tokio::time::timeout(wait, reply).await {
                    Ok(Ok(answer)) => match answer.get("result") {
                        Some(r) => suspend::answer_input(&gw2, &principal2, &call_id, r).await,
                        None => Err(ApiError::new(
                            Code::CallSuspended,
                            "the client could not show the form; the call stays suspended",
                        )),
                    },
                    // No answer in time: the call stays suspended; say so.
                    _ => {
                        pipeline::call_outcome(&gw2, &principal2, &call_id, Duration::ZERO, false)
                            .await
                    }
                }
            });
            let next = relay.drive(step).await;
            front.forget_reply(sid, &ask_id);
            let next = next?;
            let same = matches!(&next, Ok(Outcome::Suspended(n)) if n.count == v.count);
            outcome = next;
            if same {
                break;
            }
        }
        Some(outcome)
    }
}

/// What a call's event stream relays while the call runs.
struct Relay {
    tx: mpsc::Sender<Bytes>,
    up_rx: mpsc::UnboundedReceiver<Value>,
    /// An upstream's requests during the call (sampling, roots, URL elicitation), for this
    /// stream's client.
    asks_rx: mpsc::UnboundedReceiver<Ask>,
    ask_tx: mpsc::UnboundedSender<Ask>,
    /// The session whose client can sample, if it can.
    session: Option<(Arc<McpFront>, String)>,
    /// What the client declared it answers.
    takes: Vec<&'static str>,
    /// The longest such a request waits for the client.
    max_wait: Duration,
    /// The client's progress token, if it gave one.
    token: Option<Value>,
    ticks: u64,
    /// A 2025 client's `notifications/cancelled` for this request.
    cancel: Option<tokio_util::sync::CancellationToken>,
    /// Whether the upstream's log messages go to the client ([`Exchange::logs`]).
    logs: bool,
    /// What the client takes of an upstream's `input_required` (2026-07-28).
    input: InputRelay,
}

/// Forgets a request's cancellation handle when its stream ends, however it ends.
struct Done {
    front: Arc<McpFront>,
    sid: String,
    id: Value,
}

impl Drop for Done {
    fn drop(&mut self) {
        self.front.done(&self.sid, &self.id);
    }
}

impl Relay {
    /// Runs `fut` to its outcome while relaying; `None` when the client went away (dropping
    /// the future ends its hold).
    async fn drive<F>(&mut self, fut: F) -> Option<Result<Outcome, ApiError>>
    where
        F: std::future::Future<Output = Result<Outcome, ApiError>>,
    {
        let fut = INPUT_RELAY.scope(
            self.input.clone(),
            CLIENT_ASKS.scope(self.ask_tx.clone(), fut),
        );
        tokio::pin!(fut);
        let mut tick = tokio::time::interval(PROGRESS_EVERY);
        tick.tick().await;
        let cancel = self.cancel.clone().unwrap_or_default();
        loop {
            let note = tokio::select! {
                o = &mut fut => {
                    // What the upstream said before its answer goes out before the answer.
                    while let Ok(up) = self.up_rx.try_recv() {
                        if let Some(note) = self.upstream_note(up) {
                            if self.tx.send(sse(&note)).await.is_err() {
                                return None;
                            }
                        }
                    }
                    return Some(o);
                }
                // The client cancelled, or closed the stream: drop the call's future (its
                // hold ends; an upstream request in flight is dropped with it).
                _ = cancel.cancelled() => return None,
                _ = self.tx.closed() => return None,
                Some(ask) = self.asks_rx.recv() => match self.ask_client(ask) {
                    Some(request) => request,
                    None => continue,
                },
                Some(up) = self.up_rx.recv() => match self.upstream_note(up) {
                    Some(note) => note,
                    None => continue,
                },
                _ = tick.tick() => {
                    let Some(t) = &self.token else { continue };
                    self.ticks += 1;
                    wire::notification("notifications/progress", json!({
                        "progressToken": t, "progress": self.ticks,
                        "message": "waiting for an approver's decision",
                    }))
                }
            };
            if self.tx.send(sse(&note)).await.is_err() {
                return None;
            }
        }
    }
}

impl Relay {
    /// An upstream's notification as this stream's client gets it: progress under the
    /// client's own token, log messages when it asked for them; anything else is not sent.
    fn upstream_note(&self, mut up: Value) -> Option<Value> {
        let method = up.get("method").and_then(Value::as_str).unwrap_or("");
        match (method, &self.token) {
            ("notifications/progress", Some(t)) => {
                up["params"]["progressToken"] = t.clone();
                Some(up)
            }
            ("notifications/message", _) if self.logs => Some(up),
            _ => None,
        }
    }

    /// Puts an upstream's request to this stream's client under an id of ours; its answer (a
    /// later POST, within the session) goes back to the upstream. A client that did not
    /// declare what it takes is not asked.
    fn ask_client(&self, ask: Ask) -> Option<Value> {
        let session = self
            .session
            .as_ref()
            .filter(|_| self.takes.contains(&ask.method.as_str()));
        let Some((front, sid)) = session else {
            let _ = ask.reply.send(not_relayed(&ask.method));
            return None;
        };
        let id = match random_hex(8) {
            Ok(r) => format!("airlock-ask-{r}"),
            Err(_) => {
                let _ = ask.reply.send(not_relayed(&ask.method));
                return None;
            }
        };
        let answer = front.expect_reply(sid, &id);
        let (front, sid, wait, rid) = (front.clone(), sid.clone(), self.max_wait, id.clone());
        tokio::spawn(async move {
            let reply = match tokio::time::timeout(wait, answer).await {
                Ok(Ok(r)) => r,
                _ => json!({"error": {"code": -32603, "message": "the client did not answer"}}),
            };
            front.forget_reply(&sid, &rid);
            let _ = ask.reply.send(reply);
        });
        Some(json!({"jsonrpc": "2.0", "id": id, "method": ask.method, "params": ask.params}))
    }
}

fn sse(msg: &Value) -> Bytes {
    Bytes::from(format!("event: message\ndata: {msg}\n\n"))
}
