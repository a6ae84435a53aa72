//! The command line as a client of a running gateway, through the real binary: it finds the
//! gateway by `$AIRLOCK_URL` (and prints follow-up commands that reach the same one), lists and
//! revokes grants, says grant limits in durations, tells a call that ran on a grant, and tells
//! a refused or locked read of the audit log from a broken chain.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use std::process::{Command, Output};

use serde_json::{json, Value};
use support::*;

/// `airlock ARGS` with `env`, and nothing of the caller's own `AIRLOCK_*` variables.
fn airlock(args: &[&str], env: &[(&str, &str)]) -> (Output, String) {
    let mut cmd = Command::new(airlock_bin());
    for var in [
        "AIRLOCK_URL",
        "AIRLOCK_TOKEN",
        "AIRLOCK_APPROVER_TOKEN",
        "AIRLOCK_ADMIN_TOKEN",
    ] {
        cmd.env_remove(var);
    }
    let out = cmd.args(args).envs(env.iter().copied()).output().unwrap();
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out, said)
}

/// The value after `label` on a line of the CLI's summary (`call      c-…`).
fn field(said: &str, label: &str) -> String {
    said.lines()
        .find_map(|l| l.strip_prefix(label))
        .map(|v| v.trim().to_owned())
        .unwrap_or_else(|| panic!("no `{label}` in {said}"))
}

#[test]
fn client_commands_find_the_gateway_by_airlock_url_and_manage_grants() {
    let backend = Backend::start();
    let gw = Gateway::start_with(&config_text(&backend, ""), &grants_policy());
    let url = gw.base.as_str();
    let agent = [("AIRLOCK_URL", url), ("AIRLOCK_TOKEN", "token-agent1")];
    let dba = [
        ("AIRLOCK_URL", url),
        ("AIRLOCK_APPROVER_TOKEN", "token-dba1"),
    ];
    let call_args = [
        "call",
        "--tool",
        "multi.op",
        "--args",
        r#"{"n": 1}"#,
        "--context",
        r#"{"run_id": "run-1"}"#,
        "--async",
    ];

    // Found by $AIRLOCK_URL alone; the resume hint needs no --url, the next command reads it.
    let (out, said) = airlock(&call_args, &agent);
    assert_eq!(out.status.code(), Some(0), "{said}");
    assert!(said.contains("202 held for approval"), "{said}");
    let call = field(&said, "call");
    let approval = field(&said, "approval");
    assert!(
        said.lines()
            .any(|l| l == format!("resume with: airlock call --resume {call}")),
        "{said}"
    );

    // Given by --url, the hint carries it, or the resume would go to 127.0.0.1:8080.
    let mut with_flag = call_args.to_vec();
    with_flag.extend(["--url", url, "--token", "token-agent1"]);
    let (_, said) = airlock(&with_flag, &[]);
    let other = field(&said, "call");
    assert!(
        said.contains(&format!(
            "resume with: airlock call --resume {other} --url {url}"
        )),
        "{said}"
    );
    // Without either, the default is named in the refusal.
    let (out, said) = airlock(&["approvals", "list", "--token", "token-dba1"], &[]);
    assert_eq!(out.status.code(), Some(2), "{said}");
    assert!(
        said.contains("127.0.0.1:8080") && said.contains("$AIRLOCK_URL"),
        "{said}"
    );

    // A grant beyond the policy's maxima is refused in the policy's own units.
    let (out, said) = airlock(&["approvals", "approve", &approval, "--ttl", "2h"], &dba);
    assert_eq!(out.status.code(), Some(1), "{said}");
    assert!(said.contains("ttl 2h (at most 1h)"), "{said}");
    assert!(!said.contains(" ms"), "{said}");

    let (out, said) = airlock(
        &[
            "approvals",
            "approve",
            &approval,
            "--for",
            "run",
            "--uses",
            "3",
            "--ttl",
            "30m",
        ],
        &dba,
    );
    assert_eq!(out.status.code(), Some(0), "{said}");

    // The approved call ran on its approval; an identical one in the run, on the grant.
    let (out, said) = airlock(&["call", "--resume", &call, "--json"], &agent);
    assert_eq!(out.status.code(), Some(0), "{said}");
    let ran: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(ran["approval_id"], approval.as_str(), "{ran}");
    assert!(ran.get("grant_id").is_none(), "{ran}");
    let (s, b) = gw.req(
        "POST",
        "/v1/calls",
        Some("agent1"),
        Some(
            &json!({"tool": "multi.op", "args": {"n": 1}, "context": {"run_id": "run-1"}})
                .to_string(),
        ),
        None,
    );
    assert_eq!((s, b["status"].as_str()), (200, Some("completed")), "{b}");
    assert_eq!(b["approval_id"], approval.as_str(), "{b}");
    let grant = b["grant_id"]
        .as_str()
        .unwrap_or_else(|| panic!("{b}"))
        .to_owned();

    // The grant is listed, and revoked from the command line.
    let (out, said) = airlock(&["grants", "list"], &dba);
    assert_eq!(out.status.code(), Some(0), "{said}");
    let row = said
        .lines()
        .find(|l| l.starts_with(&grant))
        .unwrap_or_else(|| panic!("{said}"));
    assert!(
        row.contains("multi.op") && row.contains("run") && row.contains("agent1"),
        "{row}"
    );
    let (out, said) = airlock(&["grants", "revoke", &grant], &dba);
    assert_eq!(out.status.code(), Some(0), "{said}");
    assert!(said.contains(&format!("revoked {grant}")), "{said}");
    let (_, said) = airlock(&["grants", "list"], &dba);
    assert!(said.contains("no live grants"), "{said}");
    let (out, said) = airlock(&["grants", "revoke", &grant], &dba);
    assert_eq!(out.status.code(), Some(1), "{said}");
    assert!(said.contains("grant.not_found"), "{said}");
    // An agent cannot list them.
    let (out, said) = airlock(&["grants", "list", "--token", "token-agent1"], &agent);
    assert_eq!(out.status.code(), Some(1), "{said}");
    assert!(said.contains("auth.forbidden"), "{said}");

    // With the grant gone, the identical call waits for approval again.
    let (s, b) = gw.req(
        "POST",
        "/v1/calls",
        Some("agent1"),
        Some(
            &json!({"tool": "multi.op", "args": {"n": 1}, "context": {"run_id": "run-1"}})
                .to_string(),
        ),
        Some("respond-async"),
    );
    assert_eq!(s, 202, "{b}");
}

