//! Identity (DESIGN §16) against a real OpenID provider (npm `oidc-provider`, started by the
//! test): bearer JWTs from client credentials with resource indicators, every refusal of a
//! JWT with its code, key rotation and an issuer that goes away, `act` tokens and separation of
//! duties, MCP authorization (RFC 9728), the inbox's sign-in, and no token kept anywhere.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use std::time::Duration;

use base64::Engine;
use hmac::{Hmac, KeyInit, Mac};
use serde_json::{json, Value};
use support::idp::Idp;
use support::{code, config_text, free_port, Backend, Gateway};

const POLICY: &str = r#"
version = 1

[defaults]
decision = "deny"
on_error = "deny"
approval_ttl = "15m"

[[rules]]
id = "allow-echo"
tools = ["echo.*"]
decision = "allow"

[[rules]]
id = "approve-db"
tools = ["db.*"]
decision = "require_approval"
approvers = ["sec-approvers"]

[[rules]]
id = "pay-for-corp-identities"
tools = ["pay.*"]
when = 'principal.issuer == "corp" && principal.claims.client_id == "agent-svc"'
decision = "allow"
"#;

struct World {
    idp: Idp,
    gw: Gateway,
    _backend: Backend,
}

/// A gateway on a port chosen first (its URL is the tokens' audience and the inbox's redirect
/// URI), in front of the test backend, trusting the provider as issuer `corp`.
fn world(extra: &str) -> World {
    world_with(extra, "")
}

/// [`world`] with more keys for `[inbox.oidc]`.
fn world_with(extra: &str, inbox_extra: &str) -> World {
    world_at(free_port(), extra, inbox_extra, "", &[])
}

/// [`world_with`] on `port`, with more tables after `[inbox.oidc]` and environment variables.
fn world_at(
    port: u16,
    extra: &str,
    inbox_extra: &str,
    tables: &str,
    env: &[(&str, &str)],
) -> World {
    let base = format!("http://127.0.0.1:{port}");
    let idp = Idp::start(&format!("{base}/inbox/oidc/callback"));
    let backend = Backend::start();
    let config = format!(
        "{}\n[[issuers]]\nid = \"corp\"\nissuer = \"{}\"\nroles = {{ agent = [\"agents\"], approver = [\"sec-approvers\"], admin = [\"airlock-admins\"] }}\nscopes = [\"airlock:call\"]\nclaims = [\"client_id\"]\n{extra}\n[inbox.oidc]\nissuer = \"corp\"\nclient_id = \"airlock-inbox\"\nclient_secret = \"inbox-secret\"\n{inbox_extra}\n{tables}\n",
        config_text(&backend, ""),
        idp.issuer
    );
    let gw = Gateway::start_env(&config, POLICY, port, "debug", env);
    World {
        idp,
        gw,
        _backend: backend,
    }
}

/// A request with a raw bearer (None: without): status, `WWW-Authenticate`, body.
fn send(
    gw: &Gateway,
    method: &str,
    path: &str,
    token: Option<&str>,
    body: Option<Value>,
) -> (u16, String, Value) {
    let mut r = gw
        .client
        .request(method.parse().unwrap(), format!("{}{path}", gw.base));
    if let Some(t) = token {
        r = r.bearer_auth(t);
    }
    if let Some(b) = body {
        r = r
            .header("content-type", "application/json")
            .body(b.to_string());
    }
    let resp = r.send().unwrap();
    let status = resp.status().as_u16();
    let challenge = resp
        .headers()
        .get("www-authenticate")
        .map(|v| v.to_str().unwrap().to_owned())
        .unwrap_or_default();
    let text = resp.text().unwrap();
    (
        status,
        challenge,
        serde_json::from_str(&text).unwrap_or(Value::String(text)),
    )
}

fn call(gw: &Gateway, token: &str, tool: &str, args: Value) -> (u16, String, Value) {
    send(
        gw,
        "POST",
        "/v1/calls",
        Some(token),
        Some(json!({"tool": tool, "args": args})),
    )
}

/// A call that needs approval, sent with `Prefer: respond-async`: its approval's id.
fn held(gw: &Gateway, token: &str, tool: &str, args: Value) -> String {
    let resp = gw
        .client
        .post(format!("{}/v1/calls", gw.base))
        .bearer_auth(token)
        .header("prefer", "respond-async")
        .header("content-type", "application/json")
        .body(json!({"tool": tool, "args": args}).to_string())
        .send()
        .unwrap();
    assert_eq!(resp.status().as_u16(), 202);
    let b: Value = resp.json().unwrap();
    b["approval"]["id"].as_str().unwrap().to_owned()
}

/// Approves `approval` with a raw bearer.
fn approve(gw: &Gateway, token: &str, approval: &str) -> (u16, String, Value) {
    send(
        gw,
        "POST",
        &format!("/v1/approvals/{approval}/approve"),
        Some(token),
        Some(json!({})),
    )
}

