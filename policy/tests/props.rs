//! Property tests: the fingerprint ignores JSON spelling, and evaluation matches a small
//! reference model of the combination rules on generated policy sets.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::time::{Duration, SystemTime};

use airlock_policy::{evaluate, DecisionKind, Input, PolicySet, ToolCall};
use proptest::prelude::*;
use serde_json::{json, Value};

mod support;
use support::arb_json;

/// splitmix64: a tiny deterministic generator for spelling choices.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E3779B97F4A7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58476D1CE4E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D049BB133111EB);
        z ^ (z >> 31)
    }
    fn pick(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

/// Writes `v` as JSON text with random whitespace, key order, escapes and number spelling.
fn respell(v: &Value, rng: &mut Rng, out: &mut String) {
    const WS: [&str; 5] = ["", " ", "\n", "\t", "\r\n  "];
    out.push_str(WS[rng.pick(WS.len())]);
    match v {
        Value::Null => out.push_str("null"),
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::Number(n) => {
            if let Some(i) = n.as_i64() {
                let forms = [
                    format!("{i}"),
                    format!("{i}.0"),
                    format!("{i}.000"),
                    format!("{i}e0"),
                    format!("{i}0e-1"),
                ];
                out.push_str(&forms[rng.pick(forms.len())]);
            } else {
                let f = n.as_f64().unwrap();
                let mut forms = vec![format!("{f:?}"), format!("{f:e}"), format!("{f:E}")];
                if f.fract() != 0.0 {
                    forms.push(format!("{f}"));
                }
                let form = forms.swap_remove(rng.pick(forms.len()));
                out.push_str(&form);
            }
        }
        Value::String(s) => respell_str(s, rng, out),
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                respell(item, rng, out);
                out.push_str(WS[rng.pick(WS.len())]);
            }
            out.push(']');
        }
        Value::Object(map) => {
            let mut entries: Vec<_> = map.iter().collect();
            for i in (1..entries.len()).rev() {
                entries.swap(i, rng.pick(i + 1));
            }
            out.push('{');
            for (i, (k, item)) in entries.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(WS[rng.pick(WS.len())]);
                respell_str(k, rng, out);
                out.push(':');
                respell(item, rng, out);
            }
            out.push('}');
        }
    }
    out.push_str(WS[rng.pick(WS.len())]);
}

fn respell_str(s: &str, rng: &mut Rng, out: &mut String) {
    out.push('"');
    for c in s.chars() {
        let must_escape = c == '"' || c == '\\' || (c as u32) < 0x20;
        if must_escape || rng.pick(3) == 0 {
            match c {
                '\n' if rng.pick(2) == 0 => out.push_str("\\n"),
                '"' if rng.pick(2) == 0 => out.push_str("\\\""),
                _ => {
                    let mut units = [0u16; 2];
                    for u in c.encode_utf16(&mut units) {
                        out.push_str(&format!("\\u{:04X}", u));
                    }
                }
            }
        } else if c == '/' && rng.pick(2) == 0 {
            out.push_str("\\/");
        } else {
            out.push(c);
        }
    }
    out.push('"');
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn fingerprint_ignores_spelling(value in prop::collection::btree_map("\\PC{0,6}", arb_json(), 0..6), seed in any::<u64>()) {
        let args = Value::Object(value.into_iter().collect());
        let baseline = ToolCall::new("t.x", args.clone(), None).unwrap();
        let mut rng = Rng(seed);
        for _ in 0..3 {
            let mut text = String::new();
            respell(&args, &mut rng, &mut text);
            let call = ToolCall::from_args_json("t.x", text.as_bytes())
                .unwrap_or_else(|e| panic!("{e}: {text}"));
            prop_assert_eq!(&call.canonical_args, &baseline.canonical_args, "{}", text);
            prop_assert_eq!(&call.fingerprint, &baseline.fingerprint);
        }
    }

    #[test]
    fn distinct_canonical_forms_have_distinct_fingerprints(a in arb_json(), b in arb_json()) {
        let fa = ToolCall::new("t.x", json!({"v": a}), None).unwrap();
        let fb = ToolCall::new("t.x", json!({"v": b}), None).unwrap();
        prop_assert_eq!(fa.canonical_args == fb.canonical_args, fa.fingerprint == fb.fingerprint);
        // And the tool is bound too.
        let other_tool = ToolCall::new("t.y", fa.args.clone(), None).unwrap();
        prop_assert_ne!(fa.fingerprint, other_tool.fingerprint);
    }
}

// ---- Combination semantics against a reference model ----

