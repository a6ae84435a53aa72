//! MCP tasks (DESIGN §15): a `tools/call` answered with a task handle instead of waiting, for
//! clients that ask for one, in both revisions:
//!
//! - 2026-07-28 (SEP-2663, the `io.modelcontextprotocol/tasks` extension): a request whose
//!   client capabilities declare the extension gets, for a call that needs approval (or is
//!   suspended, DESIGN §11), a `CreateTaskResult` in `input_required`; `tasks/get` follows it
//!   (`inputRequests` while it waits, the call's result inlined once `completed`),
//!   `tasks/update` answers its input requests, `tasks/cancel` cancels it. Calls that need no
//!   one are answered as they are: the server decides when a task is worth making;
//! - 2025-11-25 (the experimental tasks utility): a `tools/call` with `params.task` always
//!   gets `{task: …}`; `tasks/get`, `tasks/result` (blocks until the task ends), `tasks/list`
//!   and `tasks/cancel`.
//!
//! A task is a durable record under its principal ([`airlock_storage::Store::create_task`]) that
//! names the call it follows; its status is read from the call at each request, so a task
//! survives a restart, runs its call once (the pipeline's claim), and cannot be read by anyone
//! but its principal (another's task is as unknown as a made-up id). An approved task's call
//! runs when its client next asks about it (`tasks/get`, `tasks/result`), as an approved
//! `POST /v1/calls` runs when its caller asks. The agent's own answer to the approval request
//! approves nothing: only approvers decide. Tasks of an upstream are not passed through yet.

use std::sync::Arc;
use std::time::Duration;

use airlock_policy::ToolCall;
use airlock_storage::{CallRecord, CallStatus, Millis, Principal};
use hyper::{Response, StatusCode};
use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};
use sha2::{Digest, Sha256};

use super::results::{answer, input_request, link, tool_result};
use super::wire::{self, Message, RpcError};
use super::{Exchange, McpFront};
use crate::backends::mcp::LEGACY;
use crate::body::{json_bytes_response, json_response, Body};
use crate::clock::{now_ms, rfc3339};
use crate::error::{ApiError, Code};
use crate::pipeline::{self, suspend, Outcome};
use crate::state::{audit_fields, Gateway};

/// The extension's identifier (2026-07-28).
pub const EXTENSION: &str = "io.modelcontextprotocol/tasks";

/// How often a client is asked to poll.
const POLL_MS: u64 = 1000;

/// How long a task is kept (a 2025 client may ask for less): a day, longer than any approval
/// is likely to wait.
const TTL_MS: u64 = 24 * 3600 * 1000;

/// The key of the approval request in a task's `inputRequests`.
const APPROVAL_KEY: &str = "airlock_approval";

/// What ends a `tasks/result` wait with an error instead of waiting on.
const GIVE_UP: [Code; 4] = [
    Code::GatewayShuttingDown,
    Code::GatewayTooManyHeld,
    Code::StoreUnavailable,
    Code::StoreCorrupt,
];

/// Tasks per `tasks/list` page.
const LIST_PAGE: usize = 100;

/// A task as stored.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Task {
    task_id: String,
    /// The revision it was made in: its methods are that revision's.
    revision: String,
    tool: String,
    /// The call it follows.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    call_id: Option<String>,
    /// Its result, when the call's outcome was final as the task was made and no call record
    /// holds it (a refusal before or by policy): the task is `completed` with it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    result: Option<Value>,
    ttl_ms: u64,
    created_at: Millis,
    expires_at: Millis,
    /// A task an upstream made of the call (2026-07-28): the server and its id for it. Its
    /// methods are passed to that upstream.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    upstream: Option<Upstreamed>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Upstreamed {
    server: String,
    task_id: String,
}

/// What a task is doing now.
enum State {
    Working,
    /// Waiting for a person or for input: why, and (2026) what is asked of the client.
    Input {
        message: String,
        requests: Map<String, Value>,
    },
    Completed(Value),
    /// A JSON-RPC error ended it.
    Failed(Value),
    Cancelled,
}

impl State {
    fn name(&self) -> &'static str {
        match self {
            State::Working => "working",
            State::Input { .. } => "input_required",
            State::Completed(_) => "completed",
            State::Failed(_) => "failed",
            State::Cancelled => "cancelled",
        }
    }

    fn terminal(&self) -> bool {
        matches!(
            self,
            State::Completed(_) | State::Failed(_) | State::Cancelled
        )
    }
}