/// Runs a peer program to its end: it must succeed; its stdout's JSON lines.
fn peer_lines(cmd: &mut std::process::Command) -> Vec<Value> {
    let out = cmd
        .output()
        .expect("a peer program installed by scripts/test.sh");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

fn audit(gw: &Gateway) -> Vec<Value> {
    let (s, _, page) = send(gw, "GET", "/v1/audit?limit=1000", Some("token-admin"), None);
    assert_eq!(s, 200, "{page}");
    page["records"].as_array().unwrap().clone()
}

fn b64(v: &[u8]) -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(v)
}

#[test]
fn jwts_from_the_provider_call_tools_and_approve_through_the_api() {
    let w = world("");
    let gw = &w.gw;
    let agent = w.idp.token("agent-svc", &gw.base, Some("airlock:call"));
    let approver = w.idp.token("approver-svc", &gw.base, None);

    let (s, _, body) = call(gw, &agent, "echo.hello", json!({"n": 1}));
    assert_eq!(s, 200, "{body}");
    // The policy sees the issuer and the listed claims: pay.* only for this client of corp.
    let (s, _, body) = call(gw, &agent, "pay.send", json!({"amount": 5}));
    assert_eq!(s, 200, "{body}");
    let (s, _, body) = call(gw, "token-agent1", "pay.send", json!({"amount": 5}));
    assert_eq!((s, code(&body)), (403, "policy.denied"), "{body}");

    // A held call, approved by the approver service's JWT through the API.
    let approval = held(gw, &agent, "db.query", json!({"sql": "select 1"}));
    let (s, _, a) = send(
        gw,
        "GET",
        &format!("/v1/approvals/{approval}"),
        Some(&approver),
        None,
    );
    assert_eq!(s, 200, "{a}");
    assert_eq!(a["requester"]["principal"], "corp:agent-svc");
    let (s, _, decided) = approve(gw, &approver, &approval);
    assert_eq!(s, 200, "{decided}");
    assert_eq!(decided["status"], "approved", "{decided}");
    assert_eq!(decided["decisions"][0]["by"], "corp:approver-svc");
    assert_eq!(decided["decisions"][0]["auth"]["kind"], "jwt");
    assert_eq!(decided["decisions"][0]["auth"]["issuer"], "corp");

    // Every record that names a principal says how it proved itself; a JWT's with its jti.
    let records = audit(gw);
    let decided = records
        .iter()
        .find(|r| r["kind"] == "approval.decided")
        .unwrap();
    assert_eq!(decided["auth"]["kind"], "jwt", "{decided}");
    assert_eq!(decided["auth"]["sub"], "approver-svc");
    assert!(decided["auth"]["jti"]
        .as_str()
        .is_some_and(|j| !j.is_empty()));
    let static_call = records.iter().find(|r| r["principal"] == "agent1").unwrap();
    assert_eq!(static_call["auth"], json!({"kind": "token"}));
    for r in records
        .iter()
        .filter(|r| r.get("principal").is_some() || r.get("by").is_some())
    {
        assert!(
            r.get("auth").is_some(),
            "a record naming a principal without auth: {r}"
        );
    }

    // An agent's token cannot approve; a token of no mapped group is refused in words.
    let (s, _, body) = approve(gw, &agent, &approval);
    assert_eq!((s, code(&body)), (403, "approval.forbidden"), "{body}");
    let nobody = w.idp.token("nobody-svc", &gw.base, Some("airlock:call"));
    let (s, _, body) = call(gw, &nobody, "echo.hello", json!({}));
    assert_eq!((s, code(&body)), (403, "auth.forbidden"), "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("no group"),
        "{body}"
    );

    // A missing scope: 403 with the challenge that names it; the approver routes need none.
    let unscoped = w.idp.token("agent-svc", &gw.base, None);
    let (s, challenge, body) = call(gw, &unscoped, "echo.hello", json!({}));
    assert_eq!((s, code(&body)), (403, "auth.insufficient_scope"), "{body}");
    assert!(
        challenge.contains("error=\"insufficient_scope\"")
            && challenge.contains("scope=\"airlock:call\""),
        "{challenge}"
    );
    assert!(
        challenge.contains(&format!(
            "resource_metadata=\"{}/.well-known/oauth-protected-resource/mcp\"",
            gw.base
        )),
        "{challenge}"
    );

    // Static tokens still work beside the issuer.
    let (s, _, body) = call(gw, "token-agent1", "echo.hello", json!({}));
    assert_eq!(s, 200, "{body}");
}

