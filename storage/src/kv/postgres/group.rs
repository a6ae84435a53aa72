//! A group of changes on PostgreSQL: the writer's connection, which holds this gateway's chain;
//! the group's transaction, begun by its first locked read or by its commit; each key a job
//! reads locked until the group ends; what a job created inserted, what it expected checked,
//! and the group's writes sent as one prepared statement, their rows bound as arrays, with
//! `COMMIT` when a read began the transaction: one round trip (DESIGN §17).
//!
//! What it does not do: reads outside a group, connections' set-up, migrations (`mod.rs`).

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::{bytea, connect, ks_id, notification, unavailable, unhex, with_causes, Conn, PgKv};
use crate::error::StoreError;
use crate::keys::Ks;
use crate::kv::{Change, Entry, Expect, Staged};

/// How often, at most, a gateway announces its commits to the others. A commit within this
/// time of the last announcement is not announced at once: it waits, merged with the commits
/// after it, until the time has passed (with the next commit then, or alone if none comes).
/// Every announcement wakes every listening gateway and the database process that serves it;
/// on a busy cluster this is one announcement per interval instead of one per commit, and
/// another gateway hears of a change at most this much later.
pub(crate) const ANNOUNCE_EVERY: Duration = Duration::from_millis(10);

/// This gateway's announcements: what it committed and has not yet told the others, and when
/// the last announcement went out.
#[derive(Default)]
pub(super) struct Announcer {
    pending: Option<Change>,
    last: Option<Instant>,
}

impl Announcer {
    /// Whether an announcement may go at `now`.
    fn may_send(&self, now: Instant) -> bool {
        self.last
            .is_none_or(|last| now.saturating_duration_since(last) >= ANNOUNCE_EVERY)
    }

    /// Adds `later` to what waits. Only an announcement that failed on its way is put back
    /// ahead of what waits; whatever else comes was committed after what waits.
    fn keep(&mut self, later: Change) {
        match self.pending.as_mut() {
            Some(waiting) => waiting.absorb(&later),
            None => self.pending = Some(later),
        }
    }

    /// When what waits should be announced: `None` while nothing waits.
    fn due(&self) -> Option<Instant> {
        self.pending.as_ref()?;
        Some(
            self.last
                .map_or_else(Instant::now, |last| last + ANNOUNCE_EVERY),
        )
    }
}

/// What is to be told once `change` commits: what waits, widened by `change`; `None` when
/// there is nothing to tell.
fn merged(waiting: Option<&Change>, change: &Change) -> Option<Change> {
    match waiting {
        None => (!change.is_empty()).then(|| change.clone()),
        Some(waiting) => {
            let mut all = waiting.clone();
            all.absorb(change);
            Some(all)
        }
    }
}

/// A group of changes in progress: its connection, whether its transaction has begun, and
/// the keys it has locked.
pub(super) struct Group {
    conn: Arc<Conn>,
    begun: bool,
    locked: std::collections::HashSet<i64>,
}

impl PgKv {
    /// The number of the advisory lock on `key` of `ks` in this schema (or, with `ks`
    /// `None`, on the chain named `key`).
    fn lock_id(&self, ks: Option<Ks>, key: &[u8]) -> i64 {
        use sha2::Digest;
        let mut h = sha2::Sha256::new();
        h.update(self.channel.as_bytes());
        h.update([ks.map_or(0xff, |k| k.index() as u8)]);
        h.update(key);
        let d = h.finalize();
        i64::from_be_bytes([d[0], d[1], d[2], d[3], d[4], d[5], d[6], d[7]])
    }

