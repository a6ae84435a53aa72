//! The ordered key-value layer under the store: the one place that knows which database holds
//! the bytes. Two backends serve the same interface:
//!
//! - [`fjall`]: embedded, one process (the default);
//! - [`postgres`]: one table in PostgreSQL, shared by any number of gateways.
//!
//! Everything above this layer (the approval state machine, grant uses, the audit chain, the
//! outbox) is the same code for both: the writer runs each group of changes against a
//! [`Backend`] and commits it atomically. What a backend adds is how a group is made exclusive
//! and durable: fjall has one writer thread in one process; with PostgreSQL each gateway's
//! group is one transaction that locks each key it reads ([`Backend::group_get`]), so groups of
//! different gateways wait for each other only on the keys they share (DESIGN §17).
//!
//! How a group names the keys it touches: every key a job reads through its group is locked
//! for the rest of the group (read-modify-write of shared state: an approval, a grant, a call,
//! a delivery, an expiry entry); a key a job creates is written as new and fails the group if
//! it is already there ([`Staged::new`]); a key a job only expects to exist is checked at
//! commit ([`Expect`]). Audit records are always new keys in the writer's own chain.
//!
//! What it does not do: interpret keys or values (see [`crate::keys`]).

pub(crate) mod fjall;
pub mod postgres;

use crate::error::StoreError;
use crate::keys::Ks;

pub use self::postgres::PgOptions;

/// One key and its value.
pub(crate) type Entry = (Vec<u8>, Vec<u8>);

/// One staged write: a value to put, or `None` to delete.
pub(crate) struct Staged {
    pub ks: Ks,
    pub key: Vec<u8>,
    pub value: Option<Vec<u8>>,
    /// A key that must not exist yet (an audit record, a call the group creates): with
    /// PostgreSQL it is inserted, never overwritten, so a duplicate fails the group.
    pub new: bool,
}

/// A key a group's job expected to exist without reading it: PostgreSQL checks it when the
/// group commits (fjall, with one writer, checked it at once).
pub(crate) struct Expect {
    pub ks: Ks,
    pub key: Vec<u8>,
    /// Said in the error when the key is missing.
    pub what: String,
}

/// The most calls and runs a merged [`Change`] names before it becomes `all`.
const MAX_NAMED: usize = 256;

/// What a committed group changed that someone may be waiting on: the calls it wrote, the
/// runs it wrote audit records for, and the earliest expiry it scheduled. `all` says "assume
/// anything changed" (after a reconnect, when another gateway's changes may have been missed,
/// or when the list was too long to send).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Change {
    pub calls: Vec<String>,
    pub runs: Vec<String>,
    pub all: bool,
    /// The first and last seq of the audit records the group appended, if any, in chain
    /// `chain`.
    pub audit: Option<(u64, u64)>,
    pub chain: String,
    /// The earliest expiry the group scheduled (an approval or suspension opened), if any:
    /// what makes another gateway look again for its next deadline.
    pub deadline: Option<u64>,
    /// Whether another gateway made the change (PostgreSQL): this one has not told its own
    /// listeners (event streams) of it.
    pub remote: bool,
}

impl Change {
    pub fn is_empty(&self) -> bool {
        !self.all && self.calls.is_empty() && self.runs.is_empty() && self.deadline.is_none()
    }

    /// Adds what `later`, committed after this change on the same chain, changed: the calls
    /// and runs of both (each once), the audit records from this one's first to `later`'s
    /// last, the earlier expiry. One announcement of the result tells as much as two.
    pub fn absorb(&mut self, later: &Change) {
        for call in &later.calls {
            if !self.calls.contains(call) {
                self.calls.push(call.clone());
            }
        }
        for run in &later.runs {
            if !self.runs.contains(run) {
                self.runs.push(run.clone());
            }
        }
        self.all |= later.all;
        if self.calls.len() + self.runs.len() > MAX_NAMED {
            // More than an announcement can name: "anything may have changed" says it all.
            self.all = true;
            self.calls.clear();
            self.runs.clear();
        }
        self.audit = match (self.audit, later.audit) {
            (Some((from, _)), Some((_, to))) => Some((from, to)),
            (a, b) => a.or(b),
        };
        if self.chain.is_empty() {
            self.chain.clone_from(&later.chain);
        }
        self.deadline = match (self.deadline, later.deadline) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
    }
}

