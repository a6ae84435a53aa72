//! Suspend and resume (DESIGN §11) end to end: the real gateway, and a real backend whose
//! `/ask` tool asks "which environment?" mid-call. Run streams are read over real SSE.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use std::io::Read;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use support::{config_text, Backend, Gateway, POLICY};

fn policy() -> String {
    format!(
        r#"{POLICY}
[[rules]]
id = "ask-allowed"
tools = ["bad.*"]
decision = "allow"

[[rules]]
id = "no-production-by-resume"
tools = ["ask.*"]
when = 'resume != null && has(resume.environment) && resume.environment == "production"'
decision = "deny"
message = "production needs a change ticket"

[[rules]]
id = "gated-ask"
tools = ["gated.*"]
decision = "require_approval"
approvers = ["dba"]
"#
    )
}

fn start(backend: &Backend, extra_server: &str) -> Gateway {
    let mut config = config_text(backend, extra_server);
    for (tool, path) in [
        ("ask.*", "/ask"),
        ("gated.*", "/ask"),
        ("bad.*", "/badsuspend"),
    ] {
        config.push_str(&format!(
            "[[tools]]\nname = \"{tool}\"\nupstream = \"{}\"\ntimeout = \"5s\"\n",
            backend.url(path)
        ));
    }
    Gateway::start_with(&config, &policy())
}

fn call(gw: &Gateway, who: &str, tool: &str, args: Value, context: Value) -> (u16, Value) {
    gw.req(
        "POST",
        "/v1/calls",
        Some(who),
        Some(&json!({"tool": tool, "args": args, "context": context}).to_string()),
        None,
    )
}

fn resume(gw: &Gateway, who: &str, call_id: &str, data: Value) -> (u16, Value) {
    gw.req(
        "POST",
        &format!("/v1/calls/{call_id}/resume"),
        Some(who),
        Some(&json!({"resume_data": data}).to_string()),
        None,
    )
}

fn audit_kinds(gw: &Gateway, call_id: &str) -> Vec<String> {
    let (s, b) = gw.req("GET", "/v1/audit?limit=1000", Some("admin"), None, None);
    assert_eq!(s, 200, "{b}");
    b["records"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["call_id"] == call_id)
        .map(|r| r["kind"].as_str().unwrap().to_owned())
        .collect()
}