#[test]
fn every_refusal_of_a_bearer_jwt_has_its_code() {
    let w = world("");
    let gw = &w.gw;
    let aud = gw.base.clone();
    let good =
        json!({"sub": "agent-svc", "aud": aud, "groups": ["agents"], "scope": "airlock:call"});
    let with = |patch: Value| {
        let mut c = good.clone();
        for (k, v) in patch.as_object().unwrap() {
            c[k] = v.clone();
        }
        c
    };
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64;
    // The minted token with the good claims passes: the refusals below are each one change.
    let ok = w.idp.mint(good.clone(), json!({}), true);
    let (s, _, body) = call(gw, &ok, "echo.hello", json!({}));
    assert_eq!(s, 200, "{body}");

    let kid = w.idp.public_keys()[0]["kid"].as_str().unwrap().to_owned();
    let claims_part = ok.split('.').nth(1).unwrap().to_owned();
    let none = format!(
        "{}.{claims_part}.",
        b64(json!({"alg": "none", "kid": kid}).to_string().as_bytes())
    );
    // HS256 keyed with the public key's bytes: the classic key-confusion forgery.
    let hs_input = format!(
        "{}.{claims_part}",
        b64(json!({"alg": "HS256", "kid": kid}).to_string().as_bytes())
    );
    let mut mac =
        Hmac::<sha2::Sha256>::new_from_slice(w.idp.public_keys()[0].to_string().as_bytes())
            .unwrap();
    mac.update(hs_input.as_bytes());
    let hs256 = format!("{hs_input}.{}", b64(&mac.finalize().into_bytes()));

    let cases: Vec<(&str, String, u16, &str, &str)> = vec![
        ("alg none", none, 401, "auth.invalid_token", "`alg`"),
        (
            "HS256 with the public key",
            hs256,
            401,
            "auth.invalid_token",
            "`alg`",
        ),
        (
            "a key never published",
            w.idp.mint(good.clone(), json!({}), false),
            401,
            "auth.invalid_token",
            "`kid`",
        ),
        (
            "a published kid, another key's signature",
            w.idp.mint(good.clone(), json!({"kid": kid}), false),
            401,
            "auth.invalid_token",
            "signature",
        ),
        (
            "a jku header",
            w.idp.mint(
                good.clone(),
                json!({"jku": "http://127.0.0.1:9/keys"}),
                true,
            ),
            401,
            "auth.invalid_token",
            "`jku`",
        ),
        (
            "an embedded jwk",
            w.idp
                .mint(good.clone(), json!({"jwk": w.idp.public_keys()[0]}), true),
            401,
            "auth.invalid_token",
            "`jwk`",
        ),
        (
            "expired",
            w.idp.mint(with(json!({"exp": now - 120})), json!({}), true),
            401,
            "auth.invalid_token",
            "expired",
        ),
        (
            "not yet valid",
            w.idp.mint(with(json!({"nbf": now + 300})), json!({}), true),
            401,
            "auth.invalid_token",
            "not valid yet",
        ),
        (
            "issued in the future",
            w.idp.mint(with(json!({"iat": now + 300})), json!({}), true),
            401,
            "auth.invalid_token",
            "future",
        ),
        (
            "another issuer",
            w.idp
                .mint(with(json!({"iss": "http://127.0.0.1:9"})), json!({}), true),
            401,
            "auth.invalid_token",
            "`iss`",
        ),
        (
            "another audience",
            w.idp.mint(
                with(json!({"aud": "https://elsewhere.example"})),
                json!({}),
                true,
            ),
            401,
            "auth.invalid_token",
            "`aud`",
        ),
        (
            "no audience",
            w.idp.mint(with(json!({"aud": null})), json!({}), true),
            401,
            "auth.invalid_token",
            "`aud`",
        ),
        (
            "no exp",
            w.idp.mint(with(json!({"exp": null})), json!({}), true),
            401,
            "auth.invalid_token",
            "`exp`",
        ),
        (
            "groups that map to no role",
            w.idp
                .mint(with(json!({"groups": ["interns"]})), json!({}), true),
            403,
            "auth.forbidden",
            "no group",
        ),
        (
            "no scope",
            w.idp.mint(with(json!({"scope": null})), json!({}), true),
            403,
            "auth.insufficient_scope",
            "airlock:call",
        ),
    ];
    let before = w._backend.count();
    for (what, token, status, want, says) in cases {
        let (s, challenge, body) = call(gw, &token, "echo.hello", json!({}));
        assert_eq!((s, code(&body)), (status, want), "{what}: {body}");
        let message = body["error"]["message"].as_str().unwrap();
        assert!(message.contains(says), "{what}: {message}");
        assert!(
            !message.contains(&token),
            "{what}: the message holds the token"
        );
        if status == 401 {
            assert!(
                challenge.contains("error=\"invalid_token\"")
                    && challenge.contains("resource_metadata="),
                "{what}: {challenge}"
            );
        }
    }
    assert_eq!(
        w._backend.count(),
        before,
        "a refused token reached the backend"
    );
    // Without a token: the challenge without `error`.
    let (s, challenge, body) = send(
        gw,
        "POST",
        "/v1/calls",
        None,
        Some(json!({"tool": "echo.x", "args": {}})),
    );
    assert_eq!((s, code(&body)), (401, "auth.unauthenticated"), "{body}");
    assert!(
        challenge.starts_with("Bearer resource_metadata=") && !challenge.contains("error="),
        "{challenge}"
    );
}