/// Whether the request asks for a task: a 2026 client that declared the extension, or a 2025
/// `tools/call` with `params.task` (its `ttl`, if any, is returned).
pub fn asked(exchange: &Exchange, msg: &Message) -> Option<Option<u64>> {
    if exchange.modern() {
        return declared(exchange).then_some(None);
    }
    let task = msg.params.get("task").filter(|t| t.is_object())?;
    Some(task.get("ttl").and_then(Value::as_u64))
}

/// The request's client capabilities declare the extension (2026-07-28).
fn declared(exchange: &Exchange) -> bool {
    wire::at(&exchange.capabilities, &["extensions", EXTENSION]).is_some_and(Value::is_object)
}

/// The principal's key for its tasks: a hash, since principal ids may hold any character.
fn owner(principal: &Principal) -> String {
    airlock_policy::hex(&Sha256::digest(principal.id.as_bytes()))[..32].to_owned()
}

/// The answer to a `tools/call` that asked for a task, once the pipeline has its outcome
/// (`Hold::Async`): a task when one is due, else the plain answer.
#[allow(clippy::too_many_arguments)]
pub async fn create(
    gw: &Arc<Gateway>,
    front: &McpFront,
    principal: &Principal,
    exchange: &Exchange,
    id: Value,
    call: &ToolCall,
    outcome: Result<Outcome, ApiError>,
    ttl: Option<u64>,
) -> Response<Body> {
    let (mut upstream, mut upstream_answer) = (None, None);
    let call_id = match &outcome {
        Ok(Outcome::Pending(p)) => Some(p.call_id.clone()),
        Ok(Outcome::Suspended(v)) => Some(v.call_id.clone()),
        // The upstream made a task of the allowed call: ours stands for it.
        Ok(Outcome::Completed(c)) if exchange.modern() && is_upstream_task(c) => {
            let (Some(server), Some(task_id)) = (
                gw.backends.mcp.resolve(&call.tool),
                c.result.get("taskId").and_then(Value::as_str),
            ) else {
                return answer(gw, front, principal, exchange, id, call, outcome);
            };
            upstream = Some(Upstreamed {
                server: server.server.config.name.clone(),
                task_id: task_id.to_owned(),
            });
            upstream_answer = Some(c.result.clone());
            Some(c.call_id.clone())
        }
        // 2026: the server makes a task only when the call waits for someone.
        _ if exchange.modern() => return answer(gw, front, principal, exchange, id, call, outcome),
        Ok(Outcome::Completed(c)) => Some(c.call_id.clone()),
        Err(_) => None,
    };
    let now = now_ms();
    let ttl_ms = ttl.filter(|t| *t > 0).unwrap_or(TTL_MS).min(TTL_MS);
    let task = Task {
        task_id: airlock_storage::new_id("task"),
        revision: exchange.revision.to_owned(),
        tool: call.tool.clone(),
        result: match &call_id {
            Some(_) => None,
            None => Some(tool_result(gw, front, principal, exchange, call, outcome)),
        },
        call_id,
        ttl_ms,
        created_at: now,
        expires_at: now + ttl_ms,
        upstream,
    };
    if let Err(e) = store(gw, principal, exchange, call, &task, now).await {
        return internal(id, &e, exchange.modern());
    }
    if let (Some(u), Some(mut r)) = (&task.upstream, upstream_answer) {
        // The upstream's own answer, under our task id.
        r["taskId"] = json!(task.task_id);
        tracing::info!(task_id = %task.task_id, mcp_server = %u.server, "an upstream's task passed through");
        return json_response(StatusCode::OK, &wire::result(id, r));
    }
    let state = match state(gw, front, principal, exchange, &task, false).await {
        Ok(s) => s,
        Err(e) => return super::rpc_error(&RpcError { id, ..e }, exchange.modern()),
    };
    let result = created(&task, &state, exchange.modern());
    json_bytes_response(StatusCode::OK, wire::result_bytes(&id, &result))
}

/// The answer that makes a task: 2026's `resultType: "task"` (what the task asks, or its
/// result, is for `tasks/get`, SEP-2663), or 2025's `{"task": …}`.
fn created(task: &Task, state: &State, modern: bool) -> Value {
    let seen = now_ms();
    if !modern {
        return json!({"task": envelope(task, state, seen, false)});
    }
    let mut r = envelope(task, state, seen, true);
    for k in ["inputRequests", "result", "error"] {
        r.remove(k);
    }
    r.insert("resultType".into(), json!("task"));
    Value::Object(r)
}

