//! Store load harness: the fsynced approval cycle on 1 and 8 threads (group commit), audit
//! verification over 1M records, bytes on disk per approval, and reopening 100k approvals.
//!
//! `cargo bench -p airlock-benches --bench store_load` prints each figure as the median of
//! several runs, measured side by side in one process.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::time::{Duration, Instant};

use airlock_benches::{cycle_rate, held};
use airlock_storage::{Kind, Store, StoreOptions};
use serde_json::{Map, Value};

fn median(mut xs: Vec<f64>) -> f64 {
    xs.sort_by(|a, b| a.total_cmp(b));
    xs[xs.len() / 2]
}

fn main() {
    if std::env::args().any(|a| a == "--list" || a == "--test") {
        return; // `cargo test --benches` probes harness=false benches; nothing to list.
    }
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), StoreOptions::default()).unwrap();

    // Approval cycle: 1 vs 8 threads, alternating, 5 runs each.
    let (mut one, mut eight) = (Vec::new(), Vec::new());
    for run in 0..5 {
        one.push(cycle_rate(&store, 1, 200, &format!("one-{run}")));
        eight.push(cycle_rate(&store, 8, 100, &format!("eight-{run}")));
    }
    let (one, eight) = (median(one), median(eight));
    println!("approval cycle (create+approve+consume, each fsynced): 1 thread {one:.0}/s, 8 threads {eight:.0}/s, ratio {:.1}x", eight / one);

    // Disk per approval: a fresh store with 10k approved-and-consumed cycles.
    let disk_dir = tempfile::tempdir().unwrap();
    {
        let s = Store::open(disk_dir.path(), StoreOptions::default()).unwrap();
        cycle_rate(&s, 8, 1250, "disk");
        println!(
            "disk: {:.0} bytes per approval cycle (10k cycles, journal included)",
            s.disk_space().unwrap() as f64 / 10_000.0
        );
    }

    // Reopen a store holding 100k approvals.
    let big = tempfile::tempdir().unwrap();
    {
        let s = Store::open(big.path(), StoreOptions::default()).unwrap();
        std::thread::scope(|sc| {
            for t in 0..16 {
                let s = s.clone();
                sc.spawn(move || {
                    for i in 0..6250 {
                        let id = format!("big-{t}-{i}");
                        let (call, approval) = held(&id, &format!("sha256:{id}"), 1000);
                        s.create_approval(call, approval, Map::new()).unwrap();
                    }
                });
            }
        });
    }
    let mut reopen = Vec::new();
    for _ in 0..3 {
        let start = Instant::now();
        let s = Store::open(big.path(), StoreOptions::default()).unwrap();
        reopen.push(start.elapsed().as_secs_f64() * 1000.0);
        drop(s);
    }
    println!("reopen with 100k approvals: {:.0} ms", median(reopen));

    // Verification over 1M audit records.
    let audit_dir = tempfile::tempdir().unwrap();
    let s = Store::open(audit_dir.path(), StoreOptions::default()).unwrap();
    for chunk in 0..100 {
        let records = (0..10_000)
            .map(|i| {
                let mut r = Map::new();
                r.insert("call_id".into(), Value::from(format!("call-{chunk}-{i}")));
                r.insert("tool".into(), Value::from("payments.refund"));
                r.insert(
                    "fingerprint".into(),
                    Value::from(format!("sha256:{:064x}", chunk * 10_000 + i)),
                );
                r.insert("decision".into(), Value::from("allow"));
                (Kind::CallDecided, r)
            })
            .collect();
        s.append_audit_many(records, 1000).unwrap();
    }
    let mut rates = Vec::new();
    for _ in 0..3 {
        let start = Instant::now();
        let summary = s.verify_audit().unwrap().unwrap();
        assert_eq!(summary.records(), 1_000_000);
        rates.push(1_000_000.0 / start.elapsed().as_secs_f64());
    }
    println!(
        "audit verify: {:.0} records/s over 1M records",
        median(rates)
    );
    std::thread::sleep(Duration::from_millis(10));
}
