//! The MCP front end against clients and servers nobody here wrote: the official Python SDK
//! (PyPI `mcp`) as the client, in both protocol revisions, and as the upstream server, over
//! streamable HTTP and over stdio. The real `airlock` binary in between, on 127.0.0.1:0.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use std::collections::BTreeMap;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use support::*;

const MODES: [&str; 2] = ["legacy", "2026-07-28"];

/// Runs the Python SDK client; returns the JSON lines it printed.
fn client(gw: &Gateway, token: &str, mode: &str, args: &[&str]) -> Vec<Value> {
    let out = Command::new("python3")
        .arg(peers().join("mcp_client.py"))
        .args([&format!("{}/mcp", gw.base), token, mode])
        .args(args)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "client failed: {stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

fn call(gw: &Gateway, who: &str, mode: &str, tool: &str, args: Value) -> Value {
    client(
        gw,
        &format!("token-{who}"),
        mode,
        &["call", tool, &args.to_string()],
    )
    .pop()
    .unwrap()
}

/// How many `echo` calls reached an upstream, and with what.
fn upstream_log(gw: &Gateway, server: &str) -> Vec<Value> {
    let r = call(
        gw,
        "agent2",
        "legacy",
        &format!("{server}.count"),
        json!({}),
    );
    let text = r["result"]["content"][0]["text"].as_str().unwrap();
    let v: Value = serde_json::from_str(text).unwrap();
    v["log"].as_array().unwrap().clone()
}

/// The code of an `isError` refusal: in `structuredContent.error`, or, for a tool that
/// declares an `outputSchema`, in `_meta["airlock/error"]` (DESIGN §10).
fn error_code(result: &Value) -> &str {
    result["result"]["structuredContent"]["error"]["code"]
        .as_str()
        .or_else(|| result["result"]["_meta"]["airlock/error"]["code"].as_str())
        .unwrap_or("")
}

#[test]
fn a_refusal_of_a_tool_with_an_output_schema_goes_in_meta_so_clients_do_not_fail() {
    let up = Upstream::start();
    let gw = mcp_gateway(&up, "2s");
    for mode in MODES {
        // Allowed: the upstream's typed result, unchanged.
        let r = call(&gw, "agent1", mode, "up.weather", json!({"city": "Oslo"}));
        assert_eq!(
            r["result"]["structuredContent"]["city"], "Oslo",
            "{mode}: {r}"
        );
        // Denied: no `structuredContent` the client would check against the schema (and
        // throw on); the refusal is in `_meta["airlock/error"]` and in the text.
        let r = call(&gw, "agent1", mode, "up.weather", json!({"city": "moon"}));
        assert!(r.get("error").is_none(), "{mode}: the client failed: {r}");
        assert_eq!(r["result"]["isError"], true, "{mode}: {r}");
        assert!(
            r["result"].get("structuredContent").is_none(),
            "{mode}: {r}"
        );
        let refusal = &r["result"]["_meta"]["airlock/error"];
        assert_eq!(refusal["code"], "policy.denied", "{mode}: {r}");
        assert_eq!(
            refusal["rules"],
            json!(["no-weather-on-the-moon"]),
            "{mode}: {r}"
        );
        assert!(r["result"]["content"][0]["text"]
            .as_str()
            .unwrap()
            .starts_with("policy.denied: there is no weather on the moon"));
    }
}

#[test]
fn the_typescript_sdk_reads_a_refusal_of_a_tool_with_an_output_schema_without_throwing() {
    let up = Upstream::start();
    let gw = mcp_gateway(&up, "2s");
    let (node, script) = node_script("ts_sdk_client.mjs", "@modelcontextprotocol/sdk");
    let out = Command::new(node)
        .arg(&script)
        .args([
            &format!("{}/mcp", gw.base),
            "token-agent1",
            "up.weather",
            r#"{"city":"Oslo"}"#,
            r#"{"city":"moon"}"#,
        ])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let lines: Vec<Value> = stdout
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    assert_eq!(lines.len(), 2, "{stdout}");
    // Allowed: the typed result passes the SDK's own check against the schema.
    assert_eq!(
        lines[0]["result"]["structuredContent"]["city"], "Oslo",
        "{stdout}"
    );
    // Denied: no throw (`-32602 Structured content does not match`); the model reads why.
    assert!(lines[1].get("error").is_none(), "the SDK threw: {stdout}");
    assert_eq!(lines[1]["result"]["isError"], true, "{stdout}");
    assert_eq!(
        lines[1]["result"]["_meta"]["airlock/error"]["code"],
        "policy.denied"
    );
}

#[test]
fn both_revisions_list_call_deny_and_refuse_bad_input() {
    let up = Upstream::start();
    let gw = mcp_gateway(&up, "2s");
    for mode in MODES {
        let tools = client(&gw, "token-agent1", mode, &["list"]).pop().unwrap();
        let names: Vec<&str> = tools["tools"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t.as_str().unwrap())
            .collect();
        for t in [
            "up.echo",
            "up.count",
            "up.wait",
            "local.echo",
            "local.crash",
        ] {
            assert!(names.contains(&t), "{mode}: {names:?}");
        }

        // Allowed: forwarded with the canonical arguments, the result unchanged.
        let r = call(
            &gw,
            "agent1",
            mode,
            "up.echo",
            json!({"text": mode, "n": 1}),
        );
        assert_eq!(r["result"]["isError"], false, "{r}");
        let text: Value =
            serde_json::from_str(r["result"]["content"][0]["text"].as_str().unwrap()).unwrap();
        assert_eq!(text["text"], mode);
        if mode != "legacy" {
            assert_eq!(r["result"]["resultType"], "complete");
        }

        // Denied: an isError result the model reads, naming the rule.
        let r = call(
            &gw,
            "agent1",
            mode,
            "local.echo",
            json!({"text": "rm -rf /"}),
        );
        assert_eq!(r["result"]["isError"], true);
        assert_eq!(error_code(&r), "policy.denied");
        assert_eq!(
            r["result"]["structuredContent"]["error"]["rules"],
            json!(["deny-rm"])
        );
        assert!(r["result"]["content"][0]["text"]
            .as_str()
            .unwrap()
            .starts_with("policy.denied: rm -rf is never allowed"));

        // Strict intake and unknown tools are protocol errors with the stable code.
        let r = call(
            &gw,
            "agent1",
            mode,
            "up.echo",
            json!({"n": 9007199254740993u64}),
        );
        assert_eq!(r["error"]["code"], -32602, "{r}");
        assert_eq!(r["error"]["data"]["code"], "request.unsafe_number");
        let r = call(&gw, "agent1", mode, "up.nope", json!({}));
        assert_eq!(r["error"]["code"], -32602, "{r}");
        assert_eq!(r["error"]["data"]["code"], "tool.unknown");
    }
    // Only the two allowed calls reached the upstream, with exactly their arguments.
    let log = upstream_log(&gw, "up");
    assert_eq!(
        log,
        vec![
            json!({"text": "legacy", "n": 1}),
            json!({"text": "2026-07-28", "n": 1})
        ]
    );
    assert!(upstream_log(&gw, "local").is_empty());
    // The audit says which front and revision each call came through.
    let (_, audit) = gw.req("GET", "/v1/audit?limit=1000", Some("admin"), None, None);
    let decided: Vec<&Value> = audit["records"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["kind"] == "call.decided" && r["tool"] == "up.echo")
        .collect();
    assert_eq!(decided.len(), 2, "{audit}");
    for r in &decided {
        let e = if r.get("front").is_some() {
            *r
        } else {
            &r["explanation"]
        };
        assert_eq!(e["front"], "mcp", "{r}");
    }
}

/// The other roads through the Python SDK's client: each road's line (`read`, `prompt`,
/// `complete`, `subscribe`), keyed by road.
fn roads(gw: &Gateway, who: &str, mode: &str, uri: &str, prompt: &str) -> BTreeMap<String, Value> {
    client(gw, &format!("token-{who}"), mode, &["roads", uri, prompt])
        .into_iter()
        .map(|l| (l["road"].as_str().unwrap().to_owned(), l))
        .collect()
}

/// What reached the upstream other than tool calls (`count`'s `roads`).
fn roads_reached(gw: &Gateway) -> Vec<String> {
    let r = call(gw, "agent1", "legacy", "up.count", json!({}));
    let text = r["result"]["content"][0]["text"].as_str().unwrap();
    let v: Value = serde_json::from_str(text).unwrap();
    v["roads"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s.as_str().unwrap().to_owned())
        .collect()
}

#[test]
fn every_road_to_an_upstream_is_judged_in_both_revisions() {
    let up = Upstream::start();
    let policy = format!(
        "{MCP_POLICY}\n[[rules]]\nid = \"no-secrets\"\nresources = [\"test://secrets/*\"]\ndecision = \"deny\"\nmessage = \"secrets stay with the upstream\"\n\
         [[rules]]\nid = \"agent2-no-reviews\"\nprompts = [\"*.review\"]\nwhen = 'principal.id == \"agent2\"'\ndecision = \"deny\"\n"
    );
    let gw = mcp_gateway_with(&up, "5s", &policy);
    let refused = |line: &Value, rule: &str| {
        assert_eq!(line["error"]["code"], -32003, "{line}");
        assert_eq!(line["error"]["data"]["code"], "policy.denied", "{line}");
        assert!(
            line["error"]["data"]["rules"]
                .as_array()
                .unwrap()
                .iter()
                .any(|r| r == rule),
            "{line}"
        );
    };
    for mode in MODES {
        // Allowed: each road reaches the upstream and answers as it did.
        let ok = roads(&gw, "agent1", mode, "test://greeting", "up.review");
        assert_eq!(
            ok["read"]["result"]["contents"][0]["text"], "hello from the upstream",
            "{mode}: {ok:?}"
        );
        assert!(
            ok["prompt"]["result"]["messages"][0]["content"]["text"]
                .as_str()
                .unwrap()
                .contains("Please review: x = 1"),
            "{mode}: {ok:?}"
        );
        assert_eq!(
            ok["complete"]["result"]["completion"]["values"],
            json!(["x-done"]),
            "{mode}: {ok:?}"
        );
        if mode == "legacy" {
            assert_ne!(ok["subscribe"]["error"]["code"], -32003, "{ok:?}");
        }
        // Denied by URI, for everyone: a JSON-RPC error naming the rule, nothing upstream.
        let no = roads(&gw, "agent1", mode, "test://secrets/api-key", "up.review");
        refused(&no["read"], "no-secrets");
        assert_eq!(
            no["read"]["error"]["message"], "secrets stay with the upstream",
            "{no:?}"
        );
        if mode == "legacy" {
            refused(&no["subscribe"], "no-secrets");
        }
        // Denied by prompt, for one principal: the prompt and its completions.
        let two = roads(&gw, "agent2", mode, "test://greeting", "up.review");
        refused(&two["prompt"], "agent2-no-reviews");
        refused(&two["complete"], "agent2-no-reviews");
        assert!(two["read"].get("result").is_some(), "{two:?}");
    }
    // Lists leave out what each principal could never read or get.
    for mode in MODES {
        let listed = |who: &str| {
            client(&gw, &format!("token-{who}"), mode, &["lists"])
                .pop()
                .unwrap()
        };
        let (one, two) = (listed("agent1"), listed("agent2"));
        let has = |l: &Value, field: &str, item: &str| {
            l[field].as_array().unwrap().iter().any(|v| v == item)
        };
        assert!(has(&one, "resources", "test://greeting"), "{mode}: {one}");
        assert!(
            !has(&one, "resources", "test://secrets/api-key"),
            "{mode}: {one}"
        );
        assert!(
            has(&one, "prompts", "up.review") && has(&one, "prompts", "local.review"),
            "{mode}: {one}"
        );
        assert!(
            !has(&two, "prompts", "up.review") && !has(&two, "prompts", "local.review"),
            "{mode}: {two}"
        );
        assert!(has(&two, "resources", "test://greeting"), "{mode}: {two}");
    }

    let reached = roads_reached(&gw);
    assert!(
        !reached.iter().any(|r| r.contains("secrets")),
        "a denied read reached the upstream: {reached:?}"
    );
    // agent1 asked for the prompt and its completion twice in each revision; agent2's never
    // left the gateway.
    for road in ["prompt review", "complete code"] {
        assert_eq!(
            reached.iter().filter(|r| *r == road).count(),
            4,
            "agent1's only: {reached:?}"
        );
    }

    // Audited with the kind, counted by kind and decision.
    let (_, audit) = gw.req("GET", "/v1/audit?limit=1000", Some("admin"), None, None);
    let decided: Vec<&Value> = audit["records"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["kind"] == "request.decided")
        .collect();
    assert!(
        decided.iter().any(|r| r["request_kind"] == "resource"
            && r["decision"] == "deny"
            && r["uri"] == "test://secrets/api-key"
            && r["server"].is_string()),
        "{decided:?}"
    );
    assert!(decided
        .iter()
        .any(|r| r["request_kind"] == "completion" && r["principal"] == "agent2"));
    let m = gw.metrics();
    assert!(
        m.contains("airlock_requests_total{decision=\"deny\",kind=\"resource\"} 3"),
        "{m}"
    );

    // A shadow set that would deny every read: counted, its calls named by what they read, and
    // nothing changes for the agent.
    let shadow_dir = tempfile::tempdir().unwrap();
    let shadow_file = shadow_dir.path().join("shadow.toml");
    std::fs::write(
        &shadow_file,
        format!("{MCP_POLICY}\n[[rules]]\nid = \"no-reads\"\nresources = [\"*\"]\ndecision = \"deny\"\n"),
    )
    .unwrap();
    let mut s = mcp_base_config("5s").replacen(
        "[server]\n",
        &format!(
            "[server]\nshadow_policy = {:?}\n",
            shadow_file.to_str().unwrap()
        ),
        1,
    );
    s.push_str(&format!(
        "[[mcp_servers]]\nname = \"up\"\nurl = \"http://127.0.0.1:{}/mcp\"\ntimeout = \"10s\"\n",
        up.port
    ));
    let shadowed = Gateway::start_with(&s, MCP_POLICY);
    shadowed.wait_reached(Duration::from_secs(20));
    let ok = roads(
        &shadowed,
        "agent1",
        "legacy",
        "test://greeting",
        "up.review",
    );
    assert!(ok["read"].get("result").is_some(), "{ok:?}");
    let (_, summary) = shadowed.req("GET", "/v1/policy/shadow", Some("admin"), None, None);
    let pair = summary["transitions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["live"] == "allow" && t["shadow"] == "deny")
        .unwrap_or_else(|| panic!("{summary}"));
    assert!(
        pair["calls"]
            .as_array()
            .unwrap()
            .iter()
            .any(|c| c["tool"] == "resource test://greeting (up)"),
        "{pair}"
    );
    drop(shadowed);

    // `[defaults] resources = "deny"`: every read no rule allows is refused.
    gw.write_policy(&policy.replacen(
        "decision = \"allow\"\n",
        "decision = \"allow\"\nresources = \"deny\"\n",
        1,
    ));
    let (s, b) = gw.req("POST", "/v1/policy/reload", Some("admin"), None, None);
    assert_eq!(s, 200, "{b}");
    let closed = roads(&gw, "agent1", "legacy", "test://greeting", "up.review");
    assert_eq!(closed["read"]["error"]["code"], -32003, "{closed:?}");
    assert!(
        closed["prompt"].get("result").is_some(),
        "prompts still allowed: {closed:?}"
    );
}

/// `held-read`'s lines, keyed by road (`first`, `retry`, `again`) and `elicited` (a list).
fn held_read(
    gw: &Gateway,
    mode: &str,
    uri: &str,
    verb: &str,
) -> (BTreeMap<String, Value>, Vec<Value>) {
    let lines = client(
        gw,
        "token-agent1",
        mode,
        &["held-read", uri, &gw.base, "token-ops", verb],
    );
    let mut roads = BTreeMap::new();
    let mut elicited = Vec::new();
    for l in lines {
        match l["road"].as_str() {
            Some(r) => {
                roads.insert(r.to_owned(), l);
            }
            None => elicited.push(l["elicited"].clone()),
        }
    }
    (roads, elicited)
}

#[test]
fn a_held_resource_read_is_approved_and_read_once_in_both_revisions() {
    let up = Upstream::start();
    let policy = format!(
        "{MCP_POLICY}\n[[rules]]\nid = \"hold-secrets\"\nresources = [\"test://secrets/*\"]\ndecision = \"require_approval\"\ngrant = {{ uses = 1, scope = \"call\" }}\nmessage = \"secrets need a yes\"\n"
    );
    let gw = mcp_gateway_with(&up, "3s", &policy);
    let secret = "test://secrets/api-key";
    for mode in MODES {
        let (roads, elicited) = held_read(&gw, mode, secret, "approve");
        // Asked to open the approval's page, which an approver decides through the API.
        assert!(
            elicited[0]["url"]
                .as_str()
                .unwrap()
                .contains("/inbox/approvals/apr_"),
            "{mode}: {elicited:?}"
        );
        assert_eq!(elicited[0]["decided"], 200, "{mode}: {elicited:?}");
        let read = if mode == "legacy" {
            // 2025-11-25: the URL elicitation error, then the retry reads.
            let first = &roads["first"]["error"];
            assert_eq!(first["code"], -32042, "{roads:?}");
            let e = &first["data"]["elicitations"][0];
            assert_eq!(e["mode"], "url", "{first}");
            assert!(e["elicitationId"].as_str().unwrap().starts_with("apr_"));
            assert!(
                e["message"]
                    .as_str()
                    .unwrap()
                    .contains("resource test://secrets/api-key (up)"),
                "{first}"
            );
            &roads["retry"]
        } else {
            // 2026-07-28: the SDK's own input_required loop reads once approved.
            assert_eq!(elicited[0]["mode"], "url", "{elicited:?}");
            &roads["first"]
        };
        assert_eq!(
            read["result"]["contents"][0]["text"], "sk-live-do-not-leak",
            "{mode}: {roads:?}"
        );
        // Once: the same read again is held again.
        let again = &roads["again"];
        if mode == "legacy" {
            assert_eq!(again["error"]["code"], -32042, "{roads:?}");
        } else {
            assert_eq!(again["result"]["resultType"], "input_required", "{roads:?}");
        }
    }
    // Declined: the approver's reason comes back as the refusal.
    let (roads, _) = held_read(&gw, "legacy", secret, "decline");
    let e = &roads["retry"]["error"];
    assert_eq!(e["code"], -32003, "{roads:?}");
    assert_eq!(e["data"]["code"], "approval.declined", "{roads:?}");
    assert!(
        e["message"].as_str().unwrap().contains("not this one"),
        "{e}"
    );

    // Only the two approved reads reached the upstream.
    let reached = roads_reached(&gw);
    assert_eq!(
        reached.iter().filter(|r| r.contains("secrets")).count(),
        2,
        "{reached:?}"
    );
    // The approval says what it holds: a resource read, its server and URI.
    let (_, list) = gw.req(
        "GET",
        "/v1/approvals?status=approved",
        Some("admin"),
        None,
        None,
    );
    let a = &list["approvals"][0];
    assert_eq!(a["tool"], "", "{a}");
    assert_eq!(
        a["request"],
        json!({"kind": "resource", "server": "up", "uri": secret, "prompt": null}),
        "{a}"
    );
    assert_eq!(a["args"], json!({"uri": secret}), "{a}");
    // Audited as a call of kind `resource`, through the one flow.
    let (_, audit) = gw.req("GET", "/v1/audit?limit=1000", Some("admin"), None, None);
    let records = audit["records"].as_array().unwrap();
    let held: Vec<&Value> = records
        .iter()
        .filter(|r| r["kind"] == "call.decided" && r["request_kind"] == "resource")
        .collect();
    assert!(
        held.iter()
            .all(|r| r["uri"] == secret && r["decision"] == "require_approval"),
        "{held:?}"
    );
    // Each retry joins its approval (an identical waiting request is joined, not asked again).
    assert!(held.len() >= 3, "{}: {held:?}", held.len());
    assert!(records.iter().any(|r| r["kind"] == "call.attached"));
    assert!(records
        .iter()
        .any(|r| r["kind"] == "call.completed" && r["request_kind"] == "resource"));
    let m = gw.metrics();
    assert!(
        m.contains("airlock_requests_total{decision=\"require_approval\",kind=\"resource\"}"),
        "{m}"
    );
}

#[test]
fn approvers_see_a_held_resource_read_as_what_it_is() {
    let up = Upstream::start();
    let policy = format!(
        "{MCP_POLICY}\n[[rules]]\nid = \"hold-secrets\"\nresources = [\"test://secrets/*\"]\ndecision = \"require_approval\"\nmessage = \"secrets need a yes\"\n"
    );
    let gw = mcp_gateway_with(&up, "1s", &policy);
    let secret = "test://secrets/api-key";
    // A client that opens no URL waits the hold, then hears it is pending, with its approval.
    let r = roads(&gw, "agent1", "legacy", secret, "up.review");
    let e = &r["read"]["error"];
    assert_eq!(
        (e["code"].as_i64(), e["data"]["code"].as_str()),
        (Some(-32003), Some("approval.pending")),
        "{r:?}"
    );
    // A subscription to it is never held: refused, and never opened upstream.
    assert_eq!(
        r["subscribe"]["error"]["data"]["code"], "approval.required",
        "{r:?}"
    );
    let approval = e["data"]["approval_id"].as_str().unwrap().to_owned();

    // The command line names the request where a call names its tool.
    let out = output_of(
        std::process::Command::new(airlock_bin())
            .args(["approvals", "show", &approval, "--url", &gw.base])
            .env("AIRLOCK_TOKEN", "token-ops"),
    );
    assert!(
        out.contains("resource test://secrets/api-key (up)") && out.contains("params"),
        "{out}"
    );
    let out = output_of(
        std::process::Command::new(airlock_bin())
            .args(["approvals", "list", "--url", &gw.base])
            .env("AIRLOCK_TOKEN", "token-ops"),
    );
    assert!(
        out.contains("resource test://secrets/api-key (up)"),
        "{out}"
    );

    // The inbox, in a browser at 1280 and 375 px: the kind, the server and the URI; no edit.
    let b = browser_scenario(&gw.base, "request");
    assert_eq!(
        b["heading"], "Approve the resource read test://secrets/api-key from up?",
        "{b}"
    );
    assert!(
        b["row"]
            .as_str()
            .unwrap()
            .contains("resource test://secrets/api-key (up)"),
        "{b}"
    );
    assert_eq!(b["facts"]["Kind"], "resource read", "{b}");
    assert_eq!(b["facts"]["Server"], "up", "{b}");
    assert_eq!(b["facts"]["URI"], secret, "{b}");
    assert!(
        b["sections"]
            .as_array()
            .unwrap()
            .iter()
            .any(|h| h == "Params"),
        "{b}"
    );
    assert_eq!(b["can_edit"], false, "{b}");
    assert!(b["page_width"].as_f64().unwrap() <= 375.0, "{b}");
    assert!(
        b["notice"]
            .as_str()
            .unwrap()
            .starts_with("This resource read is approved."),
        "{b}"
    );
    // Approved there, the same read asked again reads, once.
    let r = roads(&gw, "agent1", "legacy", secret, "up.review");
    assert_eq!(
        r["read"]["result"]["contents"][0]["text"], "sk-live-do-not-leak",
        "{r:?}"
    );
}

#[test]
fn no_upstream_receives_the_agents_token_or_cookies_in_either_revision() {
    let up = Upstream::start();
    let gw = mcp_gateway(&up, "2s");
    for mode in MODES {
        // The SDK's client sends its bearer token and a cookie; the upstream sees neither.
        let r = call(&gw, "agent1", mode, "up.headers", json!({}));
        let text: Value =
            serde_json::from_str(r["result"]["content"][0]["text"].as_str().unwrap()).unwrap();
        let seen = &text["headers"];
        assert!(seen["host"].is_string(), "{mode}: {r}");
        assert_eq!(seen.get("authorization"), None, "{mode}: {seen}");
        assert_eq!(seen.get("cookie"), None, "{mode}: {seen}");
        assert!(!seen.to_string().contains("token-agent1"), "{mode}: {seen}");
    }
}

#[test]
fn lists_leave_out_what_a_principal_can_never_call_in_both_revisions() {
    let up = Upstream::start();
    // agent2 may never call `*.count`; a rule that reads args hides nothing.
    let policy = format!(
        "{MCP_POLICY}\n[[rules]]\nid = \"agent2-no-count\"\ntools = [\"*.count\"]\nwhen = 'principal.id == \"agent2\"'\ndecision = \"deny\"\nmessage = \"not for agent2\"\n"
    );
    let gw = mcp_gateway_with(&up, "2s", &policy);
    let names = |who: &str, mode: &str| -> Vec<String> {
        let tools = client(&gw, &format!("token-{who}"), mode, &["list"])
            .pop()
            .unwrap();
        tools["tools"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t.as_str().unwrap().to_owned())
            .collect()
    };
    for mode in MODES {
        let one = names("agent1", mode);
        let two = names("agent2", mode);
        for t in ["up.count", "local.count"] {
            assert!(
                one.contains(&t.to_owned()),
                "{mode}: agent1 sees {t}: {one:?}"
            );
            assert!(
                !two.contains(&t.to_owned()),
                "{mode}: agent2 does not: {two:?}"
            );
        }
        // `*.weather` is denied only for one city (a rule reading args): seen by both.
        for list in [&one, &two] {
            assert!(list.contains(&"up.echo".to_owned()), "{mode}: {list:?}");
            assert!(list.contains(&"up.weather".to_owned()), "{mode}: {list:?}");
        }
        assert_eq!(
            one.len(),
            two.len() + 2,
            "{mode}: only the two hidden: {one:?} {two:?}"
        );
        // The JSON API's list shows each agent the same.
        if mode == "legacy" {
            let api = |who: &str| -> Vec<String> {
                let (s, b) = gw.req("GET", "/v1/tools", Some(who), None, None);
                assert_eq!(s, 200, "{b}");
                b["tools"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|t| t["name"].as_str().unwrap().to_owned())
                    .collect()
            };
            let (one_api, two_api) = (api("agent1"), api("agent2"));
            assert!(one_api.contains(&"up.count".to_owned()), "{one_api:?}");
            assert!(!two_api.contains(&"up.count".to_owned()), "{two_api:?}");
            assert!(two_api.contains(&"up.echo".to_owned()), "{two_api:?}");
            // An approver sees every tool.
            assert!(api("dba1").contains(&"up.count".to_owned()));
        }
        // Calling a hidden tool by name is denied, as before.
        let r = call(&gw, "agent2", mode, "up.count", json!({}));
        assert_eq!(r["result"]["isError"], true, "{r}");
        assert_eq!(error_code(&r), "policy.denied", "{r}");
    }
    // A reload that drops the rule shows the tools again (the kept answer is per policy).
    gw.write_policy(MCP_POLICY);
    let (s, b) = gw.req("POST", "/v1/policy/reload", Some("admin"), None, None);
    assert_eq!(s, 200, "{b}");
    let two = names("agent2", "legacy");
    assert!(two.contains(&"up.count".to_owned()), "{two:?}");
}

#[test]
fn a_held_call_times_out_pending_and_the_identical_recall_runs_once_approved() {
    let up = Upstream::start();
    let gw = mcp_gateway(&up, "1s");
    for mode in MODES {
        let args = json!({"text": format!("held-{mode}"), "n": 500});
        let first = call(&gw, "agent1", mode, "up.echo", args.clone());
        assert_eq!(error_code(&first), "approval.pending", "{first}");
        let err = &first["result"]["structuredContent"]["error"];
        let approval = err["approval_id"].as_str().unwrap().to_owned();
        assert!(err["link"]
            .as_str()
            .unwrap()
            .ends_with(&format!("/inbox/approvals/{approval}")));
        // Calling again before a decision joins the same approval.
        let again = call(&gw, "agent1", mode, "up.echo", args.clone());
        assert_eq!(
            again["result"]["structuredContent"]["error"]["approval_id"],
            approval.as_str()
        );
        assert_eq!(gw.approve("ops", &approval).0, 200);
        let done = call(&gw, "agent1", mode, "up.echo", args.clone());
        assert_eq!(done["result"]["isError"], false, "{done}");
        // The approved call ran once; a fourth identical call needs a new approval.
        let later = call(&gw, "agent1", mode, "up.echo", args.clone());
        assert_eq!(error_code(&later), "approval.pending");
        assert_ne!(
            later["result"]["structuredContent"]["error"]["approval_id"],
            approval.as_str()
        );
    }
    let log = upstream_log(&gw, "up");
    assert_eq!(log.len(), 2, "{log:?}");
}

#[test]
fn a_2026_client_approves_through_url_elicitation_and_reads_a_decline() {
    let up = Upstream::start();
    let gw = mcp_gateway(&up, "5s");
    let out = client(
        &gw,
        "token-agent1",
        "2026-07-28",
        &[
            "approve-on-elicit",
            "up.echo",
            r#"{"text":"mrtr","n":777}"#,
            &gw.base,
            "token-ops",
            "approve",
        ],
    );
    assert_eq!(out[0]["elicited"]["mode"], "url", "{out:?}");
    assert!(out[0]["elicited"]["url"]
        .as_str()
        .unwrap()
        .contains("/inbox/approvals/apr_"));
    assert_eq!(out[0]["elicited"]["decided"], 200);
    assert_eq!(out[1]["result"]["isError"], false, "{out:?}");
    assert_eq!(out[1]["result"]["resultType"], "complete");

    let out = client(
        &gw,
        "token-agent1",
        "2026-07-28",
        &[
            "approve-on-elicit",
            "up.echo",
            r#"{"text":"mrtr-declined","n":778}"#,
            &gw.base,
            "token-ops",
            "decline",
            "too many",
        ],
    );
    assert_eq!(out[1]["result"]["isError"], true, "{out:?}");
    assert_eq!(error_code(&out[1]), "approval.declined");
    assert_eq!(
        out[1]["result"]["structuredContent"]["error"]["reason"],
        "too many"
    );
    let log = upstream_log(&gw, "up");
    assert_eq!(log, vec![json!({"text": "mrtr", "n": 777})]);
}

#[test]
fn request_state_is_sealed_single_use_and_bound_to_its_principal_and_arguments() {
    let up = Upstream::start();
    let gw = mcp_gateway(&up, "1s");
    let out = client(
        &gw,
        "token-agent1",
        "2026-07-28",
        &[
            "states",
            "up.echo",
            r#"{"text":"s","n":900}"#,
            "token-agent2",
        ],
    );
    let first = &out[0]["first"];
    assert_eq!(first["resultType"], "input_required", "{out:?}");
    assert_eq!(
        first["inputRequests"]["airlock_approval"]["params"]["mode"],
        "url"
    );
    for label in ["tampered", "other_args", "replayed", "other_principal"] {
        let r = out.iter().find_map(|o| o.get(label)).unwrap();
        assert_eq!(r["error"]["code"], -32602, "{label}: {r}");
        assert_eq!(
            r["error"]["data"]["code"], "approval.invalid_state",
            "{label}: {r}"
        );
    }
    // The valid state, used once, finds the call still pending: a fresh state.
    let valid = out.iter().find_map(|o| o.get("valid")).unwrap();
    assert_eq!(valid["result"]["resultType"], "input_required", "{valid}");
    assert_ne!(valid["result"]["requestState"], first["requestState"]);
    // Each refusal is audited.
    let (_, audit) = gw.req("GET", "/v1/audit?limit=1000", Some("admin"), None, None);
    let refused = audit["records"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["kind"] == "call.rejected" && r["code"] == "approval.invalid_state")
        .count();
    assert_eq!(refused, 4, "{audit}");
    assert!(upstream_log(&gw, "up").is_empty());
}

#[test]
fn a_stdio_upstream_that_crashes_mid_call_fails_that_call_and_comes_back() {
    let up = Upstream::start();
    let gw = mcp_gateway(&up, "2s");
    let r = call(&gw, "agent1", "legacy", "local.crash", json!({}));
    assert_eq!(r["result"]["isError"], true, "{r}");
    assert_eq!(error_code(&r), "upstream.unavailable");
    // The other upstream is unaffected.
    let r = call(
        &gw,
        "agent1",
        "legacy",
        "up.echo",
        json!({"text": "still here"}),
    );
    assert_eq!(r["result"]["isError"], false, "{r}");
    // The child is started again (after its backoff) and serves.
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let r = call(
            &gw,
            "agent1",
            "legacy",
            "local.echo",
            json!({"text": "back"}),
        );
        if r["result"]["isError"] == false {
            break;
        }
        assert_eq!(error_code(&r), "upstream.unavailable", "{r}");
        assert!(
            Instant::now() < deadline,
            "the stdio upstream did not come back"
        );
        std::thread::sleep(Duration::from_millis(500));
    }
}

#[test]
fn the_endpoint_refuses_what_it_must_before_any_upstream_sees_it() {
    let up = Upstream::start();
    let gw = mcp_gateway(&up, "2s");
    let url = format!("{}/mcp", gw.base);
    let c = reqwest::blocking::Client::new();
    let modern_meta = json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {},
    });
    let body = |method: &str, params: Value| {
        json!({"jsonrpc": "2.0", "id": 7, "method": method, "params": params}).to_string()
    };
    let send = |token: Option<&str>, headers: &[(&str, &str)], body: String| {
        let mut r = c
            .post(&url)
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .body(body);
        if let Some(t) = token {
            r = r.bearer_auth(t);
        }
        for (k, v) in headers {
            r = r.header(*k, *v);
        }
        let resp = r.send().unwrap();
        let status = resp.status().as_u16();
        let www = resp
            .headers()
            .get("www-authenticate")
            .map(|v| v.to_str().unwrap().to_owned());
        let text = resp.text().unwrap();
        (
            status,
            www,
            serde_json::from_str::<Value>(&text).unwrap_or(Value::Null),
        )
    };
    let ping = body("server/discover", json!({"_meta": modern_meta}));
    let modern = [
        ("mcp-protocol-version", "2026-07-28"),
        ("mcp-method", "server/discover"),
    ];

    let (s, www, _) = send(None, &modern, ping.clone());
    assert_eq!((s, www.as_deref()), (401, Some("Bearer")));
    let (s, _, _) = send(Some("token-nobody"), &modern, ping.clone());
    assert_eq!(s, 401);
    let (s, _, b) = send(Some("token-ops"), &modern, ping.clone());
    assert_eq!((s, code(&b)), (403, "auth.forbidden"));
    let (s, _, b) = send(
        Some("token-agent1"),
        &[modern[0], modern[1], ("origin", "https://evil.example")],
        ping.clone(),
    );
    assert_eq!((s, code(&b)), (403, "auth.forbidden_origin"));
    let (s, _, b) = send(Some("token-agent1"), &modern, ping.clone());
    assert_eq!(
        (s, b["result"]["resultType"].as_str()),
        (200, Some("complete"))
    );
    // The 2026-07-28 schema's place for the server's identity.
    assert_eq!(
        b["result"]["_meta"]["io.modelcontextprotocol/serverInfo"]["name"], "airlock",
        "{b}"
    );

    // What the 2026-07-28 revision removed does not exist when asked in that revision: 404
    // with -32601, no session opened, nothing forwarded.
    for method in [
        "initialize",
        "ping",
        "logging/setLevel",
        "resources/subscribe",
        "resources/unsubscribe",
    ] {
        let params = json!({"_meta": modern_meta, "uri": "test://greeting", "level": "info",
            "protocolVersion": "2026-07-28", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}});
        let resp = c
            .post(&url)
            .bearer_auth("token-agent1")
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .header("mcp-protocol-version", "2026-07-28")
            .header("mcp-method", method)
            .body(body(method, params))
            .send()
            .unwrap();
        assert_eq!(resp.status().as_u16(), 404, "{method}");
        assert!(resp.headers().get("mcp-session-id").is_none(), "{method}");
        let b: Value = resp.json().unwrap();
        assert_eq!(b["error"]["code"], -32601, "{method}: {b}");
    }
    let note = json!({"jsonrpc": "2.0", "method": "notifications/initialized",
        "params": {"_meta": modern_meta}})
    .to_string();
    let (s, _, _) = send(
        Some("token-agent1"),
        &[modern[0], ("mcp-method", "notifications/initialized")],
        note,
    );
    assert_eq!(s, 404);

    // A page or an endpoint reached through another host name (DNS rebinding) is refused.
    let (s, _, b) = send(
        Some("token-agent1"),
        &[modern[0], modern[1], ("host", "evil.example.com")],
        ping.clone(),
    );
    assert_eq!((s, code(&b)), (403, "auth.forbidden_host"), "{b}");
    let r = c
        .get(format!("{}/inbox/", gw.base))
        .header("host", "evil.example.com:8080")
        .send()
        .unwrap();
    assert_eq!(r.status().as_u16(), 403);
    let port = gw.base.rsplit(':').next().unwrap().to_owned();
    let (s, _, _) = send(
        Some("token-agent1"),
        &[modern[0], modern[1], ("host", &format!("localhost:{port}"))],
        ping.clone(),
    );
    assert_eq!(s, 200, "localhost names a gateway listening on loopback");

    // Headers that disagree with the body.
    let (s, _, b) = send(
        Some("token-agent1"),
        &[modern[0], ("mcp-method", "tools/list")],
        ping.clone(),
    );
    assert_eq!((s, b["error"]["code"].as_i64()), (400, Some(-32020)));
    let call = body(
        "tools/call",
        json!({"name": "up.echo", "arguments": {}, "_meta": modern_meta}),
    );
    let (s, _, b) = send(
        Some("token-agent1"),
        &[
            modern[0],
            ("mcp-method", "tools/call"),
            ("mcp-name", "up.count"),
        ],
        call,
    );
    assert_eq!((s, b["error"]["code"].as_i64()), (400, Some(-32020)));
    // An unsupported revision names the supported ones.
    let (s, _, b) = send(
        Some("token-agent1"),
        &[("mcp-protocol-version", "2024-01-01")],
        body("tools/list", json!({})),
    );
    assert_eq!((s, b["error"]["code"].as_i64()), (400, Some(-32022)));
    assert_eq!(
        b["error"]["data"]["supported"],
        json!(["2025-11-25", "2026-07-28"])
    );
    // Malformed JSON-RPC, an unknown method, a duplicate key outside `arguments`.
    let (s, _, b) = send(Some("token-agent1"), &modern, "{not json".into());
    assert_eq!((s, b["error"]["code"].as_i64()), (400, Some(-32700)));
    let (s, _, b) = send(
        Some("token-agent1"),
        &[modern[0], ("mcp-method", "tools/destroy")],
        body("tools/destroy", json!({"_meta": modern_meta})),
    );
    assert_eq!((s, b["error"]["code"].as_i64()), (404, Some(-32601)));
    let dup = format!(
        r#"{{"jsonrpc":"2.0","id":1,"method":"ping","method":"ping","params":{{"_meta":{}}}}}"#,
        modern_meta
    );
    let (s, _, b) = send(Some("token-agent1"), &modern, dup);
    assert_eq!(s, 400);
    assert_eq!(b["error"]["code"], -32600);
    assert_eq!(b["error"]["data"]["code"], "request.duplicate_key");
    // GET has no stream here.
    let r = c.get(&url).bearer_auth("token-agent1").send().unwrap();
    assert_eq!(r.status().as_u16(), 405);
    // A 2025 session is its principal's only.
    let init = body(
        "initialize",
        json!({"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}),
    );
    let resp = c
        .post(&url)
        .bearer_auth("token-agent1")
        .header("content-type", "application/json")
        .body(init)
        .send()
        .unwrap();
    let sid = resp.headers()["mcp-session-id"]
        .to_str()
        .unwrap()
        .to_owned();
    let list = body("tools/list", json!({}));
    let (s, _, _) = send(
        Some("token-agent2"),
        &[
            ("mcp-session-id", &sid),
            ("mcp-protocol-version", "2025-11-25"),
        ],
        list.clone(),
    );
    assert_eq!(s, 404);
    let (s, _, b) = send(
        Some("token-agent1"),
        &[
            ("mcp-session-id", &sid),
            ("mcp-protocol-version", "2025-11-25"),
        ],
        list,
    );
    assert_eq!(s, 200);
    assert!(b["result"]["tools"].as_array().unwrap().len() >= 8);
    // Inside a 2025 session, a request naming another revision is refused.
    let (s, _, _) = send(
        Some("token-agent1"),
        &[
            ("mcp-session-id", &sid),
            ("mcp-protocol-version", "2026-07-28"),
        ],
        body("tools/list", json!({})),
    );
    assert_eq!(s, 400);
    assert!(upstream_log(&gw, "up").is_empty());
}

#[test]
fn the_stdio_bridge_carries_both_revisions_to_the_gateway() {
    let up = Upstream::start();
    let gw = mcp_gateway(&up, "2s");
    let bin = airlock_bin();
    for mode in MODES {
        let out = client(
            &gw,
            "token-agent1",
            mode,
            &[
                "bridge",
                bin.to_str().unwrap(),
                "up.echo",
                &json!({"text": format!("bridge-{mode}")}).to_string(),
            ],
        );
        assert!(out[0]["tools"]
            .as_array()
            .unwrap()
            .contains(&json!("local.echo")));
        assert_eq!(out[1]["result"]["isError"], false, "{out:?}");
    }
    let log = upstream_log(&gw, "up");
    assert_eq!(log.len(), 2, "{log:?}");
    assert_eq!(log[0]["text"], "bridge-legacy");
}

/// Runs the Mastra agent (tests/peers/mastra_agent.mjs) with the Node 22 that
/// scripts/test.sh installs; the script is copied beside its node_modules.
fn mastra(gw: &Gateway, token: &str, tool: &str, args: &Value) -> std::process::Child {
    let (node, script) = node_script("mastra_agent.mjs", "@mastra/core");
    Command::new(node)
        .arg(&script)
        .args([&format!("{}/mcp", gw.base), token, tool, &args.to_string()])
        .env("MASTRA_TELEMETRY_DISABLED", "1")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

fn mastra_result(child: std::process::Child) -> Value {
    let out = child.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "the Mastra agent failed: {stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_str(stdout.lines().last().unwrap()).unwrap()
}

/// What the upstream's tool answered, as the agent's tool result carries it.
fn tool_output(r: &Value) -> Value {
    let text = r["toolResults"][0]["content"][0]["text"]
        .as_str()
        .unwrap_or("null");
    serde_json::from_str(text).unwrap_or(Value::Null)
}

/// Waits for one pending approval and returns its id.
fn pending_approval(gw: &Gateway) -> String {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let (_, b) = gw.req(
            "GET",
            "/v1/approvals?status=pending",
            Some("ops"),
            None,
            None,
        );
        if let Some(a) = b["approvals"].as_array().and_then(|a| a.first()) {
            return a["id"].as_str().unwrap().to_owned();
        }
        assert!(Instant::now() < deadline, "no approval appeared");
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn a_mastra_agent_calls_an_allowed_tool_and_one_held_for_approval() {
    let up = Upstream::start();
    let gw = mcp_gateway(&up, "20s");
    // Allowed: the agent's tool result is the upstream's answer.
    let r = mastra_result(mastra(
        &gw,
        "token-agent1",
        "up.echo",
        &json!({"text": "from mastra", "n": 1}),
    ));
    assert!(r["tools"].as_array().unwrap().len() >= 8, "{r}");
    assert_eq!(tool_output(&r)["text"], "from mastra", "{r}");

    // Needs approval: held until an approver decides, then the agent gets the result.
    let child = mastra(
        &gw,
        "token-agent1",
        "up.echo",
        &json!({"text": "approved", "n": 500}),
    );
    let approval = pending_approval(&gw);
    assert_eq!(gw.approve("ops", &approval).0, 200);
    let r = mastra_result(child);
    assert_eq!(tool_output(&r)["text"], "approved", "{r}");

    // Declined: the agent reads the reason.
    let child = mastra(
        &gw,
        "token-agent1",
        "up.echo",
        &json!({"text": "declined", "n": 501}),
    );
    let approval = pending_approval(&gw);
    let (s, _) = gw.req(
        "POST",
        &format!("/v1/approvals/{approval}/decline"),
        Some("ops"),
        Some(r#"{"reason":"not on a friday"}"#),
        None,
    );
    assert_eq!(s, 200);
    let r = mastra_result(child);
    assert!(
        r["text"].as_str().unwrap().contains("not on a friday"),
        "{r}"
    );
    // The upstream ran the allowed and the approved call, not the declined one.
    let log = upstream_log(&gw, "up");
    assert_eq!(log.len(), 2, "{log:?}");
}

#[test]
fn a_2025_client_is_sent_the_url_elicitation_on_its_held_call_stream() {
    let up = Upstream::start();
    let gw = mcp_gateway(&up, "10s");
    let out = client(
        &gw,
        "token-agent1",
        "legacy",
        &[
            "approve-on-elicit",
            "up.echo",
            r#"{"text":"elicited-2025","n":901}"#,
            &gw.base,
            "token-ops",
            "approve",
        ],
    );
    assert_eq!(out[0]["elicited"]["mode"], "url", "{out:?}");
    assert!(out[0]["elicited"]["url"]
        .as_str()
        .unwrap()
        .contains("/inbox/approvals/apr_"));
    assert_eq!(out[0]["elicited"]["decided"], 200);
    assert_eq!(out[1]["result"]["isError"], false, "{out:?}");
    let log = upstream_log(&gw, "up");
    assert_eq!(log, vec![json!({"text": "elicited-2025", "n": 901})]);
}

/// `initialize` for agent1 by hand; the 2025-11-25 session id.
fn open_2025_session(c: &reqwest::blocking::Client, url: &str) -> String {
    let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}});
    let resp = c
        .post(url)
        .bearer_auth("token-agent1")
        .json(&init)
        .send()
        .unwrap();
    resp.headers()["mcp-session-id"]
        .to_str()
        .unwrap()
        .to_owned()
}

#[test]
fn a_2025_clients_cancel_ends_its_held_call() {
    let up = Upstream::start();
    let gw = mcp_gateway(&up, "30s");
    let url = format!("{}/mcp", gw.base);
    let c = reqwest::blocking::Client::builder()
        .timeout(Duration::from_secs(40))
        .build()
        .unwrap();
    let sid = open_2025_session(&c, &url);
    for (n, accept) in [
        (500, "application/json"),
        (501, "application/json, text/event-stream"),
    ] {
        let (u, s, a, client) = (url.clone(), sid.clone(), accept.to_owned(), c.clone());
        let held = std::thread::spawn(move || {
            let t = Instant::now();
            let r = client
                .post(&u)
                .bearer_auth("token-agent1")
                .header("mcp-session-id", &s)
                .header("mcp-protocol-version", "2025-11-25")
                .header("accept", a)
                .json(
                    &json!({"jsonrpc": "2.0", "id": n, "method": "tools/call", "params": {
                    "name": "up.echo", "arguments": {"n": n}, "_meta": {"progressToken": "p"}}}),
                )
                .send()
                .unwrap();
            let status = r.status().as_u16();
            let body = r.text().unwrap();
            (status, body, t.elapsed())
        });
        pending_approval(&gw);
        let r = c
            .post(&url)
            .bearer_auth("token-agent1")
            .header("mcp-session-id", &sid)
            .header("mcp-protocol-version", "2025-11-25")
            .json(
                &json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
                "params": {"requestId": n, "reason": "the user stopped it"}}),
            )
            .send()
            .unwrap();
        assert_eq!(r.status().as_u16(), 202);
        let (status, body, took) = held.join().unwrap();
        assert!(took < Duration::from_secs(10), "{accept}: {took:?}");
        assert!(
            !body.contains("\"result\""),
            "{accept}: no answer after a cancel: {body}"
        );
        assert!(status == 202 || status == 200, "{accept}: {status}");
        // The approval stays for an approver; this request no longer waits for it.
        let (_, b) = gw.req(
            "GET",
            "/v1/approvals?status=pending",
            Some("ops"),
            None,
            None,
        );
        for a in b["approvals"].as_array().unwrap() {
            let (s, _) = gw.req(
                "POST",
                &format!("/v1/approvals/{}/decline", a["id"].as_str().unwrap()),
                Some("ops"),
                Some(r#"{"reason":"cleanup"}"#),
                None,
            );
            assert_eq!(s, 200);
        }
    }
    assert!(gw.metrics().contains("airlock_held_requests 0"));
    assert!(upstream_log(&gw, "up").is_empty());
}

