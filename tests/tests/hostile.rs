//! Hostile args against the real binary (DESIGN §19): a rule quadratic in the args runs out of
//! its budget and the call is never allowed, the audit record naming the rule and the reason;
//! and while two agents send big, expensive calls, a third agent's plain calls keep their
//! latency, because big calls run on a lane of their own.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use sha2::{Digest, Sha256};
use support::*;

/// The shipped default set, plus a rule quadratic in `args.items` for `multi.*` tools.
fn policy() -> String {
    let shipped = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../policies/default/policy.toml"),
    )
    .unwrap();
    format!(
        "{shipped}\n[[rules]]\nid = \"sorted-items\"\ntools = [\"multi.*\"]\nwhen = 'has(args.items) && args.items.all(x, args.items.all(y, x <= y || x > y))'\ndecision = \"allow\"\n"
    )
}

fn gateway(backend: &Backend) -> Gateway {
    let mut config =
        config_text(backend, "").replace("max_body_bytes = 65536", "max_body_bytes = 1048576");
    for id in ["agent3", "agent4"] {
        let hash = airlock_policy::hex(&Sha256::digest(format!("token-{id}").as_bytes()));
        config.push_str(&format!(
            "[[principals]]\nid = \"{id}\"\nrole = \"agent\"\ntoken_sha256 = \"{hash}\"\ngroups = []\n"
        ));
    }
    Gateway::start_with(&config, &policy())
}

/// The two tests run one at a time: the latency one measures a machine the other is not
/// also loading.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn metric(gw: &Gateway, name: &str) -> f64 {
    gw.metrics()
        .lines()
        .find_map(|l| l.strip_prefix(name)?.trim().parse().ok())
        .unwrap_or(0.0)
}

#[test]
fn a_quadratic_rule_decides_small_lists_and_never_allows_a_large_one() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let backend = Backend::start();
    let gw = gateway(&backend);

    let items: Vec<u32> = (0..10).collect();
    let (status, body) = gw.call("agent1", "multi.sort", json!({ "items": items }), None);
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["decision"], "allow");

    // 2,000 items: four million comparisons as written, about 10 KB on the wire.
    let items: Vec<u32> = (0..2_000).collect();
    let started = Instant::now();
    let (status, body) = gw.call(
        "agent1",
        "multi.sort",
        json!({ "items": items }),
        Some("respond-async"),
    );
    let took = started.elapsed();
    assert_eq!(status, 202, "never allowed: {body}");
    assert!(took < Duration::from_secs(2), "decided in {took:?}");
    assert_eq!(metric(&gw, "airlock_policy_budget_exceeded_total"), 1.0);

    let (_, audit) = gw.req("GET", "/v1/audit?limit=1000", Some("admin"), None, None);
    let received = audit["records"]
        .as_array()
        .unwrap()
        .iter()
        .rev()
        .find(|r| r["kind"] == "call.decided")
        .cloned()
        .unwrap();
    assert_eq!(received["decision"], "require_approval", "{received}");
    assert_eq!(
        received["errors"],
        json!([{"rule": "sorted-items", "reason": "evaluation budget exceeded"}]),
        "{received}"
    );
}

/// A call of `keys` short keys to a read tool: about 15 bytes a key on the wire.
fn big_args(keys: usize) -> Value {
    let map: serde_json::Map<String, Value> = (0..keys)
        .map(|i| (format!("key{i:06}"), json!(i)))
        .collect();
    Value::Object(map)
}

