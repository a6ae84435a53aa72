//! Policy-engine benches: canonicalize + fingerprint, a full decision on each shipped policy set
//! next to the naive CEL path, and how decision time grows with the number of rules.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::BTreeMap;
use std::hint::black_box;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use airlock_policy::{build_env, evaluate, Input, PolicySet, ToolCall};
use cel::{Context, Program, Value as CelValue};
use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use serde_json::{json, Value};

/// A realistic args object of about 1 KB.
fn args_1kb() -> Value {
    let mut v = json!({
        "command": "kubectl rollout restart deployment/web --namespace team-a",
        "cwd": "/workspace/service",
        "env": {"RUST_LOG": "info", "PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": "/home/agent"},
        "labels": ["deploy", "restart", "team-a", "low-risk"],
        "timeout_ms": 30000,
        "ratio": 0.75,
        "dry_run": false,
        "notes": "Restarting the web deployment after the config map change in ticket OPS-1234.",
        "requested_by": {"agent": "ops-bot", "run": "run-7f3a9c", "thread": "th-19", "ticket": "OPS-1234"},
    });
    let pad = "x".repeat(1024 - serde_json::to_string(&v).unwrap().len() - 12);
    v["padding"] = json!(pad);
    v
}

fn bench_fingerprint(c: &mut Criterion) {
    let args = args_1kb();
    let size = airlock_policy::canonicalize(&args).len();
    assert!((1000..=1100).contains(&size), "{size}");
    c.bench_function("canonicalize+fingerprint/1KB", |b| {
        b.iter(|| airlock_policy::fingerprint(black_box("shell.exec"), black_box(&args)))
    });
    let raw = serde_json::to_vec(&args).unwrap();
    c.bench_function("parse+canonicalize+fingerprint/1KB", |b| {
        b.iter(|| ToolCall::from_args_json(black_box("shell.exec"), black_box(&raw)))
    });
}

/// One representative call with a 10-field args object per shipped set.
fn workloads() -> Vec<(&'static str, &'static str, Value)> {
    vec![
        (
            "default",
            "crm.customer.update",
            json!({"id": "c-1", "tier": "gold", "email": "a@example.com", "name": "Ada", "country": "DE", "notes": "vip", "seats": 12, "active": true, "score": 0.93, "tags": ["a", "b"]}),
        ),
        (
            "shell",
            "shell.exec",
            json!({"command": "grep -rn TODO src", "cwd": "/workspace/app", "timeout": 30, "shell": "bash", "user": "agent", "env": {"A": "1"}, "stdin": "", "tty": false, "max_output": 65536, "reason": "find todos"}),
        ),
        (
            "database",
            "db.exec",
            json!({"sql": "update users set tier = 'gold' where id = 7", "database": "prod-main", "timeout_ms": 500, "role": "app", "params": [1, 2], "explain": false, "readonly": false, "schema": "public", "app": "crm", "reason": "upgrade"}),
        ),
        (
            "payments",
            "payments.charge",
            json!({"amount": 900, "currency": "EUR", "customer": "cus_1", "method": "pm_1", "description": "order 42", "idempotency_key": "k-42", "capture": true, "metadata": {"order": "42"}, "statement": "ACME", "receipt_email": "a@example.com"}),
        ),
        (
            "devops",
            "deploy.service",
            json!({"service": "api", "environment": "production", "version": "1.4.2", "region": "eu-west-1", "strategy": "canary", "replicas": 6, "timeout": "10m", "approver_hint": "rm", "dry_run": false, "change": "CHG-9"}),
        ),
    ]
}

fn policies_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../policies")
}

/// The naive path: every rule, stock `matches`, and `cel::to_value` + `add_variable` binding.
struct Naive {
    env: Arc<cel::Env>,
    programs: Vec<Program>,
}

impl Naive {
    fn new(set: &PolicySet) -> Naive {
        let env = build_env(false).unwrap();
        let programs = set
            .rules()
            .iter()
            .map(|r| env.compile(&r.when).unwrap())
            .collect();
        Naive {
            env: Arc::new(env),
            programs,
        }
    }

