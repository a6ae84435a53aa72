//! The one flow of DESIGN §1, top to bottom:
//!
//! authenticate → parse strictly → fingerprint → decide → (grant use | hold) → forward → audit
//!
//! [`handle_call`] is that flow for `POST /v1/calls`; [`call_outcome`] finishes a call later
//! (`GET /v1/calls/{id}`, `resume`), and [`decide`] is how an approver's word reaches a held
//! call. Every path writes its audit record through the store, errors included. The front
//! ends (`http`, `mcp`, `inbox`) only translate in and out of these functions; their answer is
//! an [`Outcome`] or an [`ApiError`] with a stable code.

mod outcome;
pub mod suspend;

pub use outcome::{question_of, tool_call_id, Completed, Outcome, Pending, Suspended};

use std::sync::Arc;
use std::time::{Duration, Instant};

use std::collections::BTreeMap;

use airlock_policy::cases::classifiers_json;
use airlock_policy::{
    evaluate, ClassifierOutcome, Decision, DecisionKind, GrantScope, Input, ToolCall,
};
use airlock_storage::{
    Approval, ApprovalStatus, Begin, CallOutcome, CallRecord, CallStatus, Durability, GrantTerms,
    Principal, Verdict,
};
use serde_json::{json, Map, Value};
use tokio::time::Instant as TokioInstant;
use tracing::Instrument;

use crate::clock::{now_ms, to_system_time};
use crate::error::ApiError;
use crate::state::Route;
use crate::state::{attach_key, audit_fields, Gateway};
use crate::upstream::CallHeaders;

/// How long the caller is willing to wait for a decision (`Prefer`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Hold {
    /// `Prefer: respond-async`: answer 202 at once.
    Async,
    Wait(Duration),
}

/// Parses `Prefer: wait=N` / `respond-async`; without either, the server's hold timeout.
pub fn parse_prefer(value: Option<&str>, default: Duration, max: Duration) -> Hold {
    let mut hold = Hold::Wait(default);
    for pref in value.unwrap_or("").split(',').map(str::trim) {
        if pref.eq_ignore_ascii_case("respond-async") {
            return Hold::Async;
        }
        if let Some(n) = pref
            .strip_prefix("wait=")
            .and_then(|n| n.trim().parse::<u64>().ok())
        {
            hold = Hold::Wait(Duration::from_secs(n).min(max));
        }
    }
    hold
}

/// The principal as policy sees it.
fn principal_json(p: &Principal) -> Value {
    json!({"id": p.id, "role": p.role, "groups": p.groups})
}

/// The key a grant binds to (DESIGN §5). A run-scoped grant is also bound to the requesting
/// principal, so another principal reusing a run id gets nothing.
fn scope_key(scope: GrantScope, call_id: &str, call: &ToolCall, principal: &Principal) -> String {
    match (scope, call.run_id()) {
        (GrantScope::Run, Some(run)) => format!("run:{}:{run}", principal.id),
        (GrantScope::Principal, _) => format!("principal:{}", principal.id),
        _ => format!("call:{call_id}"),
    }
}

/// Runs the classifiers named by the rules that may apply to `call`, then evaluates it for
/// `principal` under the current policy. Returns the decision and the classifier results.
pub async fn decide_policy(
    gw: &Gateway,
    call: &ToolCall,
    principal: &Principal,
    resume: Option<&Value>,
) -> (Decision, BTreeMap<String, ClassifierOutcome>) {
    let policy = gw.policy.load_full();
    let names = policy.classifiers_for(&call.tool);
    let classifiers = if names.is_empty() {
        BTreeMap::new()
    } else {
        gw.classifiers.run(&names, call, &gw.metrics).await
    };
    let principal = principal_json(principal);
    let start = Instant::now();
    let decision = evaluate(
        &policy,
        &Input {
            tool: &call.tool,
            args: &call.args,
            context: &call.context,
            principal: &principal,
            fingerprint: call.fingerprint.as_str(),
            now: to_system_time(now_ms()),
            classifiers: &classifiers,
            resume,
        },
    );
    gw.metrics
        .policy_eval_seconds
        .observe(start.elapsed().as_secs_f64());
    (decision, classifiers)
}

/// What the audit log and the approval record say about a decision: the matched rules, their
/// errors and messages, the policy version, and the classifier results.
fn explanation(
    d: &Decision,
    classifiers: &BTreeMap<String, ClassifierOutcome>,
) -> Map<String, Value> {
    let mut e = audit_fields(json!({
        "rules": d.rules,
        "errors": d.errors,
        "messages": d.messages,
        "policy_version": d.policy_version,
    }));
    if !classifiers.is_empty() {
        e.insert("classifiers".into(), classifiers_json(classifiers));
    }
    e
}

