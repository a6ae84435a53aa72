//! The PostgreSQL backend: every keyspace in one table, `airlock_kv (ks, k, v)`, shared by any
//! number of gateways.
//!
//! How the store's promises hold across gateways (DESIGN §14, §17), without one lock for all:
//! - **A chain per gateway.** Each gateway appends audit records to its own chain (its
//!   `[store] instance`); its writer's connection holds a session advisory lock on the chain's
//!   name for as long as it lives, so no other gateway (one started with the same name by
//!   mistake) writes it meanwhile, and records are inserted, never overwritten: a fork fails
//!   instead of replacing a record. When the connection is new the chain's head is read again.
//! - **Locks per key.** A group of changes is one transaction that locks each key a job reads
//!   (`pg_advisory_xact_lock` on a hash of the schema, keyspace and key) before reading it, in
//!   that transaction: a grant use is read and spent under its key's lock (spent once), a
//!   delivery's lease and an approval's expiry are decided under theirs (each happens once).
//!   Two gateways wait for each other only on a key both touch. Keys a group only creates
//!   (calls, audit records) are inserted and fail the group if present; keys it only expects
//!   are checked in the commit. A group's writes are one prepared statement over arrays of
//!   rows ([`WRITE`]): a group that reads nothing is that statement alone, a transaction of
//!   its own, one round trip; one whose reads began a transaction sends it and `COMMIT`
//!   together. A deadlock between two gateways' groups (jobs that lock the same keys in
//!   opposite orders) is broken by PostgreSQL failing one group, whose callers hear
//!   `store.unavailable`; nothing of it is written.
//! - **Durability**: a durable group commits with `synchronous_commit` on (the WAL is flushed
//!   before the answer); a lazy one (an allowed call's outcome, or `batched` mode) with it off,
//!   so a crash of PostgreSQL itself may lose the last moments of lazy writes, never a durable
//!   one.
//! - **Wake-ups across gateways**: a commit is followed, in the same round trip, by a `NOTIFY`
//!   (on a channel of its schema's) with the calls and runs it changed and the seqs of the
//!   audit records it appended; every gateway `LISTEN`s and wakes what waits on them. The
//!   `NOTIFY` is a transaction of its own, after the group's: PostgreSQL lets one notifying
//!   transaction of a database commit at a time, and a group that notified itself would make
//!   every gateway's commits wait for its WAL flush. One that fails after its group committed
//!   is told again with the next commit, as "anything may have changed". After the listening
//!   connection is (re)established, the listener is told "anything may have changed", so a
//!   decision made while it was away is re-read, not missed.
//! - **Faults**: an operation that cannot reach the database fails with `store.unavailable`
//!   and poisons nothing; connections are re-made on the next use, and the store reports
//!   itself unavailable while its listening connection is down. A session left inside a
//!   transaction (a gateway frozen while it holds the lock) is ended by PostgreSQL after
//!   [`IDLE_IN_TRANSACTION`].
//! - **Migrations** are embedded ([`MIGRATIONS`]), run at open under a session advisory lock,
//!   and a schema newer than this binary refuses to open.
//!
//! The store's API is synchronous; this backend runs its connections on a small runtime of its
//! own and waits for their answers on the calling thread. The writer's connection is driven by
//! the writer's thread itself, on a runtime of its own, while a group waits for its answer: a
//! group's round trip wakes no other thread in this process.
//!
//! TLS: see [`PgOptions`]; the server's certificate is always verified.
//!
//! What it does not do: client certificates, or connection pooling beyond a few connections.

use std::future::Future;
use std::str::FromStr;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use tokio_postgres::{AsyncMessage, Client, Statement};
use tokio_postgres_rustls::MakeRustlsConnect;

use super::{Change, ChangeListener, Entry};

mod group;
use crate::error::StoreError;
use crate::keys::Ks;
use group::Group;

/// The schema, one step per entry; `airlock_schema.version` counts the steps applied.
const MIGRATIONS: &[&str] = &[
    "CREATE TABLE airlock_kv (
        ks smallint NOT NULL,
        k bytea NOT NULL,
        v bytea NOT NULL,
        PRIMARY KEY (ks, k)
    )",
    // What a group's commit checks of the keys its jobs expected to exist.
    "CREATE FUNCTION airlock_expect(ok boolean, what text) RETURNS void
        LANGUAGE plpgsql AS $$
        BEGIN
            IF NOT ok THEN
                RAISE EXCEPTION 'airlock: %', what;
            END IF;
        END $$",
];