#[test]
fn reading_a_running_gateways_audit_says_what_stopped_it_not_tampering() {
    let backend = Backend::start();
    let gw = Gateway::start(&backend);
    let (s, _) = gw.call("agent1", "echo.hi", json!({"n": 1}), None);
    assert_eq!(s, 200);
    let url = gw.base.as_str();

    // A token that may not read the audit log: a permission error, exit 2, nothing verified.
    let (out, said) = airlock(
        &["audit", "verify", "--url", url, "--token", "token-agent1"],
        &[],
    );
    assert_eq!(out.status.code(), Some(2), "{said}");
    assert!(
        said.contains("cannot read the audit log") && said.contains("admin's token"),
        "{said}"
    );
    assert!(
        !said.contains("FAILED") && !said.contains("broken"),
        "{said}"
    );

    // An admin exports it from the running gateway; the export verifies and replays.
    let file = gw.dir.path().join("audit.jsonl");
    let (out, said) = airlock(
        &[
            "audit",
            "export",
            "--url",
            url,
            "--out",
            file.to_str().unwrap(),
        ],
        &[("AIRLOCK_ADMIN_TOKEN", "token-admin")],
    );
    assert_eq!(out.status.code(), Some(0), "{said}");
    let lines = std::fs::read_to_string(&file).unwrap().lines().count();
    assert!(lines >= 2, "{lines} records");
    assert!(
        said.contains(&format!("exported {lines} records")),
        "{said}"
    );
    let (out, said) = airlock(&["audit", "verify", "--file", file.to_str().unwrap()], &[]);
    assert_eq!(out.status.code(), Some(0), "{said}");
    assert!(said.contains(&format!("ok: {lines} records")), "{said}");
    let policy = gw.dir.path().join("policy");
    let (out, said) = airlock(
        &[
            "policy",
            "replay",
            "--policy",
            policy.to_str().unwrap(),
            "--file",
            file.to_str().unwrap(),
        ],
        &[],
    );
    assert_eq!(out.status.code(), Some(0), "{said}");

    // The running gateway's own folder is locked: the refusal says where to read instead.
    let data = gw.dir.path().join("data");
    let (out, said) = airlock(
        &[
            "policy",
            "replay",
            "--policy",
            policy.to_str().unwrap(),
            "--data-dir",
            data.to_str().unwrap(),
        ],
        &[],
    );
    assert_eq!(out.status.code(), Some(2), "{said}");
    assert!(
        said.contains("in use by another process")
            && said.contains("audit export --url")
            && said.contains("--file")
            && said.contains("--database-url"),
        "{said}"
    );
    assert!(
        !said.contains("FjallError") && !said.contains("Locked"),
        "{said}"
    );
}