    /// Makes sure the writer's connection is up and holds the lock on `chain`, and starts a
    /// group on it. Returns the chain's last record (`Some`) when the connection is new or the
    /// last commit failed: the head this writer kept may be out of date.
    pub fn begin(&self, chain: &[u8]) -> Result<Option<Option<Entry>>, StoreError> {
        // Between groups nobody drives the writer's connection: what the database said
        // meanwhile (that it ended the connection) is read now, so a connection it closed is
        // replaced before the group instead of failing it.
        self.settle_writer();
        let mut slot = self.writer.lock().unwrap_or_else(|e| e.into_inner());
        let mut fresh = self.reread.swap(false, Ordering::AcqRel);
        let conn = match slot.as_ref().filter(|c| !c.client.is_closed()) {
            Some(c) => c.clone(),
            None => {
                *slot = None;
                fresh = true;
                let (config, tls) = (self.config.clone(), self.tls.clone());
                let lock = self.lock_id(None, chain);
                let conn = Arc::new(self.run_writer(async move {
                    let conn = connect(&config, tls).await?;
                    let row = conn
                        .client
                        .query_one("SELECT pg_try_advisory_lock($1)", &[&lock])
                        .await
                        .map_err(unavailable)?;
                    if row.get::<_, bool>(0) {
                        Ok(conn)
                    } else {
                        Err(StoreError::Unavailable(
                            "the database: this gateway's audit chain is held by another \
                             connection (a gateway with the same `[store] instance`, or this \
                             one's previous connection, not yet ended)"
                                .into(),
                        ))
                    }
                })?);
                *slot = Some(conn.clone());
                conn
            }
        };
        drop(slot);
        let head = if fresh {
            let head = self.last_on(&conn, chain);
            if head.is_err() {
                self.reread.store(true, Ordering::Release);
            }
            Some(head?)
        } else {
            None
        };
        *self.group.lock().unwrap_or_else(|e| e.into_inner()) = Some(Group {
            conn,
            begun: false,
            locked: Default::default(),
        });
        Ok(head)
    }

    /// The last audit record of `chain`, read on `conn`.
    fn last_on(&self, conn: &Arc<Conn>, chain: &[u8]) -> Result<Option<Entry>, StoreError> {
        let c = conn.clone();
        let from = chain.to_vec();
        let to = crate::kv::prefix_end(chain).unwrap_or_default();
        let ks = ks_id(Ks::Audit);
        self.run_writer(async move {
            let row = c
                .client
                .query_opt(&c.scan_rev_to, &[&ks, &from, &to, &1i64])
                .await
                .map_err(unavailable)?;
            Ok(row.map(|r| (r.get::<_, Vec<u8>>(0), r.get::<_, Vec<u8>>(1))))
        })
    }

    /// Reads `key` in the group's transaction, after locking it until the group ends (the
    /// transaction begins here if it has not yet): one round trip.
    pub fn locked_get(&self, ks: Ks, key: &[u8]) -> Result<Option<Vec<u8>>, StoreError> {
        let mut held = self.group.lock().unwrap_or_else(|e| e.into_inner());
        let Some(group) = held.as_mut() else {
            return Err(unavailable("the group's transaction did not begin"));
        };
        let id = self.lock_id(Some(ks), key);
        let mut sql = String::new();
        if !group.begun {
            sql.push_str("BEGIN;");
        }
        if !group.locked.contains(&id) {
            sql.push_str(&format!("SELECT pg_advisory_xact_lock({id});"));
        }
        // The read is a statement of its own, after the lock's: it sees what the group that
        // held the lock before committed.
        sql.push_str(&format!(
            "SELECT 'v', encode(v, 'hex') FROM airlock_kv WHERE ks = {} AND k = {};",
            ks_id(ks),
            bytea(key)
        ));
        // Whatever happens next, the transaction may be open: it must be ended.
        group.begun = true;
        let conn = group.conn.clone();
        let value = self.run_writer(async move {
            let messages = conn.client.simple_query(&sql).await.map_err(unavailable)?;
            for m in messages {
                // The lock's SELECT answers a row of one column; the value's has two.
                if let tokio_postgres::SimpleQueryMessage::Row(row) = m {
                    if row.len() == 2 {
                        return row
                            .get(1)
                            .and_then(unhex)
                            .map(Some)
                            .ok_or_else(|| StoreError::Corrupt("an unreadable row".into()));
                    }
                }
            }
            Ok(None)
        })?;
        group.locked.insert(id);
        Ok(value)
    }