/// Stores a new task of `principal`'s, with its audit record.
async fn store(
    gw: &Arc<Gateway>,
    principal: &Principal,
    exchange: &Exchange,
    call: &ToolCall,
    task: &Task,
    now: u64,
) -> Result<(), String> {
    let mut audit = audit_fields(json!({
        "principal": principal.id, "auth": principal.auth_record(), "tool": call.tool,
        "fingerprint": call.fingerprint.as_str(), "task_id": task.task_id, "call_id": task.call_id,
    }));
    pipeline::Front::mcp(Some(exchange.revision), exchange.session.clone()).tag(&mut audit);
    let (key, tid) = (owner(principal), task.task_id.clone());
    let stored = serde_json::to_value(task).map_err(|e| e.to_string())?;
    gw.store_op(move |s| s.create_task(&key, &tid, stored, audit, now))
        .await
        .map(|_| ())
        .map_err(|e| e.message)
}

/// `tasks/*`: the methods of the request's revision, for the principal's own tasks.
pub async fn method(
    gw: &Arc<Gateway>,
    front: &McpFront,
    principal: &Principal,
    exchange: &Exchange,
    method: &str,
    msg: &Message,
) -> Result<Value, RpcError> {
    let id = msg.id();
    let modern = exchange.modern();
    match (method, modern) {
        ("tasks/result" | "tasks/list", true) | ("tasks/update", false) => {
            return Err(RpcError::new(
                id,
                wire::METHOD_NOT_FOUND,
                format!(
                    "`{method}` does not exist in the {} revision",
                    exchange.revision
                ),
            ))
        }
        (_, true) if !declared(exchange) => {
            return Err(RpcError::new(
                id,
                wire::MISSING_CAPABILITY,
                format!(
                "`{method}` needs the `{EXTENSION}` extension in the request's client capabilities"
            ),
            )
            .with_data(json!({"requiredCapabilities": {"extensions": {EXTENSION: {}}}})))
        }
        ("tasks/list", false) => return list(gw, front, principal, exchange, msg).await,
        _ => {}
    }
    let task = find(gw, principal, msg).await?;
    if let Some(u) = &task.upstream {
        return passed(gw, &task, u, method, msg).await;
    }
    let now = now_ms();
    match method {
        "tasks/get" => {
            let state = state(gw, front, principal, exchange, &task, true).await?;
            Ok(Value::Object(envelope(&task, &state, now, modern)))
        }
        "tasks/update" => update(gw, principal, &task, msg).await,
        "tasks/cancel" => {
            let before = state(gw, front, principal, exchange, &task, false).await?;
            if before.terminal() && !modern {
                return Err(RpcError::new(
                    id,
                    wire::INVALID_PARAMS,
                    format!(
                        "the task has ended ({}); it cannot be cancelled",
                        before.name()
                    ),
                ));
            }
            if let (false, Some(call_id)) = (before.terminal(), &task.call_id) {
                // Cooperative: a call that has started runs to its end.
                if let Err(e) = pipeline::cancel(gw, principal, call_id).await {
                    tracing::info!(task_id = %task.task_id, code = e.code.as_str(), "task not cancelled: {}", e.message);
                }
            }
            if modern {
                return Ok(json!({}));
            }
            let after = state(gw, front, principal, exchange, &task, false).await?;
            Ok(Value::Object(envelope(&task, &after, now_ms(), false)))
        }
        "tasks/result" => result(gw, front, principal, exchange, &task).await,
        other => Err(RpcError::new(
            id,
            wire::METHOD_NOT_FOUND,
            format!("method `{other}` is not supported"),
        )),
    }
}

