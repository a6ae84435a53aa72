//! The shadow policy: a second policy set, named by `[server] shadow_policy`, that every call
//! is evaluated by too, with the same inputs and the same classifier results, and whose
//! decision never changes what happens to the call. This module holds the shadow set and what
//! it has seen since it loaded: a count for every live → shadow pair of decisions (and, for
//! calls both hold for approval, whether the shadow's settings are looser or stricter: a
//! widening is a widening whatever it widens), and the latest calls of each pair that differ
//! (for `GET /v1/policy/shadow` and the inbox page).
//!
//! It does not load files (the gateway's reload loads the live and the shadow set together),
//! evaluate (the decide stage does, beside the live set), or write anything: a call's audit
//! record carries the shadow decision through the decide stage's explanation.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use airlock_policy::{Change, Decision, DecisionKind, PolicySet};
use arc_swap::ArcSwapOption;
use serde_json::{json, Value};

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

/// The bucket of calls both sets hold for approval, the shadow set with looser settings
/// (a widening: other or more approver groups, a smaller quorum, a longer ttl, a larger
/// grant); and the one where they are only stricter. The nine decision pairs come first.
const LOOSER: usize = 9;
const STRICTER: usize = 10;
const BUCKETS: usize = 11;

/// How the shadow verdict differs from the live one: its bucket, and the approval settings
/// that changed (for [`LOOSER`] and [`STRICTER`]).
fn bucket(live: &Decision, shadow: &Decision) -> (usize, Change, Vec<&'static str>) {
    let (change, settings) = Change::of(
        (live.decision, live.approval.as_ref()),
        (shadow.decision, shadow.approval.as_ref()),
    );
    let at = match change {
        Change::Looser => LOOSER,
        Change::Stricter => STRICTER,
        Change::Same | Change::Decision => index(live.decision) * 3 + index(shadow.decision),
    };
    (at, change, settings)
}

/// Whether the shadow verdict differs from the live one in anything: the decision, or the
/// approval settings.
pub fn differs(live: &Decision, shadow: &Decision) -> bool {
    bucket(live, shadow).1 != Change::Same
}

/// One call whose shadow decision differed, as the summary lists it.
#[derive(Clone)]
pub struct Sample {
    pub call_id: String,
    pub tool: String,
    pub principal: String,
    pub at: u64,
    pub live_rules: Vec<String>,
    pub shadow_rules: Vec<String>,
    /// The approval settings the shadow set changed.
    pub settings: Vec<&'static str>,
}

/// What [`Shadow::summary`] gives: the live set's version, and what the shadow set has seen
/// since it loaded (`None` without a shadow set).
pub struct Summary {
    pub live_version: String,
    pub seen: Option<SeenSince>,
}

/// The shadow set's version, when it loaded, how many calls it decided, and each pair of
/// decisions seen, the differing ones first (widening before narrowing), then the most seen.
pub struct SeenSince {
    pub version: String,
    pub since: u64,
    pub calls: u64,
    pub pairs: Vec<Pair>,
}

/// Calls by live and shadow decision.
pub struct Pair {
    pub live: DecisionKind,
    pub shadow: DecisionKind,
    /// `looser` or `stricter`, for calls both sets hold for approval with other settings.
    pub settings: Option<&'static str>,
    pub changed: bool,
    /// The shadow verdict lets the call go further (see [`widens`]), or loosens an approval.
    pub widening: bool,
    pub count: u64,
    /// The latest calls of a pair that differs (at most [`LATEST`]), newest first.
    pub calls: Vec<Sample>,
}

/// What the shadow set has seen since it loaded.
struct Seen {
    version: String,
    since: u64,
    counts: [AtomicU64; BUCKETS],
    latest: Mutex<[VecDeque<Sample>; BUCKETS]>,
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
        let (pair, change, settings) = bucket(live, shadow);
        seen.counts[pair].fetch_add(1, Ordering::Relaxed);
        if change == Change::Same {
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
            settings,
        });
    }

    /// What the shadow set has seen since it loaded: each pair of decisions seen, the
    /// differing ones first (widening before narrowing), each with its latest calls.
    pub fn summary(&self, live_version: &str) -> Summary {
        let live_version = live_version.to_owned();
        let Some(seen) = self.seen.load_full() else {
            return Summary {
                live_version,
                seen: None,
            };
        };
        let latest = seen.latest.lock().unwrap_or_else(|e| e.into_inner());
        let mut pairs = Vec::new();
        let mut total = 0;
        for (at, list) in latest.iter().enumerate() {
            let count = seen.counts[at].load(Ordering::Relaxed);
            total += count;
            if count == 0 {
                continue;
            }
            let (live, shadow, settings) = match at {
                LOOSER => (
                    DecisionKind::RequireApproval,
                    DecisionKind::RequireApproval,
                    Some("looser"),
                ),
                STRICTER => (
                    DecisionKind::RequireApproval,
                    DecisionKind::RequireApproval,
                    Some("stricter"),
                ),
                _ => (KINDS[at / 3], KINDS[at % 3], None),
            };
            pairs.push(Pair {
                live,
                shadow,
                settings,
                changed: live != shadow || settings.is_some(),
                widening: widens(live, shadow) || at == LOOSER,
                count,
                calls: list.iter().cloned().collect(),
            });
        }
        pairs.sort_by_key(|t| (!t.changed, !t.widening, std::cmp::Reverse(t.count)));
        Summary {
            live_version,
            seen: Some(SeenSince {
                version: seen.version.clone(),
                since: seen.since,
                calls: total,
                pairs,
            }),
        }
    }
}

/// What a call's audit record says of the shadow verdict (only when it differs): its
/// decision, rules, errors, version, and for an approval its settings and the ones it
/// loosens or tightens.
pub fn record(live: &Decision, shadow: &Decision) -> Value {
    let (_, change, settings) = bucket(live, shadow);
    let mut v = json!({
        "decision": shadow.decision.as_str(),
        "rules": shadow.rules,
        "errors": shadow.errors,
        "policy_version": shadow.policy_version,
    });
    if let Some(a) = &shadow.approval {
        v["approval"] = serde_json::to_value(a).unwrap_or_default();
    }
    match change {
        Change::Looser => v["looser"] = json!(settings),
        Change::Stricter => v["stricter"] = json!(settings),
        Change::Same | Change::Decision => {}
    }
    v
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
