//! airlock's durable store: approvals and their state machine, grants, call records, the audit
//! chain and the webhook outbox, on embedded fjall (one gateway) or PostgreSQL (any number of
//! gateways on one database); the rules above the bytes are the same code for both ([`kv`]).
//!
//! Every state change goes through one writer thread ([`writer`]): it runs the change against
//! current state, appends its audit records to this gateway's chain ([`chains`]: one per
//! gateway on PostgreSQL, read together by position), and commits both in one atomic batch
//! that is durable before the caller hears back. Concurrent callers share fsyncs (group commit). Reads
//! go straight to the database from the caller's thread and see only committed data.
//!
//! The API is synchronous: the gateway calls it off its async threads. The allow path's two
//! writes also have async forms (`record_call_async`, `complete_call_async`) whose futures the
//! writer wakes itself, so an allowed call hands no wait to another thread. Time is always an
//! argument (milliseconds since the epoch); the store reads no clock.
//!
//! What it does not do: decide policy, compute scope keys, or talk to the network. The rules
//! for who may decide an approval (roles, groups, separation of duties, quorum) live here,
//! because they must be checked atomically with the state they guard.

mod audit;
mod chains;
mod error;
mod keys;
mod kv;
mod model;
mod ops;
mod writer;

use std::path::Path;
use std::sync::{Arc, OnceLock};

use serde_json::Value;

pub use audit::{
    redact, verify as verify_chain, AuditSummary, ChainError, ChainSummary, Kind, GENESIS,
};
pub use chains::Cursor;
pub use error::StoreError;
pub use kv::postgres::migrate_database;
pub use kv::{Change, ChangeListener, PgOptions};
pub use model::{
    scope_key, Approval, ApprovalDecision, ApprovalKind, ApprovalStatus, CallOutcome, CallRecord,
    CallStatus, Delivery, Grant, GrantChoice, GrantMax, GrantScopeName, GrantTerms, Millis,
    PinReview, Principal, Suspension, ToolPin,
};
pub use ops::{
    check_decider, principal_fields, request_fields, ApprovalFilter, Begin, Expired, NewDelivery,
    OutboxStats, PinSeen, Repolicy, Seen, Suspend, Verdict, PARKED, POLICY_DECIDER,
};
pub use writer::Durability;

/// How the PostgreSQL store's connections plan, and the statements each prepares: for the
/// test that EXPLAINs them on an empty table and a large one.
#[doc(hidden)]
pub mod postgres_plans {
    pub use crate::kv::postgres::{PLAN_SETTINGS as SETTINGS, STATEMENTS};
}

use keys::{decode, Ks};
use kv::Backend;
use writer::{ChainHead, Shared, Writer};

/// Settings the store needs from the gateway's config.
#[derive(Debug, Clone)]
pub struct StoreOptions {
    /// JSON pointers into args, replaced by `"[redacted]"` in audit records.
    pub redact: Vec<String>,
    /// How soon `Lazy` writes are fsynced.
    pub flush_interval: std::time::Duration,
    /// This gateway's name among those sharing a database: a gateway restarted under the same
    /// name marks the calls it left executing `call.interrupted`, and only those. Empty for
    /// fjall, which one process holds.
    pub instance: String,
}

impl Default for StoreOptions {
    fn default() -> Self {
        StoreOptions {
            redact: Vec::new(),
            flush_interval: std::time::Duration::from_millis(5),
            instance: String::new(),
        }
    }
}

/// A handle to the store; cheap to clone, shared by every request.
#[derive(Clone)]
pub struct Store {
    shared: Arc<Shared>,
    writer: Arc<Writer>,
    redact: Arc<Vec<String>>,
    /// The other chains' heads this gateway last witnessed ([`Store::witness`]).
    witnessed: Arc<std::sync::Mutex<serde_json::Map<String, Value>>>,
}

/// The TLS client settings of every connection airlock opens (to PostgreSQL, to upstreams):
/// the server's certificate is verified against `ca_pem` alone when given, else against the
/// system's roots. There is no setting that skips verification.
pub fn tls_client_config(ca_pem: Option<&[u8]>) -> Result<rustls::ClientConfig, String> {
    use rustls::pki_types::pem::PemObject;
    use rustls_platform_verifier::BuilderVerifierExt;
    let builder = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::aws_lc_rs::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .map_err(|e| e.to_string())?;
    Ok(match ca_pem {
        Some(pem) => {
            let mut roots = rustls::RootCertStore::empty();
            for cert in rustls::pki_types::CertificateDer::pem_slice_iter(pem) {
                roots
                    .add(cert.map_err(|e| e.to_string())?)
                    .map_err(|e| e.to_string())?;
            }
            if roots.is_empty() {
                return Err("the CA file holds no PEM certificate".into());
            }
            builder.with_root_certificates(roots).with_no_client_auth()
        }
        None => builder
            .with_platform_verifier()
            .map_err(|e| e.to_string())?
            .with_no_client_auth(),
    })
}

