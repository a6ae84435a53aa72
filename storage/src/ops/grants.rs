//! Grants (DESIGN §5): a call admitted by spending one use of a grant, atomically, never after
//! the grant expires, never twice.

use serde_json::{json, Map, Value};

use crate::audit::Kind;
use crate::error::StoreError;
use crate::keys::{self, Ks, EXPIRE_GRANT};
use crate::model::{CallRecord, CallStatus, Grant, Millis};
use crate::writer::Tx;
use crate::Store;

use super::calls::mark_executing;
use super::{create_call, fields, get, load_call, put};

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

impl Store {
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
            call.granted = true;
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
            create_call(tx, &call)?;
            Ok(Some(call))
        })
    }
}

impl Store {
    /// The grants with uses left that have not expired at `now`, by approval id.
    pub fn list_grants(&self, now: Millis) -> Result<Vec<Grant>, StoreError> {
        self.shared.check()?;
        let mut out = Vec::new();
        for entry in self.shared.backend.prefix(Ks::Grants, &[]) {
            let (_, bytes) = entry?;
            let g: Grant = keys::decode(&bytes)?;
            if g.uses_left > 0 && now < g.expires_at {
                out.push(g);
            }
        }
        out.sort_by(|a, b| a.approval_id.cmp(&b.approval_id));
        Ok(out)
    }

    /// Revokes the grant approval `approval_id` made, whole (DESIGN §23): its uses left are
    /// gone at once (a call spending one at the same moment either got it first or gets
    /// nothing), and its approved call, if it has not started, is cancelled with the code
    /// `grant.revoked`, so neither it nor an identical call waiting on it runs. Who may revoke
    /// is the caller's to check. Audited `grant.revoked` (and `call.cancelled` for the call);
    /// `grant.not_found` when it has neither uses left nor a call still to run.
    pub fn revoke_grant(
        &self,
        approval_id: &str,
        by: &crate::model::Principal,
        now: Millis,
    ) -> Result<Grant, StoreError> {
        let approval_id = approval_id.to_owned();
        let by = by.clone();
        let redact_ptrs = self.redact.clone();
        self.writer.submit(move |tx| {
            let a: crate::model::Approval = get(tx, Ks::Approvals, approval_id.as_bytes())?
                .ok_or_else(|| StoreError::GrantNotFound(approval_id.clone()))?;
            let gk = keys::grant_key(a.effective_fingerprint(), &a.grant.scope_key);
            let live = get::<Grant>(tx, Ks::Grants, &gk)?
                .filter(|g| g.approval_id == a.id && g.uses_left > 0 && now < g.expires_at);
            // The approved call's own use: reserved for it until it starts or its time runs
            // out (`run_by`).
            let unrun = load_call(tx, &a.call_id)?.filter(|c| {
                c.status == CallStatus::Approved && c.run_by.is_some_and(|by| now < by)
            });
            let grant = match (live, &unrun) {
                (Some(g), _) => {
                    tx.delete(Ks::Grants, gk.clone());
                    tx.delete(
                        Ks::Expiry,
                        keys::expiry_key(g.expires_at, EXPIRE_GRANT, &gk),
                    );
                    g
                }
                (None, Some(call)) => Grant {
                    fingerprint: call.fingerprint.clone(),
                    scope_key: a.grant.scope_key.clone(),
                    approval_id: a.id.clone(),
                    uses_left: 0,
                    expires_at: call.run_by.unwrap_or(now),
                },
                (None, None) => return Err(StoreError::GrantNotFound(approval_id.clone())),
            };
            if let Some(mut call) = unrun {
                call.status = CallStatus::Cancelled;
                call.code = Some("grant.revoked".into());
                call.updated_at = now;
                let mut f = Self::call_fields(&redact_ptrs, &call);
                f.insert("by".into(), Value::from(by.id.clone()));
                f.insert("auth".into(), by.auth_record());
                f.insert("approval_id".into(), json!(call.approval_id));
                f.insert("code".into(), json!("grant.revoked"));
                tx.audit(now, Kind::CallCancelled, f);
                put(tx, Ks::Calls, call.call_id.as_bytes(), &call)?;
            }
            tx.audit(
                now,
                Kind::GrantRevoked,
                fields(json!({
                    "approval_id": a.id, "tool": a.tool, "fingerprint": grant.fingerprint,
                    "scope_key": grant.scope_key, "uses_left": grant.uses_left,
                    "by": by.id, "auth": by.auth_record(),
                })),
            );
            Ok(grant)
        })
    }
}
