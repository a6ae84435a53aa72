//! The policy command line, run as the real binary: golden policy sets, exit codes, and the
//! error code for each class of bad input.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Output, Stdio};

use serde_json::Value;

fn airlock(args: &[&str], stdin: Option<&[u8]>) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_airlock"))
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn airlock");
    let mut input = child.stdin.take().expect("stdin");
    input
        .write_all(stdin.unwrap_or_default())
        .expect("write stdin");
    drop(input);
    child.wait_with_output().expect("wait")
}

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[test]
fn shipped_policy_sets_pass_their_golden_cases() {
    let policies = repo().join("policies");
    let out = airlock(&["policy", "test", policies.to_str().unwrap()], None);
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}");
    let last = stdout.lines().last().unwrap();
    let passed: usize = last.split(' ').next().unwrap().parse().unwrap();
    assert_eq!(last, format!("{passed} passed, 0 failed"));
    assert!(passed >= 50, "{last}");
    for set in ["default", "shell", "database", "payments", "devops"] {
        let dir = policies.join(set);
        assert!(
            airlock(&["policy", "check", dir.to_str().unwrap()], None)
                .status
                .success(),
            "{set}"
        );
        let cases = stdout
            .lines()
            .filter(|l| l.contains(&format!("{set}/{set}.cases.toml")))
            .count();
        assert!(cases >= 10, "{set} has {cases} cases");
    }
}