/// Told of every committed change: this process's own as it commits, and with PostgreSQL those
/// of the other gateways on the same database.
pub type ChangeListener = Box<dyn Fn(&Change) + Send + Sync>;

/// A database the store can live in.
pub(crate) enum Backend {
    Fjall(fjall::FjallKv),
    Postgres(Box<postgres::PgKv>),
}

/// Entries per page when a backend reads a range in pages.
const PAGE: usize = 512;

impl Backend {
    pub fn get(&self, ks: Ks, key: &[u8]) -> Result<Option<Vec<u8>>, StoreError> {
        match self {
            Backend::Fjall(f) => f.get(ks, key),
            Backend::Postgres(p) => p.get(ks, key),
        }
    }

    /// The entries of `ks` with `from <= key < to` (no upper bound without `to`), in key order,
    /// or in reverse with `rev`. Read lazily: PostgreSQL is read a page at a time.
    pub fn iter(
        &self,
        ks: Ks,
        from: Vec<u8>,
        to: Option<Vec<u8>>,
        rev: bool,
    ) -> Box<dyn Iterator<Item = Result<Entry, StoreError>> + '_> {
        match self {
            Backend::Fjall(f) => f.iter(ks, from, to, rev),
            Backend::Postgres(p) => Box::new(Pages {
                kv: p,
                ks,
                from,
                to,
                rev,
                page: Vec::new().into_iter(),
                done: false,
            }),
        }
    }

    /// The entries whose keys start with `prefix`, in key order.
    pub fn prefix(
        &self,
        ks: Ks,
        prefix: &[u8],
    ) -> Box<dyn Iterator<Item = Result<Entry, StoreError>> + '_> {
        self.iter(ks, prefix.to_vec(), prefix_end(prefix), false)
    }

    /// The entry with the greatest key starting with `prefix`.
    pub fn last_with(&self, ks: Ks, prefix: &[u8]) -> Result<Option<Entry>, StoreError> {
        let end = prefix_end(prefix);
        match self {
            Backend::Fjall(f) => f.iter(ks, prefix.to_vec(), end, true).next().transpose(),
            // One row, not a page.
            Backend::Postgres(p) => Ok(p.scan(ks, prefix, end.as_deref(), true, 1)?.pop()),
        }
    }

    /// The first entry with a key of at least `from`.
    pub fn first_from(&self, ks: Ks, from: &[u8]) -> Result<Option<Entry>, StoreError> {
        match self {
            Backend::Fjall(f) => f.iter(ks, from.to_vec(), None, false).next().transpose(),
            Backend::Postgres(p) => Ok(p.scan(ks, from, None, false, 1)?.pop()),
        }
    }

    /// Starts a group of changes. With PostgreSQL this makes sure the writer's connection is
    /// up and holds this gateway's chain; when the connection is new (the first group, or
    /// after a failure, when the last commit's fate is unknown) it returns the chain's last
    /// record (`Some`, holding `None` for an empty chain) for the writer to continue from.
    /// The transaction itself begins with the group's first locked read, or its commit.
    /// fjall returns `None`: this process's writer keeps the head itself.
    pub fn begin(&self, chain: &[u8]) -> Result<Option<Option<Entry>>, StoreError> {
        match self {
            Backend::Fjall(_) => Ok(None),
            Backend::Postgres(p) => p.begin(chain),
        }
    }

    /// Reads `key` for a group's job: with PostgreSQL, in the group's transaction after
    /// locking the key until the group ends, so no other gateway's group changes it meanwhile.
    pub fn group_get(&self, ks: Ks, key: &[u8]) -> Result<Option<Vec<u8>>, StoreError> {
        match self {
            Backend::Fjall(f) => f.get(ks, key),
            Backend::Postgres(p) => p.locked_get(ks, key),
        }
    }

    /// Commits a group's writes atomically, written to the journal (fjall) or committed with
    /// synchronous commit when `durable` (PostgreSQL), after checking what the group's jobs
    /// expected (PostgreSQL; fjall's writer checked at once). `change` is announced to the
    /// other gateways with the commit.
    pub fn commit(
        &self,
        staged: Vec<Staged>,
        expects: &[Expect],
        durable: bool,
        change: &Change,
    ) -> Result<(), StoreError> {
        match self {
            Backend::Fjall(f) => f.commit(staged),
            Backend::Postgres(p) => p.commit(staged, expects, durable, change),
        }
    }

    /// When commits held back from announcement to the other gateways are due to be announced
    /// (PostgreSQL; `None` when none wait, and always with fjall).
    pub fn announce_due(&self) -> Option<std::time::Instant> {
        match self {
            Backend::Fjall(_) => None,
            Backend::Postgres(p) => p.announce_due(),
        }
    }

    /// Announces the commits held back, if they are due or `now_anyway`; called by the writer
    /// between groups.
    pub fn announce(&self, now_anyway: bool) {
        if let Backend::Postgres(p) = self {
            p.announce(now_anyway);
        }
    }

    /// Ends a group that could not begin or whose jobs were all refused, without writing.
    pub fn abandon(&self) {
        if let Backend::Postgres(p) = self {
            p.rollback();
        }
    }

    /// Makes everything committed so far durable: an fsync for fjall; nothing for PostgreSQL,
    /// whose durable groups are durable at commit.
    pub fn sync(&self) -> Result<(), StoreError> {
        match self {
            Backend::Fjall(f) => f.sync(),
            Backend::Postgres(_) => Ok(()),
        }
    }

    /// Whether the database can be served from: false after a failed fsync (fjall, for good),
    /// or while PostgreSQL cannot be reached (until it can again).
    pub fn check(&self) -> Result<(), StoreError> {
        match self {
            Backend::Fjall(f) => f.check(),
            Backend::Postgres(p) => p.check(),
        }
    }

    /// Writes what is only in memory and the journal out to tables (fjall); nothing to do for
    /// PostgreSQL.
    pub fn flush(&self) -> Result<(), StoreError> {
        match self {
            Backend::Fjall(f) => f.flush(),
            Backend::Postgres(_) => Ok(()),
        }
    }

    pub fn disk_space(&self) -> Result<u64, StoreError> {
        match self {
            Backend::Fjall(f) => f.disk_space(),
            Backend::Postgres(p) => p.disk_space(),
        }
    }
}

