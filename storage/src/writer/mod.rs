//! The single writer: every state change runs here, one at a time, and is acknowledged after
//! its group is committed, and for a [`Durability::Durable`] one only after it is durable.
//!
//! Callers hand the writer a closure over a [`Tx`]. The writer takes whatever jobs are queued,
//! runs them in order against the store plus the writes staged so far, and commits all their
//! writes and audit records as one atomic group through the [`Backend`]. With fjall the batch
//! reaches the journal (a process crash keeps it) and the [`Durability::Lazy`] jobs are answered;
//! if the group holds a durable job the journal is fsynced and only then are those answered.
//! With PostgreSQL the group is one transaction that locks each key its jobs read (see
//! [`crate::kv::postgres`]), committed synchronously when it holds a durable job. That is
//! group commit: concurrent writers share one fsync, no durable caller is answered before it,
//! and read-modify-write (spending a grant use) is atomic because what a job reads no other
//! writer changes before the group commits. The audit chain the writer extends is its own
//! (one per gateway, DESIGN §17): only it appends to it. Lazy writes are fsynced within the flush interval, or with the
//! next durable group (the journal is one sequence, so an fsync covers everything before it).
//!
//! A job submitted from async code by a request that is alone in the gateway (an allowed
//! call's decision and outcome) may instead run at once on its caller's thread, when the store
//! is fjall and the writer is idle: the same rules, under the same lock ([`Core`]), minus two
//! thread hand-offs; a durable one is fsynced there too. With company, jobs go to the writer,
//! where a group shares one journal write and one fsync.
//!
//! A job that fails leaves nothing behind: its staged writes are rolled back before the next
//! job runs. A fjall commit that fails poisons the store: every later call is
//! `store.unavailable`. A PostgreSQL group that fails is answered `store.unavailable` and the
//! next one starts afresh.

use std::sync::mpsc::{self, SyncSender};
use std::sync::{Arc, Mutex, OnceLock, TryLockError};
use std::time::{Duration, Instant};

use serde_json::{Map, Value};

use crate::audit;
use crate::error::StoreError;
use crate::keys::{self, Ks};
use crate::kv::{Backend, Change, ChangeListener, Expect, Staged};

mod thread;
use thread::{run, sync};

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
    /// The last record's `ts`: no record after it carries an earlier one.
    pub ts: u64,
}

/// What whoever writes must hold: the chain's head, and what is written but not yet fsynced.
/// The writer thread holds it for each group; a lone request's write may take it on its
/// caller's thread when nobody else has it (see [`Writer::submit_async`]).
struct Core {
    head: ChainHead,
    /// Since when lazy writes have waited for an fsync.
    unsynced: Option<Instant>,
    /// Commits that wrote something, counted: an fsync clears `unsynced` only if no commit
    /// came in while it ran.
    commits: u64,
    /// Fsyncs done, counted (by the tests: none is spent on what is already on disk).
    syncs: u64,
    /// Whether the writer thread waits for jobs with no timeout: then a lazy write on another
    /// thread must wake it to keep time for the fsync. While it waits with a timeout (for one
    /// flush interval after any work) it checks by itself, and nobody pays for a wake-up.
    sleeping: bool,
}

fn lock(core: &Mutex<Core>) -> std::sync::MutexGuard<'_, Core> {
    core.lock().unwrap_or_else(|e| e.into_inner())
}

/// What the writer shares with readers.
pub(crate) struct Shared {
    pub backend: Backend,
    /// Told what each commit changed (and, with PostgreSQL, what other gateways' did).
    pub listener: Arc<OnceLock<ChangeListener>>,
    /// This gateway's name among those sharing the database ([`crate::StoreOptions::instance`]).
    pub instance: String,
    /// The audit chain this writer appends to: the instance's name, or `local` (DESIGN §17).
    pub chain: String,
}

impl Shared {
    pub fn check(&self) -> Result<(), StoreError> {
        self.backend.check()
    }

