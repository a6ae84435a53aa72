//! Nothing the caller chooses widens what it may do: the real `airlock` binary, attacked with
//! only an agent's token. Its context (`agent_id`), its run ids, its padded args, its timing
//! and its volume, and the args it sends to a tool whose schema forbids them.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use std::time::Duration;

use serde_json::{json, Value};
use sha2::{Digest, Sha256};
use support::*;

/// The audit log's records of `kind`.
fn audit(gw: &Gateway, kind: &str) -> Vec<Value> {
    let (s, b) = gw.req("GET", "/v1/audit?limit=5000", Some("admin"), None, None);
    assert_eq!(s, 200, "{b}");
    b["records"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["kind"] == kind)
        .cloned()
        .collect()
}

fn post(gw: &Gateway, who: &str, body: Value, prefer: Option<&str>) -> (u16, Value) {
    gw.req(
        "POST",
        "/v1/calls",
        Some(who),
        Some(&body.to_string()),
        prefer,
    )
}

/// The call ids of the events `who` is sent on run `run`'s stream within two seconds.
fn stream_for(gw: &Gateway, who: &str, run: &str) -> Vec<String> {
    use std::io::Read;
    let client = reqwest::blocking::Client::builder()
        .timeout(Duration::from_secs(2))
        .build()
        .unwrap();
    let mut resp = client
        .get(format!("{}/v1/runs/{run}/stream", gw.base))
        .bearer_auth(format!("token-{who}"))
        .send()
        .unwrap();
    let mut text = String::new();
    let mut chunk = [0u8; 4096];
    while let Ok(n) = resp.read(&mut chunk) {
        if n == 0 {
            break;
        }
        text.push_str(&String::from_utf8_lossy(&chunk[..n]));
    }
    text.lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .filter_map(|d| serde_json::from_str::<Value>(d).ok())
        .filter_map(|v| v["callId"].as_str().map(str::to_owned))
        .collect()
}

/// A principal `lister` that may speak for agents `bot-*`.
fn lister() -> String {
    let hash = airlock_policy::hex(&Sha256::digest(b"token-lister"));
    format!(
        "[[principals]]\nid = \"lister\"\nrole = \"agent\"\ntoken_sha256 = \"{hash}\"\nagents = [\"bot-*\"]\n"
    )
}

#[test]
fn context_agent_id_is_bound_to_the_principal() {
    let backend = Backend::start();
    let policy = format!(
        "{POLICY}\n[agents.\"agent1\"]\nrequire_tool_approval = true\n\n[[rules]]\nid = \"deny-bot-2\"\ntools = [\"echo.*\"]\nwhen = 'context.agent_id == \"bot-2\"'\ndecision = \"deny\"\n"
    );
    let gw = Gateway::start_with(&(config_text(&backend, "") + &lister()), &policy);
    // No context: the call is made as agent1, whose agent flag holds it (it ran before).
    let (s, b) = post(
        &gw,
        "agent1",
        json!({"tool": "echo.a", "args": {}}),
        Some("respond-async"),
    );
    assert_eq!(s, 202, "{b}");
    let id = b["approval"]["id"].as_str().unwrap();
    let (_, a) = gw.req(
        "GET",
        &format!("/v1/approvals/{id}"),
        Some("ops"),
        None,
        None,
    );
    assert!(
        a["rules"]
            .as_array()
            .unwrap()
            .contains(&json!("agent:agent1")),
        "{a}"
    );
    // Naming another agent is refused, audited, and nothing runs.
    let (s, b) = post(
        &gw,
        "agent1",
        json!({"tool": "echo.a", "args": {}, "context": {"agent_id": "agent2"}}),
        None,
    );
    assert_eq!((s, code(&b)), (403, "request.agent_forbidden"), "{b}");
    assert_eq!(b["error"]["details"]["agent_id"], "agent2");
    let (s, b) = post(
        &gw,
        "agent2",
        json!({"tool": "echo.a", "args": {}, "context": {"agent_id": "agent1"}}),
        None,
    );
    assert_eq!((s, code(&b)), (403, "request.agent_forbidden"), "{b}");
    assert_eq!(backend.count(), 0);
    let rejected = audit(&gw, "call.rejected");
    assert_eq!(
        rejected
            .iter()
            .filter(|r| r["code"] == "request.agent_forbidden")
            .count(),
        2,
        "{rejected:?}"
    );
    // Its own id, said out loud, is the same as none.
    let (s, _) = post(
        &gw,
        "agent1",
        json!({"tool": "echo.a", "args": {"x": 1}, "context": {"agent_id": "agent1"}}),
        Some("respond-async"),
    );
    assert_eq!(s, 202);
    // A principal whose config lists agents may name them, and the policy binds them.
    let (s, b) = post(
        &gw,
        "lister",
        json!({"tool": "echo.a", "args": {}, "context": {"agent_id": "bot-1"}}),
        None,
    );
    assert_eq!(s, 200, "{b}");
    let (s, b) = post(
        &gw,
        "lister",
        json!({"tool": "echo.a", "args": {}, "context": {"agent_id": "bot-2"}}),
        None,
    );
    assert_eq!((s, code(&b)), (403, "policy.denied"), "{b}");
    let (s, b) = post(
        &gw,
        "lister",
        json!({"tool": "echo.a", "args": {}, "context": {"agent_id": "agent1"}}),
        None,
    );
    assert_eq!((s, code(&b)), (403, "request.agent_forbidden"), "{b}");
    assert_eq!(backend.count(), 1);
}

