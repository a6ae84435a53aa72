//! The claim stage: a call that may run is claimed, at most once, before anything is sent
//! (`executing`, durable as DESIGN §13 says), and a claim is never left behind: a request
//! dropped after its claim records the call `call.interrupted` ([`Unfinished`]), as a crash
//! would be recorded at the next start. [`allowed`] records and claims an allowed call in one
//! write; [`execute`] claims an approved one, and [`respond`] answers for a call in
//! whatever state it is in, claiming and running it when it may run.

use std::sync::Arc;

use serde_json::json;

use airlock_storage::{Begin, CallRecord, CallStatus, Durability};

use super::decide::Decided;
use super::forward;
use super::outcome::{claim, declined, finished, Unfinished};
use super::{Outcome, Pending, Suspended};
use crate::clock::now_ms;
use crate::error::{ApiError, Code};
use crate::state::Gateway;

/// Records an allowed call and its claim to run, in one write, before forwarding: `sync`
/// fsyncs it before the call runs; `batched` writes it now and fsyncs it within the flush
/// interval, not awaited.
pub(super) async fn allowed(
    gw: &Arc<Gateway>,
    d: &Decided,
) -> Result<(CallRecord, Unfinished), ApiError> {
    let durability = if gw.config.batched {
        Durability::Lazy
    } else {
        Durability::Durable
    };
    // Armed before the claim: the call id is new, so nobody else can own its claim.
    let guard = Unfinished::arm(gw, &d.call_id, "allow");
    let (record, expl) = (d.record(), d.explanation());
    match gw
        .store_async(
            gw.store
                .record_call_async(record, expl, true, durability, gw.alone()),
        )
        .await
    {
        Ok(record) => Ok((record, guard)),
        Err(e) => Err(guard.disarm(e)),
    }
}

/// Claims the call (at most once), forwards the canonical args, records the outcome.
pub(super) async fn execute(gw: &Arc<Gateway>, call: CallRecord) -> Result<Outcome, ApiError> {
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
                Code::CallInProgress,
                "the call is executing; ask again for its outcome",
            )
            .retry_after(1))
        }
        Begin::Pending(call) | Begin::Finished(call) => return Box::pin(respond(gw, call)).await,
    };
    let guard = Unfinished::arm(gw, &call.call_id, &call.decision);
    forward::run(gw, call, None, guard).await
}

/// The refusal of a cancelled call: `grant.revoked` when its grant was revoked before it
/// ran, else `call.cancelled`.
pub(crate) fn cancelled(call: &CallRecord) -> ApiError {
    match call.code.as_deref() {
        Some("grant.revoked") => ApiError::new(
            Code::GrantRevoked,
            "the approval's grant was revoked before the call ran; it will not run",
        )
        .with_details(json!({"call_id": call.call_id, "approval_id": call.approval_id})),
        _ => ApiError::new(Code::CallCancelled, "the call was cancelled"),
    }
}

/// Answers for a call in whatever state it is in, executing it when it may run.
pub(super) async fn respond(gw: &Arc<Gateway>, call: CallRecord) -> Result<Outcome, ApiError> {
    match call.status {
        CallStatus::Allowed | CallStatus::Approved => execute(gw, call).await,
        CallStatus::Executing => Err(ApiError::new(
            Code::CallInProgress,
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
                    Code::ApprovalNotFound,
                    "the call's approval is missing",
                )),
            }
        }
        // A reason is recorded when a reloaded policy denied a call that was waiting.
        CallStatus::Denied => Err(match &call.reason {
            Some(reason) => ApiError::new(Code::PolicyDenied, reason.clone()).with_details(
                json!({"reason": reason, "call_id": call.call_id, "approval_id": call.approval_id}),
            ),
            None => ApiError::new(Code::PolicyDenied, "the call was denied by policy"),
        }),
        CallStatus::Declined => Err(declined(&call)),
        CallStatus::Suspended => match Suspended::of(&call) {
            Some(v) => Ok(Outcome::Suspended(v)),
            None => Err(ApiError::new(
                Code::StoreCorrupt,
                "a suspended call without its suspension",
            )),
        },
        CallStatus::Expired if call.suspension.is_some() => Err(ApiError::new(
            Code::CallExpired,
            "nobody resumed the suspended call in time; it has ended",
        )
        .with_details(json!({"call_id": call.call_id}))),
        CallStatus::Expired => Err(ApiError::new(
            Code::ApprovalExpired,
            "nobody approved the call in time; it is denied",
        )),
        CallStatus::Cancelled => Err(cancelled(&call)),
    }
}