/// The schema version this binary writes.
pub const SCHEMA_VERSION: i32 = MIGRATIONS.len() as i32;

/// The channel commits are announced on is this, then a digest of the schema's name: stores in
/// other schemas of the same database do not hear each other.
const CHANNEL_PREFIX: &str = "airlock_changes_";

/// How long a session may sit in an open transaction before PostgreSQL ends it: a gateway that
/// stops answering while it holds the writer lock (a frozen process, a lost host) releases it
/// after this, instead of stopping every other gateway's writes.
const IDLE_IN_TRANSACTION: &str = "15s";

/// A notification's payload must stay under PostgreSQL's 8000 bytes; past this, the change is
/// sent as "anything may have changed".
const MAX_PAYLOAD: usize = 7000;

/// Connections for reads (the writer has its own, and the listener another).
const READERS: usize = 3;

/// How long one database round trip may take before the operation is `store.unavailable`.
const TIMEOUT: Duration = Duration::from_secs(10);

/// How long a connection attempt may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(3);

/// How soon the listener tries again after losing the database.
const RECONNECT: Duration = Duration::from_millis(250);

/// How to reach the database.
#[derive(Debug, Clone, Default)]
pub struct PgOptions {
    /// A libpq-style URL or key=value string (`postgres://user@host:port/db`, or with
    /// `host=/run/postgresql` for a Unix socket).
    pub url: String,
    /// PEM certificates to trust for TLS to the database, instead of the system's roots.
    pub ca_pem: Option<Vec<u8>>,
}

/// The connector every connection uses. Over TCP, `sslmode=prefer` (the default) and `require`
/// encrypt whenever the server offers TLS, and the server's certificate is always verified
/// (against [`PgOptions::ca_pem`], or the system's roots): an unverifiable server is refused,
/// never used unencrypted or unchecked. `sslmode=disable` sends in the clear; a Unix socket
/// never uses TLS.
fn tls(options: &PgOptions) -> Result<MakeRustlsConnect, StoreError> {
    let config = crate::tls_client_config(options.ca_pem.as_deref())
        .map_err(|e| StoreError::Unavailable(format!("the database's TLS settings: {e}")))?;
    Ok(MakeRustlsConnect::new(config))
}

/// A connection with its statements prepared.
struct Conn {
    client: Client,
    get: Statement,
    scan_from: Statement,
    scan_from_to: Statement,
    scan_rev: Statement,
    scan_rev_to: Statement,
    /// A group's writes (see [`WRITE`]).
    write: Statement,
}

pub(crate) struct PgKv {
    rt: Option<tokio::runtime::Runtime>,
    handle: tokio::runtime::Handle,
    /// The writer's connection runs here, driven by the thread that runs the group (the
    /// store's writer) while it waits for an answer: a round trip of a group costs no hand-off
    /// to another thread and back.
    writer_rt: Option<tokio::runtime::Runtime>,
    config: tokio_postgres::Config,
    tls: MakeRustlsConnect,
    readers: Vec<Mutex<Option<Arc<Conn>>>>,
    next_reader: AtomicUsize,
    /// The writer's connection, between groups; it holds the chain's lock.
    writer: Mutex<Option<Arc<Conn>>>,
    /// Whether the chain's head must be read again before the next group (the last commit
    /// failed, and may have been applied).
    reread: AtomicBool,
    /// The group in progress, once it began.
    group: Mutex<Option<Group>>,
    /// What this gateway committed and has not yet told the others, and when it last told
    /// them (see `group.rs`).
    announcer: Arc<Mutex<group::Announcer>>,
    /// Whether the listening connection is up.
    up: Arc<AtomicBool>,
    /// Tells this process's own notifications apart from other gateways'.
    origin: String,
    /// The channel of this schema's store.
    channel: String,
}

impl Drop for PgKv {
    fn drop(&mut self) {
        for rt in [self.rt.take(), self.writer_rt.take()]
            .into_iter()
            .flatten()
        {
            rt.shutdown_background();
        }
    }
}

fn unavailable(e: impl std::fmt::Display) -> StoreError {
    StoreError::Unavailable(format!("the database: {e}"))
}