#[test]
fn a_suspended_call_is_resumed_with_valid_data_only_and_continues() {
    let backend = Backend::start();
    let gw = start(&backend, "");
    let (s, b) = call(
        &gw,
        "agent1",
        "ask.deploy",
        json!({"service": "api"}),
        json!({"run_id": "r1", "tool_call_id": "tc-1"}),
    );
    assert_eq!(s, 202, "{b}");
    assert_eq!(b["status"], "suspended");
    assert_eq!(b["suspend"]["payload"]["question"], "which environment?");
    assert_eq!(
        b["suspend"]["resume_schema"]["required"],
        json!(["environment"])
    );
    assert_eq!(b["tool_call_id"], "tc-1");
    let id = b["call_id"].as_str().unwrap().to_owned();
    assert_eq!(backend.count(), 1);

    // Its state is visible to the agent.
    let (s, got) = gw.req(
        "GET",
        &format!("/v1/calls/{id}"),
        Some("agent1"),
        None,
        None,
    );
    assert_eq!((s, got["status"].as_str()), (202, Some("suspended")));

    // Data the schema refuses: every failing pointer is named, nothing reaches the backend.
    let (s, e) = resume(
        &gw,
        "agent1",
        &id,
        json!({"environment": "moon", "extra": 1}),
    );
    assert_eq!(s, 422, "{e}");
    assert_eq!(e["error"]["code"], "request.invalid_resume_data");
    let pointers: Vec<&str> = e["error"]["details"]["errors"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x["pointer"].as_str().unwrap())
        .collect();
    assert!(pointers.contains(&"/environment"), "{e}");
    assert!(
        pointers.contains(&""),
        "additionalProperties fails at the root: {e}"
    );
    let (s, e) = resume(&gw, "agent1", &id, json!("staging"));
    assert_eq!(
        (s, e["error"]["code"].as_str()),
        (422, Some("request.invalid_resume_data"))
    );
    assert_eq!(backend.count(), 1);

    // Another agent cannot see the call, let alone resume it.
    let (s, e) = resume(&gw, "agent2", &id, json!({"environment": "staging"}));
    assert_eq!(
        (s, e["error"]["code"].as_str()),
        (404, Some("call.not_found"))
    );

    // Valid data: the backend gets the canonical args and data, marked as a resume.
    let (s, done) = resume(&gw, "agent1", &id, json!({"environment": "staging"}));
    assert_eq!(s, 200, "{done}");
    assert_eq!(done["status"], "completed");
    assert_eq!(done["result"]["deployed_to"], "staging");
    assert_eq!(done["result"]["headers"]["airlock-resume"], id.as_str());
    let (n, bodies) = backend.seen();
    assert_eq!(n, 2);
    assert_eq!(
        bodies[1],
        r#"{"args":{"service":"api"},"resume_data":{"environment":"staging"}}"#
    );

    // Resuming again: the call is not suspended; nothing runs.
    let (s, e) = resume(&gw, "agent1", &id, json!({"environment": "staging"}));
    assert_eq!(
        (s, e["error"]["code"].as_str()),
        (409, Some("call.not_suspended"))
    );
    // A resume without data is §6's: the call's outcome.
    let (s, again) = gw.req(
        "POST",
        &format!("/v1/calls/{id}/resume"),
        Some("agent1"),
        None,
        None,
    );
    assert_eq!(
        (s, again["result"]["deployed_to"].as_str()),
        (200, Some("staging"))
    );
    assert_eq!(backend.count(), 2);

    let kinds = audit_kinds(&gw, &id);
    for k in [
        "call.decided",
        "call.suspended",
        "call.resumed",
        "call.completed",
    ] {
        assert!(kinds.contains(&k.to_owned()), "{k} missing from {kinds:?}");
    }
}

#[test]
fn a_call_suspends_twice_and_policy_can_deny_a_resume() {
    let backend = Backend::start();
    let gw = start(&backend, "");
    let (s, b) = call(&gw, "agent1", "ask.deploy", json!({"rounds": 2}), json!({}));
    assert_eq!(s, 202, "{b}");
    let id = b["call_id"].as_str().unwrap().to_owned();

    // Policy sees `resume`: production is refused, the call stays suspended.
    let (s, e) = resume(&gw, "agent1", &id, json!({"environment": "production"}));
    assert_eq!(s, 403, "{e}");
    assert_eq!(e["error"]["code"], "policy.denied");
    assert_eq!(e["error"]["details"]["suspended"], true, "{e}");
    assert_eq!(
        e["error"]["message"],
        "production needs a change ticket (the call stays suspended: answer again)"
    );
    assert_eq!(backend.count(), 1);
    let (_, got) = gw.req(
        "GET",
        &format!("/v1/calls/{id}"),
        Some("agent1"),
        None,
        None,
    );
    assert_eq!(got["status"], "suspended");
    assert!(audit_kinds(&gw, &id).contains(&"call.resume_denied".to_owned()));

    // The first answer suspends it again, with a new schema.
    let (s, again) = resume(&gw, "agent1", &id, json!({"environment": "staging"}));
    assert_eq!(s, 202, "{again}");
    assert_eq!(again["suspensions"], 2);
    assert_eq!(
        again["suspend"]["payload"]["question"],
        "deploy to \"staging\"?"
    );
    // The old schema's data no longer fits.
    let (s, _) = resume(&gw, "agent1", &id, json!({"environment": "staging"}));
    assert_eq!(s, 422);
    let (s, done) = resume(
        &gw,
        "agent1",
        &id,
        json!({"environment": "staging", "confirm": true}),
    );
    assert_eq!(s, 200, "{done}");
    assert_eq!(done["result"]["resume_data"]["confirm"], true);
    assert_eq!(backend.count(), 3);
}

