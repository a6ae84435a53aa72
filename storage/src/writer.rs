//! The single writer: every state change runs here, one at a time, and is acknowledged after
//! its batch is written, and for a [`Durability::Durable`] one only after it is fsynced.
//!
//! Callers hand the writer a closure over a [`Tx`]. The writer takes whatever jobs are queued,
//! runs them in order against the store plus the writes staged so far, and writes all their
//! writes and audit records as one atomic batch to the journal (reaching the OS, so a process
//! crash keeps it). It answers the [`Durability::Lazy`] jobs then; if the group holds a
//! durable job it fsyncs the journal and only then answers those. That is group commit:
//! concurrent writers share one fsync, no durable caller is answered before it, and
//! read-modify-write (spending a grant use, chaining the audit log) is atomic because only
//! this thread writes. Lazy writes are fsynced within the flush interval, or with the next
//! durable group (the journal is one sequence, so an fsync covers everything before it).
//!
//! A job that fails leaves nothing behind: its staged writes are rolled back before the next
//! job runs. A commit that fails poisons the store: every later call is `store.unavailable`.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver, SyncSender};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use fjall::{Database, Keyspace, PersistMode};
use serde_json::{Map, Value};

use crate::audit;
use crate::error::StoreError;
use crate::keys::{self, Ks};

/// Jobs in one group commit at most.
const MAX_GROUP: usize = 512;

/// How long the writer waits for company before an fsync, when the last group had some.
const LINGER: Duration = Duration::from_micros(150);

/// What a write promises when it is acknowledged (DESIGN §13).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Durability {
    /// On disk (fsynced) before the caller hears back: decisions, approvals, grant uses.
    Durable,
    /// Written (a process crash keeps it, a power loss may not) before the caller hears back,
    /// fsynced within the flush interval: an allowed call's outcome, and in `batched` mode its
    /// decision.
    Lazy,
}

/// Where the audit chain ends: kept by the writer, the only one that extends it.
#[derive(Debug, Clone)]
pub(crate) struct ChainHead {
    pub seq: u64,
    pub hash: String,
}

/// Told the run ids that a committed group wrote audit records for (DESIGN §11 run streams).
pub type RunListener = Box<dyn Fn(&[String]) + Send + Sync>;

/// What the writer shares with readers.
pub(crate) struct Shared {
    pub db: Database,
    pub keyspaces: Vec<Keyspace>,
    /// Set when a commit failed; then nothing is served.
    pub poisoned: AtomicBool,
    pub run_listener: OnceLock<RunListener>,
}

impl Shared {
    pub fn ks(&self, ks: Ks) -> &Keyspace {
        &self.keyspaces[ks.index()]
    }

    pub fn check(&self) -> Result<(), StoreError> {
        if self.poisoned.load(Ordering::Acquire) {
            Err(StoreError::Unavailable(
                "a write failed to reach the disk; restart the gateway".into(),
            ))
        } else {
            Ok(())
        }
    }
}

/// One staged write: a value to put, or `None` to delete.
struct Staged {
    ks: Ks,
    key: Vec<u8>,
    value: Option<Vec<u8>>,
}

/// The writes of the jobs in one group, visible to the jobs that follow them.
pub struct Tx<'a> {
    shared: &'a Shared,
    staged: Vec<Staged>,
    head: ChainHead,
    /// Runs this group wrote audit records for.
    runs: Vec<String>,
}

/// A point to roll a failed job back to.
struct Savepoint {
    staged: usize,
    head: ChainHead,
    runs: usize,
}

