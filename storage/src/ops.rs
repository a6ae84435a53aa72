//! The state changes: each one a job for the writer that checks, writes and audits atomically.
//!
//! The approval state machine lives here: `pending` → `approved` | `declined` | `expired` |
//! `cancelled`, nothing else. So do the rules of who may decide (DESIGN §5/§6, refusals checked
//! in the order DESIGN gives), quorum over distinct approvers of the same fingerprint, grants
//! that are spent atomically and never after they expire, calls that execute at most once,
//! and the outbox's lease/ack/retry/dead-letter cycle.

use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::{json, Map, Value};

use crate::audit::{redact, Kind};
use crate::error::StoreError;
use crate::keys::{self, decode, encode, Ks, EXPIRE_APPROVAL, EXPIRE_GRANT, EXPIRE_SUSPENDED};
use crate::model::{
    Approval, ApprovalDecision, ApprovalStatus, CallEnd, CallOutcome, CallRecord, CallStatus,
    Delivery, Grant, Millis, Principal, Suspension,
};
use crate::writer::{Durability, Tx};
use crate::Store;

/// Index fields in [`Ks::ApprovalIndex`].
const IDX_ALL: u8 = b'a';
const IDX_STATUS: u8 = b's';
const IDX_TOOL: u8 = b't';
const IDX_RUN: u8 = b'r';
const IDX_PRINCIPAL: u8 = b'p';
/// Calls that are executing: what a crash leaves with an unknown outcome.
const IDX_EXECUTING: u8 = b'x';
/// Suspended calls, by run id (empty for calls without one).
pub(crate) const IDX_SUSPENDED: u8 = b'S';

/// The due time of parked deliveries (a disabled endpoint's): never, until enabled.
pub const PARKED: Millis = u64::MAX >> 1;

/// Expired approvals and grants handled per sweep, so one sweep stays short.
const SWEEP_LIMIT: usize = 1000;

/// An approver's verdict.
#[derive(Debug, Clone, PartialEq)]
pub enum Verdict {
    /// `edit` carries edited canonical args and their fingerprint, already checked by policy.
    Approve {
        reason: Option<String>,
        edit: Option<(Value, String)>,
    },
    Decline {
        reason: String,
    },
}

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

/// Filters for listing approvals; all given ones must hold.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ApprovalFilter {
    pub status: Option<ApprovalStatus>,
    pub tool: Option<String>,
    pub run_id: Option<String>,
    pub principal: Option<String>,
}

/// A delivery to put in the outbox.
#[derive(Debug, Clone, PartialEq)]
pub struct NewDelivery {
    pub webhook: String,
    pub event: String,
    pub payload: String,
}

/// What one expiry sweep ended.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Expired {
    /// Pending approvals past their ttl (their calls are `expired`).
    pub approvals: Vec<Approval>,
    /// Suspended calls past `suspend_ttl` (now `expired`).
    pub suspended: Vec<CallRecord>,
}

/// A new suspension, as the upstream asked for it.
#[derive(Debug, Clone, PartialEq)]
pub struct Suspend {
    pub payload: Value,
    pub resume_schema: Value,
    pub upstream_state: Option<Value>,
    /// How long it may wait for resume data.
    pub ttl_ms: u64,
}

/// The outbox at a glance, for metrics.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct OutboxStats {
    /// Pending or leased deliveries.
    pub undelivered: u64,
    /// `created_at` of the oldest undelivered one.
    pub oldest_created_at: Option<Millis>,
}

fn get<T: DeserializeOwned>(tx: &Tx<'_>, ks: Ks, key: &[u8]) -> Result<Option<T>, StoreError> {
    tx.get(ks, key)?.map(|b| decode(&b)).transpose()
}

/// A call's record as it stands, with how it ended merged in ([`CallRecord::with_end`]).
fn load_call(tx: &Tx<'_>, call_id: &str) -> Result<Option<CallRecord>, StoreError> {
    get::<CallRecord>(tx, Ks::Calls, call_id.as_bytes())?
        .map(|c| c.with_end(|id| get(tx, Ks::CallEnds, id.as_bytes())))
        .transpose()
}

fn put<T: Serialize>(tx: &mut Tx<'_>, ks: Ks, key: &[u8], value: &T) -> Result<(), StoreError> {
    let bytes = encode(value)?;
    tx.put(ks, key.to_vec(), bytes);
    Ok(())
}

fn fields(pairs: Value) -> Map<String, Value> {
    match pairs {
        Value::Object(m) => m,
        _ => Map::new(),
    }
}

fn run_id(context: &Value) -> Option<&str> {
    context.get("run_id").and_then(Value::as_str)
}