/// A failed connection or statement, with its causes (a TLS certificate the server's name does
/// not match, a refused connection, the server's own message for a statement it refused: what
/// a group's job expected and did not find, ...).
fn with_causes(e: tokio_postgres::Error) -> StoreError {
    let mut text = e.to_string();
    let mut source = std::error::Error::source(&e);
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    unavailable(text)
}

const MIGRATE_LOCK: &str = "hashtext('airlock.migrate.' || current_schema())";

impl PgKv {
    /// Connects, brings the schema up to date (refusing a newer one), and starts listening for
    /// other gateways' changes, which go to `listener` once it is set.
    pub fn open(
        options: &PgOptions,
        listener: Arc<OnceLock<ChangeListener>>,
    ) -> Result<PgKv, StoreError> {
        let config = config_of(options)?;
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("airlock-postgres")
            .enable_all()
            .build()
            .map_err(|e| StoreError::Unavailable(format!("cannot start a runtime: {e}")))?;
        let handle = rt.handle().clone();
        let writer_rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| StoreError::Unavailable(format!("cannot start a runtime: {e}")))?;
        let kv = PgKv {
            rt: Some(rt),
            handle,
            writer_rt: Some(writer_rt),
            config,
            tls: tls(options)?,
            readers: (0..READERS).map(|_| Mutex::new(None)).collect(),
            next_reader: AtomicUsize::new(0),
            writer: Mutex::new(None),
            reread: AtomicBool::new(false),
            group: Mutex::new(None),
            announcer: Arc::new(Mutex::new(group::Announcer::default())),
            up: Arc::new(AtomicBool::new(true)),
            origin: format!("{:x}", uuid::Uuid::now_v7().as_u128()),
            channel: String::new(),
        };
        let (config, tls) = (kv.config.clone(), kv.tls.clone());
        let mut kv = kv;
        let schema = kv.run(async move { migrate(&config, tls).await.map(|m| m.schema) })?;
        kv.channel = channel_of(&schema);
        kv.handle.spawn(listen(
            kv.config.clone(),
            kv.tls.clone(),
            kv.channel.clone(),
            kv.up.clone(),
            kv.origin.clone(),
            listener,
        ));
        Ok(kv)
    }

    /// Runs `fut` on the backend's runtime and waits for it on this thread (which may be an
    /// async worker of the caller's: this blocks it, as a disk read would, and never nests
    /// runtimes).
    fn run<T, F>(&self, fut: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: Future<Output = Result<T, StoreError>> + Send + 'static,
    {
        let (tx, rx) = std::sync::mpsc::sync_channel(1);
        self.handle.spawn(async move {
            let out = match tokio::time::timeout(TIMEOUT, fut).await {
                Ok(out) => out,
                Err(_) => Err(unavailable("no answer in time")),
            };
            let _ = tx.send(out);
        });
        rx.recv()
            .map_err(|_| unavailable("the connection runtime stopped"))?
    }

    /// Runs `fut`, which uses the writer's connection, on the writer's runtime, on this thread
    /// (the store's writer), blocking it until the answer. A caller inside an async runtime
    /// (a store opened from async code claims its chain) is served on a thread of its own.
    fn run_writer<T, F>(&self, fut: F) -> Result<T, StoreError>
    where
        T: Send,
        F: Future<Output = Result<T, StoreError>> + Send,
    {
        let Some(rt) = self.writer_rt.as_ref() else {
            return Err(unavailable("the connection runtime stopped"));
        };
        let run = || {
            rt.block_on(async move {
                match tokio::time::timeout(TIMEOUT, fut).await {
                    Ok(out) => out,
                    Err(_) => Err(unavailable("no answer in time")),
                }
            })
        };
        if tokio::runtime::Handle::try_current().is_err() {
            return run();
        }
        std::thread::scope(|s| {
            s.spawn(run)
                .join()
                .unwrap_or_else(|_| Err(unavailable("the connection runtime stopped")))
        })
    }

    /// Lets the writer's connection read what the database sent while no group ran.
    fn settle_writer(&self) {
        // The first yield lets the runtime poll its sockets, the second lets the connection
        // act on what they said.
        let _ = self.run_writer(async {
            tokio::task::yield_now().await;
            tokio::task::yield_now().await;
            Ok(())
        });
    }

    /// The connection in `slot`, connecting it if it is missing or closed.
    fn conn(&self, slot: &Mutex<Option<Arc<Conn>>>) -> Result<Arc<Conn>, StoreError> {
        let mut slot = slot.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(c) = slot.as_ref().filter(|c| !c.client.is_closed()) {
            return Ok(c.clone());
        }
        *slot = None;
        let (config, tls) = (self.config.clone(), self.tls.clone());
        let conn = Arc::new(self.run(async move { connect(&config, tls).await })?);
        *slot = Some(conn.clone());
        Ok(conn)
    }

    fn reader(&self) -> Result<Arc<Conn>, StoreError> {
        let i = self.next_reader.fetch_add(1, Ordering::Relaxed) % READERS;
        self.conn(&self.readers[i])
    }

    pub fn check(&self) -> Result<(), StoreError> {
        if self.up.load(Ordering::Acquire) {
            Ok(())
        } else {
            Err(unavailable("it cannot be reached; retrying"))
        }
    }

    pub fn get(&self, ks: Ks, key: &[u8]) -> Result<Option<Vec<u8>>, StoreError> {
        let c = self.reader()?;
        let key = key.to_vec();
        self.run(async move {
            let row = c
                .client
                .query_opt(&c.get, &[&ks_id(ks), &key])
                .await
                .map_err(unavailable)?;
            Ok(row.map(|r| r.get::<_, Vec<u8>>(0)))
        })
    }

    /// Up to `limit` entries of `ks` with `from <= k < to`, in key order or reversed.
    pub fn scan(
        &self,
        ks: Ks,
        from: &[u8],
        to: Option<&[u8]>,
        rev: bool,
        limit: usize,
    ) -> Result<Vec<Entry>, StoreError> {
        let c = self.reader()?;
        let from = from.to_vec();
        let to = to.map(<[u8]>::to_vec);
        let limit = limit as i64;
        self.run(async move {
            let ks = ks_id(ks);
            let rows = match (&to, rev) {
                (Some(to), false) => {
                    c.client
                        .query(&c.scan_from_to, &[&ks, &from, to, &limit])
                        .await
                }
                (Some(to), true) => {
                    c.client
                        .query(&c.scan_rev_to, &[&ks, &from, to, &limit])
                        .await
                }
                (None, false) => c.client.query(&c.scan_from, &[&ks, &from, &limit]).await,
                (None, true) => c.client.query(&c.scan_rev, &[&ks, &from, &limit]).await,
            }
            .map_err(unavailable)?;
            Ok(rows
                .into_iter()
                .map(|r| (r.get::<_, Vec<u8>>(0), r.get::<_, Vec<u8>>(1)))
                .collect())
        })
    }

    pub fn disk_space(&self) -> Result<u64, StoreError> {
        let c = self.reader()?;
        self.run(async move {
            let row = c
                .client
                .query_one("SELECT pg_total_relation_size('airlock_kv')", &[])
                .await
                .map_err(unavailable)?;
            Ok(row.get::<_, i64>(0).max(0) as u64)
        })
    }
}

