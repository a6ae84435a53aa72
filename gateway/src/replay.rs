//! Policy replay: every recorded call in a window judged again under another policy set, with
//! what was recorded of it (tool, canonical args, context, principal, classifier results, and
//! the time it was decided), and compared with the decision it got. Fed the audit records one
//! by one, oldest first (from a store or an export; [`crate::cli`] reads them), it gives a
//! [`Report`]: a count for every recorded → replayed pair of decisions (and, for calls held
//! for approval both times, how many the set would hold with looser or stricter settings: a
//! widening is a widening whatever it widens), and each call that would change, widening ones
//! first.
//!
//! A call is replayed as what it became: an approver's edit replaces its args, and a suspended
//! call's resume is judged as the resume it was (with its `resume` data), beside the call.
//! What cannot be replayed faithfully is counted, never guessed: args or resume data with a
//! redacted field, a record that lacks the principal's role (written before roles were
//! recorded), a call whose args no longer parse, and every call when the set reads
//! `definition` (records do not carry the MCP tool definition a call was judged with). Calls
//! pruned from the log are not there to count: the report says how many records were pruned.
//!
//! It reads and evaluates; it writes nothing and calls no classifier.

use std::collections::{BTreeMap, HashMap};

use airlock_policy::cases::fixed_classifiers;
use airlock_policy::{
    evaluate, ApprovalSettings, Change, DecisionKind, Input, PolicySet, ToolCall,
};
use serde_json::{json, Value};

use crate::clock::{rfc3339, to_system_time};
use crate::shadow::widens;

/// How many changed calls a report keeps (the counts cover them all).
pub const MAX_CHANGED: usize = 1000;

/// Why a recorded call was not replayed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum NotReplayable {
    Redacted,
    Elided,
    NoRole,
    Unparsable,
    Definition,
}

impl NotReplayable {
    pub fn as_str(self) -> &'static str {
        match self {
            NotReplayable::Redacted => "redacted",
            NotReplayable::Elided => "elided",
            NotReplayable::NoRole => "no_role",
            NotReplayable::Unparsable => "unparsable",
            NotReplayable::Definition => "definition",
        }
    }

    /// Why, in words.
    pub fn words(self) -> &'static str {
        match self {
            NotReplayable::Redacted => "args or resume data with a redacted field",
            NotReplayable::Elided => {
                "a denied call whose args were too big to keep (only their fingerprint and size are)"
            }
            NotReplayable::NoRole => "recorded without the principal's role and groups",
            NotReplayable::Unparsable => "args that do not parse",
            NotReplayable::Definition => {
                "the set reads `definition`, which audit records do not carry"
            }
        }
    }
}

/// One call as recorded, ready to judge again.
struct Recorded {
    call_id: String,
    what: &'static str,
    tool: String,
    args: Value,
    context: Value,
    principal: Value,
    classifiers: Option<Value>,
    resume: Option<Value>,
    at: u64,
    decision: DecisionKind,
    /// The approval settings it was held with (records written before they were recorded
    /// have none: only their decision is compared).
    approval: Option<ApprovalSettings>,
    rules: Vec<String>,
    /// An MCP request other than a tool call (`request.decided`): its kind and what it names.
    request: Option<airlock_policy::OwnedRequest>,
}

/// A call whose replayed verdict differs from the recorded one.
#[derive(Debug, Clone)]
pub struct Changed {
    pub call_id: String,
    /// `call`, `edited` (replayed with an approver's edit), `resume` or `request` (an MCP
    /// request other than a tool call; `tool` then says its kind and what it names).
    pub what: &'static str,
    pub tool: String,
    pub at: u64,
    pub recorded: DecisionKind,
    pub replayed: DecisionKind,
    pub recorded_rules: Vec<String>,
    pub replayed_rules: Vec<String>,
    /// How the verdict changed: another decision, or looser or stricter approval settings.
    pub change: Change,
    /// The approval settings that changed (`approvers`, `quorum`, `grant.uses`, …).
    pub settings: Vec<&'static str>,
}

impl Changed {
    /// Whether the replayed verdict lets the call go further.
    pub fn widening(&self) -> bool {
        widens(self.recorded, self.replayed) || self.change == Change::Looser
    }
}

