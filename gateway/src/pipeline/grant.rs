//! The grant stage, for a call that requires approval, before anyone is asked (DESIGN §5,
//! §10): a grant for its fingerprint and scope spends one use and lets the call run at once
//! ([`spend`]); else an identical call of the same principal and run that already waits joins
//! that approval ([`join`]). Neither opens an approval; [`super::hold`] does.

use std::sync::Arc;

use airlock_policy::{GrantScope, GrantSettings, ToolCall};
use airlock_storage::{CallRecord, CallStatus, Kind, Principal};
use serde_json::json;

use super::decide::Decided;
use super::outcome::Unfinished;
use crate::clock::now_ms;
use crate::error::ApiError;
use crate::state::{attach_key, audit_fields, Gateway};

/// The key a grant binds to (DESIGN §5; the store's [`airlock_storage::scope_key`]).
pub(crate) fn scope_key(
    scope: GrantScope,
    call_id: &str,
    call: &ToolCall,
    principal: &Principal,
) -> String {
    airlock_storage::scope_key(
        crate::grants::scope_name(scope),
        call_id,
        call.run_id(),
        &principal.id,
    )
}

/// The scope keys a grant for this call may be kept under: the rule's scope and every wider
/// one up to its `max_scope` (an approver may have chosen one), narrowest first. A `call` key
/// names the call itself, which no grant can exist for yet, so it is left out.
pub(super) fn keys_to_try(
    grant: &GrantSettings,
    call_id: &str,
    call: &ToolCall,
    principal: &Principal,
) -> Vec<String> {
    let mut keys: Vec<String> = [GrantScope::Call, GrantScope::Run, GrantScope::Principal]
        .into_iter()
        .filter(|s| *s >= grant.scope && *s <= grant.max_scope)
        .map(|s| scope_key(s, call_id, call, principal))
        .filter(|k| !k.starts_with("call:"))
        .collect();
    keys.dedup();
    keys
}

/// Spends one use of a grant for this call's fingerprint and `scope_key`, if there is one
/// with uses left: the call is then recorded allowed and claimed to run, in one step, and
/// returned with the guard that records it interrupted if this request is dropped.
pub(super) async fn spend(
    gw: &Arc<Gateway>,
    d: &Decided,
    scope_key: &str,
) -> Result<Option<(CallRecord, Unfinished)>, ApiError> {
    let (fp, probe_key) = (d.call.fingerprint.to_string(), scope_key.to_owned());
    let has_grant = gw
        .store_op(move |s| s.grant(&fp, &probe_key))
        .await?
        .is_some();
    if !has_grant {
        return Ok(None);
    }
    let mut record = d.record();
    record.status = CallStatus::Allowed;
    let (k, expl) = (scope_key.to_owned(), d.explanation());
    let guard = Unfinished::arm(gw, &d.call_id, "require_approval");
    match gw
        .store_op(move |s| s.call_with_grant(record, &k, expl, true))
        .await
    {
        Ok(Some(record)) => Ok(Some((record, guard))),
        // Spent by someone else in between: ask for approval after all.
        Ok(None) => Ok(guard.disarm(None)),
        Err(e) => Err(guard.disarm(e)),
    }
}

/// An identical call of this principal in this run that waits for an approval (or has one
/// and has not run): this call joins it, audited `call.attached`, and its id is returned. A
/// held request of another kind that was declined or expired is joined once more, so that its
/// retry hears why.
pub(super) async fn join(gw: &Arc<Gateway>, d: &Decided) -> Result<Option<String>, ApiError> {
    let key = attach_key(
        &d.principal.id,
        d.call.fingerprint.as_str(),
        d.call.run_id(),
    );
    let Some(existing) = gw.attached(&key) else {
        return Ok(None);
    };
    let id = existing.clone();
    let found = gw.store_op(move |s| s.call(&id)).await?;
    // A held request of another kind is told by its retry (no one waits on it): a decline
    // or an expiry is that retry's answer, once; the next one asks anew.
    let told_once = |c: &CallRecord| {
        c.request.is_some() && matches!(c.status, CallStatus::Declined | CallStatus::Expired)
    };
    let Some(c) = found.filter(|c| {
        matches!(c.status, CallStatus::PendingApproval | CallStatus::Approved) || told_once(c)
    }) else {
        gw.detach(&key, &existing);
        return Ok(None);
    };
    if told_once(&c) {
        gw.detach(&key, &existing);
    }
    tracing::info!(attached_to = %c.call_id, "an identical call joins its pending approval");
    let fields = audit_fields(json!({
        "call_id": c.call_id, "approval_id": c.approval_id,
        "principal": d.principal.id, "auth": d.principal.auth_record(), "fingerprint": c.fingerprint,
    }));
    let now = now_ms();
    gw.store_op(move |s| s.append_audit(Kind::CallAttached, fields, now))
        .await?;
    Ok(Some(c.call_id))
}
