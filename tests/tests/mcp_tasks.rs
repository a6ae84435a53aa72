//! MCP tasks (DESIGN §15) for calls that wait for a person, in both revisions: a 2026-07-28
//! client of the tasks extension (SEP-2663, spoken here as its wire says: no SDK has a client
//! for it yet), and the official TypeScript SDK 1.x's experimental tasks client for
//! 2025-11-25. The real `airlock` binary in front of the official Python SDK's upstreams, on
//! 127.0.0.1:0.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use support::*;

const EXTENSION: &str = "io.modelcontextprotocol/tasks";

/// A 2026-07-28 request of `who` with the client capabilities `caps`; `(status, body)`.
fn rpc(gw: &Gateway, who: &str, method: &str, params: Value, caps: Value) -> (u16, Value) {
    let mut params = params;
    params["_meta"] = json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": caps,
    });
    let name = params
        .get("name")
        .or_else(|| params.get("taskId"))
        .and_then(Value::as_str)
        .map(str::to_owned);
    let mut r = reqwest::blocking::Client::new()
        .post(format!("{}/mcp", gw.base))
        .bearer_auth(format!("token-{who}"))
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", "2026-07-28")
        .header("mcp-method", method)
        .body(json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params}).to_string());
    if let Some(n) = name {
        r = r.header("mcp-name", n);
    }
    let resp = r.send().unwrap();
    let status = resp.status().as_u16();
    (status, resp.json().unwrap_or(Value::Null))
}

fn tasks_caps() -> Value {
    json!({"extensions": {EXTENSION: {}}})
}

/// A `tools/call` from a client of the extension; the result.
fn call_as_task(gw: &Gateway, who: &str, tool: &str, args: Value, caps: Value) -> Value {
    let (s, b) = rpc(
        gw,
        who,
        "tools/call",
        json!({"name": tool, "arguments": args}),
        caps,
    );
    assert_eq!(s, 200, "{b}");
    b["result"].clone()
}

fn get(gw: &Gateway, who: &str, task: &str) -> (u16, Value) {
    rpc(gw, who, "tasks/get", json!({"taskId": task}), tasks_caps())
}