impl Store {
    /// The audit copy of a call: its identity and redacted args.
    fn call_fields(redact_ptrs: &[String], call: &CallRecord) -> Map<String, Value> {
        fields(json!({
            "call_id": call.call_id,
            "tool": call.tool,
            "fingerprint": call.fingerprint,
            "args": redact(&call.args, redact_ptrs),
            "principal": call.requester.id,
            "context": call.context,
        }))
    }

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
            if tx.exists(Ks::Calls, call.call_id.as_bytes())? {
                return Err(StoreError::CallExists(call.call_id.clone()));
            }
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
            put(tx, Ks::Calls, call.call_id.as_bytes(), &call)?;
            Ok(call)
        }
    }

    /// Spends one use of the grant for `call.fingerprint` under `scope_key` and records the
    /// call as allowed by it, atomically. `None` (and nothing written) when there is no grant
    /// with uses left that has not expired at `call.created_at`.
    pub fn call_with_grant(
        &self,
        mut call: CallRecord,
        scope_key: &str,
        explanation: Map<String, Value>,
        begin: bool,
    ) -> Result<Option<CallRecord>, StoreError> {
        let redact_ptrs = self.redact.clone();
        let scope_key = scope_key.to_owned();
        self.writer.submit(move |tx| {
            if tx.exists(Ks::Calls, call.call_id.as_bytes())? {
                return Err(StoreError::CallExists(call.call_id.clone()));
            }
            let Some(grant) = spend_grant(
                tx,
                &call.fingerprint,
                &scope_key,
                call.created_at,
                &call.call_id,
            )?
            else {
                return Ok(None);
            };
            call.status = CallStatus::Allowed;
            call.approval_id = Some(grant.approval_id.clone());
            let mut f = Self::call_fields(&redact_ptrs, &call);
            f.insert("decision".into(), Value::from(call.decision.clone()));
            f.insert("approval_id".into(), Value::from(grant.approval_id));
            f.insert("grant_uses_left".into(), Value::from(grant.uses_left));
            f.extend(explanation);
            if begin {
                f.insert("started".into(), Value::Bool(true));
            }
            tx.audit(call.created_at, Kind::CallDecided, f);
            if begin {
                let at = call.created_at;
                mark_executing(tx, &mut call, at);
            }
            put(tx, Ks::Calls, call.call_id.as_bytes(), &call)?;
            Ok(Some(call))
        })
    }

    /// Holds a call for approval: the call record, the approval, its indexes and expiry entry,
    /// and the `call.decided` and `approval.requested` audit records, in one batch.
    pub fn create_approval(
        &self,
        call: CallRecord,
        approval: Approval,
        explanation: Map<String, Value>,
    ) -> Result<Approval, StoreError> {
        self.create_approval_notifying(call, approval, explanation, Vec::new())
    }

    /// [`Store::create_approval`], with webhook deliveries announcing it put in the outbox in
    /// the same batch: the approval and its notifications are durable together.
    pub fn create_approval_notifying(
        &self,
        mut call: CallRecord,
        approval: Approval,
        explanation: Map<String, Value>,
        deliveries: Vec<NewDelivery>,
    ) -> Result<Approval, StoreError> {
        let redact_ptrs = self.redact.clone();
        self.writer.submit(move |tx| {
            let now = call.created_at;
            stage_deliveries(tx, deliveries, now)?;
            if tx.exists(Ks::Calls, call.call_id.as_bytes())? {
                return Err(StoreError::CallExists(call.call_id.clone()));
            }
            if approval.status != ApprovalStatus::Pending || approval.call_id != call.call_id {
                return Err(StoreError::Corrupt(
                    "a new approval must be pending and name its call".into(),
                ));
            }
            call.status = CallStatus::PendingApproval;
            call.approval_id = Some(approval.id.clone());
            let mut f = Self::call_fields(&redact_ptrs, &call);
            f.insert("decision".into(), Value::from(call.decision.clone()));
            f.extend(explanation);
            tx.audit(call.created_at, Kind::CallDecided, f);
            let mut f = Self::call_fields(&redact_ptrs, &call);
            f.insert("approval_id".into(), Value::from(approval.id.clone()));
            f.insert("approvers".into(), json!(approval.approvers));
            f.insert("quorum".into(), Value::from(approval.quorum));
            f.insert("expires_at".into(), Value::from(approval.expires_at));
            tx.audit(call.created_at, Kind::ApprovalRequested, f);
            put(tx, Ks::Calls, call.call_id.as_bytes(), &call)?;
            put(tx, Ks::Approvals, approval.id.as_bytes(), &approval)?;
            for (field, value) in index_entries(&approval) {
                tx.put(
                    Ks::ApprovalIndex,
                    keys::index_key(field, &value, &approval.id),
                    Vec::new(),
                );
            }
            tx.put(
                Ks::Expiry,
                keys::expiry_key(approval.expires_at, EXPIRE_APPROVAL, approval.id.as_bytes()),
                Vec::new(),
            );
            Ok(approval)
        })
    }

    /// An approver decides. Refusals, in this order: `approval.not_found`,
    /// `approval.forbidden` (not an approver or admin, or outside the approval's groups),
    /// `approval.self_approval`, `approval.already_decided`, `approval.not_pending` (also for
    /// a pending approval already past its expiry: silence never approves).
    pub fn decide(
        &self,
        approval_id: &str,
        by: &Principal,
        verdict: Verdict,
        now: Millis,
    ) -> Result<Approval, StoreError> {
        let redact_ptrs = self.redact.clone();
        let approval_id = approval_id.to_owned();
        let by = by.clone();
        self.writer.submit(move |tx| {
            let mut a: Approval = get(tx, Ks::Approvals, approval_id.as_bytes())?
                .ok_or_else(|| StoreError::ApprovalNotFound(approval_id.clone()))?;
            check_decider(&a, &by)?;
            if a.decisions.iter().any(|d| d.by == by.id) {
                return Err(StoreError::AlreadyDecided(by.id.clone()));
            }
            if a.status != ApprovalStatus::Pending {
                return Err(StoreError::NotPending(a.status.as_str()));
            }
            if now >= a.expires_at {
                return Err(StoreError::NotPending("expired"));
            }
            let old_status = a.status;
            let mut call = load_call(tx, &a.call_id)?
                .ok_or_else(|| StoreError::CallNotFound(a.call_id.clone()))?;
            let (decision, reason) = match &verdict {
                Verdict::Approve { reason, edit } => {
                    if let Some((args, fingerprint)) = edit {
                        a.edited_args = Some(args.clone());
                        a.edited_fingerprint = Some(fingerprint.clone());
                    }
                    ("approve", reason.clone())
                }
                Verdict::Decline { reason } => ("decline", Some(reason.clone())),
            };
            a.decisions.push(ApprovalDecision {
                by: by.id.clone(),
                decision: decision.into(),
                reason: reason.clone(),
                at: now,
                fingerprint: a.effective_fingerprint().to_owned(),
            });
            if decision == "decline" {
                a.status = ApprovalStatus::Declined;
                call.status = CallStatus::Declined;
                call.reason = reason.clone();
            } else if a.approvals_counted() >= a.quorum as usize {
                a.status = ApprovalStatus::Approved;
                call.status = CallStatus::Approved;
                call.args = a.effective_args().clone();
                call.fingerprint = a.effective_fingerprint().to_owned();
                call.edited = a.edited_fingerprint.is_some();
                // INVARIANT: the approved call itself is the first use, reserved for it: it
                // may start until the grant's ttl runs out. The grant holds only the uses
                // left for later identical calls, so none of them can take the approved
                // call's turn.
                let expires_at = now.saturating_add(a.grant.ttl_ms);
                call.run_by = Some(expires_at);
                if a.grant.uses > 1 {
                    let grant = Grant {
                        fingerprint: call.fingerprint.clone(),
                        scope_key: a.grant.scope_key.clone(),
                        approval_id: a.id.clone(),
                        uses_left: a.grant.uses - 1,
                        expires_at,
                    };
                    let gk = keys::grant_key(&grant.fingerprint, &grant.scope_key);
                    put(tx, Ks::Grants, &gk, &grant)?;
                    tx.put(
                        Ks::Expiry,
                        keys::expiry_key(grant.expires_at, EXPIRE_GRANT, &gk),
                        Vec::new(),
                    );
                }
            }
            let mut f = Self::call_fields(&redact_ptrs, &call);
            f.insert("approval_id".into(), Value::from(a.id.clone()));
            f.insert("by".into(), Value::from(by.id.clone()));
            f.insert("decision".into(), Value::from(decision));
            f.insert("reason".into(), json!(reason));
            f.insert("status".into(), Value::from(a.status.as_str()));
            f.insert("approvals".into(), Value::from(a.approvals_counted()));
            f.insert("quorum".into(), Value::from(a.quorum));
            if a.edited_fingerprint.is_some() {
                f.insert("edited".into(), Value::from(true));
            }
            tx.audit(now, Kind::ApprovalDecided, f);
            if a.status != old_status {
                a.decided_at = Some(now);
                set_status_index(tx, &a, old_status)?;
                tx.delete(
                    Ks::Expiry,
                    keys::expiry_key(a.expires_at, EXPIRE_APPROVAL, a.id.as_bytes()),
                );
                call.updated_at = now;
                put(tx, Ks::Calls, call.call_id.as_bytes(), &call)?;
            }
            put(tx, Ks::Approvals, a.id.as_bytes(), &a)?;
            Ok(a)
        })
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
            f.insert("approval_id".into(), json!(call.approval_id));
            tx.audit(now, Kind::CallCancelled, f);
            put(tx, Ks::Calls, call.call_id.as_bytes(), &call)?;
            Ok(call)
        })
    }

    /// Expires pending approvals and grants whose time has come; returns the approvals that
    /// expired. Costs work in proportion to what expires (the expiry index is time-ordered).
    pub fn expire_due(&self, now: Millis) -> Result<Expired, StoreError> {
        let redact_ptrs = self.redact.clone();
        self.writer.submit(move |tx| {
            let end = keys::timed_key(now, &[0xff]);
            let mut expired = Vec::new();
            let mut suspended = Vec::new();
            for key in tx.committed_keys_until(Ks::Expiry, &end, SWEEP_LIMIT)? {
                if !tx.exists(Ks::Expiry, &key)? {
                    continue;
                }
                tx.delete(Ks::Expiry, key.clone());
                let Some((_, tail)) = keys::split_timed(&key) else { continue };
                let Some((&kind, id)) = tail.split_first() else { continue };
                match kind {
                    EXPIRE_APPROVAL => {
                        let Some(mut a) = get::<Approval>(tx, Ks::Approvals, id)? else { continue };
                        if a.status != ApprovalStatus::Pending || a.expires_at > now {
                            continue;
                        }
                        a.status = ApprovalStatus::Expired;
                        a.decided_at = Some(now);
                        set_status_index(tx, &a, ApprovalStatus::Pending)?;
                        put(tx, Ks::Approvals, a.id.as_bytes(), &a)?;
                        if let Some(mut call) = load_call(tx, &a.call_id)? {
                            call.status = CallStatus::Expired;
                            call.updated_at = now;
                            let mut f = Self::call_fields(&redact_ptrs, &call);
                            f.insert("approval_id".into(), Value::from(a.id.clone()));
                            tx.audit(now, Kind::ApprovalExpired, f);
                            put(tx, Ks::Calls, call.call_id.as_bytes(), &call)?;
                        }
                        expired.push(a);
                    }
                    EXPIRE_GRANT => {
                        let Some(g) = get::<Grant>(tx, Ks::Grants, id)? else { continue };
                        if g.expires_at > now {
                            continue;
                        }
                        tx.delete(Ks::Grants, id.to_vec());
                        let f = fields(json!({"approval_id": g.approval_id, "fingerprint": g.fingerprint, "scope_key": g.scope_key, "uses_left": g.uses_left}));
                        tx.audit(now, Kind::GrantExpired, f);
                    }
                    EXPIRE_SUSPENDED => {
                        let Some(mut call) = load_call(tx, &String::from_utf8_lossy(id))? else { continue };
                        if call.status != CallStatus::Suspended
                            || call.suspension.as_ref().is_some_and(|s| s.expires_at > now)
                        {
                            continue;
                        }
                        call.status = CallStatus::Expired;
                        call.updated_at = now;
                        unindex_suspended(tx, &call);
                        let mut f = Self::call_fields(&redact_ptrs, &call);
                        f.insert("suspended".into(), Value::from(true));
                        tx.audit(now, Kind::CallExpired, f);
                        put(tx, Ks::Calls, call.call_id.as_bytes(), &call)?;
                        suspended.push(call);
                    }
                    _ => {}
                }
            }
            Ok(Expired {
                approvals: expired,
                suspended,
            })
        })
    }

    /// An executing call's upstream asked to suspend it: the call waits, durably, for resume
    /// data until `ttl_ms` from `now` (audited `call.suspended`).
    pub fn suspend_call(
        &self,
        call_id: &str,
        suspend: Suspend,
        now: Millis,
    ) -> Result<CallRecord, StoreError> {
        let redact_ptrs = self.redact.clone();
        let call_id = call_id.to_owned();
        self.writer.submit(move |tx| {
            let mut call = load_call(tx, &call_id)?
                .ok_or_else(|| StoreError::CallNotFound(call_id.clone()))?;
            if call.status != CallStatus::Executing {
                return Err(StoreError::CallState(call.status.as_str(), "suspend"));
            }
            let count = call.suspension.as_ref().map_or(0, |s| s.count) + 1;
            let expires_at = now.saturating_add(suspend.ttl_ms);
            call.status = CallStatus::Suspended;
            call.updated_at = now;
            call.suspension = Some(Suspension {
                payload: suspend.payload,
                resume_schema: suspend.resume_schema,
                suspended_at: now,
                expires_at,
                count,
                upstream_state: suspend.upstream_state,
            });
            tx.delete(
                Ks::ApprovalIndex,
                keys::index_key(IDX_EXECUTING, "", &call.call_id),
            );
            tx.put(
                Ks::ApprovalIndex,
                keys::index_key(
                    IDX_SUSPENDED,
                    run_id(&call.context).unwrap_or(""),
                    &call.call_id,
                ),
                Vec::new(),
            );
            tx.put(
                Ks::Expiry,
                keys::expiry_key(expires_at, EXPIRE_SUSPENDED, call.call_id.as_bytes()),
                Vec::new(),
            );
            let mut f = Self::call_fields(&redact_ptrs, &call);
            if let Some(s) = &call.suspension {
                f.insert("payload".into(), s.payload.clone());
                f.insert("resume_schema".into(), s.resume_schema.clone());
                f.insert("expires_at".into(), Value::from(s.expires_at));
                f.insert("suspensions".into(), Value::from(s.count));
            }
            tx.audit(now, Kind::CallSuspended, f);
            put(tx, Ks::Calls, call.call_id.as_bytes(), &call)?;
            Ok(call)
        })
    }

    /// Claims a suspended call to resume it with `resume_data` (already validated and allowed
    /// by policy): `suspended` → `executing`, at most once, audited `call.resumed` with the
    /// (redacted) data and `explanation`. Refused: `call.not_suspended`, `call.expired`.
    pub fn resume_call(
        &self,
        call_id: &str,
        by: &Principal,
        resume_data: &Value,
        explanation: Map<String, Value>,
        now: Millis,
    ) -> Result<CallRecord, StoreError> {
        let redact_ptrs = self.redact.clone();
        let call_id = call_id.to_owned();
        let by = by.clone();
        let data = redact(resume_data, &redact_ptrs);
        self.writer.submit(move |tx| {
            let mut call = load_call(tx, &call_id)?
                .ok_or_else(|| StoreError::CallNotFound(call_id.clone()))?;
            if call.status != CallStatus::Suspended {
                return Err(StoreError::NotSuspended(call.status.as_str()));
            }
            let Some(s) = &call.suspension else {
                return Err(StoreError::Corrupt(
                    "a suspended call without its suspension".into(),
                ));
            };
            if now >= s.expires_at {
                return Err(StoreError::SuspensionExpired);
            }
            unindex_suspended(tx, &call);
            let mut f = Self::call_fields(&redact_ptrs, &call);
            f.insert("by".into(), Value::from(by.id.clone()));
            f.insert("resume_data".into(), data);
            f.extend(explanation);
            tx.audit(now, Kind::CallResumed, f);
            claim(tx, &mut call, now);
            put(tx, Ks::Calls, call.call_id.as_bytes(), &call)?;
            Ok(call)
        })
    }

    /// Audits a resume that policy denied; the call stays suspended.
    pub fn resume_denied(
        &self,
        call: &CallRecord,
        by: &Principal,
        resume_data: &Value,
        explanation: Map<String, Value>,
        now: Millis,
    ) -> Result<u64, StoreError> {
        let mut f = Self::call_fields(&self.redact, call);
        f.insert("by".into(), Value::from(by.id.clone()));
        f.insert("resume_data".into(), redact(resume_data, &self.redact));
        f.extend(explanation);
        self.writer
            .submit(move |tx| Ok(tx.audit(now, Kind::CallResumeDenied, f)))
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
                || !tx.exists(Ks::ApprovalIndex, &executing)?
            {
                return Err(StoreError::CallState(claimed.status.as_str(), "complete"));
            }
            end_call(tx, claimed, outcome, now)
        })
    }

    /// Appends an audit record of its own (for example `policy.loaded`).
    pub fn append_audit(
        &self,
        kind: Kind,
        record: Map<String, Value>,
        now: Millis,
    ) -> Result<u64, StoreError> {
        self.writer
            .submit(move |tx| Ok(tx.audit(now, kind, record)))
    }

    /// Appends several audit records in one atomic batch (bulk imports, benches).
    pub fn append_audit_many(
        &self,
        records: Vec<(Kind, Map<String, Value>)>,
        now: Millis,
    ) -> Result<u64, StoreError> {
        self.writer.submit(move |tx| {
            let mut last = 0;
            for (kind, record) in records {
                last = tx.audit(now, kind, record);
            }
            Ok(last)
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

    /// Lists approvals newest first. `cursor` is the last id of the previous page.
    pub fn list_approvals(
        &self,
        filter: &ApprovalFilter,
        cursor: Option<&str>,
        limit: usize,
    ) -> Result<(Vec<Approval>, Option<String>), StoreError> {
        self.shared.check()?;
        let (field, value) = if let Some(r) = &filter.run_id {
            (IDX_RUN, r.as_str())
        } else if let Some(t) = &filter.tool {
            (IDX_TOOL, t.as_str())
        } else if let Some(p) = &filter.principal {
            (IDX_PRINCIPAL, p.as_str())
        } else if let Some(s) = filter.status {
            (IDX_STATUS, s.as_str())
        } else {
            (IDX_ALL, "")
        };
        let prefix = keys::index_prefix(field, value);
        let end = match cursor {
            Some(c) => keys::index_key(field, value, c),
            None => {
                let mut e = prefix.clone();
                e.push(0xff);
                e
            }
        };
        let mut out = Vec::new();
        for entry in self
            .shared
            .backend
            .iter(Ks::ApprovalIndex, prefix.clone(), Some(end), true)
        {
            let (key, _) = entry?;
            let id = String::from_utf8_lossy(&key[prefix.len()..]).into_owned();
            let Some(a) = self.approval(&id)? else {
                continue;
            };
            let keep = filter.status.is_none_or(|s| a.status == s)
                && filter.tool.as_deref().is_none_or(|t| a.tool == t)
                && filter
                    .run_id
                    .as_deref()
                    .is_none_or(|r| run_id(&a.context) == Some(r))
                && filter
                    .principal
                    .as_deref()
                    .is_none_or(|p| a.requester.id == p);
            if keep {
                out.push(a);
                if out.len() == limit {
                    break;
                }
            }
        }
        let next = (out.len() == limit)
            .then(|| out.last().map(|a| a.id.clone()))
            .flatten();
        Ok((out, next))
    }

    // ---- webhook outbox ----

    /// Puts deliveries in the outbox, due now.
    pub fn enqueue_deliveries(
        &self,
        deliveries: Vec<NewDelivery>,
        now: Millis,
    ) -> Result<Vec<Delivery>, StoreError> {
        self.writer
            .submit(move |tx| stage_deliveries(tx, deliveries, now))
    }

    /// Leases up to `max` deliveries that are due (pending ones whose time has come, and
    /// leased ones whose worker did not answer before the lease ran out) for `lease_ms`.
    pub fn lease_deliveries(
        &self,
        now: Millis,
        lease_ms: u64,
        max: usize,
    ) -> Result<Vec<Delivery>, StoreError> {
        self.writer.submit(move |tx| {
            let end = keys::timed_key(now, &[0xff]);
            let mut out = Vec::new();
            for key in tx.committed_keys_until(Ks::OutboxDue, &end, max)? {
                if !tx.exists(Ks::OutboxDue, &key)? {
                    continue;
                }
                let Some((_, id)) = keys::split_timed(&key) else {
                    continue;
                };
                let Some(mut d) = get::<Delivery>(tx, Ks::Outbox, id)? else {
                    tx.delete(Ks::OutboxDue, key);
                    continue;
                };
                tx.delete(Ks::OutboxDue, key.clone());
                d.state = "leased".into();
                d.attempts += 1;
                d.due_at = now.saturating_add(lease_ms);
                tx.put(
                    Ks::OutboxDue,
                    keys::timed_key(d.due_at, d.id.as_bytes()),
                    Vec::new(),
                );
                put(tx, Ks::Outbox, d.id.as_bytes(), &d)?;
                out.push(d);
            }
            Ok(out)
        })
    }

    /// Marks a delivery delivered; it is never handed out again. Acking twice is harmless.
    pub fn ack_delivery(&self, id: &str, now: Millis) -> Result<Delivery, StoreError> {
        self.finish_delivery(id, now, "delivered", None, None)
    }

    /// Schedules another attempt at `due_at`.
    pub fn retry_delivery(
        &self,
        id: &str,
        due_at: Millis,
        error: &str,
    ) -> Result<Delivery, StoreError> {
        self.finish_delivery(id, due_at, "pending", Some(error.to_owned()), Some(due_at))
    }

    /// Gives up on a delivery: it stays in the outbox as `dead` for an operator to see.
    pub fn dead_letter(&self, id: &str, error: &str, now: Millis) -> Result<Delivery, StoreError> {
        self.finish_delivery(id, now, "dead", Some(error.to_owned()), None)
    }

    /// Moves a leased delivery to `state`; `due_at` puts it back in the due index.
    fn finish_delivery(
        &self,
        id: &str,
        now: Millis,
        state: &'static str,
        error: Option<String>,
        due_at: Option<Millis>,
    ) -> Result<Delivery, StoreError> {
        let id = id.to_owned();
        self.writer.submit(move |tx| {
            let mut d: Delivery = get(tx, Ks::Outbox, id.as_bytes())?
                .ok_or_else(|| StoreError::DeliveryNotFound(id.clone()))?;
            if d.state == "delivered" || d.state == "dead" {
                return Ok(d);
            }
            tx.delete(Ks::OutboxDue, keys::timed_key(d.due_at, d.id.as_bytes()));
            d.state = state.into();
            if error.is_some() {
                d.last_error = error;
            }
            if let Some(at) = due_at {
                d.due_at = at;
                tx.put(
                    Ks::OutboxDue,
                    keys::timed_key(at, d.id.as_bytes()),
                    Vec::new(),
                );
            }
            let kind = match state {
                "delivered" => Some(Kind::WebhookDelivered),
                "dead" => Some(Kind::WebhookDead),
                _ => None,
            };
            if let Some(kind) = kind {
                tx.audit(
                    now,
                    kind,
                    fields(json!({
                        "delivery_id": d.id, "webhook": d.webhook, "event": d.event,
                        "attempts": d.attempts, "error": d.last_error,
                    })),
                );
            }
            put(tx, Ks::Outbox, d.id.as_bytes(), &d)?;
            Ok(d)
        })
    }

    /// Disables a webhook endpoint (it answered 410): its deliveries wait until an admin
    /// enables it again.
    pub fn disable_webhook(
        &self,
        webhook: &str,
        reason: &str,
        now: Millis,
    ) -> Result<(), StoreError> {
        let (webhook, reason) = (webhook.to_owned(), reason.to_owned());
        self.writer.submit(move |tx| {
            let record = json!({"webhook": webhook, "reason": reason, "at": now});
            put(
                tx,
                Ks::Settings,
                format!("webhook.disabled.{webhook}").as_bytes(),
                &record,
            )?;
            tx.audit(now, Kind::WebhookDisabled, fields(record));
            Ok(())
        })
    }

    /// Enables a disabled webhook endpoint and makes its parked deliveries due now; returns
    /// how many were parked.
    pub fn enable_webhook(&self, webhook: &str, now: Millis) -> Result<usize, StoreError> {
        let webhook = webhook.to_owned();
        self.writer.submit(move |tx| {
            tx.delete(
                Ks::Settings,
                format!("webhook.disabled.{webhook}").into_bytes(),
            );
            let mut moved = 0;
            for key in
                tx.committed_keys_from(Ks::OutboxDue, &keys::timed_key(PARKED, &[]), usize::MAX)?
            {
                let Some((_, id)) = keys::split_timed(&key) else {
                    continue;
                };
                let Some(mut d) = get::<Delivery>(tx, Ks::Outbox, id)? else {
                    continue;
                };
                if d.webhook != webhook || d.due_at != PARKED {
                    continue;
                }
                tx.delete(Ks::OutboxDue, key);
                d.state = "pending".into();
                d.due_at = now;
                tx.put(
                    Ks::OutboxDue,
                    keys::timed_key(now, d.id.as_bytes()),
                    Vec::new(),
                );
                put(tx, Ks::Outbox, d.id.as_bytes(), &d)?;
                moved += 1;
            }
            tx.audit(
                now,
                Kind::WebhookEnabled,
                fields(json!({"webhook": webhook, "requeued": moved})),
            );
            Ok(moved)
        })
    }

    /// The named secret, created from `fresh` (random bytes the caller drew) on first use and
    /// durable from then on: the same bytes after a restart.
    pub fn secret(&self, name: &str, fresh: Vec<u8>, now: Millis) -> Result<Vec<u8>, StoreError> {
        let key = format!("secret.{name}");
        if let Some(v) = self.read::<Value>(Ks::Settings, key.as_bytes())? {
            return hex_field(&v);
        }
        let name = name.to_owned();
        self.writer.submit(move |tx| {
            if let Some(v) = get::<Value>(tx, Ks::Settings, key.as_bytes())? {
                return hex_field(&v);
            }
            let hex: String = fresh.iter().map(|b| format!("{b:02x}")).collect();
            put(
                tx,
                Ks::Settings,
                key.as_bytes(),
                &json!({"hex": hex, "created_at": now}),
            )?;
            tx.audit(now, Kind::SecretCreated, fields(json!({"name": name})));
            Ok(fresh)
        })
    }

    /// Spends a single-use token (durably): true the first time, false ever after.
    /// The mark is kept until `keep_until` (when what the token unlocks has expired anyway),
    /// then [`Store::sweep_settings`] drops it.
    pub fn spend_once(
        &self,
        token: &str,
        keep_until: Millis,
        now: Millis,
    ) -> Result<bool, StoreError> {
        let key = format!("spent.{token}");
        self.writer.submit(move |tx| {
            if get::<Value>(tx, Ks::Settings, key.as_bytes())?.is_some() {
                return Ok(false);
            }
            put(
                tx,
                Ks::Settings,
                key.as_bytes(),
                &json!({"at": now, "keep_until": keep_until}),
            )?;
            Ok(true)
        })
    }

    /// Drops what has outlived its use from the settings: spent tokens past their
    /// `keep_until` and sessions past their `expires_at`. Returns how many went.
    pub fn sweep_settings(&self, now: Millis) -> Result<usize, StoreError> {
        self.writer.submit(move |tx| {
            let mut gone = 0;
            for (prefix, field) in [("session.", "expires_at"), ("spent.", "keep_until")] {
                for key in tx.committed_keys_from(Ks::Settings, prefix.as_bytes(), 10_000)? {
                    if !key.starts_with(prefix.as_bytes()) {
                        break;
                    }
                    let Some(v) = get::<Value>(tx, Ks::Settings, &key)? else {
                        continue;
                    };
                    if v.get(field)
                        .and_then(Value::as_u64)
                        .is_some_and(|t| t < now)
                    {
                        tx.delete(Ks::Settings, key);
                        gone += 1;
                    }
                }
            }
            Ok(gone)
        })
    }

    /// Stores a sign-in session under `key` (the caller passes a hash of the session's secret,
    /// never the secret), durably, with its audit record.
    pub fn put_session(
        &self,
        key: &str,
        session: Value,
        audit_kind: Kind,
        audit: Map<String, Value>,
        now: Millis,
    ) -> Result<(), StoreError> {
        let key = format!("session.{key}");
        self.writer.submit(move |tx| {
            put(tx, Ks::Settings, key.as_bytes(), &session)?;
            tx.audit(now, audit_kind, audit);
            Ok(())
        })
    }

    /// A session stored by [`Store::put_session`].
    pub fn session(&self, key: &str) -> Result<Option<Value>, StoreError> {
        self.read(Ks::Settings, format!("session.{key}").as_bytes())
    }

    /// Ends a session (sign-out), durably, with its audit record.
    pub fn delete_session(
        &self,
        key: &str,
        audit: Map<String, Value>,
        now: Millis,
    ) -> Result<(), StoreError> {
        let key = format!("session.{key}");
        self.writer.submit(move |tx| {
            tx.delete(Ks::Settings, key.into_bytes());
            tx.audit(now, Kind::InboxSignedOut, audit);
            Ok(())
        })
    }

    /// Whether a webhook endpoint is disabled, and why.
    pub fn webhook_disabled(&self, webhook: &str) -> Result<Option<Value>, StoreError> {
        self.read(
            Ks::Settings,
            format!("webhook.disabled.{webhook}").as_bytes(),
        )
    }

    /// Parks a delivery of a disabled endpoint until it is enabled again.
    pub fn park_delivery(&self, id: &str, reason: &str) -> Result<Delivery, StoreError> {
        self.finish_delivery(id, PARKED, "pending", Some(reason.to_owned()), Some(PARKED))
    }

    /// Undelivered deliveries and the oldest one's age, scanning at most `limit` of them.
    pub fn outbox_stats(&self, limit: usize) -> Result<OutboxStats, StoreError> {
        self.shared.check()?;
        let mut stats = OutboxStats::default();
        for entry in self
            .shared
            .backend
            .iter(Ks::OutboxDue, Vec::new(), None, false)
            .take(limit)
        {
            let (key, _) = entry?;
            let Some((_, id)) = keys::split_timed(&key) else {
                continue;
            };
            if let Some(d) = self.read::<Delivery>(Ks::Outbox, id)? {
                stats.undelivered += 1;
                stats.oldest_created_at = Some(
                    stats
                        .oldest_created_at
                        .map_or(d.created_at, |o| o.min(d.created_at)),
                );
            }
        }
        Ok(stats)
    }
}

/// Puts deliveries in the outbox, due at `now`, as part of the current job.
fn stage_deliveries(
    tx: &mut Tx<'_>,
    deliveries: Vec<NewDelivery>,
    now: Millis,
) -> Result<Vec<Delivery>, StoreError> {
    let mut out = Vec::new();
    for d in deliveries {
        let delivery = Delivery {
            id: crate::new_id("msg"),
            webhook: d.webhook,
            event: d.event,
            payload: d.payload,
            attempts: 0,
            state: "pending".into(),
            due_at: now,
            created_at: now,
            last_error: None,
        };
        put(tx, Ks::Outbox, delivery.id.as_bytes(), &delivery)?;
        tx.put(
            Ks::OutboxDue,
            keys::timed_key(now, delivery.id.as_bytes()),
            Vec::new(),
        );
        out.push(delivery);
    }
    Ok(out)
}

/// Who may decide `a`: approvers (in one of its groups, when it names groups) and admins,
/// never the requester.
fn check_decider(a: &Approval, by: &Principal) -> Result<(), StoreError> {
    match by.role.as_str() {
        "admin" => {}
        "approver" => {
            if !a.approvers.is_empty() && !by.groups.iter().any(|g| a.approvers.contains(g)) {
                return Err(StoreError::Forbidden(format!(
                    "`{}` is in none of the approver groups {:?}",
                    by.id, a.approvers
                )));
            }
        }
        other => {
            return Err(StoreError::Forbidden(format!(
                "the `{other}` role cannot decide approvals"
            )))
        }
    }
    if by.id == a.requester.id {
        return Err(StoreError::SelfApproval);
    }
    Ok(())
}

/// Spends one use of the grant at (`fingerprint`, `scope_key`) if it has one left and has not
/// expired at `now`; returns the grant as it is after spending.
fn spend_grant(
    tx: &mut Tx<'_>,
    fingerprint: &str,
    scope_key: &str,
    now: Millis,
    call_id: &str,
) -> Result<Option<Grant>, StoreError> {
    let gk = keys::grant_key(fingerprint, scope_key);
    let Some(mut grant) = get::<Grant>(tx, Ks::Grants, &gk)? else {
        return Ok(None);
    };
    // INVARIANT: an expired grant is never spent, even before the sweeper has removed it.
    if grant.uses_left == 0 || now >= grant.expires_at {
        return Ok(None);
    }
    grant.uses_left -= 1;
    if grant.uses_left == 0 {
        tx.delete(Ks::Grants, gk.clone());
        tx.delete(
            Ks::Expiry,
            keys::expiry_key(grant.expires_at, EXPIRE_GRANT, &gk),
        );
    } else {
        put(tx, Ks::Grants, &gk, &grant)?;
    }
    tx.audit(
        now,
        Kind::GrantConsumed,
        fields(json!({
            "approval_id": grant.approval_id, "fingerprint": fingerprint, "scope_key": scope_key,
            "call_id": call_id, "uses_left": grant.uses_left,
        })),
    );
    Ok(Some(grant))
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
    tx.audit(
        now,
        kind,
        with_run(
            fields(json!({
                "call_id": call.call_id,
                "tool": call.tool,
                "fingerprint": call.fingerprint,
                "upstream_status": outcome.upstream_status,
                "error": outcome.error,
            })),
            &call,
        ),
    );
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
fn mark_executing(tx: &mut Tx<'_>, call: &mut CallRecord, now: Millis) {
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

/// Names the call's run in an audit record that carries no context, so the run's stream
/// finds it.
fn with_run(mut f: Map<String, Value>, call: &CallRecord) -> Map<String, Value> {
    if let Some(run) = run_id(&call.context) {
        f.insert("run_id".into(), Value::from(run));
    }
    f
}

/// Drops a suspended call's index and expiry entries (it is resumed, expired or cancelled).
fn unindex_suspended(tx: &mut Tx<'_>, call: &CallRecord) {
    tx.delete(
        Ks::ApprovalIndex,
        keys::index_key(
            IDX_SUSPENDED,
            run_id(&call.context).unwrap_or(""),
            &call.call_id,
        ),
    );
    if let Some(s) = &call.suspension {
        tx.delete(
            Ks::Expiry,
            keys::expiry_key(s.expires_at, EXPIRE_SUSPENDED, call.call_id.as_bytes()),
        );
    }
}

/// Claims a call for execution, audited `call.started`.
fn claim(tx: &mut Tx<'_>, call: &mut CallRecord, now: Millis) {
    mark_executing(tx, call, now);
    tx.audit(
        now,
        Kind::CallStarted,
        fields(
            json!({"call_id": call.call_id, "tool": call.tool, "fingerprint": call.fingerprint}),
        ),
    );
}

/// The listing index entries of an approval.
fn index_entries(a: &Approval) -> Vec<(u8, String)> {
    let mut entries = vec![
        (IDX_ALL, String::new()),
        (IDX_STATUS, a.status.as_str().to_owned()),
        (IDX_TOOL, a.tool.clone()),
        (IDX_PRINCIPAL, a.requester.id.clone()),
    ];
    if let Some(r) = run_id(&a.context) {
        entries.push((IDX_RUN, r.to_owned()));
    }
    entries
}

/// Moves `a` in the status index; refuses any transition but `pending` → final.
fn set_status_index(tx: &mut Tx<'_>, a: &Approval, old: ApprovalStatus) -> Result<(), StoreError> {
    if !old.can_become(a.status) {
        return Err(StoreError::NotPending(old.as_str()));
    }
    tx.delete(
        Ks::ApprovalIndex,
        keys::index_key(IDX_STATUS, old.as_str(), &a.id),
    );
    tx.put(
        Ks::ApprovalIndex,
        keys::index_key(IDX_STATUS, a.status.as_str(), &a.id),
        Vec::new(),
    );
    Ok(())
}

/// The bytes of a stored `{"hex": …}` secret.
fn hex_field(v: &Value) -> Result<Vec<u8>, StoreError> {
    let hex = v
        .get("hex")
        .and_then(Value::as_str)
        .ok_or_else(|| StoreError::Corrupt("a stored secret has no `hex`".into()))?;
    (0..hex.len())
        .step_by(2)
        .map(|i| {
            hex.get(i..i + 2)
                .and_then(|h| u8::from_str_radix(h, 16).ok())
                .ok_or_else(|| StoreError::Corrupt("a stored secret is not hex".into()))
        })
        .collect()
}