impl Tx<'_> {
    /// Reads `key`, seeing this group's staged writes first.
    pub fn get(&self, ks: Ks, key: &[u8]) -> Result<Option<Vec<u8>>, StoreError> {
        if let Some(s) = self
            .staged
            .iter()
            .rev()
            .find(|s| s.ks == ks && s.key == key)
        {
            return Ok(s.value.clone());
        }
        Ok(self.shared.ks(ks).get(key)?.map(|v| v.to_vec()))
    }

    pub fn put(&mut self, ks: Ks, key: Vec<u8>, value: Vec<u8>) {
        self.staged.push(Staged {
            ks,
            key,
            value: Some(value),
        });
    }

    pub fn delete(&mut self, ks: Ks, key: Vec<u8>) {
        self.staged.push(Staged {
            ks,
            key,
            value: None,
        });
    }

    /// Keys of `ks` from the start up to and including `end`, oldest first, as committed (the
    /// caller re-reads each with [`Tx::get`] to see this group's writes).
    pub fn committed_keys_until(
        &self,
        ks: Ks,
        end: &[u8],
        limit: usize,
    ) -> Result<Vec<Vec<u8>>, StoreError> {
        let mut keys = Vec::new();
        for guard in self.shared.ks(ks).range(..=end.to_vec()).take(limit) {
            keys.push(guard.key()?.to_vec());
        }
        Ok(keys)
    }

    /// Keys of `ks` from `start` on, oldest first, as committed.
    pub fn committed_keys_from(
        &self,
        ks: Ks,
        start: &[u8],
        limit: usize,
    ) -> Result<Vec<Vec<u8>>, StoreError> {
        let mut keys = Vec::new();
        for guard in self.shared.ks(ks).range(start.to_vec()..).take(limit) {
            keys.push(guard.key()?.to_vec());
        }
        Ok(keys)
    }

    /// Whether `key` exists in `ks`, seeing staged writes.
    pub fn exists(&self, ks: Ks, key: &[u8]) -> Result<bool, StoreError> {
        Ok(self.get(ks, key)?.is_some())
    }

    /// Appends an audit record in this same atomic batch; returns its seq.
    /// A record that names a run (`run_id`, or `context.run_id`) is also indexed under it,
    /// for the run's event stream.
    pub fn audit(&mut self, ts: u64, kind: &str, fields: Map<String, Value>) -> u64 {
        let seq = self.head.seq + 1;
        let run = fields
            .get("run_id")
            .or_else(|| fields.get("context").and_then(|c| c.get("run_id")))
            .and_then(Value::as_str)
            .map(str::to_owned);
        let (bytes, hash) = audit::seal(seq, &self.head.hash, ts, kind, fields);
        self.put(Ks::Audit, seq.to_be_bytes().to_vec(), bytes);
        if let Some(run) = run {
            self.put(
                Ks::ApprovalIndex,
                keys::run_event_key(&run, seq),
                Vec::new(),
            );
            self.runs.push(run);
        }
        self.head = ChainHead { seq, hash };
        seq
    }

    fn savepoint(&self) -> Savepoint {
        Savepoint {
            staged: self.staged.len(),
            head: self.head.clone(),
            runs: self.runs.len(),
        }
    }

    fn rollback(&mut self, sp: Savepoint) {
        self.staged.truncate(sp.staged);
        self.head = sp.head;
        self.runs.truncate(sp.runs);
    }
}

