//! The builtin classifier on a 1 KB args object, and signing one webhook event.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::hint::black_box;
use std::time::Duration;

use airlock_gateway::signing;
use airlock_policy::BuiltinClassifier;
use criterion::{criterion_group, criterion_main, Criterion};
use serde_json::json;

fn bench(c: &mut Criterion) {
    let mut args = json!({
        "command": "kubectl rollout restart deployment/web --namespace team-a && curl -s https://api.example.com/v1/status",
        "cwd": "/workspace/service",
        "env": {"RUST_LOG": "info", "PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": "/home/agent"},
        "notes": "Restarting the web deployment after the config change in OPS-1234; ping ops@example.com when done.",
        "labels": ["deploy", "restart", "team-a"],
        "timeout_ms": 30000,
    });
    let pad = "lorem ipsum dolor sit amet ".repeat(40);
    args["padding"] =
        json!(pad[..1024 - serde_json::to_string(&args).unwrap().len() - 14].to_owned());
    assert!((1000..=1100).contains(&serde_json::to_string(&args).unwrap().len()));
    let classifier = BuiltinClassifier::new(vec![".example.com".into()]);
    c.bench_function("classify/builtin/1KB", |b| {
        b.iter(|| classifier.classify(black_box(&args)))
    });

    let key = signing::secret_key("whsec_MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY=").unwrap();
    let body = serde_json::to_vec(
        &json!({"type": "approval.requested", "timestamp": "2026-11-29T12:00:00Z", "data": args}),
    )
    .unwrap();
    c.bench_function("webhook/sign", |b| {
        b.iter(|| {
            signing::sign(
                black_box(&key),
                black_box("01a22785-e789-7325-a825-23be2dd3eecd"),
                black_box(1_780_000_000),
                black_box(&body),
            )
            .unwrap()
        })
    });
}

criterion_group! {
    name = benches;
    config = Criterion::default().sample_size(30).warm_up_time(Duration::from_millis(500)).measurement_time(Duration::from_secs(2));
    targets = bench
}
criterion_main!(benches);
