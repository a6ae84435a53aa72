//! What a principal sees in lists (`tools/list`): a tool the live policy denies it whatever a
//! call carries ([`airlock_policy::denies_outright`]: a deny rule reading only the tool and the
//! principal, or a default deny no other rule lifts) is left out, so an agent is not shown,
//! and tempted by, what it can never call. Calling a hidden tool by name is still decided, and
//! denied, as before.
//!
//! What is hidden is worked out once per (principal, policy version, list) and kept, so a list
//! costs a lookup, not an evaluation per item. It decides nothing and reads no args.

use std::collections::hash_map::DefaultHasher;
use std::collections::{HashMap, HashSet};
use std::hash::{Hash, Hasher};
use std::sync::{Arc, Mutex};

use airlock_policy::PolicySet;
use serde_json::Value;

/// How many (principal, policy, list) answers are kept; past it, all are dropped and worked
/// out again as asked (a new policy version or list makes the old ones useless anyway).
const KEPT: usize = 4096;

/// The principal as policy sees it, the policy version, and a hash of the list's names.
type Key = (String, String, u64);

/// The hidden names of each (principal, policy version, list) asked for so far.
#[derive(Default)]
pub struct Visible {
    kept: Mutex<HashMap<Key, Arc<HashSet<String>>>>,
}

impl Visible {
    /// The names among `names` that `set` denies outright to `principal` (as policy sees it).
    pub fn hidden(
        &self,
        set: &PolicySet,
        principal: &Value,
        names: &[&str],
    ) -> Arc<HashSet<String>> {
        let mut h = DefaultHasher::new();
        names.hash(&mut h);
        let key = (principal.to_string(), set.version().to_owned(), h.finish());
        if let Some(found) = self.lock().get(&key) {
            return found.clone();
        }
        let hidden: Arc<HashSet<String>> = Arc::new(
            names
                .iter()
                .filter(|n| airlock_policy::denies_outright(set, n, principal))
                .map(|n| (*n).to_owned())
                .collect(),
        );
        let mut kept = self.lock();
        if kept.len() >= KEPT {
            kept.clear();
        }
        kept.insert(key, hidden.clone());
        hidden
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<Key, Arc<HashSet<String>>>> {
        self.kept.lock().unwrap_or_else(|e| e.into_inner())
    }
}