#[test]
fn an_act_token_calls_for_its_user_and_nobody_of_the_two_decides_it() {
    let w = world("");
    let gw = &w.gw;
    // Token exchange's result: robot acting for alice, who is an approver herself.
    let act = w.idp.mint(
        json!({"sub": "alice", "act": {"sub": "robot"}, "aud": gw.base, "groups": ["sec-approvers"], "scope": "airlock:call"}),
        json!({}),
        true,
    );
    let approval = held(gw, &act, "db.query", json!({"sql": "select 2"}));
    let (_, _, a) = send(
        gw,
        "GET",
        &format!("/v1/approvals/{approval}"),
        Some("token-admin"),
        None,
    );
    assert_eq!(a["requester"]["principal"], "corp:alice", "{a}");
    assert_eq!(a["requester"]["actor"], "corp:robot", "{a}");
    // The act token is an agent's: it never decides.
    let (s, _, body) = approve(gw, &act, &approval);
    assert_eq!((s, code(&body)), (403, "approval.forbidden"), "{body}");
    // Alice, with her own approver token, may not approve what was asked in her name.
    let alice = w.idp.mint(
        json!({"sub": "alice", "aud": gw.base, "groups": ["sec-approvers"]}),
        json!({}),
        true,
    );
    let (s, _, body) = approve(gw, &alice, &approval);
    assert_eq!((s, code(&body)), (403, "approval.self_approval"), "{body}");
    // Bob may.
    let bob = w.idp.mint(
        json!({"sub": "bob", "aud": gw.base, "groups": ["sec-approvers"]}),
        json!({}),
        true,
    );
    let (s, _, body) = approve(gw, &bob, &approval);
    assert_eq!(s, 200, "{body}");
    let records = audit(gw);
    let opened = records
        .iter()
        .find(|r| r["kind"] == "approval.requested")
        .unwrap();
    assert_eq!(opened["auth"]["act"], "robot", "{opened}");
}

#[test]
fn keys_rotate_without_a_restart_and_cached_keys_outlive_the_issuer() {
    let mut w = world("");
    let first = w.idp.token("agent-svc", &w.gw.base, Some("airlock:call"));
    let unseen = w.idp.token("agent-svc", &w.gw.base, Some("airlock:call"));
    let (s, _, body) = call(&w.gw, &first, "echo.a", json!({}));
    assert_eq!(s, 200, "{body}");
    // The provider goes away: the keys the gateway holds still verify a token it never saw.
    w.idp.stop();
    let (s, _, body) = call(&w.gw, &unseen, "echo.b", json!({}));
    assert_eq!(s, 200, "{body}");
    let (s, _, _) = send(&w.gw, "GET", "/readyz", None, None);
    assert_eq!(s, 200);
    // It comes back with a new key first. The gateway refetches for the unknown kid (at most
    // once per 30 s, so after the spacing from its last fetch), with no restart.
    w.idp.rotate();
    let rotated = w.idp.token("agent-svc", &w.gw.base, Some("airlock:call"));
    assert_ne!(
        rotated.split('.').next(),
        first.split('.').next(),
        "the kid changed"
    );
    std::thread::sleep(Duration::from_secs(31));
    let (s, _, body) = call(&w.gw, &rotated, "echo.c", json!({}));
    assert_eq!(s, 200, "{body}");
    // The old key is still published, so the first token still verifies.
    let (s, _, body) = call(&w.gw, &first, "echo.d", json!({}));
    assert_eq!(s, 200, "{body}");
}