    /// Checks what the group's jobs expected, writes its final values, and commits: one round
    /// trip (with `BEGIN` first, when no read began the transaction). The announcement of its
    /// change goes in the same round trip, with whatever waits, or waits itself (see
    /// [`ANNOUNCE_EVERY`]).
    pub fn commit(
        &self,
        staged: Vec<Staged>,
        expects: &[Expect],
        durable: bool,
        change: &Change,
    ) -> Result<(), StoreError> {
        let Some(group) = self.group.lock().unwrap_or_else(|e| e.into_inner()).take() else {
            return Err(unavailable("the group's transaction did not begin"));
        };
        if !group.begun && staged.is_empty() && expects.is_empty() {
            return Ok(());
        }
        let writes = Writes::of(staged, expects);
        let begun = group.begun;
        // The announcement goes after the commit, in a transaction of its own that waits for no
        // WAL flush, sent in the same round trip. Inside the group's transaction it would hold
        // PostgreSQL's one lock for every notifying commit of the database through the group's
        // WAL flush, and so make every gateway's durable commits wait for one another's.
        let now = Instant::now();
        let (waiting, told, send) = {
            let mut held = self.announcer.lock().unwrap_or_else(|e| e.into_inner());
            let waiting = held.pending.take();
            let told = merged(waiting.as_ref(), change);
            let send = told.clone().filter(|_| held.may_send(now));
            if send.is_some() {
                held.last = Some(now);
            }
            (waiting, told, send.map(|c| self.announce_sql(&c)))
        };
        let conn = group.conn.clone();
        let done = self
            .run_writer(async move { writes.commit(&conn, begun, durable, send.as_deref()).await });
        let mut held = self.announcer.lock().unwrap_or_else(|e| e.into_inner());
        match done {
            Ok(announced) => {
                // Committed: what was told no longer waits; what was not (held back, or its
                // announcement failed) waits for the next.
                if let (false, Some(told)) = (announced, told) {
                    held.keep(told);
                }
                Ok(())
            }
            Err(e) => {
                // Not committed: what waited before still waits, and nothing of this group.
                if let Some(waiting) = waiting {
                    held.keep(waiting);
                }
                drop(held);
                self.failed(group.conn);
                Err(e)
            }
        }
    }

    /// The statement that announces `change`: `pg_notify` in a transaction that waits for no
    /// WAL flush.
    fn announce_sql(&self, change: &Change) -> String {
        let payload = notification(&self.origin, change);
        format!(
            "SELECT set_config('synchronous_commit', 'off', true), pg_notify('{}', convert_from({}, 'UTF8'))",
            self.channel,
            bytea(payload.as_bytes())
        )
    }

    /// When commits held back from announcement should be announced (`None`: none wait).
    pub fn announce_due(&self) -> Option<Instant> {
        self.announcer
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .due()
    }

    /// Announces the commits held back, if their time has come or `now_anyway` (the writer is
    /// stopping). The announcement goes on a reading connection, and the writer does not wait
    /// for it: its connection stays free for the next group. One that fails is merged back
    /// into what waits, and tried again an interval later.
    pub fn announce(&self, now_anyway: bool) {
        let now = Instant::now();
        let told = {
            let mut held = self.announcer.lock().unwrap_or_else(|e| e.into_inner());
            if held.pending.is_none() || !(now_anyway || held.may_send(now)) {
                return;
            }
            held.last = Some(now);
            held.pending.take()
        };
        let Some(told) = told else { return };
        let sql = self.announce_sql(&told);
        let announcer = self.announcer.clone();
        // What waits meanwhile was committed later: it is merged in after.
        let back = move |told: Change| {
            let mut held = announcer.lock().unwrap_or_else(|e| e.into_inner());
            let later = held.pending.replace(told);
            if let Some(later) = later {
                held.keep(later);
            }
        };
        let conn = match self.reader() {
            Ok(conn) => conn,
            Err(_) => return back(told),
        };
        let sent = self.handle.spawn(async move {
            let sent = tokio::time::timeout(super::TIMEOUT, conn.client.batch_execute(&sql)).await;
            if !matches!(sent, Ok(Ok(()))) {
                back(told);
            }
        });
        if now_anyway {
            // The writer is stopping: what it announces last goes before it ends.
            let _ = self.handle.block_on(sent);
        }
    }

    /// After a group failed: its transaction is rolled back if the connection still answers
    /// (and dropped if not), and the chain's head is read again before the next group, in case
    /// the commit was applied after all.
    fn failed(&self, conn: Arc<Conn>) {
        self.reread.store(true, Ordering::Release);
        self.roll_back_on(conn);
    }

    /// Ends the group in progress without writing.
    pub fn rollback(&self) {
        if let Some(group) = self.group.lock().unwrap_or_else(|e| e.into_inner()).take() {
            if group.begun {
                self.roll_back_on(group.conn);
            }
        }
    }

    /// Rolls back the transaction open on the writer's connection `conn`; a connection that
    /// does not answer is dropped (the next group connects afresh, and takes the chain again).
    fn roll_back_on(&self, conn: Arc<Conn>) {
        let rolled = self.run_writer(async move {
            conn.client
                .batch_execute("ROLLBACK")
                .await
                .map_err(unavailable)
        });
        if rolled.is_err() {
            *self.writer.lock().unwrap_or_else(|e| e.into_inner()) = None;
        }
    }
}

