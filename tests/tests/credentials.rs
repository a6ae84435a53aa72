//! Credentials only airlock holds (DESIGN §25), against a real OAuth provider (npm
//! `oidc-provider`, `peers/idp.mjs`) and a resource server that verifies every token it gets
//! (`peers/resource_server.mjs`: signature, issuer, audience, scope): client credentials with
//! RFC 8707 resource and discovery, one token request for many concurrent calls, a refetch at
//! expiry, a provider that is down, no token request for a call that is denied or held, RFC
//! 8693 token exchange giving each agent its own subject, a static token refused
//! `credentials.no_subject`, and no upstream ever receiving the agent's own token or cookies.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::{json, Value};
use support::idp::Idp;
use support::{config_text, free_port, node_script, wait_for_line, Backend, Gateway, Upstream};

const POLICY: &str = r#"
version = 1

[defaults]
decision = "deny"
on_error = "deny"
approval_ttl = "15m"

[[rules]]
id = "crm"
tools = ["crm.*", "short.*", "hr.*", "echo.*", "up.*", "plain.*"]
decision = "allow"

[[rules]]
id = "no-deletes"
tools = ["crm.delete"]
decision = "deny"

[[rules]]
id = "refunds-wait"
tools = ["crm.refund"]
decision = "require_approval"
"#;

/// The resource server, verifying tokens from the provider at `issuer`.
struct ResourceServer {
    child: Child,
    base: String,
    http: reqwest::blocking::Client,
}

impl ResourceServer {
    fn start(issuer: &str) -> ResourceServer {
        let (node, script) = node_script("resource_server.mjs", "jose");
        let port = free_port();
        let mut child = Command::new(node)
            .arg(script)
            .arg(port.to_string())
            .arg(issuer)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        wait_for_line(&mut child, "resource server listening on ");
        ResourceServer {
            child,
            base: format!("http://127.0.0.1:{port}"),
            http: reqwest::blocking::Client::new(),
        }
    }

    fn log(&self) -> Vec<Value> {
        let v: Value = self
            .http
            .get(format!("{}/log", self.base))
            .send()
            .unwrap()
            .json()
            .unwrap();
        v.as_array().unwrap().clone()
    }
}

impl Drop for ResourceServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

struct World {
    idp: Idp,
    rs: ResourceServer,
    gw: Gateway,
    _backend: Backend,
    _mcp: Upstream,
}

/// The provider, the resource server, and a gateway trusting the provider's JWTs (issuer
/// `corp`) whose `crm.*`, `short.*` and `hr.*` tools are the resource server's, each with its
/// credentials.
fn world() -> World {
    let port = free_port();
    let base = format!("http://127.0.0.1:{port}");
    let idp = Idp::start(&format!("{base}/inbox/oidc/callback"));
    let rs = ResourceServer::start(&idp.issuer);
    let backend = Backend::start();
    let mcp = Upstream::start();
    let (issuer, rsb, mcp_port) = (&idp.issuer, &rs.base, mcp.port);
    let tools = format!(
        r#"
[[tools]]
name = "crm.*"
upstream = "{rsb}/crm"
credentials = {{ kind = "client_credentials", issuer = "{issuer}", client_id = "tools-svc", client_secret = "env:TOOLS_SECRET", scopes = ["tools:call"], resource = "{rsb}" }}

[[tools]]
name = "short.*"
upstream = "{rsb}/short"
credentials = {{ kind = "client_credentials", token_url = "{issuer}/token", client_id = "tools-svc", client_secret = "tools-svc-secret", scopes = ["tools:call"], resource = "{rsb}/short" }}

[[tools]]
name = "plain.*"
upstream = "{rsb}/plain"

[[tools]]
name = "hr.*"
upstream = "{rsb}/hr"
credentials = {{ kind = "token_exchange", token_url = "{issuer}/token", client_id = "exchange-svc", client_secret = "exchange-svc-secret", audience = "{rsb}", scopes = ["tools:call"] }}

[[mcp_servers]]
name = "up"
url = "http://127.0.0.1:{mcp_port}/mcp"
credentials = {{ kind = "client_credentials", token_url = "{issuer}/token", client_id = "tools-svc", client_secret = "tools-svc-secret", scopes = ["tools:call"], resource = "{rsb}/mcp" }}
"#
    );
    let config = format!(
        "{tools}\n{}\n[[issuers]]\nid = \"corp\"\nissuer = \"{issuer}\"\nroles = {{ agent = [\"agents\"], approver = [\"sec-approvers\"], admin = [\"airlock-admins\"] }}\nscopes = [\"airlock:call\"]\nclaims = [\"client_id\"]\n",
        config_text(&backend, "")
    );
    let gw = Gateway::start_env(
        &config,
        POLICY,
        port,
        "debug",
        &[("TOOLS_SECRET", "tools-svc-secret")],
    );
    gw.wait_reached(Duration::from_secs(20));
    World {
        idp,
        rs,
        gw,
        _backend: backend,
        _mcp: mcp,
    }
}