/// How many `wait` calls an upstream saw cancelled.
fn upstream_cancelled(gw: &Gateway, server: &str) -> u64 {
    let r = call(
        gw,
        "agent2",
        "legacy",
        &format!("{server}.count"),
        json!({}),
    );
    let text = r["result"]["content"][0]["text"].as_str().unwrap();
    serde_json::from_str::<Value>(text).unwrap()["cancelled"]
        .as_u64()
        .unwrap()
}

#[test]
fn a_clients_cancel_reaches_the_upstream_over_http_and_stdio() {
    let up = Upstream::start();
    let gw = mcp_gateway(&up, "5s");
    let url = format!("{}/mcp", gw.base);
    let c = reqwest::blocking::Client::builder()
        .timeout(Duration::from_secs(40))
        .build()
        .unwrap();
    let sid = open_2025_session(&c, &url);
    for (n, server) in [(10, "up"), (11, "local")] {
        let (u, s, client, tool) = (
            url.clone(),
            sid.clone(),
            c.clone(),
            format!("{server}.wait"),
        );
        let running = std::thread::spawn(move || {
            let t = Instant::now();
            let _ = client
                .post(&u)
                .bearer_auth("token-agent1")
                .header("mcp-session-id", &s)
                .header("mcp-protocol-version", "2025-11-25")
                .header("accept", "application/json")
                .json(&json!({"jsonrpc": "2.0", "id": n, "method": "tools/call",
                    "params": {"name": tool, "arguments": {"ms": 20000}}}))
                .send();
            t.elapsed()
        });
        std::thread::sleep(Duration::from_millis(1500));
        let r = c
            .post(&url)
            .bearer_auth("token-agent1")
            .header("mcp-session-id", &sid)
            .header("mcp-protocol-version", "2025-11-25")
            .json(
                &json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
                "params": {"requestId": n}}),
            )
            .send()
            .unwrap();
        assert_eq!(r.status().as_u16(), 202);
        assert!(running.join().unwrap() < Duration::from_secs(10));
        let deadline = Instant::now() + Duration::from_secs(10);
        while upstream_cancelled(&gw, server) < 1 {
            assert!(Instant::now() < deadline, "{server} never saw the cancel");
            std::thread::sleep(Duration::from_millis(200));
        }
        // The cancelled call is not left executing: its outcome is recorded as unknown.
        let (_, audit) = gw.req("GET", "/v1/audit?limit=1000", Some("admin"), None, None);
        let tool = format!("{server}.wait");
        let ended: Vec<&Value> = audit["records"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|r| r["tool"] == tool.as_str() && r["kind"] == "call.failed")
            .collect();
        assert_eq!(ended.len(), 1, "{server}: {audit}");
        assert_eq!(ended[0]["error"], "call.interrupted");
    }
}

