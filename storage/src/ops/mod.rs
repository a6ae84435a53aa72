//! The state changes: each one a job for the writer that checks, writes and audits atomically.
//!
//! One file per thing a change governs:
//! - [`calls`]: a call's record from decision to end, executed at most once, and the calls a
//!   crash left executing;
//! - [`suspensions`]: a call that waits for resume data, resumed at most once;
//! - [`approvals`]: the approval state machine (`pending` → `approved` | `declined` |
//!   `expired` | `cancelled`, nothing else), who may decide (DESIGN §5/§6, refusals checked in
//!   the order DESIGN gives) and quorum over distinct approvers of the same fingerprint;
//! - [`grants`]: grants spent atomically, never after they expire;
//! - [`expiry`]: the sweep that ends what is past its time;
//! - [`outbox`]: the webhook outbox's lease/ack/retry/dead-letter cycle;
//! - [`sessions`]: inbox sessions, one-time marks and the gateway's secrets;
//! - [`tasks`]: MCP tasks, kept under their principal;
//! - [`pins`]: MCP tool definitions pinned, and the review a changed one opens.
//!
//! This file holds what they share: the index fields, typed reads and writes within one
//! transaction, and appending audit records of the gateway's own. Nothing here is async;
//! callers on the tokio runtime use the `_async` variants, which hand the job to the writer.

use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::{json, Map, Value};

use crate::audit::{redact, Kind};
use crate::error::StoreError;
use crate::keys::{self, decode, encode, Ks, EXPIRE_SUSPENDED};
use crate::model::{CallRecord, Millis};
use crate::writer::Tx;
use crate::Store;

mod approval_rows;
mod approvals;
mod calls;
mod expiry;
mod grants;
mod outbox;
mod pins;
mod repolicy;
mod sessions;
mod suspensions;
mod tasks;

pub use approvals::{check_decider, ApprovalFilter, Verdict};
pub use calls::Begin;
pub use expiry::Expired;
pub use outbox::{NewDelivery, OutboxStats, PARKED};
pub use pins::{PinSeen, Seen};
pub use repolicy::{Repolicy, POLICY_DECIDER};
pub use suspensions::Suspend;

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

/// Writes a call the job creates: refused as `call.exists` if a call has its id (with
/// PostgreSQL, found at commit, failing the group: ids are fresh UUIDv7s, so that is a bug).
fn create_call(tx: &mut Tx<'_>, call: &CallRecord) -> Result<(), StoreError> {
    if tx.create(Ks::Calls, call.call_id.as_bytes().to_vec(), encode(call)?)? {
        Ok(())
    } else {
        Err(StoreError::CallExists(call.call_id.clone()))
    }
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

/// Names the call's run in an audit record that carries no context, so the run's stream
/// finds it.
fn with_run(mut f: Map<String, Value>, call: &CallRecord) -> Map<String, Value> {
    if let Some(run) = run_id(&call.context) {
        f.insert("run_id".into(), Value::from(run));
    }
    f
}

/// A requester in an audit record as policy read it: its id, role, groups and how it proved
/// who it is, and its issuer, actor and claims when it has them; what a replay judges by.
pub fn principal_fields(p: &crate::model::Principal) -> Map<String, Value> {
    let mut f = fields(json!({
        "principal": p.id,
        "role": p.role,
        "groups": p.groups,
        "auth": p.auth_record(),
    }));
    if let Some(issuer) = &p.issuer {
        f.insert("issuer".into(), Value::from(issuer.clone()));
    }
    if let Some(actor) = &p.actor {
        f.insert("actor".into(), Value::from(actor.clone()));
    }
    if !p.claims.is_empty() {
        f.insert("claims".into(), Value::Object(p.claims.clone()));
    }
    f
}

/// What an audit record says of an MCP request of another kind than a tool call: its kind
/// (`request_kind`), upstream, and URI or prompt, as `request.decided` and the records of a
/// held request's call both write them.
pub fn request_fields(r: &airlock_policy::OwnedRequest) -> Map<String, Value> {
    fields(json!({
        "request_kind": r.kind.as_str(), "server": r.server, "uri": r.uri, "prompt": r.prompt,
    }))
}

impl Store {
    /// The audit copy of a call: its identity, redacted args, and the requester as policy read
    /// it ([`principal_fields`]), so a replay judges the call as it was judged.
    fn call_fields(redact_ptrs: &[String], call: &CallRecord) -> Map<String, Value> {
        let mut f = principal_fields(&call.requester);
        f.extend(fields(json!({
            "call_id": call.call_id,
            "tool": call.tool,
            "fingerprint": call.fingerprint,
            "args": redact(&call.args, redact_ptrs),
            "context": call.context,
        })));
        if let Some(r) = &call.request {
            f.extend(request_fields(r));
        }
        f
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