/// A queued job: runs against the group's [`Tx`], and returns what answers its caller once the
/// group's commit result is known.
type Finish = Box<dyn FnOnce(Result<(), StoreError>) + Send>;
type Job = (Durability, Box<dyn FnOnce(&mut Tx<'_>) -> Finish + Send>);

/// The handle callers submit jobs through. Dropping it stops the writer after the jobs
/// already queued, and waits for it, so the database is closed when the last handle is gone.
pub(crate) struct Writer {
    jobs: Option<SyncSender<Job>>,
    shared: Arc<Shared>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Drop for Writer {
    fn drop(&mut self) {
        self.jobs.take();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

impl Writer {
    /// Starts the writer thread, continuing the chain from `head`; lazy writes are fsynced
    /// within `flush_interval`.
    pub fn start(
        shared: Arc<Shared>,
        head: ChainHead,
        flush_interval: Duration,
    ) -> Result<Writer, StoreError> {
        let (jobs, rx) = mpsc::sync_channel::<Job>(4096);
        let thread_shared = shared.clone();
        let thread = std::thread::Builder::new()
            .name("airlock-store-writer".into())
            .spawn(move || run(&thread_shared, rx, head, flush_interval))
            .map_err(|e| StoreError::Unavailable(format!("cannot start the writer: {e}")))?;
        Ok(Writer {
            jobs: Some(jobs),
            shared,
            thread: Some(thread),
        })
    }

    /// Runs `f` on the writer and returns its result once it is durable.
    pub fn submit<T, F>(&self, f: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: FnOnce(&mut Tx<'_>) -> Result<T, StoreError> + Send + 'static,
    {
        self.submit_with(Durability::Durable, f)
    }

    /// Runs `f` on the writer and returns its result once it is as durable as `durability`
    /// promises.
    pub fn submit_with<T, F>(&self, durability: Durability, f: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: FnOnce(&mut Tx<'_>) -> Result<T, StoreError> + Send + 'static,
    {
        let (tx, rx) = mpsc::sync_channel(1);
        self.enqueue(durability, f, move |r| {
            let _ = tx.send(r);
        })?;
        rx.recv().map_err(|_| stopped())?
    }

    /// [`Writer::submit_with`] for async callers: the job is queued now, and the returned
    /// future resolves when its result is as durable as `durability` promises. No thread
    /// waits for it: the writer wakes the caller's task.
    pub fn submit_async<T, F>(
        &self,
        durability: Durability,
        f: F,
    ) -> impl std::future::Future<Output = Result<T, StoreError>> + Send + 'static
    where
        T: Send + 'static,
        F: FnOnce(&mut Tx<'_>) -> Result<T, StoreError> + Send + 'static,
    {
        let (tx, rx) = tokio::sync::oneshot::channel();
        let queued = self.enqueue(durability, f, move |r| {
            let _ = tx.send(r);
        });
        async move {
            queued?;
            rx.await.map_err(|_| stopped())?
        }
    }

    /// Queues `f`; `answer` gets its result once the group it ran in is committed.
    fn enqueue<T, F, A>(&self, durability: Durability, f: F, answer: A) -> Result<(), StoreError>
    where
        T: Send + 'static,
        F: FnOnce(&mut Tx<'_>) -> Result<T, StoreError> + Send + 'static,
        A: FnOnce(Result<T, StoreError>) + Send + 'static,
    {
        self.shared.check()?;
        let job: Job = (
            durability,
            Box::new(move |t: &mut Tx<'_>| {
                let sp = t.savepoint();
                let out = f(t);
                if out.is_err() {
                    t.rollback(sp);
                }
                Box::new(move |commit: Result<(), StoreError>| answer(commit.and(out))) as Finish
            }),
        );
        self.jobs
            .as_ref()
            .ok_or_else(stopped)?
            .send(job)
            .map_err(|_| stopped())
    }
}

fn stopped() -> StoreError {
    StoreError::Unavailable("the writer has stopped".into())
}

fn run(shared: &Shared, rx: Receiver<Job>, mut head: ChainHead, flush_interval: Duration) {
    let mut last_group = 1;
    // Lazy writes not yet fsynced, and since when.
    let mut unsynced: Option<Instant> = None;
    loop {
        let first = match unsynced {
            None => match rx.recv() {
                Ok(job) => job,
                Err(_) => break,
            },
            Some(since) => {
                let wait = (since + flush_interval).saturating_duration_since(Instant::now());
                match rx.recv_timeout(wait) {
                    Ok(job) => job,
                    Err(mpsc::RecvTimeoutError::Timeout) => {
                        if sync(shared).is_ok() {
                            unsynced = None;
                        }
                        continue;
                    }
                    Err(mpsc::RecvTimeoutError::Disconnected) => break,
                }
            }
        };
        let mut group = vec![first];
        // Writers that were answered together come back together: when the last group had
        // company, wait a moment for as many, so they share one fsync instead of splitting
        // into a group of one and a group of the rest. A lone writer never waits.
        let deadline = Instant::now() + LINGER;
        while group.len() < MAX_GROUP {
            match rx.try_recv() {
                Ok(job) => group.push(job),
                Err(_) if group.len() < last_group => {
                    let now = Instant::now();
                    if now >= deadline {
                        break;
                    }
                    match rx.recv_timeout(deadline - now) {
                        Ok(job) => group.push(job),
                        Err(_) => break,
                    }
                }
                Err(_) => break,
            }
        }
        last_group = group.len();
        let mut tx = Tx {
            shared,
            staged: Vec::new(),
            head: head.clone(),
            runs: Vec::new(),
        };
        let mut lazy = Vec::new();
        let mut durable = Vec::new();
        for (d, job) in group {
            let finish = job(&mut tx);
            match d {
                Durability::Lazy => lazy.push(finish),
                Durability::Durable => durable.push(finish),
            }
        }
        let wrote = !tx.staged.is_empty();
        let written = commit(shared, std::mem::take(&mut tx.staged));
        let told = written.is_ok();
        if written.is_ok() {
            head = tx.head;
        } else {
            shared.poisoned.store(true, Ordering::Release);
        }
        for finish in lazy {
            finish(written.clone());
        }
        let synced = if durable.is_empty() {
            if wrote {
                unsynced = unsynced.or(Some(Instant::now()));
            }
            written
        } else if !wrote && unsynced.is_none() {
            // Nothing written by this group and nothing waiting for an fsync (an expiry sweep
            // that found nothing, a refused change): everything committed is already on disk.
            written
        } else {
            // INVARIANT: a durable caller hears back only after this fsync, which also covers
            // every lazy write before it in the journal.
            let r = written.and_then(|()| sync(shared));
            if r.is_ok() {
                unsynced = None;
            }
            r
        };
        for finish in durable {
            finish(synced.clone());
        }
        if told && !tx.runs.is_empty() {
            if let Some(listener) = shared.run_listener.get() {
                tx.runs.sort_unstable();
                tx.runs.dedup();
                listener(&tx.runs);
            }
        }
    }
    if unsynced.is_some() {
        let _ = sync(shared);
    }
}

/// Writes the staged batch to the journal, flushed to the OS (no fsync).
fn commit(shared: &Shared, staged: Vec<Staged>) -> Result<(), StoreError> {
    shared.check()?;
    if staged.is_empty() {
        return Ok(());
    }
    let mut batch = shared.db.batch().durability(Some(PersistMode::Buffer));
    for s in staged {
        match s.value {
            Some(v) => batch.insert(shared.ks(s.ks), s.key, v),
            None => batch.remove(shared.ks(s.ks), s.key),
        }
    }
    batch.commit().map_err(StoreError::from)
}

/// Fsyncs the journal; a failure poisons the store.
fn sync(shared: &Shared) -> Result<(), StoreError> {
    shared.check()?;
    shared.db.persist(PersistMode::SyncAll).map_err(|e| {
        shared.poisoned.store(true, Ordering::Release);
        StoreError::from(e)
    })
}
