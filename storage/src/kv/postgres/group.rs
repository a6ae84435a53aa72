//! A group of changes on PostgreSQL: the writer's connection, which holds this gateway's chain;
//! the group's transaction, begun by its first locked read or by its commit; each key a job
//! reads locked until the group ends; what a job created inserted, what it expected checked,
//! and the commit sent as one message (DESIGN §17).
//!
//! What it does not do: reads outside a group, connections' set-up, migrations (`mod.rs`).

use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::{bytea, connect, ks_id, notification, unavailable, unhex, Conn, PgKv};
use crate::error::StoreError;
use crate::keys::Ks;
use crate::kv::{Change, Entry, Expect, Staged};

/// What a commit announces to the other gateways: its own change, widened by one committed
/// earlier whose announcement failed (then "anything may have changed", and the audit records
/// of both); `None` when there is nothing to tell.
fn announcement(change: &Change, missed: Option<&Change>) -> Option<Change> {
    let Some(missed) = missed else {
        return (!change.is_empty()).then(|| change.clone());
    };
    let audit = match (missed.audit, change.audit) {
        (Some((from, _)), Some((_, to))) => Some((from, to)),
        (a, b) => b.or(a),
    };
    let deadline = match (missed.deadline, change.deadline) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    };
    Some(Change {
        calls: Vec::new(),
        runs: Vec::new(),
        all: true,
        audit,
        chain: missed.chain.clone(),
        deadline,
        remote: false,
    })
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
        let mut slot = self.writer.lock().unwrap_or_else(|e| e.into_inner());
        let mut fresh = self.reread.swap(false, Ordering::AcqRel);
        let conn = match slot.as_ref().filter(|c| !c.client.is_closed()) {
            Some(c) => c.clone(),
            None => {
                *slot = None;
                fresh = true;
                let (config, tls) = (self.config.clone(), self.tls.clone());
                let lock = self.lock_id(None, chain);
                let conn = Arc::new(self.run(async move {
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
        self.run(async move {
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
        let value = self.run(async move {
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

    /// Checks what the group's jobs expected, writes its final values, announces its change,
    /// and commits: one round trip (with `BEGIN` first, when no read began the transaction).
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
        let sql = group_sql(staged, expects, group.begun, durable);
        // The announcement goes after the commit, in a transaction of its own that waits for no
        // WAL flush, sent in the same round trip. Inside the group's transaction it would hold
        // PostgreSQL's one lock for every notifying commit of the database through the group's
        // WAL flush, and so make every gateway's durable commits wait for one another's.
        let missed = self
            .unannounced
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        let announce = announcement(change, missed.as_ref()).map(|change| {
            let payload = notification(&self.origin, &change);
            let sql = format!(
                "SELECT set_config('synchronous_commit', 'off', true), pg_notify('{}', convert_from({}, 'UTF8'))",
                self.channel,
                bytea(payload.as_bytes())
            );
            (change, sql)
        });
        let conn = group.conn.clone();
        let done = self.run(async move {
            let commit = conn.client.batch_execute(&sql);
            let Some((change, announce)) = announce else {
                return commit.await.map(|()| None).map_err(unavailable);
            };
            // Both messages leave before either answer is read: one round trip.
            let (committed, announced) = tokio::join!(commit, conn.client.batch_execute(&announce));
            committed.map_err(unavailable)?;
            Ok(announced.is_err().then_some(change))
        });
        match done {
            Ok(missed) => {
                // Committed, but the others were not told: the next commit tells them that
                // anything may have changed, and of these audit records too.
                *self.unannounced.lock().unwrap_or_else(|e| e.into_inner()) = missed;
                Ok(())
            }
            Err(e) => {
                // Not committed: what was not announced before still waits for the next one.
                *self.unannounced.lock().unwrap_or_else(|e| e.into_inner()) = missed;
                self.failed(group.conn);
                Err(e)
            }
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
        let rolled = self.run(async move {
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

/// The one message that commits a group: `BEGIN` unless a locked read began it, what its
/// jobs expected, each key's last write, `COMMIT`.
fn group_sql(staged: Vec<Staged>, expects: &[Expect], begun: bool, durable: bool) -> String {
    // Only each key's last write counts, and PostgreSQL refuses to upsert a row twice in
    // one statement. A key is inserted as new only if every write of it in the group
    // created it.
    type Last = (Option<Vec<u8>>, bool);
    let mut last: std::collections::HashMap<(i16, Vec<u8>), Last> =
        std::collections::HashMap::new();
    for s in staged {
        let entry = last.entry((ks_id(s.ks), s.key)).or_insert((None, true));
        entry.0 = s.value;
        entry.1 &= s.new;
    }
    let (mut inserts, mut puts, mut deletes) = (Vec::new(), Vec::new(), Vec::new());
    for ((ks, k), (v, new)) in last {
        match (v, new) {
            (Some(v), true) => inserts.push(format!("({ks},{},{})", bytea(&k), bytea(&v))),
            (Some(v), false) => puts.push(format!("({ks},{},{})", bytea(&k), bytea(&v))),
            // Created and dropped in one group: nothing to write.
            (None, true) => {}
            (None, false) => deletes.push(format!("({ks},{})", bytea(&k))),
        }
    }
    // One round trip: the statements go as one message, in the group's transaction; the
    // first that fails stops the rest, COMMIT included. Values travel as hex literals, so
    // no byte of them is ever read as SQL.
    let mut sql = String::new();
    if !begun {
        sql.push_str("BEGIN;");
    }
    if !durable {
        sql.push_str("SET LOCAL synchronous_commit TO off;");
    }
    for e in expects {
        sql.push_str(&format!(
            "SELECT airlock_expect(EXISTS (SELECT 1 FROM airlock_kv WHERE ks = {} AND k = {}), convert_from({}, 'UTF8'));",
            ks_id(e.ks),
            bytea(&e.key),
            bytea(e.what.as_bytes())
        ));
    }
    if !inserts.is_empty() {
        sql.push_str("INSERT INTO airlock_kv (ks, k, v) VALUES ");
        sql.push_str(&inserts.join(","));
        sql.push(';');
    }
    if !puts.is_empty() {
        sql.push_str("INSERT INTO airlock_kv (ks, k, v) VALUES ");
        sql.push_str(&puts.join(","));
        sql.push_str(" ON CONFLICT (ks, k) DO UPDATE SET v = EXCLUDED.v;");
    }
    if !deletes.is_empty() {
        sql.push_str("DELETE FROM airlock_kv WHERE (ks, k) IN (");
        sql.push_str(&deletes.join(","));
        sql.push_str(");");
    }
    sql.push_str("COMMIT;");
    sql
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
    fn a_commit_announces_its_change_and_one_that_was_missed_before_it() {
        // Nothing to tell: no announcement.
        assert_eq!(announcement(&change(&[], None), None), None);
        let now = change(&["call_2"], Some((8, 9)));
        assert_eq!(announcement(&now, None), Some(now.clone()));
        // A committed change whose announcement failed widens the next one: anything may have
        // changed, and the audit records of both are told.
        let missed = change(&["call_1"], Some((5, 7)));
        let told = announcement(&now, Some(&missed)).unwrap();
        assert!(told.all);
        assert_eq!(told.audit, Some((5, 9)));
        assert_eq!(told.chain, "gw-a");
        // Even when the next commit has nothing of its own to tell.
        let told = announcement(&change(&[], None), Some(&missed)).unwrap();
        assert!(told.all);
        assert_eq!(told.audit, Some((5, 7)));
        // The earlier of two scheduled expiries is told.
        let missed = Change {
            deadline: Some(900),
            ..missed
        };
        let now = Change {
            deadline: Some(400),
            ..now
        };
        assert_eq!(
            announcement(&now, Some(&missed)).unwrap().deadline,
            Some(400)
        );
    }
}