#[test]
fn a_run_is_its_principals_own() {
    let backend = Backend::start();
    let gw = Gateway::start(&backend);
    // Both agents use run id `run-1` (the helper's).
    let (c1, a1) = gw.call_async("agent1", "multi.a", json!({}));
    let (c2, a2) = gw.call_async("agent2", "multi.b", json!({}));
    // An approver deciding the run must say whose: one agent cannot slip its calls into
    // another's run decision.
    let (s, b) = gw.req(
        "POST",
        "/v1/runs/run-1/approve",
        Some("ops"),
        Some("{}"),
        None,
    );
    assert_eq!((s, code(&b)), (409, "call.ambiguous"), "{b}");
    assert_eq!(
        b["error"]["details"]["principals"],
        json!(["agent1", "agent2"])
    );
    let (s, b) = gw.req(
        "POST",
        "/v1/runs/run-1/approve",
        Some("ops"),
        Some(r#"{"principal":"agent1"}"#),
        None,
    );
    assert_eq!(s, 200, "{b}");
    let results = b["results"].as_array().unwrap();
    assert_eq!(results.len(), 1, "{b}");
    assert_eq!(results[0]["approval_id"], a1.as_str());
    let (_, b) = gw.req(
        "GET",
        &format!("/v1/approvals/{a2}"),
        Some("ops"),
        None,
        None,
    );
    assert_eq!(b["status"], "pending");
    assert_eq!(gw.resume("agent1", &c1).0, 200);
    // agent2's stream of its run-1 tells nothing of agent1's calls in theirs.
    let seen = stream_for(&gw, "agent2", "run-1");
    assert!(seen.contains(&c2), "{seen:?}");
    assert!(!seen.contains(&c1), "{seen:?}");
    // agent1's run grant (3 uses, scope run) covers agent1's run-1 only: agent2's identical
    // call in its own run-1 needs its own approval, and never attaches to agent1's.
    let (s, b) = gw.call("agent2", "multi.a", json!({}), Some("respond-async"));
    assert_eq!(s, 202, "{b}");
    let (s, b) = gw.call("agent1", "multi.a", json!({}), None);
    assert_eq!(s, 200, "{b}");
    // Declining the rest of agent2's run by name reaches agent2's calls only.
    let (s, b) = gw.req(
        "POST",
        "/v1/runs/run-1/decline",
        Some("ops"),
        Some(r#"{"principal":"agent2","reason":"not this run"}"#),
        None,
    );
    assert_eq!(s, 200, "{b}");
    assert_eq!(b["results"].as_array().unwrap().len(), 2, "{b}");
    assert_eq!(code(&gw.resume("agent2", &c2).1), "approval.declined");
}

#[test]
fn a_deny_rule_padded_out_of_its_budget_still_denies_and_says_why() {
    let backend = Backend::start();
    let config =
        config_text(&backend, "").replace("max_body_bytes = 65536", "max_body_bytes = 2000000");
    let policy = r#"
version = 1

[defaults]
decision = "allow"
on_error = "require_approval"

[[rules]]
id = "no-shadow"
tools = ["echo.*"]
when = 'args.path.split("/").exists(p, p == "shadow")'
decision = "deny"
message = "never /etc/shadow"

[[rules]]
id = "slow-check"
tools = ["db.*"]
when = 'args.sql.split(" ").all(w, w.size() < 1000)'
decision = "require_approval"
approvers = ["dba"]
"#;
    let gw = Gateway::start_with(&config, policy);
    let padded = format!("/etc/shadow{}", "/".repeat(1_000_000));
    let (s, b) = post(
        &gw,
        "agent1",
        json!({"tool": "echo.read", "args": {"path": padded}}),
        Some("respond-async"),
    );
    assert_eq!((s, code(&b)), (403, "policy.denied"), "{b}");
    assert_eq!(
        b["error"]["details"]["errors"][0]["rule"], "no-shadow",
        "{b}"
    );
    assert_eq!(backend.count(), 0);
    // The padding is not kept in the audit log, only its fingerprint and size.
    let decided = audit(&gw, "call.decided");
    let denied = decided.iter().find(|r| r["decision"] == "deny").unwrap();
    assert_eq!(
        denied["args_elided"]["bytes"],
        padded.len() + 11,
        "{denied}"
    );
    assert_eq!(denied["args"], json!({}));
    // An approval rule that errors still holds the call, and every place an approver looks
    // names the failed rule and why.
    let sql = "x ".repeat(400_000);
    let (s, b) = post(
        &gw,
        "agent1",
        json!({"tool": "db.query", "args": {"sql": sql}}),
        Some("respond-async"),
    );
    assert_eq!(s, 202, "{b}");
    let approval = b["approval"]["id"].as_str().unwrap().to_owned();
    let (_, a) = gw.req(
        "GET",
        &format!("/v1/approvals/{approval}"),
        Some("dba1"),
        None,
        None,
    );
    assert_eq!(a["explanation"]["errors"][0]["rule"], "slow-check", "{a}");
    let out = output_of(
        std::process::Command::new(airlock_bin())
            .args(["approvals", "show", &approval, "--url", &gw.base])
            .env("AIRLOCK_TOKEN", "token-dba1"),
    );
    assert!(
        out.contains("slow-check failed to evaluate: evaluation budget exceeded"),
        "{out}"
    );
    assert!(!out.contains("(no rule: the defaults)"), "{out}");
}

#[test]
fn revoking_a_grant_ends_its_approved_call_and_what_would_attach_to_it() {
    let backend = Backend::start();
    let gw = Gateway::start(&backend);
    let (call, approval) = gw.call_async("agent1", "multi.a", json!({"n": 1}));
    assert_eq!(gw.approve("ops", &approval).0, 200);
    let grant = approval.replacen("apr_", "grt_", 1);
    let (s, b) = gw.req(
        "DELETE",
        &format!("/v1/grants/{grant}"),
        Some("ops"),
        None,
        None,
    );
    assert_eq!(s, 200, "{b}");
    // The approved call never ran, and now never will: neither by resume nor by re-call.
    let (s, b) = gw.resume("agent1", &call);
    assert_eq!((s, code(&b)), (403, "grant.revoked"), "{b}");
    let (s, b) = gw.call("agent1", "multi.a", json!({"n": 1}), Some("respond-async"));
    assert_eq!(s, 202, "a re-call needs a new approval: {b}");
    assert_ne!(b["call_id"], call.as_str());
    assert_eq!(backend.count(), 0);
    let cancelled = audit(&gw, "call.cancelled");
    assert!(
        cancelled
            .iter()
            .any(|r| r["call_id"] == call.as_str() && r["code"] == "grant.revoked"),
        "{cancelled:?}"
    );
    // A grant of one use (the approved call's own) can be revoked as well.
    let (call, approval) = gw.call_async("agent1", "db.query", json!({"sql": "select 1"}));
    assert_eq!(gw.approve("dba1", &approval).0, 200);
    let grant = approval.replacen("apr_", "grt_", 1);
    let (s, b) = gw.req(
        "DELETE",
        &format!("/v1/grants/{grant}"),
        Some("dba1"),
        None,
        None,
    );
    assert_eq!(s, 200, "{b}");
    assert_eq!(code(&gw.resume("agent1", &call).1), "grant.revoked");
    let (s, b) = gw.req(
        "DELETE",
        &format!("/v1/grants/{grant}"),
        Some("dba1"),
        None,
        None,
    );
    assert_eq!((s, code(&b)), (404, "grant.not_found"), "{b}");
    assert_eq!(backend.count(), 0);
}

#[test]
fn one_agent_cannot_drown_the_approvers_or_take_every_held_place() {
    let backend = Backend::start();
    let config = config_text(&backend, "max_held = 20\nhold_timeout = \"20s\"")
        .replace("hold_timeout = \"5s\"\n", "");
    let gw = Gateway::start_with(&config, POLICY);
    // 100 pending approvals by default; the 101st is refused before anything is made.
    for i in 0..100 {
        let (s, b) = gw.call(
            "agent1",
            "db.query",
            json!({"sql": format!("select {i}")}),
            Some("respond-async"),
        );
        assert_eq!(s, 202, "{i}: {b}");
    }
    let (s, b) = gw.call(
        "agent1",
        "db.query",
        json!({"sql": "select 101"}),
        Some("respond-async"),
    );
    assert_eq!((s, code(&b)), (429, "principal.too_many_pending"), "{b}");
    let (_, page) = gw.req(
        "GET",
        "/v1/approvals?status=pending&principal=agent1&limit=500",
        Some("admin"),
        None,
        None,
    );
    assert_eq!(page["approvals"].as_array().unwrap().len(), 100);
    // Another agent is not affected.
    let (s, _) = gw.call(
        "agent2",
        "db.query",
        json!({"sql": "select 1"}),
        Some("respond-async"),
    );
    assert_eq!(s, 202);
    // An admin declines every pending call of agent1 in one step.
    let (s, b) = gw.req(
        "POST",
        "/v1/approvals/decline",
        Some("admin"),
        Some(r#"{"principal":"agent1","reason":"flooding"}"#),
        None,
    );
    assert_eq!(s, 200, "{b}");
    assert_eq!(b["results"].as_array().unwrap().len(), 100);
    let (s, b) = gw.req(
        "POST",
        "/v1/approvals/decline",
        Some("ops"),
        Some(r#"{"principal":"agent1","reason":"flooding"}"#),
        None,
    );
    assert_eq!((s, code(&b)), (403, "auth.forbidden"), "{b}");
    let (_, page) = gw.req(
        "GET",
        "/v1/approvals?status=pending",
        Some("admin"),
        None,
        None,
    );
    assert_eq!(
        page["approvals"].as_array().unwrap().len(),
        1,
        "agent2's stays"
    );

    // The held share: max_held = 20 gives one principal 2 held requests at once.
    let held: Vec<_> = (0..2)
        .map(|i| {
            let base = gw.base.clone();
            std::thread::spawn(move || {
                reqwest::blocking::Client::new()
                    .post(format!("{base}/v1/calls"))
                    .bearer_auth("token-agent1")
                    .json(&json!({"tool": "db.query", "args": {"sql": format!("held {i}")}}))
                    .send()
                    .map(|r| r.status().as_u16())
            })
        })
        .collect();
    std::thread::sleep(Duration::from_millis(1500));
    let (s, b) = gw.call("agent1", "db.query", json!({"sql": "held 3"}), None);
    assert_eq!((s, code(&b)), (429, "principal.too_many_held"), "{b}");
    let (s, b) = gw.call("agent2", "echo.a", json!({}), None);
    assert_eq!(s, 200, "another agent still runs: {b}");
    let (s, b) = gw.call(
        "agent2",
        "db.query",
        json!({"sql": "agent2 held"}),
        Some("wait=1"),
    );
    assert_eq!(s, 202, "and may still wait: {b}");
    // Let the held ones go.
    gw.req(
        "POST",
        "/v1/approvals/decline",
        Some("admin"),
        Some(r#"{"principal":"agent1","reason":"done"}"#),
        None,
    );
    for h in held {
        assert_eq!(h.join().unwrap().unwrap(), 403);
    }
}

#[test]
fn an_empty_status_filter_is_refused() {
    let backend = Backend::start();
    let gw = Gateway::start(&backend);
    let (s, b) = gw.req("GET", "/v1/approvals?status=", Some("admin"), None, None);
    assert_eq!((s, code(&b)), (400, "request.invalid_field"), "{b}");
}

#[test]
fn args_must_fit_the_tools_own_schema() {
    let backend = Backend::start();
    let dir = tempfile::tempdir().unwrap();
    let schema = dir.path().join("echo.schema.json");
    std::fs::write(
        &schema,
        r#"{"type":"object","properties":{"n":{"type":"integer"}},"additionalProperties":false}"#,
    )
    .unwrap();
    let config = config_text(&backend, "").replace(
        "[[tools]]\nname = \"echo.*\"",
        &format!("[[tools]]\nname = \"strict.*\"\nupstream = \"{}\"\nschema = \"{}\"\n[[tools]]\nname = \"echo.*\"", backend.url("/echo"), schema.display()),
    );
    let policy = POLICY.replace("tools = [\"echo.*\",", "tools = [\"strict.*\", \"echo.*\",");
    let gw = Gateway::start_with(&config, &policy);
    let (s, b) = gw.call("agent1", "strict.a", json!({"n": 1}), None);
    assert_eq!(s, 200, "{b}");
    let (s, b) = gw.call(
        "agent1",
        "strict.a",
        json!({"n": 1, "include_secrets": true}),
        None,
    );
    assert_eq!((s, code(&b)), (400, "request.invalid_args"), "{b}");
    assert_eq!(b["error"]["details"]["keyword"], "additionalProperties");
    let (s, b) = gw.call("agent1", "strict.a", json!({"n": "1"}), None);
    assert_eq!((s, code(&b)), (400, "request.invalid_args"), "{b}");
    assert_eq!(b["error"]["details"]["pointer"], "/n");
    assert_eq!(b["error"]["details"]["keyword"], "type");
    assert_eq!(
        backend.count(),
        1,
        "nothing that failed reached the backend"
    );
    assert!(audit(&gw, "call.rejected")
        .iter()
        .any(|r| r["code"] == "request.invalid_args"));
}

/// A `[[principals]]` entry with token `token-<id>`.
fn principal_entry(id: &str, role: &str) -> String {
    let hash = airlock_policy::hex(&Sha256::digest(format!("token-{id}").as_bytes()));
    format!("[[principals]]\nid = \"{id}\"\nrole = \"{role}\"\ntoken_sha256 = \"{hash}\"\n")
}

#[test]
fn tokens_rotate_on_sighup_and_held_calls_stay_held() {
    let backend = Backend::start();
    let base =
        config_text(&backend, "hold_timeout = \"20s\"").replace("hold_timeout = \"5s\"\n", "");
    let gw = Gateway::start_with(&base, POLICY);
    assert_eq!(gw.call("newbie", "echo.a", json!({}), None).0, 401);
    // agent2's call is held while its token is removed and another one added.
    let held = {
        let base = gw.base.clone();
        std::thread::spawn(move || {
            let r = reqwest::blocking::Client::new()
                .post(format!("{base}/v1/calls"))
                .bearer_auth("token-agent2")
                .json(&json!({"tool": "db.query", "args": {"sql": "select 1"}}))
                .send()
                .unwrap();
            (r.status().as_u16(), r.json::<Value>().unwrap())
        })
    };
    let approval = loop {
        let (_, list) = gw.req(
            "GET",
            "/v1/approvals?status=pending",
            Some("dba1"),
            None,
            None,
        );
        if let Some(a) = list["approvals"][0]["id"].as_str() {
            break a.to_owned();
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let without_agent2: String = base
        .split("[[principals]]")
        .filter(|part| !part.contains("id = \"agent2\""))
        .collect::<Vec<_>>()
        .join("[[principals]]");
    assert!(!without_agent2.contains("\"agent2\""));
    let changed = format!("{without_agent2}{}", principal_entry("newbie", "agent"))
        .replace("max_body_bytes = 65536", "max_body_bytes = 200000");
    gw.write_config(&changed);
    gw.signal("-HUP");
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while gw.call("newbie", "echo.a", json!({}), None).0 != 200 {
        assert!(
            std::time::Instant::now() < deadline,
            "the new token never worked"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    // The removed token is refused at once; the new one works; the held call is still held
    // and runs when approved.
    assert_eq!(gw.call("agent2", "echo.a", json!({}), None).0, 401);
    assert_eq!(gw.approve("dba1", &approval).0, 200);
    let (s, b) = held.join().unwrap();
    assert_eq!(s, 200, "{b}");
    // The reload through the API says what it took and what needs a restart (the running
    // value stays).
    let (s, b) = gw.req("POST", "/v1/policy/reload", Some("admin"), None, None);
    assert_eq!(s, 200, "{b}");
    assert_eq!(b["config"]["restart_needed"], json!(["server"]), "{b}");
    let log = std::fs::read_to_string(gw.dir.path().join("gateway.log")).unwrap();
    assert!(log.contains("take effect only after a restart"), "{log}");
    let (s, b) = gw.call("agent1", "echo.a", json!({"pad": "x".repeat(65_500)}), None);
    assert_eq!(
        (s, code(&b)),
        (413, "request.too_large"),
        "the running limit stays: {b}"
    );
}

#[test]
fn a_renewed_tls_certificate_is_served_after_a_reload() {
    let dir = tempfile::tempdir().unwrap();
    let (first_ca, cert, key) = certs(dir.path(), "first");
    let backend = Backend::start();
    let extra = format!(
        "tls = {{ cert = \"{}\", key = \"{}\" }}\n",
        cert.display(),
        key.display()
    );
    let mut gw = Gateway::start_with(&config_text(&backend, &extra), POLICY);
    let trusting = |ca: &std::path::Path| {
        reqwest::blocking::Client::builder()
            .tls_certs_only([reqwest::Certificate::from_pem(&std::fs::read(ca).unwrap()).unwrap()])
            .build()
            .unwrap()
    };
    let healthz = |client: &reqwest::blocking::Client| {
        client.get(format!("{}/healthz", gw.base)).send().is_ok()
    };
    assert!(healthz(&trusting(&first_ca)));
    // The certificate is renewed (by another CA) in the same files.
    let (second_ca, second_cert, second_key) = certs(dir.path(), "second");
    std::fs::copy(&second_cert, &cert).unwrap();
    std::fs::copy(&second_key, &key).unwrap();
    assert!(!healthz(&trusting(&second_ca)), "not before the reload");
    gw.client = trusting(&first_ca);
    let (s, b) = gw.req("POST", "/v1/policy/reload", Some("admin"), None, None);
    assert_eq!(s, 200, "{b}");
    assert_eq!(b["config"]["reloaded"], json!(["server.tls"]), "{b}");
    assert!(
        healthz(&trusting(&second_ca)),
        "new connections get the renewed one"
    );
    assert!(!healthz(&trusting(&first_ca)));
}

/// The inbox in headless Chromium: a call held because its approval rule ran out of its
/// budget shows the rule and why under "why it was held" (at 1280 and 375 px), and an admin
/// declines every pending call of the agent from the page in one step.
#[test]
fn the_inbox_says_which_rule_failed_and_an_admin_declines_a_flood() {
    let backend = Backend::start();
    let config =
        config_text(&backend, "").replace("max_body_bytes = 65536", "max_body_bytes = 2000000");
    let policy = r#"
version = 1

[defaults]
decision = "allow"
on_error = "require_approval"

[[rules]]
id = "slow-check"
tools = ["db.*"]
when = 'args.sql.split(" ").all(w, w.size() < 1000)'
decision = "require_approval"
approvers = ["dba"]
"#;
    let gw = Gateway::start_with(&config, policy);
    let (s, b) = post(
        &gw,
        "agent1",
        json!({"tool": "db.query", "args": {"sql": "x ".repeat(400_000)}}),
        Some("respond-async"),
    );
    assert_eq!(s, 202, "{b}");
    for i in 0..3 {
        let (s, _) = post(
            &gw,
            "agent1",
            json!({"tool": "db.query", "args": {"sql": format!("{}{i}", "y ".repeat(400_000))}}),
            Some("respond-async"),
        );
        assert_eq!(s, 202);
    }
    let r = browser_scenario(&gw.base, "errors");
    let why = r["why"].as_str().unwrap();
    assert!(
        why.contains("slow-check failed to evaluate: evaluation budget exceeded"),
        "{r}"
    );
    assert!(r["phone_width"].as_u64().unwrap() <= 375, "{r}");
    assert_eq!(
        r["offered_to_approver"], 0,
        "only admins are offered it: {r}"
    );
    assert!(
        r["declined"]
            .as_str()
            .unwrap()
            .contains("4 declined or tried"),
        "{r}"
    );
    let (_, page) = gw.req(
        "GET",
        "/v1/approvals?status=pending",
        Some("admin"),
        None,
        None,
    );
    assert_eq!(page["approvals"], json!([]));
    assert_eq!(backend.count(), 0);
}
