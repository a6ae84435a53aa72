//! The hold stage: a call that needs a person opens an approval (durable, with its webhook
//! notifications, under the requester's `max_pending`), and its request waits for the
//! decision, woken by the store's notice that the call changed (never by polling), for as
//! long as the caller asked (`Prefer`, `?wait=N`, the MCP hold). What the call's state then
//! means is [`super::claim::respond`]'s. Also here: cancelling a call that waits.

use std::sync::Arc;
use std::time::Duration;

use airlock_policy::ApprovalSettings;
use airlock_storage::{Approval, ApprovalStatus, CallRecord, CallStatus, GrantTerms, Principal};
use serde_json::{json, Map, Value};
use tokio::time::Instant as TokioInstant;

use super::admit::principal_refused;
use super::claim::respond;
use super::decide::Decided;
use super::outcome::call_not_found;
use super::{Hold, Outcome, Pending};
use crate::clock::now_ms;
use crate::error::{ApiError, Code};
use crate::state::{attach_key, Gateway};

/// Opens an approval for a decided call (no grant, nothing to join) and holds the request
/// for the decision as `hold` says.
/// The pending approval a decided call opens, with the rule's settings.
fn approval_of(
    d: &Decided,
    settings: &ApprovalSettings,
    scope_key: String,
    expl: &Map<String, Value>,
) -> Approval {
    let (call, principal, now) = (&d.call, &d.principal, d.now);
    Approval {
        kind: airlock_storage::ApprovalKind::Call,
        id: airlock_storage::new_id("apr"),
        call_id: d.call_id.clone(),
        tool: call.tool.clone(),
        request: call.request.clone(),
        args: call.args.clone(),
        fingerprint: call.fingerprint.to_string(),
        requester: principal.clone(),
        context: call.context.clone(),
        policy_version: d.decision.policy_version.clone(),
        explanation: Value::Object(expl.clone()),
        rules: d.decision.rules.clone(),
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
            scope_key,
            max: Some(crate::grants::maxima(&settings.grant)),
        },
        edited_args: None,
        edited_fingerprint: None,
        decided_at: None,
    }
}

