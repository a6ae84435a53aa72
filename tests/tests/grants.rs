//! Grants the approver scopes, end to end: a rule's maxima, an approver's choice within them
//! (API, command line, inbox), refused beyond them, always bound to the exact args; live
//! grants listed and revoked, at once, on three gateways on PostgreSQL too.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use serde_json::{json, Value};
use support::pg::Database;
use support::*;

fn policy() -> String {
    grants_policy()
}

fn call_in(gw: &Gateway, run: &str, args: Value) -> (u16, Value) {
    gw.req(
        "POST",
        "/v1/calls",
        Some("agent1"),
        Some(&json!({"tool": "multi.op", "args": args, "context": {"run_id": run}}).to_string()),
        Some("respond-async"),
    )
}

fn approve_with(gw: &Gateway, who: &str, id: &str, grant: Value) -> (u16, Value) {
    gw.req(
        "POST",
        &format!("/v1/approvals/{id}/approve"),
        Some(who),
        Some(&json!({"grant": grant}).to_string()),
        None,
    )
}

#[test]
fn an_approver_grants_within_the_maxima_bound_to_the_exact_args_and_revokes() {
    let backend = Backend::start();
    let gw = Gateway::start_with(&config_text(&backend, ""), &policy());
    let args = json!({"table": "t", "n": 1});
    let (s, b) = call_in(&gw, "run-a", args.clone());
    assert_eq!(s, 202, "{b}");
    let (call, approval) = (
        b["call_id"].as_str().unwrap().to_owned(),
        b["approval"]["id"].as_str().unwrap().to_owned(),
    );
    let a = gw
        .req(
            "GET",
            &format!("/v1/approvals/{approval}"),
            Some("dba1"),
            None,
            None,
        )
        .1;
    assert_eq!(
        a["grant"],
        json!({"uses": 1, "ttl": "10m", "scope": "call", "max_uses": 20, "max_ttl": "1h", "max_scope": "run"})
    );

    // Beyond each maximum: refused, and nothing is decided.
    for wide in [
        json!({"scope": "principal"}),
        json!({"uses": 21}),
        json!({"ttl": "2h"}),
        json!({"uses": 0}),
    ] {
        let (s, b) = approve_with(&gw, "dba1", &approval, wide.clone());
        assert_eq!(
            (s, code(&b)),
            (400, "approval.grant_too_wide"),
            "{wide}: {b}"
        );
    }
    let (s, b) = approve_with(&gw, "dba1", &approval, json!({"scope": "everyone"}));
    assert_eq!((s, code(&b)), (400, "request.invalid_field"), "{b}");
    let a = gw
        .req(
            "GET",
            &format!("/v1/approvals/{approval}"),
            Some("dba1"),
            None,
            None,
        )
        .1;
    assert_eq!(
        (
            a["status"].as_str(),
            a["decisions"].as_array().unwrap().len()
        ),
        (Some("pending"), 0)
    );

    // Within them: this run, three calls in all, half an hour.
    let (s, b) = approve_with(
        &gw,
        "dba1",
        &approval,
        json!({"scope": "run", "uses": 3, "ttl": "30m"}),
    );
    assert_eq!((s, b["status"].as_str()), (200, Some("approved")), "{b}");
    assert_eq!(b["grant"]["scope"], "run");
    assert_eq!(b["grant"]["uses"], 3);
    assert_eq!(b["grant"]["ttl"], "30m");
    assert_eq!(gw.resume("agent1", &call).0, 200);
    // The same call again in the run runs without asking; in another run, or with one byte
    // changed, it is held.
    let (s, b) = call_in(&gw, "run-a", args.clone());
    assert_eq!(s, 200, "{b}");
    assert_eq!(call_in(&gw, "run-b", args.clone()).0, 202);
    assert_eq!(call_in(&gw, "run-a", json!({"table": "t", "n": 2})).0, 202);
    assert_eq!(call_in(&gw, "run-a", json!({"table": "u", "n": 1})).0, 202);
    assert_eq!(backend.count(), 2);

    // Listed, with uses left; revoked by a dba (not by finance), and then it stops.
    let (s, list) = gw.req("GET", "/v1/grants", Some("dba2"), None, None);
    assert_eq!(s, 200, "{list}");
    let grants = list["grants"].as_array().unwrap();
    assert_eq!(grants.len(), 1, "{list}");
    let g = &grants[0];
    assert_eq!(
        (g["tool"].as_str(), g["uses_left"].as_u64()),
        (Some("multi.op"), Some(1))
    );
    assert_eq!(g["args"], args);
    let id = g["id"].as_str().unwrap().to_owned();
    let (s, b) = gw.req(
        "DELETE",
        &format!("/v1/grants/{id}"),
        Some("fin1"),
        None,
        None,
    );
    assert_eq!((s, code(&b)), (403, "approval.forbidden"), "{b}");
    let (s, b) = gw.req(
        "DELETE",
        &format!("/v1/grants/{id}"),
        Some("dba2"),
        None,
        None,
    );
    assert_eq!(s, 200, "{b}");
    assert_eq!(b["revoked"]["uses_left"], 1);
    let (s, b) = gw.req(
        "DELETE",
        &format!("/v1/grants/{id}"),
        Some("dba2"),
        None,
        None,
    );
    assert_eq!((s, code(&b)), (404, "grant.not_found"), "{b}");
    assert_eq!(
        call_in(&gw, "run-a", args.clone()).0,
        202,
        "revoked: held again"
    );
    assert_eq!(backend.count(), 2);
    let (_, audit) = gw.req("GET", "/v1/audit?limit=1000", Some("admin"), None, None);
    let revoked = audit["records"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["kind"] == "grant.revoked")
        .unwrap();
    assert_eq!(
        (revoked["by"].as_str(), revoked["approval_id"].as_str()),
        (Some("dba2"), Some(approval.as_str()))
    );

    // A rule without maxima lets nothing widen: db.* grants its own run scope, no more.
    let (_, db) = gw.call_async("agent1", "db.query", json!({"sql": "select 1"}));
    let (s, b) = approve_with(&gw, "dba1", &db, json!({"scope": "principal"}));
    assert_eq!((s, code(&b)), (400, "approval.grant_too_wide"), "{b}");
    assert!(
        b["error"]["message"]
            .as_str()
            .unwrap()
            .contains("at most `run`"),
        "{b}"
    );
    let (s, b) = approve_with(&gw, "dba1", &db, json!({"scope": "call"}));
    assert_eq!(
        (s, b["grant"]["scope"].as_str()),
        (200, Some("call")),
        "narrower is always allowed: {b}"
    );

    // The command line chooses the same way.
    let (_, cli_approval) = {
        let (s, b) = call_in(&gw, "run-c", json!({"n": 3}));
        assert_eq!(s, 202);
        (
            b["call_id"].as_str().unwrap().to_owned(),
            b["approval"]["id"].as_str().unwrap().to_owned(),
        )
    };
    let out = output_of(std::process::Command::new(airlock_bin()).args([
        "approvals",
        "approve",
        &cli_approval,
        "--for",
        "run",
        "--ttl",
        "1h",
        "--uses",
        "5",
        "--url",
        &gw.base,
        "--token",
        "token-dba1",
    ]));
    assert!(out.contains("approved"), "{out}");
    let a = gw
        .req(
            "GET",
            &format!("/v1/approvals/{cli_approval}"),
            Some("dba1"),
            None,
            None,
        )
        .1;
    assert_eq!(
        (
            a["grant"]["scope"].as_str(),
            a["grant"]["uses"].as_u64(),
            a["grant"]["ttl"].as_str()
        ),
        (Some("run"), Some(5), Some("1h"))
    );
}