#[derive(Debug, Clone)]
struct RuleSpec {
    decision: DecisionKind,
    /// 0 true, 1 false, 2 missing key (error), 3 not a bool (error).
    when: u8,
    /// Index into TOOL_PATTERNS, or none for every tool.
    tools: Option<usize>,
    quorum: u32,
    ttl_minutes: u64,
}

#[derive(Debug, Clone)]
struct SetSpec {
    default: DecisionKind,
    on_error: DecisionKind,
    agent_flag: bool,
    tool_flag: Option<usize>,
    rules: Vec<RuleSpec>,
}

const TOOL_PATTERNS: [&str; 3] = ["t.a", "t.*", "x.*"];
const TOOLS: [&str; 3] = ["t.a", "t.b", "x.c"];
const WHENS: [&str; 4] = ["true", "false", "args.missing > 1", "1 + 1"];

fn pattern_matches(pattern: &str, tool: &str) -> bool {
    match pattern.strip_suffix('*') {
        Some(prefix) => tool.starts_with(prefix),
        None => pattern == tool,
    }
}

fn decision_name(d: DecisionKind) -> &'static str {
    d.as_str()
}

fn arb_decision() -> impl Strategy<Value = DecisionKind> {
    prop_oneof![
        Just(DecisionKind::Allow),
        Just(DecisionKind::RequireApproval),
        Just(DecisionKind::Deny)
    ]
}

fn arb_set() -> impl Strategy<Value = SetSpec> {
    let rule = (
        arb_decision(),
        0u8..4,
        prop::option::of(0usize..3),
        1u32..4,
        1u64..90,
    )
        .prop_map(|(decision, when, tools, quorum, ttl_minutes)| RuleSpec {
            decision,
            when,
            tools,
            quorum,
            ttl_minutes,
        });
    (
        arb_decision(),
        prop_oneof![
            Just(DecisionKind::Deny),
            Just(DecisionKind::RequireApproval)
        ],
        any::<bool>(),
        prop::option::of(0usize..3),
        prop::collection::vec(rule, 0..8),
    )
        .prop_map(
            |(default, on_error, agent_flag, tool_flag, rules)| SetSpec {
                default,
                on_error,
                agent_flag,
                tool_flag,
                rules,
            },
        )
}

/// Writes the spec as a policy file; `order` permutes the rules as written.
fn to_toml(spec: &SetSpec, order: &[usize]) -> String {
    let mut s = format!(
        "version = 1\n[defaults]\ndecision = \"{}\"\non_error = \"{}\"\napproval_ttl = \"2h\"\n",
        decision_name(spec.default),
        decision_name(spec.on_error)
    );
    if spec.agent_flag {
        s.push_str("[agents.bot]\nrequire_tool_approval = true\n");
    }
    if let Some(t) = spec.tool_flag {
        s.push_str(&format!(
            "[tools.\"{}\"]\nrequire_approval = true\n",
            TOOL_PATTERNS[t]
        ));
    }
    for &i in order {
        let r = &spec.rules[i];
        s.push_str(&format!(
            "[[rules]]\nid = \"r{i}\"\nwhen = '{}'\ndecision = \"{}\"\n",
            WHENS[r.when as usize],
            decision_name(r.decision)
        ));
        if let Some(t) = r.tools {
            s.push_str(&format!("tools = [\"{}\"]\n", TOOL_PATTERNS[t]));
        }
        if r.decision == DecisionKind::RequireApproval {
            s.push_str(&format!(
                "quorum = {}\napproval_ttl = \"{}m\"\n",
                r.quorum, r.ttl_minutes
            ));
        }
    }
    s
}

#[derive(Debug, PartialEq)]
struct Expected {
    decision: DecisionKind,
    rules: BTreeSet<String>,
    errors: BTreeSet<String>,
    quorum: Option<u32>,
    ttl: Option<Duration>,
}

