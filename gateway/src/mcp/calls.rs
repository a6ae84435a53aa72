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
//! the call's event stream in a 2025 session ([`super::stream`]), as `input_required` to a
//! 2026 client while the call runs on ([`super::parked`]).

use std::sync::Arc;

use airlock_policy::ToolCall;
use airlock_storage::Principal;
use hyper::{Response, StatusCode};
use serde_json::{json, Map, Value};

use super::relay::{audit_relay, input_relay, relayed_out};
use super::results::{answer, sealed_input, SUSPEND_KEY};
use super::seal::{self, State};
use super::wire::{self, Message, RpcError};
use super::{rpc_error, Exchange, McpFront};
use crate::backends::mcp::{InputRelay, INPUT_RELAY};
use crate::body::{json_bytes_response, Body};
use crate::clock::now_ms;
use crate::error::{ApiError, Code};
use crate::pipeline::{self, suspend, Front, Hold, Outcome};
use crate::state::{audit_fields, Gateway};

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
        Err(Refused::Rpc(mut e)) => {
            e.id = id;
            return rpc_error(&e, modern);
        }
        Err(Refused::Tool(tool, e)) => {
            let result = super::results::refused_tool(gw, &exchange, &tool, &e);
            return json_bytes_response(StatusCode::OK, wire::result_bytes(&id, &result));
        }
    };

    if let Err(e) = input_responses_shape(gw, &principal, &msg, &front_tag, &call).await {
        return rpc_error(&e, modern);
    }

    // A 2026 retry that carries the state of an earlier `input_required`.
    if let Some(state) = msg.params.get("requestState") {
        return Box::pin(retried(
            gw, front, &principal, &exchange, &msg, &call, front_tag, state,
        ))
        .await;
    }

    let relay = relay_with_answers(gw, &principal, &exchange, &msg, &call).await;
    // A client that asked for a task gets one instead of a held request (DESIGN §15).
    if super::tasks::asked(&exchange, &msg).is_some() {
        let run = Box::pin(pipeline::run_call(
            gw,
            principal.clone(),
            call.clone(),
            Hold::Async,
            front_tag,
        ));
        let outcome = INPUT_RELAY.scope(relay, run).await;
        return Box::pin(finish(
            gw, front, &principal, &exchange, &msg, &call, outcome,
        ))
        .await;
    }
    let mrtr = modern && exchange.url_elicitation();
    let hold = if mrtr {
        Hold::Async
    } else {
        Hold::Wait(gw.config.hold_timeout)
    };
    let progress_token = wire::at(&msg.params, &["_meta", "progressToken"]).cloned();
    let cancel = exchange
        .session
        .as_deref()
        .map(|sid| (sid.to_owned(), front.cancellable(sid, &id)));
    match progress_token {
        // A 2026-07-28 request streams only for what it asked to hear (progress, logs); else
        // its answer, or its error with its own HTTP status, is the plain response.
        token if exchange.accepts_sse && !mrtr && (!modern || token.is_some() || exchange.logs) => {
            super::stream::stream_with_progress(
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
            Box::pin(stepped(gw, front, &principal, &exchange, id, &call, step)).await
        }
        _ => {
            // Boxed, as are the rarer branches' futures: what this function's future holds
            // stays small, so the answer's way up the stack copies little.
            let run = INPUT_RELAY.scope(
                relay,
                Box::pin(pipeline::run_call(
                    gw,
                    principal.clone(),
                    call.clone(),
                    hold,
                    front_tag,
                )),
            );
            let Some(outcome) = cancellable(run, front, cancel.as_ref(), &id).await else {
                // Cancelled: the client expects no answer to this request.
                return super::empty(StatusCode::ACCEPTED);
            };
            relayed_out(gw, &principal, &call, &outcome).await;
            answer(gw, front, &principal, &exchange, id, &call, outcome)
        }
    }
}

/// What the call carries to its upstream of the client ([`input_relay`]), with the answers
/// a 2026 client sends without a state of ours (an upstream's ephemeral input request,
/// answered up front): they go to the upstream as they are, audited.
async fn relay_with_answers(
    gw: &Arc<Gateway>,
    principal: &Principal,
    exchange: &Exchange,
    msg: &Message,
    call: &ToolCall,
) -> InputRelay {
    let mut relay = input_relay(exchange, msg);
    if let Some(responses) = msg
        .params
        .get("inputResponses")
        .filter(|r| exchange.modern() && r.is_object())
    {
        audit_relay(gw, principal, call, "to_upstream", responses).await;
        relay.retry = Some((responses.clone(), None));
    }
    relay
}

