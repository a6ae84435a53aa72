//! Shadow policies and reloads that reach what is pending, end to end: the real binary with
//! a real backend, a shadow set beside the live one, and reloads through the admin API.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use std::time::{Duration, Instant};

use serde_json::{json, Value};
use support::*;

/// The test config's live policy with its decisions moved: `echo.*` held for approval
/// (allow → require_approval), DROP allowed (deny → allow, widening), `pay.*` denied
/// (require_approval → deny).
fn shadow_policy() -> String {
    POLICY
        .replace(
            "id = \"allow-echo\"\ntools = [\"echo.*\", \"down.*\", \"slow.*\", \"fail.*\", \"ask.*\"]\ndecision = \"allow\"",
            "id = \"allow-echo\"\ntools = [\"down.*\", \"slow.*\", \"fail.*\", \"ask.*\"]\ndecision = \"allow\"\n\n[[rules]]\nid = \"hold-echo\"\ntools = [\"echo.*\"]\ndecision = \"require_approval\"",
        )
        .replace(
            "decision = \"deny\"\nmessage = \"DROP is never allowed\"",
            "decision = \"allow\"",
        )
        .replace(
            "id = \"approve-pay\"\ntools = [\"pay.*\"]\ndecision = \"require_approval\"\napprovers = [\"finance\"]\nquorum = 2",
            "id = \"deny-pay\"\ntools = [\"pay.*\"]\ndecision = \"deny\"",
        )
}

fn audit(gw: &Gateway) -> Vec<Value> {
    let (s, body) = gw.req("GET", "/v1/audit?limit=1000", Some("admin"), None, None);
    assert_eq!(s, 200, "{body}");
    body["records"].as_array().unwrap().clone()
}

fn decided_record<'a>(records: &'a [Value], call_id: &str) -> &'a Value {
    records
        .iter()
        .find(|r| r["kind"] == "call.decided" && r["call_id"] == call_id)
        .unwrap_or_else(|| panic!("no call.decided for {call_id}"))
}