/// One column each of keyspaces, keys and values (for expectations, what each job said; for
/// deletes, nothing: their `v` stays empty and is not bound), bound as arrays to the group's
/// statement (`WRITE` in `mod.rs`).
#[derive(Debug, Default, PartialEq)]
struct Columns {
    ks: Vec<i16>,
    k: Vec<Vec<u8>>,
    v: Vec<Vec<u8>>,
}

impl Columns {
    fn push(&mut self, ks: i16, k: Vec<u8>, v: Vec<u8>) {
        self.ks.push(ks);
        self.k.push(k);
        self.v.push(v);
    }
}

/// What a group's commit writes and checks: the keys its jobs expected, and each key's last
/// write, split into keys created (inserted: one already there fails the group), keys
/// overwritten (upserted) and keys deleted.
#[derive(Debug, Default, PartialEq)]
struct Writes {
    expected: Columns,
    inserts: Columns,
    puts: Columns,
    deletes: Columns,
}

impl Writes {
    fn of(staged: Vec<Staged>, expects: &[Expect]) -> Writes {
        let mut writes = Writes::default();
        for e in expects {
            let what = e.what.as_bytes().to_vec();
            writes.expected.push(ks_id(e.ks), e.key.clone(), what);
        }
        // Only each key's last write counts, and PostgreSQL refuses to upsert a row twice in
        // one statement. A key is inserted as new only if every write of it in the group
        // created it. Sorted, so that two groups writing the same keys lock them in one order.
        type Last = (Option<Vec<u8>>, bool);
        let mut last: std::collections::BTreeMap<(i16, Vec<u8>), Last> = Default::default();
        for s in staged {
            let entry = last.entry((ks_id(s.ks), s.key)).or_insert((None, true));
            entry.0 = s.value;
            entry.1 &= s.new;
        }
        for ((ks, k), (v, new)) in last {
            match (v, new) {
                (Some(v), true) => writes.inserts.push(ks, k, v),
                (Some(v), false) => writes.puts.push(ks, k, v),
                // Created and dropped in one group: nothing to write.
                (None, true) => {}
                (None, false) => {
                    writes.deletes.ks.push(ks);
                    writes.deletes.k.push(k);
                }
            }
        }
        writes
    }