/// A fresh sortable unique id: `prefix`, `_`, then a UUIDv7 (time-ordered, then random).
/// The prefix says what the id names (`call`, `apr`, `msg`), so a call id pasted where an
/// approval id belongs can be told apart and explained.
pub fn new_id(prefix: &str) -> String {
    format!("{prefix}_{}", uuid::Uuid::now_v7())
}

/// The file fjall writes when it creates a database: its presence says a folder holds a store.
const STORE_MARKER: &str = "version";

impl Store {
    /// Opens (or creates) the store at `path`. Only one process may hold it open.
    pub fn open(path: &Path, options: StoreOptions) -> Result<Store, StoreError> {
        let backend = Backend::Fjall(kv::fjall::FjallKv::open(path)?);
        Store::start(backend, Arc::new(OnceLock::new()), options)
    }

    /// Opens the store in the PostgreSQL database at `pg.url`, bringing its schema up to date
    /// (a schema newer than this binary is `store.schema_too_new`). Any number of processes
    /// may hold it open at once.
    pub fn open_postgres(pg: &PgOptions, options: StoreOptions) -> Result<Store, StoreError> {
        let listener = Arc::new(OnceLock::new());
        let backend = Backend::Postgres(Box::new(kv::postgres::PgKv::open(pg, listener.clone())?));
        Store::start(backend, listener, options)
    }

    fn start(
        backend: Backend,
        listener: Arc<OnceLock<ChangeListener>>,
        options: StoreOptions,
    ) -> Result<Store, StoreError> {
        let chain = if options.instance.is_empty() {
            DEFAULT_CHAIN.to_owned()
        } else {
            options.instance.clone()
        };
        if chain.contains('\0') {
            return Err(StoreError::Corrupt(
                "an instance name must not hold a NUL".into(),
            ));
        }
        let shared = Arc::new(Shared {
            backend,
            listener,
            instance: options.instance,
            chain,
        });
        // With PostgreSQL the chain is claimed before anything is written: a gateway whose
        // previous connection the database has not ended yet waits for it a while.
        claim_chain(&shared)?;
        let head = chain_head(&shared)?;
        let writer = Arc::new(Writer::start(shared.clone(), head, options.flush_interval)?);
        let store = Store {
            shared,
            writer,
            redact: Arc::new(options.redact),
            witnessed: Default::default(),
        };
        store.adopt_unnamed_records()?;
        store.recover()?;
        Ok(store)
    }

    /// Opens the store at `path` only if one is there: for commands that read a stopped
    /// gateway's store (`audit verify`, `export`), where a mistyped folder must be an error,
    /// not a new empty store that verifies.
    pub fn open_existing(path: &Path, options: StoreOptions) -> Result<Store, StoreError> {
        if !path.is_dir() {
            return Err(StoreError::NoStore(format!(
                "no store at {}: the folder does not exist",
                path.display()
            )));
        }
        if !path.join(STORE_MARKER).is_file() {
            return Err(StoreError::NoStore(format!(
                "{} does not hold an airlock store (give the gateway's `server.data_dir`)",
                path.display()
            )));
        }
        Store::open(path, options)
    }

    /// Whether the store can still serve: false once a write failed to reach the disk.
    pub fn is_available(&self) -> bool {
        self.shared.check().is_ok()
    }

    fn read<T: serde::de::DeserializeOwned>(
        &self,
        ks: Ks,
        key: &[u8],
    ) -> Result<Option<T>, StoreError> {
        self.shared.check()?;
        match self.shared.backend.get(ks, key)? {
            Some(bytes) => decode(&bytes).map(Some),
            None => Ok(None),
        }
    }

    pub fn approval(&self, id: &str) -> Result<Option<Approval>, StoreError> {
        self.read(Ks::Approvals, id.as_bytes())
    }

    pub fn call(&self, call_id: &str) -> Result<Option<CallRecord>, StoreError> {
        self.read::<CallRecord>(Ks::Calls, call_id.as_bytes())?
            .map(|c| c.with_end(|id| self.read(Ks::CallEnds, id.as_bytes())))
            .transpose()
    }

    /// The grant for `fingerprint` under `scope_key`, if one is stored (it may have expired:
    /// only [`Store::call_with_grant`] decides whether it can be spent).
    pub fn grant(&self, fingerprint: &str, scope_key: &str) -> Result<Option<Grant>, StoreError> {
        self.read(Ks::Grants, &keys::grant_key(fingerprint, scope_key))
    }

    pub fn delivery(&self, id: &str) -> Result<Option<Delivery>, StoreError> {
        self.read(Ks::Outbox, id.as_bytes())
    }