/// The tool's structured answer in a client's printed result.
fn structured(r: &Value) -> Value {
    let res = &r["result"];
    if res["structuredContent"].is_object() {
        return res["structuredContent"].clone();
    }
    serde_json::from_str(res["content"][0]["text"].as_str().unwrap_or("null"))
        .unwrap_or(Value::Null)
}

#[test]
fn an_mcp_client_answers_a_suspended_calls_form_and_the_tool_continues() {
    let up = Upstream::start();
    let gw = mcp_gateway(&up, "5s");
    // The upstream's tool asks "which environment?" by form elicitation mid-call; airlock
    // suspends the call and asks the agent's own client, in either revision, and the answer
    // resumes it (over HTTP and stdio upstreams alike).
    for mode in MODES {
        for server in ["up", "local"] {
            let lines = client(
                &gw,
                "token-agent1",
                mode,
                &[
                    "answer-form",
                    &format!("{server}.deploy"),
                    r#"{"service":"api"}"#,
                    r#"{"environment":"staging"}"#,
                ],
            );
            let elicited = &lines[0]["elicited"];
            assert_eq!(
                elicited["message"], "which environment?",
                "{mode} {server}: {lines:?}"
            );
            assert_eq!(
                elicited["requestedSchema"]["properties"]["environment"]["type"],
                "string"
            );
            let result = lines.last().unwrap();
            assert_ne!(
                result["result"]["isError"], true,
                "{mode} {server}: {result}"
            );
            let answer = structured(result);
            assert_eq!(answer["deployed"], true, "{mode} {server}: {result}");
            assert_eq!(answer["environment"], "staging");
        }
    }
    // The 2025 sessions, and the 2026 client of the stdio upstream (a 2025 session behind
    // the gateway), went through suspension and resume, audited. The 2026 client of the HTTP
    // upstream, which speaks 2026 too, got the upstream's own `input_required` relayed under
    // its key (`env`), and its answer went back the same way (DESIGN §15): audited as
    // `mcp.relayed` both ways, keys and methods only.
    let (s, b) = gw.req("GET", "/v1/audit?limit=1000", Some("admin"), None, None);
    assert_eq!(s, 200);
    let records = b["records"].as_array().unwrap();
    let kinds: Vec<&str> = records
        .iter()
        .map(|r| r["kind"].as_str().unwrap())
        .collect();
    assert_eq!(
        kinds.iter().filter(|k| **k == "call.suspended").count(),
        3,
        "{kinds:?}"
    );
    assert_eq!(kinds.iter().filter(|k| **k == "call.resumed").count(), 3);
    let relayed: Vec<&Value> = records
        .iter()
        .filter(|r| r["kind"] == "mcp.relayed")
        .collect();
    assert_eq!(relayed.len(), 2, "{relayed:?}");
    assert_eq!(relayed[0]["direction"], "to_client");
    assert_eq!(relayed[0]["keys"], json!(["env"]));
    assert_eq!(relayed[0]["methods"], json!(["elicitation/create"]));
    assert_eq!(relayed[1]["direction"], "to_upstream");
    assert_eq!(relayed[1]["keys"], json!(["env"]));
    assert!(
        relayed.iter().all(|r| !r.to_string().contains("staging")),
        "no payload in the audit"
    );

    // A declined form cancels a suspended call: the model reads why. A relayed one goes to
    // the upstream, which says what it makes of it.
    for mode in MODES {
        let lines = client(
            &gw,
            "token-agent1",
            mode,
            &[
                "answer-form",
                "up.deploy",
                r#"{"service":"db"}"#,
                r#""decline""#,
            ],
        );
        let result = lines.last().unwrap();
        if mode == "legacy" {
            assert_eq!(error_code(result), "call.cancelled", "{mode}: {result}");
        } else {
            // Relayed, the decline is the upstream's to answer.
            assert_eq!(structured(result)["deployed"], false, "{mode}: {result}");
            assert_eq!(structured(result)["action"], "decline", "{mode}: {result}");
        }
    }
}

