//! `tools/call` over MCP: strict intake of `arguments`, the one flow of the pipeline, and how
//! the client waits for its outcome (DESIGN §10), which [`super::results`] shapes:
//!
//! - waiting for approval: with a 2026-07-28 client that opens URLs, `input_required` with
//!   the inbox link and a sealed, single-use `requestState`, whose retry finds the call again;
//!   with a 2025-11-25 client that opens URLs, an `elicitation/create` of the link on the held
//!   call's event stream; a client that asked for a task gets one ([`super::tasks`]);
//!   otherwise the call is held for `server.hold_timeout` (with `notifications/progress`
//!   every 10 s when the client gave a progress token and takes an event stream), then an
//!   `approval.pending` result;
//! - suspended (DESIGN §11): the client is asked for the input, as a form when the schema is
//!   flat and the client fills forms, else by the URL of the inbox's resume form — on the
//!   call's event stream (2025-11-25) or as `input_required` (2026-07-28) — and its answer
//!   resumes the call; a client that can do neither gets a `call.suspended` result.
//!
//! While a call runs, a 2025 upstream's requests to its client (sampling, roots, a URL
//! elicitation) are put to a client that declared it takes them, and its answers returned: on
//! the call's event stream in a 2025 session (`Relay`), as `input_required` to a 2026 client
//! while the call runs on ([`super::parked`]).

use std::sync::Arc;
use std::time::Duration;

use airlock_policy::ToolCall;
use airlock_storage::Principal;
use bytes::Bytes;
use hyper::{Response, StatusCode};
use serde_json::{json, Map, Value};
use tokio::sync::mpsc;

use super::results::{
    answer, input_request, is_input_required, link, sealed_input, tool_result, SUSPEND_KEY,
};
use super::seal::{self, State};
use super::wire::{self, Message, RpcError};
use super::{rpc_error, Exchange, McpFront};
use crate::auth::random_hex;
use crate::backends::mcp::{not_relayed, Ask, InputRelay, CLIENT_ASKS, INPUT_RELAY, NOTIFICATIONS};
use crate::body::{json_response, Body};
use crate::clock::now_ms;
use crate::error::{ApiError, Code};
use crate::pipeline::{self, suspend, Front, Hold, Outcome};
use crate::state::{audit_fields, Gateway};

/// How often a held call tells a client with a progress token that it still waits.
const PROGRESS_EVERY: Duration = Duration::from_secs(10);