#[test]
fn while_two_agents_send_big_calls_another_agents_plain_calls_keep_their_latency() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let backend = Backend::start();
    let gw = Arc::new(gateway(&backend));
    let plain = json!({"tool": "echo.get", "args": {"password": "x"}}).to_string();

    // Timed with a plain client: the harness's own checks of each answer are not the
    // gateway's latency. The quiet gateway first, for the record.
    let client = reqwest::blocking::Client::new();
    let url = format!("{}/v1/calls", gw.base);
    let time_plain = |_: &Gateway| {
        let started = Instant::now();
        let resp = client
            .post(&url)
            .bearer_auth("token-agent3")
            .header("content-type", "application/json")
            .body(plain.clone())
            .send()
            .unwrap();
        let status = resp.status().as_u16();
        let took = started.elapsed();
        assert_eq!(status, 403, "{}", resp.text().unwrap_or_default());
        took
    };
    let quiet: Vec<Duration> = (0..20).map(|_| time_plain(&gw)).collect();

    let stop = Arc::new(AtomicBool::new(false));
    let sent = Arc::new(AtomicUsize::new(0));
    let body = json!({"tool": "echo.update", "args": big_args(30_000)}).to_string();
    assert!(
        body.len() > 400_000 && body.len() < 1_048_576,
        "{}",
        body.len()
    );
    // Each agent sends from two connections, so that every serving thread has big calls
    // handed to it.
    let senders: Vec<_> = ["agent1", "agent2", "agent1", "agent2"]
        .into_iter()
        .map(|who| {
            let (gw, stop, sent, body) = (gw.clone(), stop.clone(), sent.clone(), body.clone());
            std::thread::spawn(move || {
                let client = reqwest::blocking::Client::new();
                while !stop.load(Ordering::Relaxed) {
                    let resp = client
                        .post(format!("{}/v1/calls", gw.base))
                        .bearer_auth(format!("token-{who}"))
                        .header("content-type", "application/json")
                        .header("prefer", "respond-async")
                        .body(body.clone())
                        .send()
                        .unwrap();
                    // 30,000 keys run the shipped `deny-credentials-in-args` rule out of its
                    // budget, and a deny rule that errors denies.
                    let status = resp.status().as_u16();
                    assert_eq!(status, 403, "{}", resp.text().unwrap_or_default());
                    sent.fetch_add(1, Ordering::Relaxed);
                }
            })
        })
        .collect();
    // Both agents' calls are under way before the plain calls are timed.
    let deadline = Instant::now() + Duration::from_secs(60);
    while sent.load(Ordering::Relaxed) < 4 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    let loaded: Vec<Duration> = (0..20)
        .map(|_| {
            std::thread::sleep(Duration::from_millis(25));
            time_plain(&gw)
        })
        .collect();
    stop.store(true, Ordering::Relaxed);
    for s in senders {
        s.join().unwrap();
    }
    let slowest = |d: &[Duration]| d.iter().max().copied().unwrap_or_default();
    let big_calls = sent.load(Ordering::Relaxed);
    eprintln!(
        "plain calls: quiet slowest {:?}, under load slowest {:?} (median {:?}); big calls sent {big_calls}",
        slowest(&quiet),
        slowest(&loaded),
        {
            let mut l = loaded.clone();
            l.sort();
            l[10]
        }
    );
    assert!(big_calls >= 2, "the big calls ran: {big_calls}");
    assert!(
        slowest(&loaded) <= Duration::from_millis(25),
        "the slowest of 20 plain calls took {:?} while big calls ran",
        slowest(&loaded)
    );
}

#[test]
fn an_approvers_big_edit_is_decided_on_the_heavy_lane_and_runs_as_edited() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let backend = Backend::start();
    let gw = gateway(&backend);
    let (call, approval) = gw.call_async("agent1", "echo.update", json!({"id": "c-1"}));
    // An edit of about 100 KB: over the size that moves a request off the serving threads.
    let blob = "x".repeat(100_000);
    let body = json!({"reason": "with the blob", "args": {"id": "c-1", "blob": blob}}).to_string();
    let (status, answer) = gw.req(
        "POST",
        &format!("/v1/approvals/{approval}/approve"),
        Some("ops"),
        Some(&body),
        None,
    );
    assert_eq!(status, 200, "{answer}");
    let (status, done) = gw.resume("agent1", &call);
    assert_eq!(status, 200, "{done}");
    assert_eq!(done["edited"], true, "{done}");
    assert_eq!(done["args"]["blob"].as_str().map(str::len), Some(100_000));
}
