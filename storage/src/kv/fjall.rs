//! The embedded backend: one fjall keyspace per [`Ks`], in one folder, held by one process.
//!
//! A group is written as one atomic batch flushed to the OS, and fsynced separately
//! ([`FjallKv::sync`]), so the writer can answer lazy writes before the fsync. A failed fsync
//! poisons the store for good: what reached the disk is no longer known.
//!
//! What it does not do: share the store with another process (fjall locks the folder), or
//! order writes itself (the writer does).

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};

use fjall::config::CompressionPolicy;
use fjall::{CompressionType, Database, Keyspace, KeyspaceCreateOptions, PersistMode};

use super::{Entry, Staged};
use crate::error::StoreError;
use crate::keys::Ks;

/// How long a flush waits for fjall's background worker.
const FLUSH_WAIT: std::time::Duration = std::time::Duration::from_secs(30);

/// fjall's block cache.
const CACHE_BYTES: u64 = 16 << 20;

/// Each keyspace's memtable flushes at this size. fjall's default (64 MiB per keyspace, eight
/// keyspaces) lets memory grow to hundreds of MiB before anything is flushed, and makes
/// reopening replay a long journal.
const MEMTABLE_BYTES: u64 = 8 << 20;

pub(crate) struct FjallKv {
    db: Database,
    keyspaces: Vec<Keyspace>,
    /// Set when a write failed to reach the disk; then nothing is served.
    poisoned: AtomicBool,
}

impl FjallKv {
    pub fn open(path: &Path) -> Result<FjallKv, StoreError> {
        let db = Database::builder(path)
            .cache_size(CACHE_BYTES)
            // One background worker for flushes and compactions. With two or more, fjall's
            // first worker hands every compaction request back to the queue for the others
            // and picks it up again at once: while another worker compacts, it spins (seen as
            // a tenth of the allow path's CPU under load).
            .worker_threads(1)
            .open()
            .map_err(|e| match e {
                fjall::Error::Locked => StoreError::Locked(format!(
                    "the store at {} is in use by another process (a running gateway): only one may open it at a time",
                    path.display()
                )),
                e => StoreError::Unavailable(format!(
                    "cannot open the store at {}: {e}",
                    path.display()
                )),
            })?;
        let mut keyspaces = Vec::new();
        for ks in Ks::ALL {
            keyspaces.push(db.keyspace(ks.name(), || {
                KeyspaceCreateOptions::default()
                    .max_memtable_size(MEMTABLE_BYTES)
                    // Records are JSON with many repeated keys: LZ4 at every level, where
                    // fjall's default leaves the first two levels (all a young store has)
                    // uncompressed. Measured by the allow-path bench's bytes per call.
                    .data_block_compression_policy(CompressionPolicy::all(CompressionType::Lz4))
            })?);
        }
        Ok(FjallKv {
            db,
            keyspaces,
            poisoned: AtomicBool::new(false),
        })
    }

    fn ks(&self, ks: Ks) -> &Keyspace {
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

    pub fn get(&self, ks: Ks, key: &[u8]) -> Result<Option<Vec<u8>>, StoreError> {
        Ok(self.ks(ks).get(key)?.map(|v| v.to_vec()))
    }

    pub fn iter(
        &self,
        ks: Ks,
        from: Vec<u8>,
        to: Option<Vec<u8>>,
        rev: bool,
    ) -> Box<dyn Iterator<Item = Result<Entry, StoreError>> + '_> {
        let entry = |guard: fjall::Guard| {
            let (k, v) = guard.into_inner()?;
            Ok((k.to_vec(), v.to_vec()))
        };
        match (to, rev) {
            (Some(to), false) => Box::new(self.ks(ks).range(from..to).map(entry)),
            (Some(to), true) => Box::new(self.ks(ks).range(from..to).rev().map(entry)),
            (None, false) => Box::new(self.ks(ks).range(from..).map(entry)),
            (None, true) => Box::new(self.ks(ks).range(from..).rev().map(entry)),
        }
    }