fn ks_id(ks: Ks) -> i16 {
    ks.index() as i16
}

/// `bytes` as an SQL bytea literal, `E'\\x` then hex digits only (so no byte is read as SQL).
fn bytea(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(bytes.len() * 2 + 6);
    out.push_str("E'\\\\x");
    for b in bytes {
        out.push(DIGITS[(b >> 4) as usize] as char);
        out.push(DIGITS[(b & 15) as usize] as char);
    }
    out.push('\'');
    out
}

/// Lower-case or upper-case hex digits to bytes.
fn unhex(text: &str) -> Option<Vec<u8>> {
    if !text.len().is_multiple_of(2) {
        return None;
    }
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(text.get(i..i + 2)?, 16).ok())
        .collect()
}

/// The connection settings every connection uses: the URL's, with a connect timeout, the
/// application name `airlock` unless the URL names one (so an operator can tell gateways apart
/// in `pg_stat_activity`), and TCP keepalives (a database host that vanishes is noticed, not
/// waited on for ever).
fn config_of(options: &PgOptions) -> Result<tokio_postgres::Config, StoreError> {
    let mut config = tokio_postgres::Config::from_str(&options.url)
        .map_err(|e| StoreError::Unavailable(format!("the database URL is invalid: {e}")))?;
    config.connect_timeout(CONNECT_TIMEOUT);
    if config.get_application_name().is_none() {
        config.application_name("airlock");
    }
    config.keepalives(true);
    config.keepalives_idle(Duration::from_secs(10));
    Ok(config)
}