/// The provider's token requests by grant type: (succeeded, failed).
fn counts(idp: &Idp, grant: &str) -> (u64, u64) {
    let v: Value = reqwest::blocking::get(format!("{}/test/counts", idp.issuer))
        .unwrap()
        .json()
        .unwrap();
    (
        v[grant]["ok"].as_u64().unwrap_or(0),
        v[grant]["failed"].as_u64().unwrap_or(0),
    )
}

/// `POST /v1/calls` with a raw bearer token (and a cookie): status and body.
fn call(gw: &Gateway, bearer: &str, tool: &str, args: Value) -> (u16, Value) {
    let r = gw
        .client
        .post(format!("{}/v1/calls", gw.base))
        .bearer_auth(bearer)
        .header("cookie", "session=agent-cookie-must-stay")
        .header("content-type", "application/json")
        .body(json!({"tool": tool, "args": args}).to_string())
        .send()
        .unwrap();
    let status = r.status().as_u16();
    (status, r.json().unwrap_or(Value::Null))
}

#[test]
fn client_credentials_are_fetched_once_after_the_decision_and_only_airlock_holds_them() {
    let w = world();
    let (gw, rs, idp) = (&w.gw, &w.rs, &w.idp);
    let cc = "client_credentials";

    // A denied call and a held one make no token request.
    let (s, b) = call(gw, "token-agent1", "crm.delete", json!({"id": 1}));
    assert_eq!(
        (s, b["error"]["code"].as_str()),
        (403, Some("policy.denied")),
        "{b}"
    );
    let r = gw
        .client
        .post(format!("{}/v1/calls", gw.base))
        .bearer_auth("token-agent1")
        .header("prefer", "respond-async")
        .header("content-type", "application/json")
        .body(json!({"tool": "crm.refund", "args": {"id": 2}}).to_string())
        .send()
        .unwrap();
    assert_eq!(r.status().as_u16(), 202);
    // The MCP server's token was fetched when airlock first reached it: one request.
    let mcp_tokens = counts(idp, cc).0;
    assert_eq!(counts(idp, cc), (mcp_tokens, 0));
    assert!(rs.log().is_empty());

    // A tool with no credentials gets none: not the agent's token, not its cookie.
    let (s, b) = call(gw, "token-agent1", "plain.ping", json!({}));
    assert_eq!((s, b["upstream_status"].as_u64()), (200, Some(401)), "{b}");
    let plain = rs.log().pop().unwrap();
    assert_eq!(
        (&plain["authorization"], &plain["cookie"]),
        (&Value::Null, &Value::Null),
        "{plain}"
    );

    // Twenty calls at once: one token request, every call accepted by the resource server.
    let handles: Vec<_> = (0..20)
        .map(|i| {
            let (base, client) = (gw.base.clone(), gw.client.clone());
            std::thread::spawn(move || {
                let r = client
                    .post(format!("{base}/v1/calls"))
                    .bearer_auth("token-agent1")
                    .header("cookie", "session=agent-cookie-must-stay")
                    .header("content-type", "application/json")
                    .body(json!({"tool": "crm.lookup", "args": {"n": i}}).to_string())
                    .send()
                    .unwrap();
                let status = r.status().as_u16();
                (status, r.json::<Value>().unwrap())
            })
        })
        .collect();
    for h in handles {
        let (s, b) = h.join().unwrap();
        assert_eq!(s, 200, "{b}");
        assert_eq!(b["result"]["sub"], "tools-svc", "{b}");
    }
    assert_eq!(
        counts(idp, cc),
        (mcp_tokens + 1, 0),
        "one token for twenty calls"
    );
    let log: Vec<Value> = rs.log().into_iter().skip(1).collect();
    assert_eq!(log.len(), 20);
    for e in &log {
        assert_eq!(e["accepted"], true, "{e}");
        assert_eq!(e["aud"], rs.base.as_str(), "{e}");
        // Never the agent's own token, never its cookie.
        assert!(
            !e["authorization"]
                .as_str()
                .unwrap()
                .contains("token-agent1"),
            "{e}"
        );
        assert_eq!(e["cookie"], Value::Null, "{e}");
    }

    // A token that lives 3 s is fetched again once it is about to expire.
    let (s, b) = call(gw, "token-agent1", "short.ping", json!({}));
    assert_eq!(s, 200, "{b}");
    let (s, _) = call(gw, "token-agent1", "short.ping", json!({}));
    assert_eq!(s, 200);
    assert_eq!(
        counts(idp, cc),
        (mcp_tokens + 2, 0),
        "the short token is cached while it lives"
    );
    std::thread::sleep(Duration::from_millis(3200));
    let (s, b) = call(gw, "token-agent1", "short.ping", json!({}));
    assert_eq!(s, 200, "{b}");
    assert_eq!(
        counts(idp, cc),
        (mcp_tokens + 3, 0),
        "and fetched again at its end"
    );

    let m = gw.metrics();
    assert!(m.contains("airlock_credential_requests_total{kind=\"client_credentials\",result=\"fetched\",upstream=\"crm.*\"} 1"), "{m}");
    assert!(m.contains("airlock_credential_requests_total{kind=\"client_credentials\",result=\"cached\",upstream=\"crm.*\"} 19"), "{m}");
    // No secret or token in the metrics, the audit log or the gateway's log.
    let (_, audit) = gw.req("GET", "/v1/audit?limit=1000", Some("admin"), None, None);
    let tokens: Vec<String> = rs
        .log()
        .iter()
        .filter_map(|e| e["authorization"].as_str())
        .map(|a| a.trim_start_matches("Bearer ").to_owned())
        .collect();
    let log_text = gw.log_text();
    for haystack in [m.as_str(), &audit.to_string(), log_text.as_str()] {
        assert!(!haystack.contains("tools-svc-secret"));
        for t in &tokens {
            assert!(!haystack.contains(t.as_str()), "a token leaked");
        }
    }
}