/// The smallest key greater than every key starting with `prefix` (none when the prefix is all
/// `0xff`).
pub(crate) fn prefix_end(prefix: &[u8]) -> Option<Vec<u8>> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return Some(end);
        }
    }
    None
}

/// A range of a PostgreSQL table read a page at a time.
struct Pages<'a> {
    kv: &'a postgres::PgKv,
    ks: Ks,
    from: Vec<u8>,
    to: Option<Vec<u8>>,
    rev: bool,
    page: std::vec::IntoIter<Entry>,
    done: bool,
}

impl Iterator for Pages<'_> {
    type Item = Result<Entry, StoreError>;

    fn next(&mut self) -> Option<Self::Item> {
        if let Some(e) = self.page.next() {
            return Some(Ok(e));
        }
        if self.done {
            return None;
        }
        let page = match self
            .kv
            .scan(self.ks, &self.from, self.to.as_deref(), self.rev, PAGE)
        {
            Ok(p) => p,
            Err(e) => {
                self.done = true;
                return Some(Err(e));
            }
        };
        self.done = page.len() < PAGE;
        if let Some((last, _)) = page.last() {
            // The next page starts past this one's last key.
            if self.rev {
                self.to = Some(last.clone());
            } else {
                let mut next = last.clone();
                next.push(0);
                self.from = next;
            }
        }
        self.page = page.into_iter();
        self.page.next().map(Ok)
    }
}

#[cfg(test)]
mod tests {
    use super::prefix_end;

    #[test]
    fn prefix_end_is_the_next_prefix() {
        assert_eq!(prefix_end(b"a\0"), Some(b"a\x01".to_vec()));
        assert_eq!(prefix_end(b"a\xff"), Some(b"b".to_vec()));
        assert_eq!(prefix_end(b"\xff\xff"), None);
        assert_eq!(prefix_end(b""), None);
    }
}