/// The notification channel of the store in `schema`: a fixed prefix and hex digits only, so
/// it is a plain identifier whatever the schema is called.
fn channel_of(schema: &str) -> String {
    use sha2::Digest;
    let digest = sha2::Sha256::digest(schema.as_bytes());
    let hex: String = digest[..8].iter().map(|b| format!("{b:02x}")).collect();
    format!("{CHANNEL_PREFIX}{hex}")
}

/// What a group writes, as one statement over arrays of rows (keyspaces, keys, values), so
/// that it is parsed once per connection and no value is ever read as SQL; the group's commit
/// is one message and one answer. In order of parameters: the keys its jobs expected to exist
/// (with what each said), of which the first missing fails the statement, and nothing is
/// called for a key that is there; the keys it created, inserted (one already there fails
/// it); the keys it overwrote, upserted; the keys it deleted; and whether its commit is lazy
/// (waits for no WAL flush). Every part sees the table as it was before the statement, and
/// no key is in two parts.
const WRITE: &str = "\
    WITH expected AS (\
        SELECT airlock_expect(false, convert_from(e.what, 'UTF8')) \
        FROM unnest($1::int2[], $2::bytea[], $3::bytea[]) AS e(ks, k, what) \
        WHERE NOT EXISTS (SELECT 1 FROM airlock_kv a WHERE a.ks = e.ks AND a.k = e.k) \
        LIMIT 1\
    ), inserted AS (\
        INSERT INTO airlock_kv (ks, k, v) \
        SELECT * FROM unnest($4::int2[], $5::bytea[], $6::bytea[])\
    ), upserted AS (\
        INSERT INTO airlock_kv (ks, k, v) \
        SELECT * FROM unnest($7::int2[], $8::bytea[], $9::bytea[]) \
        ON CONFLICT (ks, k) DO UPDATE SET v = EXCLUDED.v\
    ), deleted AS (\
        DELETE FROM airlock_kv a USING unnest($10::int2[], $11::bytea[]) AS d(ks, k) \
        WHERE a.ks = d.ks AND a.k = d.k\
    ) \
    SELECT (SELECT count(*) FROM expected), \
        CASE WHEN $12::boolean THEN set_config('synchronous_commit', 'off', true) END";

/// How every connection plans. Each prepared statement is planned once per connection (its
/// generic plan), not at each use: with a plan per use, PostgreSQL planned a group's statement
/// at every commit, which cost more CPU than the statement saved. But a generic plan made on a
/// connection opened while the table was empty (every new deployment) hashed a sequential
/// scan of it to find the keys a group deletes, and kept doing so as the table grew, so the
/// cost of a group grew with the store. Every statement here finds its rows by the primary
/// key, one key at a time; the planner is told to plan them so whatever it believes of the
/// table's size: no sequential scan where the key's index serves, no hash or merge join. A
/// test EXPLAINs every statement on an empty table and on a large one
/// (`storage/tests/pg_plans.rs`).
pub const PLAN_SETTINGS: &str = "SET plan_cache_mode = force_generic_plan; \
    SET enable_seqscan = off; SET enable_hashjoin = off; SET enable_mergejoin = off";

/// The statements every connection prepares, by name: reading one key, the four scans of a
/// key range, and a group's write ([`WRITE`]).
pub const STATEMENTS: [(&str, &str); 6] = [
    (
        "airlock_get",
        "SELECT v FROM airlock_kv WHERE ks = $1 AND k = $2",
    ),
    (
        "airlock_scan_from",
        "SELECT k, v FROM airlock_kv WHERE ks = $1 AND k >= $2 ORDER BY k LIMIT $3",
    ),
    (
        "airlock_scan_from_to",
        "SELECT k, v FROM airlock_kv WHERE ks = $1 AND k >= $2 AND k < $3 ORDER BY k LIMIT $4",
    ),
    (
        "airlock_scan_rev",
        "SELECT k, v FROM airlock_kv WHERE ks = $1 AND k >= $2 ORDER BY k DESC LIMIT $3",
    ),
    (
        "airlock_scan_rev_to",
        "SELECT k, v FROM airlock_kv WHERE ks = $1 AND k >= $2 AND k < $3 ORDER BY k DESC LIMIT $4",
    ),
    ("airlock_write", WRITE),
];