pub async fn call(
    gw: &Arc<Gateway>,
    front: &Arc<McpFront>,
    principal: Principal,
    exchange: Exchange,
    mut msg: Message,
) -> Response<Body> {
    let id = msg.id();
    let modern = exchange.modern();
    let front_tag = Front::mcp(Some(exchange.revision), exchange.session.clone());
    let call = match intake(gw, &principal, &mut msg, &front_tag).await {
        Ok(c) => c,
        Err(mut e) => {
            e.id = id;
            return rpc_error(&e, modern);
        }
    };

    if let Err(e) = input_responses_shape(gw, &principal, &msg, &front_tag, &call).await {
        return rpc_error(&e, modern);
    }

    // A 2026 retry that carries the state of an earlier `input_required`.
    if let Some(state) = msg.params.get("requestState") {
        return retried(
            gw, front, &principal, &exchange, &msg, &call, front_tag, state,
        )
        .await;
    }

    // Answers a 2026 client sends without a state of ours (an upstream's ephemeral input
    // request, answered up front) go to the upstream as they are, audited.
    let mut relay = input_relay(&exchange, &msg);
    if let Some(responses) = msg
        .params
        .get("inputResponses")
        .filter(|r| modern && r.is_object())
    {
        audit_relay(gw, &principal, &call, "to_upstream", responses).await;
        relay.retry = Some((responses.clone(), None));
    }
    // A client that asked for a task gets one instead of a held request (DESIGN §15).
    if super::tasks::asked(&exchange, &msg).is_some() {
        let run = pipeline::run_call(gw, principal.clone(), call.clone(), Hold::Async, front_tag);
        let outcome = INPUT_RELAY.scope(relay, run).await;
        return finish(gw, front, &principal, &exchange, &msg, &call, outcome).await;
    }
    let mrtr = modern && exchange.url_elicitation();
    let hold = if mrtr {
        Hold::Async
    } else {
        Hold::Wait(gw.config.hold_timeout)
    };
    let progress_token = msg.params.pointer("/_meta/progressToken").cloned();
    let cancel = exchange
        .session
        .as_deref()
        .map(|sid| (sid.to_owned(), front.cancellable(sid, &id)));
    match progress_token {
        // A 2026-07-28 request streams only for what it asked to hear (progress, logs); else
        // its answer, or its error with its own HTTP status, is the plain response.
        token if exchange.accepts_sse && !mrtr && (!modern || token.is_some() || exchange.logs) => {
            stream_with_progress(
                gw.clone(),
                front.clone(),
                principal,
                exchange,
                id,
                call,
                hold,
                front_tag,
                token,
                cancel,
                relay,
            )
        }
        // A 2026 client that answers requests: a 2025 upstream's requests during the call
        // reach it as `input_required` while the call runs on ([`super::parked`]).
        _ if modern && !relay.takes.is_empty() => {
            let takes = relay.takes.clone();
            let (gw2, who, what) = (gw.clone(), principal.clone(), call.clone());
            let run = INPUT_RELAY.scope(relay, async move {
                pipeline::run_call(&gw2, who, what, hold, front_tag).await
            });
            let running = super::parked::start(run, takes);
            let step = front.parking.next(running, gw.config.max_hold).await;
            stepped(gw, front, &principal, &exchange, id, &call, step).await
        }
        _ => {
            let run = INPUT_RELAY.scope(
                relay,
                pipeline::run_call(gw, principal.clone(), call.clone(), hold, front_tag),
            );
            let outcome = match &cancel {
                Some((sid, token)) => {
                    let o = tokio::select! {
                        o = run => Some(o),
                        _ = token.cancelled() => None,
                    };
                    front.done(sid, &id);
                    match o {
                        Some(o) => o,
                        // Cancelled: the client expects no answer to this request.
                        None => return super::empty(StatusCode::ACCEPTED),
                    }
                }
                None => run.await,
            };
            relayed_out(gw, &principal, &call, &outcome).await;
            answer(gw, front, &principal, &exchange, id, &call, outcome)
        }
    }
}