/// A method on a task an upstream runs: asked of that upstream under its id for the task (in
/// the client's revision and capabilities), its answer given back under ours.
async fn passed(
    gw: &Gateway,
    task: &Task,
    u: &Upstreamed,
    method: &str,
    msg: &Message,
) -> Result<Value, RpcError> {
    let Some(server) = gw
        .backends
        .mcp
        .servers
        .iter()
        .find(|s| s.config.name == u.server)
    else {
        return Err(RpcError::new(
            msg.id(),
            -32603,
            format!(
                "the task's MCP server `{}` is no longer configured",
                u.server
            ),
        ));
    };
    let mut params = msg.params.clone();
    if let Some(o) = params.as_object_mut() {
        o.remove("_meta");
        o.insert("taskId".into(), json!(u.task_id));
    }
    let mut answer = server
        .request(method, params, None, None)
        .await
        .map_err(|f| match f {
            crate::backends::mcp::Failure::Rpc(e) => RpcError {
                id: msg.id(),
                code: e.code,
                message: e.message,
                data: e.data,
            },
            other => {
                let e = other.into_api_error(&server.config.name);
                RpcError::new(msg.id(), -32603, e.message).with_data(json!({"code": e.code}))
            }
        })?;
    if let Some(o) = answer.as_object_mut().filter(|o| o.contains_key("taskId")) {
        o.insert("taskId".into(), json!(task.task_id));
    }
    Ok(answer)
}

/// An MCP upstream answered the call with a task of its own (2026-07-28).
fn is_upstream_task(c: &pipeline::Completed) -> bool {
    c.upstream_status.is_none()
        && c.result.get("resultType").and_then(Value::as_str) == Some("task")
}

/// The task `params.taskId` names, if it is the principal's and has not expired.
async fn find(gw: &Arc<Gateway>, principal: &Principal, msg: &Message) -> Result<Task, RpcError> {
    let not_found = || {
        RpcError::new(
            msg.id(),
            wire::INVALID_PARAMS,
            "Failed to retrieve task: Task not found",
        )
    };
    let Some(task_id) = msg.params.get("taskId").and_then(Value::as_str) else {
        return Err(RpcError::new(
            msg.id(),
            wire::INVALID_PARAMS,
            "`taskId` is required",
        ));
    };
    let (key, tid, now) = (owner(principal), task_id.to_owned(), now_ms());
    let stored = gw
        .store_op(move |s| s.task(&key, &tid, now))
        .await
        .map_err(|e| store_error(msg.id(), e))?
        .ok_or_else(not_found)?;
    serde_json::from_value(stored).map_err(|_| not_found())
}

/// What the task is doing, read from its call. With `drive`, an approved call that has not
/// started is started, in the background: the client learns its end at a later poll.
async fn state(
    gw: &Arc<Gateway>,
    front: &McpFront,
    principal: &Principal,
    exchange: &Exchange,
    task: &Task,
    drive: bool,
) -> Result<State, RpcError> {
    if let Some(r) = &task.result {
        return Ok(State::Completed(r.clone()));
    }
    let Some(call_id) = task.call_id.clone() else {
        return Ok(State::Cancelled);
    };
    let record = read_call(gw, &call_id).await?;
    Ok(match record.status {
        CallStatus::Allowed | CallStatus::Approved => {
            if drive {
                let (gw, principal) = (gw.clone(), principal.clone());
                tokio::spawn(async move {
                    let _ = pipeline::call_outcome(&gw, &principal, &call_id, Duration::ZERO, true)
                        .await;
                });
            }
            State::Working
        }
        CallStatus::Executing => State::Working,
        CallStatus::Cancelled => State::Cancelled,
        CallStatus::PendingApproval => {
            let approval_id = record.approval_id.clone().unwrap_or_default();
            let url = link(gw, &approval_id);
            let mut requests = Map::new();
            requests.insert(
                APPROVAL_KEY.into(),
                json!({"method": "elicitation/create", "params": {
                    "mode": "url", "url": url, "elicitationId": approval_id,
                    "message": format!("`{}` needs approval. Open the link to see the call and decide; the task continues once it is decided.", record.tool),
                }}),
            );
            State::Input {
                message: format!("waiting for an approver's decision: {url}"),
                requests,
            }
        }
        CallStatus::Suspended => {
            let Some(v) = pipeline::Suspended::of(&record) else {
                return Err(RpcError::new(
                    Value::Null,
                    -32603,
                    "a suspended call without its suspension",
                ));
            };
            let form = suspend::is_flat(&v.resume_schema)
                && (exchange.form_elicitation() || !exchange.url_elicitation());
            let mut requests = Map::new();
            requests.insert(input_key(v.count), input_request(gw, &v, form));
            State::Input {
                message: format!(
                    "waiting for input: {}",
                    crate::approvals::resume_link(&gw.config, &v.call_id)
                ),
                requests,
            }
        }
        _ => {
            let outcome =
                pipeline::call_outcome(gw, principal, &call_id, Duration::ZERO, false).await;
            ended(gw, front, principal, exchange, &record, outcome)
        }
    })
}

