//! The single writer: every state change runs here, one at a time, and is acknowledged after
//! its group is committed, and for a [`Durability::Durable`] one only after it is durable.
//!
//! Callers hand the writer a closure over a [`Tx`]. The writer takes whatever jobs are queued,
//! runs them in order against the store plus the writes staged so far, and commits all their
//! writes and audit records as one atomic group through the [`Backend`]. With fjall the batch
//! reaches the journal (a process crash keeps it) and the [`Durability::Lazy`] jobs are answered;
//! if the group holds a durable job the journal is fsynced and only then are those answered.
//! With PostgreSQL the group is one transaction under a lock every gateway's writer takes
//! (see [`crate::kv::postgres`]), committed synchronously when it holds a durable job. That is
//! group commit: concurrent writers share one fsync, no durable caller is answered before it,
//! and read-modify-write (spending a grant use, chaining the audit log) is atomic because only
//! one writer writes at a time. Lazy writes are fsynced within the flush interval, or with the
//! next durable group (the journal is one sequence, so an fsync covers everything before it).
//!
//! A job that fails leaves nothing behind: its staged writes are rolled back before the next
//! job runs. A fjall commit that fails poisons the store: every later call is
//! `store.unavailable`. A PostgreSQL group that fails is answered `store.unavailable` and the
//! next one starts afresh.

use std::sync::mpsc::{self, Receiver, SyncSender};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use serde_json::{Map, Value};

use crate::audit;
use crate::error::StoreError;
use crate::keys::{self, Ks};
use crate::kv::{Backend, Change, ChangeListener, Staged};

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

/// What the writer shares with readers.
pub(crate) struct Shared {
    pub backend: Backend,
    /// Told what each commit changed (and, with PostgreSQL, what other gateways' did).
    pub listener: Arc<OnceLock<ChangeListener>>,
    /// This gateway's name among those sharing the database ([`crate::StoreOptions::instance`]).
    pub instance: String,
}

impl Shared {
    pub fn check(&self) -> Result<(), StoreError> {
        self.backend.check()
    }
}

/// The writes of the jobs in one group, visible to the jobs that follow them.
pub struct Tx<'a> {
    shared: &'a Shared,
    staged: Vec<Staged>,
    head: ChainHead,
    /// Runs this group wrote audit records for.
    runs: Vec<String>,
    /// Why the group could not begin: then every read fails, and nothing is committed.
    failed: Option<StoreError>,
    /// The seq the group's first audit record gets.
    first_seq: u64,
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
        if let Some(e) = &self.failed {
            return Err(e.clone());
        }
        self.shared.backend.get(ks, key)
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
        if let Some(e) = &self.failed {
            return Err(e.clone());
        }
        let mut past_end = end.to_vec();
        past_end.push(0);
        self.shared
            .backend
            .iter(ks, Vec::new(), Some(past_end), false)
            .take(limit)
            .map(|e| e.map(|(k, _)| k))
            .collect()
    }

    /// Keys of `ks` from `start` on, oldest first, as committed.
    pub fn committed_keys_from(
        &self,
        ks: Ks,
        start: &[u8],
        limit: usize,
    ) -> Result<Vec<Vec<u8>>, StoreError> {
        if let Some(e) = &self.failed {
            return Err(e.clone());
        }
        self.shared
            .backend
            .iter(ks, start.to_vec(), None, false)
            .take(limit)
            .map(|e| e.map(|(k, _)| k))
            .collect()
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

    /// The name of the gateway this writer belongs to.
    pub fn instance(&self) -> &str {
        &self.shared.instance
    }

    /// What this group changed: the calls it wrote, the runs it wrote audit records for.
    fn change(&self) -> Change {
        let mut calls: Vec<String> = self
            .staged
            .iter()
            .filter(|s| s.ks == Ks::Calls)
            .map(|s| String::from_utf8_lossy(&s.key).into_owned())
            .collect();
        calls.sort_unstable();
        calls.dedup();
        let mut runs = self.runs.clone();
        runs.sort_unstable();
        runs.dedup();
        Change {
            calls,
            runs,
            all: false,
            audit: (self.head.seq >= self.first_seq).then_some((self.first_seq, self.head.seq)),
            remote: false,
        }
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
                        if shared.backend.sync().is_ok() {
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
        // With PostgreSQL, other gateways may have extended the chain since this writer's last
        // group: the head is re-read under the group's lock.
        let begun = shared.backend.begin().and_then(|last| {
            if let Some(last) = last {
                head = crate::head_of(last)?;
            }
            Ok(())
        });
        let mut tx = Tx {
            shared,
            staged: Vec::new(),
            first_seq: head.seq + 1,
            head: head.clone(),
            runs: Vec::new(),
            failed: begun.err(),
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
        let change = tx.change();
        let written = match tx.failed.take() {
            Some(e) => {
                shared.backend.abandon();
                Err(e)
            }
            None => {
                shared
                    .backend
                    .commit(std::mem::take(&mut tx.staged), !durable.is_empty(), &change)
            }
        };
        if written.is_ok() {
            head = tx.head;
        }
        for finish in lazy {
            finish(written.clone());
        }
        let synced = if durable.is_empty() {
            if wrote {
                unsynced = unsynced.or(Some(Instant::now()));
            }
            written.clone()
        } else if !wrote && unsynced.is_none() {
            // Nothing written by this group and nothing waiting for an fsync (an expiry sweep
            // that found nothing, a refused change): everything committed is already on disk.
            written.clone()
        } else {
            // INVARIANT: a durable caller hears back only after this fsync, which also covers
            // every lazy write before it in the journal.
            let r = written.clone().and_then(|()| shared.backend.sync());
            if r.is_ok() {
                unsynced = None;
            }
            r
        };
        for finish in durable {
            finish(synced.clone());
        }
        if written.is_ok() && !change.is_empty() {
            if let Some(listener) = shared.listener.get() {
                listener(&change);
            }
        }
    }
    if unsynced.is_some() {
        let _ = shared.backend.sync();
    }
}