fn new_call_record(
    call_id: &str,
    call: &ToolCall,
    principal: &Principal,
    decision: &Decision,
    now: u64,
) -> CallRecord {
    CallRecord {
        call_id: call_id.to_owned(),
        tool: call.tool.clone(),
        args: call.args.clone(),
        fingerprint: call.fingerprint.to_string(),
        requester: principal.clone(),
        context: call.context.clone(),
        decision: decision.decision.as_str().to_owned(),
        status: match decision.decision {
            DecisionKind::Allow => CallStatus::Allowed,
            DecisionKind::Deny => CallStatus::Denied,
            DecisionKind::RequireApproval => CallStatus::PendingApproval,
        },
        approval_id: None,
        reason: None,
        edited: false,
        run_by: None,
        outcome: None,
        suspension: None,
        created_at: now,
        updated_at: now,
    }
}

tokio::task_local! {
    /// Where an MCP upstream's notifications for the call being run (progress, log messages)
    /// go: set by the MCP front end around the pipeline future of a client that can take
    /// them. INVARIANT: only the front end that set it reads what is sent; the pipeline only
    /// passes it to the upstream it forwards to.
    pub static UPSTREAM_NOTIFICATIONS: crate::mcp::upstream::Notifications;
}

/// Which front end a call came through, for its audit records.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Front {
    /// `None` for the HTTP API; `Some("mcp")` with the revision and the 2025 session id.
    pub name: Option<&'static str>,
    pub mcp_revision: Option<&'static str>,
    pub mcp_session: Option<String>,
}

impl Front {
    fn tag(&self, e: &mut Map<String, Value>) {
        if let Some(n) = self.name {
            e.insert("front".into(), Value::String(n.into()));
        }
        if let Some(r) = self.mcp_revision {
            e.insert("mcp_revision".into(), Value::String(r.into()));
        }
        if let Some(s) = &self.mcp_session {
            e.insert("mcp_session".into(), Value::String(s.clone()));
        }
    }
}

/// `POST /v1/calls`, after authentication and body reading.
pub async fn handle_call(
    gw: &Arc<Gateway>,
    principal: Principal,
    body: &[u8],
    hold: Hold,
) -> Result<Outcome, ApiError> {
    // Parse strictly and fingerprint.
    let call = ToolCall::from_body(body)?;
    run_call(gw, principal, call, hold, Front::default()).await
}

/// A parsed call from any front end, through the rest of the flow.
pub async fn run_call(
    gw: &Arc<Gateway>,
    principal: Principal,
    call: ToolCall,
    hold: Hold,
    front: Front,
) -> Result<Outcome, ApiError> {
    let call_id = airlock_storage::new_id("call");
    let span = tracing::info_span!(
        "call",
        call_id = %call_id,
        tool = %call.tool,
        fingerprint = %call.fingerprint,
        principal = %principal.id,
        decision = tracing::field::Empty,
    );
    async move {
        let result = decide_and_run(gw, principal, call, call_id, hold, front).await;
        match &result {
            Ok(Outcome::Completed(c)) => {
                tracing::info!(upstream_status = c.upstream_status, "call completed")
            }
            Ok(Outcome::Pending(p)) => {
                tracing::info!(approval_id = %p.approval_id, "call pending approval")
            }
            Ok(Outcome::Suspended(_)) => tracing::info!("call suspended"),
            Err(e) => tracing::info!(code = e.code, "call refused"),
        }
        result
    }
    .instrument(span)
    .await
}

/// `tool.unknown`, naming the tools there are, nearest first.
pub fn unknown_tool(gw: &Gateway, tool: &str) -> ApiError {
    let mut known: Vec<String> = gw
        .config
        .tools_nearest(tool)
        .into_iter()
        .map(str::to_owned)
        .collect();
    known.extend(
        gw.mcp
            .tools()
            .iter()
            .filter_map(|t| t["name"].as_str().map(str::to_owned)),
    );
    ApiError::new(
        "tool.unknown",
        format!(
            "no upstream is configured for tool `{tool}`; configured tools, nearest first: {}",
            known.join(", ")
        ),
    )
    .with_details(json!({"tools": known}))
}

