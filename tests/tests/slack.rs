//! Approvers in Slack, end to end: the real binary posts held calls to a stand-in for Slack's
//! Web API (`tests/peers/slack_api.py`, answering as Slack documents, Block Kit checked by
//! `slack_sdk`'s models), and the stand-in clicks and submits as Slack does, each request
//! signed and first verified by `slack_sdk`'s `SignatureVerifier`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use std::time::{Duration, Instant};

use serde_json::{json, Value};
use support::pg::Database;
use support::slack::*;
use support::*;

/// The test policy, where a dba may also approve a query for its run, up to five uses.
fn policy() -> String {
    let rule = "approvers = [\"dba\"]\n";
    let at = POLICY.find(rule).unwrap() + rule.len();
    format!(
        "{}grant = {{ uses = 1, scope = \"call\", max_uses = 5, max_ttl = \"1h\", max_scope = \"run\" }}\n{}",
        &POLICY[..at],
        &POLICY[at..]
    )
}

fn start(slack_port: u16, port: u16, backend: &Backend) -> Gateway {
    let config = format!(
        "{}\n{}",
        config_text(
            backend,
            &format!("public_url = \"http://127.0.0.1:{port}\"")
        ),
        slack_table(slack_port, USERS)
    );
    Gateway::start_env(&config, &policy(), port, "warn", &SLACK_ENV)
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

/// Signs in to the inbox with `who`'s token and approves `id` with the page's form.
fn approve_in_inbox(gw: &Gateway, who: &str, id: &str) {
    let client = reqwest::blocking::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let r = client
        .post(format!("{}/inbox/login", gw.base))
        .header("origin", &gw.base)
        .header("content-type", "application/x-www-form-urlencoded")
        .body(format!("token=token-{who}&next=%2Finbox%2F"))
        .send()
        .unwrap();
    assert_eq!(r.status(), 303);
    let cookie = r.headers()["set-cookie"]
        .to_str()
        .unwrap()
        .split(';')
        .next()
        .unwrap()
        .to_owned();
    let page = client
        .get(format!("{}/inbox/approvals/{id}", gw.base))
        .header("cookie", &cookie)
        .send()
        .unwrap()
        .text()
        .unwrap();
    let csrf = page
        .split("name=\"csrf\" value=\"")
        .nth(1)
        .unwrap()
        .split('"')
        .next()
        .unwrap();
    let r = client
        .post(format!("{}/inbox/approvals/{id}/approve", gw.base))
        .header("cookie", &cookie)
        .header("origin", &gw.base)
        .header("content-type", "application/x-www-form-urlencoded")
        .body(format!("csrf={csrf}"))
        .send()
        .unwrap();
    assert_eq!(r.status(), 303, "{}", r.text().unwrap());
}

/// POSTs `form` to `/slack/interactions` signed as Slack signs (`v0`, HMAC-SHA256 of
/// `v0:{timestamp}:{body}` with the signing secret): status and JSON body.
fn signed_post(gw: &Gateway, form: &str) -> (u16, Value) {
    use hmac::{Hmac, KeyInit, Mac};
    let ts = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
        .to_string();
    let mut mac =
        <Hmac<sha2::Sha256> as KeyInit>::new_from_slice(support::slack::SECRET.as_bytes()).unwrap();
    mac.update(format!("v0:{ts}:{form}").as_bytes());
    let hex: String = mac
        .finalize()
        .into_bytes()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    let r = reqwest::blocking::Client::new()
        .post(format!("{}/slack/interactions", gw.base))
        .header("content-type", "application/x-www-form-urlencoded")
        .header("x-slack-request-timestamp", ts)
        .header("x-slack-signature", format!("v0={hex}"))
        .body(form.to_owned())
        .send()
        .unwrap();
    (r.status().as_u16(), r.json().unwrap_or(Value::Null))
}

fn decisions_in_audit(gw: &Gateway, id: &str) -> Vec<Value> {
    let (_, audit) = gw.req("GET", "/v1/audit?limit=1000", Some("admin"), None, None);
    audit["records"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["kind"] == "approval.decided" && r["approval_id"] == id)
        .cloned()
        .collect()
}

#[test]
fn a_held_call_is_posted_to_its_group_and_one_click_decides_it_exactly_once() {
    let port = free_port();
    let slack = Slack::start(port);
    let backend = Backend::start();
    let gw = start(slack.port, port, &backend);

    // A held call (waiting for its answer), with args made to look like Slack markup.
    let hostile = "select '<!channel> <https://evil.example|click> *now*'";
    let base = gw.base.clone();
    let waiting = std::thread::spawn(move || {
        reqwest::blocking::Client::new()
            .post(format!("{base}/v1/calls"))
            .bearer_auth("token-agent1")
            .header("prefer", "wait=30")
            .json(&json!({"tool": "db.query", "args": {"sql": hostile}, "context": {"run_id": "run-1"}}))
            .send()
            .unwrap()
    });
    let start = Instant::now();
    let id = loop {
        let (_, list) = gw.req(
            "GET",
            "/v1/approvals?status=pending",
            Some("dba1"),
            None,
            None,
        );
        if let Some(a) = list["approvals"].as_array().and_then(|a| a.first()) {
            break a["id"].as_str().unwrap().to_owned();
        }
        assert!(start.elapsed() < Duration::from_secs(10));
        std::thread::sleep(Duration::from_millis(50));
    };
    let m = slack.wait_message(&id, "posted", |_| true);
    assert_eq!(m["channel"], "C0DBA", "the dba group's channel: {m}");
    let posted = &m["versions"][0];
    let shown = text_of(posted);
    assert!(shown.contains("Approval needed: db.query"), "{shown}");
    assert!(
        shown.contains("agent1") && shown.contains("approve-db"),
        "{shown}"
    );
    assert!(
        shown.contains("<!channel> <https://evil.example|click> *now*"),
        "the args as text: {shown}"
    );
    let preformatted = posted["blocks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|b| b["type"] == "rich_text")
        .unwrap();
    assert!(preformatted.to_string().contains("evil.example"));
    for b in posted["blocks"].as_array().unwrap() {
        if b["type"] != "rich_text" {
            assert!(!b.to_string().contains("evil.example"), "{b}");
        }
    }
    let actions: Vec<String> = posted["blocks"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|b| b["type"] == "actions")
        .flat_map(|b| b["elements"].as_array().unwrap().clone())
        .map(|e| e["action_id"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(
        actions,
        [
            "airlock.approve_once",
            "airlock.approve_run",
            "airlock.decline",
            "airlock.open"
        ]
    );

    // Two clicks at once, and the first of them sent again as it was: one decision.
    let results = slack.click(
        &m,
        "U0DBA1",
        "airlock.approve_once",
        json!({"times": 2, "resend": 1}),
    );
    let statuses: Vec<u64> = results
        .iter()
        .map(|r| r["status"].as_u64().unwrap())
        .collect();
    assert_eq!(
        statuses.iter().filter(|s| **s == 200).count(),
        2,
        "each click answered: {results:?}"
    );
    assert_eq!(
        statuses.iter().filter(|s| **s == 409).count(),
        2,
        "each resent request refused: {results:?}"
    );
    for r in &results {
        assert!(
            r["seconds"].as_f64().unwrap() < 3.0,
            "within Slack's 3 s: {r}"
        );
        if r["status"] == 409 {
            assert!(
                r["body"].as_str().unwrap().contains("slack.replayed"),
                "{r}"
            );
        }
    }
    let answer = waiting.join().unwrap();
    assert_eq!(answer.status(), 200, "the held call ran");
    assert_eq!(backend.count(), 1, "once");
    let records = decisions_in_audit(&gw, &id);
    assert_eq!(records.len(), 1, "{records:?}");
    assert_eq!(records[0]["by"], "dba1");
    assert_eq!(records[0]["via"], "slack");
    assert_eq!(records[0]["auth"]["user"], "U0DBA1");
    assert_eq!(records[0]["auth"]["kind"], "slack");

    // The message shows who, with no buttons left; the other click is told who decided.
    let m = slack.wait_message(&id, "decided", |v| !has_buttons(v));
    let last = m["versions"].as_array().unwrap().last().unwrap().clone();
    assert!(
        text_of(&last).contains("Approved by dba1 in Slack (user U0DBA1)"),
        "{last}"
    );
    slack.wait_told("U0DBA1", "already approved");
    assert_eq!(slack.messages_of(&id).len(), 1, "posted once");
}

#[test]
fn who_may_not_decide_is_told_privately_and_requests_not_slack_s_are_refused() {
    let port = free_port();
    let slack = Slack::start(port);
    let backend = Backend::start();
    let gw = start(slack.port, port, &backend);
    let (call, id) = gw.call_async("agent1", "db.query", json!({"sql": "select 1"}));
    let m = slack.wait_message(&id, "posted", |_| true);

    slack.click(&m, "U0NOBODY", "airlock.approve_once", json!({}));
    slack.wait_told("U0NOBODY", "not mapped to an airlock approver");
    slack.click(&m, "U0FIN1", "airlock.approve_once", json!({}));
    slack.wait_told("U0FIN1", "none of the approver groups");
    slack.click(&m, "U0ADMIN", "airlock.approve_once", json!({}));
    let told = slack.wait_told("U0ADMIN", "admin in none of the approver groups");
    assert!(told.contains("dba"), "the groups named: {told}");
    slack.click(&m, "U0FIN1", "airlock.decline", json!({}));
    slack.wait_told("U0FIN1", "You cannot decline this");

    for (more, code) in [
        (json!({"tamper": "signature"}), "slack.signature_invalid"),
        (json!({"tamper": "body"}), "slack.signature_invalid"),
        (json!({"timestamp_offset": -600}), "slack.request_stale"),
    ] {
        let r = slack.click(&m, "U0DBA1", "airlock.approve_once", more.clone());
        assert_eq!(r[0]["status"], 401, "{more}: {r:?}");
        assert!(
            r[0]["body"].as_str().unwrap().contains(code),
            "{more}: {r:?}"
        );
    }
    // A request that is no Slack request at all.
    let plain = reqwest::blocking::Client::new()
        .post(format!("{}/slack/interactions", gw.base))
        .header("content-type", "application/x-www-form-urlencoded")
        .body("payload=%7B%7D")
        .send()
        .unwrap();
    assert_eq!(plain.status(), 401);
    let body: Value = plain.json().unwrap();
    assert_eq!(code(&body), "slack.signature_invalid", "{body}");
    // Signed as Slack signs, but no `payload` of JSON: a bad form, refused with its code.
    for form in ["action=approve", "payload=not-json"] {
        let (status, body) = signed_post(&gw, form);
        assert_eq!(
            (status, code(&body)),
            (400, "request.invalid_field"),
            "{form}: {body}"
        );
    }
    // Only POST.
    let get = reqwest::blocking::get(format!("{}/slack/interactions", gw.base)).unwrap();
    assert_eq!(get.status(), 405);
    assert_eq!(get.headers()["allow"], "POST");
    let a = approval(&gw, &id);
    assert_eq!(a["status"], "pending", "{a}");
    assert_eq!(a["decisions"], json!([]));
    assert!(decisions_in_audit(&gw, &id).is_empty());

    // Decline through the modal: an empty reason stays in the modal; the reason reaches the
    // agent.
    slack.click(&m, "U0DBA2", "airlock.decline", json!({}));
    let start = Instant::now();
    let view = loop {
        if let Some(v) = slack.get("views").as_array().unwrap().first() {
            break v.clone();
        }
        assert!(start.elapsed() < Duration::from_secs(10), "no modal opened");
        std::thread::sleep(Duration::from_millis(100));
    };
    assert_eq!(view["user"], "U0DBA2");
    let out = slack.post(
        "submit",
        json!({"user": "U0DBA2", "view_id": view["id"], "reason": "  "}),
    );
    let r = &out["results"][0][0];
    assert_eq!(r["status"], 200, "{r}");
    let body: Value = serde_json::from_str(r["body"].as_str().unwrap()).unwrap();
    assert_eq!(body["response_action"], "errors", "{body}");
    // Someone else submitting the modal's form gets no further than the mapping allows.
    let out = slack.post(
        "submit",
        json!({"user": "U0FIN1", "view_id": view["id"], "reason": "no"}),
    );
    let body: Value = serde_json::from_str(out["results"][0][0]["body"].as_str().unwrap()).unwrap();
    assert!(
        body["errors"]["reason"]
            .as_str()
            .unwrap()
            .contains("none of the approver groups"),
        "{body}"
    );
    assert_eq!(approval(&gw, &id)["status"], "pending");
    let out = slack.post(
        "submit",
        json!({"user": "U0DBA2", "view_id": view["id"], "reason": "use the read replica"}),
    );
    let r = &out["results"][0][0];
    assert_eq!(
        (r["status"].as_u64(), r["body"].as_str()),
        (Some(200), Some("")),
        "{r}"
    );
    let (_, c) = gw.req(
        "GET",
        &format!("/v1/calls/{call}"),
        Some("agent1"),
        None,
        None,
    );
    assert_eq!(code(&c), "approval.declined", "{c}");
    assert_eq!(
        c["error"]["details"]["reason"], "use the read replica",
        "the reason reaches the agent: {c}"
    );
    let m = slack.wait_message(&id, "declined", |v| !has_buttons(v));
    let last = m["versions"].as_array().unwrap().last().unwrap().clone();
    assert!(
        text_of(&last).contains("Declined by dba2 in Slack (user U0DBA2)"),
        "{last}"
    );
    assert!(text_of(&last).contains("use the read replica"));
    assert_eq!(backend.count(), 0);
}

#[test]
fn a_decision_anywhere_else_and_expiry_update_the_message_and_a_late_click_changes_nothing() {
    let port = free_port();
    let slack = Slack::start(port);
    let backend = Backend::start();
    let gw = start(slack.port, port, &backend);

    // Decided in the inbox: the message loses its buttons; a click on the old one is told who.
    let (_, id) = gw.call_async("agent1", "db.query", json!({"sql": "select 2"}));
    let m = slack.wait_message(&id, "posted", |_| true);
    approve_in_inbox(&gw, "dba1", &id);
    slack.wait_message(&id, "decided", |v| {
        !has_buttons(v) && text_of(v).contains("Approved by dba1 at")
    });
    slack.click(&m, "U0DBA2", "airlock.approve_once", json!({"version": 0}));
    let told = slack.wait_told("U0DBA2", "Nothing changed");
    assert!(
        told.contains("already approved") && told.contains("dba1"),
        "{told}"
    );
    assert_eq!(decisions_in_audit(&gw, &id).len(), 1);

    // "Approve for this run": the same call again in the run runs without asking; in another
    // run, or with one byte changed, it is held.
    let (call, run) = gw.call_async("agent1", "db.query", json!({"sql": "select 6"}));
    let m = slack.wait_message(&run, "posted", |_| true);
    slack.click(&m, "U0DBA1", "airlock.approve_run", json!({}));
    slack.wait_message(&run, "approved", |v| !has_buttons(v));
    let a = approval(&gw, &run);
    assert_eq!(
        (a["grant"]["scope"].as_str(), a["grant"]["uses"].as_u64()),
        (Some("run"), Some(5)),
        "{a}"
    );
    assert_eq!(gw.resume("agent1", &call).0, 200);
    let (s, b) = gw.call("agent1", "db.query", json!({"sql": "select 6"}), None);
    assert_eq!(s, 200, "{b}");
    let (s, _) = gw.req(
        "POST",
        "/v1/calls",
        Some("agent1"),
        Some(&json!({"tool": "db.query", "args": {"sql": "select 6"}, "context": {"run_id": "run-2"}}).to_string()),
        Some("respond-async"),
    );
    assert_eq!(s, 202, "another run asks");
    assert_eq!(
        gw.call(
            "agent1",
            "db.query",
            json!({"sql": "select 6 "}),
            Some("respond-async")
        )
        .0,
        202,
        "other args ask"
    );

    // A quorum of two in Slack: the first click counts and shows, the second decides.
    let (_, pay) = gw.call_async("agent1", "pay.send", json!({"amount": 10}));
    let m = slack.wait_message(&pay, "posted", |_| true);
    assert_eq!(m["channel"], "C0FIN");
    slack.click(&m, "U0FIN1", "airlock.approve", json!({}));
    slack.wait_told("U0FIN1", "1 of 2");
    slack.wait_message(&pay, "1 of 2", |v| {
        text_of(v).contains("1 of 2") && has_buttons(v)
    });
    slack.click(&m, "U0FIN2", "airlock.approve", json!({}));
    slack.wait_message(&pay, "approved", |v| {
        !has_buttons(v) && text_of(v).contains("2 of 2")
    });
    assert_eq!(approval(&gw, &pay)["status"], "approved");

    // Any approver's approval goes to the default channel; expiry updates it.
    let (_, short) = gw.call_async("agent1", "short.op", json!({"n": 1}));
    let m = slack.wait_message(&short, "posted", |_| true);
    assert_eq!(m["channel"], "C0ALL");
    slack.wait_message(&short, "expired", |v| {
        !has_buttons(v) && text_of(v).contains("Expired at")
    });

    // Cancelled by its agent: updated too.
    let (call, cancelled) = gw.call_async("agent1", "db.query", json!({"sql": "select 3"}));
    slack.wait_message(&cancelled, "posted", |_| true);
    let (s, b) = gw.req(
        "POST",
        &format!("/v1/calls/{call}/cancel"),
        Some("agent1"),
        None,
        None,
    );
    assert_eq!(s, 200, "{b}");
    slack.wait_message(&cancelled, "cancelled", |v| {
        !has_buttons(v) && text_of(v).contains("Cancelled")
    });
}

#[test]
fn slack_down_or_rate_limiting_then_back_delivers_each_message_once() {
    let port = free_port();
    let slack = Slack::start(port);
    let backend = Backend::start();
    let gw = start(slack.port, port, &backend);

    slack.post("mode", json!({"down": true}));
    let (_, id) = gw.call_async("agent1", "db.query", json!({"sql": "select 4"}));
    let start = Instant::now();
    while !slack
        .get("calls")
        .as_array()
        .unwrap()
        .iter()
        .any(|c| c["answer"] == 503)
    {
        assert!(start.elapsed() < Duration::from_secs(10));
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(slack.messages_of(&id).is_empty());
    slack.post("mode", json!({"down": false, "ratelimit": 1}));
    let m = slack.wait_message(&id, "posted after the outage", |_| true);
    assert_eq!(slack.messages_of(&id).len(), 1, "once");
    assert_eq!(m["versions"].as_array().unwrap().len(), 1);
    let calls = slack.get("calls");
    let answers: Vec<&Value> = calls
        .as_array()
        .unwrap()
        .iter()
        .map(|c| &c["answer"])
        .collect();
    assert!(
        answers.contains(&&json!(429)),
        "rate limited once: {answers:?}"
    );
    assert_eq!(
        answers.iter().filter(|a| ***a == json!("ok")).count(),
        1,
        "one post: {answers:?}"
    );
    // The bot taken out of the channel: a permanent error, dead-lettered, not retried for an
    // hour.
    slack.post("mode", json!({"not_in_channel": ["C0DBA"]}));
    let (_, other) = gw.call_async("agent1", "db.query", json!({"sql": "select 5"}));
    let start = Instant::now();
    while !gw
        .metrics()
        .contains("airlock_webhook_deliveries_total{result=\"dead\"} 1")
    {
        assert!(
            start.elapsed() < Duration::from_secs(15),
            "{}",
            gw.metrics()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    let log = std::fs::read_to_string(gw.dir.path().join("gateway.log")).unwrap();
    assert!(log.contains("Slack: not_in_channel"), "{log}");
    assert!(slack.messages_of(&other).is_empty());
    assert_eq!(
        approval(&gw, &other)["status"],
        "pending",
        "nothing decided by an error"
    );
}

#[test]
fn two_gateways_on_postgres_post_once_update_the_same_message_and_share_the_replay_marks() {
    let backend = Backend::start();
    let db = Database::fresh();
    let (port_a, port_b) = (free_port(), free_port());
    // Slack's Request URL is gateway B; the approval is held by gateway A.
    let slack = Slack::start(port_b);
    let gws: Vec<Gateway> =
        [("gw-a", port_a), ("gw-b", port_b)]
            .iter()
            .map(|(name, port)| {
                let config =
                    format!(
                "{}\n{}\n[store]\nkind = \"postgres\"\nurl = \"{}\"\ninstance = \"{name}\"\n",
                config_text(&backend, &format!("public_url = \"http://127.0.0.1:{port}\"")),
                slack_table(slack.port, USERS),
                db.url
            );
                Gateway::start_env(&config, &policy(), *port, "warn", &SLACK_ENV)
            })
            .collect();
    let (call, id) = gws[0].call_async("agent1", "db.query", json!({"sql": "select 8"}));
    let m = slack.wait_message(&id, "posted", |_| true);
    let a_url = format!("http://127.0.0.1:{port_a}/slack/interactions");
    let results = slack.click(
        &m,
        "U0DBA1",
        "airlock.approve_once",
        json!({"also_to": [a_url]}),
    );
    assert_eq!(results[0]["status"], 200, "{results:?}");
    assert_eq!(
        results[1]["status"], 409,
        "replayed to the other gateway: {results:?}"
    );
    slack.wait_message(&id, "decided", |v| {
        !has_buttons(v) && text_of(v).contains("Approved by dba1 in Slack")
    });
    assert_eq!(gws[0].resume("agent1", &call).0, 200);
    assert_eq!(backend.count(), 1);
    // Two delivery workers, one outbox: one post, and each update on that message.
    std::thread::sleep(Duration::from_millis(500));
    let posts = slack
        .get("calls")
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["method"] == "chat.postMessage")
        .count();
    assert_eq!(posts, 1);
    assert_eq!(slack.messages_of(&id).len(), 1);
    assert_eq!(decisions_in_audit(&gws[1], &id).len(), 1);
}

#[test]
fn without_slack_configured_the_route_is_not_found() {
    let backend = Backend::start();
    let gw = Gateway::start(&backend);
    let (status, body) = signed_post(&gw, "payload=%7B%7D");
    assert_eq!((status, code(&body)), (404, "route.not_found"), "{body}");
}