#[test]
fn a_shadow_set_sees_what_it_would_change_and_changes_nothing() {
    let backend = Backend::start();
    let shadow_dir = tempfile::tempdir().unwrap();
    let shadow_file = shadow_dir.path().join("policy.toml");
    let shadow = shadow_policy();
    assert_ne!(shadow, POLICY, "the shadow set differs from the live one");
    std::fs::write(&shadow_file, &shadow).unwrap();
    let config = config_text(
        &backend,
        &format!("shadow_policy = {:?}\n", shadow_file.to_str().unwrap()),
    );
    let gw = Gateway::start_with(&config, POLICY);

    // Known calls: three allowed, two denied, one held, all decided by the live set alone.
    let mut echo = Vec::new();
    for i in 0..3 {
        let (s, b) = gw.call("agent1", "echo.say", json!({"n": i}), None);
        assert_eq!(s, 200, "the live set still allows: {b}");
        echo.push(b["call_id"].as_str().unwrap().to_owned());
    }
    let mut drops = Vec::new();
    for t in ["a", "b"] {
        let (s, b) = gw.call(
            "agent1",
            "db.query",
            json!({"sql": format!("DROP TABLE {t}")}),
            None,
        );
        assert_eq!((s, code(&b)), (403, "policy.denied"), "{b}");
        drops.push(b["error"]["details"]["call_id"].as_str().map(str::to_owned));
    }
    let (pay_call, _) = gw.call_async("agent1", "pay.send", json!({"amount": 5}));
    let (s, b) = gw.call(
        "agent1",
        "db.query",
        json!({"sql": "select 1"}),
        Some("respond-async"),
    );
    assert_eq!(s, 202, "{b}");
    assert_eq!(backend.count(), 3, "only the live set's allowed calls ran");

    // The summary: each pair counted, the widening one first, then the narrowing ones.
    let (s, sum) = gw.req("GET", "/v1/policy/shadow", Some("admin"), None, None);
    assert_eq!(s, 200, "{sum}");
    assert_eq!(sum["configured"], true);
    assert_eq!(sum["calls"], 7, "{sum}");
    let pairs: Vec<(String, String, u64, bool)> = sum["transitions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| {
            (
                t["live"].as_str().unwrap().to_owned(),
                t["shadow"].as_str().unwrap().to_owned(),
                t["count"].as_u64().unwrap(),
                t["widening"].as_bool().unwrap(),
            )
        })
        .collect();
    let p = |l: &str, s: &str, n: u64, w: bool| (l.to_owned(), s.to_owned(), n, w);
    assert_eq!(
        pairs,
        vec![
            p("deny", "allow", 2, true),
            p("allow", "require_approval", 3, false),
            p("require_approval", "deny", 1, false),
            p("require_approval", "require_approval", 1, false),
        ],
        "{sum}"
    );
    let first = &sum["transitions"][0];
    assert_eq!(first["calls"].as_array().unwrap().len(), 2);
    assert_eq!(first["calls"][0]["live_rules"], json!(["deny-drop"]));
    assert_eq!(first["calls"][0]["shadow_rules"], json!(["deny-drop"]));
    let held = &sum["transitions"][1]["calls"];
    let listed: Vec<&str> = held
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["call_id"].as_str().unwrap())
        .collect();
    let mut newest_first = echo.iter().map(String::as_str).collect::<Vec<_>>();
    newest_first.reverse();
    assert_eq!(listed, newest_first);
    assert_eq!(held[0]["shadow_rules"], json!(["hold-echo"]));
    // Admins only.
    let (s, b) = gw.req("GET", "/v1/policy/shadow", Some("dba1"), None, None);
    assert_eq!((s, code(&b)), (403, "auth.forbidden"), "{b}");

    // The audit records carry the shadow decision exactly where it differs.
    let records = audit(&gw);
    for id in &echo {
        let r = decided_record(&records, id);
        assert_eq!(r["decision"], "allow");
        assert_eq!(r["shadow"]["decision"], "require_approval", "{r}");
        assert_eq!(r["shadow"]["rules"], json!(["hold-echo"]));
        assert!(r["shadow"]["policy_version"]
            .as_str()
            .unwrap()
            .starts_with("sha256:"));
        assert_ne!(r["shadow"]["policy_version"], r["policy_version"]);
    }
    assert_eq!(
        decided_record(&records, &pay_call)["shadow"]["decision"],
        "deny"
    );
    let unchanged: Vec<&Value> = records
        .iter()
        .filter(|r| {
            r["kind"] == "call.decided"
                && r["tool"] == "db.query"
                && r["decision"] == "require_approval"
        })
        .collect();
    assert_eq!(unchanged.len(), 1);
    assert!(
        unchanged[0].get("shadow").is_none(),
        "same decision, no shadow: {}",
        unchanged[0]
    );
    let denied_with_shadow = records
        .iter()
        .filter(|r| {
            r["kind"] == "call.decided"
                && r["decision"] == "deny"
                && r["shadow"]["decision"] == "allow"
        })
        .count();
    assert_eq!(denied_with_shadow, 2);
    let _ = drops;

    // The metric counts every pair.
    let m = gw.metrics();
    for line in [
        "airlock_shadow_decisions_total{live=\"allow\",shadow=\"require_approval\"} 3",
        "airlock_shadow_decisions_total{live=\"deny\",shadow=\"allow\"} 2",
        "airlock_shadow_decisions_total{live=\"require_approval\",shadow=\"deny\"} 1",
        "airlock_shadow_decisions_total{live=\"require_approval\",shadow=\"require_approval\"} 1",
    ] {
        assert!(m.lines().any(|l| l == line), "{line} in\n{m}");
    }

    // The inbox page shows the same, to admins only, at 1280 and 375 px.
    let page = browser_scenario(&gw.base, "shadow");
    assert_eq!(page["approver_link"], false);
    assert_eq!(page["approver_sees"], "Admins only");
    let rows: Vec<(String, String)> = page["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r[0].as_str().unwrap().to_owned(),
                r[1].as_str()
                    .unwrap()
                    .split_whitespace()
                    .take(3)
                    .collect::<Vec<_>>()
                    .join(" "),
            )
        })
        .collect();
    assert_eq!(
        rows,
        vec![
            ("widening".to_owned(), "deny allow 2".to_owned()),
            (
                "narrowing".to_owned(),
                "allow require_approval 3".to_owned()
            ),
            ("narrowing".to_owned(), "require_approval deny 1".to_owned()),
            (
                "same".to_owned(),
                "require_approval require_approval 1".to_owned()
            ),
        ],
        "{page}"
    );
    assert_eq!(
        page["headings"],
        json!([
            "deny → allow (widening)",
            "allow → require_approval",
            "require_approval → deny"
        ])
    );
    assert!(page["call_links"]
        .as_array()
        .unwrap()
        .contains(&json!(format!("/inbox/calls/{}", echo[0]))));
    assert!(page["phone_width"].as_u64().unwrap() <= 375, "{page}");

    // A broken shadow set is refused at reload, and the live set (edited too) is kept.
    gw.write_policy(&POLICY.replace("tools = [\"echo.*\", ", "tools = ["));
    std::fs::write(&shadow_file, shadow.replace("when = '", "when = '((")).unwrap();
    let (s, b) = gw.req("POST", "/v1/policy/reload", Some("admin"), Some("{}"), None);
    assert_eq!(s, 422, "{b}");
    assert_eq!(b["error"]["details"]["set"], "shadow", "{b}");
    assert!(
        b["error"]["message"].as_str().unwrap().contains("shadow"),
        "{b}"
    );
    let (s, b) = gw.call("agent1", "echo.say", json!({"n": 9}), None);
    assert_eq!(
        s, 200,
        "the live set is the one before the refused reload: {b}"
    );
    let (_, after) = gw.req("GET", "/v1/policy/shadow", Some("admin"), None, None);
    assert_eq!(
        after["shadow_version"], sum["shadow_version"],
        "the shadow set stays too"
    );
    assert_eq!(after["calls"], 8);
}