/// Everything after parsing, inside the call's span.
async fn decide_and_run(
    gw: &Arc<Gateway>,
    principal: Principal,
    call: ToolCall,
    call_id: String,
    hold: Hold,
    front: Front,
) -> Result<Outcome, ApiError> {
    if gw.route(&call.tool).is_none() {
        return Err(unknown_tool(gw, &call.tool));
    }

    // Decide.
    let (decision, classified) = decide_policy(gw, &call, &principal, None).await;
    let explanation = |d: &Decision, c: &BTreeMap<String, ClassifierOutcome>| {
        let mut e = explanation(d, c);
        front.tag(&mut e);
        e
    };
    tracing::Span::current().record("decision", decision.decision.as_str());
    let now = now_ms();
    let mut record = new_call_record(&call_id, &call, &principal, &decision, now);

    match decision.decision {
        DecisionKind::Deny => {
            let expl = explanation(&decision, &classified);
            gw.store_op(move |s| s.record_call(record, expl, false))
                .await?;
            gw.metrics.call("deny", "denied");
            Err(denied(&decision))
        }
        DecisionKind::Allow => {
            let expl = explanation(&decision, &classified);
            // The decision and the claim to run are durable, in one fsync, before forwarding.
            // `sync`: fsynced before it runs; `batched`: written now, fsynced within the
            // flush interval, not awaited.
            let durability = if gw.config.batched {
                Durability::Lazy
            } else {
                Durability::Durable
            };
            // Armed before the claim: the call id is new, so nobody else can own its claim.
            let guard = Unfinished::arm(gw, &call_id, "allow");
            let record = match gw
                .store_async(
                    gw.store
                        .record_call_async(record, expl, true, durability, gw.alone()),
                )
                .await
            {
                Ok(record) => record,
                Err(e) => return Err(guard.disarm(e)),
            };
            run_claimed(gw, record, None, guard).await
        }
        DecisionKind::RequireApproval => {
            let Some(settings) = decision.approval.clone() else {
                return Err(ApiError::new(
                    "internal",
                    "an approval decision without approval settings",
                ));
            };
            let key = scope_key(settings.grant.scope, &call_id, &call, &principal);
            // A grant for this fingerprint and scope? Spend one use and run at once.
            let fp = call.fingerprint.to_string();
            let probe_key = key.clone();
            let has_grant = gw
                .store_op(move |s| s.grant(&fp, &probe_key))
                .await?
                .is_some();
            if has_grant {
                record.status = CallStatus::Allowed;
                let expl = explanation(&decision, &classified);
                let (k, r) = (key.clone(), record.clone());
                let guard = Unfinished::arm(gw, &call_id, "require_approval");
                match gw
                    .store_op(move |s| s.call_with_grant(r, &k, expl, true))
                    .await
                {
                    Ok(Some(record)) => return run_claimed(gw, record, None, guard).await,
                    Ok(None) => guard.disarm(()),
                    Err(e) => return Err(guard.disarm(e)),
                }
                record.status = CallStatus::PendingApproval;
            }
            // An identical call of this principal in this run already waits for an approval
            // (or has one and has not run): join it instead of opening another (DESIGN §10).
            let attach_key = attach_key(&principal.id, call.fingerprint.as_str(), call.run_id());
            if let Some(existing) = gw.attached(&attach_key) {
                let id = existing.clone();
                let found = gw.store_op(move |s| s.call(&id)).await?;
                if let Some(c) = found.filter(|c| {
                    matches!(c.status, CallStatus::PendingApproval | CallStatus::Approved)
                }) {
                    tracing::info!(attached_to = %c.call_id, "an identical call joins its pending approval");
                    let fields = audit_fields(json!({
                        "call_id": c.call_id, "approval_id": c.approval_id,
                        "principal": principal.id, "fingerprint": c.fingerprint,
                    }));
                    let now = now_ms();
                    gw.store_op(move |s| s.append_audit("call.attached", fields, now))
                        .await?;
                    let wait = match hold {
                        Hold::Async => Duration::ZERO,
                        Hold::Wait(d) => d,
                    };
                    return call_outcome(gw, &principal, &c.call_id, wait, false).await;
                }
                gw.detach(&attach_key, &existing);
            }
            // No usable grant: hold the call for approval.
            let permit = match hold {
                Hold::Wait(d) if !d.is_zero() => {
                    Some(gw.held.try_acquire().map_err(|_| too_many_held())?)
                }
                _ => None,
            };
            let approval = Approval {
                id: airlock_storage::new_id("apr"),
                call_id: call_id.clone(),
                tool: call.tool.clone(),
                args: call.args.clone(),
                fingerprint: call.fingerprint.to_string(),
                requester: principal.clone(),
                context: call.context.clone(),
                policy_version: decision.policy_version.clone(),
                explanation: Value::Object(explanation(&decision, &classified)),
                rules: decision.rules.clone(),
                approvers: settings.approvers.clone(),
                quorum: settings.quorum,
                status: ApprovalStatus::Pending,
                decisions: vec![],
                created_at: now,
                expires_at: now + settings.approval_ttl.as_millis() as u64,
                grant: GrantTerms {
                    uses: settings.grant.uses,
                    ttl_ms: settings.grant.ttl.as_millis() as u64,
                    scope: format!("{:?}", settings.grant.scope).to_lowercase(),
                    scope_key: key,
                },
                edited_args: None,
                edited_fingerprint: None,
                decided_at: None,
            };
            let expl = explanation(&decision, &classified);
            // The principal's `max_pending` is checked and counted in one step; grants above
            // were not affected by it.
            if let Err(refusal) = gw.approval_opening(&principal.id) {
                drop(permit);
                return Err(gw
                    .principal_refused(&principal.id, "principal.too_many_pending", refusal)
                    .await);
            }
            // The approval and its webhook notifications are durable together.
            let event = gw.approval_event(&approval);
            let deliveries = gw.webhooks.deliveries_for("approval.requested", &event);
            let notify_webhooks = !deliveries.is_empty();
            let requester = principal.id.clone();
            let approval = match gw
                .store_op(move |s| s.create_approval_notifying(record, approval, expl, deliveries))
                .await
            {
                Ok(a) => a,
                Err(e) => {
                    gw.approval_closed(&requester);
                    return Err(e);
                }
            };
            gw.attach(attach_key, &call_id);
            let _ = gw.events.send(crate::state::Event {
                kind: "approval.requested",
                data: event,
            });
            if notify_webhooks {
                gw.webhooks.wake.notify_one();
            }
            match hold {
                Hold::Async => Ok(Outcome::Pending(Pending::of(&approval))),
                Hold::Wait(d) => {
                    let _permit = permit;
                    call_outcome_after_wait(gw, &call_id, d).await
                }
            }
        }
    }
}

