//! Policy replay's speed: 1,000,000 recorded calls (`call.decided` audit records of the shapes
//! the gateway writes, a mix of tools, args and principals) in an export, replayed by the
//! release binary (`airlock policy replay --file`) under the shipped default set, and under
//! the set the calls were "recorded" with. One process, so one core does the work; the figure
//! is calls per second, wall time, median of three runs; the bound we hold it to is
//! 100,000 calls/s.
//!
//! Run: `cargo build --release -p airlock-gateway && cargo bench -p airlock-benches --bench replay`
//! (`AIRLOCK_BENCH_CALLS=N` for another count).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use std::io::Write;
use std::process::Command;
use std::time::Instant;

use serde_json::json;

/// A recorded call like the gateway writes: its identity, args, context, principal and
/// decision with its explanation (the hash fields are there too; replay ignores them).
fn record(i: u64) -> serde_json::Value {
    let (tool, args, decision, rules) = match i % 5 {
        0 => (
            "crm.customer.get",
            json!({"id": i, "fields": ["name", "email"]}),
            "allow",
            json!(["allow-read-only"]),
        ),
        1 => (
            "shell.exec",
            json!({"command": format!("ls -la /srv/app/{i}"), "cwd": "/srv"}),
            "require_approval",
            json!([]),
        ),
        2 => (
            "crm.customer.update",
            json!({"id": i, "patch": {"email": "a@example.com", "note": "x".repeat(64)}}),
            "require_approval",
            json!([]),
        ),
        3 => (
            "db.exec",
            json!({"sql": format!("update t set x = {i} where id = 7"), "database": "prod"}),
            "require_approval",
            json!([]),
        ),
        _ => (
            "payments.charge",
            json!({"amount": i % 1000, "currency": "EUR", "api_key": "k"}),
            "deny",
            json!(["deny-credentials-in-args"]),
        ),
    };
    json!({
        "kind": "call.decided", "v": 1, "chain": "", "seq": i + 1, "ts": 1_764_000_000_000u64 + i,
        "prev_hash": "0".repeat(64), "hash": "0".repeat(64),
        "call_id": format!("call_{i:032}"), "tool": tool, "fingerprint": format!("sha256:{}", "ab".repeat(32)),
        "args": args, "context": {"run_id": format!("run-{}", i % 100), "agent_id": "support-bot"},
        "principal": format!("agent-{}", i % 7), "role": "agent", "groups": [], "auth": {"kind": "token"},
        "decision": decision, "rules": rules, "errors": [], "messages": [], "policy_version": "sha256:bench",
    })
}

fn main() {
    let n: u64 = std::env::var("AIRLOCK_BENCH_CALLS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1_000_000);
    let bin = support::release_bin();
    let dir = tempfile::tempdir().unwrap();
    let export = dir.path().join("audit.jsonl");
    let mut w = std::io::BufWriter::new(std::fs::File::create(&export).unwrap());
    for i in 0..n {
        serde_json::to_writer(&mut w, &record(i)).unwrap();
        w.write_all(b"\n").unwrap();
    }
    w.flush().unwrap();
    let size = std::fs::metadata(&export).unwrap().len();
    println!("{n} recorded calls, {} MB of export", size / 1_000_000);
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let default = root.join("policies/default");
    let mut rates = Vec::new();
    for round in 0..3 {
        let start = Instant::now();
        let out = Command::new(&bin)
            .args([
                "policy",
                "replay",
                "--policy",
                default.to_str().unwrap(),
                "--file",
                export.to_str().unwrap(),
                "--json",
            ])
            .output()
            .unwrap();
        let took = start.elapsed();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(report["replayed"], n, "{report}");
        let rate = n as f64 / took.as_secs_f64();
        println!(
            "round {round}: {n} calls replayed in {:.2} s: {:.0} calls/s ({} changed under the default set)",
            took.as_secs_f64(),
            rate,
            report["transitions"].as_array().unwrap().iter().filter(|t| t["changed"] == true).map(|t| t["count"].as_u64().unwrap()).sum::<u64>()
        );
        rates.push(rate);
    }
    rates.sort_by(|a, b| a.partial_cmp(b).unwrap());
    println!("median: {:.0} calls/s (bound: 100,000)", rates[1]);
}