    /// The calls of run `run_id` that are suspended, oldest first.
    pub fn suspended_in_run(&self, run_id: &str) -> Result<Vec<CallRecord>, StoreError> {
        self.shared.check()?;
        let prefix = keys::index_prefix(ops::IDX_SUSPENDED, run_id);
        let mut out = Vec::new();
        for entry in self.shared.backend.prefix(Ks::ApprovalIndex, &prefix) {
            let (key, _) = entry?;
            let id = String::from_utf8_lossy(&key[prefix.len()..]).into_owned();
            if let Some(call) = self.call(&id)? {
                if call.status == CallStatus::Suspended {
                    out.push(call);
                }
            }
        }
        out.sort_by_key(|c| c.created_at);
        Ok(out)
    }

    /// Suspended calls of every run, oldest first, up to `limit` (for the inbox).
    pub fn suspended_calls(&self, limit: usize) -> Result<Vec<CallRecord>, StoreError> {
        self.shared.check()?;
        let prefix = [ops::IDX_SUSPENDED, 0];
        let mut out = Vec::new();
        for entry in self
            .shared
            .backend
            .prefix(Ks::ApprovalIndex, &prefix)
            .take(limit)
        {
            let (key, _) = entry?;
            // `S\0{run}\0{call id}`: the call id follows the last NUL.
            let Some(at) = key.iter().rposition(|b| *b == 0) else {
                continue;
            };
            let id = String::from_utf8_lossy(&key[at + 1..]).into_owned();
            if let Some(call) = self.call(&id)? {
                if call.status == CallStatus::Suspended {
                    out.push(call);
                }
            }
        }
        out.sort_by_key(|c| c.created_at);
        Ok(out)
    }

    /// Sets who is told, after each commit, which calls it wrote and which runs got new audit
    /// records; with PostgreSQL, also what other gateways' commits changed. The listener runs
    /// on the store's threads and must not call the store. Set once; later calls are ignored.
    pub fn on_changes(&self, listener: ChangeListener) {
        let _ = self.shared.listener.set(listener);
    }

    /// Writes the store's memtables out to its tables, so the journal behind them can go:
    /// what a graceful stop does, so the next start replays little.
    pub fn flush(&self) -> Result<(), StoreError> {
        self.shared.backend.flush()
    }

    /// Bytes the store occupies on disk.
    pub fn disk_space(&self) -> Result<u64, StoreError> {
        self.shared.backend.disk_space()
    }
}

/// The chain of a store that names no instance (fjall's one chain).
pub const DEFAULT_CHAIN: &str = "local";

/// How long a store waits at open for its chain's lock (PostgreSQL).
const CLAIM_WAIT: std::time::Duration = std::time::Duration::from_secs(20);

/// Takes the lock on this store's chain (PostgreSQL; nothing for fjall), waiting up to
/// [`CLAIM_WAIT`] for a connection of this gateway's previous run to end.
fn claim_chain(shared: &Shared) -> Result<(), StoreError> {
    let prefix = keys::chain_prefix(&shared.chain);
    let start = std::time::Instant::now();
    loop {
        match shared.backend.begin(&prefix) {
            Ok(_) => {
                shared.backend.abandon();
                return Ok(());
            }
            Err(_) if start.elapsed() < CLAIM_WAIT => {
                std::thread::sleep(std::time::Duration::from_millis(250));
            }
            Err(e) => return Err(e),
        }
    }
}

/// Reads where this store's chain ends from its last record.
pub(crate) fn chain_head(shared: &Shared) -> Result<ChainHead, StoreError> {
    head_of(
        shared
            .backend
            .last_with(Ks::Audit, &keys::chain_prefix(&shared.chain))?,
    )
}

/// Where the audit chain ends, given its last record (none: the genesis).
pub(crate) fn head_of(last: Option<(Vec<u8>, Vec<u8>)>) -> Result<ChainHead, StoreError> {
    let Some((key, value)) = last else {
        return Ok(ChainHead {
            seq: 0,
            hash: GENESIS.to_owned(),
            ts: 0,
        });
    };
    let seq = keys::split_audit_key(&key)
        .map(|(_, seq)| seq)
        .ok_or_else(|| StoreError::Corrupt("bad audit key".into()))?;
    let record: Value =
        serde_json::from_slice(&value).map_err(|e| StoreError::Corrupt(e.to_string()))?;
    let hash = record
        .get("hash")
        .and_then(Value::as_str)
        .ok_or_else(|| StoreError::Corrupt(format!("audit record {seq} has no hash")))?;
    Ok(ChainHead {
        seq,
        hash: hash.to_owned(),
        ts: record.get("ts").and_then(Value::as_u64).unwrap_or(0),
    })
}