#[test]
fn the_inbox_offers_the_choice_the_policy_allows_and_revokes() {
    let backend = Backend::start();
    let gw = Gateway::start_with(&config_text(&backend, ""), &policy());
    let args = json!({"table": "t", "n": 7});
    let (s, b) = call_in(&gw, "run-a", args.clone());
    assert_eq!(s, 202, "{b}");
    let r = browser_scenario(&gw.base, "grants");
    // The approval page offered the call, or the run, not the agent; the person chose the run.
    assert_eq!(r["scopes"], json!(["call", "run"]), "{r}");
    assert_eq!(r["checked"], "call", "{r}");
    assert_eq!(r["decided"], true, "{r}");
    // The grants page listed it, and revoking it from there stopped it.
    assert!(r["listed"].as_str().unwrap().contains("multi.op"), "{r}");
    assert!(r["note"].as_str().unwrap().starts_with("Revoked"), "{r}");
    assert!(r["phone_width"].as_u64().unwrap() <= 375, "{r}");
    let (_, list) = gw.req("GET", "/v1/grants", Some("dba1"), None, None);
    assert_eq!(list["grants"], json!([]));
    // Revocation is whole: the approved call that had not run is refused too, and an
    // identical one after it is held again.
    let (s, r) = gw.resume("agent1", b["call_id"].as_str().unwrap());
    assert_eq!((s, code(&r)), (403, "grant.revoked"), "{r}");
    assert_eq!(backend.count(), 0);
    assert_eq!(call_in(&gw, "run-a", args).0, 202);
}

#[test]
fn a_revoked_grant_stops_at_once_on_three_gateways_on_postgres() {
    let backend = Backend::start();
    let db = Database::fresh();
    let gws: Vec<Gateway> = ["gw-a", "gw-b", "gw-c"]
        .iter()
        .map(|name| {
            Gateway::start_with(
                &format!(
                    "{}\n[store]\nkind = \"postgres\"\nurl = \"{}\"\ninstance = \"{name}\"\n",
                    config_text(&backend, ""),
                    db.url
                ),
                &policy(),
            )
        })
        .collect();
    let args = json!({"n": 1});
    let (s, b) = call_in(&gws[0], "run-a", args.clone());
    assert_eq!(s, 202, "{b}");
    let (call, approval) = (
        b["call_id"].as_str().unwrap().to_owned(),
        b["approval"]["id"].as_str().unwrap().to_owned(),
    );
    let (s, b) = approve_with(
        &gws[1],
        "dba1",
        &approval,
        json!({"scope": "run", "uses": 10}),
    );
    assert_eq!(s, 200, "{b}");
    assert_eq!(gws[0].resume("agent1", &call).0, 200);
    // Each gateway runs the call again in the run from the grant.
    for gw in &gws {
        assert_eq!(call_in(gw, "run-a", args.clone()).0, 200);
    }
    let id = gws[2].req("GET", "/v1/grants", Some("admin"), None, None).1["grants"][0]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let (s, b) = gws[2].req(
        "DELETE",
        &format!("/v1/grants/{id}"),
        Some("admin"),
        None,
        None,
    );
    assert_eq!(s, 200, "{b}");
    // At once, on every gateway.
    for gw in &gws {
        assert_eq!(call_in(gw, "run-a", args.clone()).0, 202);
    }
    assert_eq!(backend.count(), 4);
}