/// What a replay found.
#[derive(Debug, Default)]
pub struct Report {
    pub policy_version: String,
    /// Records read, and the first and last time of the calls replayed.
    pub records: u64,
    pub first: Option<u64>,
    pub last: Option<u64>,
    /// Calls by recorded and replayed decision: `[recorded][replayed]`, in the order allow,
    /// require_approval, deny.
    pub counts: [[u64; 3]; 3],
    /// Calls held for approval both times, replayed with looser settings (a widening), and
    /// with only stricter ones; not in `counts`.
    pub looser: u64,
    pub stricter: u64,
    pub not_replayable: BTreeMap<NotReplayable, u64>,
    /// Audit records pruned from the log (its `audit.pruned` records say how many): the calls
    /// among them cannot be replayed from this log.
    pub pruned: u64,
    /// Widening first, then by time; at most [`MAX_CHANGED`].
    pub changed: Vec<Changed>,
}

const KINDS: [DecisionKind; 3] = [
    DecisionKind::Allow,
    DecisionKind::RequireApproval,
    DecisionKind::Deny,
];

fn index(k: DecisionKind) -> usize {
    KINDS.iter().position(|x| *x == k).unwrap_or(2)
}

fn kind_of(s: &str) -> Option<DecisionKind> {
    KINDS.iter().copied().find(|k| k.as_str() == s)
}

impl Report {
    pub fn replayed(&self) -> u64 {
        self.counts.iter().flatten().sum::<u64>() + self.looser + self.stricter
    }

    /// Calls whose replayed verdict lets them go further: a wider decision, or an approval
    /// with looser settings.
    pub fn widening(&self) -> u64 {
        let mut n = self.looser;
        for (l, row) in self.counts.iter().enumerate() {
            for (r, count) in row.iter().enumerate() {
                if widens(KINDS[l], KINDS[r]) {
                    n += count;
                }
            }
        }
        n
    }

    /// The pairs seen, differing ones first (widening before narrowing), as
    /// `(recorded, replayed, settings, count)`: `settings` is `looser` or `stricter` for
    /// calls held for approval both times whose settings changed.
    pub fn transitions(&self) -> Vec<Transition> {
        let mut out = Vec::new();
        for (l, row) in self.counts.iter().enumerate() {
            for (r, &count) in row.iter().enumerate() {
                if count > 0 {
                    out.push(Transition {
                        recorded: KINDS[l],
                        replayed: KINDS[r],
                        settings: None,
                        count,
                    });
                }
            }
        }
        let held = DecisionKind::RequireApproval;
        for (settings, count) in [("looser", self.looser), ("stricter", self.stricter)] {
            if count > 0 {
                out.push(Transition {
                    recorded: held,
                    replayed: held,
                    settings: Some(settings),
                    count,
                });
            }
        }
        out.sort_by_key(|t| (!t.changed(), !t.widening(), std::cmp::Reverse(t.count)));
        out
    }

    pub fn to_json(&self) -> Value {
        json!({
            "policy_version": self.policy_version,
            "records": self.records,
            "from": self.first.map(rfc3339),
            "to": self.last.map(rfc3339),
            "replayed": self.replayed(),
            "widening": self.widening(),
            "pruned_records": self.pruned,
            "not_replayable": self.not_replayable.iter().map(|(k, v)| (k.as_str().to_owned(), json!(v))).collect::<serde_json::Map<_, _>>(),
            "transitions": self.transitions().iter().map(|t| json!({
                "recorded": t.recorded.as_str(), "replayed": t.replayed.as_str(), "count": t.count,
                "settings": t.settings, "changed": t.changed(), "widening": t.widening(),
            })).collect::<Vec<_>>(),
            "changed": self.changed.iter().map(|c| json!({
                "call_id": c.call_id, "what": c.what, "tool": c.tool, "at": rfc3339(c.at),
                "recorded": c.recorded.as_str(), "replayed": c.replayed.as_str(),
                "widening": c.widening(), "settings": c.settings,
                "recorded_rules": c.recorded_rules, "replayed_rules": c.replayed_rules,
            })).collect::<Vec<_>>(),
        })
    }
}

/// One row of the transition table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Transition {
    pub recorded: DecisionKind,
    pub replayed: DecisionKind,
    /// `looser` or `stricter`: held for approval both times, with other settings.
    pub settings: Option<&'static str>,
    pub count: u64,
}

impl Transition {
    pub fn changed(&self) -> bool {
        self.recorded != self.replayed || self.settings.is_some()
    }

    pub fn widening(&self) -> bool {
        widens(self.recorded, self.replayed) || self.settings == Some("looser")
    }
}

