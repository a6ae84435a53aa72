//! Webhook approvers end to end: the real gateway, a real backend, and a real HTTP receiver
//! process that verifies every delivery with the reference Standard Webhooks library.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use std::process::Command;
use std::time::Duration;

use serde_json::json;
use support::*;

fn config(backend: &Backend, receiver: &Receiver, extra: &str) -> String {
    format!(
        "{}[[webhooks]]\nid = \"oncall\"\nurl = \"http://127.0.0.1:{}/hook\"\nsecret = \"{SECRET}\"\n{extra}\n",
        config_text(backend, ""),
        receiver.port
    )
}

#[test]
fn signed_requests_and_a_synchronous_approve_releases_the_held_call() {
    let backend = Backend::start();
    let receiver = Receiver::start("approve");
    let gw = Gateway::start_with(
        &config(
            &backend,
            &receiver,
            "principal = \"ops\"\nevents = [\"approval.requested\", \"approval.decided\"]",
        ),
        POLICY,
    );
    let (s, b) = gw.call(
        "agent1",
        "multi.op",
        json!({"n": 1, "password": "hunter2"}),
        Some("wait=20"),
    );
    assert_eq!(
        s, 200,
        "the webhook's synchronous approve released the held call: {b}"
    );
    let records = receiver.wait_for(2, Duration::from_secs(10));
    let requested = &records[0];
    assert_eq!(requested["valid"], true, "{requested}");
    assert_eq!(requested["body"]["type"], "approval.requested");
    let data = &requested["body"]["data"];
    assert_eq!(data["tool"], "multi.op");
    assert_eq!(
        data["args"],
        json!({"n": 1, "password": "[redacted]"}),
        "args are redacted per config"
    );
    assert!(data["fingerprint"].as_str().unwrap().starts_with("sha256:"));
    assert_eq!(data["rules"], json!(["multi-use"]));
    assert!(data["links"]["approve"]
        .as_str()
        .unwrap()
        .ends_with(&format!(
            "/v1/approvals/{}/approve",
            data["id"].as_str().unwrap()
        )));
    // And the approval's inbox page, where a person signs in and decides.
    assert!(data["links"]["inbox"].as_str().unwrap().ends_with(&format!(
        "/inbox/approvals/{}",
        data["id"].as_str().unwrap()
    )));
    assert!(records.iter().all(|r| r["valid"] == true));
    let decided = records
        .iter()
        .find(|r| r["body"]["type"] == "approval.decided")
        .unwrap();
    assert_eq!(decided["body"]["data"]["decisions"][0]["by"], "ops");
    assert_eq!(decided["body"]["data"]["status"], "approved");
}