/// `GET /v1/calls/{id}?wait=N` and `POST /v1/calls/{id}/resume`: the call's outcome, running an
/// approved call at most once. Only the requester (or an admin) sees a call.
pub async fn call_outcome(
    gw: &Arc<Gateway>,
    principal: &Principal,
    call_id: &str,
    wait: Duration,
    resume: bool,
) -> Result<Outcome, ApiError> {
    let id = call_id.to_owned();
    let call = gw.store_op(move |s| s.call(&id)).await?;
    match call {
        Some(c) if c.requester.id == principal.id || principal.is_admin() => {}
        // Another principal's call is reported as missing, not as forbidden.
        _ => return Err(call_not_found(call_id)),
    }
    if !wait.is_zero() || resume {
        tracing::info!(call_id, by = %principal.id, resume, "call outcome requested");
    }
    // A request that waits is a held request, counted against `max_held` like any other.
    let _permit = if wait.is_zero() {
        None
    } else {
        Some(gw.held.try_acquire().map_err(|_| too_many_held())?)
    };
    call_outcome_after_wait(gw, call_id, wait).await
}

async fn call_outcome_after_wait(
    gw: &Arc<Gateway>,
    call_id: &str,
    wait: Duration,
) -> Result<Outcome, ApiError> {
    let call = wait_for_decision(gw, call_id, wait).await?;
    respond(gw, call).await
}

/// Waits up to `wait` while the call is pending approval, woken by the hold registry (never by
/// polling). Shutdown ends the wait with `503 gateway.shutting_down`.
async fn wait_for_decision(
    gw: &Arc<Gateway>,
    call_id: &str,
    wait: Duration,
) -> Result<CallRecord, ApiError> {
    wait_while(gw, call_id, wait, |s| s == CallStatus::PendingApproval).await
}

/// Waits up to `wait` while `waiting` holds for the call's status, re-reading it each time the
/// hold registry says it changed (never by polling). Shutdown ends the wait with `503
/// gateway.shutting_down`; the call itself is untouched.
pub(crate) async fn wait_while(
    gw: &Arc<Gateway>,
    call_id: &str,
    wait: Duration,
    waiting: impl Fn(CallStatus) -> bool,
) -> Result<CallRecord, ApiError> {
    let deadline = TokioInstant::now() + wait;
    // Released however the wait ends: answered, or dropped because the client went away or
    // cancelled.
    let held = Held::new(gw, call_id);
    let notify = held.notify.clone();
    async {
        loop {
            let notified = notify.notified();
            tokio::pin!(notified);
            // Register before reading the state, so a change in between is not missed.
            notified.as_mut().enable();
            let id = call_id.to_owned();
            let call = gw
                .store_op(move |s| s.call(&id))
                .await?
                .ok_or_else(|| ApiError::new("call.not_found", "the call is gone"))?;
            if !waiting(call.status) || TokioInstant::now() >= deadline {
                return Ok(call);
            }
            tokio::select! {
                _ = &mut notified => {}
                _ = tokio::time::sleep_until(deadline) => {}
                _ = gw.shutdown.cancelled() => {
                    return Err(ApiError::new(
                        "gateway.shutting_down",
                        format!("the gateway is shutting down; the call persists: resume call `{call_id}` later"),
                    )
                    .with_details(json!({"call_id": call_id}))
                    .retry_after(5));
                }
            }
        }
    }
    .await
}