/// Polls `tasks/get` while the task is in one of `statuses`; its state once it is not.
fn poll_past(gw: &Gateway, task: &str, statuses: &[&str]) -> Value {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let (s, b) = get(gw, "agent1", task);
        assert_eq!(s, 200, "{b}");
        if !statuses.iter().any(|st| b["result"]["status"] == *st) {
            return b["result"].clone();
        }
        assert!(
            Instant::now() < deadline,
            "the task stayed {statuses:?}: {b}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Polls until the task has ended (past waiting for input and running).
fn ended(gw: &Gateway, task: &str) -> Value {
    poll_past(gw, task, &["input_required", "working"])
}

/// The approval an `input_required` task's status message links to.
fn approval_of(task: &Value) -> String {
    let message = task["statusMessage"].as_str().unwrap();
    let at = message.find("/inbox/approvals/").expect(message);
    message[at + "/inbox/approvals/".len()..].to_owned()
}

/// Every `echo` the HTTP upstream has run, with its arguments.
fn echoed(gw: &Gateway) -> Vec<Value> {
    let r = call_as_task(gw, "agent2", "up.count", json!({}), json!({}));
    let log: Value = serde_json::from_str(r["content"][0]["text"].as_str().unwrap()).unwrap();
    log["log"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e.get("text").is_some())
        .cloned()
        .collect()
}

/// A refusal's code: in `structuredContent.error`, or `_meta["airlock/error"]` for a tool with
/// an `outputSchema` (DESIGN §10).
fn refusal_code(result: &Value) -> String {
    result["structuredContent"]["error"]["code"]
        .as_str()
        .or_else(|| result["_meta"]["airlock/error"]["code"].as_str())
        .unwrap_or("")
        .to_owned()
}

#[test]
fn a_2026_task_waits_for_an_approver_survives_a_restart_and_runs_its_call_once() {
    let up = Upstream::start();
    let mut gw = mcp_gateway(&up, "1s");
    let args = json!({"text": "held", "n": 101});

    // The server says it offers the extension.
    let (_, d) = rpc(&gw, "agent1", "server/discover", json!({}), json!({}));
    assert!(
        d["result"]["capabilities"]["extensions"][EXTENSION].is_object(),
        "{d}"
    );

    // A call that needs approval: a task in `input_required` whose message links the inbox.
    let created = call_as_task(&gw, "agent1", "up.echo", args.clone(), tasks_caps());
    assert_eq!(created["resultType"], "task", "{created}");
    assert_eq!(created["status"], "input_required", "{created}");
    for absent in ["inputRequests", "result", "requestState", "task", "ttl"] {
        assert!(created.get(absent).is_none(), "{absent}: {created}");
    }
    assert!(created["ttlMs"].as_u64().unwrap() > 0);
    assert!(created["pollIntervalMs"].as_u64().unwrap() > 0);
    let task = created["taskId"].as_str().unwrap().to_owned();
    let approval = approval_of(&created);

    // `tasks/get` names what it waits for: the approval's page, by URL.
    let (_, b) = get(&gw, "agent1", &task);
    let asked = &b["result"]["inputRequests"]["airlock_approval"];
    assert_eq!(asked["method"], "elicitation/create", "{b}");
    assert_eq!(asked["params"]["mode"], "url");
    assert!(asked["params"]["url"]
        .as_str()
        .unwrap()
        .ends_with(&format!("/inbox/approvals/{approval}")));

    // The agent's own "accept" approves nothing.
    let (s, b) = rpc(
        &gw,
        "agent1",
        "tasks/update",
        json!({"taskId": task, "inputResponses": {"airlock_approval": {"action": "accept"}}}),
        tasks_caps(),
    );
    assert_eq!(
        (s, &b["result"]),
        (200, &json!({"resultType": "complete"})),
        "{b}"
    );
    let (_, a) = gw.req(
        "GET",
        &format!("/v1/approvals/{approval}"),
        Some("ops"),
        None,
        None,
    );
    assert_eq!(a["status"], "pending", "{a}");
    assert_eq!(
        get(&gw, "agent1", &task).1["result"]["status"],
        "input_required"
    );

    // Another principal's request learns nothing: the same answer as a made-up id.
    let (s_other, other) = get(&gw, "agent2", &task);
    let (s_none, none) = get(&gw, "agent1", "task_made-up");
    assert_eq!((s_other, s_none), (s_none, s_none));
    assert_eq!(other["error"], none["error"], "{other} {none}");
    assert_eq!(other["error"]["code"], -32602);

    // Malformed task requests are refused as invalid params.
    let (s, b) = rpc(&gw, "agent1", "tasks/get", json!({}), tasks_caps());
    assert_eq!((s, b["error"]["code"].as_i64()), (400, Some(-32602)), "{b}");
    let (s, b) = rpc(
        &gw,
        "agent1",
        "tasks/update",
        json!({"taskId": task, "inputResponses": "yes"}),
        tasks_caps(),
    );
    assert_eq!((s, b["error"]["code"].as_i64()), (400, Some(-32602)), "{b}");

    // Without the extension declared: -32021 naming it; the methods this revision does not
    // have do not exist.
    let (s, b) = rpc(
        &gw,
        "agent1",
        "tasks/get",
        json!({"taskId": task}),
        json!({}),
    );
    assert_eq!((s, b["error"]["code"].as_i64()), (400, Some(-32021)), "{b}");
    assert!(b["error"]["data"]["requiredCapabilities"]["extensions"][EXTENSION].is_object());
    for method in ["tasks/result", "tasks/list"] {
        let (s, b) = rpc(&gw, "agent1", method, json!({"taskId": task}), tasks_caps());
        assert_eq!(
            (s, b["error"]["code"].as_i64()),
            (404, Some(-32601)),
            "{method}: {b}"
        );
    }
    assert!(
        echoed(&gw).iter().all(|e| e["n"] != 101),
        "ran before approval"
    );

    // The task is durable: a restart finds it where it was.
    gw.kill9();
    gw.spawn();
    assert_eq!(
        get(&gw, "agent1", &task).1["result"]["status"],
        "input_required"
    );

    // Approved: the task runs its call, once, and inlines the upstream's result.
    assert_eq!(gw.approve("ops", &approval).0, 200);
    let done = ended(&gw, &task);
    assert_eq!(done["status"], "completed", "{done}");
    assert_eq!(done["result"]["isError"], false, "{done}");
    assert!(done["result"]["content"][0]["text"]
        .as_str()
        .unwrap()
        .contains("held"));
    for _ in 0..3 {
        assert_eq!(get(&gw, "agent1", &task).1["result"]["status"], "completed");
    }
    let runs: Vec<Value> = echoed(&gw).into_iter().filter(|e| e["n"] == 101).collect();
    assert_eq!(runs.len(), 1, "{runs:?}");

    // Audited: the task, with its call and revision.
    let (_, audit) = gw.req("GET", "/v1/audit?limit=1000", Some("admin"), None, None);
    let made: Vec<&Value> = audit["records"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["kind"] == "mcp.task_created")
        .collect();
    assert_eq!(made.len(), 1, "{audit}");
    assert_eq!(made[0]["task_id"], task.as_str());
    assert_eq!(made[0]["mcp_revision"], "2026-07-28");
    assert_eq!(made[0]["principal"], "agent1");
    assert!(made[0]["call_id"].as_str().unwrap().starts_with("call_"));
}

#[test]
fn a_2026_task_declined_or_cancelled_ends_as_the_extension_says_and_only_waits_become_tasks() {
    let up = Upstream::start();
    let gw = mcp_gateway(&up, "1s");

    // Declined: `completed`, with the refusal and the approver's reason as the result.
    let created = call_as_task(
        &gw,
        "agent1",
        "up.echo",
        json!({"text": "no", "n": 102}),
        tasks_caps(),
    );
    let task = created["taskId"].as_str().unwrap().to_owned();
    let (s, _) = gw.req(
        "POST",
        &format!("/v1/approvals/{}/decline", approval_of(&created)),
        Some("ops"),
        Some(r#"{"reason": "not today"}"#),
        None,
    );
    assert_eq!(s, 200);
    let done = ended(&gw, &task);
    assert_eq!(done["status"], "completed", "{done}");
    assert_eq!(done["result"]["isError"], true, "{done}");
    assert_eq!(refusal_code(&done["result"]), "approval.declined", "{done}");
    assert!(done["result"]["content"][0]["text"]
        .as_str()
        .unwrap()
        .contains("not today"));

    // Cancelled: an empty ack; the approval is cancelled with it; cancelling again is the
    // same ack.
    let created = call_as_task(
        &gw,
        "agent1",
        "up.echo",
        json!({"text": "x", "n": 103}),
        tasks_caps(),
    );
    let (task, approval) = (
        created["taskId"].as_str().unwrap().to_owned(),
        approval_of(&created),
    );
    for _ in 0..2 {
        let (s, b) = rpc(
            &gw,
            "agent1",
            "tasks/cancel",
            json!({"taskId": task}),
            tasks_caps(),
        );
        assert_eq!(
            (s, &b["result"]),
            (200, &json!({"resultType": "complete"})),
            "{b}"
        );
    }
    assert_eq!(get(&gw, "agent1", &task).1["result"]["status"], "cancelled");
    let (_, a) = gw.req(
        "GET",
        &format!("/v1/approvals/{approval}"),
        Some("ops"),
        None,
        None,
    );
    assert_eq!(a["status"], "cancelled", "{a}");
    assert_eq!(gw.approve("ops", &approval).0, 409);

    // An allowed call is answered as it is, task or not: the server makes tasks of waits.
    let r = call_as_task(
        &gw,
        "agent1",
        "up.echo",
        json!({"text": "now"}),
        tasks_caps(),
    );
    assert_eq!(r["resultType"], "complete", "{r}");
    assert!(r.get("taskId").is_none());
    // Without the extension, a call that needs approval is held as before (`hold_timeout`
    // 1 s here), never a task.
    let r = call_as_task(
        &gw,
        "agent1",
        "up.echo",
        json!({"text": "y", "n": 104}),
        json!({}),
    );
    assert_eq!(refusal_code(&r), "approval.pending", "{r}");
    assert!(r.get("taskId").is_none());
    assert!(echoed(&gw)
        .iter()
        .all(|e| e["n"].as_u64().unwrap_or(0) <= 100));
}

#[test]
fn a_suspended_call_is_a_task_whose_input_request_resumes_it() {
    let up = Upstream::start();
    let gw = mcp_gateway(&up, "1s");
    // The stdio upstream (a 2025 session) asks "which environment?" mid-call: the call
    // suspends, and the task asks the client for it.
    let caps = json!({"extensions": {EXTENSION: {}}, "elicitation": {"form": {}}});
    let created = call_as_task(
        &gw,
        "agent1",
        "local.deploy",
        json!({"service": "api"}),
        caps.clone(),
    );
    assert_eq!(created["status"], "input_required", "{created}");
    let task = created["taskId"].as_str().unwrap().to_owned();
    let (_, b) = rpc(
        &gw,
        "agent1",
        "tasks/get",
        json!({"taskId": task}),
        caps.clone(),
    );
    let asked = &b["result"]["inputRequests"]["airlock_input_1"];
    assert_eq!(asked["params"]["mode"], "form", "{b}");
    assert_eq!(asked["params"]["message"], "which environment?");
    assert!(asked["params"]["requestedSchema"]["properties"]["environment"].is_object());

    let (s, b) = rpc(
        &gw,
        "agent1",
        "tasks/update",
        json!({"taskId": task, "inputResponses": {
            "airlock_input_1": {"action": "accept", "content": {"environment": "staging"}}}}),
        caps.clone(),
    );
    assert_eq!(s, 200, "{b}");
    let done = ended(&gw, &task);
    assert_eq!(done["status"], "completed", "{done}");
    let text = done["result"]["content"][0]["text"].as_str().unwrap();
    assert!(text.contains("staging") && text.contains("true"), "{done}");
    // The answered key is not asked again, and answering it twice changes nothing.
    let (s, _) = rpc(
        &gw,
        "agent1",
        "tasks/update",
        json!({"taskId": task, "inputResponses": {
            "airlock_input_1": {"action": "accept", "content": {"environment": "prod"}}}}),
        caps,
    );
    assert_eq!(s, 200);
    assert_eq!(get(&gw, "agent1", &task).1["result"]["status"], "completed");
}

#[test]
fn the_typescript_sdks_task_client_follows_a_call_through_its_approval_to_its_result() {
    let up = Upstream::start();
    let gw = mcp_gateway(&up, "1s");
    let (node, script) = node_script("ts_sdk_tasks.mjs", "@modelcontextprotocol/sdk");
    let mut child = Command::new(node)
        .arg(&script)
        .args([
            &format!("{}/mcp", gw.base),
            "token-agent1",
            "up.echo",
            r#"{"text":"approved","n":105}"#,
            "up.echo",
            r#"{"text":"allowed"}"#,
            "up.echo",
            r#"{"text":"rm -rf /"}"#,
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut next = || -> Value {
        let line = lines.next().expect("the client ended early").unwrap();
        serde_json::from_str(&line).unwrap()
    };
    // The SDK asked for a task (the tool says it may run as one): it waits for a person.
    let created = next();
    assert_eq!(created["type"], "taskCreated", "{created}");
    assert_eq!(created["task"]["status"], "input_required", "{created}");
    let approval = approval_of(&created["task"]);
    let status = next();
    assert_eq!(status["type"], "taskStatus", "{status}");
    // It now waits in `tasks/result`; an approver approves.
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(gw.approve("ops", &approval).0, 200);
    let result = next();
    assert_eq!(result["type"], "result", "{result}");
    assert_eq!(result["result"]["isError"], false, "{result}");
    assert!(result["result"]["content"][0]["text"]
        .as_str()
        .unwrap()
        .contains("approved"));
    let task_id = created["task"]["taskId"].as_str().unwrap();
    assert_eq!(
        result["result"]["_meta"]["io.modelcontextprotocol/related-task"]["taskId"],
        task_id
    );

    // An allowed call is a task that has already completed; a denied one completes with
    // the refusal for the model to read.
    let mut results = Vec::new();
    loop {
        let m = next();
        match m["type"].as_str().unwrap() {
            "result" | "error" => results.push(m),
            "listed" => {
                assert_eq!(results.len(), 2, "{results:?}");
                assert_eq!(results[0]["result"]["isError"], false, "{results:?}");
                assert_eq!(results[1]["result"]["isError"], true, "{results:?}");
                assert_eq!(refusal_code(&results[1]["result"]), "policy.denied");
                // `tasks/list`: the principal's three tasks, all completed.
                let tasks = m["tasks"].as_array().unwrap();
                assert_eq!(tasks.len(), 3, "{m}");
                assert_eq!(tasks[0]["taskId"], task_id);
                assert!(tasks.iter().all(|t| t["status"] == "completed"), "{m}");
                break;
            }
            _ => {}
        }
    }
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // The upstream ran each allowed call once, the denied one never.
    let runs = echoed(&gw);
    assert_eq!(runs.len(), 2, "{runs:?}");
}

#[test]
fn an_upstreams_own_tasks_pass_through_under_ids_of_ours_for_their_principal_only() {
    // An upstream that runs tasks itself (2026-07-28): its task is passed through under an
    // id of airlock's, and its methods are asked of it.
    let jobs = Upstream::peer("tasks_upstream.py", &[]);
    let port = jobs.port;
    let mut config = mcp_base_config("1s");
    config.push_str(&format!(
        "[[mcp_servers]]\nname = \"jobs\"\nurl = \"http://127.0.0.1:{port}/mcp\"\nprefix = \"jobs.\"\n"
    ));
    let gw = Gateway::start_with(&config, MCP_POLICY);

    let created = call_as_task(
        &gw,
        "agent1",
        "jobs.confirm_delete",
        json!({}),
        tasks_caps(),
    );
    assert_eq!(created["resultType"], "task", "{created}");
    let task = created["taskId"].as_str().unwrap().to_owned();
    assert!(task.starts_with("task_"), "not airlock's id: {created}");
    // Only its principal reaches it.
    let (_, other) = get(&gw, "agent2", &task);
    assert_eq!(other["error"]["code"], -32602, "{other}");
    // The upstream asks inside its task; the answer goes to it; it completes.
    let asked = poll_past(&gw, &task, &["working"]);
    assert_eq!(asked["status"], "input_required", "{asked}");
    assert_eq!(asked["taskId"], task.as_str());
    let key = asked["inputRequests"]
        .as_object()
        .unwrap()
        .keys()
        .next()
        .unwrap()
        .clone();
    let (s, b) = rpc(
        &gw,
        "agent1",
        "tasks/update",
        json!({"taskId": task, "inputResponses": {key: {"action": "accept", "content": {"confirm": "yes"}}}}),
        tasks_caps(),
    );
    assert_eq!(
        (s, &b["result"]),
        (200, &json!({"resultType": "complete"})),
        "{b}"
    );
    let done = ended(&gw, &task);
    assert_eq!(done["status"], "completed", "{done}");
    assert_eq!(done["result"]["content"][0]["text"], "delete: accept");
    // A task the upstream requires, for a client without the extension: -32021 naming it.
    let (s, b) = rpc(
        &gw,
        "agent1",
        "tools/call",
        json!({"name": "jobs.failing_job", "arguments": {}}),
        json!({}),
    );
    assert_eq!((s, b["error"]["code"].as_i64()), (400, Some(-32021)), "{b}");
    assert!(b["error"]["data"]["requiredCapabilities"]["extensions"][EXTENSION].is_object());
    let (_, audit) = gw.req("GET", "/v1/audit?limit=1000", Some("admin"), None, None);
    assert!(audit["records"]
        .as_array()
        .unwrap()
        .iter()
        .any(|r| r["kind"] == "mcp.task_created" && r["task_id"] == task.as_str()));
}