#[test]
fn a_provider_that_is_down_means_nothing_is_forwarded() {
    let mut w = world();
    w.idp.stop();
    let (s, b) = call(&w.gw, "token-agent1", "crm.lookup", json!({"n": 1}));
    assert_eq!(s, 502, "{b}");
    assert_eq!(
        b["error"]["code"], "upstream.credentials_unavailable",
        "{b}"
    );
    assert!(w.rs.log().is_empty(), "nothing reached the upstream");
    let (_, audit) =
        w.gw.req("GET", "/v1/audit?limit=1000", Some("admin"), None, None);
    assert!(
        audit["records"]
            .as_array()
            .unwrap()
            .iter()
            .any(|r| r["kind"] == "credential.refused"
                && r["code"] == "upstream.credentials_unavailable"),
        "{audit}"
    );
}

#[test]
fn token_exchange_gives_each_agent_its_own_subject_and_refuses_a_static_token() {
    let w = world();
    let (gw, rs, idp) = (&w.gw, &w.rs, &w.idp);
    let exchange = "urn:ietf:params:oauth:grant-type:token-exchange";
    // Two agents, each with a JWT from the provider for the gateway.
    let robot = idp.mint(
        json!({"sub": "robot", "aud": gw.base, "scope": "airlock:call", "groups": ["agents"], "client_id": "robot-app"}),
        json!({}),
        true,
    );
    let svc = idp.token("agent-svc", &gw.base, Some("airlock:call"));
    for (jwt, n) in [(&robot, 1), (&robot, 2), (&svc, 3)] {
        let (s, b) = call(gw, jwt, "hr.lookup", json!({"n": n}));
        assert_eq!(s, 200, "{b}");
    }
    let log = rs.log();
    let subs: Vec<&str> = log.iter().map(|e| e["sub"].as_str().unwrap()).collect();
    assert_eq!(subs, ["robot", "robot", "agent-svc"], "{log:?}");
    for e in &log {
        assert_eq!(e["act"]["sub"], "exchange-svc", "{e}");
        let auth = e["authorization"].as_str().unwrap();
        assert!(
            !auth.contains(&robot) && !auth.contains(&svc),
            "the agent's own JWT went upstream"
        );
    }
    // One exchange per subject: robot's second call used its cached token.
    assert_eq!(counts(idp, exchange), (2, 0));

    // A static token names no subject.
    let (s, b) = call(gw, "token-agent1", "hr.lookup", json!({"n": 4}));
    assert_eq!(
        (s, b["error"]["code"].as_str()),
        (403, Some("credentials.no_subject")),
        "{b}"
    );
    assert_eq!(rs.log().len(), 3);
    assert_eq!(counts(idp, exchange), (2, 0));
}

#[test]
fn an_mcp_server_gets_airlocks_token_and_never_the_agents() {
    let w = world();
    let (gw, rs, idp) = (&w.gw, &w.rs, &w.idp);
    // Everything airlock sent the server (handshake, lists, this call) carried one token.
    let (s, b) = call(gw, "token-agent1", "up.headers", json!({}));
    assert_eq!(s, 200, "{b}");
    let text: Value =
        serde_json::from_str(b["result"]["content"][0]["text"].as_str().unwrap()).unwrap();
    let seen = &text["headers"];
    let auth = seen["authorization"]
        .as_str()
        .unwrap_or_else(|| panic!("{b}"));
    assert!(auth.starts_with("Bearer ey"), "{seen}");
    assert!(!auth.contains("token-agent1"), "{seen}");
    assert_eq!(seen.get("cookie"), None, "{seen}");
    assert_eq!(counts(idp, "client_credentials"), (1, 0));
    // It is the provider's token for the server's audience (`resource`): a verifier of that
    // audience accepts it, one of another refuses it.
    let check = |path: &str| {
        reqwest::blocking::Client::new()
            .post(format!("{}{path}", rs.base))
            .header("authorization", auth)
            .send()
            .unwrap()
            .status()
            .as_u16()
    };
    assert_eq!(check("/mcp/check"), 200);
    assert_eq!(check("/crm/check"), 401);
    assert_eq!(rs.log()[0]["sub"], "tools-svc");
}