/// A 2026 retry with the state of an earlier `input_required` of ours: opened and spent
/// ([`redeem`]), then whatever it answers, by what the state was for: a parked request of a
/// 2025 upstream, an upstream's own input request, a suspension's input, or an approval.
#[allow(clippy::too_many_arguments)]
async fn retried(
    gw: &Arc<Gateway>,
    front: &Arc<McpFront>,
    principal: &Principal,
    exchange: &Exchange,
    msg: &Message,
    call: &ToolCall,
    front_tag: Front,
    state: &Value,
) -> Response<Body> {
    let (id, modern) = (msg.id(), exchange.modern());
    let opened = redeem(gw, front, &front_tag, principal, call, state).await;
    let state = match opened {
        Ok(s) => s,
        Err(why) => {
            let e = RpcError::new(
                id,
                wire::INVALID_PARAMS,
                format!("invalid requestState: {why}"),
            )
            .with_data(json!({"code": Code::ApprovalInvalidState}));
            return rpc_error(&e, modern);
        }
    };
    if let Some(key) = state.parked {
        // A 2025 upstream's request, answered: to the running call it came from.
        let responses = msg
            .params
            .get("inputResponses")
            .cloned()
            .unwrap_or_default();
        audit_relay(gw, principal, call, "to_upstream", &responses).await;
        let step = match responses.get(&key) {
            Some(a) => {
                front
                    .parking
                    .answer(&key, a.clone(), gw.config.max_hold)
                    .await
            }
            None => None,
        };
        let Some(step) = step else {
            let outcome = Err(ApiError::new(
                Code::ApprovalInvalidState,
                format!("no request of the upstream waits under `{key}` (answered, expired, or the gateway restarted): call the tool again"),
            ));
            return answer(gw, front, principal, exchange, id, call, outcome);
        };
        return stepped(gw, front, principal, exchange, id, call, step).await;
    }
    if let Some(relayed) = state.relay {
        // An upstream's own input request, answered: the same call again, the client's
        // answers and the upstream's state going back to it (DESIGN §15).
        let responses = msg
            .params
            .get("inputResponses")
            .cloned()
            .unwrap_or_else(|| json!({}));
        audit_relay(gw, principal, call, "to_upstream", &responses).await;
        let relay = InputRelay {
            retry: Some((responses, relayed.upstream_state)),
            ..input_relay(exchange, msg)
        };
        let run = pipeline::run_call(
            gw,
            principal.clone(),
            call.clone(),
            Hold::Wait(gw.config.hold_timeout),
            front_tag,
        );
        let outcome = INPUT_RELAY.scope(relay, run).await;
        // The last round may make a task (of ours, or the upstream's).
        return finish(gw, front, principal, exchange, msg, call, outcome).await;
    }
    let outcome = if state.suspension.is_some() {
        // A suspended call's input: the form's answer resumes it; after a URL (the
        // inbox's resume form), the call is awaited while someone resumes it there.
        match msg
            .params
            .pointer(&format!("/inputResponses/{SUSPEND_KEY}"))
        {
            Some(r) if !state.by_url => {
                suspend::answer_input(gw, principal, &state.call_id, r).await
            }
            _ => suspend::wait_resumed(gw, &state.call_id, gw.config.hold_timeout).await,
        }
    } else {
        pipeline::call_outcome(gw, principal, &state.call_id, gw.config.hold_timeout, true).await
    };
    answer(gw, front, principal, exchange, id, call, outcome)
}

/// The answer to a call's outcome: a task when the client asked for one (DESIGN §15), else
/// the plain answer. An upstream's input requests on their way to the client are audited.
async fn finish(
    gw: &Arc<Gateway>,
    front: &McpFront,
    principal: &Principal,
    exchange: &Exchange,
    msg: &Message,
    call: &ToolCall,
    outcome: Result<Outcome, ApiError>,
) -> Response<Body> {
    relayed_out(gw, principal, call, &outcome).await;
    let id = msg.id();
    match super::tasks::asked(exchange, msg) {
        Some(ttl) => {
            super::tasks::create(gw, front, principal, exchange, id, call, outcome, ttl).await
        }
        None => answer(gw, front, principal, exchange, id, call, outcome),
    }
}

/// A running call's next step as the answer to a 2026 client: its outcome, or a 2025
/// upstream's request to it as `input_required`, under a key the retry brings back in its
/// sealed state.
async fn stepped(
    gw: &Arc<Gateway>,
    front: &McpFront,
    principal: &Principal,
    exchange: &Exchange,
    id: Value,
    call: &ToolCall,
    step: super::parked::Step,
) -> Response<Body> {
    let (key, method, params) = match step {
        super::parked::Step::Done(outcome) => {
            relayed_out(gw, principal, call, &outcome).await;
            return answer(gw, front, principal, exchange, id, call, outcome);
        }
        super::parked::Step::Ask {
            key,
            method,
            params,
        } => (key, method, params),
    };
    let request = json!({"method": method, "params": params});
    audit_relay(gw, principal, call, "to_client", &json!({&key: &request})).await;
    let state = State {
        v: 1,
        nonce: String::new(),
        approval_id: String::new(),
        call_id: String::new(),
        principal: principal.id.clone(),
        tool: call.tool.clone(),
        fingerprint: call.fingerprint.to_string(),
        expires_at: now_ms() + gw.config.max_hold.as_millis() as u64,
        suspension: None,
        by_url: false,
        relay: None,
        parked: Some(key.clone()),
    };
    let result = sealed_input(front, &key, request, state);
    json_response(StatusCode::OK, &wire::result(id, result))
}

