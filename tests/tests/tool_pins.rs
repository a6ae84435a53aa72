//! MCP tool definitions pinned (DESIGN §20), against a real upstream on the official Python
//! SDK (`peers/changing_upstream.py`) whose tool definitions change under the gateway: its
//! description (with an injection in it), then its `inputSchema`, then only an annotation,
//! then the tool removed and listed again changed. Each time the pinned definition is what
//! clients see, a call is refused `409 tool.definition_changed` (an `isError` result over MCP),
//! one review opens however many lists see the change, approving it serves and calls the new
//! definition, declining keeps refusing. Also: `trust_first = false`, `pin = "warn"`, a policy
//! rule on `definition.annotations.destructiveHint`, an upstream down at start with and
//! without pins, and three gateways on one PostgreSQL database sharing one review.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use support::*;

/// Allow, but hold a tool its upstream marks destructive (as pinned).
const PIN_POLICY: &str = r#"
version = 1

[defaults]
decision = "allow"
on_error = "deny"
approval_ttl = "15m"
grant = { uses = 1, ttl = "10m", scope = "run" }

[[rules]]
id = "hold-destructive"
when = 'definition != null && has(definition.annotations) && has(definition.annotations.destructiveHint) && definition.annotations.destructiveHint == true'
decision = "require_approval"
message = "its upstream marks it destructive"
"#;

fn set_stage(file: &Path, stage: &str) {
    std::fs::write(file, stage).unwrap();
}

/// `[[mcp_servers]]` for the changing upstream, read every second.
fn server(name: &str, up: &Upstream, extra: &str) -> String {
    format!(
        "[[mcp_servers]]\nname = \"{name}\"\nurl = \"http://127.0.0.1:{}/mcp\"\ntimeout = \"10s\"\nrefresh = \"1s\"\n{extra}\n",
        up.port
    )
}