    /// Writes the staged batch to the journal, flushed to the OS (no fsync).
    pub fn commit(&self, staged: Vec<Staged>) -> Result<(), StoreError> {
        self.check()?;
        if staged.is_empty() {
            return Ok(());
        }
        let mut batch = self.db.batch().durability(Some(PersistMode::Buffer));
        for s in staged {
            match s.value {
                Some(v) => batch.insert(self.ks(s.ks), s.key, v),
                None => batch.remove(self.ks(s.ks), s.key),
            }
        }
        batch.commit().map_err(|e| {
            self.poisoned.store(true, Ordering::Release);
            StoreError::from(e)
        })
    }

    /// Syncs the journal's data to disk (`fdatasync`: the journal is only appended to, so its
    /// contents and length are what a reopen needs); a failure poisons the store.
    pub fn sync(&self) -> Result<(), StoreError> {
        self.check()?;
        self.db.persist(PersistMode::SyncData).map_err(|e| {
            self.poisoned.store(true, Ordering::Release);
            StoreError::from(e)
        })
    }

    pub fn disk_space(&self) -> Result<u64, StoreError> {
        Ok(self.db.disk_space()?)
    }

    /// Writes every keyspace's memtable out to its tables and waits, so the journal behind
    /// them can be dropped: a quick reopen, and the store's size at rest.
    pub fn flush(&self) -> Result<(), StoreError> {
        self.flush_within(FLUSH_WAIT)
    }

    /// [`FjallKv::flush`], giving up after `wait`. fjall's wait has no end of its own: it polls
    /// until its background worker has written the memtables out, and a worker that died (a
    /// disk error; the store's folder removed under it) never does. Giving up loses nothing:
    /// the journal holds every write, and the next start replays it.
    pub fn flush_within(&self, wait: std::time::Duration) -> Result<(), StoreError> {
        self.check()?;
        let keyspaces = self.keyspaces.clone();
        let (done, result) = std::sync::mpsc::channel();
        std::thread::Builder::new()
            .name("airlock-store-flush".into())
            .spawn(move || {
                let flushed = keyspaces
                    .iter()
                    .try_for_each(|ks| ks.rotate_memtable_and_wait());
                let _ = done.send(flushed);
            })
            .map_err(|e| StoreError::Unavailable(format!("cannot start the flush: {e}")))?;
        match result.recv_timeout(wait) {
            Ok(flushed) => Ok(flushed?),
            Err(_) => Err(StoreError::Unavailable(format!(
                "the store's background worker did not write its memtables out within {wait:?} \
                 (the journal keeps every write; the next start replays it)"
            ))),
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn a_flush_whose_worker_died_gives_up_instead_of_waiting_for_ever() {
        let dir = tempfile::tempdir().unwrap();
        let kv = FjallKv::open(&dir.path().join("store")).unwrap();
        let staged = |k: &[u8]| Staged {
            ks: Ks::Calls,
            key: k.to_vec(),
            value: Some(vec![7; 64]),
            new: false,
        };
        kv.commit(vec![staged(b"a")]).unwrap();
        kv.flush_within(std::time::Duration::from_secs(10)).unwrap();
        // The folder goes away under the store: the background worker fails writing the next
        // table out and stops; fjall alone would wait for it for ever.
        kv.commit(vec![staged(b"b")]).unwrap();
        std::fs::remove_dir_all(dir.path().join("store")).unwrap();
        let started = std::time::Instant::now();
        let e = kv
            .flush_within(std::time::Duration::from_secs(2))
            .unwrap_err();
        assert_eq!(e.code(), "store.unavailable", "{e}");
        assert!(
            e.to_string().contains("did not write its memtables out"),
            "{e}"
        );
        assert!(started.elapsed() < std::time::Duration::from_secs(5));
    }
}