/// A request held on a call: counted in `airlock_held_requests` and registered for wake-ups
/// until it is dropped.
struct Held {
    gw: Arc<Gateway>,
    call_id: String,
    notify: Arc<tokio::sync::Notify>,
}

impl Held {
    fn new(gw: &Arc<Gateway>, call_id: &str) -> Held {
        gw.metrics.held_requests.inc();
        Held {
            gw: gw.clone(),
            call_id: call_id.to_owned(),
            notify: gw.holds.watch(call_id),
        }
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        self.gw.metrics.held_requests.dec();
        let notify = std::mem::replace(&mut self.notify, Arc::new(tokio::sync::Notify::new()));
        self.gw.holds.release(&self.call_id, notify);
    }
}

/// Answers for a call in whatever state it is in, executing it when it may run.
async fn respond(gw: &Arc<Gateway>, call: CallRecord) -> Result<Outcome, ApiError> {
    match call.status {
        CallStatus::Allowed | CallStatus::Approved => execute(gw, call).await,
        CallStatus::Executing => Err(ApiError::new(
            "call.in_progress",
            "the call is executing; ask again for its outcome",
        )
        .retry_after(1)),
        CallStatus::Completed | CallStatus::Failed => finished(&call),
        CallStatus::PendingApproval => {
            let id = call.approval_id.clone().unwrap_or_default();
            let approval = gw.store_op(move |s| s.approval(&id)).await?;
            match approval {
                Some(a) => Ok(Outcome::Pending(Pending::of(&a))),
                None => Err(ApiError::new(
                    "approval.not_found",
                    "the call's approval is missing",
                )),
            }
        }
        CallStatus::Denied => Err(ApiError::new(
            "policy.denied",
            "the call was denied by policy",
        )),
        CallStatus::Declined => Err(declined(&call)),
        CallStatus::Suspended => match Suspended::of(&call) {
            Some(v) => Ok(Outcome::Suspended(v)),
            None => Err(ApiError::new(
                "store.corrupt",
                "a suspended call without its suspension",
            )),
        },
        CallStatus::Expired if call.suspension.is_some() => Err(ApiError::new(
            "call.expired",
            "nobody resumed the suspended call in time; it has ended",
        )
        .with_details(json!({"call_id": call.call_id}))),
        CallStatus::Expired => Err(ApiError::new(
            "approval.expired",
            "nobody approved the call in time; it is denied",
        )),
        CallStatus::Cancelled => Err(ApiError::new("call.cancelled", "the call was cancelled")),
    }
}

/// `POST /v1/calls/{id}/cancel` and a declined input request over MCP: cancels a call that
/// has not started executing (or is suspended), for its requester or an admin.
pub async fn cancel(
    gw: &Arc<Gateway>,
    principal: &Principal,
    call_id: &str,
) -> Result<CallRecord, ApiError> {
    let owned = call_id.to_owned();
    let found = gw.store_op(move |s| s.call(&owned)).await?;
    // Another principal's call is reported as missing, not as forbidden.
    if !found.is_some_and(|c| c.requester.id == principal.id || principal.is_admin()) {
        return Err(call_not_found(call_id));
    }
    let (id, by, now) = (call_id.to_owned(), principal.clone(), now_ms());
    let call = gw.store_op(move |s| s.cancel(&id, &by, now)).await?;
    if call.approval_id.is_some() && call.suspension.is_none() {
        gw.approval_closed(&call.requester.id);
    }
    gw.mcp.drop_live(&call.call_id);
    gw.metrics.call(&call.decision, "cancelled");
    tracing::info!(call_id = %call.call_id, by = %principal.id, "call cancelled");
    Ok(call)
}

/// `call.not_found`, saying so when the id is an approval's (they look alike otherwise).
pub fn call_not_found(id: &str) -> ApiError {
    let message = if id.starts_with("apr_") {
        format!(
            "`{id}` is an approval id, not a call id: the approval's `call_id` \
             (GET /v1/approvals/{id}, or `airlock approvals show {id}`) names its call"
        )
    } else {
        format!("no call `{id}`")
    };
    ApiError::new("call.not_found", message)
}

fn too_many_held() -> ApiError {
    ApiError::new(
        "gateway.too_many_held",
        "too many calls are held waiting for a decision; retry, or send `Prefer: respond-async`",
    )
    .retry_after(1)
}

fn denied(d: &Decision) -> ApiError {
    let message = if d.messages.is_empty() {
        "denied by policy".to_owned()
    } else {
        d.messages
            .iter()
            .map(|m| m.message.as_str())
            .collect::<Vec<_>>()
            .join("; ")
    };
    ApiError::new("policy.denied", message).with_details(json!({
        "rules": d.rules, "messages": d.messages, "errors": d.errors, "policy_version": d.policy_version,
    }))
}