fn wait_until(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// A stateless 2026-07-28 MCP request as agent1; the JSON-RPC answer.
fn mcp(gw: &Gateway, method: &str, params: Value) -> Value {
    let mut params = params;
    params["_meta"] = json!({"io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {}});
    let mut r = gw
        .client
        .post(format!("{}/mcp", gw.base))
        .bearer_auth("token-agent1")
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", "2026-07-28")
        .header("mcp-method", method);
    if let Some(n) = params.get("name").and_then(Value::as_str) {
        r = r.header("mcp-name", n);
    }
    let text = r
        .json(&json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params}))
        .send()
        .unwrap()
        .text()
        .unwrap();
    serde_json::from_str(&text).unwrap_or_else(|_| {
        text.lines()
            .filter_map(|l| l.strip_prefix("data:"))
            .filter_map(|d| serde_json::from_str::<Value>(d.trim()).ok())
            .find(|m| m.get("id").is_some())
            .unwrap_or_else(|| panic!("no answer: {text}"))
    })
}

/// The tools an MCP client sees, by name.
fn listed(gw: &Gateway) -> std::collections::BTreeMap<String, Value> {
    mcp(gw, "tools/list", json!({}))["result"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| (t["name"].as_str().unwrap().to_owned(), t.clone()))
        .collect()
}

fn description(gw: &Gateway, tool: &str) -> Option<String> {
    listed(gw)
        .get(tool)
        .map(|t| t["description"].as_str().unwrap_or("").to_owned())
}

/// Every review (approval of kind `tool_definition`) of `tool`, newest first.
fn reviews(gw: &Gateway, tool: &str) -> Vec<Value> {
    let (s, b) = gw.req(
        "GET",
        &format!("/v1/approvals?tool={tool}"),
        Some("admin"),
        None,
        None,
    );
    assert_eq!(s, 200, "{b}");
    b["approvals"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|a| a["kind"] == "tool_definition")
        .cloned()
        .collect()
}

fn pending_review(gw: &Gateway, tool: &str) -> Option<Value> {
    reviews(gw, tool)
        .into_iter()
        .find(|a| a["status"] == "pending")
}

/// Waits for the review of `tool` to open; returns it.
fn review_opens(gw: &Gateway, tool: &str) -> Value {
    let mut found = None;
    wait_until(&format!("a review of {tool}"), || {
        found = pending_review(gw, tool);
        found.is_some()
    });
    found.unwrap()
}

fn decide(gw: &Gateway, who: &str, id: &str, approve: bool) -> (u16, Value) {
    let (verb, body) = if approve {
        ("approve", "{}")
    } else {
        (
            "decline",
            r#"{"reason":"this description tells the model to leak keys"}"#,
        )
    };
    gw.req(
        "POST",
        &format!("/v1/approvals/{id}/{verb}"),
        Some(who),
        Some(body),
        None,
    )
}

fn deploy(gw: &Gateway) -> (u16, Value) {
    gw.call("agent1", "ops.deploy", json!({"service": "web"}), None)
}

fn audit_kinds(gw: &Gateway) -> Vec<Value> {
    let (s, b) = gw.req("GET", "/v1/audit?limit=1000", Some("admin"), None, None);
    assert_eq!(s, 200);
    b["records"].as_array().unwrap().clone()
}

#[test]
fn a_changed_definition_is_held_until_a_reviewer_approves_it_and_declined_stays_refused() {
    let dir = tempfile::tempdir().unwrap();
    let stage = dir.path().join("stage");
    set_stage(&stage, "v1");
    let up = Upstream::peer("changing_upstream.py", &[stage.to_str().unwrap()]);
    let receiver = Receiver::start("ok");
    let config = format!(
        "{}{}[[webhooks]]\nid = \"reviews\"\nurl = \"http://127.0.0.1:{}/hook\"\nsecret = \"{SECRET}\"\nevents = [\"approval.requested\"]\n",
        mcp_base_config("2s"),
        server("ops", &up, "reviewers = [\"dba\"]"),
        receiver.port
    );
    let gw = Gateway::start_with(&config, PIN_POLICY);

    // First sight: pinned, served, called.
    assert_eq!(
        description(&gw, "ops.deploy").unwrap(),
        "Deploys a service."
    );
    let (s, b) = deploy(&gw);
    assert_eq!(s, 200, "{b}");
    assert!(b["result"].to_string().contains("definition v1"), "{b}");
    let (s, t) = gw.req("GET", "/v1/tools/ops.deploy", Some("dba1"), None, None);
    assert_eq!(s, 200, "{t}");
    assert_eq!(t["state"], "pinned");
    assert_eq!(t["fingerprint"], t["pinned_fingerprint"]);
    assert_eq!(t["pinned_by"], "first_seen");
    let (s, _) = gw.req("GET", "/v1/tools/ops.deploy", Some("agent1"), None, None);
    assert_eq!(s, 403, "agents do not read definitions and pins one by one");
    // A tool its upstream marks destructive is held by the policy rule on `definition`.
    let (s, b) = gw.call(
        "agent1",
        "ops.wipe",
        json!({"disk": "sda"}),
        Some("respond-async"),
    );
    assert_eq!(s, 202, "{b}");

    // 1. The description changes, with an injection in it.
    set_stage(&stage, "poisoned");
    let review = review_opens(&gw, "ops.deploy");
    let id = review["id"].as_str().unwrap().to_owned();
    assert_eq!(review["args"]["old"]["description"], "Deploys a service.");
    assert!(review["args"]["new"]["description"]
        .as_str()
        .unwrap()
        .contains("id_rsa"));
    assert_eq!(
        description(&gw, "ops.deploy").unwrap(),
        "Deploys a service.",
        "clients still see the pinned definition"
    );
    let (s, b) = deploy(&gw);
    assert_eq!(s, 409, "{b}");
    assert_eq!(code(&b), "tool.definition_changed");
    assert_eq!(b["error"]["details"]["approval_id"], id.as_str());
    assert!(b["error"]["details"]["link"]
        .as_str()
        .unwrap()
        .ends_with(&format!("/inbox/approvals/{id}")));
    let r = mcp(
        &gw,
        "tools/call",
        json!({"name": "ops.deploy", "arguments": {"service": "web"}}),
    );
    assert_eq!(r["result"]["isError"], true, "{r}");
    assert_eq!(
        r["result"]["structuredContent"]["error"]["code"],
        "tool.definition_changed"
    );
    assert!(r["result"]["structuredContent"]["error"]["link"]
        .as_str()
        .unwrap()
        .contains(&id));
    // Webhooks hear of it as of any approval, with its kind.
    let hooks = receiver.wait_for(2, Duration::from_secs(10));
    let hook = hooks
        .iter()
        .find(|r| r["body"]["data"]["kind"] == "tool_definition")
        .unwrap_or_else(|| panic!("{hooks:?}"));
    assert_eq!(hook["body"]["type"], "approval.requested");
    assert_eq!(hook["body"]["data"]["id"], id.as_str());
    // The command line shows the tool and its review, the change as a line diff.
    let cli = |args: &[&str]| {
        output_of(std::process::Command::new(airlock_bin()).args(args).args([
            "--url",
            &gw.base,
            "--token",
            "token-dba1",
        ]))
    };
    let list = cli(&["tools", "list"]);
    assert!(
        list.lines()
            .any(|l| l.starts_with("ops.deploy") && l.contains("changed")),
        "{list}"
    );
    let show = cli(&["tools", "show", "ops.deploy"]);
    assert!(
        show.contains("-   \"description\": \"Deploys a service.\","),
        "{show}"
    );
    assert!(
        show.contains("+   \"description\": \"Deploys a service. <script>"),
        "{show}"
    );
    let shown = cli(&["approvals", "show", &id]);
    assert!(shown.contains("a tool definition's review"), "{shown}");
    assert!(shown.contains("id_rsa"), "{shown}");
    // More lists see the same change: still one review.
    std::thread::sleep(Duration::from_millis(2500));
    assert_eq!(reviews(&gw, "ops.deploy").len(), 1);
    // The list says what holds it: a review, not a rule.
    let pending = cli(&["approvals", "list"]);
    let row = pending
        .lines()
        .find(|l| l.contains(&id))
        .unwrap_or_else(|| panic!("{pending}"));
    assert!(
        row.contains("(definition review)") && !row.contains("defaults"),
        "{row}"
    );
    // Reviewers are the `dba` group (and admins).
    let (s, b) = decide(&gw, "fin1", &id, true);
    assert_eq!((s, code(&b)), (403, "approval.forbidden"), "{b}");
    assert!(
        b["error"]["message"]
            .as_str()
            .unwrap()
            .contains("is not a reviewer of this tool's definition: its upstream's `reviewers` are the groups `dba`, and admins"),
        "{b}"
    );
    // An approver's token outside the reviewers is told that, not to use an approver's token.
    let out = std::process::Command::new(airlock_bin())
        .args([
            "approvals",
            "approve",
            &id,
            "--url",
            &gw.base,
            "--token",
            "token-fin1",
        ])
        .output()
        .unwrap();
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        said.contains("not a reviewer") && !said.contains("deciding needs an approver's token"),
        "{said}"
    );
    let (s, b) = decide(&gw, "dba1", &id, true);
    assert_eq!(s, 200, "{b}");
    assert_eq!(b["status"], "approved");
    let (s, b) = deploy(&gw);
    assert_eq!(s, 200, "{b}");
    assert!(b["result"].to_string().contains("definition poisoned"));
    assert!(description(&gw, "ops.deploy").unwrap().contains("id_rsa"));

    // 2. The input schema changes: declined, it stays refused, and no review reopens.
    set_stage(&stage, "schema");
    let review = review_opens(&gw, "ops.deploy");
    let id = review["id"].as_str().unwrap().to_owned();
    assert!(review["args"]["new"]["inputSchema"]["properties"]
        .get("token")
        .is_some());
    let (s, b) = decide(&gw, "dba2", &id, false);
    assert_eq!((s, b["status"].as_str()), (200, Some("declined")), "{b}");
    let (s, b) = deploy(&gw);
    assert_eq!((s, code(&b)), (409, "tool.definition_changed"), "{b}");
    assert_eq!(b["error"]["details"]["declined"], true, "{b}");
    assert!(
        !listed(&gw).contains_key("ops.deploy"),
        "a declined tool is not offered to clients"
    );
    std::thread::sleep(Duration::from_millis(2500));
    assert!(pending_review(&gw, "ops.deploy").is_none());
    assert_eq!(reviews(&gw, "ops.deploy").len(), 2);

    // 3. Only an annotation changes: a review of its own; approved, the policy reads it.
    set_stage(&stage, "annotation");
    let id = review_opens(&gw, "ops.deploy")["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let (s, b) = decide(&gw, "dba2", &id, true);
    assert_eq!(s, 200, "{b}");
    let (s, b) = gw.call(
        "agent1",
        "ops.deploy",
        json!({"service": "web", "token": "t"}),
        Some("respond-async"),
    );
    assert_eq!(s, 202, "now marked destructive, the policy holds it: {b}");

    // 4. Removed, then listed again changed: unknown while gone, held when back.
    set_stage(&stage, "removed");
    wait_until("the tool to go", || !listed(&gw).contains_key("ops.deploy"));
    let (s, b) = deploy(&gw);
    assert_eq!((s, code(&b)), (404, "tool.unknown"), "{b}");
    set_stage(&stage, "readded");
    let id = review_opens(&gw, "ops.deploy")["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let (s, b) = deploy(&gw);
    assert_eq!((s, code(&b)), (409, "tool.definition_changed"), "{b}");
    assert_ne!(
        description(&gw, "ops.deploy").unwrap(),
        "Deploys anything, anywhere."
    );
    let (s, _) = decide(&gw, "dba1", &id, true);
    assert_eq!(s, 200);
    assert_eq!(
        description(&gw, "ops.deploy").unwrap(),
        "Deploys anything, anywhere."
    );

    // The other tools were never touched; every step is audited.
    let (s, b) = gw.call("agent1", "ops.status", json!({}), None);
    assert_eq!(s, 200, "{b}");
    let records = audit_kinds(&gw);
    let count = |kind: &str| records.iter().filter(|r| r["kind"] == kind).count();
    assert_eq!(
        count("tool.pinned"),
        3,
        "deploy, status, wipe pinned at first sight"
    );
    assert_eq!(count("tool.definition_changed"), 4);
    assert_eq!(count("tool.repinned"), 3);
    let changed = records
        .iter()
        .find(|r| r["kind"] == "tool.definition_changed")
        .unwrap();
    assert!(changed["old_fingerprint"]
        .as_str()
        .unwrap()
        .starts_with("sha256:"));
    assert_ne!(changed["old_fingerprint"], changed["new_fingerprint"]);
    let rejected = records
        .iter()
        .filter(|r| r["kind"] == "call.rejected" && r["code"] == "tool.definition_changed")
        .count();
    assert!(rejected >= 4, "each refused call is audited: {rejected}");
    assert!(gw
        .metrics()
        .contains("airlock_tool_definitions_total{event=\"changed\",server=\"ops\"} 4"));
}

#[test]
fn trust_first_false_holds_a_new_tool_and_warn_runs_a_changed_one() {
    let dir = tempfile::tempdir().unwrap();
    let stage = dir.path().join("stage");
    set_stage(&stage, "v1");
    let up = Upstream::peer("changing_upstream.py", &[stage.to_str().unwrap()]);
    let config = format!(
        "{}{}{}",
        mcp_base_config("2s"),
        server("strict", &up, "trust_first = false"),
        server("loose", &up, "pin = \"warn\"")
    );
    let gw = Gateway::start_with(&config, PIN_POLICY);

    // Never seen before and not trusted: not listed, not called, one review each.
    let tools = listed(&gw);
    assert!(!tools.contains_key("strict.status"), "{tools:?}");
    assert!(tools.contains_key("loose.status"));
    let (s, b) = gw.call("agent1", "strict.status", json!({}), None);
    assert_eq!((s, code(&b)), (409, "tool.definition_changed"), "{b}");
    let review = pending_review(&gw, "strict.status").expect("a review of a new tool");
    assert!(review["args"]["old"].is_null());
    let (s, _) = decide(&gw, "ops", review["id"].as_str().unwrap(), true);
    assert_eq!(s, 200);
    assert!(listed(&gw).contains_key("strict.status"));
    let (s, b) = gw.call("agent1", "strict.status", json!({}), None);
    assert_eq!(s, 200, "{b}");

    // Under `warn` a changed definition is served and called; the change is audited,
    // counted, and opens a review.
    set_stage(&stage, "poisoned");
    review_opens(&gw, "loose.deploy");
    assert!(description(&gw, "loose.deploy").unwrap().contains("id_rsa"));
    let (s, b) = gw.call("agent1", "loose.deploy", json!({"service": "web"}), None);
    assert_eq!(s, 200, "{b}");
    assert!(b["result"].to_string().contains("definition poisoned"));
    assert!(gw
        .metrics()
        .contains("airlock_tool_definitions_total{event=\"unpinned\",server=\"loose\"} 1"));
    let (_, t) = gw.req("GET", "/v1/tools/loose.deploy", Some("admin"), None, None);
    assert_eq!(
        (t["pin"].as_str(), t["state"].as_str()),
        (Some("warn"), Some("changed"))
    );
    assert!(audit_kinds(&gw)
        .iter()
        .any(|r| r["kind"] == "tool.definition_changed" && r["tool"] == "loose.deploy"));
}

#[test]
fn an_upstream_that_comes_up_after_the_gateway_is_reached_within_seconds_not_at_refresh() {
    // `refresh` is 30 s by default; an upstream never reached is tried every 5 s, the
    // `Retry-After` its refused calls carry.
    let port = free_port();
    let config = format!(
        "{}[[mcp_servers]]\nname = \"late\"\nurl = \"http://127.0.0.1:{port}/mcp\"\ntimeout = \"2s\"\n",
        mcp_base_config("2s"),
    );
    let gw = Gateway::start_with(&config, MCP_POLICY);
    let (_, b) = gw.req("GET", "/readyz", None, None, None);
    assert_eq!(b["mcp_servers_unreached"], json!(["late"]));
    let (s, b) = gw.call("agent1", "late.echo", json!({"text": "hi"}), None);
    assert_eq!((s, code(&b)), (502, "upstream.unavailable"), "{b}");
    let _up = Upstream::peer_at("mcp_upstream.py", &["http"], port);
    let took = gw.wait_reached(Duration::from_secs(20));
    assert!(took < Duration::from_secs(12), "{took:?}");
    let (s, b) = gw.call("agent1", "late.echo", json!({"text": "hi"}), None);
    assert_eq!(s, 200, "{b}");
}

#[test]
fn an_upstream_down_at_start_is_unavailable_not_unknown_and_keeps_its_pins() {
    let dir = tempfile::tempdir().unwrap();
    let stage = dir.path().join("stage");
    set_stage(&stage, "v1");
    let up = Upstream::peer("changing_upstream.py", &[stage.to_str().unwrap()]);
    let closed = free_port();
    let config = format!(
        "{}{}[[mcp_servers]]\nname = \"gone\"\nurl = \"http://127.0.0.1:{closed}/mcp\"\ntimeout = \"2s\"\n",
        mcp_base_config("2s"),
        server("ops", &up, "")
    );
    let mut gw = Gateway::start_with(&config, PIN_POLICY);
    let (s, b) = gw.req("GET", "/readyz", None, None, None);
    assert_eq!(s, 200, "{b}");
    assert_eq!(b["mcp_servers_unreached"], json!(["gone"]));
    // A name under its prefix, with nothing pinned: unavailable, with a time to retry.
    let r = gw
        .client
        .post(format!("{}/v1/calls", gw.base))
        .bearer_auth("token-agent1")
        .json(&json!({"tool": "gone.anything", "args": {}}))
        .send()
        .unwrap();
    assert_eq!(r.status().as_u16(), 502);
    assert!(r.headers().contains_key("retry-after"));
    let b: Value = r.json().unwrap();
    assert_eq!(code(&b), "upstream.unavailable");

    // Pinned tools survive their upstream: after a restart with it down, they are listed
    // from the store and their calls are unavailable, not unknown.
    gw.signal("-TERM");
    gw.wait_exit();
    drop(up);
    gw.spawn();
    let tools = listed(&gw);
    assert_eq!(
        tools["ops.deploy"]["description"], "Deploys a service.",
        "{tools:?}"
    );
    let (s, b) = deploy(&gw);
    assert_eq!((s, code(&b)), (502, "upstream.unavailable"), "{b}");
    let (_, t) = gw.req("GET", "/v1/tools/ops.deploy", Some("admin"), None, None);
    assert_eq!(t["state"], "unreached");
}

#[test]
fn three_gateways_on_postgres_share_one_review_decided_on_any() {
    let db = support::pg::Database::fresh();
    let dir = tempfile::tempdir().unwrap();
    let stage = dir.path().join("stage");
    set_stage(&stage, "v1");
    let up = Upstream::peer("changing_upstream.py", &[stage.to_str().unwrap()]);
    let gws: Vec<Gateway> = ["gw-a", "gw-b", "gw-c"]
        .iter()
        .map(|name| {
            let config = format!(
                "{}{}[store]\nkind = \"postgres\"\nurl = \"{}\"\ninstance = \"{name}\"\n",
                mcp_base_config("2s"),
                server("ops", &up, ""),
                db.url
            );
            Gateway::start_with(&config, PIN_POLICY)
        })
        .collect();
    for gw in &gws {
        let (s, b) = deploy(gw);
        assert_eq!(s, 200, "{b}");
    }
    set_stage(&stage, "poisoned");
    // Every gateway sees the change and refuses; one review opens for all of them.
    for gw in &gws {
        wait_until("the gateway to refuse", || deploy(gw).0 == 409);
    }
    std::thread::sleep(Duration::from_millis(1500));
    let all = reviews(&gws[0], "ops.deploy");
    assert_eq!(all.len(), 1, "one review, not one per gateway: {all:?}");
    assert_eq!(reviews(&gws[2], "ops.deploy").len(), 1);
    // Decided on the second, the change is served and called on all three.
    let id = all[0]["id"].as_str().unwrap().to_owned();
    let (s, b) = decide(&gws[1], "admin", &id, true);
    assert_eq!(s, 200, "{b}");
    for gw in &gws {
        let (s, b) = deploy(gw);
        assert_eq!(s, 200, "{b}");
        assert!(b["result"].to_string().contains("definition poisoned"));
    }
    for gw in &gws {
        wait_until("the new definition to be listed", || {
            description(gw, "ops.deploy").is_some_and(|d| d.contains("id_rsa"))
        });
    }
}

/// The review page in headless Chromium at 1280 and 375 px: the injection in a description is
/// text (no markup runs, no link is made of it), the changed lines are side by side at 1280
/// and stacked at 375, and approving there pins the new definition.
#[test]
fn the_review_page_shows_a_hostile_definition_as_text_at_1280_and_375() {
    let dir = tempfile::tempdir().unwrap();
    let stage = dir.path().join("stage");
    set_stage(&stage, "v1");
    let up = Upstream::peer("changing_upstream.py", &[stage.to_str().unwrap()]);
    let config = format!("{}{}", mcp_base_config("2s"), server("ops", &up, ""));
    let gw = Gateway::start_with(&config, PIN_POLICY);
    set_stage(&stage, "poisoned");
    review_opens(&gw, "ops.deploy");
    let r = browser_scenario(&gw.base, "review");
    assert_eq!(
        r["safe"], true,
        "no script ran, nothing was embedded: {r:?}"
    );
    assert!(
        r["links"]
            .as_array()
            .unwrap()
            .iter()
            .all(|l| !l.as_str().unwrap().contains("evil.example")),
        "the description's link is not a link: {r:?}"
    );
    let text = r["main_text"].as_str().unwrap();
    assert!(
        text.contains("<script>alert('pwned')</script>"),
        "shown as text: {text}"
    );
    assert!(
        text.contains("<a href=\\\"https://evil.example/x\\\">docs</a>"),
        "{text}"
    );
    let changed = r["changed"].as_array().unwrap();
    assert!(
        changed
            .iter()
            .any(|c| c.as_str().unwrap().contains("Deploys a service.\"")),
        "the old description is a changed line: {changed:?}"
    );
    let cols = r["columns"].as_array().unwrap();
    assert_eq!(cols.len(), 2, "side by side at 1280");
    assert!(
        cols[1].as_f64().unwrap() > cols[0].as_f64().unwrap() + 100.0,
        "{cols:?}"
    );
    assert!(
        r["phone_width"].as_f64().unwrap() <= 375.0,
        "no sideways scroll at 375: {r:?}"
    );
    let phone = r["phone_columns"].as_array().unwrap();
    assert!(
        phone
            .windows(2)
            .all(|w| (w[0].as_f64().unwrap() - w[1].as_f64().unwrap()).abs() < 1.0),
        "stacked at 375: {phone:?}"
    );
    assert!(r["decided"].as_str().unwrap().contains("approved"), "{r:?}");
    assert!(description(&gw, "ops.deploy").unwrap().contains("id_rsa"));
}

/// Reviews as documented: an admin outside `reviewers` decides a review; a declined tool is
/// left out of lists; the upstream serving the pinned definition again, then the declined one,
/// opens a new review; and an admin can open one for the current definition at will.
#[test]
fn admins_review_a_declined_tool_is_hidden_and_a_review_reopens() {
    let dir = tempfile::tempdir().unwrap();
    let stage = dir.path().join("stage");
    set_stage(&stage, "v1");
    let up = Upstream::peer("changing_upstream.py", &[stage.to_str().unwrap()]);
    let config = format!(
        "{}{}",
        mcp_base_config("2s"),
        server("ops", &up, "reviewers = [\"dba\"]")
    );
    let gw = Gateway::start_with(&config, PIN_POLICY);
    assert_eq!(deploy(&gw).0, 200);
    // An admin in none of the reviewer groups approves a review.
    set_stage(&stage, "poisoned");
    let id = review_opens(&gw, "ops.deploy")["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let (s, b) = decide(&gw, "admin", &id, true);
    assert_eq!((s, b["status"].as_str()), (200, Some("approved")), "{b}");
    // Declined: refused and not listed.
    set_stage(&stage, "schema");
    let id = review_opens(&gw, "ops.deploy")["id"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(decide(&gw, "admin", &id, false).0, 200);
    wait_until("the declined tool to leave the list", || {
        !listed(&gw).contains_key("ops.deploy")
    });
    let (s, b) = deploy(&gw);
    assert_eq!((s, code(&b)), (409, "tool.definition_changed"), "{b}");
    // The upstream serves the pinned definition again: listed and called again...
    set_stage(&stage, "poisoned");
    wait_until("the pinned definition to be served again", || {
        deploy(&gw).0 == 200
    });
    assert!(listed(&gw).contains_key("ops.deploy"));
    // ...and then the declined one again: that is a new change, and a new review opens.
    set_stage(&stage, "schema");
    let reopened = review_opens(&gw, "ops.deploy");
    assert_ne!(reopened["id"], id.as_str());
    assert_eq!(reviews(&gw, "ops.deploy").len(), 3);
    let (s, _) = decide(&gw, "dba1", reopened["id"].as_str().unwrap(), false);
    assert_eq!(s, 200);
    // An admin opens a review of the current (declined) definition at will; nobody else may.
    let (s, b) = gw.req(
        "POST",
        "/v1/tools/ops.deploy/review",
        Some("dba1"),
        None,
        None,
    );
    assert_eq!((s, code(&b)), (403, "auth.forbidden"), "{b}");
    let (s, b) = gw.req(
        "POST",
        "/v1/tools/ops.deploy/review",
        Some("admin"),
        None,
        None,
    );
    assert_eq!(s, 200, "{b}");
    assert_eq!(b["kind"], "tool_definition");
    assert_eq!(b["status"], "pending");
    let again = b["id"].as_str().unwrap().to_owned();
    let (s, b) = gw.req(
        "POST",
        "/v1/tools/ops.deploy/review",
        Some("admin"),
        None,
        None,
    );
    assert_eq!(
        (s, b["id"].as_str()),
        (200, Some(again.as_str())),
        "the open one: {b}"
    );
    assert_eq!(decide(&gw, "dba2", &again, true).0, 200);
    assert_eq!(deploy(&gw).0, 200);
    let (s, b) = gw.req(
        "POST",
        "/v1/tools/ops.deploy/review",
        Some("admin"),
        None,
        None,
    );
    assert_eq!(
        (s, code(&b)),
        (400, "approval.invalid_state"),
        "nothing to review: {b}"
    );
    let (s, b) = gw.req(
        "POST",
        "/v1/tools/ops.nothing/review",
        Some("admin"),
        None,
        None,
    );
    assert_eq!((s, code(&b)), (404, "tool.unknown"), "{b}");
}

/// A review decided on one of three gateways reaches the others' lists within a second (each
/// gateway reads the pins of the shared store every second, not only at its next list
/// refresh, which is 30 s here).
#[test]
fn a_repin_reaches_every_gateways_list_within_a_second() {
    let db = support::pg::Database::fresh();
    let dir = tempfile::tempdir().unwrap();
    let stage = dir.path().join("stage");
    set_stage(&stage, "v1");
    let up = Upstream::peer("changing_upstream.py", &[stage.to_str().unwrap()]);
    let mut gws: Vec<Gateway> = ["gw-a", "gw-b", "gw-c"]
        .iter()
        .map(|name| {
            let config = format!(
                "{}{}[store]\nkind = \"postgres\"\nurl = \"{}\"\ninstance = \"{name}\"\n",
                mcp_base_config("2s"),
                server("ops", &up, "").replace("refresh = \"1s\"", "refresh = \"30s\""),
                db.url
            );
            Gateway::start_with(&config, PIN_POLICY)
        })
        .collect();
    // v1 is pinned; the gateways restart after the upstream changed, so each sees the change
    // at start (their next refresh is 30 s away).
    for gw in &mut gws {
        gw.kill9();
    }
    set_stage(&stage, "poisoned");
    for gw in &mut gws {
        gw.spawn();
    }
    for gw in &gws {
        assert_eq!(deploy(gw).0, 409);
    }
    let id = review_opens(&gws[0], "ops.deploy")["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let (s, b) = decide(&gws[1], "admin", &id, true);
    assert_eq!(s, 200, "{b}");
    let decided = Instant::now();
    for (i, gw) in gws.iter().enumerate() {
        while !description(gw, "ops.deploy").is_some_and(|d| d.contains("id_rsa")) {
            assert!(
                decided.elapsed() < Duration::from_secs(1),
                "gateway {i} still lists {:?} a second after the review was decided",
                description(gw, "ops.deploy")
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    assert_eq!(deploy(&gws[0]).0, 200);
}