#[test]
fn a_synchronous_decision_by_the_requester_is_refused() {
    let backend = Backend::start();
    let receiver = Receiver::start("approve");
    let gw = Gateway::start_with(
        &config(
            &backend,
            &receiver,
            "principal = \"admin\"\nevents = [\"approval.requested\"]",
        ),
        POLICY,
    );
    let (call, approval) = gw.call_async("admin", "db.query", json!({"sql": "select 30"}));
    receiver.wait_for(1, Duration::from_secs(10));
    let mut refused = false;
    for _ in 0..100 {
        let (_, audit) = gw.req("GET", "/v1/audit?limit=1000", Some("admin"), None, None);
        refused = audit["records"].as_array().unwrap().iter().any(|r| {
            r["kind"] == "webhook.decision_refused" && r["code"] == "approval.self_approval"
        });
        if refused {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(refused, "the refusal is audited");
    let (_, a) = gw.req(
        "GET",
        &format!("/v1/approvals/{approval}"),
        Some("ops"),
        None,
        None,
    );
    assert_eq!(a["status"], "pending");
    assert_eq!(gw.resume("admin", &call).0, 202);
}

#[test]
fn retries_follow_the_schedule_with_one_id() {
    let backend = Backend::start();
    let receiver = Receiver::start("fail:2");
    let gw = Gateway::start_with(
        &config(
            &backend,
            &receiver,
            "events = [\"approval.requested\"]\nretry_schedule = [\"1s\", \"2s\"]",
        ),
        POLICY,
    );
    gw.call_async("agent1", "db.query", json!({"sql": "select 31"}));
    let r = receiver.wait_for(3, Duration::from_secs(15));
    assert_eq!(r.len(), 3, "{r:?}");
    assert!(
        r.iter()
            .all(|x| x["id"] == r[0]["id"] && x["valid"] == true),
        "one webhook-id for every attempt"
    );
    let gap = |a: usize, b: usize| r[b]["at"].as_f64().unwrap() - r[a]["at"].as_f64().unwrap();
    assert!(
        (0.7..1.8).contains(&gap(0, 1)),
        "first retry after ~1s ±20%: {}",
        gap(0, 1)
    );
    assert!(
        (1.5..3.0).contains(&gap(1, 2)),
        "second retry after ~2s ±20%: {}",
        gap(1, 2)
    );
    std::thread::sleep(Duration::from_millis(1500));
    assert_eq!(
        receiver.records().len(),
        3,
        "nothing is sent again after the ack"
    );
}

#[test]
fn retry_after_replaces_the_next_delay() {
    let backend = Backend::start();
    let receiver = Receiver::start("retry_after:1:3");
    let gw = Gateway::start_with(
        &config(
            &backend,
            &receiver,
            "events = [\"approval.requested\"]\nretry_schedule = [\"1s\"]",
        ),
        POLICY,
    );
    gw.call_async("agent1", "db.query", json!({"sql": "select 32"}));
    let r = receiver.wait_for(2, Duration::from_secs(10));
    assert_eq!(r.len(), 2);
    let gap = r[1]["at"].as_f64().unwrap() - r[0]["at"].as_f64().unwrap();
    assert!(
        (2.8..4.5).contains(&gap),
        "Retry-After: 3 honoured instead of the 1s schedule: {gap}"
    );
}

#[test]
fn gone_disables_the_endpoint_until_an_admin_enables_it() {
    let backend = Backend::start();
    let receiver = Receiver::start("gone:1");
    let gw = Gateway::start_with(
        &config(
            &backend,
            &receiver,
            "events = [\"approval.requested\"]\nretry_schedule = [\"1s\"]",
        ),
        POLICY,
    );
    gw.call_async("agent1", "db.query", json!({"sql": "select 33"}));
    receiver.wait_for(1, Duration::from_secs(10));
    gw.call_async("agent1", "db.query", json!({"sql": "select 34"}));
    std::thread::sleep(Duration::from_millis(2000));
    assert_eq!(
        receiver.records().len(),
        1,
        "nothing is sent to a disabled endpoint"
    );
    let (_, hooks) = gw.req("GET", "/v1/webhooks", Some("admin"), None, None);
    assert!(hooks["webhooks"][0]["disabled"]["reason"]
        .as_str()
        .unwrap()
        .contains("410"));
    assert!(gw
        .metrics()
        .contains("airlock_webhook_deliveries_total{result=\"disabled\"} 1"));
    let (s, b) = gw.req(
        "POST",
        "/v1/webhooks/oncall/enable",
        Some("admin"),
        None,
        None,
    );
    assert_eq!((s, b["requeued"].as_u64()), (200, Some(2)), "{b}");
    let r = receiver.wait_for(3, Duration::from_secs(10));
    assert_eq!(r.len(), 3, "both parked deliveries go out once enabled");
    // The two parked deliveries go out concurrently, in either order.
    assert!(
        r[1..].iter().any(|x| x["id"] == r[0]["id"]),
        "the first delivery keeps its id: {r:?}"
    );
}

#[test]
fn deliveries_survive_a_restart_in_the_middle_of_retries() {
    let backend = Backend::start();
    let receiver = Receiver::start("fail:1");
    let mut gw = Gateway::start_with(
        &config(
            &backend,
            &receiver,
            "events = [\"approval.requested\"]\nretry_schedule = [\"2s\"]",
        ),
        POLICY,
    );
    gw.call_async("agent1", "db.query", json!({"sql": "select 35"}));
    let first = receiver.wait_for(1, Duration::from_secs(10));
    gw.kill9();
    gw.spawn();
    let r = receiver.wait_for(2, Duration::from_secs(15));
    assert_eq!(r.len(), 2, "delivered after the restart");
    assert_eq!(r[1]["id"], first[0]["id"]);
    assert_eq!(r[1]["valid"], true);
}

#[test]
fn airlock_webhooks_test_sends_a_signed_test_event() {
    let backend = Backend::start();
    let receiver = Receiver::start("ok");
    let gw = Gateway::start_with(&config(&backend, &receiver, ""), POLICY);
    let out = Command::new(airlock_bin())
        .args([
            "webhooks",
            "test",
            "oncall",
            "--url",
            &gw.base,
            "--token",
            "token-admin",
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    let r = receiver.wait_for(1, Duration::from_secs(10));
    assert_eq!(
        (r[0]["body"]["type"].as_str(), r[0]["valid"].as_bool()),
        (Some("webhook.test"), Some(true))
    );
}