/// Connects and prepares the statements every connection uses.
async fn connect(
    config: &tokio_postgres::Config,
    tls: MakeRustlsConnect,
) -> Result<Conn, StoreError> {
    let (client, connection) = config.connect(tls).await.map_err(with_causes)?;
    tokio::spawn(connection);
    client
        .batch_execute(&format!(
            "SET idle_in_transaction_session_timeout = '{IDLE_IN_TRANSACTION}'; {PLAN_SETTINGS}"
        ))
        .await
        .map_err(unavailable)?;
    // Prepared together: one round trip.
    let prepare = |i: usize| client.prepare(STATEMENTS[i].1);
    let (get, scan_from, scan_from_to, scan_rev, scan_rev_to, write) = tokio::join!(
        prepare(0),
        prepare(1),
        prepare(2),
        prepare(3),
        prepare(4),
        prepare(5),
    );
    Ok(Conn {
        get: get.map_err(unavailable)?,
        scan_from: scan_from.map_err(unavailable)?,
        scan_from_to: scan_from_to.map_err(unavailable)?,
        scan_rev: scan_rev.map_err(unavailable)?,
        scan_rev_to: scan_rev_to.map_err(unavailable)?,
        write: write.map_err(unavailable)?,
        client,
    })
}

/// What [`migrate`] found and did.
struct Migrated {
    before: i32,
    after: i32,
    /// The schema the store's tables are in (the connection's `current_schema()`).
    schema: String,
}

/// Brings the schema up to date; returns the versions before and after. Refuses a schema
/// newer than this binary's.
async fn migrate(
    config: &tokio_postgres::Config,
    tls: MakeRustlsConnect,
) -> Result<Migrated, StoreError> {
    let (client, connection) = config.connect(tls).await.map_err(with_causes)?;
    tokio::spawn(connection);
    client
        .batch_execute(&format!(
            "SELECT pg_advisory_lock({MIGRATE_LOCK});
             CREATE TABLE IF NOT EXISTS airlock_schema (
                 id int PRIMARY KEY CHECK (id = 1),
                 version int NOT NULL
             );"
        ))
        .await
        .map_err(unavailable)?;
    let found: i32 = client
        .query_opt("SELECT version FROM airlock_schema WHERE id = 1", &[])
        .await
        .map_err(unavailable)?
        .map_or(0, |r| r.get(0));
    if found > SCHEMA_VERSION {
        return Err(StoreError::SchemaTooNew {
            found,
            supported: SCHEMA_VERSION,
        });
    }
    for (i, step) in MIGRATIONS.iter().enumerate().skip(found as usize) {
        let version = i as i32 + 1;
        client
            .batch_execute(&format!(
                "BEGIN; {step};
                 INSERT INTO airlock_schema (id, version) VALUES (1, {version})
                 ON CONFLICT (id) DO UPDATE SET version = EXCLUDED.version;
                 COMMIT;"
            ))
            .await
            .map_err(|e| {
                StoreError::Unavailable(format!(
                    "migration to schema version {version} failed: {e}"
                ))
            })?;
    }
    client
        .batch_execute(&format!("SELECT pg_advisory_unlock({MIGRATE_LOCK})"))
        .await
        .map_err(unavailable)?;
    let schema: Option<String> = client
        .query_one("SELECT current_schema()::text", &[])
        .await
        .map_err(unavailable)?
        .get(0);
    Ok(Migrated {
        before: found,
        after: SCHEMA_VERSION,
        schema: schema.unwrap_or_default(),
    })
}

/// Runs the migrations at `options.url` without opening a store (`airlock store migrate`).
/// Returns the schema versions before and after.
pub fn migrate_database(options: &PgOptions) -> Result<(i32, i32), StoreError> {
    let config = config_of(options)?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| StoreError::Unavailable(format!("cannot start a runtime: {e}")))?;
    rt.block_on(migrate(&config, tls(options)?))
        .map(|m| (m.before, m.after))
}

/// The payload announcing `change`: who sent it, and the calls and runs it touched (or `all`
/// when they do not fit).
fn notification(origin: &str, change: &Change) -> String {
    let full = serde_json::json!({
        "o": origin, "c": change.calls, "r": change.runs, "all": change.all, "a": change.audit,
        "ch": change.chain, "d": change.deadline
    });
    let text = full.to_string();
    if text.len() <= MAX_PAYLOAD {
        text
    } else {
        serde_json::json!({"o": origin, "all": true, "a": change.audit, "ch": change.chain, "d": change.deadline})
            .to_string()
    }
}