#[test]
fn an_upstreams_sampling_request_reaches_the_agents_client_and_back() {
    let up = Upstream::start();
    let gw = mcp_gateway(&up, "5s");
    // A 2025 session whose client can sample: the upstream's request is relayed on the
    // call's stream and the client's answer goes back to the tool (HTTP and stdio upstreams).
    for server in ["up", "local"] {
        let lines = client(
            &gw,
            "token-agent1",
            "legacy",
            &[
                "sample",
                &format!("{server}.ask_model"),
                r#"{"prompt":"the answer?"}"#,
            ],
        );
        let asked = &lines[0]["sampled"];
        assert_eq!(
            asked["messages"][0]["content"]["text"], "the answer?",
            "{server}: {lines:?}"
        );
        let answer = structured(lines.last().unwrap());
        assert_eq!(answer["sampled"], true, "{server}: {lines:?}");
        assert_eq!(answer["model"], "scripted-model");
        assert_eq!(answer["text"], "forty-two");
    }
    // A client that cannot sample is never asked: the tool hears it is not relayed.
    let r = call(
        &gw,
        "agent1",
        "legacy",
        "up.ask_model",
        json!({"prompt": "x"}),
    );
    let answer = structured(&r);
    assert_eq!(answer["sampled"], false, "{r}");
    assert!(
        answer["error"].as_str().unwrap().contains("does not relay"),
        "{r}"
    );
}