    /// Sends the group's one statement on `conn` (its expectations, inserts, upserts and
    /// deletes; for a lazy group, the setting that its commit waits for no WAL flush), then
    /// `COMMIT` if a locked read began the transaction, then `announce` if any, and reads their
    /// answers: one round trip, and one answer to wait for before the announcement's. Without
    /// a begun transaction the statement is a transaction of its own: it commits when it
    /// succeeds, and nothing of it is written when it fails. tokio-postgres sends a request
    /// when its future is first polled, and `join!` polls them first in the order written.
    /// Returns whether the announcement went.
    async fn commit(
        &self,
        conn: &Conn,
        begun: bool,
        durable: bool,
        announce: Option<&str>,
    ) -> Result<bool, StoreError> {
        let c = &conn.client;
        let lazy = !durable;
        let (e, i, p, d) = (&self.expected, &self.inserts, &self.puts, &self.deletes);
        let params: [&(dyn tokio_postgres::types::ToSql + Sync); 12] = [
            &e.ks, &e.k, &e.v, &i.ks, &i.k, &i.v, &p.ks, &p.k, &p.v, &d.ks, &d.k, &lazy,
        ];
        let written = c.execute(&conn.write, &params);
        let committed = async {
            if begun {
                c.batch_execute("COMMIT").await
            } else {
                Ok(())
            }
        };
        let announced = async {
            match announce {
                Some(sql) => c.batch_execute(sql).await.is_ok(),
                None => false,
            }
        };
        let (written, committed, announced) = tokio::join!(written, committed, announced);
        // After a failed statement in a begun transaction, `COMMIT` rolls it back (and says
        // so without an error): the statement's error is the group's.
        written.map(|_| ()).and(committed).map_err(with_causes)?;
        Ok(announced)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn change(calls: &[&str], audit: Option<(u64, u64)>) -> Change {
        Change {
            calls: calls.iter().map(|c| (*c).to_owned()).collect(),
            audit,
            chain: "gw-a".into(),
            ..Change::default()
        }
    }

    #[test]
    fn a_group_writes_each_keys_last_write_once_and_inserts_only_what_it_created() {
        let staged = |ks: Ks, key: &str, value: Option<&str>, new: bool| Staged {
            ks,
            key: key.as_bytes().to_vec(),
            value: value.map(|v| v.as_bytes().to_vec()),
            new,
        };
        let expect = Expect {
            ks: Ks::ApprovalIndex,
            key: b"executing/c1".to_vec(),
            what: "call c1 is no longer executing".into(),
        };
        let writes = Writes::of(
            vec![
                // Written twice: the last value counts, and it was not created by both.
                staged(Ks::Calls, "c1", Some("v1"), false),
                staged(Ks::Calls, "c1", Some("v2"), true),
                // Created twice in the group: inserted, with its last value.
                staged(Ks::Audit, "a/2", Some("r2"), true),
                staged(Ks::Audit, "a/1", Some("r1"), true),
                staged(Ks::Audit, "a/1", Some("r1b"), true),
                // Created and dropped: nothing written.
                staged(Ks::Calls, "c2", Some("x"), true),
                staged(Ks::Calls, "c2", None, true),
                // Dropped.
                staged(Ks::ApprovalIndex, "executing/c1", None, false),
            ],
            std::slice::from_ref(&expect),
        );
        let id = |ks: Ks| ks_id(ks);
        assert_eq!(
            writes.inserts,
            Columns {
                ks: vec![id(Ks::Audit), id(Ks::Audit)],
                k: vec![b"a/1".to_vec(), b"a/2".to_vec()],
                v: vec![b"r1b".to_vec(), b"r2".to_vec()],
            }
        );
        assert_eq!(
            writes.puts,
            Columns {
                ks: vec![id(Ks::Calls)],
                k: vec![b"c1".to_vec()],
                v: vec![b"v2".to_vec()],
            }
        );
        assert_eq!(writes.deletes.k, vec![b"executing/c1".to_vec()]);
        assert_eq!(writes.deletes.ks, vec![id(Ks::ApprovalIndex)]);
        assert!(writes.deletes.v.is_empty());
        assert_eq!(
            writes.expected,
            Columns {
                ks: vec![id(Ks::ApprovalIndex)],
                k: vec![expect.key.clone()],
                v: vec![expect.what.as_bytes().to_vec()],
            }
        );
    }

    #[test]
    fn commits_held_back_are_told_together_and_no_sooner_than_the_interval() {
        // Nothing to tell: nothing waits.
        assert_eq!(merged(None, &change(&[], None)), None);
        let now = change(&["call_2"], Some((8, 9)));
        assert_eq!(merged(None, &now), Some(now.clone()));
        // What waits is widened by the next commit: the calls of both, the audit records from
        // the first to the last, the earlier expiry.
        let waiting = Change {
            deadline: Some(900),
            ..change(&["call_1", "call_2"], Some((5, 7)))
        };
        let later = Change {
            deadline: Some(400),
            ..now
        };
        let told = merged(Some(&waiting), &later).unwrap();
        assert!(!told.all);
        assert_eq!(told.calls, ["call_1", "call_2"]);
        assert_eq!(told.audit, Some((5, 9)));
        assert_eq!(told.chain, "gw-a");
        assert_eq!(told.deadline, Some(400));
        // Even a commit with nothing of its own to tell carries what waits.
        let told = merged(Some(&waiting), &change(&[], None)).unwrap();
        assert_eq!((told.calls.len(), told.audit), (2, Some((5, 7))));
        // More calls than an announcement names: anything may have changed.
        let mut many = change(&[], None);
        for i in 0..300 {
            many.absorb(&change(&[&format!("call_{i}")], None));
        }
        assert!(many.all && many.calls.len() < 300);

        // The first announcement goes at once; the next not before the interval has passed.
        let start = Instant::now();
        let mut a = Announcer::default();
        assert!(a.may_send(start) && a.due().is_none());
        a.last = Some(start);
        assert!(!a.may_send(start + ANNOUNCE_EVERY / 2));
        assert!(a.may_send(start + ANNOUNCE_EVERY));
        // What waits is due an interval after the last announcement.
        a.keep(waiting);
        assert_eq!(a.due(), Some(start + ANNOUNCE_EVERY));
        // A later commit is added after it: the audit records run from the first to the last.
        a.keep(change(&["call_3"], Some((10, 11))));
        let waits = a.pending.as_ref().unwrap();
        assert_eq!((waits.calls.len(), waits.audit), (3, Some((5, 11))));
    }
}