fn declined(call: &CallRecord) -> ApiError {
    let reason = call.reason.clone().unwrap_or_default();
    ApiError::new(
        "approval.declined",
        format!("declined by an approver: {reason}"),
    )
    .with_details(json!({
        "reason": reason, "call_id": call.call_id, "approval_id": call.approval_id,
    }))
}

/// Claims the call (at most once), forwards the canonical args, records the outcome.
async fn execute(gw: &Arc<Gateway>, call: CallRecord) -> Result<Outcome, ApiError> {
    let id = call.call_id.clone();
    let now = now_ms();
    let begun = claim(
        gw,
        move |s| s.begin_execution(&id, now),
        |begun| match begun {
            Begin::Run(call) => Some(call),
            _ => None,
        },
    )
    .await?;
    let call = match begun {
        Begin::Run(call) => call,
        Begin::InProgress(_) => {
            return Err(ApiError::new(
                "call.in_progress",
                "the call is executing; ask again for its outcome",
            )
            .retry_after(1))
        }
        Begin::Pending(call) | Begin::Finished(call) => return Box::pin(respond(gw, call)).await,
    };
    let guard = Unfinished::arm(gw, &call.call_id, &call.decision);
    run_claimed(gw, call, None, guard).await
}

/// A claimed call's outcome, written if the request is dropped before it is: the client went
/// away or cancelled (an MCP `notifications/cancelled`) while the backend was being called.
/// The request to the backend is dropped with it, so whether the call ran is unknown: it is
/// recorded `call.interrupted` at once, as a crash would be at the next start, and never
/// left `executing`. Disarmed once the outcome is written.
pub(crate) struct Unfinished {
    gw: Arc<Gateway>,
    /// The call, while its outcome is still to be written.
    call_id: Option<String>,
    decision: String,
}

impl Unfinished {
    pub(crate) fn arm(gw: &Arc<Gateway>, call_id: &str, decision: &str) -> Unfinished {
        Unfinished {
            gw: gw.clone(),
            call_id: Some(call_id.to_owned()),
            decision: decision.to_owned(),
        }
    }

    /// The outcome is written (or the call was never claimed): nothing to do when dropped.
    /// Returns `pass` so an error can go through it.
    pub(crate) fn disarm<T>(mut self, pass: T) -> T {
        self.call_id = None;
        pass
    }
}

impl Drop for Unfinished {
    fn drop(&mut self) {
        let Some(call_id) = self.call_id.take() else {
            return;
        };
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let (gw, decision) = (self.gw.clone(), std::mem::take(&mut self.decision));
        runtime.spawn(async move {
            let outcome = CallOutcome {
                upstream_status: None,
                result: None,
                error: Some("call.interrupted".into()),
                message: Some(
                    "the client went away or cancelled while the backend was being called; \
                     the request to it was dropped, so whether the call ran is unknown"
                        .into(),
                ),
            };
            match record_outcome(&gw, &call_id, None, &decision, outcome).await {
                Ok(_) => tracing::warn!(
                    call_id,
                    "the client left a running call: recorded call.interrupted"
                ),
                // Not claimed after all (the claim itself failed): nothing was left running.
                Err(e) => tracing::debug!(call_id, code = e.code, "no unfinished call to record"),
            }
        });
    }
}

/// Runs a store operation that may claim a call (`claimed` finds it in the result), so that a
/// claim made after the request went away is not left executing: the operation finishes in a
/// task of its own, and a claim nobody is left to run is recorded `call.interrupted` at once,
/// as the request's [`Unfinished`] guard would have done.
pub(crate) async fn claim<T, F>(
    gw: &Arc<Gateway>,
    op: F,
    claimed: fn(&T) -> Option<&CallRecord>,
) -> Result<T, ApiError>
where
    T: Send + 'static,
    F: FnOnce(&airlock_storage::Store) -> Result<T, airlock_storage::StoreError> + Send + 'static,
{
    let (tx, rx) = tokio::sync::oneshot::channel();
    let owner = gw.clone();
    tokio::spawn(async move {
        let result = owner.store_op(op).await;
        if let Err(Ok(unheard)) = tx.send(result) {
            if let Some(call) = claimed(&unheard) {
                // Dropped at once: it records the outcome.
                drop(Unfinished::arm(&owner, &call.call_id, &call.decision));
            }
        }
    });
    rx.await
        .map_err(|_| ApiError::new("internal", "the store task ended without an answer"))?
}

