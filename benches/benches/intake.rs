//! What intake adds to every call before policy (DESIGN's caller-bound contract): the args
//! checked against the tool's input schema (a compiled JSON Schema 2020-12 validator, as
//! `gateway/src/schemas.rs` keeps one per pinned definition), and `context.agent_id` bound to
//! the principal (absent: set to its id; named: its id or one of its `agents` globs).
//!
//! Run: `cargo bench -p airlock-benches --bench intake`.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::hint::black_box;

use airlock_policy::Glob;
use criterion::{criterion_group, criterion_main, Criterion};
use serde_json::{json, Map, Value};

/// The input schema the official MCP Python SDK lists for `echo(text: str = "", n: int = 0)`,
/// and a stricter one that forbids extra keys.
fn schemas() -> [(&'static str, Value); 2] {
    [
        (
            "sdk-echo",
            json!({"type": "object", "title": "echoArguments", "properties": {
                "text": {"type": "string", "title": "Text", "default": ""},
                "n": {"type": "integer", "title": "N", "default": 0}}}),
        ),
        (
            "strict-3-fields",
            json!({"type": "object", "additionalProperties": false, "required": ["path"],
                "properties": {"path": {"type": "string", "maxLength": 4096},
                    "offset": {"type": "integer", "minimum": 0},
                    "encoding": {"enum": ["utf-8", "latin-1"]}}}),
        ),
    ]
}

fn bench_schema(c: &mut Criterion) {
    let args = [
        json!({"text": "hello from the agent", "n": 42}),
        json!({"path": "/srv/data/report.csv", "offset": 0, "encoding": "utf-8"}),
    ];
    for ((name, schema), args) in schemas().into_iter().zip(args) {
        let v = jsonschema::draft202012::new(&schema).unwrap();
        assert!(v.is_valid(&args));
        c.bench_function(&format!("input schema/{name}/valid small args"), |b| {
            b.iter(|| black_box(&v).is_valid(black_box(&args)))
        });
    }
}

fn bench_agent(c: &mut Criterion) {
    let agents = ["support-bot".to_owned(), "billing-*".to_owned()];
    let mut context = Map::new();
    context.insert("run_id".into(), json!("run-7f3a9c"));
    c.bench_function("agent binding/absent: set to the principal", |b| {
        b.iter(|| {
            let mut c = black_box(context.clone());
            if !c.contains_key("agent_id") {
                c.insert(
                    "agent_id".into(),
                    Value::String(black_box("agent-1").to_owned()),
                );
            }
            c
        })
    });
    c.bench_function("agent binding/named: matched against two globs", |b| {
        b.iter(|| {
            let agent = black_box("billing-eu");
            agent == black_box("agent-1")
                || agents
                    .iter()
                    .filter_map(|g| Glob::new(g).ok())
                    .any(|g| g.matches(agent))
        })
    });
}

criterion_group!(benches, bench_schema, bench_agent);
criterion_main!(benches);
