//! Hostile args: the most expensive calls we could build for each shipped policy set within
//! `max_body_bytes` (1 MiB), decided. DESIGN's bound is 5 ms per decision.
//!
//! For each set the shapes are: as many short keys as fit (every rule that iterates `args`
//! pays for all of them), as many keys as the evaluation budget pays for in full, a long list
//! of objects, a string near the limit in every field the set's rules read (the regexes scan
//! it), a string the budget just pays one scan of, and the deepest nesting allowed. Each is
//! timed as `evaluate` (binding, every rule, the budget); the bench prints the steps each used.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::BTreeMap;
use std::hint::black_box;
use std::path::Path;
use std::time::{Duration, SystemTime};

use airlock_policy::{evaluate, Input, PolicySet, ToolCall, MAX_ARGS_DEPTH};
use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use serde_json::{json, Map, Value};

const MAX_BODY: usize = 1 << 20;

/// `(set, tool, the args fields its rules read)`.
const SETS: [(&str, &str, &[&str]); 6] = [
    ("default", "crm.customer.get", &["items"]),
    ("shell", "shell.exec", &["command", "cwd"]),
    ("database", "db.exec", &["sql", "database"]),
    ("payments", "payments.charge", &["amount", "currency"]),
    (
        "devops",
        "iam.attach",
        &["policy", "verb", "namespace", "environment"],
    ),
    ("mcp", "cloud.purge", &["target"]),
];

/// The body a call with these args would send, in bytes.
fn body_len(tool: &str, args: &Value) -> usize {
    serde_json::to_vec(&json!({"tool": tool, "args": args}))
        .unwrap()
        .len()
}

fn many_keys(n: usize) -> Value {
    Value::Object(
        (0..n)
            .map(|i| (format!("k{i:06}"), json!(1)))
            .collect::<Map<_, _>>(),
    )
}

/// As many `k000000: 1` keys as fit the body limit.
fn max_keys(tool: &str) -> Value {
    let per_key = body_len(tool, &many_keys(1000)) / 1000 + 1;
    let mut n = MAX_BODY / per_key;
    while body_len(tool, &many_keys(n)) > MAX_BODY {
        n -= 1000;
    }
    many_keys(n)
}

fn long_string(fields: &[&str], bytes: usize) -> Value {
    // Words the shipped regexes look for, never completing a match: every alternative is tried.
    let unit = "rm -r sudo curl | drop delete from update set select ; ";
    let text: String = unit.repeat(bytes / unit.len() + 1)[..bytes].to_owned();
    Value::Object(
        fields
            .iter()
            .map(|f| (f.to_string(), json!(text)))
            .collect(),
    )
}

fn objects(fields: &[&str]) -> Value {
    let item = json!({"id": 12345, "name": "item", "tags": ["a", "b"]});
    let per = item.to_string().len() + 1;
    let n = (MAX_BODY - 1000) / per;
    let mut args: Map<String, Value> = fields.iter().map(|f| (f.to_string(), json!("x"))).collect();
    args.insert("items".into(), Value::Array(vec![item; n]));
    Value::Object(args)
}

fn nested(fields: &[&str]) -> Value {
    let mut v = json!("deep");
    for i in 0..MAX_ARGS_DEPTH - 1 {
        v = if i % 2 == 0 {
            json!([v])
        } else {
            json!({ "n": v })
        };
    }
    let mut args: Map<String, Value> = fields.iter().map(|f| (f.to_string(), v.clone())).collect();
    args.insert("nest".into(), v);
    Value::Object(args)
}

/// The most keys the set decides with no rule running out: every rule that iterates `args`
/// pays for all of them, within the budget.
fn keys_within_budget(most: usize, fits: &dyn Fn(&Value) -> bool) -> Value {
    if fits(&many_keys(most)) {
        return many_keys(most);
    }
    let (mut lo, mut hi) = (0usize, most);
    while lo + 1 < hi {
        let mid = (lo + hi) / 2;
        if fits(&many_keys(mid)) {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    many_keys(lo)
}

fn shapes(
    tool: &str,
    fields: &[&str],
    fits: &dyn Fn(&Value) -> bool,
) -> Vec<(&'static str, Value)> {
    let one = fields.len().max(1);
    vec![
        ("max-keys", max_keys(tool)),
        (
            "keys-within-budget",
            keys_within_budget(max_keys(tool).as_object().map_or(0, |m| m.len()), fits),
        ),
        ("list-of-objects", objects(fields)),
        (
            "string-near-limit",
            long_string(fields, (MAX_BODY - 2000) / one),
        ),
        ("string-one-scan", long_string(&fields[..1], 900_000)),
        ("deepest-nesting", nested(fields)),
    ]
}

fn bench_hostile(c: &mut Criterion) {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../policies");
    let context =
        json!({"agent_id": "ops-bot", "run_id": "run-1", "labels": {"trust": "untrusted"}});
    let principal = json!({"id": "agent-1", "role": "agent", "groups": []});
    let mut group = c.benchmark_group("hostile");
    for (name, tool, fields) in SETS {
        let set = PolicySet::load(&root.join(name)).unwrap();
        let mut classifiers = BTreeMap::new();
        classifiers.insert(
            "risk".to_owned(),
            airlock_policy::ClassifierOutcome::Ok(airlock_policy::ClassifierResult {
                score: 0.1,
                labels: vec![],
                detail: json!({}),
            }),
        );
        let fits = |args: &Value| {
            let input = Input {
                tool,
                args,
                context: &context,
                principal: &principal,
                fingerprint: "sha256:00",
                now: SystemTime::UNIX_EPOCH + Duration::from_secs(1_780_000_000),
                classifiers: &classifiers,
                resume: None,
                definition: None,
                request: airlock_policy::Request::TOOL,
            };
            evaluate(&set, &input).errors.is_empty()
        };
        for (shape, args) in shapes(tool, fields, &fits) {
            let size = body_len(tool, &args);
            assert!(size <= MAX_BODY, "{name}/{shape}: {size} bytes");
            // Through the strict intake, as the gateway would take it.
            let call = ToolCall::new(tool, args, None).unwrap();
            let input = Input {
                tool,
                args: &call.args,
                context: &context,
                principal: &principal,
                fingerprint: call.fingerprint.as_str(),
                now: SystemTime::UNIX_EPOCH + Duration::from_secs(1_780_000_000),
                classifiers: &classifiers,
                resume: None,
                definition: None,
                request: airlock_policy::Request::TOOL,
            };
            let d = evaluate(&set, &input);
            eprintln!(
                "hostile/{name}/{shape}: {size} bytes, {} steps of {}, {} ({} rule errors)",
                d.steps,
                set.budget(),
                d.decision.as_str(),
                d.errors.len()
            );
            group.bench_with_input(BenchmarkId::new(name, shape), &input, |b, input| {
                b.iter(|| evaluate(&set, black_box(input)))
            });
        }
    }
    group.finish();
}

fn config() -> Criterion {
    Criterion::default()
        .sample_size(20)
        .warm_up_time(Duration::from_millis(300))
        .measurement_time(Duration::from_secs(2))
}

criterion_group! {
    name = benches;
    config = config();
    targets = bench_hostile
}
criterion_main!(benches);