/// The call's outcome, or `None` when a 2025 client cancelled it first
/// (`notifications/cancelled` names its request in the session).
async fn cancellable(
    run: impl std::future::Future<Output = Result<Outcome, ApiError>>,
    front: &McpFront,
    cancel: Option<&(String, tokio_util::sync::CancellationToken)>,
    id: &Value,
) -> Option<Result<Outcome, ApiError>> {
    let Some((sid, token)) = cancel else {
        return Some(run.await);
    };
    let outcome = tokio::select! {
        o = run => Some(o),
        _ = token.cancelled() => None,
    };
    front.done(sid, id);
    outcome
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
    let ask = Asked {
        gw,
        front,
        principal,
        exchange,
        msg,
        call,
    };
    if let Some(key) = state.parked {
        return ask.parked_answered(&key).await;
    }
    if let Some(relayed) = state.relay {
        return ask.relay_answered(relayed.upstream_state, front_tag).await;
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

/// A retried call with the client's answers to what an earlier round asked.
struct Asked<'a> {
    gw: &'a Arc<Gateway>,
    front: &'a Arc<McpFront>,
    principal: &'a Principal,
    exchange: &'a Exchange,
    msg: &'a Message,
    call: &'a ToolCall,
}

impl Asked<'_> {
    /// The client's `inputResponses` (audited on their way to the upstream).
    async fn responses(&self) -> Value {
        let responses = self
            .msg
            .params
            .get("inputResponses")
            .cloned()
            .unwrap_or_else(|| json!({}));
        audit_relay(
            self.gw,
            self.principal,
            self.call,
            "to_upstream",
            &responses,
        )
        .await;
        responses
    }

    /// A 2025 upstream's request, answered: to the running call it came from.
    async fn parked_answered(&self, key: &str) -> Response<Body> {
        let Asked {
            gw,
            front,
            principal,
            exchange,
            call,
            ..
        } = *self;
        let id = self.msg.id();
        let responses = self.responses().await;
        let step = match responses.get(key) {
            Some(a) => {
                front
                    .parking
                    .answer(key, a.clone(), gw.config.max_hold)
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
        stepped(gw, front, principal, exchange, id, call, step).await
    }

    /// An upstream's own input request, answered: the same call again, the client's answers
    /// and the upstream's state going back to it (DESIGN §15).
    async fn relay_answered(
        &self,
        upstream_state: Option<Value>,
        front_tag: Front,
    ) -> Response<Body> {
        let Asked {
            gw,
            front,
            principal,
            exchange,
            msg,
            call,
        } = *self;
        let relay = InputRelay {
            retry: Some((self.responses().await, upstream_state)),
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
        finish(gw, front, principal, exchange, msg, call, outcome).await
    }
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
    json_bytes_response(StatusCode::OK, wire::result_bytes(&id, &result))
}

/// The call as the pipeline takes it: the tool name, `arguments` (taken out of the message)
/// through the strict intake of the pipeline (depth counts from `arguments` as level 1;
/// refusals are audited there), and the MCP context.
async fn intake(
    gw: &Arc<Gateway>,
    principal: &Principal,
    msg: &mut Message,
    front: &Front,
) -> Result<ToolCall, Refused> {
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
            None => Refused::Rpc(RpcError::new(
                id,
                wire::INVALID_PARAMS,
                "`name` is required",
            )),
            // The tool exists but cannot be called now, or its arguments do not fit its input
            // schema (MCP: input validation errors are tool execution errors, so the model
            // can correct them): a result the model reads.
            Some(tool)
                if matches!(
                    e.code,
                    Code::ToolDefinitionChanged | Code::UpstreamUnavailable
                ) || crate::schemas::is_schema_refusal(&e) =>
            {
                Refused::Tool(tool.to_owned(), e)
            }
            Some(_) => Refused::Rpc(
                RpcError::new(id, wire::INVALID_PARAMS, e.message)
                    .with_data(json!({"code": e.code})),
            ),
        })
}

/// Why a `tools/call` did not pass intake: a malformed call (a JSON-RPC error), or a tool
/// that exists but cannot be called now (an `isError` result).
enum Refused {
    Rpc(RpcError),
    Tool(String, ApiError),
}

/// Opens and spends a `requestState`: sealed by us, for this principal, tool and arguments,
/// not expired, and never used before. Every refusal is audited.
pub(super) async fn redeem(
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