/// The state of a call whose outcome is final.
fn ended(
    gw: &Gateway,
    front: &McpFront,
    principal: &Principal,
    exchange: &Exchange,
    record: &CallRecord,
    outcome: Result<Outcome, ApiError>,
) -> State {
    match &outcome {
        Err(e) if e.code == Code::CallCancelled => return State::Cancelled,
        Err(e) if e.code == Code::McpMissingCapability => {
            return State::Failed(json!({"code": wire::MISSING_CAPABILITY, "message": e.message}))
        }
        _ => {}
    }
    match ToolCall::new(
        &record.tool,
        record.args.clone(),
        Some(record.context.clone()),
    ) {
        Ok(call) => State::Completed(tool_result(gw, front, principal, exchange, &call, outcome)),
        Err(e) => State::Failed(json!({"code": -32603, "message": e.to_string()})),
    }
}

/// The key of a suspension's input request: new for each suspension of the call, as a task's
/// request keys must never be reused.
fn input_key(count: u32) -> String {
    format!("airlock_input_{count}")
}

/// `tasks/update` (2026-07-28): the answer to a suspension's input request resumes the call;
/// an answer to the approval request, or to a key not asked now, is ignored (the agent cannot
/// approve its own call).
async fn update(
    gw: &Arc<Gateway>,
    principal: &Principal,
    task: &Task,
    msg: &Message,
) -> Result<Value, RpcError> {
    let Some(responses) = msg.params.get("inputResponses").and_then(Value::as_object) else {
        return Err(RpcError::new(
            msg.id(),
            wire::INVALID_PARAMS,
            "`inputResponses` must map each input request's key to its answer, an object",
        ));
    };
    let Some(call_id) = &task.call_id else {
        return Ok(json!({}));
    };
    let record = read_call(gw, call_id)
        .await
        .map_err(|e| RpcError { id: msg.id(), ..e })?;
    let asked = (record.status == CallStatus::Suspended)
        .then(|| record.suspension.as_ref().map(|s| input_key(s.count)))
        .flatten();
    for (key, response) in responses {
        if Some(key) != asked.as_ref() {
            tracing::info!(task_id = %task.task_id, key, "an answer to no outstanding request of the task, ignored");
            continue;
        }
        match suspend::answer_input(gw, principal, call_id, response).await {
            Ok(_) => {}
            Err(e) if e.code == Code::CallCancelled => {}
            Err(e) => {
                return Err(RpcError::new(msg.id(), wire::INVALID_PARAMS, e.message)
                    .with_data(json!({"code": e.code})))
            }
        }
    }
    Ok(json!({}))
}

/// `tasks/result` (2025-11-25): waits until the task ends, then its result (or the JSON-RPC
/// error that ended it). An approved call is run here.
async fn result(
    gw: &Arc<Gateway>,
    front: &McpFront,
    principal: &Principal,
    exchange: &Exchange,
    task: &Task,
) -> Result<Value, RpcError> {
    let wait = gw.config.hold_timeout.max(Duration::from_secs(1));
    loop {
        let state = state(gw, front, principal, exchange, task, false).await?;
        match state {
            State::Completed(mut r) => {
                if let Some(o) = r.as_object_mut() {
                    let meta = o.entry("_meta").or_insert_with(|| json!({}));
                    meta["io.modelcontextprotocol/related-task"] = json!({"taskId": task.task_id});
                }
                return Ok(r);
            }
            State::Failed(e) => {
                let code = e["code"].as_i64().unwrap_or(-32603);
                let message = e["message"].as_str().unwrap_or("the task failed");
                return Err(RpcError::new(Value::Null, code, message));
            }
            State::Cancelled => {
                return Err(RpcError::new(
                    Value::Null,
                    wire::INVALID_PARAMS,
                    "the task was cancelled; it has no result",
                ))
            }
            State::Working | State::Input { .. } => {}
        }
        let Some(call_id) = &task.call_id else {
            continue;
        };
        let waited = match read_call(gw, call_id).await?.status {
            CallStatus::Suspended => suspend::wait_resumed(gw, call_id, wait).await.map(|_| ()),
            CallStatus::Executing => {
                pipeline::wait_while(gw, call_id, wait, |s| s == CallStatus::Executing)
                    .await
                    .map(|_| ())
            }
            // Pending: waits for the decision; approved: runs it.
            _ => pipeline::call_outcome(gw, principal, call_id, wait, true)
                .await
                .map(|_| ()),
        };
        match waited {
            // The gateway cannot wait now: said as the error it is, the task unchanged.
            Err(e) if GIVE_UP.contains(&e.code) => {
                return Err(RpcError::new(Value::Null, -32603, e.message)
                    .with_data(json!({"code": e.code})))
            }
            // Anything else is read as the call's new state on the next turn; a refusal
            // that changed nothing is not retried at once.
            Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
            Ok(()) => {}
        }
    }
}