    /// Tells the listener what a commit changed, if it changed anything.
    fn tell(&self, change: &Change) {
        if !change.is_empty() {
            if let Some(listener) = self.listener.get() {
                listener(change);
            }
        }
    }
}

/// The writes of the jobs in one group, visible to the jobs that follow them.
pub struct Tx<'a> {
    shared: &'a Shared,
    staged: Vec<Staged>,
    /// Keys the jobs expect to exist, checked when the group commits (PostgreSQL).
    expects: Vec<Expect>,
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
    expects: usize,
    head: ChainHead,
    runs: usize,
}

impl<'a> Tx<'a> {
    /// A group starting after `head`; `failed` says why it could not begin, if it could not.
    fn new(shared: &'a Shared, head: &ChainHead, failed: Option<StoreError>) -> Tx<'a> {
        Tx {
            shared,
            staged: Vec::new(),
            expects: Vec::new(),
            first_seq: head.seq + 1,
            head: head.clone(),
            runs: Vec::new(),
            failed,
        }
    }

    /// Reads `key`, seeing this group's staged writes first. With PostgreSQL the key stays
    /// locked until the group ends ([`Backend::group_get`]): what a job reads, no other
    /// gateway changes before this group commits.
    pub fn get(&self, ks: Ks, key: &[u8]) -> Result<Option<Vec<u8>>, StoreError> {
        if let Some(value) = self.staged_value(ks, key) {
            return Ok(value);
        }
        if let Some(e) = &self.failed {
            return Err(e.clone());
        }
        self.shared.backend.group_get(ks, key)
    }

    /// The last value this group staged for `key`, if it staged one (`Some(None)`: deleted).
    fn staged_value(&self, ks: Ks, key: &[u8]) -> Option<Option<Vec<u8>>> {
        self.staged
            .iter()
            .rev()
            .find(|s| s.ks == ks && s.key == key)
            .map(|s| s.value.clone())
    }

    pub fn put(&mut self, ks: Ks, key: Vec<u8>, value: Vec<u8>) {
        self.staged.push(Staged {
            ks,
            key,
            value: Some(value),
            new: false,
        });
    }

    /// Writes `key`, which must not exist yet; false (and nothing written) when it is known to
    /// exist. fjall reads it now; PostgreSQL inserts it at commit, where a key that exists
    /// after all fails the whole group (for keys made unique by construction, such as a new
    /// call's id, so that creating one costs no round trip).
    pub fn create(&mut self, ks: Ks, key: Vec<u8>, value: Vec<u8>) -> Result<bool, StoreError> {
        let exists = match self.staged_value(ks, &key) {
            Some(staged) => staged.is_some(),
            None if self.checks_now() => self.get(ks, &key)?.is_some(),
            None => false,
        };
        if exists {
            return Ok(false);
        }
        self.staged.push(Staged {
            ks,
            key,
            value: Some(value),
            new: true,
        });
        Ok(true)
    }

    /// Whether `key` exists, for a job that needs no lock on it (its writer is the only one
    /// that changes it): fjall reads it now; PostgreSQL assumes it does and checks at commit,
    /// where a missing key fails the whole group with `what`.
    pub fn expect(&mut self, ks: Ks, key: &[u8], what: &str) -> Result<bool, StoreError> {
        if let Some(staged) = self.staged_value(ks, key) {
            return Ok(staged.is_some());
        }
        if self.checks_now() {
            return Ok(self.get(ks, key)?.is_some());
        }
        self.expects.push(Expect {
            ks,
            key: key.to_vec(),
            what: what.to_owned(),
        });
        Ok(true)
    }

    /// Whether checks are made at once (one writer: fjall) or at commit (PostgreSQL).
    fn checks_now(&self) -> bool {
        matches!(self.shared.backend, Backend::Fjall(_)) || self.failed.is_some()
    }

    pub fn delete(&mut self, ks: Ks, key: Vec<u8>) {
        self.staged.push(Staged {
            ks,
            key,
            value: None,
            new: false,
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
        self.committed_keys_between(ks, &[], end, limit)
    }

    /// Keys of `ks` from `from` up to and including `end`, in order, as committed.
    pub fn committed_keys_between(
        &self,
        ks: Ks,
        from: &[u8],
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
            .iter(ks, from.to_vec(), Some(past_end), false)
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
    pub fn audit(&mut self, ts: u64, kind: audit::Kind, fields: Map<String, Value>) -> u64 {
        let seq = self.head.seq + 1;
        // INVARIANT: time never goes back within a chain. A record whose time was taken before
        // its predecessor's was appended (two requests racing to the writer) carries its
        // predecessor's time, so an export ordered by time, chain and seq keeps chain order.
        let ts = ts.max(self.head.ts);
        let run = fields
            .get("run_id")
            .or_else(|| fields.get("context").and_then(|c| c.get("run_id")))
            .and_then(Value::as_str)
            .map(str::to_owned);
        let chain = &self.shared.chain;
        let (bytes, hash) = audit::seal(chain, seq, &self.head.hash, ts, kind, fields);
        self.staged.push(Staged {
            ks: Ks::Audit,
            key: keys::audit_key(chain, seq),
            value: Some(bytes),
            new: true,
        });
        if let Some(run) = run {
            self.put(
                Ks::ApprovalIndex,
                keys::run_event_key(&run, chain, seq),
                Vec::new(),
            );
            self.runs.push(run);
        }
        self.head = ChainHead { seq, hash, ts };
        seq
    }

    /// The name of the gateway this writer belongs to.
    pub fn instance(&self) -> &str {
        &self.shared.instance
    }

    /// What this group changed: the calls it wrote, the runs it wrote audit records for, the
    /// earliest expiry it scheduled.
    fn change(&self) -> Change {
        let mut calls: Vec<String> = self
            .staged
            .iter()
            .filter(|s| s.ks == Ks::Calls || s.ks == Ks::CallEnds)
            .map(|s| String::from_utf8_lossy(&s.key).into_owned())
            .collect();
        calls.sort_unstable();
        calls.dedup();
        let mut runs = self.runs.clone();
        runs.sort_unstable();
        runs.dedup();
        let deadline = self
            .staged
            .iter()
            .filter(|s| s.ks == Ks::Expiry && s.value.is_some())
            .filter_map(|s| keys::split_timed(&s.key).map(|(at, _)| at))
            .min();
        Change {
            calls,
            runs,
            all: false,
            audit: (self.head.seq >= self.first_seq).then_some((self.first_seq, self.head.seq)),
            chain: self.shared.chain.clone(),
            deadline,
            remote: false,
        }
    }

    fn savepoint(&self) -> Savepoint {
        Savepoint {
            staged: self.staged.len(),
            expects: self.expects.len(),
            head: self.head.clone(),
            runs: self.runs.len(),
        }
    }

    fn rollback(&mut self, sp: Savepoint) {
        self.staged.truncate(sp.staged);
        self.expects.truncate(sp.expects);
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
    core: Arc<Mutex<Core>>,
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
        let core = Arc::new(Mutex::new(Core {
            head,
            unsynced: None,
            commits: 0,
            syncs: 0,
            sleeping: false,
        }));
        let (thread_shared, thread_core) = (shared.clone(), core.clone());
        let thread = std::thread::Builder::new()
            .name("airlock-store-writer".into())
            .spawn(move || run(&thread_shared, rx, &thread_core, flush_interval))
            .map_err(|e| StoreError::Unavailable(format!("cannot start the writer: {e}")))?;
        Ok(Writer {
            jobs: Some(jobs),
            shared,
            core,
            thread: Some(thread),
        })
    }

    /// Continues the chain from `head` (after records were moved into it at open).
    pub fn restart_chain_at(&self, head: ChainHead) {
        lock(&self.core).head = head;
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

    /// [`Writer::submit_with`] for async callers: the returned future resolves when the
    /// result is as durable as `durability` promises. No thread waits for it: the writer wakes
    /// the caller's task. When the caller says it is `alone` (no other request is being
    /// served) and the store is fjall with the writer idle, the write is done at once on the
    /// caller's thread instead, sparing the two thread hand-offs a queued job costs: a lazy one
    /// waits for no fsync, and a durable one has no fsync to share, so the caller's thread
    /// waits for it itself, which costs less than the two wake-ups. With company, writes go to
    /// the writer, whose groups share one journal write and one fsync.
    pub fn submit_async<T, F>(
        &self,
        durability: Durability,
        alone: bool,
        f: F,
    ) -> impl std::future::Future<Output = Result<T, StoreError>> + Send + 'static
    where
        T: Send + 'static,
        F: FnOnce(&mut Tx<'_>) -> Result<T, StoreError> + Send + 'static,
    {
        let done = match durability {
            Durability::Lazy if alone => self.try_inline(f, false),
            Durability::Lazy => Err(f),
            Durability::Durable if alone => self.try_inline(f, true),
            Durability::Durable => Err(f),
        };
        // `Ok`: a receiver to wait on; `Err`: the result, already there.
        let waiting = match done {
            Ok(result) => Err(result),
            Err(f) => {
                let (tx, rx) = tokio::sync::oneshot::channel();
                self.enqueue(durability, f, move |r| {
                    let _ = tx.send(r);
                })
                .map(|()| rx)
                .map_err(Err)
            }
        };
        async move {
            match waiting {
                Ok(rx) => rx.await.map_err(|_| stopped())?,
                Err(result) => result,
            }
        }
    }

    /// Runs a job now, on this thread, if the store is fjall and nobody holds the writer's
    /// core (else hands `f` back to be queued). Same rules as a group of one: the job runs
    /// against committed state, its writes and audit records are committed as one batch. A
    /// `durable` one is fsynced here, after the core is let go (as the writer does); a lazy
    /// one within the flush interval (the writer thread is told to keep time).
    fn try_inline<T, F>(&self, f: F, durable: bool) -> Result<Result<T, StoreError>, F>
    where
        F: FnOnce(&mut Tx<'_>) -> Result<T, StoreError>,
    {
        if !matches!(self.shared.backend, Backend::Fjall(_)) {
            return Err(f);
        }
        let mut core = match self.core.try_lock() {
            Ok(core) => core,
            Err(TryLockError::Poisoned(p)) => p.into_inner(),
            Err(TryLockError::WouldBlock) => return Err(f),
        };
        if let Err(e) = self.shared.check() {
            return Ok(Err(e));
        }
        let mut tx = Tx::new(&self.shared, &core.head, None);
        let out = match f(&mut tx) {
            Ok(out) => out,
            Err(e) => return Ok(Err(e)),
        };
        let wrote = !tx.staged.is_empty();
        let change = tx.change();
        if let Err(e) =
            self.shared
                .backend
                .commit(std::mem::take(&mut tx.staged), &[], false, &change)
        {
            return Ok(Err(e));
        }
        core.head = tx.head;
        let mut tell_writer = false;
        let needs_sync = durable && (wrote || core.unsynced.is_some());
        if wrote {
            core.commits += 1;
            tell_writer = core.unsynced.is_none() && core.sleeping;
            core.unsynced = core.unsynced.or(Some(Instant::now()));
        }
        drop(core);
        if needs_sync {
            // INVARIANT: a durable caller hears back only after this fsync.
            if let Err(e) = sync(&self.shared, &self.core) {
                return Ok(Err(e));
            }
            // A lazy write that came in meanwhile saw something waiting for an fsync and
            // left the writer asleep: it must keep time for that write now.
            let held = lock(&self.core);
            tell_writer = held.unsynced.is_some() && held.sleeping;
        }
        if tell_writer {
            // An empty job: the writer wakes, sees what waits for an fsync, and keeps time.
            if let Some(jobs) = &self.jobs {
                let _ = jobs.try_send((
                    Durability::Lazy,
                    Box::new(|_: &mut Tx<'_>| Box::new(|_| {}) as Finish),
                ));
            }
        }
        self.shared.tell(&change);
        Ok(Ok(out))
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

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use crate::{Store, StoreOptions};

    /// Runs `submit_async` to its end on a one-thread runtime; returns the thread the job ran
    /// on and whether anything was left waiting for an fsync.
    fn job_thread(store: &Store, durability: Durability, alone: bool) -> (bool, bool) {
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let here = std::thread::current().id();
        let ran_here = rt
            .block_on(store.writer.submit_async(durability, alone, move |tx| {
                tx.put(Ks::Calls, b"k".to_vec(), b"v".to_vec());
                Ok(std::thread::current().id() == here)
            }))
            .unwrap();
        (ran_here, lock(&store.writer.core).unsynced.is_some())
    }

    #[test]
    fn lazy_writes_are_fsynced_within_the_interval_and_not_again_after_a_durable_one() {
        let dir = tempfile::tempdir().unwrap();
        let interval = Duration::from_millis(50);
        let store = Store::open(
            dir.path(),
            StoreOptions {
                flush_interval: interval,
                ..StoreOptions::default()
            },
        )
        .unwrap();
        let syncs = || lock(&store.writer.core).syncs;
        // Lone calls, as the allow path writes them: a durable decision (fsynced on the
        // caller's thread), then a lazy outcome, which the next decision's fsync covers.
        // Over six intervals the writer thread adds no fsync of its own (one is let pass for
        // a machine that stalls a whole interval between two writes; it used to add one per
        // interval).
        let before = syncs();
        let start = Instant::now();
        let mut durable = 0;
        while start.elapsed() < interval * 6 {
            job_thread(&store, Durability::Durable, true);
            durable += 1;
            job_thread(&store, Durability::Lazy, true);
            std::thread::sleep(Duration::from_millis(2));
        }
        let extra = syncs() - before - durable;
        assert!(extra <= 1, "{extra} fsyncs of what was already on disk");
        // The last lazy write has nothing after it: the writer fsyncs it within the interval.
        let waited = Instant::now();
        while lock(&store.writer.core).unsynced.is_some() {
            assert!(
                waited.elapsed() < interval * 10,
                "the lazy write was never fsynced"
            );
            std::thread::sleep(Duration::from_millis(1));
        }
        assert_eq!(syncs() - before, durable + extra + 1);
    }

    #[test]
    fn a_write_alone_is_done_on_its_callers_thread_and_with_company_by_the_writer() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path(), StoreOptions::default()).unwrap();
        // A lone write runs here only while the writer thread holds nothing (it may still be
        // busy right after the open, or on a loaded machine): wait for it to be idle, then
        // look. A lone write that kept going to the writer would never pass.
        let alone = |durability| {
            let mut seen = job_thread(&store, durability, true);
            for _ in 0..100 {
                if seen.0 {
                    break;
                }
                std::thread::sleep(Duration::from_millis(20));
                seen = job_thread(&store, durability, true);
            }
            seen
        };
        // Alone: done here, and nothing is left waiting for an fsync.
        assert_eq!(alone(Durability::Durable), (true, false));
        // With company: queued to the writer thread, which fsyncs before answering.
        assert_eq!(
            job_thread(&store, Durability::Durable, false),
            (false, false)
        );
        // A lazy write alone is done here and waits for the writer's fsync within the
        // interval; with company it is queued to the writer.
        assert_eq!(alone(Durability::Lazy), (true, true));
        assert!(!job_thread(&store, Durability::Lazy, false).0);
        assert_eq!(alone(Durability::Lazy), (true, true));
        // A durable write alone covers it too.
        assert_eq!(alone(Durability::Durable), (true, false));
    }
}