#[test]
fn a_run_resume_takes_its_one_suspended_call_and_refuses_to_guess() {
    let backend = Backend::start();
    let gw = start(&backend, "");
    let path = "/v1/runs/run-9/resume";
    let run_resume =
        |who: &str, body: Value| gw.req("POST", path, Some(who), Some(&body.to_string()), None);

    let (s, e) = run_resume("agent1", json!({"resume_data": {"environment": "staging"}}));
    assert_eq!(
        (s, e["error"]["code"].as_str()),
        (404, Some("call.not_found"))
    );

    let (_, a) = call(
        &gw,
        "agent1",
        "ask.one",
        json!({"n": 1}),
        json!({"run_id": "run-9", "tool_call_id": "a"}),
    );
    let (s, done) = run_resume("agent1", json!({"resume_data": {"environment": "staging"}}));
    assert_eq!(s, 200, "{done}");
    assert_eq!(done["call_id"], a["call_id"]);

    let (_, b) = call(
        &gw,
        "agent1",
        "ask.two",
        json!({"n": 2}),
        json!({"run_id": "run-9", "tool_call_id": "b"}),
    );
    let (_, c) = call(
        &gw,
        "agent1",
        "ask.three",
        json!({"n": 3}),
        json!({"run_id": "run-9", "tool_call_id": "c"}),
    );
    let (s, e) = run_resume("agent1", json!({"resume_data": {"environment": "staging"}}));
    assert_eq!(s, 409, "{e}");
    assert_eq!(e["error"]["code"], "call.ambiguous");
    let listed: Vec<&str> = e["error"]["details"]["calls"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["call_id"].as_str().unwrap())
        .collect();
    assert_eq!(listed.len(), 2);
    assert!(
        listed.contains(&b["call_id"].as_str().unwrap())
            && listed.contains(&c["call_id"].as_str().unwrap())
    );
    let before = backend.count();

    // Narrowed by tool_call_id; an approver may resume a call, another agent may not.
    let (s, e) = run_resume(
        "agent2",
        json!({"resume_data": {"environment": "staging"}, "tool_call_id": "c"}),
    );
    assert_eq!(
        (s, e["error"]["code"].as_str()),
        (404, Some("call.not_found"))
    );
    let (s, done) = run_resume(
        "ops",
        json!({"resume_data": {"environment": "staging"}, "tool_call_id": "c"}),
    );
    assert_eq!(s, 200, "{done}");
    assert_eq!(done["call_id"], c["call_id"]);
    assert_eq!(backend.count(), before + 1);
    let (s, e) = run_resume("agent1", json!({"tool_call_id": "b"}));
    assert_eq!(
        (s, e["error"]["code"].as_str()),
        (400, Some("request.missing_field"))
    );
}

#[test]
fn a_suspension_survives_a_restart_and_expires_after_its_ttl() {
    let backend = Backend::start();
    let mut gw = start(&backend, "suspend_ttl = \"3s\"");
    let (_, b) = call(&gw, "agent1", "ask.deploy", json!({"k": 1}), json!({}));
    let id = b["call_id"].as_str().unwrap().to_owned();
    gw.kill9();
    gw.spawn();
    let (s, done) = resume(&gw, "agent1", &id, json!({"environment": "staging"}));
    assert_eq!(s, 200, "{done}");
    assert_eq!(done["result"]["deployed_to"], "staging");

    // Nobody resumes this one: it expires, once, and nothing more runs.
    let (_, b) = call(&gw, "agent1", "ask.deploy", json!({"k": 2}), json!({}));
    let id = b["call_id"].as_str().unwrap().to_owned();
    let before = backend.count();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let (s, got) = gw.req(
            "GET",
            &format!("/v1/calls/{id}"),
            Some("agent1"),
            None,
            None,
        );
        if s == 410 {
            assert_eq!(got["error"]["code"], "call.expired");
            break;
        }
        assert!(Instant::now() < deadline, "never expired: {got}");
        std::thread::sleep(Duration::from_millis(200));
    }
    let (s, e) = resume(&gw, "agent1", &id, json!({"environment": "staging"}));
    assert_eq!(
        (s, e["error"]["code"].as_str()),
        (409, Some("call.not_suspended"))
    );
    assert_eq!(backend.count(), before);
    let kinds = audit_kinds(&gw, &id);
    assert_eq!(
        kinds.iter().filter(|k| *k == "call.expired").count(),
        1,
        "{kinds:?}"
    );
}