/// Writes a claimed call's outcome (not awaited for an fsync: a crash before it leaves the call
/// `call.interrupted`, its claim was durable, never re-run), counts it and tells listeners;
/// whoever waits on the call wakes from the store's notice of the change. `claimed` is the
/// record this request's claim stored, when it has it (the store then does not read it
/// back); else the call is read by `call_id`.
async fn record_outcome(
    gw: &Arc<Gateway>,
    call_id: &str,
    claimed: Option<CallRecord>,
    decision: &str,
    outcome: CallOutcome,
) -> Result<CallRecord, ApiError> {
    let failed = outcome.error.is_some();
    let now = now_ms();
    let record = match claimed {
        Some(call) => {
            gw.store_async(gw.store.complete_claimed_async(
                call,
                outcome,
                now,
                Durability::Lazy,
                gw.alone(),
            ))
            .await?
        }
        None => {
            gw.store_async(
                gw.store
                    .complete_call_async(call_id, outcome, now, Durability::Lazy),
            )
            .await?
        }
    };
    gw.metrics
        .call(decision, if failed { "failed" } else { "completed" });
    // Told in the background: the agent's answer does not wait for the notification. Nobody
    // listening (no event stream open, no webhook subscribed): nothing to build or send.
    if gw.events.receiver_count() > 0 || gw.webhooks.wants("call.completed") {
        let event = crate::approvals::call_completed_event(&record);
        let announcer = gw.clone();
        tokio::spawn(async move { announcer.announce("call.completed", event).await });
    }
    Ok(record)
}

/// Forwards a call this request has claimed (it is `executing`), records the outcome, answers.
/// `resume` carries the resume data of a suspended call being resumed; `guard` records the
/// outcome if this request is dropped before it does.
async fn run_claimed(
    gw: &Arc<Gateway>,
    call: CallRecord,
    resume: Option<&Value>,
    guard: Unfinished,
) -> Result<Outcome, ApiError> {
    let decision = call.decision.clone();
    let canonical = airlock_policy::canonicalize(&call.args);
    // INVARIANT: what runs is what was approved. The bytes sent are re-fingerprinted and must
    // match the call's fingerprint; if they ever did not, nothing is sent.
    let fp = airlock_policy::fingerprint_canonical(&call.tool, canonical.as_bytes());
    let answer = if fp.as_str() != call.fingerprint {
        Err(ApiError::new(
            "call.fingerprint_mismatch",
            "the args to send do not match the approved fingerprint; nothing was sent",
        ))
    } else {
        forward(gw, &call, &canonical, resume).await
    };
    let answer = match answer {
        Ok(Answer::Suspend(s)) => match suspend::check_schema(&s.resume_schema) {
            Ok(()) => return guard.disarm(suspend::suspend(gw, &call, s)).await,
            Err(why) => {
                // Not suspended: an upstream request kept open for it is abandoned.
                gw.mcp.drop_live(&call.call_id);
                Err(ApiError::new(
                    "upstream.invalid_suspend",
                    format!("the upstream suspended the call with a resume schema that is not valid JSON Schema 2020-12: {why}"),
                ))
            }
        },
        Ok(Answer::Result(status, body)) => Ok((status, body)),
        Err(e) => Err(e),
    };
    let stored = match &answer {
        Ok((status, body)) => CallOutcome {
            upstream_status: *status,
            result: Some(body.clone()),
            error: None,
            message: None,
        },
        Err(e) => CallOutcome {
            upstream_status: None,
            result: None,
            error: Some(e.code.to_owned()),
            message: Some(e.message.clone()),
        },
    };
    // Disarmed whatever the write did: a failed write is not retried as an interruption.
    let call_id = call.call_id.clone();
    let written = record_outcome(gw, &call_id, Some(call), &decision, stored).await;
    let record = guard.disarm(written)?;
    finished(&record)
}

/// What an upstream answered a forwarded call.
pub enum Answer {
    /// Its answer: the HTTP status (none for MCP) and body.
    Result(Option<u16>, Value),
    /// It asked to suspend the call.
    Suspend(airlock_storage::Suspend),
}