/// Reads a notification from another gateway; `None` for this process's own or an unreadable one.
fn parse_notification(origin: &str, payload: &str) -> Option<Change> {
    let v: serde_json::Value = serde_json::from_str(payload).ok()?;
    if v.get("o").and_then(serde_json::Value::as_str) == Some(origin) {
        return None;
    }
    let strings = |field: &str| -> Vec<String> {
        v.get(field)
            .and_then(serde_json::Value::as_array)
            .map(|a| {
                a.iter()
                    .filter_map(|s| s.as_str().map(str::to_owned))
                    .collect()
            })
            .unwrap_or_default()
    };
    let seq = |i: usize| v.get("a")?.get(i)?.as_u64();
    Some(Change {
        calls: strings("c"),
        runs: strings("r"),
        all: v.get("all").and_then(serde_json::Value::as_bool) == Some(true),
        audit: seq(0).zip(seq(1)),
        chain: v
            .get("ch")
            .and_then(serde_json::Value::as_str)
            .unwrap_or_default()
            .to_owned(),
        deadline: v.get("d").and_then(serde_json::Value::as_u64),
        remote: true,
    })
}

/// Keeps a connection listening for other gateways' changes, for as long as the runtime runs:
/// `up` says whether it is connected, and each (re)connection tells the listener that anything
/// may have changed while it was away.
async fn listen(
    config: tokio_postgres::Config,
    tls: MakeRustlsConnect,
    channel: String,
    up: Arc<AtomicBool>,
    origin: String,
    listener: Arc<OnceLock<ChangeListener>>,
) {
    let tell = |change: &Change| {
        if let Some(l) = listener.get() {
            l(change);
        }
    };
    loop {
        if let Ok((client, mut connection)) = config.connect(tls.clone()).await {
            let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
            let driver = tokio::spawn(async move {
                while let Some(message) =
                    std::future::poll_fn(|cx| connection.poll_message(cx)).await
                {
                    match message {
                        Ok(AsyncMessage::Notification(n)) => {
                            if tx.send(n.payload().to_owned()).is_err() {
                                break;
                            }
                        }
                        Ok(_) => {}
                        Err(_) => break,
                    }
                }
            });
            if client
                .batch_execute(&format!("LISTEN {channel}"))
                .await
                .is_ok()
            {
                up.store(true, Ordering::Release);
                tell(&Change {
                    all: true,
                    remote: true,
                    ..Change::default()
                });
                while let Some(payload) = rx.recv().await {
                    if let Some(change) = parse_notification(&origin, &payload) {
                        tell(&change);
                    }
                }
            }
            driver.abort();
        }
        up.store(false, Ordering::Release);
        tokio::time::sleep(RECONNECT).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bytea_literals_are_hex_only_and_round_trip() {
        let bytes = b"a'; DROP TABLE airlock_kv; --\\\x00\xff";
        let lit = bytea(bytes);
        assert!(lit.starts_with("E'\\\\x") && lit.ends_with('\''));
        let digits = &lit[5..lit.len() - 1];
        assert!(digits.bytes().all(|b| b.is_ascii_hexdigit()), "{lit}");
        assert_eq!(unhex(digits).as_deref(), Some(&bytes[..]));
        assert_eq!(unhex("abc"), None);
        assert_eq!(unhex("zz"), None);
    }

    #[test]
    fn notifications_round_trip_and_skip_their_sender() {
        let change = Change {
            calls: vec!["call_1".into()],
            runs: vec!["run-a".into()],
            all: false,
            audit: Some((7, 9)),
            chain: "gw-a".into(),
            deadline: Some(1_700_000_000_000),
            remote: false,
        };
        let payload = notification("me", &change);
        assert_eq!(parse_notification("me", &payload), None);
        assert_eq!(
            parse_notification("other", &payload),
            Some(Change {
                remote: true,
                ..change
            })
        );
    }

    #[test]
    fn a_change_too_long_to_send_says_anything_changed() {
        let change = Change {
            calls: (0..1000).map(|i| format!("call_{i:040}")).collect(),
            ..Change::default()
        };
        let payload = notification("me", &change);
        assert!(payload.len() <= MAX_PAYLOAD);
        let got = parse_notification("other", &payload).expect("readable");
        assert!(got.all && got.calls.is_empty());
    }
}