#[test]
fn a_suspension_with_a_bad_schema_fails_the_call_and_stores_nothing_suspended() {
    let backend = Backend::start();
    let gw = start(&backend, "");
    let (s, e) = call(
        &gw,
        "agent1",
        "bad.tool",
        json!({}),
        json!({"run_id": "rb"}),
    );
    assert_eq!(s, 502, "{e}");
    assert_eq!(e["error"]["code"], "upstream.invalid_suspend");
    let id = e["error"]["details"]["call_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let (s, e) = resume(&gw, "agent1", &id, json!({}));
    assert_eq!(
        (s, e["error"]["code"].as_str()),
        (409, Some("call.not_suspended"))
    );
    let (s, e) = gw.req(
        "POST",
        "/v1/runs/rb/resume",
        Some("agent1"),
        Some(r#"{"resume_data":{}}"#),
        None,
    );
    assert_eq!(
        (s, e["error"]["code"].as_str()),
        (404, Some("call.not_found"))
    );
    assert!(!audit_kinds(&gw, &id).contains(&"call.suspended".to_owned()));
}

/// Reads events from a run stream until `n` have come (or 15 s pass): `(id, data)`.
fn read_events(
    gw: &Gateway,
    who: &str,
    run: &str,
    last: Option<u64>,
    n: usize,
) -> Vec<(u64, Value)> {
    let client = reqwest::blocking::Client::builder()
        .timeout(Duration::from_secs(15))
        .build()
        .unwrap();
    let mut r = client
        .get(format!("{}/v1/runs/{run}/stream", gw.base))
        .bearer_auth(format!("token-{who}"));
    if let Some(l) = last {
        r = r.header("last-event-id", l.to_string());
    }
    let mut resp = r.send().unwrap();
    assert_eq!(resp.status().as_u16(), 200);
    let mut buf = String::new();
    let mut events = Vec::new();
    let mut chunk = [0u8; 4096];
    while events.len() < n {
        let got = resp.read(&mut chunk).unwrap();
        assert!(got > 0, "the stream ended after {events:?}");
        buf.push_str(&String::from_utf8_lossy(&chunk[..got]));
        while let Some(end) = buf.find("\n\n") {
            let event: String = buf.drain(..end + 2).collect();
            let id = event
                .lines()
                .find_map(|l| l.strip_prefix("id: "))
                .map(|i| i.parse().unwrap());
            let data = event.lines().find_map(|l| l.strip_prefix("data: "));
            if let (Some(id), Some(data)) = (id, data) {
                events.push((id, serde_json::from_str(data).unwrap()));
            }
        }
    }
    events
}

#[test]
fn a_run_stream_carries_the_runs_chunks_in_order_and_replays_from_last_event_id() {
    let backend = Backend::start();
    let gw = start(&backend, "");
    let ctx = |tc: &str| json!({"run_id": "rs", "tool_call_id": tc});
    // An approval (then approved and run), a suspension (then resumed), a denial, and a
    // backend failure, all in run `rs`; one more call in another run.
    let (_, held) = gw.req(
        "POST",
        "/v1/calls",
        Some("agent1"),
        Some(
            &json!({"tool": "db.query", "args": {"sql": "select 1"}, "context": ctx("t-approve")})
                .to_string(),
        ),
        Some("respond-async"),
    );
    let (_, sus) = call(&gw, "agent1", "ask.deploy", json!({}), ctx("t-suspend"));
    let _ = call(
        &gw,
        "agent1",
        "db.query",
        json!({"sql": "drop table x"}),
        ctx("t-deny"),
    );
    let _ = call(&gw, "agent1", "fail.now", json!({}), ctx("t-fail"));
    let _ = call(
        &gw,
        "agent1",
        "echo.other",
        json!({}),
        json!({"run_id": "other"}),
    );

    let first = read_events(&gw, "agent1", "rs", None, 4);
    let types: Vec<&str> = first
        .iter()
        .map(|(_, e)| e["type"].as_str().unwrap())
        .collect();
    assert_eq!(
        types,
        [
            "tool-call-approval",
            "tool-call-suspended",
            "tool-error",
            "tool-result"
        ]
    );
    let approval = &first[0].1;
    assert_eq!(approval["runId"], "rs");
    assert_eq!(approval["callId"], held["call_id"]);
    assert_eq!(approval["payload"]["toolCallId"], "t-approve");
    assert_eq!(approval["payload"]["toolName"], "db.query");
    assert_eq!(approval["payload"]["args"]["sql"], "select 1");
    assert_eq!(approval["payload"]["approvalId"], held["approval"]["id"]);
    assert!(approval["payload"]["expiresAt"].is_string());
    let suspended = &first[1].1["payload"];
    assert_eq!(suspended["toolCallId"], "t-suspend");
    assert_eq!(
        suspended["suspendPayload"]["question"],
        "which environment?"
    );
    assert_eq!(suspended["resumeSchema"]["type"], "object");
    assert_eq!(first[2].1["payload"]["error"]["code"], "policy.denied");
    assert_eq!(first[2].1["payload"]["toolCallId"], "t-deny");
    // A backend's own 500 is a result, as in §6.
    assert_eq!(first[3].1["payload"]["toolCallId"], "t-fail");
    assert_eq!(first[3].1["payload"]["result"]["error"], "backend says no");
    let ids: Vec<u64> = first.iter().map(|(i, _)| *i).collect();
    assert!(ids.windows(2).all(|w| w[0] < w[1]), "{ids:?}");

    // What happens next arrives live, and a reconnect from the last id gets exactly it.
    let approval_id = held["approval"]["id"].as_str().unwrap();
    let (s, _) = gw.approve("dba1", approval_id);
    assert_eq!(s, 200);
    let (s, _) = gw.req(
        "POST",
        &format!("/v1/calls/{}/resume", held["call_id"].as_str().unwrap()),
        Some("agent1"),
        None,
        None,
    );
    assert_eq!(s, 200);
    let (s, _) = resume(
        &gw,
        "agent1",
        sus["call_id"].as_str().unwrap(),
        json!({"environment": "staging"}),
    );
    assert_eq!(s, 200);
    let last = ids[3];
    let rest = read_events(&gw, "agent1", "rs", Some(last), 2);
    assert!(rest.iter().all(|(i, _)| *i > last));
    let results: Vec<(&str, &str)> = rest
        .iter()
        .map(|(_, e)| {
            (
                e["type"].as_str().unwrap(),
                e["payload"]["toolCallId"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        results,
        [("tool-result", "t-approve"), ("tool-result", "t-suspend")]
    );
    assert_eq!(rest[1].1["payload"]["result"]["deployed_to"], "staging");

    // From the start again: the same six, nothing twice, nothing of the other run.
    let all = read_events(&gw, "agent1", "rs", None, 6);
    let all_ids: Vec<u64> = all.iter().map(|(i, _)| *i).collect();
    assert_eq!(
        all_ids,
        [ids.clone(), rest.iter().map(|(i, _)| *i).collect()].concat()
    );

    // Another agent sees none of agent1's calls; an approver sees them all.
    let _ = call(
        &gw,
        "agent2",
        "echo.mine",
        json!({}),
        json!({"run_id": "rs"}),
    );
    let theirs = read_events(&gw, "agent2", "rs", None, 1);
    assert_eq!(theirs.len(), 1);
    assert_eq!(theirs[0].1["payload"]["toolName"], "echo.mine");
    let approver = read_events(&gw, "ops", "rs", None, 7);
    assert_eq!(approver.len(), 7);

    // A bad Last-Event-ID is refused.
    let r = reqwest::blocking::Client::new()
        .get(format!("{}/v1/runs/rs/stream", gw.base))
        .bearer_auth("token-agent1")
        .header("last-event-id", "not-a-number")
        .send()
        .unwrap();
    assert_eq!(r.status().as_u16(), 400);
}

/// Resume data of every shape: the schema's answers, wrong enum values, wrong types, extra
/// keys, nested values, and values that are not objects.
fn resume_data() -> impl proptest::strategy::Strategy<Value = Value> {
    use proptest::prelude::*;
    let env = prop_oneof![
        Just(json!("staging")),
        Just(json!("production")),
        Just(json!("Staging")),
        Just(json!("moon")),
        Just(json!(1)),
        Just(json!(null)),
        Just(json!(["staging"])),
        Just(json!({"name": "staging"})),
    ];
    let extra = prop_oneof![
        Just(None),
        Just(Some(("note", json!("x")))),
        Just(Some(("n", json!(1.5)))),
        Just(Some(("z", json!({"deep": [1, 2, {"é": "ü"}]})))),
    ];
    let object = (proptest::option::of(env), extra).prop_map(|(e, x)| {
        let mut m = serde_json::Map::new();
        if let Some(e) = e {
            m.insert("environment".into(), e);
        }
        if let Some((k, v)) = x {
            m.insert(k.into(), v);
        }
        Value::Object(m)
    });
    prop_oneof![
        // Valid answers often enough that every run forwards some.
        3 => Just(json!({"environment": "staging"})),
        1 => Just(json!({"environment": "production"})),
        6 => object,
        1 => Just(json!("staging")),
        1 => Just(json!([])),
        1 => Just(json!(42)),
    ]
}

#[test]
fn any_data_the_schema_accepts_is_forwarded_canonically_and_any_it_rejects_never() {
    use proptest::test_runner::{Config, TestRunner};
    let backend = Backend::start();
    let gw = start(&backend, "");
    let schema = json!({
        "type": "object",
        "properties": {"environment": {"type": "string", "enum": ["staging", "production"]}},
        "required": ["environment"],
        "additionalProperties": false,
    });
    let accepts = |d: &Value| {
        let Some(m) = d.as_object() else { return false };
        m.len() == 1
            && matches!(
                m.get("environment").and_then(Value::as_str),
                Some("staging" | "production")
            )
    };
    assert_eq!(schema["required"], json!(["environment"]));
    let mut runner = TestRunner::new(Config {
        cases: 48,
        ..Config::default()
    });
    let forwarded = std::cell::Cell::new(0);
    runner
        .run(&resume_data(), |data| {
            let (s, b) = call(&gw, "agent1", "ask.prop", json!({"x": 1}), json!({}));
            assert_eq!(s, 202, "{b}");
            let id = b["call_id"].as_str().unwrap().to_owned();
            let before = backend.count();
            let (s, answer) = resume(&gw, "agent1", &id, data.clone());
            let (after, bodies) = backend.seen();
            // Production fits the schema but policy refuses it: also never forwarded.
            let allowed = accepts(&data) && data["environment"] != "production";
            if allowed {
                assert_eq!(s, 200, "{data} → {answer}");
                assert_eq!(after, before + 1);
                let sent = bodies.last().unwrap();
                let expected = format!(
                    r#"{{"args":{{"x":1}},"resume_data":{}}}"#,
                    airlock_policy::canonicalize(&data)
                );
                assert_eq!(sent, &expected);
                forwarded.set(forwarded.get() + 1);
            } else {
                assert!(matches!(s, 422 | 403), "{data} → {s} {answer}");
                if !accepts(&data) {
                    assert_eq!(
                        answer["error"]["code"], "request.invalid_resume_data",
                        "{data}"
                    );
                }
                assert_eq!(after, before, "{data} reached the backend");
            }
            Ok(())
        })
        .unwrap();
    assert!(
        forwarded.get() > 0,
        "the generator never produced valid data"
    );
}

#[test]
fn approvers_list_suspended_calls_and_agents_only_their_own() {
    let backend = Backend::start();
    let gw = start(&backend, "");
    let (_, a) = call(
        &gw,
        "agent1",
        "ask.one",
        json!({"i": 1}),
        json!({"run_id": "l"}),
    );
    let (_, b) = call(&gw, "agent2", "ask.two", json!({"i": 2}), json!({}));
    let ids = |who: &str| -> Vec<String> {
        let (s, body) = gw.req("GET", "/v1/calls?status=suspended", Some(who), None, None);
        assert_eq!(s, 200, "{body}");
        body["calls"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["call_id"].as_str().unwrap().to_owned())
            .collect()
    };
    let (a, b) = (
        a["call_id"].as_str().unwrap(),
        b["call_id"].as_str().unwrap(),
    );
    assert_eq!(ids("ops"), [a, b]);
    assert_eq!(ids("agent1"), [a]);
    assert_eq!(ids("agent2"), [b]);
    let (s, body) = gw.req("GET", "/v1/calls?status=suspended", Some("ops"), None, None);
    assert_eq!(s, 200);
    assert_eq!(
        body["calls"][0]["suspend"]["payload"]["question"],
        "which environment?"
    );
    let (s, e) = gw.req("GET", "/v1/calls?status=done", Some("ops"), None, None);
    assert_eq!(
        (s, e["error"]["code"].as_str()),
        (400, Some("request.invalid_field"))
    );
    // Resumed calls leave the list.
    let (s, _) = resume(&gw, "ops", a, json!({"environment": "staging"}));
    assert_eq!(s, 200);
    assert_eq!(ids("ops"), [b]);
}

#[test]
fn a_misspelt_resume_is_refused_and_a_suspended_call_can_be_cancelled() {
    let backend = Backend::start();
    let gw = start(&backend, "");
    let (_, b) = call(
        &gw,
        "agent1",
        "ask.deploy",
        json!({"c": 1}),
        json!({"run_id": "cx"}),
    );
    let id = b["call_id"].as_str().unwrap().to_owned();
    let path = format!("/v1/calls/{id}/resume");
    // A misspelt field is not read as "no data" (which would answer the call's state).
    let (s, e) = gw.req(
        "POST",
        &path,
        Some("agent1"),
        Some(r#"{"resume_dta":{"environment":"staging"}}"#),
        None,
    );
    assert_eq!(
        (s, e["error"]["code"].as_str()),
        (400, Some("request.unknown_field")),
        "{e}"
    );
    let (s, e) = gw.req("POST", &path, Some("agent1"), Some("[]"), None);
    assert_eq!(s, 400, "{e}");
    let (s, e) = gw.req(
        "POST",
        "/v1/runs/cx/resume",
        Some("agent1"),
        Some(r#"{"resume_data":{"environment":"staging"},"tool":"x"}"#),
        None,
    );
    assert_eq!(
        (s, e["error"]["code"].as_str()),
        (400, Some("request.unknown_field")),
        "{e}"
    );
    assert_eq!(backend.count(), 1);

    // Its requester cancels it: it is no longer suspended, and nothing more reaches the backend.
    let (s, c) = gw.req(
        "POST",
        &format!("/v1/calls/{id}/cancel"),
        Some("agent1"),
        None,
        None,
    );
    assert_eq!((s, c["status"].as_str()), (200, Some("cancelled")), "{c}");
    let (s, e) = resume(&gw, "agent1", &id, json!({"environment": "staging"}));
    assert_eq!(
        (s, e["error"]["code"].as_str()),
        (409, Some("call.not_suspended"))
    );
    let (s, list) = gw.req("GET", "/v1/calls?status=suspended", Some("ops"), None, None);
    assert_eq!(s, 200);
    assert_eq!(list["calls"], json!([]));
    assert_eq!(backend.count(), 1);
    assert!(audit_kinds(&gw, &id).contains(&"call.cancelled".to_owned()));
}