/// Sends the call's canonical args (and resume data) to its upstream.
async fn forward(
    gw: &Arc<Gateway>,
    call: &CallRecord,
    canonical: &str,
    resume: Option<&Value>,
) -> Result<Answer, ApiError> {
    let ttl_ms = gw.config.suspend_ttl.as_millis() as u64;
    match gw.route(&call.tool) {
        None => Err(unknown_tool(gw, &call.tool)),
        Some(Route::Mcp(tool)) => {
            let start = Instant::now();
            let notify = UPSTREAM_NOTIFICATIONS.try_with(Clone::clone).ok();
            let r = match resume {
                None => gw.mcp.call_tool(&tool, canonical, Map::new(), notify).await,
                Some(data) => suspend::resume_mcp(gw, &tool, call, canonical, data, notify).await,
            };
            gw.metrics
                .upstream_seconds
                .with_label_values(&[tool.server.config.name.as_str()])
                .observe(start.elapsed().as_secs_f64());
            // An MCP upstream has no HTTP status: its result says `isError` itself.
            r.and_then(|answer| suspend::mcp_answer(gw, call, answer, ttl_ms))
        }
        Some(Route::Http(route)) => {
            let headers = CallHeaders {
                call_id: &call.call_id,
                fingerprint: &call.fingerprint,
                approval_id: call.approval_id.as_deref(),
                resume: resume.is_some(),
            };
            // A resume sends `{"args", "resume_data"}`, both canonical: the keys are in JCS
            // order, so the body is itself canonical JSON.
            let body = match resume {
                None => std::borrow::Cow::Borrowed(canonical),
                Some(data) => std::borrow::Cow::Owned(format!(
                    "{{\"args\":{canonical},\"resume_data\":{}}}",
                    airlock_policy::canonicalize(data)
                )),
            };
            let r = gw
                .upstreams
                .forward(route, &call.tool, &body, headers)
                .await;
            if let Ok((_, elapsed)) = &r {
                gw.metrics
                    .upstream_seconds
                    .with_label_values(&[route.pattern.as_str()])
                    .observe(elapsed.as_secs_f64());
            }
            let (answer, _) = r?;
            suspend::http_answer(answer, ttl_ms)
        }
    }
}

/// The answer for a call that ran: 200 with the backend's answer, or its failure.
fn finished(call: &CallRecord) -> Result<Outcome, ApiError> {
    let outcome = call.outcome.clone().unwrap_or(CallOutcome {
        upstream_status: None,
        result: None,
        error: Some("call.interrupted".into()),
        message: None,
    });
    if let Some(code) = outcome.error {
        let code = match code.as_str() {
            "upstream.timeout" => "upstream.timeout",
            "upstream.too_large" => "upstream.too_large",
            "tool.unknown" => "tool.unknown",
            "call.fingerprint_mismatch" => "call.fingerprint_mismatch",
            "call.interrupted" => "call.interrupted",
            "upstream.invalid_suspend" => "upstream.invalid_suspend",
            _ => "upstream.unavailable",
        };
        return Err(
            ApiError::new(code, outcome.message.unwrap_or_else(|| code.to_owned()))
                .with_details(json!({"call_id": call.call_id})),
        );
    }
    Ok(Outcome::Completed(Completed {
        call_id: call.call_id.clone(),
        decision: call.decision.clone(),
        fingerprint: call.fingerprint.clone(),
        upstream_status: outcome.upstream_status,
        result: outcome.result.unwrap_or(Value::Null),
        edited_args: call.edited.then(|| call.args.clone()),
    }))
}

/// An approver's verdict on one approval, with an edit checked by policy first; tells the
/// event stream. The held call wakes from the store's notice of the call it changed.
pub async fn decide(
    gw: &Arc<Gateway>,
    approval_id: &str,
    by: &Principal,
    approve: bool,
    reason: Option<String>,
    edited_args: Option<Value>,
) -> Result<Approval, ApiError> {
    let verdict = if approve {
        let edit = match edited_args {
            None => None,
            Some(args) => {
                let id = approval_id.to_owned();
                let a = gw
                    .store_op(move |s| s.approval(&id))
                    .await?
                    .ok_or_else(|| {
                        ApiError::new("approval.not_found", format!("no approval `{approval_id}`"))
                    })?;
                let edited = ToolCall::new(&a.tool, args, Some(a.context.clone()))?;
                // The edited call is evaluated as its requester's call: policy must not deny it.
                let (d, _) = decide_policy(gw, &edited, &a.requester, None).await;
                if d.decision == DecisionKind::Deny {
                    return Err(ApiError::new(
                        "approval.edit_denied",
                        "policy denies the edited call",
                    )
                    .with_details(json!({"rules": d.rules, "messages": d.messages})));
                }
                Some((edited.args, edited.fingerprint.to_string()))
            }
        };
        Verdict::Approve { reason, edit }
    } else {
        Verdict::Decline {
            reason: reason.unwrap_or_default(),
        }
    };
    let (id, who, now) = (approval_id.to_owned(), by.clone(), now_ms());
    let a = gw
        .store_op(move |s| s.decide(&id, &who, verdict, now))
        .await?;
    if a.status != ApprovalStatus::Pending {
        gw.approval_closed(&a.requester.id);
        gw.metrics
            .approval_wait_seconds
            .observe(now.saturating_sub(a.created_at) as f64 / 1000.0);
        if a.status == ApprovalStatus::Declined {
            gw.metrics.call("require_approval", "declined");
        }
    }
    tracing::info!(
        approval_id = %a.id,
        call_id = %a.call_id,
        tool = %a.tool,
        by = %by.id,
        decision = if approve { "approve" } else { "decline" },
        status = a.status.as_str(),
        "approval decided"
    );
    let event = gw.approval_event(&a);
    gw.announce("approval.decided", event).await;
    Ok(a)
}