#[test]
fn what_an_upstreams_relay_leaves_out_never_reaches_the_client_and_is_audited() {
    let up = Upstream::start();
    // Both upstreams may ask for elicitation and roots, not sampling.
    let gw = mcp_gateway_extra(
        &up,
        "5s",
        MCP_POLICY,
        "relay = [\"elicitation\", \"roots\"]",
    );
    for server in ["up", "local"] {
        // A client that could sample is never asked: the tool hears -32601 and goes on.
        let lines = client(
            &gw,
            "token-agent1",
            "legacy",
            &[
                "sample",
                &format!("{server}.ask_model"),
                r#"{"prompt":"the answer?"}"#,
            ],
        );
        assert!(
            lines
                .iter()
                .all(|l| l.get("sampled").is_none_or(|s| !s.is_object())),
            "{server}: the client was asked: {lines:?}"
        );
        let answer = structured(lines.last().unwrap());
        assert_eq!(answer["sampled"], false, "{server}: {lines:?}");
        assert!(
            answer["error"]
                .as_str()
                .unwrap()
                .contains("its `relay` leaves it out"),
            "{server}: {lines:?}"
        );
    }
    // Each refusal is audited with its upstream and method, nothing of what it carried.
    let (_, audit) = gw.req("GET", "/v1/audit?limit=1000", Some("admin"), None, None);
    let refused: Vec<&Value> = audit["records"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["kind"] == "mcp.relayed" && r["direction"] == "refused")
        .collect();
    let servers: Vec<&str> = refused
        .iter()
        .map(|r| r["server"].as_str().unwrap())
        .collect();
    assert!(
        servers.contains(&"up") && servers.contains(&"local"),
        "{refused:?}"
    );
    for r in &refused {
        assert_eq!(r["methods"], json!(["sampling/createMessage"]), "{r}");
        assert!(!r.to_string().contains("the answer?"), "{r}");
    }

    // A 2026 upstream's `input_required` asking for what its relay leaves out cannot be
    // answered -32601 mid-call: the call fails, saying why, and the refusal is audited.
    let modern = Upstream::peer("mcp_modern_upstream.py", &[]);
    let mut s = mcp_base_config("5s");
    s.push_str(&format!(
        "[[mcp_servers]]\nname = \"modern\"\nurl = \"http://127.0.0.1:{}/mcp\"\ntimeout = \"10s\"\nrelay = [\"sampling\"]\n",
        modern.port
    ));
    let gw2 = Gateway::start_with(&s, MCP_POLICY);
    gw2.wait_reached(Duration::from_secs(20));
    let (st, b) = gw2.req(
        "POST",
        "/v1/calls",
        Some("agent1"),
        Some(r#"{"tool":"modern.deploy","args":{"service":"web"}}"#),
        None,
    );
    assert_eq!((st, code(&b)), (502, "upstream.unavailable"), "{b}");
    assert!(
        b["error"]["message"]
            .as_str()
            .unwrap()
            .contains("`elicitation/create`, which its `relay` leaves out"),
        "{b}"
    );
    let (_, audit) = gw2.req("GET", "/v1/audit?limit=1000", Some("admin"), None, None);
    assert!(
        audit["records"]
            .as_array()
            .unwrap()
            .iter()
            .any(|r| r["kind"] == "mcp.relayed"
                && r["direction"] == "refused"
                && r["server"] == "modern"
                && r["methods"] == json!(["elicitation/create"])),
        "{audit}"
    );

    // A relay that names something else is refused at start, naming the key.
    let cfg = gw.dir.path().join("bad.toml");
    std::fs::write(
        &cfg,
        format!(
            "{}[[mcp_servers]]\nname = \"x\"\nurl = \"http://127.0.0.1:9/mcp\"\nrelay = [\"tools\"]\n",
            mcp_base_config("5s")
        ),
    )
    .unwrap();
    let err = refused_at_start(&cfg);
    assert!(
        err.contains("mcp_servers[0].relay") && err.contains("`tools`"),
        "{err}"
    );
}

#[test]
fn a_2025_upstreams_requests_reach_a_2026_client_as_input_required_while_the_call_runs_on() {
    let up = Upstream::start();
    let gw = mcp_gateway(&up, "5s");
    // The stdio upstream speaks 2025: its sampling and roots requests arrive on the open
    // call. A 2026 client is asked them by `input_required`, answers in its retry, and the
    // call, still running, gets the answers (the SDK's client retries on its own).
    let lines = client(
        &gw,
        "token-agent1",
        "2026-07-28",
        &["sample", "local.ask_model", r#"{"prompt":"the answer?"}"#],
    );
    assert_eq!(
        lines[0]["sampled"]["messages"][0]["content"]["text"], "the answer?",
        "{lines:?}"
    );
    let answer = structured(lines.last().unwrap());
    assert_eq!(answer["sampled"], true, "{lines:?}");
    assert_eq!(answer["text"], "forty-two");
    // The upstream ran the tool once: the answer went to the call that asked.
    let lines = client(
        &gw,
        "token-agent1",
        "2026-07-28",
        &["roots", "local.list_roots", "{}"],
    );
    assert_eq!(lines[0]["rooted"], true, "{lines:?}");
    let answer = structured(lines.last().unwrap());
    assert_eq!(
        answer["roots"],
        json!(["file:///work/project"]),
        "{lines:?}"
    );
    // A 2025 session's client is asked for its roots on the call's stream, of either
    // upstream.
    for server in ["up", "local"] {
        let lines = client(
            &gw,
            "token-agent1",
            "legacy",
            &["roots", &format!("{server}.list_roots"), "{}"],
        );
        let answer = structured(lines.last().unwrap());
        assert_eq!(answer["listed"], true, "{server}: {lines:?}");
    }
    // A client that declared neither is not asked: the tool hears it is not relayed, and
    // goes on.
    for mode in MODES {
        let r = call(
            &gw,
            "agent1",
            mode,
            "local.ask_model",
            json!({"prompt": "x"}),
        );
        let answer = structured(&r);
        assert_eq!(answer["sampled"], false, "{mode}: {r}");
        let r = call(&gw, "agent1", mode, "local.list_roots", json!({}));
        assert_eq!(structured(&r)["listed"], false, "{mode}: {r}");
    }
    // Each relayed request and answer is audited by key and method, never what it carries.
    let (_, audit) = gw.req("GET", "/v1/audit?limit=1000", Some("admin"), None, None);
    let relayed: Vec<&Value> = audit["records"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["kind"] == "mcp.relayed" && r["tool"] != "up.deploy")
        .collect();
    let to_client: Vec<&Value> = relayed
        .iter()
        .copied()
        .filter(|r| r["direction"] == "to_client")
        .collect();
    assert_eq!(to_client.len(), 2, "{relayed:?}");
    assert_eq!(to_client[0]["methods"], json!(["sampling/createMessage"]));
    assert_eq!(to_client[1]["methods"], json!(["roots/list"]));
    assert_eq!(
        relayed
            .iter()
            .filter(|r| r["direction"] == "to_upstream")
            .count(),
        2
    );
    assert!(!audit.to_string().contains("forty-two"));
}

#[test]
fn a_2026_upstreams_input_request_suspends_the_call_durably_and_its_retry_resumes_it() {
    // An upstream that speaks only 2026-07-28 asks for input statelessly (`input_required`
    // with a `requestState`): airlock stores that state with the suspension, so the call can
    // be resumed after a restart, and retries with the answer.
    let up = Upstream::peer("mcp_modern_upstream.py", &[]);
    let port = up.port;
    let mut s = mcp_base_config("5s");
    s.push_str(&format!(
        "[[mcp_servers]]\nname = \"modern\"\nurl = \"http://127.0.0.1:{port}/mcp\"\ntimeout = \"10s\"\n"
    ));
    let mut gw = Gateway::start_with(&s, MCP_POLICY);

    // The agent's own client is asked, in either revision, and the tool finishes.
    for mode in MODES {
        let lines = client(
            &gw,
            "token-agent1",
            mode,
            &[
                "answer-form",
                "modern.deploy",
                r#"{"service":"api"}"#,
                r#"{"environment":"staging"}"#,
            ],
        );
        assert_eq!(
            lines[0]["elicited"]["message"], "which environment?",
            "{mode}: {lines:?}"
        );
        let answer = structured(lines.last().unwrap());
        assert_eq!(answer["deployed"], true, "{mode}: {lines:?}");
        assert_eq!(answer["environment"], "staging");
    }

    // Over the API: suspended, the gateway killed and restarted, then resumed.
    let (st, b) = gw.req(
        "POST",
        "/v1/calls",
        Some("agent1"),
        Some(r#"{"tool":"modern.deploy","args":{"service":"web"}}"#),
        None,
    );
    assert_eq!(st, 202, "{b}");
    assert_eq!(b["status"], "suspended");
    assert_eq!(b["suspend"]["payload"]["message"], "which environment?");
    let id = b["call_id"].as_str().unwrap().to_owned();
    gw.kill9();
    gw.spawn();
    let (st, done) = gw.req(
        "POST",
        &format!("/v1/calls/{id}/resume"),
        Some("agent1"),
        Some(r#"{"resume_data":{"environment":"production"}}"#),
        None,
    );
    assert_eq!(st, 200, "{done}");
    assert_eq!(
        done["result"]["structuredContent"]["environment"],
        "production"
    );
    // The retry carried the upstream's own state and the answer under its key.
    let (st, seen) = gw.req(
        "POST",
        "/v1/calls",
        Some("agent2"),
        Some(r#"{"tool":"modern.count","args":{}}"#),
        None,
    );
    assert_eq!(st, 200, "{seen}");
    let last = seen["result"]["structuredContent"]["seen"]
        .as_array()
        .unwrap()
        .last()
        .unwrap()
        .clone();
    assert_eq!(last["requestState"], "asked:web", "{last}");
    assert_eq!(last["inputResponses"]["env"]["action"], "accept");
    assert_eq!(
        last["inputResponses"]["env"]["content"]["environment"],
        "production"
    );
}

#[test]
fn an_upstream_that_says_its_tools_changed_is_listed_again_at_once() {
    let up = Upstream::start();
    let gw = mcp_gateway(&up, "5s");
    for server in ["up", "local"] {
        let name = format!("fresh_{server}");
        let r = call(
            &gw,
            "agent1",
            "legacy",
            &format!("{server}.grow"),
            json!({"name": name}),
        );
        assert_ne!(r["result"]["isError"], true, "{r}");
        // Well inside the 30 s poll: the notification made the gateway read the list again.
        let visible = format!("{server}.{name}");
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            let listed = client(&gw, "token-agent1", "legacy", &["list"]);
            if listed[0]["tools"]
                .as_array()
                .unwrap()
                .iter()
                .any(|t| t == visible.as_str())
            {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "{visible} not listed: {listed:?}"
            );
            std::thread::sleep(Duration::from_millis(200));
        }
        let r = call(&gw, "agent1", "legacy", &visible, json!({}));
        assert_eq!(
            r["result"]["content"][0]["text"],
            format!("{name} is here"),
            "{r}"
        );
    }
}

#[test]
fn a_suspended_calls_nested_schema_is_asked_by_url_and_the_call_continues_once_resumed() {
    // A schema that is not a flat form goes to the client as a URL (the inbox's resume form);
    // whoever resumes the call there (here an approver, through the API) lets the client's
    // call finish, in either revision.
    let backend = Backend::start();
    let mut s = mcp_base_config("10s");
    s.push_str(&format!(
        "[[tools]]\nname = \"nested.*\"\nupstream = \"{}\"\ntimeout = \"5s\"\n",
        backend.url("/asknested")
    ));
    let gw = Gateway::start_with(&s, MCP_POLICY);
    for (mode, zone) in [("legacy", 1), ("2026-07-28", 2)] {
        let data = json!({"target": {"region": "eu", "zone": zone}}).to_string();
        let lines = client(
            &gw,
            "token-agent1",
            mode,
            &[
                "answer-url",
                "nested.place",
                &format!(r#"{{"n":{zone}}}"#),
                &gw.base,
                "token-ops",
                &data,
            ],
        );
        let elicited = &lines[0]["elicited"];
        assert_eq!(elicited["mode"], "url", "{mode}: {lines:?}");
        assert!(
            elicited["url"]
                .as_str()
                .unwrap()
                .contains("/inbox/calls/call_"),
            "{lines:?}"
        );
        assert_eq!(lines[0]["resumed"], 200, "{mode}: {lines:?}");
        let result = &lines.last().unwrap()["result"];
        assert_ne!(result["isError"], true, "{mode}: {result}");
        assert_eq!(
            result["structuredContent"]["target"]["zone"], zone,
            "{mode}: {result}"
        );
    }
    assert_eq!(backend.count(), 4);
}

/// Every refusal of a `tools/call` at the MCP front end is audited as `call.rejected` with
/// its code, the front and the revision, as the JSON API's are, and nothing reaches the
/// upstream: bad JSON, a duplicate key, an unsafe number, too deep, an unknown tool, and an
/// invalid `requestState`, in both revisions.
#[test]
fn every_mcp_refusal_is_audited_with_its_code_and_front_in_both_revisions() {
    let up = Upstream::start();
    let gw = mcp_gateway(&up, "2s");
    let url = format!("{}/mcp", gw.base);
    let c = reqwest::blocking::Client::new();
    let post = |headers: &[(&str, &str)], body: String| {
        let mut r = c
            .post(&url)
            .bearer_auth("token-agent1")
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .body(body);
        for (k, v) in headers {
            r = r.header(*k, *v);
        }
        let resp = r.send().unwrap();
        let sid = resp
            .headers()
            .get("mcp-session-id")
            .map(|v| v.to_str().unwrap().to_owned());
        let text = resp.text().unwrap();
        (
            sid,
            serde_json::from_str::<Value>(&text).unwrap_or(Value::Null),
        )
    };
    let meta = json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {},
    });
    let (sid, _) = post(
        &[],
        json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {},
            "clientInfo": {"name": "t", "version": "1"}}})
        .to_string(),
    );
    let sid = sid.unwrap();
    let deep = format!("{}1{}", "[".repeat(64), "]".repeat(64));
    // (tool, arguments as raw JSON text, extra params, expected code)
    let cases = [
        (
            "up.echo",
            r#"{"text": "a", "text": "b"}"#.to_owned(),
            "",
            "request.duplicate_key",
        ),
        (
            "up.echo",
            r#"{"n": 9007199254740993}"#.to_owned(),
            "",
            "request.unsafe_number",
        ),
        (
            "up.echo",
            format!(r#"{{"v": {deep}}}"#),
            "",
            "request.too_deep",
        ),
        ("up.nope", "{}".to_owned(), "", "tool.unknown"),
        (
            "up.echo",
            r#"{"text": "a"}"#.to_owned(),
            r#","requestState":"forged""#,
            "approval.invalid_state",
        ),
    ];
    for revision in ["2025-11-25", "2026-07-28"] {
        let modern = revision == "2026-07-28";
        for (tool, args, extra, code) in &cases {
            let meta_field = if modern {
                format!(r#","_meta":{meta}"#)
            } else {
                String::new()
            };
            let body = format!(
                r#"{{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{{"name":"{tool}","arguments":{args}{extra}{meta_field}}}}}"#
            );
            let headers: Vec<(&str, &str)> = if modern {
                vec![
                    ("mcp-protocol-version", revision),
                    ("mcp-method", "tools/call"),
                    ("mcp-name", tool),
                ]
            } else {
                vec![("mcp-protocol-version", revision), ("mcp-session-id", &sid)]
            };
            let (_, b) = post(&headers, body);
            assert_eq!(b["error"]["data"]["code"], *code, "{revision} {code}: {b}");
        }
        let headers: Vec<(&str, &str)> = if modern {
            vec![
                ("mcp-protocol-version", revision),
                ("mcp-method", "tools/call"),
            ]
        } else {
            vec![("mcp-protocol-version", revision), ("mcp-session-id", &sid)]
        };
        let (_, b) = post(&headers, "{not json".into());
        assert_eq!(b["error"]["code"], -32700, "{b}");
    }

    let (_, audit) = gw.req("GET", "/v1/audit?limit=1000", Some("admin"), None, None);
    let rejected: Vec<(String, String)> = audit["records"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["kind"] == "call.rejected")
        .map(|r| {
            assert_eq!(r["front"], "mcp", "{r}");
            assert_eq!(r["principal"], "agent1", "{r}");
            (
                r["code"].as_str().unwrap().to_owned(),
                r["mcp_revision"].as_str().unwrap_or("").to_owned(),
            )
        })
        .collect();
    for revision in ["2025-11-25", "2026-07-28"] {
        for code in cases.iter().map(|c| c.3).chain(["request.invalid_json"]) {
            let n = rejected
                .iter()
                .filter(|(c, r)| c == code && r == revision)
                .count();
            assert_eq!(n, 1, "{revision} {code}: {rejected:?}");
        }
    }
    assert!(upstream_log(&gw, "up").is_empty());
}

#[test]
fn args_must_fit_the_pinned_input_schema_and_nothing_else_reaches_the_upstream() {
    let up = Upstream::start();
    let gw = mcp_gateway(&up, "5s");
    for mode in MODES {
        let r = call(
            &gw,
            "agent1",
            mode,
            "up.read_file",
            json!({"req": {"path": "/tmp/x"}}),
        );
        assert_eq!(r["result"]["isError"], false, "{mode}: {r}");
        // An injected extra parameter, and a wrong type: a tool result the model can read
        // and correct (MCP: input validation errors are tool execution errors).
        let r = call(
            &gw,
            "agent1",
            mode,
            "up.read_file",
            json!({"req": {"path": "/tmp/x", "include_secrets": true}}),
        );
        assert_eq!(r["result"]["isError"], true, "{mode}: {r}");
        assert_eq!(error_code(&r), "request.invalid_args", "{mode}: {r}");
        let r = call(&gw, "agent1", mode, "up.echo", json!({"n": "many"}));
        assert_eq!(error_code(&r), "request.invalid_args", "{mode}: {r}");
    }
    // The JSON API refuses the same, naming the pointer and the keyword.
    let (s, b) = gw.call(
        "agent1",
        "up.read_file",
        json!({"req": {"path": "/tmp/x", "bogus": 1}}),
        None,
    );
    assert_eq!((s, code(&b)), (400, "request.invalid_args"), "{b}");
    assert_eq!(b["error"]["details"]["pointer"], "/req");
    assert_eq!(b["error"]["details"]["keyword"], "additionalProperties");
    // Only the two good reads reached the upstream.
    let reads = upstream_log(&gw, "up")
        .iter()
        .filter(|l| l.get("read").is_some())
        .count();
    assert_eq!(reads, 2);
    // `validate_args = false` turns it off for a server whose schemas are wrong.
    drop(gw);
    let mut s = mcp_base_config("5s");
    s.push_str(&format!(
        "[[mcp_servers]]\nname = \"up\"\nurl = \"http://127.0.0.1:{}/mcp\"\nvalidate_args = false\n",
        up.port
    ));
    let gw = Gateway::start_with(&s, MCP_POLICY);
    gw.wait_reached(Duration::from_secs(20));
    let r = call(
        &gw,
        "agent1",
        "legacy",
        "up.echo",
        json!({"n": 5, "extra": 1}),
    );
    assert_eq!(r["result"]["isError"], false, "{r}");
}