/// Waits until `f` holds (the reload's answer already says it has; a file change is seen
/// within a second).
fn eventually(what: &str, mut f: impl FnMut() -> bool) {
    let start = Instant::now();
    while !f() {
        assert!(start.elapsed() < Duration::from_secs(10), "never: {what}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn a_reload_that_tightens_reaches_pending_approvals_and_one_that_loosens_does_not() {
    let backend = Backend::start();
    let config = format!(
        "{}[[tools]]\nname = \"two.*\"\nupstream = \"{}\"\n",
        config_text(&backend, ""),
        backend.url("/echo")
    );
    // multi.* needs any approver's one approval; db.* one of dba; pay.* two of finance;
    // two.* two of dba or finance.
    let two_rule = "\n[[rules]]\nid = \"two\"\ntools = [\"two.*\"]\ndecision = \"require_approval\"\napprovers = [\"dba\", \"finance\"]\nquorum = 2\n";
    let live = format!("{POLICY}{two_rule}");
    let mut gw = Gateway::start_with(&config, &live);
    let (db_call, db) = gw.call_async("agent1", "db.query", json!({"sql": "select 1"}));
    let (two_call, two) = gw.call_async("agent1", "two.op", json!({"y": 1}));
    // One of the two approvals two.* needs, by finance.
    let (s, b) = gw.approve("fin1", &two);
    assert_eq!((s, b["status"].as_str()), (200, Some("pending")), "{b}");
    let (_, multi) = gw.call_async("agent1", "multi.op", json!({"x": 1}));
    let (_, short) = gw.call_async("agent2", "multi.op", json!({"x": 2}));
    // A held caller waits on the pay call.
    let base = gw.base.clone();
    let held = std::thread::spawn(move || {
        let r = reqwest::blocking::Client::new()
            .post(format!("{base}/v1/calls"))
            .bearer_auth("token-agent1")
            .header("prefer", "wait=60")
            .json(&json!({"tool": "pay.send", "args": {"amount": 100}}))
            .timeout(Duration::from_secs(60))
            .send()
            .unwrap();
        (r.status().as_u16(), r.json::<Value>().unwrap())
    });
    let pay = {
        let mut id = None;
        eventually("the pay call is pending", || {
            let (_, b) = gw.req(
                "GET",
                "/v1/approvals?status=pending&tool=pay.send",
                Some("admin"),
                None,
                None,
            );
            id = b["approvals"][0]["id"].as_str().map(str::to_owned);
            id.is_some()
        });
        id.unwrap()
    };

    // Tighter: db.* needs two; multi.* only finance, a shorter ttl and one use; pay.* denied;
    // two.* only dba.
    let tighter = live
        .replace("approvers = [\"dba\"]", "approvers = [\"dba\"]\nquorum = 2")
        .replace(
            "id = \"approve-pay\"\ntools = [\"pay.*\"]\ndecision = \"require_approval\"\napprovers = [\"finance\"]\nquorum = 2",
            "id = \"no-payments\"\ntools = [\"pay.*\"]\ndecision = \"deny\"\nmessage = \"payments are frozen\"",
        )
        .replace(
            "grant = { uses = 3, scope = \"run\" }",
            "grant = { uses = 1, scope = \"call\" }\napprovers = [\"finance\"]\napproval_ttl = \"10m\"",
        )
        .replace("approvers = [\"dba\", \"finance\"]", "approvers = [\"dba\"]");
    assert_ne!(tighter, live);
    gw.write_policy(&tighter);
    let (s, b) = gw.req("POST", "/v1/policy/reload", Some("admin"), Some("{}"), None);
    assert_eq!(s, 200, "{b}");
    let version = b["version"].as_str().unwrap().to_owned();

    // The held caller is told at once: its call is denied, in the new policy's words.
    let (status, body) = held.join().unwrap();
    assert_eq!((status, code(&body)), (403, "policy.denied"), "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("payments are frozen"),
        "{body}"
    );
    let p = approval(&gw, &pay);
    assert_eq!(p["status"], "declined", "{p}");
    assert_eq!(p["decisions"][0]["by"], "airlock:policy");
    // Its audit record says why as the held caller heard it.
    let records = audit(&gw);
    let declined = records
        .iter()
        .find(|r| r["kind"] == "approval.decided" && r["approval_id"] == pay.as_str())
        .unwrap_or_else(|| panic!("{records:?}"));
    assert_eq!(declined["code"], "policy.denied", "{declined}");
    // A larger quorum: one dba approval no longer runs the call.
    assert_eq!(approval(&gw, &db)["quorum"], 2);
    let (s, b) = gw.approve("dba1", &db);
    assert_eq!(s, 200, "{b}");
    assert_eq!(b["status"], "pending", "{b}");
    // Fewer groups: an approver in none of them is refused.
    let m = approval(&gw, &multi);
    assert_eq!(m["approvers"], json!(["finance"]), "{m}");
    assert_eq!(m["grant"]["uses"], 1, "{m}");
    assert_eq!(m["grant"]["scope"], "call", "{m}");
    let (s, b) = gw.approve("ops", &multi);
    assert_eq!((s, code(&b)), (403, "approval.forbidden"), "{b}");
    let ttl = |a: &Value| {
        let at = |k: &str| chrono_ms(a[k].as_str().unwrap());
        at("expires_at") - at("created_at")
    };
    assert_eq!(ttl(&m), 600_000, "the shorter ttl applies: {m}");
    // Narrowed to dba: finance's approval no longer counts, so one dba approval is not two.
    let t = approval(&gw, &two);
    assert_eq!(t["approvers"], json!(["dba"]), "{t}");
    assert_eq!(t["decisions"][0]["by"], "fin1", "{t}");
    assert!(t["decisions"][0]["voided"].is_string(), "{t}");
    let (s, b) = gw.approve("dba1", &two);
    assert_eq!((s, b["status"].as_str()), (200, Some("pending")), "{b}");
    assert!(b["decisions"][1]["voided"].is_null(), "{b}");

    // Audited, with the new version.
    let records = audit(&gw);
    let declined = records
        .iter()
        .find(|r| r["kind"] == "approval.decided" && r["approval_id"] == pay.as_str())
        .unwrap();
    assert_eq!(declined["by"], "airlock:policy");
    assert_eq!(declined["policy_version"], version.as_str());
    assert_eq!(declined["rules"], json!(["no-payments"]));
    let tightened: Vec<&Value> = records
        .iter()
        .filter(|r| r["kind"] == "approval.tightened")
        .collect();
    assert_eq!(
        tightened.len(),
        4,
        "db, both multi approvals and two: {tightened:?}"
    );
    let of = |id: &str| tightened.iter().find(|r| r["approval_id"] == id).unwrap();
    assert_eq!(of(&db)["changed"], json!(["quorum"]));
    assert_eq!(
        of(&multi)["changed"],
        json!(["approvers", "expires_at", "grant.uses", "grant.scope"])
    );
    assert_eq!(of(&short)["policy_version"], version.as_str());
    assert_eq!(of(&two)["changed"], json!(["approvers"]));
    assert_eq!(of(&two)["voided"], json!(["fin1"]));
    assert_eq!(of(&multi)["voided"], json!([]));

    // Looser again (the file as it was): nothing changes on what is pending.
    gw.write_policy(&live);
    let (s, _) = gw.req("POST", "/v1/policy/reload", Some("admin"), Some("{}"), None);
    assert_eq!(s, 200);
    assert_eq!(approval(&gw, &db)["quorum"], 2);
    assert_eq!(approval(&gw, &multi)["approvers"], json!(["finance"]));
    assert_eq!(
        audit(&gw)
            .iter()
            .filter(|r| r["kind"] == "approval.tightened")
            .count(),
        4
    );
    // A second dba approval makes two of the groups named now; finance's stays void.
    let (s, b) = gw.approve("dba2", &two);
    assert_eq!((s, b["status"].as_str()), (200, Some("approved")), "{b}");
    let (s, b) = gw.resume("agent1", &two_call);
    assert_eq!(s, 200, "{b}");
    // The second dba approval runs it; the denied pay call never ran.
    let (s, b) = gw.approve("dba2", &db);
    assert_eq!((s, b["status"].as_str()), (200, Some("approved")), "{b}");
    let (s, b) = gw.resume("agent1", &db_call);
    assert_eq!(s, 200, "{b}");
    assert_eq!(backend.count(), 2, "two.op and db.query");

    // A file edited while the gateway is down reaches what is pending at the next start.
    gw.kill9();
    gw.write_policy(&POLICY.replace(
        "id = \"multi-use\"\ntools = [\"multi.*\"]\ndecision = \"require_approval\"\ngrant = { uses = 3, scope = \"run\" }",
        "id = \"multi-use\"\ntools = [\"multi.*\"]\ndecision = \"deny\"",
    ));
    gw.spawn();
    eventually("the multi approvals are declined at start", || {
        approval(&gw, &multi)["status"] == "declined"
            && approval(&gw, &short)["status"] == "declined"
    });
}

fn approval(gw: &Gateway, id: &str) -> Value {
    gw.req(
        "GET",
        &format!("/v1/approvals/{id}"),
        Some("admin"),
        None,
        None,
    )
    .1
}

/// Milliseconds since the epoch of an RFC 3339 time the gateway wrote (`…Z`, milliseconds).
fn chrono_ms(t: &str) -> i64 {
    let out = std::process::Command::new("date")
        .args(["-u", "-d", t, "+%s%3N"])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).trim().parse().unwrap()
}
