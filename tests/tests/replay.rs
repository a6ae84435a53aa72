//! `airlock policy replay`, end to end: a few hundred calls of every outcome through the real
//! binary, on fjall and on PostgreSQL, then replayed from the stopped gateway's store, from the
//! PostgreSQL store, and from an export: the same table from all three.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use std::process::Command;
use std::time::Duration;

use serde_json::{json, Value};
use support::pg::Database;
use support::*;

/// The test policy, and a rule that reads `resume`.
fn live() -> String {
    format!(
        "{POLICY}\n[[rules]]\nid = \"no-production-by-resume\"\ntools = [\"ask.*\"]\n\
         when = 'resume != null && has(resume.environment) && resume.environment == \"production\"'\n\
         decision = \"deny\"\n"
    )
}

/// Calls of every outcome: allowed, denied, approved, declined, expired, suspended and resumed
/// (and a resume denied), edited; and a few with a redacted field. Returns how many calls and
/// resumes were decided.
fn traffic(gw: &Gateway) -> usize {
    let mut decided = 0;
    for i in 0..135 {
        let (s, b) = gw.call("agent1", "echo.say", json!({"n": i}), None);
        assert_eq!(s, 200, "{b}");
        decided += 1;
    }
    for i in 0..60 {
        let (s, b) = gw.call(
            "agent2",
            "db.query",
            json!({"sql": format!("DROP TABLE t{i}")}),
            None,
        );
        assert_eq!(s, 403, "{b}");
        decided += 1;
    }
    for i in 0..40 {
        let (call, approval) =
            gw.call_async("agent1", "db.query", json!({"sql": format!("select {i}")}));
        decided += 1;
        if i % 2 == 0 {
            let (s, b) = gw.approve("dba1", &approval);
            assert_eq!(s, 200, "{b}");
            let (s, b) = gw.resume("agent1", &call);
            assert_eq!(s, 200, "{b}");
        } else {
            let (s, b) = gw.req(
                "POST",
                &format!("/v1/approvals/{approval}/decline"),
                Some("dba2"),
                Some(r#"{"reason":"not now"}"#),
                None,
            );
            assert_eq!(s, 200, "{b}");
        }
    }
    // Edited: approved as a different query, which is what ran.
    for i in 0..10 {
        let (_, approval) = gw.call_async(
            "agent1",
            "db.query",
            json!({"sql": format!("update t set x = {i}")}),
        );
        decided += 1;
        let edit = json!({"args": {"sql": format!("update t set x = {i} where id = 1")}, "reason": "scoped"});
        let (s, b) = gw.req(
            "POST",
            &format!("/v1/approvals/{approval}/approve"),
            Some("dba1"),
            Some(&edit.to_string()),
            None,
        );
        assert_eq!(s, 200, "{b}");
        assert_eq!(b["status"], "approved", "{b}");
        assert!(b["edited_args"].is_object(), "{b}");
    }
    // Expired.
    for i in 0..10 {
        gw.call_async("agent1", "short.op", json!({"n": i}));
        decided += 1;
    }
    std::thread::sleep(Duration::from_millis(1500));
    // Suspended, then resumed (staging), or a resume denied (production).
    for i in 0..20 {
        let (s, b) = gw.req(
            "POST",
            "/v1/calls",
            Some("agent1"),
            Some(&json!({"tool": "ask.deploy", "args": {"n": i}}).to_string()),
            None,
        );
        assert_eq!((s, b["status"].as_str()), (202, Some("suspended")), "{b}");
        decided += 1;
        let id = b["call_id"].as_str().unwrap();
        let env = if i % 4 == 0 { "production" } else { "staging" };
        let (s, b) = gw.req(
            "POST",
            &format!("/v1/calls/{id}/resume"),
            Some("agent1"),
            Some(&json!({"resume_data": {"environment": env}}).to_string()),
            None,
        );
        assert_eq!(s, if env == "production" { 403 } else { 200 }, "{b}");
        decided += 1;
    }
    // Redacted (`[audit] redact = ["/password"]`): not replayable.
    for i in 0..5 {
        let (s, b) = gw.call(
            "agent1",
            "echo.login",
            json!({"user": i, "password": "hunter2"}),
            None,
        );
        assert_eq!(s, 200, "{b}");
        decided += 1;
    }
    decided
}

/// Runs `airlock policy replay` with `args`; returns the exit code and stdout.
fn replay(args: &[&str]) -> (i32, String) {
    let out = Command::new(airlock_bin())
        .args(["policy", "replay"])
        .args(args)
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr),
    )
}