    fn decide(&self, tool: &str, args: &Value, context: &Value, principal: &Value) -> usize {
        let mut ctx = Context::with_env(self.env.clone());
        ctx.add_variable("tool", cel::to_value(tool).unwrap())
            .unwrap();
        ctx.add_variable("args", cel::to_value(args).unwrap())
            .unwrap();
        ctx.add_variable("context", cel::to_value(context).unwrap())
            .unwrap();
        ctx.add_variable("principal", cel::to_value(principal).unwrap())
            .unwrap();
        ctx.add_variable("fingerprint", "sha256:00").unwrap();
        let now: chrono::DateTime<chrono::Utc> = SystemTime::UNIX_EPOCH.into();
        ctx.add_variable("now", CelValue::Timestamp(now.fixed_offset()))
            .unwrap();
        self.programs
            .iter()
            .filter(|p| matches!(p.execute(&ctx), Ok(CelValue::Bool(true))))
            .count()
    }
}

fn bench_decisions(c: &mut Criterion) {
    let context = json!({"agent_id": "ops-bot", "run_id": "run-1"});
    let principal = json!({"id": "agent-1", "role": "agent", "groups": []});
    let classifiers = BTreeMap::new();
    let mut group = c.benchmark_group("decision");
    for (name, tool, args) in workloads() {
        let set = PolicySet::load(&policies_dir().join(name)).unwrap();
        let call = ToolCall::new(tool, args.clone(), None).unwrap();
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
        group.bench_with_input(BenchmarkId::new("airlock", name), &input, |b, input| {
            b.iter(|| evaluate(&set, black_box(input)))
        });
        let naive = Naive::new(&set);
        group.bench_with_input(BenchmarkId::new("naive", name), &args, |b, args| {
            b.iter(|| naive.decide(tool, black_box(args), &context, &principal))
        });
    }
    group.finish();
}

/// `n` rules; with `spread`, each names one of 100 tools, so a call applies to ~n/100 of them.
fn generated_set(n: usize, spread: bool) -> PolicySet {
    let mut text = String::from("version = 1\n[defaults]\ndecision = \"require_approval\"\n");
    for i in 0..n {
        let tools = if spread {
            format!("tools = [\"svc{}.*\"]\n", i % 100)
        } else {
            String::new()
        };
        let when = match i % 3 {
            0 => format!("args.amount > {i}"),
            1 => format!("args.command.matches(\"(?i)\\\\bcmd{i}\\\\b\")"),
            _ => format!("\"label{i}\" in args.labels"),
        };
        let decision = ["allow", "deny", "require_approval"][i % 3];
        text.push_str(&format!(
            "[[rules]]\nid = \"r{i}\"\n{tools}when = '{when}'\ndecision = \"{decision}\"\n"
        ));
    }
    PolicySet::from_sources(vec![(PathBuf::from("gen.toml"), text)]).unwrap()
}

fn bench_scaling(c: &mut Criterion) {
    let args = json!({"amount": 5, "command": "run cmd7 now", "labels": ["label2", "x"], "a": 1, "b": 2, "c": 3, "d": 4, "e": 5, "f": 6, "g": 7});
    let context = json!({});
    let principal = json!({"id": "agent-1", "role": "agent", "groups": []});
    let classifiers = BTreeMap::new();
    let input = Input {
        tool: "svc7.run",
        args: &args,
        context: &context,
        principal: &principal,
        fingerprint: "sha256:00",
        now: SystemTime::UNIX_EPOCH,
        classifiers: &classifiers,
        resume: None,
        definition: None,
        request: airlock_policy::Request::TOOL,
    };
    let mut group = c.benchmark_group("scaling");
    for n in [10usize, 100, 1000] {
        for spread in [false, true] {
            let set = generated_set(n, spread);
            let label = if spread {
                "spread-over-100-tools"
            } else {
                "all-apply"
            };
            group.bench_with_input(BenchmarkId::new(label, n), &input, |b, input| {
                b.iter(|| evaluate(&set, black_box(input)))
            });
        }
    }
    group.finish();
}

fn config() -> Criterion {
    Criterion::default()
        .sample_size(30)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2))
}

criterion_group! {
    name = benches;
    config = config();
    targets = bench_fingerprint, bench_decisions, bench_scaling
}
criterion_main!(benches);