/// The combination rules of DESIGN §4, written as plainly as possible.
fn reference(spec: &SetSpec, tool: &str, agent: &str) -> Expected {
    let mut decision: Option<DecisionKind> = None;
    let mut rules = BTreeSet::new();
    let mut errors = BTreeSet::new();
    let mut approval_sources: Vec<(u32, Duration)> = Vec::new();
    let default_ttl = Duration::from_secs(7200);
    for (i, r) in spec.rules.iter().enumerate() {
        if let Some(t) = r.tools {
            if !pattern_matches(TOOL_PATTERNS[t], tool) {
                continue;
            }
        }
        let yielded = match r.when {
            0 => {
                rules.insert(format!("r{i}"));
                r.decision
            }
            1 => continue,
            _ => {
                errors.insert(format!("r{i}"));
                // The stricter of the rule's own decision and on_error.
                if r.decision == DecisionKind::Deny {
                    DecisionKind::Deny
                } else {
                    spec.on_error
                }
            }
        };
        if yielded == DecisionKind::RequireApproval {
            if r.decision == DecisionKind::RequireApproval {
                approval_sources.push((r.quorum, Duration::from_secs(r.ttl_minutes * 60)));
            } else {
                approval_sources.push((1, default_ttl));
            }
        }
        decision = Some(match decision {
            None => yielded,
            Some(d) if d == DecisionKind::Deny || yielded == DecisionKind::Deny => {
                DecisionKind::Deny
            }
            Some(d)
                if d == DecisionKind::RequireApproval
                    || yielded == DecisionKind::RequireApproval =>
            {
                DecisionKind::RequireApproval
            }
            Some(_) => DecisionKind::Allow,
        });
    }
    let mut flagged = false;
    if spec.agent_flag && agent == "bot" {
        rules.insert("agent:bot".into());
        flagged = true;
    }
    if let Some(t) = spec.tool_flag {
        if pattern_matches(TOOL_PATTERNS[t], tool) {
            rules.insert(format!("tool:{}", TOOL_PATTERNS[t]));
            flagged = true;
        }
    }
    let mut decision = decision.unwrap_or(spec.default);
    if flagged && decision == DecisionKind::Allow {
        decision = DecisionKind::RequireApproval;
    }
    let (quorum, ttl) = if decision == DecisionKind::RequireApproval {
        if approval_sources.is_empty() {
            (Some(1), Some(default_ttl))
        } else {
            (
                approval_sources.iter().map(|a| a.0).max(),
                approval_sources.iter().map(|a| a.1).min(),
            )
        }
    } else {
        (None, None)
    };
    Expected {
        decision,
        rules,
        errors,
        quorum,
        ttl,
    }
}

fn run(set: &PolicySet, tool: &str, agent: &str) -> Expected {
    let args = json!({"n": 1});
    let context = json!({"agent_id": agent});
    let principal = json!({"id": "p", "role": "agent", "groups": []});
    let classifiers = BTreeMap::new();
    let d = evaluate(
        set,
        &Input {
            tool,
            args: &args,
            context: &context,
            principal: &principal,
            fingerprint: "sha256:00",
            now: SystemTime::UNIX_EPOCH,
            classifiers: &classifiers,
            resume: None,
            definition: None,
            request: airlock_policy::Request::TOOL,
        },
    );
    assert_eq!(
        d.approval.is_some(),
        d.decision == DecisionKind::RequireApproval
    );
    Expected {
        decision: d.decision,
        rules: d.rules.into_iter().collect(),
        errors: d.errors.into_iter().map(|e| e.rule).collect(),
        quorum: d.approval.as_ref().map(|a| a.quorum),
        ttl: d.approval.as_ref().map(|a| a.approval_ttl),
    }
}

fn load(text: String) -> PolicySet {
    PolicySet::from_sources(vec![(PathBuf::from("gen.toml"), text.clone())])
        .unwrap_or_else(|e| panic!("{e}\n{text}"))
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    #[test]
    fn evaluation_matches_the_reference_model(spec in arb_set(), shuffle_seed in any::<u64>()) {
        let order: Vec<usize> = (0..spec.rules.len()).collect();
        let set = load(to_toml(&spec, &order));
        let mut shuffled = order.clone();
        let mut rng = Rng(shuffle_seed);
        for i in (1..shuffled.len()).rev() {
            shuffled.swap(i, rng.pick(i + 1));
        }
        let reordered = load(to_toml(&spec, &shuffled));
        for tool in TOOLS {
            for agent in ["bot", "other"] {
                let got = run(&set, tool, agent);
                let want = reference(&spec, tool, agent);
                prop_assert_eq!(&got, &want, "tool {} agent {}", tool, agent);
                // Shuffling the rules changes nothing.
                prop_assert_eq!(&run(&reordered, tool, agent), &got);
                // Deny wins.
                let any_deny = got.rules.iter().any(|r| r.starts_with('r')
                    && spec.rules[r[1..].parse::<usize>().unwrap()].decision == DecisionKind::Deny);
                if any_deny {
                    prop_assert_eq!(got.decision, DecisionKind::Deny);
                }
                // An erroring rule never yields allow.
                if !got.errors.is_empty() {
                    prop_assert_ne!(got.decision, DecisionKind::Allow);
                }
            }
        }
    }
}