/// The call as the pipeline takes it: the tool name, `arguments` (taken out of the message)
/// through the strict intake of the pipeline (depth counts from `arguments` as level 1;
/// refusals are audited there), and the MCP context.
async fn intake(
    gw: &Arc<Gateway>,
    principal: &Principal,
    msg: &mut Message,
    front: &Front,
) -> Result<ToolCall, RpcError> {
    let args = msg
        .params
        .as_object_mut()
        .and_then(|p| p.remove("arguments"))
        .unwrap_or_else(|| json!({}));
    let p = &msg.params;
    let id = msg.id();
    // The whole message went through the strict parser ([`wire::parse`]: duplicate keys,
    // unsafe numbers); what is left of §3's intake is the pipeline's.
    let name = p.get("name").and_then(Value::as_str);
    let meta = p.get("_meta");
    let text = |k: &str| meta.and_then(|m| m.get(k)).and_then(Value::as_str);
    let mut context = Map::new();
    context.insert("agent_id".into(), Value::String(principal.id.clone()));
    if let Some(r) = text("airlock/run_id") {
        context.insert("run_id".into(), Value::String(r.into()));
    }
    if let Some(t) = text("airlock/tool_call_id") {
        context.insert("tool_call_id".into(), Value::String(t.into()));
    }
    let raw = pipeline::Raw::Parts {
        tool: name.unwrap_or(""),
        args,
        context: Value::Object(context),
    };
    pipeline::intake(gw, principal, raw, front)
        .await
        .map_err(|e| match name {
            None => RpcError::new(id, wire::INVALID_PARAMS, "`name` is required"),
            Some(_) => RpcError::new(id, wire::INVALID_PARAMS, e.message)
                .with_data(json!({"code": e.code})),
        })
}

/// Opens and spends a `requestState`: sealed by us, for this principal, tool and arguments,
/// not expired, and never used before. Every refusal is audited.
async fn redeem(
    gw: &Arc<Gateway>,
    front: &McpFront,
    tag: &Front,
    principal: &Principal,
    call: &ToolCall,
    state: &Value,
) -> Result<State, &'static str> {
    let check = || -> Result<State, &'static str> {
        let sealed = state.as_str().ok_or("not a string")?;
        let s = seal::open(&front.state_key, sealed).ok_or("not sealed by this gateway")?;
        if s.principal != principal.id {
            return Err("issued to another principal");
        }
        if s.tool != call.tool || s.fingerprint != call.fingerprint.as_str() {
            return Err("issued for another tool or other arguments");
        }
        if s.expires_at <= now_ms() {
            return Err("expired");
        }
        Ok(s)
    };
    let result = match check() {
        Ok(s) => {
            let nonce = s.nonce.clone();
            let (now, keep_until) = (now_ms(), s.expires_at);
            match gw
                .store_op(move |st| st.spend_once(&format!("mcp.state.{nonce}"), keep_until, now))
                .await
            {
                Ok(true) => Ok(s),
                Ok(false) => Err("already used"),
                Err(_) => Err("the store is unavailable"),
            }
        }
        Err(e) => Err(e),
    };
    if let Err(why) = result {
        let mut fields = audit_fields(json!({
            "principal": principal.id, "auth": principal.auth_record(), "tool": call.tool, "fingerprint": call.fingerprint.as_str(),
            "code": Code::ApprovalInvalidState, "reason": why,
        }));
        tag.tag(&mut fields);
        pipeline::admit::record_rejection(gw, fields).await;
    }
    result
}

