//! A call's record from its decision to its end: recorded with the decision, claimed for
//! execution at most once, completed or failed, cancelled; and, at start, the calls a crash
//! left executing marked `call.interrupted`, never run again.

use serde_json::{json, Map, Value};

use crate::audit::Kind;
use crate::error::StoreError;
use crate::keys::{self, Ks, EXPIRE_APPROVAL};
use crate::model::{
    Approval, ApprovalStatus, CallEnd, CallOutcome, CallRecord, CallStatus, Millis, Principal,
};
use crate::writer::{Durability, Tx};
use crate::Store;

use super::approval_rows::set_status_index;
use super::{create_call, fields, get, load_call, put, unindex_suspended, with_run, IDX_EXECUTING};

/// What `begin_execution` found.
#[derive(Debug, Clone, PartialEq)]
pub enum Begin {
    /// The caller must execute it now, exactly once, and then call `complete_call`.
    Run(CallRecord),
    /// Someone else is executing it.
    InProgress(CallRecord),
    /// Still waiting for approval.
    Pending(CallRecord),
    /// Already finished (completed, failed, denied, declined, expired or cancelled).
    Finished(CallRecord),
}

/// Stores how an executing call ended (see [`Store::complete_call`]).
fn complete_job(
    call_id: String,
    outcome: CallOutcome,
    now: Millis,
) -> impl FnOnce(&mut Tx<'_>) -> Result<CallRecord, StoreError> + Send + 'static {
    move |tx| {
        let call =
            load_call(tx, &call_id)?.ok_or_else(|| StoreError::CallNotFound(call_id.clone()))?;
        if call.status != CallStatus::Executing {
            return Err(StoreError::CallState(call.status.as_str(), "complete"));
        }
        end_call(tx, call, outcome, now)
    }
}

/// Writes how an executing call ended: its status and outcome (apart from its record, which
/// is left as it ran: see [`Ks::CallEnds`]), its audit record; drops its executing-index
/// entry. Returns the record as it now reads.
fn end_call(
    tx: &mut Tx<'_>,
    mut call: CallRecord,
    outcome: CallOutcome,
    now: Millis,
) -> Result<CallRecord, StoreError> {
    call.status = if outcome.error.is_none() {
        CallStatus::Completed
    } else {
        CallStatus::Failed
    };
    let kind = if call.status == CallStatus::Completed {
        Kind::CallCompleted
    } else {
        Kind::CallFailed
    };
    let mut f = fields(json!({
        "call_id": call.call_id,
        "tool": call.tool,
        "fingerprint": call.fingerprint,
        "upstream_status": outcome.upstream_status,
        "error": outcome.error,
    }));
    if let Some(r) = &call.request {
        f.extend(super::request_fields(r));
    }
    tx.audit(now, kind, with_run(f, &call));
    tx.delete(
        Ks::ApprovalIndex,
        keys::index_key(IDX_EXECUTING, "", &call.call_id),
    );
    let end = CallEnd {
        status: call.status,
        outcome,
        updated_at: now,
    };
    put(tx, Ks::CallEnds, call.call_id.as_bytes(), &end)?;
    call.outcome = Some(end.outcome);
    call.updated_at = now;
    Ok(call)
}

/// Marks a call executing (what a crash leaves `call.interrupted`), without an audit record of
/// its own: for a claim recorded in the decision's record (`"started": true`).
pub(super) fn mark_executing(tx: &mut Tx<'_>, call: &mut CallRecord, now: Millis) {
    call.status = CallStatus::Executing;
    call.updated_at = now;
    // The value names the gateway that runs it: only that one recovers it.
    let owner = tx.instance().as_bytes().to_vec();
    tx.put(
        Ks::ApprovalIndex,
        keys::index_key(IDX_EXECUTING, "", &call.call_id),
        owner,
    );
}

/// Claims a call for execution, audited `call.started`.
pub(super) fn claim(tx: &mut Tx<'_>, call: &mut CallRecord, now: Millis) {
    mark_executing(tx, call, now);
    tx.audit(
        now,
        Kind::CallStarted,
        fields(
            json!({"call_id": call.call_id, "tool": call.tool, "fingerprint": call.fingerprint}),
        ),
    );
}

impl Store {
    /// Records a call decided without approval (allow or deny) with its `call.decided` audit
    /// record; `explanation` (rules, policy version, ...) is merged into the record. With
    /// `begin`, an allowed call is also claimed for execution in the same batch (one fsync).
    pub fn record_call(
        &self,
        call: CallRecord,
        explanation: Map<String, Value>,
        begin: bool,
    ) -> Result<CallRecord, StoreError> {
        self.record_call_with(call, explanation, begin, Durability::Durable)
    }

    /// [`Store::record_call`] with the durability the caller needs (`Lazy` for allowed calls in
    /// `batched` mode).
    pub fn record_call_with(
        &self,
        call: CallRecord,
        explanation: Map<String, Value>,
        begin: bool,
        durability: Durability,
    ) -> Result<CallRecord, StoreError> {
        self.writer
            .submit_with(durability, self.record_call_job(call, explanation, begin))
    }

    /// [`Store::record_call_with`] for async callers (the allow path): no thread blocks,
    /// except that a durable write of a caller `alone` (no other request in flight) may wait
    /// for its fsync on the caller's thread, where it costs least.
    pub fn record_call_async(
        &self,
        call: CallRecord,
        explanation: Map<String, Value>,
        begin: bool,
        durability: Durability,
        alone: bool,
    ) -> impl std::future::Future<Output = Result<CallRecord, StoreError>> + Send + 'static {
        self.writer.submit_async(
            durability,
            alone,
            self.record_call_job(call, explanation, begin),
        )
    }

    fn record_call_job(
        &self,
        mut call: CallRecord,
        explanation: Map<String, Value>,
        begin: bool,
    ) -> impl FnOnce(&mut Tx<'_>) -> Result<CallRecord, StoreError> + Send + 'static {
        let redact_ptrs = self.redact.clone();
        move |tx| {
            let starts = begin && call.status == CallStatus::Allowed;
            let mut f = Self::call_fields(&redact_ptrs, &call);
            f.insert("decision".into(), Value::from(call.decision.clone()));
            f.extend(explanation);
            if starts {
                // Claimed in the same batch: the decision record says so, and no separate
                // `call.started` record is written.
                f.insert("started".into(), Value::Bool(true));
            }
            tx.audit(call.created_at, Kind::CallDecided, f);
            if starts {
                let at = call.created_at;
                mark_executing(tx, &mut call, at);
            }
            create_call(tx, &call)?;
            Ok(call)
        }
    }

    /// Cancels a call that has not started executing; only its requester or an admin may.
    pub fn cancel(
        &self,
        call_id: &str,
        by: &Principal,
        now: Millis,
    ) -> Result<CallRecord, StoreError> {
        let redact_ptrs = self.redact.clone();
        let call_id = call_id.to_owned();
        let by = by.clone();
        self.writer.submit(move |tx| {
            let mut call = load_call(tx, &call_id)?
                .ok_or_else(|| StoreError::CallNotFound(call_id.clone()))?;
            if call.requester.id != by.id && !by.is_admin() {
                return Err(StoreError::Forbidden(
                    "only the requester or an admin may cancel a call".into(),
                ));
            }
            match call.status {
                CallStatus::PendingApproval | CallStatus::Approved | CallStatus::Allowed => {}
                CallStatus::Suspended => unindex_suspended(tx, &call),
                other => return Err(StoreError::CallState(other.as_str(), "be cancelled")),
            }
            if let Some(approval_id) = &call.approval_id {
                if let Some(mut a) = get::<Approval>(tx, Ks::Approvals, approval_id.as_bytes())? {
                    match a.status {
                        ApprovalStatus::Pending => {
                            a.status = ApprovalStatus::Cancelled;
                            a.decided_at = Some(now);
                            set_status_index(tx, &a, ApprovalStatus::Pending)?;
                            tx.delete(
                                Ks::Expiry,
                                keys::expiry_key(a.expires_at, EXPIRE_APPROVAL, a.id.as_bytes()),
                            );
                            put(tx, Ks::Approvals, a.id.as_bytes(), &a)?;
                        }
                        ApprovalStatus::Approved if call.status == CallStatus::Approved => {
                            // The approved call never ran: its grant goes with it.
                            let gk = keys::grant_key(a.effective_fingerprint(), &a.grant.scope_key);
                            tx.delete(Ks::Grants, gk);
                        }
                        _ => {}
                    }
                }
            }
            call.status = CallStatus::Cancelled;
            call.updated_at = now;
            let mut f = Self::call_fields(&redact_ptrs, &call);
            f.insert("by".into(), Value::from(by.id.clone()));
            f.insert("auth".into(), by.auth_record());
            f.insert("approval_id".into(), json!(call.approval_id));
            tx.audit(now, Kind::CallCancelled, f);
            put(tx, Ks::Calls, call.call_id.as_bytes(), &call)?;
            Ok(call)
        })
    }

    /// Claims a call for execution, at most once. An approved call is its grant's first use:
    /// it cannot start once the grant's ttl has run out.
    pub fn begin_execution(&self, call_id: &str, now: Millis) -> Result<Begin, StoreError> {
        let call_id = call_id.to_owned();
        self.writer.submit(move |tx| {
            let mut call = load_call(tx, &call_id)?
                .ok_or_else(|| StoreError::CallNotFound(call_id.clone()))?;
            match call.status {
                CallStatus::Allowed => {}
                CallStatus::Approved => {
                    if call.run_by.is_none_or(|deadline| now >= deadline) {
                        return Err(StoreError::GrantGone);
                    }
                }
                CallStatus::Executing => return Ok(Begin::InProgress(call)),
                CallStatus::PendingApproval => return Ok(Begin::Pending(call)),
                _ => return Ok(Begin::Finished(call)),
            }
            claim(tx, &mut call, now);
            put(tx, Ks::Calls, call.call_id.as_bytes(), &call)?;
            Ok(Begin::Run(call))
        })
    }

    /// Stores how an executing call ended: `completed` when the backend answered (any HTTP
    /// status), `failed` otherwise.
    pub fn complete_call(
        &self,
        call_id: &str,
        outcome: CallOutcome,
        now: Millis,
    ) -> Result<CallRecord, StoreError> {
        self.complete_call_with(call_id, outcome, now, Durability::Durable)
    }

    /// [`Store::complete_call`] with the durability the caller needs: the gateway writes an
    /// outcome `Lazy` (a crash before its fsync leaves the call `call.interrupted`, never
    /// re-run, because its claim to run was durable).
    pub fn complete_call_with(
        &self,
        call_id: &str,
        outcome: CallOutcome,
        now: Millis,
        durability: Durability,
    ) -> Result<CallRecord, StoreError> {
        self.writer
            .submit_with(durability, complete_job(call_id.to_owned(), outcome, now))
    }

    /// [`Store::complete_call_with`] for async callers (the allow path): no thread blocks.
    pub fn complete_call_async(
        &self,
        call_id: &str,
        outcome: CallOutcome,
        now: Millis,
        durability: Durability,
    ) -> impl std::future::Future<Output = Result<CallRecord, StoreError>> + Send + 'static {
        self.writer.submit_async(
            durability,
            false,
            complete_job(call_id.to_owned(), outcome, now),
        )
    }

    /// [`Store::complete_call_async`] for the caller that claimed the call and holds the record
    /// its claim stored: the record is not read back. While a call is executing nothing but
    /// its executor changes it (a cancel or resume refuses it, recovery is its own gateway's
    /// at start), so it is still executing exactly when its executing-index entry is there.
    pub fn complete_claimed_async(
        &self,
        claimed: CallRecord,
        outcome: CallOutcome,
        now: Millis,
        durability: Durability,
        alone: bool,
    ) -> impl std::future::Future<Output = Result<CallRecord, StoreError>> + Send + 'static {
        self.writer.submit_async(durability, alone, move |tx| {
            let executing = keys::index_key(IDX_EXECUTING, "", &claimed.call_id);
            if claimed.status != CallStatus::Executing
                || !tx.expect(
                    Ks::ApprovalIndex,
                    &executing,
                    &format!("call {} is no longer executing", claimed.call_id),
                )?
            {
                return Err(StoreError::CallState(claimed.status.as_str(), "complete"));
            }
            end_call(tx, claimed, outcome, now)
        })
    }

    /// Calls a crash left executing have an unknown outcome: they are marked failed with
    /// `call.interrupted`, never run again. Only this gateway's own (by
    /// [`crate::StoreOptions::instance`]): another gateway on the same database may be running
    /// its calls right now.
    pub(crate) fn recover(&self) -> Result<(), StoreError> {
        let prefix = keys::index_prefix(IDX_EXECUTING, "");
        let mut stuck = Vec::new();
        for entry in self.shared.backend.prefix(Ks::ApprovalIndex, &prefix) {
            let (key, owner) = entry?;
            if owner != self.shared.instance.as_bytes() {
                continue;
            }
            stuck.push(String::from_utf8_lossy(&key[prefix.len()..]).into_owned());
        }
        for call_id in stuck {
            let now = self.call(&call_id)?.map_or(0, |c| c.updated_at);
            self.complete_call(
                &call_id,
                CallOutcome {
                    upstream_status: None,
                    result: None,
                    error: Some("call.interrupted".into()),
                    message: Some(
                        "the gateway stopped while the call was executing; its outcome is unknown"
                            .into(),
                    ),
                },
                now,
            )?;
        }
        Ok(())
    }
}