#[test]
fn a_failing_case_fails_the_run() {
    let dir = std::env::temp_dir().join(format!("airlock-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("p.toml"),
        "version = 1\n[defaults]\ndecision = \"deny\"\n",
    )
    .unwrap();
    std::fs::write(
        dir.join("p.cases.toml"),
        "[[case]]\nname = \"wrong\"\ntool = \"a.b\"\nexpect = \"allow\"\n",
    )
    .unwrap();
    let out = airlock(&["policy", "test", dir.to_str().unwrap()], None);
    assert_eq!(out.status.code(), Some(1));
    let stdout = text(&out.stdout);
    assert_eq!(stdout.lines().last(), Some("0 passed, 1 failed"));
    assert!(stdout.contains("expected allow, got deny"), "{stdout}");

    std::fs::write(dir.join("p.toml"), "version = 1\n[defaults]\ndecision = \"deny\"\n[[rules]]\nid = \"r\"\nwhen = 'nope == 1'\ndecision = \"allow\"\n").unwrap();
    let out = airlock(
        &["policy", "check", dir.join("p.toml").to_str().unwrap()],
        None,
    );
    assert_eq!(out.status.code(), Some(1));
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("p.toml:6:9: rule `r`:") && stderr.contains("(policy.unknown_variable)"),
        "{stderr}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_case_whose_rule_fails_says_so_in_words_and_how_to_expect_it() {
    let dir = std::env::temp_dir().join(format!("airlock-cli-errors-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("p.toml"),
        "version = 1\n[defaults]\ndecision = \"allow\"\n[[rules]]\nid = \"long-cmd\"\ntools = [\"shell.exec\"]\nwhen = 'args.cmd.size() > 3'\ndecision = \"deny\"\n",
    )
    .unwrap();
    let case = "[[case]]\nname = \"no cmd\"\ntool = \"shell.exec\"\nargs = { other = 1 }\nexpect = \"deny\"\n";
    std::fs::write(dir.join("p.cases.toml"), case).unwrap();
    let out = airlock(&["policy", "test", dir.to_str().unwrap()], None);
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    assert!(
        stdout.contains("rules failed to evaluate: `long-cmd` (")
            && stdout.contains("add expect_errors = [\"long-cmd\"]"),
        "{stdout}"
    );
    assert!(!stdout.contains("RuleError"), "{stdout}");

    // With the failure expected, the case passes.
    std::fs::write(
        dir.join("p.cases.toml"),
        format!("{case}expect_errors = [\"long-cmd\"]\n"),
    )
    .unwrap();
    let out = airlock(&["policy", "test", dir.to_str().unwrap()], None);
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn eval_judges_a_resource_read_as_the_gateway_would() {
    let policy = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../policies/mcp");
    let p = policy.to_str().unwrap();
    let out = airlock(
        &[
            "policy",
            "eval",
            "--policy",
            p,
            "--kind",
            "resource",
            "--server",
            "fs",
            "--uri",
            "file:///etc/shadow",
            "--args",
            r#"{"uri":"file:///etc/shadow"}"#,
        ],
        None,
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["decision"], "require_approval", "{v}");
    assert_eq!(v["rules"], serde_json::json!(["hold-secret-resources"]));
    assert_eq!(
        (v["kind"].as_str(), v["uri"].as_str()),
        (Some("resource"), Some("file:///etc/shadow"))
    );
    // The fingerprint is over the kind, the target and the params, not a tool's.
    assert_eq!(
        v["fingerprint"],
        airlock_policy::request_fingerprint(
            "resource",
            "file:///etc/shadow",
            &serde_json::json!({"uri": "file:///etc/shadow"})
        )
        .as_str()
    );
    // A resource without its URI, or with a tool, is bad input.
    for extra in [
        &["--kind", "resource"][..],
        &["--kind", "prompt", "--tool", "a.b", "--prompt", "p"],
    ] {
        let mut args = vec!["policy", "eval", "--policy", p, "--args", "{}"];
        args.extend_from_slice(extra);
        let out = airlock(&args, None);
        assert_eq!(out.status.code(), Some(2), "{extra:?}");
        assert!(
            text(&out.stderr).contains("error[request.invalid_field]"),
            "{}",
            text(&out.stderr)
        );
    }
}

#[test]
fn fingerprint_prints_canonical_args_and_reads_stdin() {
    let out = airlock(
        &[
            "fingerprint",
            "--tool",
            "db.query",
            "--args",
            r#"{ "b": 1.0, "a": "\u00e9" }"#,
        ],
        None,
    );
    assert!(out.status.success());
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["canonical"], r#"{"a":"é","b":1}"#);
    let from_stdin = airlock(
        &["fingerprint", "--tool", "db.query", "--args", "-"],
        Some(br#"{"a":"\u00e9","b":1e0}"#),
    );
    let w: Value = serde_json::from_slice(&from_stdin.stdout).unwrap();
    assert_eq!(v["fingerprint"], w["fingerprint"]);
    assert!(v["fingerprint"].as_str().unwrap().starts_with("sha256:"));
}

#[test]
fn bad_input_exits_2_with_its_code() {
    let deep = format!("{{\"a\":{}{}}}", "[".repeat(64), "]".repeat(64));
    let cases: Vec<(&str, String, &str)> = vec![
        ("t", r#"{"a":1,"a":2}"#.into(), "request.duplicate_key"),
        (
            "t",
            r#"{"a":9007199254740993}"#.into(),
            "request.unsafe_number",
        ),
        ("t", r#"{"a":1e400}"#.into(), "request.unsafe_number"),
        ("t", deep, "request.too_deep"),
        ("t", r#"{"a":"#.into(), "request.invalid_json"),
        ("t", "[1]".into(), "request.invalid_args"),
        ("bad tool", "{}".into(), "request.invalid_tool"),
    ];
    for (tool, args, code) in cases {
        let out = airlock(
            &["fingerprint", "--tool", tool, "--args", "-"],
            Some(args.as_bytes()),
        );
        assert_eq!(out.status.code(), Some(2), "{args}");
        assert!(
            text(&out.stderr).contains(&format!("error[{code}]")),
            "{args}: {}",
            text(&out.stderr)
        );
        assert!(out.stdout.is_empty());
    }
    let invalid_utf8 = airlock(
        &["fingerprint", "--tool", "t", "--args", "-"],
        Some(b"{\"a\":\"\xff\"}"),
    );
    assert_eq!(invalid_utf8.status.code(), Some(2));
    assert!(text(&invalid_utf8.stderr).contains("error[request.invalid_json]"));
}

#[test]
fn eval_explains_the_decision() {
    let policy = repo().join("policies/payments");
    let out = airlock(
        &[
            "policy",
            "eval",
            "--policy",
            policy.to_str().unwrap(),
            "--tool",
            "payments.refund",
            "--args",
            r#"{"amount": 9000, "currency": "EUR"}"#,
            "--context",
            r#"{"agent_id":"support-bot"}"#,
        ],
        None,
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["decision"], "require_approval");
    assert_eq!(v["quorum"], 2);
    assert_eq!(v["approvers"], serde_json::json!(["finance"]));
    assert_eq!(v["approval_ttl"], "1h");
    assert_eq!(
        v["grant"],
        serde_json::json!({"uses": 1, "ttl": "5m", "scope": "call", "max_uses": 1, "max_ttl": "5m", "max_scope": "call"})
    );
    assert_eq!(
        v["rules"],
        serde_json::json!(["agent:support-bot", "approve-large", "tool:payments.refund"])
    );
    assert!(v["policy_version"].as_str().unwrap().starts_with("sha256:"));
    assert!(v["fingerprint"].as_str().unwrap().starts_with("sha256:"));

    let with_classifier = airlock(
        &[
            "policy",
            "eval",
            "--policy",
            repo().join("policies/default").to_str().unwrap(),
            "--tool",
            "x.y",
            "--args",
            "{}",
            "--classifier",
            r#"{"risk":{"score":2}}"#,
        ],
        None,
    );
    assert_eq!(with_classifier.status.code(), Some(2));
    assert!(text(&with_classifier.stderr).contains("error[request.invalid_classifier]"));

    let bad_now = airlock(
        &[
            "policy",
            "eval",
            "--policy",
            repo().join("policies/default").to_str().unwrap(),
            "--tool",
            "x.y",
            "--args",
            "{}",
            "--now",
            "yesterday",
        ],
        None,
    );
    assert_eq!(bad_now.status.code(), Some(2));
    assert!(text(&bad_now.stderr).contains("error[request.invalid_time]"));
}