/// Answers to input requests are objects by key (SEP-2322); anything else is refused, and
/// audited as a rejected call, before it reaches an upstream.
async fn input_responses_shape(
    gw: &Arc<Gateway>,
    principal: &Principal,
    msg: &Message,
    front: &Front,
    call: &ToolCall,
) -> Result<(), RpcError> {
    let Some(r) = msg.params.get("inputResponses") else {
        return Ok(());
    };
    if r.as_object()
        .is_some_and(|m| m.values().all(Value::is_object))
    {
        return Ok(());
    }
    pipeline::admit::reject(
        gw,
        principal,
        Code::RequestInvalidField,
        front,
        Some(&call.tool),
    )
    .await;
    Err(RpcError::new(
        msg.id(),
        wire::INVALID_PARAMS,
        "`inputResponses` must map each input request's key to its answer, an object",
    )
    .with_data(json!({"code": Code::RequestInvalidField})))
}

/// The log level a 2026-07-28 request's `_meta` asks for.
fn log_level(msg: &Message) -> Option<Value> {
    msg.params
        .pointer("/_meta/io.modelcontextprotocol~1logLevel")
        .cloned()
}

/// What a 2026-07-28 client's request carries to the upstream and takes back of its input
/// requests: its capabilities and log level, and the methods of the capabilities it declared.
/// A 2025 session's client gets requests on its stream instead.
pub(super) fn input_relay(exchange: &Exchange, msg: &Message) -> InputRelay {
    let mut takes = Vec::new();
    if exchange.modern() {
        if exchange.form_elicitation() || exchange.url_elicitation() {
            takes.push("elicitation/create");
        }
        takes.extend(
            client_asks_taken(exchange)
                .into_iter()
                .filter(|m| *m != "elicitation/create"),
        );
    }
    InputRelay {
        active: exchange.modern(),
        takes,
        retry: None,
        capabilities: exchange.modern().then(|| exchange.capabilities.clone()),
        log_level: log_level(msg),
    }
}

/// What of a 2025 upstream's requests mid-call ([`CLIENT_ASKS`]) the client declared it
/// answers: sampling, roots, and a URL elicitation (a form one suspends the call instead).
fn client_asks_taken(exchange: &Exchange) -> Vec<&'static str> {
    let caps = &exchange.capabilities;
    let mut takes = Vec::new();
    if exchange.url_elicitation() {
        takes.push("elicitation/create");
    }
    if caps.get("sampling").is_some_and(Value::is_object) {
        takes.push("sampling/createMessage");
    }
    if caps.get("roots").is_some_and(Value::is_object) {
        takes.push("roots/list");
    }
    takes
}

/// Audits an upstream's input requests on their way to the client, if the outcome is one.
async fn relayed_out(
    gw: &Arc<Gateway>,
    principal: &Principal,
    call: &ToolCall,
    outcome: &Result<Outcome, ApiError>,
) {
    if let Ok(Outcome::Completed(c)) = outcome {
        if is_input_required(c) {
            let requests = c.result.get("inputRequests").cloned().unwrap_or_default();
            audit_relay(gw, principal, call, "to_client", &requests).await;
        }
    }
}

/// `mcp.relayed`: which keys (and, going to the client, which methods) passed, never what
/// they carry.
async fn audit_relay(
    gw: &Arc<Gateway>,
    principal: &Principal,
    call: &ToolCall,
    direction: &str,
    entries: &Value,
) {
    let empty = Map::new();
    let entries = entries.as_object().unwrap_or(&empty);
    let keys: Vec<&String> = entries.keys().collect();
    let methods: Vec<&str> = entries
        .values()
        .filter_map(|r| r.get("method").and_then(Value::as_str))
        .collect();
    let mut fields = audit_fields(json!({
        "principal": principal.id, "auth": principal.auth_record(), "tool": call.tool,
        "fingerprint": call.fingerprint.as_str(), "direction": direction, "keys": keys,
    }));
    if direction == "to_client" {
        fields.insert("methods".into(), json!(methods));
    }
    let now = now_ms();
    if let Err(e) = gw
        .store_op(move |s| s.append_audit(airlock_storage::Kind::McpRelayed, fields, now))
        .await
    {
        tracing::error!(
            code = e.code.as_str(),
            "cannot audit a relayed request: {}",
            e.message
        );
    }
}