/// Replays the records it is fed under one policy set, within `[since, until)` (ms).
pub struct Replayer {
    policy: PolicySet,
    since: u64,
    until: u64,
    reads_definition: bool,
    /// Calls that waited for an approval: judged when their edit arrives, or at the end.
    waiting: HashMap<String, Recorded>,
    report: Report,
}

impl Replayer {
    pub fn new(policy: PolicySet, since: Option<u64>, until: Option<u64>) -> Replayer {
        let report = Report {
            policy_version: policy.version().to_owned(),
            ..Report::default()
        };
        Replayer {
            reads_definition: policy.reads("definition"),
            policy,
            since: since.unwrap_or(0),
            until: until.unwrap_or(u64::MAX),
            waiting: HashMap::new(),
            report,
        }
    }

    /// Reads one audit record.
    pub fn record(&mut self, r: &Value) {
        self.report.records += 1;
        let kind = r.get("kind").and_then(Value::as_str).unwrap_or("");
        let at = r.get("ts").and_then(Value::as_u64).unwrap_or(0);
        match kind {
            "call.decided" | "call.resumed" | "call.resume_denied" | "request.decided" => {
                if at < self.since || at >= self.until {
                    return;
                }
                let resume = kind == "call.resumed" || kind == "call.resume_denied";
                let recorded = match read(r, at, resume) {
                    Ok(c) => c,
                    Err(why) => return self.skip(why),
                };
                if recorded.decision == DecisionKind::RequireApproval && !resume {
                    self.waiting.insert(recorded.call_id.clone(), recorded);
                } else {
                    self.judge(recorded);
                }
            }
            // An approval that ran an edit: the call is replayed with the edited args.
            "approval.decided" if r.get("edited") == Some(&Value::Bool(true)) => {
                let id = r.get("call_id").and_then(Value::as_str).unwrap_or("");
                if r.get("status").and_then(Value::as_str) != Some("approved") {
                    return;
                }
                if let Some(mut c) = self.waiting.remove(id) {
                    c.args = r.get("args").cloned().unwrap_or(Value::Null);
                    c.what = "edited";
                    self.judge(c);
                }
            }
            "audit.pruned" => {
                self.report.pruned += r.get("dropped").and_then(Value::as_u64).unwrap_or(0);
            }
            _ => {}
        }
    }

    /// The report, once every record is read.
    pub fn finish(mut self) -> Report {
        let mut waiting: Vec<Recorded> = self.waiting.drain().map(|(_, c)| c).collect();
        waiting.sort_by_key(|c| c.at);
        for c in waiting {
            self.judge(c);
        }
        let changed = &mut self.report.changed;
        changed.sort_by_key(|c| (!c.widening(), c.at));
        self.report
    }

    fn skip(&mut self, why: NotReplayable) {
        *self.report.not_replayable.entry(why).or_default() += 1;
    }

    fn judge(&mut self, c: Recorded) {
        if self.reads_definition {
            return self.skip(NotReplayable::Definition);
        }
        if has_redacted(&c.args) || c.resume.as_ref().is_some_and(has_redacted) {
            return self.skip(NotReplayable::Redacted);
        }
        let call = ToolCall::again(&c.tool, c.request.as_ref(), c.args, Some(c.context));
        let Ok(call) = call else {
            return self.skip(NotReplayable::Unparsable);
        };
        let request = c
            .request
            .clone()
            .unwrap_or_else(airlock_policy::OwnedRequest::tool);
        let classifiers = match c.classifiers.as_ref().map(fixed_classifiers).transpose() {
            Ok(found) => found.unwrap_or_default(),
            Err(_) => return self.skip(NotReplayable::Unparsable),
        };
        let decision = evaluate(
            &self.policy,
            &Input {
                tool: &call.tool,
                args: &call.args,
                context: &call.context,
                principal: &c.principal,
                fingerprint: call.fingerprint.as_str(),
                now: to_system_time(c.at),
                classifiers: &classifiers,
                resume: c.resume.as_ref(),
                definition: None,
                request: request.as_request(),
            },
        );
        let report = &mut self.report;
        let (change, settings) = Change::of(
            (c.decision, c.approval.as_ref()),
            (decision.decision, decision.approval.as_ref()),
        );
        match change {
            Change::Looser => report.looser += 1,
            Change::Stricter => report.stricter += 1,
            Change::Same | Change::Decision => {
                report.counts[index(c.decision)][index(decision.decision)] += 1
            }
        }
        report.first = Some(report.first.map_or(c.at, |f| f.min(c.at)));
        report.last = Some(report.last.map_or(c.at, |l| l.max(c.at)));
        if change != Change::Same && report.changed.len() < MAX_CHANGED {
            report.changed.push(Changed {
                call_id: c.call_id,
                what: c.what,
                tool: airlock_policy::subject(&call.tool, c.request.as_ref()),
                at: c.at,
                recorded: c.decision,
                replayed: decision.decision,
                recorded_rules: c.rules,
                replayed_rules: decision.rules,
                change,
                settings,
            });
        }
    }
}

