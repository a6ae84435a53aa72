//! The writer's thread: it waits for jobs (lingering briefly for company when the last group
//! had some), gathers what is queued into one group (at most [`MAX_GROUP`] jobs), commits the
//! group through the backend, fsyncs it when it holds a durable job or the flush interval has
//! passed, and answers each job. What a group is and what a job may do are [`super`]'s.

use std::sync::mpsc::{self, Receiver};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::error::StoreError;
use crate::keys;

use super::{lock, Core, Durability, Job, Shared, Tx, LINGER, MAX_GROUP};

pub(super) fn run(
    shared: &Shared,
    rx: Receiver<Job>,
    core: &Mutex<Core>,
    flush_interval: Duration,
) {
    let mut last_group = 1;
    // Whether there was work within the last flush interval.
    let mut active = false;
    loop {
        let first = match next_job(shared, &rx, core, flush_interval, active) {
            Waited::Job(job) => job,
            Waited::Quiet => {
                active = false;
                continue;
            }
            Waited::Stopped => break,
        };
        active = true;
        let group = gather(&rx, first, last_group);
        last_group = group.len();
        commit_group(shared, core, group);
    }
    if lock(core).unsynced.is_some() {
        let _ = sync(shared, core);
    }
    shared.backend.announce(true);
}

/// What the writer got while it waited for work.
enum Waited {
    Job(Job),
    /// A flush interval with no job (what waited for an fsync got it, if it was due).
    Quiet,
    /// Every handle is gone.
    Stopped,
}

/// Waits for the next job: with no timeout when nothing waits for an fsync or an announcement
/// and there was no work in the last interval, else until the fsync of lazy writes or the
/// announcement of held-back commits (PostgreSQL) is due, which it then does.
fn next_job(
    shared: &Shared,
    rx: &Receiver<Job>,
    core: &Mutex<Core>,
    flush_interval: Duration,
    active: bool,
) -> Waited {
    // INVARIANT: `sleeping` and `unsynced` are read and set under the one lock, so a lazy
    // write either sees the writer sleeping and wakes it, or is seen here before it sleeps.
    let unsynced = {
        let mut held = lock(core);
        held.sleeping = held.unsynced.is_none() && !active;
        held.unsynced
    };
    let wait = match (unsynced, active) {
        (None, false) => None,
        (None, true) => Some(flush_interval),
        (Some(since), _) => {
            Some((since + flush_interval).saturating_duration_since(Instant::now()))
        }
    };
    let announce = shared
        .backend
        .announce_due()
        .map(|due| due.saturating_duration_since(Instant::now()));
    let wait = match (wait, announce) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    };
    let Some(wait) = wait else {
        return rx.recv().map_or(Waited::Stopped, Waited::Job);
    };
    match rx.recv_timeout(wait) {
        Ok(job) => Waited::Job(job),
        Err(mpsc::RecvTimeoutError::Timeout) => {
            shared.backend.announce(false);
            // Due only if what waits now has waited the whole interval: a durable write on a
            // caller's thread may have fsynced what this wait was for, and what was written
            // since has a deadline of its own.
            let due = lock(core)
                .unsynced
                .is_some_and(|since| since.elapsed() >= flush_interval);
            if due {
                // A failed fsync poisons fjall: every later call hears of it.
                let _ = sync(shared, core);
            }
            Waited::Quiet
        }
        Err(mpsc::RecvTimeoutError::Disconnected) => Waited::Stopped,
    }
}

/// The group `first` opens: every job queued behind it, up to [`MAX_GROUP`]. Writers that
/// were answered together come back together: when the last group had company, it waits a
/// moment for as many, so they share one fsync instead of splitting into a group of one and a
/// group of the rest. A lone writer never waits.
fn gather(rx: &Receiver<Job>, first: Job, last_group: usize) -> Vec<Job> {
    let mut group = vec![first];
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
    group
}

/// Runs a group's jobs in order against one [`Tx`], commits their writes as one, and answers
/// each job: a lazy one once the commit is written, a durable one once it is also fsynced.
fn commit_group(shared: &Shared, core: &Mutex<Core>, group: Vec<Job>) {
    let mut held = lock(core);
    held.sleeping = false;
    // With PostgreSQL, a new connection (or a failed commit) means the head this writer
    // kept may be out of date: it is read again.
    let chain = keys::chain_prefix(&shared.chain);
    let begun = shared.backend.begin(&chain).and_then(|last| {
        if let Some(last) = last {
            held.head = crate::head_of(last)?;
        }
        Ok(())
    });
    let mut tx = Tx::new(shared, &held.head, begun.err());
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
            let expects = std::mem::take(&mut tx.expects);
            shared.backend.commit(
                std::mem::take(&mut tx.staged),
                &expects,
                !durable.is_empty(),
                &change,
            )
        }
    };
    if written.is_ok() {
        held.head = tx.head;
        if wrote {
            held.commits += 1;
        }
    }
    // Nothing written by this group and nothing waiting for an fsync (an expiry sweep that
    // found nothing, a refused change): everything committed is already on disk.
    let needs_sync = !durable.is_empty() && (wrote || held.unsynced.is_some());
    if durable.is_empty() && wrote {
        held.unsynced = held.unsynced.or(Some(Instant::now()));
    }
    // The core is free while this group waits for its fsync: a lazy write may go on.
    drop(held);
    for finish in lazy {
        finish(written.clone());
    }
    let synced = if needs_sync {
        // INVARIANT: a durable caller hears back only after this fsync, which also covers
        // every lazy write before it in the journal.
        written.clone().and_then(|()| sync(shared, core))
    } else {
        written.clone()
    };
    for finish in durable {
        finish(synced.clone());
    }
    if written.is_ok() {
        shared.tell(&change);
    }
}

/// Fsyncs everything written so far; if no commit came in meanwhile, nothing waits for an
/// fsync any more.
pub(super) fn sync(shared: &Shared, core: &Mutex<Core>) -> Result<(), StoreError> {
    let commits = lock(core).commits;
    let r = shared.backend.sync();
    if r.is_ok() {
        let mut held = lock(core);
        held.syncs += 1;
        if held.commits == commits {
            held.unsynced = None;
        }
    }
    r
}