/// `tasks/list` (2025-11-25): the principal's tasks, oldest first, a page at a time.
async fn list(
    gw: &Arc<Gateway>,
    front: &McpFront,
    principal: &Principal,
    exchange: &Exchange,
    msg: &Message,
) -> Result<Value, RpcError> {
    let after = msg
        .params
        .get("cursor")
        .and_then(Value::as_str)
        .map(str::to_owned);
    let (key, now) = (owner(principal), now_ms());
    let stored = gw
        .store_op(move |s| s.tasks(&key, after.as_deref(), LIST_PAGE + 1, now))
        .await
        .map_err(|e| store_error(msg.id(), e))?;
    let more = stored.len() > LIST_PAGE;
    let mut tasks = Vec::new();
    let mut last = None;
    for v in stored.into_iter().take(LIST_PAGE) {
        let Ok(task) = serde_json::from_value::<Task>(v) else {
            continue;
        };
        if task.revision != LEGACY {
            continue;
        }
        let state = state(gw, front, principal, exchange, &task, false).await?;
        tasks.push(Value::Object(envelope(&task, &state, now, false)));
        last = Some(task.task_id);
    }
    let mut out = json!({"tasks": tasks});
    if let (true, Some(l)) = (more, last) {
        out["nextCursor"] = json!(l);
    }
    Ok(out)
}

/// The task as the revision writes it: a 2026 `DetailedTask` (with `inputRequests`,
/// `result` or `error` by status), or a 2025 `Task`.
fn envelope(task: &Task, state: &State, now: Millis, modern: bool) -> Map<String, Value> {
    let mut t = Map::new();
    t.insert("taskId".into(), json!(task.task_id));
    t.insert("status".into(), json!(state.name()));
    let message = match state {
        State::Input { message, .. } => Some(message.clone()),
        State::Cancelled => Some("the call was cancelled".into()),
        _ => None,
    };
    if let Some(m) = message {
        t.insert("statusMessage".into(), json!(m));
    }
    t.insert("createdAt".into(), json!(rfc3339(task.created_at)));
    t.insert(
        "lastUpdatedAt".into(),
        json!(rfc3339(now.max(task.created_at))),
    );
    if modern {
        t.insert("ttlMs".into(), json!(task.ttl_ms));
        t.insert("pollIntervalMs".into(), json!(POLL_MS));
    } else {
        t.insert("ttl".into(), json!(task.ttl_ms));
        t.insert("pollInterval".into(), json!(POLL_MS));
    }
    if modern {
        match state {
            State::Input { requests, .. } => {
                t.insert("inputRequests".into(), Value::Object(requests.clone()));
            }
            State::Completed(r) => {
                t.insert("result".into(), r.clone());
            }
            State::Failed(e) => {
                t.insert("error".into(), e.clone());
            }
            _ => {}
        }
    }
    t
}

async fn read_call(gw: &Arc<Gateway>, call_id: &str) -> Result<CallRecord, RpcError> {
    let id = call_id.to_owned();
    gw.store_op(move |s| s.call(&id))
        .await
        .map_err(|e| store_error(Value::Null, e))?
        .ok_or_else(|| RpcError::new(Value::Null, -32603, "the task's call is missing"))
}

fn store_error(id: Value, e: ApiError) -> RpcError {
    RpcError::new(id, -32603, e.message).with_data(json!({"code": e.code}))
}

fn internal(id: Value, message: &str, modern: bool) -> Response<Body> {
    super::rpc_error(&RpcError::new(id, -32603, message), modern)
}

#[cfg(test)]
mod tests;