pub(super) async fn open(
    gw: &Arc<Gateway>,
    d: Decided,
    settings: ApprovalSettings,
    scope_key: String,
    hold: Hold,
) -> Result<Outcome, ApiError> {
    let (call, principal) = (&d.call, &d.principal);
    let permit = match hold {
        Hold::Wait(w) if !w.is_zero() => Some(held(gw, principal).await?),
        _ => None,
    };
    let expl = d.explanation();
    let mut approval = approval_of(&d, &settings, scope_key, &expl);
    // The principal's `max_pending` is checked and counted in one step; grants were not
    // affected by it. At the limit, the count is read again from the store before refusing:
    // on several gateways, one that missed another's news of an approval closed must not
    // refuse on a count that is too high.
    if let Err(first) = gw.approval_opening(&principal.id) {
        let filter = airlock_storage::ApprovalFilter {
            status: Some(ApprovalStatus::Pending),
            principal: Some(principal.id.clone()),
            ..Default::default()
        };
        let open = gw
            .store_op(move |s| s.list_approvals(&filter, None, 100_000))
            .await
            .map(|(list, _)| {
                list.iter()
                    .filter(|a| a.kind == airlock_storage::ApprovalKind::Call)
                    .count()
            });
        if let Ok(n) = open {
            gw.limits.resync_pending(&principal.id, n);
        }
        if let Err(again) = gw.approval_opening(&principal.id) {
            drop(permit);
            // The burst started with the first refusal: audited once, as every other limit.
            let refusal = crate::limits::Refusal {
                first_of_burst: first.first_of_burst,
                ..again
            };
            return Err(
                principal_refused(gw, principal, Code::PrincipalTooManyPending, refusal).await,
            );
        }
    }
    // Beyond ten a minute, a principal's approvals are notified as one summary a minute
    // (`crate::notices`); the approval says so, so its later updates post nothing either.
    let now = now_ms();
    let one_by_one = gw.notices.admit(&principal.id, now);
    if !one_by_one {
        approval.explanation["notified"] = Value::from("summary");
    }
    // The approval and its notifications (webhooks, mail) are durable together.
    let event = gw.approval_event(&approval);
    let deliveries = if one_by_one {
        gw.outbound(airlock_storage::Kind::ApprovalRequested, &event)
    } else {
        Vec::new()
    };
    let notify_webhooks = !deliveries.is_empty();
    let record = d.record();
    let approval = match gw
        .store_op(move |s| s.create_approval_notifying(record, approval, expl, deliveries))
        .await
    {
        Ok(a) => a,
        Err(e) => {
            gw.approval_closed(&principal.id);
            return Err(e);
        }
    };
    if !one_by_one {
        let groups: Vec<String> = approval.approvers.iter().cloned().collect();
        gw.notices
            .held_back(&principal.id, &approval.id, &groups, now);
    }
    gw.deadlines.notify_one();
    gw.attach(
        attach_key(&principal.id, call.fingerprint.as_str(), call.run_id()),
        &d.call_id,
    );
    let _ = gw.events.send(crate::events::Event {
        kind: airlock_storage::Kind::ApprovalRequested,
        data: event,
    });
    if notify_webhooks {
        gw.webhooks.wake.notify_one();
    }
    match hold {
        Hold::Async => Ok(Outcome::Pending(Pending::of(&approval))),
        Hold::Wait(w) => {
            let _permit = permit;
            call_outcome_after_wait(gw, &d.call_id, w).await
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
        Some(held(gw, principal).await?)
    };
    call_outcome_after_wait(gw, call_id, wait).await
}

pub(super) async fn call_outcome_after_wait(
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
                .ok_or_else(|| ApiError::new(Code::CallNotFound, "the call is gone"))?;
            if !waiting(call.status) || TokioInstant::now() >= deadline {
                return Ok(call);
            }
            tokio::select! {
                _ = &mut notified => {}
                _ = tokio::time::sleep_until(deadline) => {}
                _ = gw.shutdown.cancelled() => {
                    return Err(ApiError::new(
                        Code::GatewayShuttingDown,
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
        gw.metrics.approvals.held_requests.inc();
        Held {
            gw: gw.clone(),
            call_id: call_id.to_owned(),
            notify: gw.holds.watch(call_id),
        }
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        self.gw.metrics.approvals.held_requests.dec();
        let notify = std::mem::replace(&mut self.notify, Arc::new(tokio::sync::Notify::new()));
        self.gw.holds.release(&self.call_id, notify);
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
    if let (Some(approval_id), None) = (&call.approval_id, &call.suspension) {
        gw.approval_closed(&call.requester.id);
        slack_cancelled(gw, approval_id).await;
    }
    gw.backends.abandon(&call.call_id);
    gw.metrics.call(&call.decision, "cancelled");
    tracing::info!(call_id = %call.call_id, by = %principal.id, "call cancelled");
    Ok(call)
}

/// A cancelled call's approval (no event announces it): its Slack messages updated, through
/// the outbox.
async fn slack_cancelled(gw: &Arc<Gateway>, approval_id: &str) {
    let Some(slack) = &gw.config.slack else {
        return;
    };
    let id = approval_id.to_owned();
    let Ok(Some(a)) = gw.store_op(move |s| s.approval(&id)).await else {
        return;
    };
    let data = serde_json::json!({"id": a.id, "approvers": a.approvers});
    let deliveries = crate::outbox::slack(slack, airlock_storage::Kind::ApprovalDecided, &data);
    let now = now_ms();
    match gw
        .store_op(move |s| s.enqueue_deliveries(deliveries, now))
        .await
    {
        Ok(_) => gw.webhooks.wake.notify_one(),
        Err(e) => tracing::error!(
            code = e.code.as_str(),
            "cannot queue the Slack update of a cancelled approval: {}",
            e.message
        ),
    }
}

/// A place for one held request: the principal's share first (`429
/// principal.too_many_held`, audited once per burst), then the gateway's (`429
/// gateway.too_many_held`), so one agent cannot take every place. Both are given back when
/// it is dropped.
pub(crate) struct HeldPlace<'a> {
    _global: tokio::sync::SemaphorePermit<'a>,
    gw: &'a Gateway,
    principal: String,
}

impl Drop for HeldPlace<'_> {
    fn drop(&mut self) {
        self.gw.limits.release_held(&self.principal);
    }
}

pub(crate) async fn held<'a>(
    gw: &'a Arc<Gateway>,
    principal: &Principal,
) -> Result<HeldPlace<'a>, ApiError> {
    if let Err(refusal) = gw.limits.hold(&principal.id) {
        return Err(principal_refused(gw, principal, Code::PrincipalTooManyHeld, refusal).await);
    }
    match gw.held.try_acquire() {
        Ok(permit) => Ok(HeldPlace {
            _global: permit,
            gw,
            principal: principal.id.clone(),
        }),
        Err(_) => {
            gw.limits.release_held(&principal.id);
            Err(too_many_held())
        }
    }
}

pub(super) fn too_many_held() -> ApiError {
    ApiError::new(
        Code::GatewayTooManyHeld,
        "too many calls are held waiting for a decision; retry, or send `Prefer: respond-async`",
    )
    .retry_after(1)
}
