//! Suspended calls (DESIGN §11): a call the backend suspended waits for resume data; a resume
//! claims it for execution at most once, a refused resume is audited and changes nothing.

use serde_json::{Map, Value};

use crate::audit::{redact, Kind};
use crate::error::StoreError;
use crate::keys::{self, Ks, EXPIRE_SUSPENDED};
use crate::model::{CallRecord, CallStatus, Millis, Principal, Suspension};
use crate::Store;

use super::calls::claim;
use super::{load_call, put, run_id, unindex_suspended, IDX_EXECUTING, IDX_SUSPENDED};

/// A new suspension, as the upstream asked for it.
#[derive(Debug, Clone, PartialEq)]
pub struct Suspend {
    pub payload: Value,
    pub resume_schema: Value,
    pub upstream_state: Option<Value>,
    /// How long it may wait for resume data.
    pub ttl_ms: u64,
}

impl Store {
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
            f.insert("auth".into(), by.auth_record());
            f.insert("resume_data".into(), data);
            f.extend(explanation);
            tx.audit(now, Kind::CallResumed, f);
            claim(tx, &mut call, now);
            put(tx, Ks::Calls, call.call_id.as_bytes(), &call)?;
            Ok(call)
        })
    }

    /// Audits a resume that policy denied. With `end`, the call ends there: `denied`, out of the
    /// suspended lists, never to run (what an MCP client was told, DESIGN §11); without, it
    /// stays suspended for another answer. A call no longer suspended is only audited.
    pub fn resume_denied(
        &self,
        call_id: &str,
        by: &Principal,
        resume_data: &Value,
        explanation: Map<String, Value>,
        end: bool,
        now: Millis,
    ) -> Result<CallRecord, StoreError> {
        let (call_id, by_auth, by) = (call_id.to_owned(), by.auth_record(), by.id.clone());
        let resume_data = redact(resume_data, &self.redact);
        let redact_ptrs = self.redact.clone();
        self.writer.submit(move |tx| {
            let mut call = load_call(tx, &call_id)?
                .ok_or_else(|| StoreError::CallNotFound(call_id.clone()))?;
            let ends = end && call.status == CallStatus::Suspended;
            if ends {
                call.status = CallStatus::Denied;
                call.updated_at = now;
                unindex_suspended(tx, &call);
                put(tx, Ks::Calls, call.call_id.as_bytes(), &call)?;
            }
            let mut f = Self::call_fields(&redact_ptrs, &call);
            f.insert("by".into(), Value::from(by));
            f.insert("auth".into(), by_auth);
            f.insert("resume_data".into(), resume_data);
            f.insert("ended".into(), Value::from(ends));
            f.extend(explanation);
            tx.audit(now, Kind::CallResumeDenied, f);
            Ok(call)
        })
    }
}
