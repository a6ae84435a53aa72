//! What a principal sees in lists (`tools/list`, `resources/list`, `prompts/list`, an agent's
//! `GET /v1/tools`): an item the live policy denies it whatever a request carries
//! ([`airlock_policy::denies_request_outright`]: a deny rule reading only what the list knows
//! of the item and the principal, or a default deny no other rule lifts) is left out, so an
//! agent is not shown, and tempted by, what it can never use. Using a hidden item by name is
//! still decided, and denied, as before.
//!
//! What is hidden is worked out once per (principal, policy version, list) and kept, so a list
//! costs a lookup, not an evaluation per item. It decides nothing and reads no args.

use std::collections::hash_map::DefaultHasher;
use std::collections::{HashMap, HashSet};
use std::hash::{Hash, Hasher};
use std::sync::{Arc, Mutex};

use airlock_policy::{PolicySet, Request, RequestKind};
use serde_json::Value;

/// How many (principal, policy, list) answers are kept; past it, all are dropped and worked
/// out again as asked (a new policy version or list makes the old ones useless anyway).
const KEPT: usize = 4096;

/// The principal as policy sees it, the policy version, and a hash of the list (its kind, and
/// each item's server and name).
type Key = (String, String, u64);

/// One item of a list: the MCP upstream serving it (`""` when the list does not say) and its
/// name (a tool's or prompt's visible name, a resource's URI).
pub type Item<'a> = (&'a str, &'a str);

/// The hidden names of each (principal, policy version, list) asked for so far.
#[derive(Default)]
pub struct Visible {
    kept: Mutex<HashMap<Key, Arc<HashSet<String>>>>,
}

impl Visible {
    /// The names among `items` (of `kind`) that `set` denies outright to `principal` (as policy
    /// sees it).
    pub fn hidden(
        &self,
        set: &PolicySet,
        principal: &Value,
        kind: RequestKind,
        items: &[Item<'_>],
    ) -> Arc<HashSet<String>> {
        let mut h = DefaultHasher::new();
        kind.hash(&mut h);
        items.hash(&mut h);
        let key = (principal.to_string(), set.version().to_owned(), h.finish());
        if let Some(found) = self.lock().get(&key) {
            return found.clone();
        }
        let denied = |(server, name): &&Item<'_>| {
            let (tool, uri, prompt) = match kind {
                RequestKind::Tool => (*name, None, None),
                RequestKind::Resource => ("", Some(*name), None),
                _ => ("", None, Some(*name)),
            };
            let request = Request {
                kind,
                server,
                uri,
                prompt,
            };
            airlock_policy::denies_request_outright(set, tool, request, principal)
        };
        let hidden: Arc<HashSet<String>> = Arc::new(
            items
                .iter()
                .filter(denied)
                .map(|(_, name)| (*name).to_owned())
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