/// True when any string in `v` is the redaction marker.
fn has_redacted(v: &Value) -> bool {
    match v {
        Value::String(s) => s == "[redacted]",
        Value::Array(a) => a.iter().any(has_redacted),
        Value::Object(m) => m.values().any(has_redacted),
        _ => false,
    }
}

/// A call (or resume) record as the inputs policy judged it with.
fn read(r: &Value, at: u64, resume: bool) -> Result<Recorded, NotReplayable> {
    let s = |k: &str| r.get(k).and_then(Value::as_str).unwrap_or("").to_owned();
    let Some(role) = r.get("role").and_then(Value::as_str) else {
        return Err(NotReplayable::NoRole);
    };
    if r.get("args_elided").is_some() {
        return Err(NotReplayable::Elided);
    }
    let decision = r
        .get("decision")
        .and_then(Value::as_str)
        .and_then(kind_of)
        .ok_or(NotReplayable::Unparsable)?;
    let principal = json!({
        "id": s("principal"),
        "role": role,
        "groups": r.get("groups").cloned().unwrap_or_else(|| json!([])),
        "issuer": r.get("issuer").cloned().unwrap_or(Value::Null),
        "actor": r.get("actor").cloned().unwrap_or(Value::Null),
        "claims": r.get("claims").cloned().unwrap_or_else(|| json!({})),
    });
    let rules = r
        .get("rules")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(|v| v.as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default();
    Ok(Recorded {
        call_id: s("call_id"),
        what: match (resume, r.get("request_kind").is_some()) {
            (true, _) => "resume",
            (false, true) => "request",
            (false, false) => "call",
        },
        tool: s("tool"),
        args: r.get("args").cloned().unwrap_or(Value::Null),
        context: r.get("context").cloned().unwrap_or_else(|| json!({})),
        principal,
        classifiers: r.get("classifiers").cloned(),
        resume: if resume {
            Some(r.get("resume_data").cloned().unwrap_or(Value::Null))
        } else {
            None
        },
        at,
        decision,
        approval: r
            .get("approval")
            .and_then(|a| serde_json::from_value(a.clone()).ok()),
        rules,
        request: r
            .get("request_kind")
            .and_then(Value::as_str)
            .map(|k| {
                airlock_policy::RequestKind::parse(k)
                    .map(|kind| airlock_policy::OwnedRequest {
                        kind,
                        server: s("server"),
                        uri: r.get("uri").and_then(Value::as_str).map(str::to_owned),
                        prompt: r.get("prompt").and_then(Value::as_str).map(str::to_owned),
                    })
                    .ok_or(NotReplayable::Unparsable)
            })
            .transpose()?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(text: &str) -> PolicySet {
        PolicySet::from_sources(vec![("p/policy.toml".into(), text.to_owned())]).unwrap()
    }

    const LIVE: &str = "version = 1\n[defaults]\ndecision = \"allow\"\n[[rules]]\nid = \"no-rm\"\ntools = [\"shell.*\"]\nwhen = 'args.cmd.startsWith(\"rm\")'\ndecision = \"deny\"\n";

    fn call(id: &str, cmd: &str, decision: &str, rules: &[&str]) -> Value {
        json!({"kind": "call.decided", "ts": 1_000, "call_id": id, "tool": "shell.exec",
               "args": {"cmd": cmd}, "context": {}, "principal": "a", "role": "agent", "groups": [],
               "decision": decision, "rules": rules})
    }

    #[test]
    fn the_live_set_changes_nothing_and_a_looser_one_widens() {
        let records = [
            call("c1", "ls", "allow", &[]),
            call("c2", "rm -rf /", "deny", &["no-rm"]),
            json!({"kind": "call.decided", "ts": 2_000, "call_id": "c3", "tool": "shell.exec",
                   "args": {"cmd": "[redacted]"}, "context": {}, "principal": "a", "role": "agent",
                   "decision": "allow", "rules": []}),
            json!({"kind": "call.decided", "ts": 2_000, "call_id": "c4", "tool": "shell.exec",
                   "args": {"cmd": "ls"}, "context": {}, "principal": "a",
                   "decision": "allow", "rules": []}),
        ];
        let mut same = Replayer::new(set(LIVE), None, None);
        same.record(&json!({"kind": "audit.pruned", "ts": 1, "dropped": 40}));
        for r in &records {
            same.record(r);
        }
        let report = same.finish();
        assert_eq!(report.pruned, 40);
        assert_eq!(report.replayed(), 2);
        assert!(report.changed.is_empty());
        assert_eq!(report.not_replayable[&NotReplayable::Redacted], 1);
        assert_eq!(report.not_replayable[&NotReplayable::NoRole], 1);

        let mut loose = Replayer::new(
            set("version = 1\n[defaults]\ndecision = \"allow\"\n"),
            None,
            None,
        );
        for r in &records {
            loose.record(r);
        }
        let report = loose.finish();
        assert_eq!(report.widening(), 1);
        assert_eq!(report.changed[0].call_id, "c2");
        assert_eq!(report.changed[0].recorded_rules, ["no-rm"]);
        assert!(report.changed[0].replayed_rules.is_empty());
    }

    #[test]
    fn an_edit_is_replayed_as_the_call_it_became_and_the_window_holds() {
        let held = json!({"kind": "call.decided", "ts": 5_000, "call_id": "c9", "tool": "shell.exec",
            "args": {"cmd": "ls"}, "context": {}, "principal": "a", "role": "agent", "groups": [],
            "decision": "require_approval", "rules": ["ask"]});
        let edit = json!({"kind": "approval.decided", "ts": 6_000, "call_id": "c9", "edited": true,
            "status": "approved", "args": {"cmd": "rm -rf /tmp/x"}});
        let ask = "version = 1\n[defaults]\ndecision = \"require_approval\"\n[[rules]]\nid = \"no-rm\"\ntools = [\"shell.*\"]\nwhen = 'args.cmd.startsWith(\"rm\")'\ndecision = \"deny\"\n";
        let mut r = Replayer::new(set(ask), None, None);
        r.record(&held);
        r.record(&edit);
        let report = r.finish();
        assert_eq!(report.changed.len(), 1);
        assert_eq!(report.changed[0].what, "edited");
        assert_eq!(report.changed[0].replayed, DecisionKind::Deny);

        let mut outside = Replayer::new(set(ask), Some(5_001), None);
        outside.record(&held);
        outside.record(&edit);
        assert_eq!(outside.finish().replayed(), 0);
    }

    #[test]
    fn a_resource_read_is_replayed_as_the_request_it_was() {
        let read = |uri: &str| {
            json!({"kind": "request.decided", "ts": 3_000, "request_kind": "resource",
                   "server": "fs", "uri": uri, "args": {"uri": uri}, "context": {},
                   "principal": "a", "role": "agent", "groups": [], "decision": "allow",
                   "rules": []})
        };
        let candidate = set("version = 1\n[defaults]\ndecision = \"allow\"\n[[rules]]\nid = \"no-keys\"\nresources = [\"file:///home/*/.ssh/*\"]\nwhen = 'server == \"fs\" && kind == \"resource\"'\ndecision = \"deny\"\n");
        let mut r = Replayer::new(candidate, None, None);
        r.record(&read("file:///home/ann/.ssh/id_ed25519"));
        r.record(&read("file:///srv/readme"));
        // A held read is recorded as its call's decision, with the same request fields.
        let mut held = read("file:///home/bob/.ssh/id_rsa");
        held["kind"] = json!("call.decided");
        held["call_id"] = json!("c7");
        held["decision"] = json!("require_approval");
        r.record(&held);
        // A tool call reading the same path is not a resource read: no rule for it.
        r.record(&call(
            "c1",
            "file:///home/ann/.ssh/id_ed25519",
            "allow",
            &[],
        ));
        let report = r.finish();
        assert_eq!(report.replayed(), 4);
        assert_eq!(report.changed.len(), 2, "{:?}", report.changed);
        let c = &report.changed[0];
        assert_eq!(
            (c.what, c.tool.as_str(), c.replayed),
            (
                "request",
                "resource file:///home/ann/.ssh/id_ed25519 (fs)",
                DecisionKind::Deny
            )
        );
        let c = &report.changed[1];
        assert_eq!(
            (c.call_id.as_str(), c.tool.as_str(), c.recorded, c.replayed),
            (
                "c7",
                "resource file:///home/bob/.ssh/id_rsa (fs)",
                DecisionKind::RequireApproval,
                DecisionKind::Deny
            )
        );
    }
}
