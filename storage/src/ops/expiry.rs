//! The expiry sweep: pending approvals past their ttl (their calls end `expired`), grants past
//! theirs, and suspended calls past `suspend_ttl`, a bounded batch per sweep.

use serde_json::{json, Value};

use crate::audit::Kind;
use crate::error::StoreError;
use crate::keys::{self, Ks, EXPIRE_APPROVAL, EXPIRE_GRANT, EXPIRE_SUSPENDED};
use crate::model::{Approval, ApprovalKind, ApprovalStatus, CallRecord, CallStatus, Grant, Millis};
use crate::Store;

use super::approval_rows::set_status_index;
use super::{fields, get, load_call, put, unindex_suspended};

/// Expired approvals and grants handled per sweep, so one sweep stays short.
const SWEEP_LIMIT: usize = 1000;

/// What one expiry sweep ended.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Expired {
    /// Pending approvals past their ttl (their calls are `expired`).
    pub approvals: Vec<Approval>,
    /// Suspended calls past `suspend_ttl` (now `expired`).
    pub suspended: Vec<CallRecord>,
}

impl Store {
    /// The earliest deadline in the expiry index (an approval's, a grant's or a suspended
    /// call's), if any: when [`Store::expire_due`] next has something to do. An entry whose
    /// approval was decided meanwhile still counts; the sweep at its time drops it.
    pub fn next_deadline(&self) -> Result<Option<Millis>, StoreError> {
        self.shared.check()?;
        match self.shared.backend.prefix(Ks::Expiry, &[]).next() {
            Some(entry) => Ok(keys::split_timed(&entry?.0).map(|(at, _)| at)),
            None => Ok(None),
        }
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
                        if a.kind == ApprovalKind::ToolDefinition {
                            let f = fields(json!({"approval_id": a.id, "kind": a.kind.as_str(), "tool": a.tool, "fingerprint": a.fingerprint}));
                            tx.audit(now, Kind::ApprovalExpired, f);
                            super::pins::review_decided(tx, &a, "", now)?;
                        } else if let Some(mut call) = load_call(tx, &a.call_id)? {
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
}