/// Runs the call on an event stream: the upstream's progress and log notifications are
/// relayed (progress under the client's token), a held call tells a client with a progress
/// token every 10 s that it still waits, and the answer is the last event. A 2025-11-25
/// client that opens URLs is sent an `elicitation/create` (mode `url`, the inbox link) on
/// this stream while its call waits, and `notifications/elicitation/complete` once decided.
#[allow(clippy::too_many_arguments)]
fn stream_with_progress(
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
        let Some(mut outcome) = relay.drive(first).await else {
            return;
        };
        if let (true, Ok(Outcome::Pending(p))) = (elicit, &outcome) {
            let (approval_id, call_id) = (p.approval_id.clone(), p.call_id.clone());
            let ask = json!({"jsonrpc": "2.0", "id": format!("airlock-elicitation-{approval_id}"),
            "method": "elicitation/create", "params": {
                "mode": "url",
                "url": link(&gw, &approval_id),
                "elicitationId": approval_id,
                "message": format!("`{}` needs approval. Open the link to see the call and decide; the call continues once it is decided.", call.tool),
            }});
            if relay.tx.send(sse(&ask)).await.is_err() {
                return;
            }
            let wait = NOTIFICATIONS.scope(
                up_tx.clone(),
                pipeline::call_outcome(&gw, &principal, &call_id, gw.config.hold_timeout, true),
            );
            let Some(next) = relay.drive(wait).await else {
                return;
            };
            outcome = next;
            if !matches!(outcome, Ok(Outcome::Pending(_))) {
                let done = wire::notification(
                    "notifications/elicitation/complete",
                    json!({"elicitationId": approval_id}),
                );
                let _ = relay.tx.send(sse(&done)).await;
            }
        }
        // A suspended call asks the client for its input on this stream (2025-11-25): a
        // form when the client fills forms and the schema is flat, else the inbox's resume
        // form by URL. Each answer resumes it; it may suspend again.
        while let Ok(Outcome::Suspended(v)) = &outcome {
            let v = v.clone();
            let form = exchange.form_elicitation() && suspend::is_flat(&v.resume_schema);
            let (Some(sid), true) = (&exchange.session, form || exchange.url_elicitation()) else {
                break;
            };
            let ask_id = format!("airlock-input-{}-{}", v.call_id, v.count);
            let params = input_request(&gw, &v, form)["params"].clone();
            let ask = json!({"jsonrpc": "2.0", "id": ask_id, "method": "elicitation/create", "params": params});
            let reply = front.expect_reply(sid, &ask_id);
            if relay.tx.send(sse(&ask)).await.is_err() {
                front.forget_reply(sid, &ask_id);
                return;
            }
            let (gw2, principal2, call_id) = (gw.clone(), principal.clone(), v.call_id.clone());
            let wait = gw.config.max_hold;
            let step = NOTIFICATIONS.scope(up_tx.clone(), async move {
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
            let Some(next) = next else { return };
            let same = matches!(&next, Ok(Outcome::Suspended(n)) if n.count == v.count);
            outcome = next;
            if same {
                break;
            }
        }
        relayed_out(&gw, &principal, &call, &outcome).await;
        let result = tool_result(&gw, &front, &principal, &exchange, &call, outcome);
        let _ = relay.tx.send(sse(&wire::result(id, result))).await;
    });
    crate::body::sse_response(rx)
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
