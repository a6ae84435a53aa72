//! airlock's durable store: approvals and their state machine, grants, call records, the audit
//! chain and the webhook outbox, on embedded fjall (one gateway) or PostgreSQL (any number of
//! gateways on one database); the rules above the bytes are the same code for both ([`kv`]).
//!
//! Every state change goes through one writer thread ([`writer`]): it runs the change against
//! current state, appends its audit records, and commits both in one atomic batch that is
//! durable before the caller hears back. Concurrent callers share fsyncs (group commit). Reads
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
    redact, verify as verify_chain, verify_from as verify_chain_from, ChainError, ChainSummary,
    Kind, GENESIS,
};
pub use error::StoreError;
pub use kv::postgres::migrate_database;
pub use kv::{Change, ChangeListener, PgOptions};
pub use model::{
    Approval, ApprovalDecision, ApprovalStatus, CallOutcome, CallRecord, CallStatus, Delivery,
    Grant, GrantTerms, Millis, Principal, Suspension,
};
pub use ops::{ApprovalFilter, Begin, Expired, NewDelivery, OutboxStats, Suspend, Verdict, PARKED};
pub use writer::Durability;

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
        let shared = Arc::new(Shared {
            backend,
            listener,
            instance: options.instance,
        });
        let head = chain_head(&shared)?;
        let writer = Arc::new(Writer::start(shared.clone(), head, options.flush_interval)?);
        let store = Store {
            shared,
            writer,
            redact: Arc::new(options.redact),
        };
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

    /// Up to `limit` audit records with seq > `after`, oldest first.
    pub fn audit_after(&self, after: u64, limit: usize) -> Result<Vec<Value>, StoreError> {
        self.shared.check()?;
        let mut out = Vec::new();
        for entry in self
            .shared
            .backend
            .iter(Ks::Audit, (after + 1).to_be_bytes().to_vec(), None, false)
            .take(limit)
        {
            let (_, bytes) = entry?;
            out.push(
                serde_json::from_slice(&bytes).map_err(|e| StoreError::Corrupt(e.to_string()))?,
            );
        }
        Ok(out)
    }

    /// Up to `limit` audit records of run `run_id` with seq > `after`, oldest first (records
    /// a prune dropped are skipped).
    pub fn run_events(
        &self,
        run_id: &str,
        after: u64,
        limit: usize,
    ) -> Result<Vec<Value>, StoreError> {
        self.shared.check()?;
        let prefix = keys::index_prefix(keys::IDX_RUN_EVENT, run_id);
        let start = keys::run_event_key(run_id, after.saturating_add(1));
        let mut out = Vec::new();
        for entry in self
            .shared
            .backend
            .iter(Ks::ApprovalIndex, start, None, false)
        {
            let (key, _) = entry?;
            let Some(seq) = key
                .strip_prefix(prefix.as_slice())
                .and_then(|s| std::str::from_utf8(s).ok())
                .and_then(|s| s.parse::<u64>().ok())
            else {
                break;
            };
            if let Some(bytes) = self.shared.backend.get(Ks::Audit, &seq.to_be_bytes())? {
                out.push(
                    serde_json::from_slice(&bytes)
                        .map_err(|e| StoreError::Corrupt(e.to_string()))?,
                );
                if out.len() >= limit {
                    break;
                }
            }
        }
        Ok(out)
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

    /// The raw audit records with seq > `after`, oldest first.
    fn audit_records(&self, after: u64) -> impl Iterator<Item = Result<Vec<u8>, StoreError>> + '_ {
        self.shared
            .backend
            .iter(Ks::Audit, (after + 1).to_be_bytes().to_vec(), None, false)
            .map(|entry| entry.map(|(_, v)| v))
    }

    /// Verifies the whole audit chain as stored: from the genesis, or from the checkpoint a
    /// prune left, so a removed first record is caught like any other.
    pub fn verify_audit(&self) -> Result<Result<ChainSummary, ChainError>, StoreError> {
        self.shared.check()?;
        let checkpoint = self.audit_checkpoint()?;
        let anchor = match &checkpoint {
            Some((seq, hash)) => (*seq, hash.as_str()),
            None => (0, GENESIS),
        };
        let summary = audit::verify_from(self.audit_records(0), Some(anchor));
        // An empty chain after a prune is still anchored at the checkpoint.
        Ok(summary.map(|s| match (&checkpoint, s.records) {
            (Some((seq, hash)), 0) => ChainSummary {
                records: 0,
                first_seq: 0,
                last_seq: *seq,
                last_hash: hash.clone(),
            },
            _ => s,
        }))
    }

    /// The seq and hash of the last record a prune dropped, if any.
    pub fn audit_checkpoint(&self) -> Result<Option<(u64, String)>, StoreError> {
        let v: Option<Value> = self.read(Ks::Settings, b"audit.checkpoint")?;
        Ok(v.and_then(|v| Some((v.get("seq")?.as_u64()?, v.get("hash")?.as_str()?.to_owned()))))
    }

    /// Up to which seq the audit log was exported (`export_audit` to its end).
    pub fn audit_exported_through(&self) -> Result<u64, StoreError> {
        let v: Option<Value> = self.read(Ks::Settings, b"audit.exported_through")?;
        Ok(v.and_then(|v| v.get("seq").and_then(Value::as_u64))
            .unwrap_or(0))
    }

    /// Writes the records with seq > `after` as JSONL; returns how many. Once they are all
    /// written (and `out` flushed), the store notes how far the log has been exported, which
    /// is as far as a prune may go.
    pub fn export_audit(
        &self,
        after: u64,
        out: &mut dyn std::io::Write,
    ) -> Result<u64, StoreError> {
        self.shared.check()?;
        let mut n = 0;
        let mut last = None;
        for record in self.audit_records(after) {
            let record = record?;
            out.write_all(&record)
                .and_then(|_| out.write_all(b"\n"))
                .map_err(|e| StoreError::Unavailable(format!("cannot write the export: {e}")))?;
            if let Ok(v) = serde_json::from_slice::<Value>(&record) {
                last = v.get("seq").and_then(Value::as_u64);
            }
            n += 1;
        }
        out.flush()
            .map_err(|e| StoreError::Unavailable(format!("cannot write the export: {e}")))?;
        // Only an export that starts where the last one ended (or at the start) extends what
        // is covered: a gap would let a prune drop records nobody has.
        let through = self.audit_exported_through()?;
        if let Some(last) = last {
            if after <= through.max(self.audit_checkpoint()?.map_or(0, |c| c.0)) && last > through {
                self.writer.submit(move |tx| {
                    tx.put(
                        Ks::Settings,
                        b"audit.exported_through".to_vec(),
                        keys::encode(&serde_json::json!({"seq": last}))?,
                    );
                    Ok(())
                })?;
            }
        }
        Ok(n)
    }

    /// Drops the audit records with seq < `before`, keeping the seq and hash of the last one
    /// dropped as the checkpoint `verify` starts from. Refused for records not exported yet
    /// (`audit.not_exported`).
    pub fn prune_audit(&self, before: u64, now: Millis) -> Result<(u64, u64), StoreError> {
        self.shared.check()?;
        let through = self.audit_exported_through()?;
        let last_dropped = before.saturating_sub(1);
        if last_dropped > through {
            return Err(StoreError::NotExported(format!(
                "records up to seq {last_dropped} would be dropped, but the log was exported only through seq {through}: export first (`airlock audit export`)"
            )));
        }
        self.writer.submit(move |tx| {
            if last_dropped == 0 {
                return Ok((0, 0));
            }
            let Some(bytes) = tx.get(Ks::Audit, &last_dropped.to_be_bytes())? else {
                return Err(StoreError::NotExported(format!(
                    "no audit record {last_dropped} to keep as the checkpoint (already pruned?)"
                )));
            };
            let record: Value =
                serde_json::from_slice(&bytes).map_err(|e| StoreError::Corrupt(e.to_string()))?;
            let hash = record
                .get("hash")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned();
            let keys =
                tx.committed_keys_until(Ks::Audit, &last_dropped.to_be_bytes(), usize::MAX)?;
            let dropped = keys.len() as u64;
            for k in keys {
                tx.delete(Ks::Audit, k);
            }
            tx.put(
                Ks::Settings,
                b"audit.checkpoint".to_vec(),
                keys::encode(&serde_json::json!({"seq": last_dropped, "hash": hash}))?,
            );
            let mut f = serde_json::Map::new();
            f.insert("before".into(), Value::from(before));
            f.insert("dropped".into(), Value::from(dropped));
            f.insert("checkpoint_seq".into(), Value::from(last_dropped));
            f.insert("checkpoint_hash".into(), Value::from(hash));
            tx.audit(now, Kind::AuditPruned, f);
            Ok((dropped, last_dropped))
        })
    }

    /// The last audit seq and hash.
    pub fn audit_head(&self) -> Result<(u64, String), StoreError> {
        let head = chain_head(&self.shared)?;
        Ok((head.seq, head.hash))
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

/// Reads where the audit chain ends from its last record.
pub(crate) fn chain_head(shared: &Shared) -> Result<ChainHead, StoreError> {
    head_of(shared.backend.last(Ks::Audit)?)
}

/// Where the audit chain ends, given its last record (none: the genesis).
pub(crate) fn head_of(last: Option<(Vec<u8>, Vec<u8>)>) -> Result<ChainHead, StoreError> {
    let Some((key, value)) = last else {
        return Ok(ChainHead {
            seq: 0,
            hash: GENESIS.to_owned(),
        });
    };
    let seq = u64::from_be_bytes(
        key.as_slice()
            .try_into()
            .map_err(|_| StoreError::Corrupt("bad audit key".into()))?,
    );
    let record: Value =
        serde_json::from_slice(&value).map_err(|e| StoreError::Corrupt(e.to_string()))?;
    let hash = record
        .get("hash")
        .and_then(Value::as_str)
        .ok_or_else(|| StoreError::Corrupt(format!("audit record {seq} has no hash")))?;
    Ok(ChainHead {
        seq,
        hash: hash.to_owned(),
    })
}
