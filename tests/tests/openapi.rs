//! `GET /v1/openapi.json` (DESIGN §18), checked from outside: the document's routes are exactly
//! the ones the gateway answers, and Schemathesis, a fuzzer nobody here wrote, generates
//! requests from the document and checks every answer against it (no 5xx, statuses, media types,
//! bodies and headers as documented, schema-violating requests refused, valid ones not, auth
//! enforced, 405 with `Allow`), through a real backend that must see nothing but the calls the
//! gateway ran.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::process::Command;

use serde_json::Value;
use support::*;

/// The test config with only tools whose backend is up (a backend that is down or too slow is
/// a documented 502 or 504, which the fuzzer counts as a server error): `echo.*` and `fail.*`
/// are allowed, `db.*` and `pay.*` need approvals, `ask.*` suspends; short holds; a webhook so
/// its routes have something to act on.
fn gateway(backend: &Backend, receiver: &Receiver) -> Gateway {
    let full = config_text(backend, "max_hold = \"2s\"\n")
        .replace("hold_timeout = \"5s\"", "hold_timeout = \"1s\"");
    let mut config = full[..full.find("[[tools]]").unwrap()].to_owned();
    for (pattern, path) in [
        ("echo.*", "/echo"),
        ("fail.*", "/status/500"),
        ("db.*", "/echo"),
        ("pay.*", "/echo"),
        ("ask.*", "/ask"),
    ] {
        config.push_str(&format!(
            "[[tools]]\nname = \"{pattern}\"\nupstream = \"{}\"\ntimeout = \"5s\"\n",
            backend.url(path)
        ));
    }
    config.push_str(&format!(
        "[[webhooks]]\nid = \"oncall\"\nurl = \"http://127.0.0.1:{}/hook\"\nsecret = \"{SECRET}\"\n",
        receiver.port
    ));
    Gateway::start_with(&config, POLICY)
}

fn document(gw: &Gateway) -> Value {
    let (status, doc) = gw.req("GET", "/v1/openapi.json", None, None, None);
    assert_eq!(status, 200, "{doc}");
    doc
}

/// A concrete path for a documented template.
fn concrete(template: &str) -> String {
    template
        .replace("{call_id}", "call_nope")
        .replace("{run_id}", "run_nope")
        .replace("{id}", "nope")
}

