//! The shadow policy: a second policy set, named by `[server] shadow_policy`, that every call
//! is evaluated by too, with the same inputs and the same classifier results, and whose
//! decision never changes what happens to the call. This module holds the shadow set and what
//! it has seen since it loaded: a count for every live → shadow pair of decisions, and the
//! latest calls of each pair that differ (for `GET /v1/policy/shadow` and the inbox page).
//!
//! It does not load files (the gateway's reload loads the live and the shadow set together),
//! evaluate (the decide stage does, beside the live set), or write anything: a call's audit
//! record carries the shadow decision through the decide stage's explanation.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use airlock_policy::{Decision, DecisionKind, PolicySet};
use arc_swap::ArcSwapOption;
use serde_json::{json, Value};

use crate::api::{ShadowCall, ShadowSummary, Time, Transition};

/// How many of the latest calls are kept for each pair of decisions that differ.
pub const LATEST: usize = 20;

/// The decisions in a fixed order: a pair's index is `live * 3 + shadow`.
const KINDS: [DecisionKind; 3] = [
    DecisionKind::Allow,
    DecisionKind::RequireApproval,
    DecisionKind::Deny,
];

fn index(kind: DecisionKind) -> usize {
    match kind {
        DecisionKind::Allow => 0,
        DecisionKind::RequireApproval => 1,
        DecisionKind::Deny => 2,
    }
}

/// True when the shadow decision lets the call go further than the live one: deny → allow,
/// deny → require_approval, require_approval → allow.
pub fn widens(live: DecisionKind, shadow: DecisionKind) -> bool {
    index(shadow) < index(live)
}

/// One call whose shadow decision differed, as the summary lists it.
#[derive(Clone)]
struct Sample {
    call_id: String,
    tool: String,
    principal: String,
    at: u64,
    live_rules: Vec<String>,
    shadow_rules: Vec<String>,
}

/// What the shadow set has seen since it loaded.
struct Seen {
    version: String,
    since: u64,
    counts: [AtomicU64; 9],
    latest: Mutex<[VecDeque<Sample>; 9]>,
}

impl Seen {
    fn new(version: String, since: u64) -> Self {
        Seen {
            version,
            since,
            counts: Default::default(),
            latest: Mutex::new(Default::default()),
        }
    }
}

/// The shadow set, when one is configured, and its transitions since it loaded.
#[derive(Default)]
pub struct Shadow {
    set: ArcSwapOption<PolicySet>,
    seen: ArcSwapOption<Seen>,
}

impl Shadow {
    /// The shadow set in force, if any.
    pub fn set(&self) -> Option<Arc<PolicySet>> {
        self.set.load_full()
    }

    /// Puts `set` in force at `now`. The transitions start again only when its version
    /// differs from the set it replaces (a reload of unchanged files keeps them).
    pub fn install(&self, set: PolicySet, now: u64) {
        let version = set.version().to_owned();
        let same = self
            .seen
            .load()
            .as_ref()
            .is_some_and(|s| s.version == version);
        if !same {
            self.seen.store(Some(Arc::new(Seen::new(version, now))));
        }
        self.set.store(Some(Arc::new(set)));
    }

    /// Counts one call's pair of decisions; keeps the call when they differ.
    pub fn observe(
        &self,
        call_id: &str,
        tool: &str,
        principal: &str,
        at: u64,
        live: &Decision,
        shadow: &Decision,
    ) {
        let Some(seen) = self.seen.load_full() else {
            return;
        };
        let pair = index(live.decision) * 3 + index(shadow.decision);
        seen.counts[pair].fetch_add(1, Ordering::Relaxed);
        if live.decision == shadow.decision {
            return;
        }
        let mut latest = seen.latest.lock().unwrap_or_else(|e| e.into_inner());
        let list = &mut latest[pair];
        if list.len() == LATEST {
            list.pop_back();
        }
        list.push_front(Sample {
            call_id: call_id.to_owned(),
            tool: tool.to_owned(),
            principal: principal.to_owned(),
            at,
            live_rules: live.rules.clone(),
            shadow_rules: shadow.rules.clone(),
        });
    }

    /// The summary `GET /v1/policy/shadow` answers: the shadow set's version, when it loaded,
    /// how many calls it saw, and each pair of decisions seen, the differing ones first
    /// (widening before narrowing), each with its latest calls. `null` without a shadow set.
    pub fn summary(&self, live_version: &str) -> ShadowSummary {
        let Some(seen) = self.seen.load_full() else {
            return ShadowSummary {
                configured: false,
                live_version: live_version.to_owned(),
                shadow_version: None,
                since: None,
                calls: None,
                transitions: None,
            };
        };
        let latest = seen.latest.lock().unwrap_or_else(|e| e.into_inner());
        let mut pairs = Vec::new();
        let mut total = 0;
        for (l, live) in KINDS.iter().enumerate() {
            for (s, shadow) in KINDS.iter().enumerate() {
                let count = seen.counts[l * 3 + s].load(Ordering::Relaxed);
                total += count;
                if count == 0 {
                    continue;
                }
                let calls: Vec<ShadowCall> = latest[l * 3 + s]
                    .iter()
                    .map(|c| ShadowCall {
                        call_id: c.call_id.clone(),
                        tool: c.tool.clone(),
                        principal: c.principal.clone(),
                        at: Time::of(c.at),
                        live_rules: c.live_rules.clone(),
                        shadow_rules: c.shadow_rules.clone(),
                    })
                    .collect();
                pairs.push((*live, *shadow, count, calls));
            }
        }
        // Differing first, widening before narrowing, then the most seen.
        pairs.sort_by_key(|(l, s, count, _)| (l == s, !widens(*l, *s), std::cmp::Reverse(*count)));
        let transitions = pairs
            .into_iter()
            .map(|(l, s, count, calls)| Transition {
                live: l.as_str(),
                shadow: s.as_str(),
                changed: l != s,
                widening: widens(l, s),
                count,
                calls,
            })
            .collect();
        ShadowSummary {
            configured: true,
            live_version: live_version.to_owned(),
            shadow_version: Some(seen.version.clone()),
            since: Some(Time::of(seen.since)),
            calls: Some(total),
            transitions: Some(transitions),
        }
    }
}

/// What a call's audit record says of the shadow decision (only when it differs).
pub fn record(shadow: &Decision) -> Value {
    json!({
        "decision": shadow.decision.as_str(),
        "rules": shadow.rules,
        "errors": shadow.errors,
        "policy_version": shadow.policy_version,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn widening_is_towards_allow() {
        use DecisionKind::*;
        assert!(widens(Deny, Allow));
        assert!(widens(Deny, RequireApproval));
        assert!(widens(RequireApproval, Allow));
        assert!(!widens(Allow, Deny));
        assert!(!widens(Allow, RequireApproval));
        assert!(!widens(RequireApproval, Deny));
        assert!(!widens(Allow, Allow));
    }
}