fn replay_json(args: &[&str]) -> Value {
    let mut all = args.to_vec();
    all.push("--json");
    let (code, out) = replay(&all);
    assert_eq!(code, 0, "{out}");
    serde_json::from_str(out.lines().next().unwrap()).unwrap_or_else(|e| panic!("{e}: {out}"))
}

/// What must be the same from every source.
fn table(v: &Value) -> Value {
    json!({"replayed": v["replayed"], "transitions": v["transitions"], "not_replayable": v["not_replayable"], "widening": v["widening"]})
}

#[test]
fn replay_gives_the_same_table_from_fjall_postgres_and_an_export() {
    let backend = Backend::start();
    let policy = live();

    // fjall.
    let mut gw = Gateway::start_with(&config_text(&backend, ""), &policy);
    let decided = traffic(&gw);
    assert!(decided >= 300, "{decided}");
    gw.kill9();
    let dir = gw.dir.path().to_owned();
    let policy_dir = dir.join("policy");
    let data = dir.join("data");
    let p = policy_dir.to_str().unwrap();
    let d = data.to_str().unwrap();

    // The live set itself: nothing changes, and the redacted calls are counted apart.
    let same = replay_json(&["--policy", p, "--data-dir", d]);
    assert_eq!(same["replayed"], (decided - 5) as u64, "{same}");
    assert_eq!(same["not_replayable"], json!({"redacted": 5}), "{same}");
    assert_eq!(same["widening"], 0);
    assert!(same["changed"].as_array().unwrap().is_empty(), "{same}");
    assert!(
        same["transitions"]
            .as_array()
            .unwrap()
            .iter()
            .all(|t| t["changed"] == false),
        "{same}"
    );
    let pairs: Vec<(String, u64)> = same["transitions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| {
            (
                t["recorded"].as_str().unwrap().to_owned(),
                t["count"].as_u64().unwrap(),
            )
        })
        .collect();
    // Most first. allow: 135 echo, 20 ask and 15 staging resumes; require_approval: 40 + 10 + 10; deny:
    // 60 drops and 5 production resumes.
    assert_eq!(
        pairs,
        vec![
            ("allow".to_owned(), 170),
            ("deny".to_owned(), 65),
            ("require_approval".to_owned(), 60)
        ],
        "{same}"
    );
    // The same answer twice: replay writes nothing.
    assert_eq!(
        table(&replay_json(&["--policy", p, "--data-dir", d])),
        table(&same)
    );

    // From an export of the same store.
    let export = dir.join("audit.jsonl");
    let out = Command::new(airlock_bin())
        .args([
            "audit",
            "export",
            "--data-dir",
            d,
            "--out",
            export.to_str().unwrap(),
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let from_file = replay_json(&["--policy", p, "--file", export.to_str().unwrap()]);
    assert_eq!(table(&from_file), table(&same));

    // PostgreSQL: the same traffic on a gateway of its own, replayed from the database.
    let db = Database::fresh();
    let pg = Gateway::start_with(
        &format!(
            "{}\n[store]\nkind = \"postgres\"\nurl = \"{}\"\n",
            config_text(&backend, ""),
            db.url
        ),
        &policy,
    );
    assert_eq!(traffic(&pg), decided);
    let from_pg = replay_json(&["--policy", p, "--database-url", &db.url]);
    assert_eq!(table(&from_pg), table(&same));
    drop(pg);

    // A looser set: DROP held for approval instead of denied, and production resumes allowed.
    let loose_dir = tempfile::tempdir().unwrap();
    std::fs::write(
        loose_dir.path().join("policy.toml"),
        policy
            .replace(
                "decision = \"deny\"\nmessage = \"DROP is never allowed\"",
                "decision = \"require_approval\"\nmessage = \"DROP needs a DBA\"",
            )
            .replace(
                "resume.environment == \"production\"'\ndecision = \"deny\"",
                "resume.environment == \"production\"'\ndecision = \"allow\"",
            ),
    )
    .unwrap();
    let lp = loose_dir.path().to_str().unwrap();
    let loose = replay_json(&["--policy", lp, "--data-dir", d]);
    assert_eq!(loose["widening"], 65, "{loose}");
    let first = &loose["transitions"][0];
    assert_eq!(
        (
            first["recorded"].as_str(),
            first["replayed"].as_str(),
            first["count"].as_u64()
        ),
        (Some("deny"), Some("require_approval"), Some(60)),
        "{loose}"
    );
    let changed = loose["changed"].as_array().unwrap();
    assert_eq!(changed.len(), 65);
    assert!(changed.iter().all(|c| c["widening"] == true));
    let resume = changed.iter().find(|c| c["what"] == "resume").unwrap();
    assert!(
        resume["recorded_rules"]
            .as_array()
            .unwrap()
            .contains(&json!("no-production-by-resume")),
        "{resume}"
    );
    assert_eq!(
        (replay(&["--policy", lp, "--data-dir", d, "--fail-on-widening"])).0,
        1
    );
    // The text report says the same, widening first.
    let (code, text) = replay(&["--policy", lp, "--file", export.to_str().unwrap()]);
    assert_eq!(code, 0, "{text}");
    assert!(
        text.contains("not replayable: 5 (args or resume data with a redacted field)"),
        "{text}"
    );
    let lines: Vec<&str> = text.lines().collect();
    let header = lines
        .iter()
        .position(|l| l.starts_with("recorded"))
        .unwrap();
    assert!(
        lines[header + 1].starts_with("deny")
            && lines[header + 1].contains("require_approval")
            && lines[header + 1].ends_with("widening"),
        "{text}"
    );
    // The same rule ids matched, now deciding otherwise.
    assert!(
        text.contains("deny → require_approval  rules: (the same rules)"),
        "{text}"
    );

    // A stricter set narrows only: --fail-on-widening passes; the edits are replayed as what
    // ran (their `where id = 1` is what a stricter rule reads).
    let strict_dir = tempfile::tempdir().unwrap();
    std::fs::write(
        strict_dir.path().join("policy.toml"),
        format!("{policy}\n[[rules]]\nid = \"no-scoped-updates\"\ntools = [\"db.*\"]\nwhen = 'args.sql.contains(\"where id = 1\")'\ndecision = \"deny\"\n"),
    )
    .unwrap();
    let sp = strict_dir.path().to_str().unwrap();
    let (code, text) = replay(&[
        "--policy",
        sp,
        "--data-dir",
        d,
        "--fail-on-widening",
        "--json",
    ]);
    assert_eq!(code, 0, "{text}");
    let strict: Value = serde_json::from_str(text.lines().next().unwrap()).unwrap();
    let changed = strict["changed"].as_array().unwrap();
    assert_eq!(changed.len(), 10, "{strict}");
    assert!(
        changed
            .iter()
            .all(|c| c["what"] == "edited" && c["replayed"] == "deny"),
        "{strict}"
    );

    // A window: nothing before --since.
    let none = replay_json(&[
        "--policy",
        p,
        "--data-dir",
        d,
        "--since",
        "2999-01-01T00:00:00Z",
    ]);
    assert_eq!(none["replayed"], 0);
    let (code, text) = replay(&["--policy", p, "--data-dir", d, "--since", "yesterday"]);
    assert_eq!(code, 2, "{text}");
    assert!(text.contains("request.invalid_time"), "{text}");
    // An export with a line that is not a record: named, with its line, and nothing replayed.
    let broken = dir.join("broken.jsonl");
    std::fs::write(
        &broken,
        format!(
            "{}\nnot json\n",
            std::fs::read_to_string(&export)
                .unwrap()
                .lines()
                .next()
                .unwrap()
        ),
    )
    .unwrap();
    let (code, text) = replay(&["--policy", p, "--file", broken.to_str().unwrap()]);
    assert_eq!(code, 2, "{text}");
    assert!(
        text.contains("audit.invalid") && text.contains("broken.jsonl:2"),
        "{text}"
    );
}

/// A widening is a widening whatever it widens: a candidate that keeps every decision but
/// moves the approvers, or raises what an approver may grant, fails `--fail-on-widening`.
#[test]
fn a_candidate_that_only_moves_approvers_or_raises_maxima_is_widening() {
    let backend = Backend::start();
    let mut gw = Gateway::start(&backend);
    for i in 0..5 {
        gw.call_async("agent1", "db.query", json!({"sql": format!("select {i}")}));
    }
    gw.kill9();
    let dir = gw.dir.path().to_owned();
    let data = dir.join("data");
    let d = data.to_str().unwrap();
    let candidate = |text: String| {
        let c = tempfile::tempdir().unwrap();
        std::fs::write(c.path().join("policy.toml"), text).unwrap();
        c
    };
    let moved = candidate(POLICY.replace(
        "decision = \"require_approval\"\napprovers = [\"dba\"]",
        "decision = \"require_approval\"\napprovers = [\"ops\"]",
    ));
    let raised = candidate(POLICY.replace(
        "decision = \"require_approval\"\napprovers = [\"dba\"]",
        "decision = \"require_approval\"\napprovers = [\"dba\"]\ngrant = { uses = 1, ttl = \"10m\", scope = \"run\", max_uses = 1000, max_ttl = \"30d\", max_scope = \"principal\" }",
    ));
    let stricter = candidate(POLICY.replace(
        "decision = \"require_approval\"\napprovers = [\"dba\"]",
        "decision = \"require_approval\"\napprovers = [\"dba\"]\nquorum = 2",
    ));
    for (set, looser, settings) in [
        (&moved, true, json!(["approvers"])),
        (
            &raised,
            true,
            json!(["grant.max_uses", "grant.max_ttl", "grant.max_scope"]),
        ),
        (&stricter, false, json!(["quorum"])),
    ] {
        let p = set.path().to_str().unwrap();
        let (code, out) = replay(&[
            "--policy",
            p,
            "--data-dir",
            d,
            "--fail-on-widening",
            "--json",
        ]);
        assert_eq!(code, if looser { 1 } else { 0 }, "{out}");
        let v: Value = serde_json::from_str(out.lines().next().unwrap()).unwrap();
        assert_eq!(v["widening"], if looser { 5 } else { 0 }, "{v}");
        let first = &v["transitions"][0];
        assert_eq!(
            (&first["recorded"], &first["replayed"], &first["count"]),
            (
                &json!("require_approval"),
                &json!("require_approval"),
                &json!(5)
            ),
            "{v}"
        );
        assert_eq!(
            first["settings"],
            if looser { "looser" } else { "stricter" },
            "{v}"
        );
        assert_eq!(v["changed"][0]["settings"], settings, "{v}");
        // The text report names the settings too.
        let (_, text) = replay(&["--policy", p, "--data-dir", d]);
        assert!(
            text.contains(&format!(
                "{} settings: {}",
                if looser { "looser" } else { "stricter" },
                settings[0].as_str().unwrap()
            )),
            "{text}"
        );
    }
}