#[test]
fn the_documents_routes_are_exactly_the_routes_the_gateway_answers() {
    let backend = Backend::start();
    let receiver = Receiver::start("ok");
    let gw = gateway(&backend, &receiver);
    let doc = document(&gw);
    assert_eq!(doc["openapi"], "3.1.0");
    let paths = doc["paths"].as_object().unwrap();
    let mut documented: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (path, ops) in paths {
        for method in ops.as_object().unwrap().keys() {
            documented
                .entry(path.clone())
                .or_default()
                .insert(method.to_uppercase());
        }
    }
    // Every /v1 route of DESIGN §6, §11 and §18 is there, and without issuers the RFC 9728
    // routes are not.
    for (method, path) in [
        ("POST", "/v1/calls"),
        ("GET", "/v1/calls/{call_id}"),
        ("POST", "/v1/calls/{call_id}/resume"),
        ("POST", "/v1/calls/{call_id}/cancel"),
        ("GET", "/v1/approvals"),
        ("POST", "/v1/approvals/{id}/approve"),
        ("POST", "/v1/runs/{run_id}/decline"),
        ("GET", "/v1/runs/{run_id}/stream"),
        ("GET", "/v1/events"),
        ("POST", "/v1/policy/evaluate"),
        ("GET", "/v1/audit"),
        ("GET", "/v1/openapi.json"),
    ] {
        assert!(
            documented.get(path).is_some_and(|m| m.contains(method)),
            "{method} {path} is not documented"
        );
    }
    assert!(!documented.contains_key("/.well-known/oauth-protected-resource"));

    let client = reqwest::blocking::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let send = |method: &str, path: &str| {
        let r = client
            .request(method.parse().unwrap(), format!("{}{path}", gw.base))
            .bearer_auth("token-admin")
            .send()
            .unwrap();
        let status = r.status().as_u16();
        let allow = r
            .headers()
            .get("allow")
            .map(|v| v.to_str().unwrap().to_owned());
        let body: Value = r.json().unwrap_or(Value::Null);
        (status, allow, body)
    };
    for (path, methods) in &documented {
        let url = concrete(path);
        // Each documented operation is routed: whatever it answers, it is not "no route".
        for m in methods {
            if path.ends_with("/stream") || path == "/v1/events" {
                continue; // Streams stay open; their routing is checked by the fuzzer.
            }
            let (status, _, body) = send(m, &url);
            assert!(
                !matches!(code(&body), "route.not_found" | "route.method_not_allowed"),
                "{m} {path}: {status} {body}"
            );
        }
        // Every other method is a 405 naming exactly the documented ones.
        for other in ["GET", "POST", "PUT", "DELETE", "PATCH"] {
            if methods.contains(other) {
                continue;
            }
            let (status, allow, body) = send(other, &url);
            assert_eq!(status, 405, "{other} {path}: {body}");
            assert_eq!(code(&body), "route.method_not_allowed");
            let allow: BTreeSet<String> = allow
                .expect("Allow on a 405")
                .split(',')
                .map(|m| m.trim().to_owned())
                .collect();
            assert_eq!(&allow, methods, "{other} {path}");
        }
    }
    // And what is not documented is not there.
    for path in [
        "/v1",
        "/v1/call",
        "/v1/calls/c/x",
        "/v1/approvals/a/approve/now",
        "/v1/runs/r",
        "/v1/audit/verify",
        "/v1/openapi.yaml",
        "/.well-known/oauth-protected-resource",
    ] {
        let (status, _, body) = send("GET", path);
        assert_eq!(
            (status, code(&body)),
            (404, "route.not_found"),
            "{path}: {body}"
        );
    }
    // A query parameter a route does not take is refused, not ignored.
    let (status, _, body) = send("GET", "/v1/approvals?limt=5");
    assert_eq!(
        (status, code(&body)),
        (400, "request.unknown_field"),
        "{body}"
    );
    let (status, _, body) = send("GET", "/v1/audit?limit=ten");
    assert_eq!(
        (status, code(&body)),
        (400, "request.invalid_field"),
        "{body}"
    );
    // So is a body field it does not take, and a field of the wrong kind.
    let (status, body) = gw.req(
        "POST",
        "/v1/approvals/nope/decline",
        Some("dba1"),
        Some(r#"{"reasn":"typo"}"#),
        None,
    );
    assert_eq!(
        (status, code(&body)),
        (400, "request.unknown_field"),
        "{body}"
    );
    let (status, body) = gw.req(
        "POST",
        "/v1/policy/evaluate",
        Some("admin"),
        Some(r#"{"tool":"echo.x","args":{},"principal":"admin"}"#),
        None,
    );
    assert_eq!(
        (status, code(&body)),
        (400, "request.invalid_field"),
        "{body}"
    );
}

/// Runs Schemathesis from `dir` (it writes its state into the working directory) against the
/// gateway's document, with `tests/peers/schemathesis.toml`: the agents' operations with
/// `tokens[0]`, the approvers' with `tokens[1]`, the rest with `tokens[2]`. Its whole report when
/// it finds anything.
fn schemathesis(dir: &Path, gw: &Gateway, tokens: [&str; 3], args: &[&str]) {
    let out = Command::new("schemathesis")
        .arg("--config-file")
        .arg(peers().join("schemathesis.toml"))
        .current_dir(dir)
        .env("AIRLOCK_AGENT_TOKEN", tokens[0])
        .env("AIRLOCK_APPROVER_TOKEN", tokens[1])
        .env("AIRLOCK_ADMIN_TOKEN", tokens[2])
        .env("NO_COLOR", "1")
        .arg("run")
        .arg(format!("{}/v1/openapi.json", gw.base))
        .args(["--output-truncate", "true"])
        .args(args)
        .output()
        .expect("schemathesis (installed in target/peers/venv by scripts/test.sh)");
    let report = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "schemathesis with {tokens:?} {args:?} found something ({:?}):\n{report}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    let summary = report.lines().rev().find(|l| l.contains("generated"));
    eprintln!(
        "schemathesis with {tokens:?}: {}",
        summary.unwrap_or("?").trim()
    );
}

/// Every body the backend received, paired with one execution the audit log records (an
/// allowed call claimed with its decision, or `call.started` for an approved or resumed one).
fn backend_saw_only_calls_that_ran(gw: &Gateway, backend: &Backend) -> usize {
    // (tool, fingerprint) of each execution.
    let mut ran: Vec<(String, String)> = Vec::new();
    let mut after = 0;
    loop {
        let (status, page) = gw.req(
            "GET",
            &format!("/v1/audit?after={after}&limit=1000"),
            Some("admin"),
            None,
            None,
        );
        assert_eq!(status, 200, "{page}");
        for r in page["records"].as_array().unwrap() {
            let ran_now = r["kind"] == "call.started"
                || (r["kind"] == "call.decided" && r["started"] == Value::Bool(true));
            if ran_now {
                let field = |k: &str| r[k].as_str().unwrap().to_owned();
                ran.push((field("tool"), field("fingerprint")));
            }
        }
        match page["next_after"].as_u64() {
            Some(n) => after = n,
            None => break,
        }
    }
    let (count, bodies) = backend.seen();
    assert_eq!(count as usize, bodies.len());
    let mut unmatched = ran.clone();
    for body in &bodies {
        // The backend was sent canonical args; which tool they were for, the audit says.
        let hit = unmatched.iter().position(|(tool, fingerprint)| {
            airlock_policy::ToolCall::from_args_json(tool, body.as_bytes()).is_ok_and(|c| {
                c.canonical_args == *body && c.fingerprint.to_string() == *fingerprint
            })
        });
        match hit {
            Some(i) => {
                unmatched.swap_remove(i);
            }
            None => {
                panic!("the backend received {body}, which no execution the audit log records sent")
            }
        }
    }
    assert!(
        unmatched.is_empty(),
        "executions the backend never saw: {unmatched:?}"
    );
    bodies.len()
}

fn forwarded(gw: &Gateway) -> u64 {
    gw.metrics()
        .lines()
        .filter(|l| l.starts_with("airlock_upstream_seconds_count"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
        .sum()
}

#[test]
fn schemathesis_finds_nothing_with_every_role_and_the_backend_sees_only_calls_that_ran() {
    let backend = Backend::start();
    let receiver = Receiver::start("ok");
    let gw = gateway(&backend, &receiver);
    let dir = tempfile::tempdir().unwrap();
    // Prune waits for the last run, so the audit log still holds every call to match the
    // backend's log with.
    let no_prune = ["--exclude-operation-id", "pruneAudit"];
    // Each operation with its role's token: stateful links from a call to its approval.
    schemathesis(
        dir.path(),
        &gw,
        ["token-agent1", "token-dba1", "token-admin"],
        &no_prune,
    );
    // Every operation with one role's token, and with none that is known: the refusals of the
    // other roles are as documented.
    for token in ["token-agent1", "token-dba1", "token-nobody"] {
        schemathesis(dir.path(), &gw, [token; 3], &no_prune);
    }

    let seen = backend_saw_only_calls_that_ran(&gw, &backend);
    assert!(
        seen > 0,
        "the fuzzer made no call that reached the backend: it tested only refusals"
    );
    eprintln!("the backend saw {seen} calls, each one an audited execution");

    // Last, the admin's run, prune included; the backend still sees only what the gateway
    // forwarded.
    schemathesis(dir.path(), &gw, ["token-admin"; 3], &[]);
    assert_eq!(backend.count(), forwarded(&gw));
}

#[test]
fn the_api_pages_python_approver_approves_reads_and_declines_the_rest() {
    // The snippet as docs/api.md shows it: what a reader copies works, with plain HTTP.
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("approve_reads.py");
    std::fs::write(
        &script,
        doc_snippet("docs/api.md", "```python\n# approve_reads.py"),
    )
    .unwrap();

    let backend = Backend::start();
    let gw = Gateway::start(&backend);
    let (read, _) = gw.call_async("agent1", "db.query", serde_json::json!({"sql": "SELECT 1"}));
    let (write, _) = gw.call_async(
        "agent1",
        "db.query",
        serde_json::json!({"sql": "DELETE FROM t"}),
    );
    let printed = output_of(
        Command::new("python3")
            .arg(&script)
            .env("AIRLOCK_URL", &gw.base)
            .env("AIRLOCK_APPROVER_TOKEN", "token-dba1"),
    );
    assert!(
        printed.contains("db.query SELECT 1 -> approved"),
        "{printed}"
    );
    assert!(
        printed.contains("db.query DELETE FROM t -> declined"),
        "{printed}"
    );
    // The read runs for the agent; the write is declined with the approver's words.
    let (status, body) = gw.resume("agent1", &read);
    assert_eq!(
        (status, body["status"].as_str()),
        (200, Some("completed")),
        "{body}"
    );
    let (status, body) = gw.resume("agent1", &write);
    assert_eq!((status, code(&body)), (403, "approval.declined"), "{body}");
    assert!(body["error"]["message"]
        .as_str()
        .unwrap()
        .contains("reads only today"));
    assert_eq!(backend.count(), 1);
}

#[test]
fn a_client_generated_from_the_document_lists_and_approves_a_call() {
    // The README's one line (the generator's command), then the generated package used as its users would.
    let backend = Backend::start();
    let gw = Gateway::start(&backend);
    let (call_id, approval_id) =
        gw.call_async("agent1", "db.query", serde_json::json!({"sql": "SELECT 1"}));
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new("openapi-python-client")
        .current_dir(dir.path())
        .args(["generate", "--url", &format!("{}/v1/openapi.json", gw.base)])
        .output()
        .expect("openapi-python-client (installed in target/peers/venv by scripts/test.sh)");
    let said = format!(
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{said}");
    // The only part it leaves out is the NDJSON export, a media type it does not speak.
    for line in said.lines().filter(|l| l.starts_with("WARNING parsing")) {
        assert!(line.contains("/v1/audit/export"), "{said}");
    }
    let script = r#"
import sys
sys.path.insert(0, "airlock-client")
from airlock_client import AuthenticatedClient
from airlock_client.api.approvers import list_approvals, approve
from airlock_client.models import ApproveRequest, ListApprovalsStatus

client = AuthenticatedClient(base_url=sys.argv[1], token="token-dba1")
page = list_approvals.sync(client=client, status=ListApprovalsStatus.PENDING)
for a in page.approvals:
    done = approve.sync(client=client, id=a.id, body=ApproveRequest(reason="generated"))
    print(a.id, a.tool, done.status)
"#;
    let printed = output_of(
        Command::new("python3")
            .current_dir(dir.path())
            .args(["-c", script, &gw.base]),
    );
    assert_eq!(printed.trim(), format!("{approval_id} db.query approved"));
    let (status, body) = gw.resume("agent1", &call_id);
    assert_eq!(
        (status, body["status"].as_str()),
        (200, Some("completed")),
        "{body}"
    );
}

#[test]
fn the_suites_check_of_every_answer_against_the_document_can_fail() {
    // What `Gateway::req` runs on each `/v1` answer of every end-to-end test: it takes what
    // the document describes and refuses what it does not.
    let backend = Backend::start();
    let gw = Gateway::start(&backend);
    let (status, body) = gw.req("GET", "/v1/approvals/nope", Some("dba1"), None, None);
    assert_eq!((status, code(&body)), (404, "approval.not_found"));
    let refused = |status: u16, body: Value| {
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            gw.conforms("GET", "/v1/approvals/nope", status, &body)
        }))
        .is_err()
    };
    assert!(!refused(404, body.clone()));
    // A code the document does not list for that status, a body of the wrong shape, a status
    // the operation never answers with.
    assert!(refused(
        404,
        serde_json::json!({"error": {"code": "call.not_found", "message": "", "details": {}}})
    ));
    assert!(refused(200, serde_json::json!({"id": 5})));
    assert!(refused(418, body));
}
