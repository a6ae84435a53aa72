//! What a crash leaves of allowed calls (DESIGN §13): 8 clients call while the gateway is
//! killed with SIGKILL, 20 times over; after each restart every call that was answered 200
//! has its decision in the audit log, no call reached the backend twice, and the chain
//! verifies. Once in `sync` mode (the decision and claim fsynced before the backend is called,
//! the outcome written without waiting for an fsync) and once in `batched` mode (nothing
//! awaited for an fsync; a process crash still keeps what was written, a power loss may lose
//! the last flush interval).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use std::collections::{HashMap, HashSet};
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{json, Value};
use support::*;

/// Every audit record, through the API.
fn audit(gw: &Gateway) -> Vec<Value> {
    let mut out = Vec::new();
    let mut after = 0;
    loop {
        let (s, b) = gw.req(
            "GET",
            &format!("/v1/audit?after={after}&limit=1000"),
            Some("admin"),
            None,
            None,
        );
        assert_eq!(s, 200, "{b}");
        let records = b["records"].as_array().unwrap().clone();
        if records.is_empty() {
            return out;
        }
        after = records.last().unwrap()["seq"].as_u64().unwrap();
        out.extend(records);
    }
}

fn crash_loop(mode: &str) {
    let backend = Backend::start();
    let mut gw = Gateway::start_with(
        &config_text(&backend, &format!("durability = \"{mode}\"")),
        POLICY,
    );
    let answered: Arc<Mutex<Vec<String>>> = Arc::new(Mutex::new(Vec::new()));
    for round in 0..20 {
        let stop = Arc::new(AtomicBool::new(false));
        let mut threads = Vec::new();
        for t in 0..8 {
            let (base, stop, answered) = (gw.base.clone(), stop.clone(), answered.clone());
            threads.push(std::thread::spawn(move || {
                let c = reqwest::blocking::Client::builder()
                    .timeout(Duration::from_secs(5))
                    .build()
                    .unwrap();
                let mut i = 0;
                while !stop.load(Ordering::Relaxed) {
                    i += 1;
                    let r = c
                        .post(format!("{base}/v1/calls"))
                        .bearer_auth("token-agent1")
                        .json(&json!({"tool": "echo.crash", "args": {"round": round, "t": t, "i": i}}))
                        .send();
                    if let Ok(r) = r {
                        if r.status().as_u16() == 200 {
                            if let Ok(b) = r.json::<Value>() {
                                let id = b["call_id"].as_str().unwrap_or("").to_owned();
                                answered.lock().unwrap().push(id);
                            }
                        }
                    }
                }
            }));
        }
        std::thread::sleep(Duration::from_millis(150 + (round % 5) * 60));
        gw.kill9();
        stop.store(true, Ordering::Relaxed);
        for t in threads {
            t.join().unwrap();
        }
        gw.spawn();
    }
    let records = audit(&gw);
    let decided: HashSet<&str> = records
        .iter()
        .filter(|r| r["kind"] == "call.decided")
        .filter_map(|r| r["call_id"].as_str())
        .collect();
    let answered = answered.lock().unwrap().clone();
    assert!(
        answered.len() > 100,
        "only {} calls answered",
        answered.len()
    );
    for id in &answered {
        assert!(
            decided.contains(id.as_str()),
            "{mode}: answered call {id} has no decision in the audit log"
        );
    }
    // No call reached the backend twice: every body is distinct.
    let (_, bodies) = backend.seen();
    let mut seen: HashMap<&str, usize> = HashMap::new();
    for b in &bodies {
        *seen.entry(b.as_str()).or_default() += 1;
    }
    assert!(seen.values().all(|n| *n == 1), "{mode}: a call ran twice");
    // Calls cut off by a crash after they were claimed are `call.interrupted`, not re-run.
    let interrupted = records
        .iter()
        .filter(|r| r["kind"] == "call.failed" && r["error"] == "call.interrupted")
        .count();
    eprintln!(
        "{mode}: {} answered, {} decided, {} at the backend, {interrupted} interrupted",
        answered.len(),
        decided.len(),
        bodies.len()
    );
    // The chain verifies from the stopped gateway's store.
    gw.kill9();
    let out = Command::new(airlock_bin())
        .args(["audit", "verify", "--data-dir"])
        .arg(gw.dir.path().join("data"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{mode}: {}",
        String::from_utf8_lossy(&out.stdout)
    );
}

#[test]
fn sigkill_under_load_in_sync_mode_loses_no_answered_decision_and_runs_nothing_twice() {
    crash_loop("sync");
}

#[test]
fn sigkill_under_load_in_batched_mode_loses_no_answered_decision_and_runs_nothing_twice() {
    crash_loop("batched");
}