#[test]
fn an_issuer_never_reached_answers_503_and_the_gateway_is_ready() {
    let dead = free_port();
    let backend = Backend::start();
    let config = format!(
        "{}\n[[issuers]]\nid = \"gone\"\nissuer = \"http://127.0.0.1:{dead}\"\nroles = {{ agent = [\"agents\"] }}\n",
        config_text(&backend, "")
    );
    let gw = Gateway::start_at(&config, POLICY, 0, "warn");
    let header = b64(br#"{"alg":"ES256","kid":"k1"}"#);
    let claims = b64(format!(
        r#"{{"iss":"http://127.0.0.1:{dead}","sub":"x","aud":"{}","exp":9999999999}}"#,
        gw.base
    )
    .as_bytes());
    let token = format!("{header}.{claims}.{}", b64(b"not-a-signature"));
    let resp = gw
        .client
        .post(format!("{}/v1/calls", gw.base))
        .bearer_auth(&token)
        .header("content-type", "application/json")
        .body(r#"{"tool":"echo.x","args":{}}"#)
        .send()
        .unwrap();
    assert_eq!(resp.status().as_u16(), 503);
    assert!(resp.headers().get("retry-after").is_some());
    let body: Value = resp.json().unwrap();
    assert_eq!(code(&body), "auth.issuer_unavailable", "{body}");
    let (s, _, _) = send(&gw, "GET", "/readyz", None, None);
    assert_eq!(s, 200);
    // Static tokens are not held up by it.
    let (s, _, body) = call(&gw, "token-agent1", "echo.x", json!({}));
    assert_eq!(s, 200, "{body}");
}

#[test]
fn mcp_is_an_oauth_resource_server_and_the_official_python_client_calls_it_with_a_jwt() {
    let w = world("");
    let gw = &w.gw;
    // RFC 9728 metadata, without a token, at both addresses.
    for path in [
        "/.well-known/oauth-protected-resource/mcp",
        "/.well-known/oauth-protected-resource",
    ] {
        let (s, _, meta) = send(gw, "GET", path, None, None);
        assert_eq!(s, 200, "{path}: {meta}");
        assert_eq!(meta["resource"], format!("{}/mcp", gw.base));
        assert_eq!(meta["authorization_servers"], json!([w.idp.issuer]));
        assert_eq!(meta["scopes_supported"], json!(["airlock:call"]));
        assert_eq!(meta["bearer_methods_supported"], json!(["header"]));
    }
    // The API's document (DESIGN §18) has these routes too, and the issuer as a scheme.
    let (s, _, doc) = send(gw, "GET", "/v1/openapi.json", None, None);
    assert_eq!(s, 200);
    assert!(doc["paths"]["/.well-known/oauth-protected-resource/mcp"]["get"].is_object());
    // Its text, the issuer-only parts included, never sends a reader to the internal contract.
    let text = doc.to_string();
    for cited in ["DESIGN", "\u{a7}"] {
        assert!(!text.contains(cited), "the document cites `{cited}`");
    }
    let scheme = doc["components"]["securitySchemes"]
        .as_object()
        .unwrap()
        .values()
        .find(|s| s["type"] == "openIdConnect")
        .cloned()
        .unwrap_or_default();
    assert_eq!(
        scheme["openIdConnectUrl"],
        format!(
            "{}/.well-known/openid-configuration",
            w.idp.issuer.trim_end_matches('/')
        )
    );
    // A 401 on /mcp names it.
    let (s, challenge, _) = send(
        gw,
        "POST",
        "/mcp",
        None,
        Some(json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"})),
    );
    assert_eq!(s, 401);
    assert_eq!(
        challenge,
        format!("Bearer resource_metadata=\"{}/.well-known/oauth-protected-resource/mcp\", scope=\"airlock:call\"", gw.base)
    );
    // A token for the resource `<public_url>/mcp` (RFC 8707) is taken on /mcp, not on /v1.
    let for_mcp = w.idp.token(
        "agent-svc",
        &format!("{}/mcp", gw.base),
        Some("airlock:call"),
    );
    let (s, _, body) = call(gw, &for_mcp, "echo.hello", json!({}));
    assert_eq!((s, code(&body)), (401, "auth.invalid_token"), "{body}");
    // The official MCP Python SDK, with that token, lists and calls through the gateway.
    let lines = peer_lines(
        std::process::Command::new("python3")
            .arg(support::peers().join("mcp_client.py"))
            .args([
                &format!("{}/mcp", gw.base),
                &for_mcp,
                "2026-07-28",
                "call",
                "echo.hello",
                r#"{"x":1}"#,
            ]),
    );
    assert_eq!(
        lines.last().unwrap()["result"]["isError"],
        false,
        "{lines:?}"
    );
}

#[test]
fn no_token_is_kept_in_the_logs_or_the_store() {
    let w = world("");
    let gw = &w.gw;
    let agent = w.idp.token("agent-svc", &gw.base, Some("airlock:call"));
    let approver = w.idp.token("approver-svc", &gw.base, None);
    let approval = held(gw, &agent, "db.query", json!({"sql": "select 3"}));
    approve(gw, &approver, &approval);
    let expired = w.idp.mint(
        json!({"sub": "agent-svc", "aud": gw.base, "exp": 1}),
        json!({}),
        true,
    );
    call(gw, &expired, "echo.x", json!({}));
    let records = serde_json::to_string(&audit(gw)).unwrap();
    let log = std::fs::read_to_string(gw.dir.path().join("gateway.log")).unwrap();
    assert!(
        log.contains("DEBUG") || log.contains("INFO"),
        "the log is at debug level"
    );
    let mut stored = Vec::new();
    for entry in walk(gw.dir.path().join("data")) {
        stored.extend(std::fs::read(entry).unwrap());
    }
    for token in [&agent, &approver, &expired] {
        let signature = token.rsplit('.').next().unwrap();
        assert!(!records.contains(signature), "a token in the audit log");
        assert!(!log.contains(signature), "a token in the log");
        assert!(
            !stored
                .windows(signature.len())
                .any(|w| w == signature.as_bytes()),
            "a token in the store"
        );
    }
}

fn walk(dir: std::path::PathBuf) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let p = e.path();
        if p.is_dir() {
            out.extend(walk(p));
        } else {
            out.push(p);
        }
    }
    out
}

/// A browser without a browser: cookies by name (paths ignored), redirects followed by hand.
struct Browser {
    client: reqwest::blocking::Client,
    jar: std::collections::HashMap<String, String>,
}

impl Browser {
    fn new() -> Browser {
        Browser {
            client: reqwest::blocking::Client::builder()
                .redirect(reqwest::redirect::Policy::none())
                .timeout(Duration::from_secs(20))
                .build()
                .unwrap(),
            jar: Default::default(),
        }
    }

    /// One request; keeps the cookies it sets. (status, Location, body)
    fn go(&mut self, method: &str, url: &str, form: Option<&str>) -> (u16, String, String) {
        let cookies = self
            .jar
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join("; ");
        let mut r = self
            .client
            .request(method.parse().unwrap(), url)
            .header("cookie", cookies);
        if let Some(f) = form {
            let origin = url.split('/').take(3).collect::<Vec<_>>().join("/");
            r = r
                .header("content-type", "application/x-www-form-urlencoded")
                .header("origin", origin)
                .body(f.to_owned());
        }
        let resp = r.send().unwrap();
        for c in resp.headers().get_all("set-cookie") {
            let first = c.to_str().unwrap().split(';').next().unwrap();
            if let Some((k, v)) = first.split_once('=') {
                if v.is_empty() {
                    self.jar.remove(k);
                } else {
                    self.jar.insert(k.to_owned(), v.to_owned());
                }
            }
        }
        let status = resp.status().as_u16();
        let location = resp
            .headers()
            .get("location")
            .map(|v| v.to_str().unwrap().to_owned())
            .unwrap_or_default();
        (status, location, resp.text().unwrap())
    }

    /// Follows redirects from `url` while they stay on `host`; the first URL off it.
    fn follow(&mut self, mut url: String, host: &str) -> (String, String) {
        let mut body = String::new();
        for _ in 0..10 {
            if !url.starts_with(host) {
                return (url, body);
            }
            let (s, loc, b) = self.go("GET", &url, None);
            body = b;
            if !(300..400).contains(&s) {
                return (url, body);
            }
            url = if loc.starts_with('/') {
                format!("{host}{loc}")
            } else {
                loc
            };
        }
        panic!("too many redirects");
    }

    /// From the inbox's "Sign in with corp" through the provider's login and consent as
    /// `user`: the callback URL the provider sends the browser back to.
    fn sign_in_at_idp(&mut self, gw: &Gateway, idp: &Idp, user: &str) -> String {
        let (s, to_idp, _) = self.go(
            "GET",
            &format!("{}/inbox/oidc/start?next=/inbox/", gw.base),
            None,
        );
        assert_eq!(s, 303);
        assert!(self.jar.contains_key("airlock_oidc"));
        assert!(
            to_idp.contains("code_challenge_method=S256")
                && to_idp.contains("nonce=")
                && to_idp.contains("state="),
            "{to_idp}"
        );
        let (interaction, page) = self.follow(to_idp, &idp.issuer);
        assert!(
            page.contains("name=\"login\""),
            "the provider's login form: {page}"
        );
        let (s, loc, _) = self.go(
            "POST",
            &interaction,
            Some(&format!("prompt=login&login={user}&password=any")),
        );
        assert_eq!(s, 303, "login");
        let (consent, page) = self.follow(
            format!(
                "{}{loc}",
                if loc.starts_with('/') {
                    idp.issuer.as_str()
                } else {
                    ""
                }
            ),
            &idp.issuer,
        );
        if consent.starts_with(&gw.base) {
            return consent;
        }
        assert!(page.contains("prompt\" value=\"consent"), "{page}");
        let (s, loc, _) = self.go("POST", &consent, Some("prompt=consent"));
        assert_eq!(s, 303, "consent");
        let (back, _) = self.follow(
            format!(
                "{}{loc}",
                if loc.starts_with('/') {
                    idp.issuer.as_str()
                } else {
                    ""
                }
            ),
            &idp.issuer,
        );
        assert!(
            back.starts_with(&format!("{}/inbox/oidc/callback?", gw.base)),
            "{back}"
        );
        back
    }
}

#[test]
fn the_inbox_signs_in_with_the_provider_and_refuses_what_it_must() {
    let w = world("");
    let gw = &w.gw;
    // The sign-in page offers the provider beside the token form.
    let mut b = Browser::new();
    let (s, _, page) = b.go("GET", &format!("{}/inbox/login", gw.base), None);
    assert_eq!(s, 200);
    assert!(
        page.contains("Sign in with corp") && page.contains("name=\"token\""),
        "{page}"
    );

    // alice signs in: the callback checks everything and starts her session.
    let back = b.sign_in_at_idp(gw, &w.idp, "alice");
    let (s, _, page) = b.go("GET", &back, None);
    assert_eq!(s, 200, "{page}");
    assert!(
        page.contains("Signed in as") && page.contains("corp:alice"),
        "{page}"
    );
    assert!(b.jar.contains_key("airlock_session") && !b.jar.contains_key("airlock_oidc"));
    let (s, _, page) = b.go("GET", &format!("{}/inbox/", gw.base), None);
    assert_eq!(s, 200);
    assert!(page.contains("corp:alice"), "{page}");
    let signed_in = audit(gw)
        .into_iter()
        .find(|r| r["kind"] == "inbox.signed_in")
        .unwrap();
    assert_eq!(
        signed_in["auth"],
        json!({"kind": "oidc", "issuer": "corp", "sub": "alice"})
    );

    // The same callback again (a replayed code, this browser's sign-in used up): nobody.
    let mut replay = Browser::new();
    let (s, _, page) = replay.go("GET", &back, None);
    assert_eq!(s, 401);
    assert!(
        page.contains("no sign-in under way") && page.contains("Nobody was signed in"),
        "{page}"
    );
    assert!(!replay.jar.contains_key("airlock_session"));
    // The replayed code with a fresh sign-in's state: the provider refuses it (used, and bound
    // to another PKCE verifier).
    let mut again = Browser::new();
    let fresh = again.sign_in_at_idp(gw, &w.idp, "bob");
    let state = fresh
        .split("state=")
        .nth(1)
        .unwrap()
        .split('&')
        .next()
        .unwrap();
    let code = back
        .split("code=")
        .nth(1)
        .unwrap()
        .split('&')
        .next()
        .unwrap();
    let forged = format!(
        "{}/inbox/oidc/callback?code={code}&state={state}&iss={}",
        gw.base,
        w.idp.issuer.replace(':', "%3A").replace('/', "%2F")
    );
    let (s, _, page) = again.go("GET", &forged, None);
    assert_eq!(s, 401, "{page}");
    assert!(page.contains("refused the code"), "{page}");
    assert!(!again.jar.contains_key("airlock_session"));

    // A forged state: refused before any code is exchanged.
    let mut forger = Browser::new();
    let real = forger.sign_in_at_idp(gw, &w.idp, "bob");
    let tampered = real.replace("state=", "state=x");
    let (s, _, page) = forger.go("GET", &tampered, None);
    assert_eq!(s, 401);
    assert!(page.contains("its state does not match"), "{page}");
    assert!(!forger.jar.contains_key("airlock_session"));

    // An agent's account is refused in words.
    let mut robot = Browser::new();
    let back = robot.sign_in_at_idp(gw, &w.idp, "robot");
    let (s, _, page) = robot.go("GET", &back, None);
    assert_eq!(s, 403);
    assert!(
        page.contains("corp:robot") && page.contains("is an agent"),
        "{page}"
    );
    assert!(!robot.jar.contains_key("airlock_session"));
    // One in no mapped group too.
    let mut eve = Browser::new();
    let back = eve.sign_in_at_idp(gw, &w.idp, "eve");
    let (s, _, page) = eve.go("GET", &back, None);
    assert_eq!(s, 401);
    assert!(page.contains("in no group"), "{page}");
    assert!(!eve.jar.contains_key("airlock_session"));
}

#[test]
fn a_browser_signs_in_with_the_provider_and_approves_and_an_agent_account_is_refused() {
    let w = world("");
    let shots =
        std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/inbox-screenshots");
    std::fs::create_dir_all(&shots).unwrap();
    let mut r = serde_json::Map::new();
    for line in peer_lines(
        std::process::Command::new("python3")
            .arg(support::peers().join("inbox_browser.py"))
            .args([w.gw.base.as_str(), shots.to_str().unwrap(), "oidc"]),
    ) {
        if let Value::Object(m) = line {
            r.extend(m);
        }
    }
    assert_eq!(r["button"], "Sign in with corp", "{r:?}");
    assert_eq!(r["who"], "corp:alice", "{r:?}");
    assert!(
        r["after_sign_in"].as_str().unwrap().ends_with("/inbox/"),
        "{r:?}"
    );
    assert_eq!(r["agent_status"], 200, "{r:?}");
    let decided = audit(&w.gw)
        .into_iter()
        .find(|r| r["kind"] == "approval.decided")
        .unwrap();
    assert_eq!(decided["by"], "corp:alice", "{decided}");
    assert_eq!(
        decided["auth"],
        json!({"kind": "oidc", "issuer": "corp", "sub": "alice"})
    );
    assert!(
        r["robot_page"].as_str().unwrap().contains("is an agent"),
        "{r:?}"
    );
    assert_eq!(r["robot_cookie"], Value::Null, "{r:?}");
}

#[test]
fn an_issuers_rate_holds_for_each_of_its_principals_on_its_own() {
    let w = world("rate = \"2/m\"");
    let gw = &w.gw;
    let agent = w.idp.token("agent-svc", &gw.base, Some("airlock:call"));
    let other = w
        .idp
        .mint(json!({"sub": "other-agent", "aud": gw.base, "groups": ["agents"], "scope": "airlock:call"}), json!({}), true);
    for _ in 0..2 {
        let (s, _, body) = call(gw, &agent, "echo.r", json!({}));
        assert_eq!(s, 200, "{body}");
    }
    let (s, _, body) = call(gw, &agent, "echo.r", json!({}));
    assert_eq!((s, code(&body)), (429, "principal.rate_limited"), "{body}");
    // Another principal of the same issuer has a bucket of its own.
    let (s, _, body) = call(gw, &other, "echo.r", json!({}));
    assert_eq!(s, 200, "{body}");
    // The refusal is counted under the issuer, not the user: one series per issuer.
    let metrics = gw.metrics();
    assert!(metrics.contains("principal=\"corp:*\""), "{metrics}");
    assert!(!metrics.contains("corp:agent-svc"), "a series per user");
    let limited = audit(gw)
        .into_iter()
        .find(|r| r["kind"] == "principal.limited")
        .unwrap();
    assert_eq!(limited["principal"], "corp:agent-svc");
    assert_eq!(limited["auth"]["kind"], "jwt");
}

#[test]
fn the_python_sdks_oauth_client_discovers_the_provider_from_the_401_and_calls() {
    let w = world("");
    let gw = &w.gw;
    let lines = peer_lines(
        std::process::Command::new("python3")
            .arg(support::peers().join("mcp_oauth_client.py"))
            .args([
                &format!("{}/mcp", gw.base),
                &w.idp.issuer,
                "agent-svc",
                "agent-svc-secret",
                "airlock:call",
                "2026-07-28",
                "echo.hello",
                r#"{"x":2}"#,
            ]),
    );
    let r = lines.last().unwrap();
    assert!(r["tools"].is_array(), "{r}");
    assert_eq!(r["result"]["isError"], false, "{r}");
    assert_eq!(
        r["result"]["structuredContent"]["args"],
        json!({"x": 2}),
        "{r}"
    );
    // It found everything itself: the 401, the resource metadata, the provider, its token.
    let sent: Vec<&str> = r["sent"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert!(
        sent.iter()
            .any(|s| s.contains("/.well-known/oauth-protected-resource")),
        "{sent:?}"
    );
    assert!(
        sent.iter()
            .any(|s| s.starts_with("POST") && s.contains(&format!("{}/token", w.idp.issuer))),
        "{sent:?}"
    );
    // The call is the provider's principal, audited with its JWT.
    let records = audit(gw);
    let decided = records
        .iter()
        .find(|r| r["kind"] == "call.decided" && r["tool"] == "echo.hello")
        .unwrap();
    assert_eq!(decided["principal"], "corp:agent-svc", "{decided}");
    assert_eq!(decided["auth"]["kind"], "jwt", "{decided}");
}

#[test]
fn an_issuers_pending_limit_holds_per_principal_and_the_token_form_can_be_turned_off() {
    let w = world_with("max_pending = 1", "token_sign_in = false");
    let gw = &w.gw;
    let agent = w.idp.token("agent-svc", &gw.base, Some("airlock:call"));
    held(gw, &agent, "db.query", json!({"sql": "select 1"}));
    let resp = gw
        .client
        .post(format!("{}/v1/calls", gw.base))
        .bearer_auth(&agent)
        .header("prefer", "respond-async")
        .header("content-type", "application/json")
        .body(json!({"tool": "db.query", "args": {"sql": "select 2"}}).to_string())
        .send()
        .unwrap();
    assert_eq!(resp.status().as_u16(), 429);
    let body: Value = resp.json().unwrap();
    assert_eq!(code(&body), "principal.too_many_pending", "{body}");
    // Another principal of the issuer has its own count.
    let other = w.idp.mint(
        json!({"sub": "other-agent", "aud": gw.base, "groups": ["agents"], "scope": "airlock:call"}),
        json!({}),
        true,
    );
    held(gw, &other, "db.query", json!({"sql": "select 3"}));

    // With `token_sign_in = false` the inbox offers the provider only, and refuses a token.
    let mut b = Browser::new();
    let (s, _, page) = b.go("GET", &format!("{}/inbox/login", gw.base), None);
    assert_eq!(s, 200);
    assert!(
        page.contains("Sign in with corp") && !page.contains("name=\"token\""),
        "{page}"
    );
    let (s, _, page) = b.go(
        "POST",
        &format!("{}/inbox/login", gw.base),
        Some("token=token-dba1&next=%2Finbox%2F"),
    );
    assert_eq!(s, 403, "{page}");
    assert!(
        page.contains("takes no tokens") && !b.jar.contains_key("airlock_session"),
        "{page}"
    );
}

#[test]
fn a_slack_user_mapped_to_a_provider_s_principal_decides_with_the_groups_of_its_sign_in() {
    use support::slack::*;
    let port = free_port();
    let slack = Slack::start(port);
    let users = "users = { \"U0ALICE\" = \"corp:alice\" }";
    let w = world_at(port, "", "", &slack_table(slack.port, users), &SLACK_ENV);
    let gw = &w.gw;
    // The sec-approvers group has no channel of its own: the default one.
    let (_, id) = gw.call_async("agent1", "db.query", json!({"sql": "select 1"}));
    let m = slack.wait_message(&id, "posted", |_| true);
    assert_eq!(m["channel"], "C0ALL");

    // Slack does not say which groups alice is in: until she signs in, she decides nothing.
    slack.click(&m, "U0ALICE", "airlock.approve", json!({}));
    slack.wait_told("U0ALICE", "sign in to the inbox once");
    assert_eq!(
        gw.req(
            "GET",
            &format!("/v1/approvals/{id}"),
            Some("admin"),
            None,
            None
        )
        .1["status"],
        "pending"
    );
    let mut b = Browser::new();
    let back = b.sign_in_at_idp(gw, &w.idp, "alice");
    let (s, _, page) = b.go("GET", &back, None);
    assert!(s == 200 && page.contains("corp:alice"), "{s} {page}");
    slack.click(&m, "U0ALICE", "airlock.approve", json!({}));
    slack.wait_message(&id, "approved", |v| {
        !has_buttons(v) && text_of(v).contains("Approved by corp:alice in Slack (user U0ALICE)")
    });
    let record = audit(gw)
        .into_iter()
        .find(|r| r["kind"] == "approval.decided" && r["approval_id"] == id)
        .unwrap();
    assert_eq!(record["by"], "corp:alice");
    assert_eq!(record["via"], "slack");
    assert_eq!(record["auth"]["user"], "U0ALICE");
}
