//! The command line as a new user meets it: the demo (`airlock serve` with no config) and the
//! client commands, run as the real binary. One test per stumble a user reported: a verify
//! that cannot fail on a typo, approval commands and tokens, a second gateway on a locked
//! store, a port in use, a held call that printed nothing, look-alike ids, unhelpful errors,
//! demo tokens after a restart, and help texts.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use std::io::{BufRead, BufReader, Read};
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use support::*;

/// A demo gateway: the binary with no config, on a free port and a temp data dir.
struct Demo {
    child: Child,
    base: String,
    agent: String,
    approver: String,
    admin: String,
    /// Everything it printed on stdout before it said it listens.
    stdout: String,
}

impl Demo {
    fn start(data: &Path) -> Demo {
        let mut child = Command::new(airlock_bin())
            .args(["serve", "--listen", "127.0.0.1:0", "--data-dir"])
            .arg(data)
            .env("AIRLOCK_LOG", "warn")
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let mut reader = BufReader::new(child.stdout.take().unwrap());
        let mut stdout = String::new();
        let mut line = String::new();
        let base = loop {
            line.clear();
            assert!(
                reader.read_line(&mut line).unwrap() > 0,
                "the demo exited early:\n{stdout}"
            );
            stdout.push_str(&line);
            if let Some(rest) = line.trim().strip_prefix("airlock listening on ") {
                break rest.split(' ').next().unwrap().to_owned();
            }
        };
        std::thread::spawn(move || for _ in reader.lines() {});
        let token = |var: &str| {
            stdout
                .lines()
                .find_map(|l| l.trim().split_once(&format!("export {var}=")))
                .map(|(_, t)| t.to_owned())
                .unwrap_or_else(|| panic!("no {var} in:\n{stdout}"))
        };
        Demo {
            agent: token("AIRLOCK_TOKEN"),
            approver: token("AIRLOCK_APPROVER_TOKEN"),
            admin: token("AIRLOCK_ADMIN_TOKEN"),
            base,
            stdout: stdout.clone(),
            child,
        }
    }

    /// Runs `airlock ARGS` against this gateway with only `env` set of the token variables.
    fn cli(&self, args: &[&str], env: &[(&str, &str)]) -> Output {
        let mut cmd = Command::new(airlock_bin());
        cmd.args(args)
            .args(["--url", &self.base])
            .env_remove("AIRLOCK_TOKEN")
            .env_remove("AIRLOCK_APPROVER_TOKEN")
            .env_remove("AIRLOCK_ADMIN_TOKEN");
        for (k, v) in env {
            cmd.env(k, v);
        }
        cmd.output().unwrap()
    }

    /// Runs `airlock ARGS` with its stdout a pipe nobody reads (closed before it writes, as
    /// `| head` leaves it), and returns its exit code and stderr.
    fn cli_into_closed_pipe(&self, args: &[&str], env: &[(&str, &str)]) -> (Option<i32>, String) {
        let mut cmd = Command::new(airlock_bin());
        cmd.args(args)
            .args(["--url", &self.base])
            .env_remove("AIRLOCK_TOKEN")
            .env_remove("AIRLOCK_APPROVER_TOKEN")
            .env_remove("AIRLOCK_ADMIN_TOKEN")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        for (k, v) in env {
            cmd.env(k, v);
        }
        let mut child = cmd.spawn().unwrap();
        drop(child.stdout.take());
        let out = child.wait_with_output().unwrap();
        (out.status.code(), text(&out.stderr))
    }

    fn held_call(&self) -> Value {
        let r = reqwest::blocking::Client::new()
            .post(format!("{}/v1/calls", self.base))
            .bearer_auth(&self.agent)
            .header("prefer", "respond-async")
            .json(&json!({"tool": "demo.shell_preview", "args": {"command": "rm -rf build/"}}))
            .send()
            .unwrap();
        assert_eq!(r.status().as_u16(), 202);
        r.json().unwrap()
    }

    fn stop(mut self) {
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        let _ = self.child.wait();
    }
}

impl Drop for Demo {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn airlock(args: &[&str]) -> Output {
    Command::new(airlock_bin()).args(args).output().unwrap()
}

#[test]
fn audit_commands_refuse_a_folder_without_a_store_and_create_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let typo = tmp.path().join("airlock-demo-dta");
    for args in [
        vec!["audit", "verify", "--data-dir", typo.to_str().unwrap()],
        vec!["audit", "export", "--data-dir", typo.to_str().unwrap()],
    ] {
        let out = airlock(&args);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let err = text(&out.stderr);
        assert!(err.contains("error[store.not_found]"), "{err}");
        assert!(!text(&out.stdout).contains("ok"), "{}", text(&out.stdout));
        assert!(!typo.exists(), "{args:?} created the folder");
    }
    // A folder that exists but holds no store is refused too, and left as it was.
    let empty = tmp.path().join("empty");
    std::fs::create_dir(&empty).unwrap();
    let out = airlock(&["audit", "verify", "--data-dir", empty.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("does not hold an airlock store"));
    assert_eq!(std::fs::read_dir(&empty).unwrap().count(), 0);

    // The real store still verifies.
    let data = tmp.path().join("data");
    let demo = Demo::start(&data);
    demo.stop();
    let out = airlock(&["audit", "verify", "--data-dir", data.to_str().unwrap()]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let ok = text(&out.stdout);
    assert!(ok.starts_with("ok: ") && !ok.starts_with("ok: 0"), "{ok}");
}

#[test]
fn approval_commands_use_the_approver_token_and_explain_an_agent_token() {
    let tmp = tempfile::tempdir().unwrap();
    let demo = Demo::start(&tmp.path().join("data"));
    let held = demo.held_call();
    let approval = held["approval"]["id"].as_str().unwrap();

    // With only the agent's token, the refusal says which token to use.
    let out = demo.cli(
        &["approvals", "decline", approval, "--reason", "no"],
        &[("AIRLOCK_TOKEN", &demo.agent)],
    );
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stdout).contains("403 approval.forbidden"),
        "{}",
        text(&out.stdout)
    );
    assert!(
        text(&out.stdout).contains("use an approver's or an admin's token"),
        "{}",
        text(&out.stdout)
    );
    assert!(text(&out.stderr).contains("AIRLOCK_APPROVER_TOKEN"));

    // With both set (as the demo's exports leave them), the approver's token is used.
    let both = [
        ("AIRLOCK_TOKEN", demo.agent.as_str()),
        ("AIRLOCK_APPROVER_TOKEN", demo.approver.as_str()),
    ];
    let out = demo.cli(&["approvals", "list"], &both);
    assert!(out.status.success(), "{}", text(&out.stdout));
    let table = text(&out.stdout);
    let header = table.lines().next().unwrap();
    assert!(
        header.starts_with("ID") && header.contains("CALL"),
        "{table}"
    );
    assert!(table.contains(held["call_id"].as_str().unwrap()), "{table}");
    // The approver sees what the call would do.
    assert!(header.ends_with("ARGS"), "{table}");
    assert!(table.contains(r#"{"command":"rm -rf build/"}"#), "{table}");

    let out = demo.cli(&["approvals", "show", approval], &both);
    let shown = text(&out.stdout);
    // Every row's value starts in the same column, the fingerprint's included.
    let columns: Vec<usize> = shown
        .lines()
        .filter_map(|l| {
            let key = l.find(' ')?;
            Some(key + l[key..].find(|c| c != ' ')?)
        })
        .collect();
    assert!(columns.len() >= 10, "{shown}");
    assert!(
        columns.windows(2).all(|w| w[0] == w[1]),
        "misaligned:\n{shown}"
    );
    assert!(shown.contains("fingerprint  sha256:"), "{shown}");
    assert!(
        shown.contains("approvers    any approver (quorum 1)"),
        "{shown}"
    );

    // Listing with the agent's token says whose routes these are, and whose token it is.
    let out = demo.cli(&["approvals", "list"], &[("AIRLOCK_TOKEN", &demo.agent)]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stdout).contains(
            "403 auth.forbidden: this route is for approvers and admins, and this is an agent's token"
        ),
        "{}",
        text(&out.stdout)
    );

    let out = demo.cli(
        &["approvals", "decline", approval, "--reason", "not today"],
        &both,
    );
    assert!(out.status.success(), "{}", text(&out.stdout));
    assert!(text(&out.stdout).contains("declined"));
}

#[test]
fn a_second_gateway_on_a_store_in_use_prints_no_tokens_and_fails() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    let first = Demo::start(&data);
    assert!(first.stdout.contains("AIRLOCK_TOKEN="));
    let out = Command::new(airlock_bin())
        .args(["serve", "--listen", "127.0.0.1:0", "--data-dir"])
        .arg(&data)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let stdout = text(&out.stdout);
    assert!(
        !stdout.contains("listening") && !stdout.contains("AIRLOCK_TOKEN"),
        "claimed success before failing:\n{stdout}"
    );
    let err = text(&out.stderr);
    assert!(
        err.contains("error[gateway.start]") && err.contains("in use by another process"),
        "{err}"
    );
}

#[test]
fn a_port_in_use_has_its_own_code_and_suggests_listen() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    let tmp = tempfile::tempdir().unwrap();
    let out = Command::new(airlock_bin())
        .args(["serve", "--listen", &addr, "--data-dir"])
        .arg(tmp.path().join("data"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = text(&out.stderr);
    assert!(err.contains("error[server.address_in_use]"), "{err}");
    assert!(err.contains("--listen 127.0.0.1:0"), "{err}");
    assert!(!text(&out.stdout).contains("AIRLOCK_TOKEN"));
}

#[test]
fn a_held_call_prints_its_ids_at_once_then_the_result() {
    let tmp = tempfile::tempdir().unwrap();
    let demo = Demo::start(&tmp.path().join("data"));
    let mut child = Command::new(airlock_bin())
        .args([
            "call",
            "--url",
            &demo.base,
            "--tool",
            "demo.shell_preview",
            "--args",
            r#"{"command": "make deploy"}"#,
            "--wait",
            "20",
        ])
        .env("AIRLOCK_TOKEN", &demo.agent)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut err = BufReader::new(child.stderr.take().unwrap());
    let mut first = String::new();
    err.read_line(&mut first).unwrap();
    // `held for approval: call call_…, approval apr_…`, before anyone decided.
    let (call_id, approval) = first
        .trim()
        .strip_prefix("held for approval: call ")
        .and_then(|r| r.split_once(", approval "))
        .unwrap_or_else(|| panic!("{first}"));
    assert!(call_id.starts_with("call_") && approval.starts_with("apr_"));
    let mut second = String::new();
    err.read_line(&mut second).unwrap();
    assert_eq!(
        second.trim(),
        format!(
            "decide in the inbox: {}/inbox/approvals/{approval}",
            demo.base
        )
    );
    let r = reqwest::blocking::Client::new()
        .post(format!("{}/v1/approvals/{approval}/approve", demo.base))
        .bearer_auth(&demo.approver)
        .json(&json!({}))
        .send()
        .unwrap();
    assert_eq!(r.status().as_u16(), 200);
    let start = Instant::now();
    let status = child.wait().unwrap();
    assert!(start.elapsed() < Duration::from_secs(10));
    let mut out = String::new();
    child
        .stdout
        .take()
        .unwrap()
        .read_to_string(&mut out)
        .unwrap();
    assert!(status.success(), "{out}");
    assert!(out.starts_with("200 completed"), "{out}");
    assert!(out.contains(call_id), "{out}");
}

#[test]
fn the_shutdown_answer_to_a_held_call_names_the_call() {
    let backend = Backend::start();
    let mut gw = Gateway::start(&backend);
    let base = gw.base.clone();
    let held = std::thread::spawn(move || {
        reqwest::blocking::Client::new()
            .post(format!("{base}/v1/calls"))
            .bearer_auth("token-agent1")
            .header("prefer", "wait=30")
            .json(&json!({"tool": "db.query", "args": {"sql": "select 1"}}))
            .send()
            .unwrap()
    });
    // Wait until the call is held (its approval exists), then stop the gateway.
    let deadline = Instant::now() + Duration::from_secs(10);
    while gw.req("GET", "/v1/approvals", Some("dba1"), None, None).1["approvals"]
        .as_array()
        .is_none_or(Vec::is_empty)
    {
        assert!(Instant::now() < deadline);
        std::thread::sleep(Duration::from_millis(20));
    }
    gw.signal("-TERM");
    let r = held.join().unwrap();
    assert_eq!(r.status().as_u16(), 503);
    let b: Value = r.json().unwrap();
    assert_eq!(code(&b), "gateway.shutting_down");
    let call_id = b["error"]["details"]["call_id"].as_str().unwrap();
    assert!(call_id.starts_with("call_"));
    assert!(b["error"]["message"].as_str().unwrap().contains(call_id));
    gw.wait_exit();
}

#[test]
fn ids_say_what_they_name_and_resuming_an_approval_id_explains() {
    let tmp = tempfile::tempdir().unwrap();
    let demo = Demo::start(&tmp.path().join("data"));
    let held = demo.held_call();
    let approval = held["approval"]["id"].as_str().unwrap();
    assert!(held["call_id"].as_str().unwrap().starts_with("call_"));
    assert!(approval.starts_with("apr_"));
    let out = demo.cli(
        &["call", "--resume", approval],
        &[("AIRLOCK_TOKEN", &demo.agent)],
    );
    assert_eq!(out.status.code(), Some(1));
    let stdout = text(&out.stdout);
    assert!(stdout.contains("404 call.not_found"), "{stdout}");
    assert!(
        stdout.contains("is an approval id, not a call id"),
        "{stdout}"
    );
    assert!(
        stdout.contains(&format!("airlock approvals show {approval}")),
        "{stdout}"
    );
}

#[test]
fn bad_values_name_the_valid_ones() {
    let tmp = tempfile::tempdir().unwrap();
    let demo = Demo::start(&tmp.path().join("data"));
    let out = demo.cli(
        &["approvals", "list", "--status", "done"],
        &[("AIRLOCK_APPROVER_TOKEN", &demo.approver)],
    );
    assert_eq!(out.status.code(), Some(2));
    let err = text(&out.stderr);
    for s in [
        "pending",
        "approved",
        "declined",
        "expired",
        "cancelled",
        "all",
    ] {
        assert!(err.contains(s), "{err}");
    }
    // The API says the same to other clients.
    let r = reqwest::blocking::Client::new()
        .get(format!("{}/v1/approvals?status=done", demo.base))
        .bearer_auth(&demo.approver)
        .send()
        .unwrap();
    assert_eq!(r.status().as_u16(), 400);
    let b: Value = r.json().unwrap();
    assert!(b["error"]["message"].as_str().unwrap().contains("expired"));

    // An unknown tool names the configured ones, nearest first.
    let out = demo.cli(
        &["call", "--tool", "demo.ecko", "--args", "{}"],
        &[("AIRLOCK_TOKEN", &demo.agent)],
    );
    assert_eq!(out.status.code(), Some(1));
    let stdout = text(&out.stdout);
    assert!(stdout.contains("404 tool.unknown"), "{stdout}");
    assert!(
        stdout.contains("nearest first: demo.echo, ") && stdout.contains("demo.shell_preview"),
        "{stdout}"
    );
}

#[test]
fn an_old_demo_token_after_a_restart_says_tokens_are_new_each_start() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    let first = Demo::start(&data);
    let old = first.agent.clone();
    first.stop();
    let second = Demo::start(&data);
    assert_ne!(second.agent, old);
    let out = second.cli(
        &["call", "--tool", "demo.echo", "--args", r#"{"text":"hi"}"#],
        &[("AIRLOCK_TOKEN", &old)],
    );
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stdout).contains("401 auth.unauthenticated"));
    assert!(
        text(&out.stdout).contains("new at every start"),
        "{}",
        text(&out.stdout)
    );
    assert!(text(&out.stderr).contains("new tokens at every start"));
    // The new token works.
    let out = second.cli(
        &["call", "--tool", "demo.echo", "--args", r#"{"text":"hi"}"#],
        &[("AIRLOCK_TOKEN", &second.agent)],
    );
    assert!(out.status.success(), "{}", text(&out.stdout));
}

#[test]
fn help_describes_each_subcommand_in_its_own_words() {
    let out = airlock(&["approvals", "--help"]);
    let help = text(&out.stdout);
    assert!(!help.contains("How to reach a running gateway"), "{help}");
    for (cmd, words) in [
        ("list", "List approvals"),
        ("show", "Show one approval"),
        ("approve", "Approve"),
        ("decline", "Decline, with the reason"),
    ] {
        let line = help
            .lines()
            .find(|l| l.trim_start().starts_with(cmd))
            .unwrap_or_else(|| panic!("{help}"));
        assert!(line.contains(words), "{line}");
    }
    let call = text(&airlock(&["call", "--help"]).stdout);
    assert!(call.contains("The gateway's URL"), "{call}");
}

#[test]
fn policy_and_config_errors_say_where_and_what_to_write_and_exit_2_for_bad_input() {
    let dir = tempfile::tempdir().unwrap();
    let policy = dir.path().join("policy");
    std::fs::create_dir(&policy).unwrap();
    std::fs::write(
        policy.join("policy.toml"),
        "version = 1\n[defaults]\ndecision = \"allow\"\n\
         [[rules]]\nid = \"eq\"\nwhen = \"tool = 'x'\"\ndecision = \"deny\"\n\
         [[rules]]\nid = \"short\"\nwhen = \"args.a == \"\ndecision = \"deny\"\n\
         [[rules]]\nid = \"typo\"\nwhen = \"resme != null\"\ndecision = \"deny\"\n",
    )
    .unwrap();
    let out = airlock(&["policy", "check", policy.to_str().unwrap()]);
    assert_eq!(
        out.status.code(),
        Some(1),
        "a policy that does not load fails the check"
    );
    let err = text(&out.stderr);
    // One error per rule, in words, each at its line and column.
    assert!(err.contains("policy.toml:6:14: rule `eq`: `=` is not an operator in CEL: to compare, write `==` (policy.cel_syntax)"), "{err}");
    assert!(
        err.contains("rule `short`: the condition ends too early"),
        "{err}"
    );
    assert!(
        err.contains("undeclared variable `resme`; did you mean `resume`?"),
        "{err}"
    );
    assert!(
        err.contains(", resume, definition, kind, server, uri, prompt (policy.unknown_variable)"),
        "{err}"
    );
    assert!(
        !err.contains("mismatched input") && !err.contains("<EOF>"),
        "{err}"
    );
    assert!(err.contains("3 error(s)"), "{err}");

    // A folder that is not there is bad input, named without a made-up position.
    let missing = dir.path().join("nope");
    let out = airlock(&["policy", "check", missing.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    let err = text(&out.stderr);
    assert!(
        err.contains(&format!("{}: cannot read", missing.display())),
        "{err}"
    );
    assert!(!err.contains(":0:0"), "{err}");

    // A TOML syntax error names the file, line and column.
    let config = dir.path().join("airlock.toml");
    std::fs::write(&config, "[server]\nlisten = 127.0.0.1:8080\n").unwrap();
    let out = airlock(&["serve", "--config", config.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    let err = text(&out.stderr);
    assert!(
        err.contains(&format!("error[config.invalid]: {}:2:", config.display())),
        "{err}"
    );

    // A gateway whose policy does not load lists why and exits 2, serving nothing.
    std::fs::write(
        &config,
        format!(
            "[server]\nlisten = \"127.0.0.1:0\"\ndata_dir = \"data\"\npolicy = \"{}\"\n",
            policy.display()
        ),
    )
    .unwrap();
    let out = airlock(&["serve", "--config", config.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    let err = text(&out.stderr);
    assert!(err.contains("error[policy.cel_syntax]: "), "{err}");
    assert!(
        err.contains("the policy does not load: 3 error(s)"),
        "{err}"
    );
    assert!(
        !text(&out.stdout).contains("listening"),
        "{}",
        text(&out.stdout)
    );
}

#[test]
fn a_gateway_not_running_and_a_misnamed_field_are_explained() {
    // Nothing listens on port 1: the client says so, and how to start one.
    let out = airlock(&[
        "approvals",
        "list",
        "--url",
        "http://127.0.0.1:1",
        "--token",
        "x",
    ]);
    assert_eq!(out.status.code(), Some(2));
    let err = text(&out.stderr);
    assert!(err.contains("error[client.unreachable]"), "{err}");
    assert!(err.contains("connection refused"), "{err}");
    assert!(err.contains("`airlock serve`"), "{err}");

    // `--tool` and `--context` say what they take.
    let help = text(&airlock(&["call", "--help"]).stdout);
    for flag in [
        "--tool <TOOL>        The tool to call",
        "--context <CONTEXT>  The call's context",
    ] {
        assert!(help.contains(flag), "{help}");
    }

    // MCP's `arguments` where the API takes `args`: the refusal names the fields it takes.
    let tmp = tempfile::tempdir().unwrap();
    let demo = Demo::start(&tmp.path().join("data"));
    let r = reqwest::blocking::Client::new()
        .post(format!("{}/v1/calls", demo.base))
        .bearer_auth(&demo.agent)
        .body(r#"{"tool":"demo.echo","arguments":{}}"#)
        .send()
        .unwrap();
    assert_eq!(r.status().as_u16(), 400);
    let body: Value = r.json().unwrap();
    assert_eq!(body["error"]["code"], "request.unknown_field", "{body}");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(
        message.contains(
            "a call takes `tool`, `args` and `context` (the tool's arguments go in `args`)"
        ),
        "{message}"
    );
    demo.stop();
}

/// Serves `pages` in turn to GET requests on a thread, as a gateway's `/v1/audit` would (each
/// answer a whole connection); returns its URL.
fn serve_pages(pages: Vec<Value>) -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    std::thread::spawn(move || {
        for (stream, page) in listener.incoming().zip(pages) {
            let mut stream = stream.unwrap();
            let mut reader = BufReader::new(stream.try_clone().unwrap());
            let mut line = String::new();
            while reader.read_line(&mut line).unwrap() > 2 {
                line.clear();
            }
            let body = page.to_string();
            let _ = std::io::Write::write_all(
                &mut stream,
                format!(
                    "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                    body.len()
                )
                .as_bytes(),
            );
        }
    });
    url
}

#[test]
fn a_running_gateways_log_is_verified_over_the_api_without_trusting_it() {
    let tmp = tempfile::tempdir().unwrap();
    let demo = Demo::start(&tmp.path().join("data"));
    let admin = demo.admin.clone();
    let agent = [("AIRLOCK_TOKEN", demo.agent.as_str())];
    for n in 0..3 {
        let args = format!(r#"{{"n":{n}}}"#);
        let out = demo.cli(&["call", "--tool", "demo.echo", "--args", &args], &agent);
        assert!(out.status.success(), "{}", text(&out.stdout));
    }
    demo.held_call();

    // While it runs, with the admin's token: every record checked here.
    let out = demo.cli(&["audit", "verify"], &[("AIRLOCK_ADMIN_TOKEN", &admin)]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let said = text(&out.stdout);
    assert!(said.starts_with("ok: "), "{said}");
    let (_, log) = {
        let r = reqwest::blocking::Client::new()
            .get(format!("{}/v1/audit?limit=1000", demo.base))
            .bearer_auth(&admin)
            .send()
            .unwrap();
        (r.status(), r.json::<Value>().unwrap())
    };
    let records = log["records"].as_array().unwrap().clone();
    assert!(records.len() >= 6, "{log}");
    assert!(
        said.contains(&format!("ok: {} records (seq 1..", records.len())),
        "{said}"
    );

    // An agent's token may not read the log: no verdict at all, and not "tampering" either.
    let out = demo.cli(&["audit", "verify"], &agent);
    assert_eq!(out.status.code(), Some(2));
    let err = text(&out.stderr);
    assert!(
        err.contains("error[auth.forbidden]: cannot read the audit log"),
        "{err}"
    );
    assert!(
        !text(&out.stdout).contains("FAILED"),
        "{}",
        text(&out.stdout)
    );

    // A gateway that answers with an edited record is caught: the hashes are recomputed here.
    let mut edited = records.clone();
    edited[2]["tool"] = Value::from("demo.shell_preview");
    let url = serve_pages(vec![
        serde_json::json!({"records": edited, "next_after": records.len()}),
        serde_json::json!({"records": [], "next_after": null}),
    ]);
    let out = airlock(&["audit", "verify", "--url", &url, "--token", "x"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stdout).starts_with("FAILED: audit chain broken at seq 3"),
        "{}",
        text(&out.stdout)
    );
    demo.stop();
}

#[test]
fn the_readmes_python_mcp_client_runs_against_the_demo() {
    // The snippet as the README shows it, run with the official Python SDK: what a reader
    // copies works.
    let snippet: String = readme_snippet("```python\n")
        .lines()
        .map(|l| l.strip_prefix("  ").unwrap_or(l))
        .collect::<Vec<_>>()
        .join("\n")
        .replace("http://127.0.0.1:8080", "BASE");
    let tmp = tempfile::tempdir().unwrap();
    let demo = Demo::start(&tmp.path().join("data"));
    let script = tmp.path().join("snippet.py");
    std::fs::write(&script, snippet.replace("BASE", &demo.base)).unwrap();
    let out = Command::new("python3")
        .arg(&script)
        .env("AIRLOCK_TOKEN", &demo.agent)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}\n{}",
        text(&out.stdout),
        text(&out.stderr)
    );
    assert!(text(&out.stdout).contains("hello"), "{}", text(&out.stdout));
    demo.stop();
}

#[test]
fn output_into_a_pipe_closed_early_is_dropped_without_a_panic_and_the_command_still_acts() {
    let data = tempfile::tempdir().unwrap();
    let demo = Demo::start(data.path());
    let agent = [("AIRLOCK_TOKEN", demo.agent.as_str())];
    let approver = [("AIRLOCK_APPROVER_TOKEN", demo.approver.as_str())];
    let held = demo.held_call();
    let approval = held["approval"]["id"].as_str().unwrap();
    for (args, env) in [
        (vec!["approvals", "list", "--json"], &approver),
        (vec!["approvals", "list"], &approver),
        (vec!["approvals", "show", approval, "--json"], &approver),
        (
            vec![
                "call",
                "--tool",
                "demo.echo",
                "--args",
                r#"{"n":1}"#,
                "--json",
            ],
            &agent,
        ),
        (vec!["approvals", "approve", approval], &approver),
    ] {
        let (code, stderr) = demo.cli_into_closed_pipe(&args, env);
        assert_eq!(code, Some(0), "{args:?}: {stderr}");
        assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
    }
    // The approval given into the closed pipe stands.
    let out = demo.cli(&["approvals", "show", approval, "--json"], &approver);
    let shown: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(shown["status"], "approved", "{shown}");
    demo.stop();
}

#[test]
fn the_demo_deploy_tool_asks_which_environment_over_the_cli_and_mcp() {
    let tmp = tempfile::tempdir().unwrap();
    let demo = Demo::start(&tmp.path().join("data"));
    let agent = [("AIRLOCK_TOKEN", demo.agent.as_str())];
    let out = demo.cli(
        &[
            "call",
            "--tool",
            "demo.deploy",
            "--args",
            r#"{"service":"api"}"#,
            "--json",
        ],
        &agent,
    );
    let body: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(body["status"], "suspended", "{body}");
    assert_eq!(body["suspend"]["payload"]["question"], "which environment?");
    assert!(
        text(&out.stderr).contains("--resume"),
        "{}",
        text(&out.stderr)
    );
    let id = body["call_id"].as_str().unwrap();

    // The demo policy refuses production as an answer; staging continues the call.
    let out = demo.cli(
        &[
            "call",
            "--resume",
            id,
            "--data",
            r#"{"environment":"production"}"#,
        ],
        &agent,
    );
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stdout).contains("403 policy.denied"),
        "{}",
        text(&out.stdout)
    );
    let out = demo.cli(
        &[
            "call",
            "--resume",
            id,
            "--data",
            r#"{"environment":"staging"}"#,
            "--json",
        ],
        &agent,
    );
    let done: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(done["status"], "completed", "{done}");
    assert_eq!(done["result"]["environment"], "staging");

    // The same tool over MCP: the official Python client is asked by form, and answers.
    let out = Command::new("python3")
        .arg(peers().join("mcp_client.py"))
        .args([
            &format!("{}/mcp", demo.base),
            demo.agent.as_str(),
            "legacy",
            "answer-form",
            "demo.deploy",
        ])
        .args([r#"{"service":"web"}"#, r#"{"environment":"staging"}"#])
        .output()
        .unwrap();
    let lines: Vec<Value> = text(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(
        lines[0]["elicited"]["message"],
        "which environment?",
        "{lines:?} {}",
        text(&out.stderr)
    );
    let result = &lines.last().unwrap()["result"];
    assert_eq!(
        result["structuredContent"]["environment"], "staging",
        "{result}"
    );
    assert_eq!(result["structuredContent"]["service"], "web");

    // Answered `production` over MCP, in either revision, the client gets a final denial,
    // and that is what happens: the call ends `denied`, leaves the suspended list, and a
    // later resume (with an answer policy allows) is refused instead of running it.
    let admin = demo.admin.clone();
    let http = reqwest::blocking::Client::new();
    let get = |path: &str, token: &str| -> (u16, Value) {
        let r = http
            .get(format!("{}{path}", demo.base))
            .bearer_auth(token)
            .send()
            .unwrap();
        (r.status().as_u16(), r.json().unwrap())
    };
    for mode in ["legacy", "2026-07-28"] {
        let out = Command::new("python3")
            .arg(peers().join("mcp_client.py"))
            .args([
                &format!("{}/mcp", demo.base),
                demo.agent.as_str(),
                mode,
                "answer-form",
                "demo.deploy",
            ])
            .args([r#"{"service":"db"}"#, r#"{"environment":"production"}"#])
            .output()
            .unwrap();
        let last: Value = serde_json::from_str(text(&out.stdout).lines().last().unwrap()).unwrap();
        assert_eq!(last["result"]["isError"], true, "{mode}: {last}");
        assert!(last.to_string().contains("policy.denied"), "{mode}: {last}");
        let (_, listed) = get("/v1/calls?status=suspended", &demo.approver);
        assert_eq!(listed["calls"], serde_json::json!([]), "{mode}: {listed}");
        let (_, log) = get("/v1/audit?limit=1000", &admin);
        let ended: Vec<&Value> = log["records"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|r| r["kind"] == "call.resume_denied" && r["ended"] == true)
            .collect();
        let id = ended.last().unwrap()["call_id"].as_str().unwrap();
        let (status, got) = get(&format!("/v1/calls/{id}"), &demo.agent);
        assert_eq!(
            (status, got["error"]["code"].as_str()),
            (403, Some("policy.denied")),
            "{got}"
        );
        let out = demo.cli(
            &[
                "call",
                "--resume",
                id,
                "--data",
                r#"{"environment":"staging"}"#,
            ],
            &agent,
        );
        assert_eq!(out.status.code(), Some(1));
        assert!(
            text(&out.stdout).contains("409 call.not_suspended"),
            "{mode}: {}",
            text(&out.stdout)
        );
    }
    demo.stop();
}

#[test]
fn policy_check_refuses_a_misspelt_function_and_with_config_an_unconfigured_classifier() {
    let dir = tempfile::tempdir().unwrap();
    let policy = dir.path().join("policy.toml");
    std::fs::write(
        &policy,
        "version = 1\n[defaults]\ndecision = \"allow\"\n\
         [[rules]]\nid = \"rm\"\nwhen = 'args.command.startswith(\"rm -rf\")'\ndecision = \"deny\"\n",
    )
    .unwrap();
    let out = airlock(&["policy", "check", policy.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    let err = text(&out.stderr);
    assert!(
        err.contains("policy.toml:6:22: rule `rm`: `.startswith()` is not a function CEL or airlock define; did you mean `.startsWith()`? (policy.unknown_function)"),
        "{err}"
    );

    // Spelt right, with a classifier and a quadratic rule: it loads, with a warning; against
    // a config that lacks the classifier, the check fails as `serve` would.
    std::fs::write(
        &policy,
        "version = 1\n[defaults]\ndecision = \"allow\"\n\
         [[rules]]\nid = \"rm\"\nwhen = 'args.command.startsWith(\"rm -rf\")'\ndecision = \"deny\"\n\
         [[rules]]\nid = \"risky\"\nclassifier = \"risk\"\nwhen = 'classifier.risk.score > 0.5'\ndecision = \"require_approval\"\n\
         [[rules]]\nid = \"sorted\"\nwhen = 'args.items.all(x, args.items.all(y, x <= y))'\ndecision = \"allow\"\n",
    )
    .unwrap();
    let out = airlock(&["policy", "check", policy.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let err = text(&out.stderr);
    assert!(
        err.contains("warning: ")
            && err.contains("rule `sorted`")
            && err.contains("(policy.nested_comprehension)"),
        "{err}"
    );
    let config = dir.path().join("airlock.toml");
    let config_text = format!("[server]\npolicy = {:?}\n", policy.display().to_string());
    std::fs::write(&config, &config_text).unwrap();
    let out = airlock(&["policy", "check", "--config", config.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    let err = text(&out.stderr);
    assert!(
        err.contains(
            "rule `risky`: classifier `risk` is not configured (policy.unknown_classifier)"
        ),
        "{err}"
    );
    std::fs::write(
        &config,
        format!("{config_text}[[classifiers]]\nname = \"risk\"\nkind = \"builtin\"\n"),
    )
    .unwrap();
    let out = airlock(&["policy", "check", "--config", config.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));

    // `policy eval` tells the steps a call used, on stderr, beside the decision on stdout.
    let items: Vec<u32> = (0..5).collect();
    let args = serde_json::json!({"command": "ls", "items": items}).to_string();
    let eval = |extra: &[&str]| {
        let mut cmd = vec![
            "policy",
            "eval",
            "--policy",
            policy.to_str().unwrap(),
            "--tool",
            "t",
            "--args",
            &args,
            "--classifier",
            r#"{"risk":{"score":0.1}}"#,
        ];
        cmd.extend_from_slice(extra);
        airlock(&cmd)
    };
    let out = eval(&[]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let decision: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(decision["decision"], "allow");
    let err = text(&out.stderr);
    assert!(
        err.contains("evaluation steps: ") && err.contains(" of a budget of 100000"),
        "{err}"
    );
    // `--budget` as `[server] policy_budget` would set it: too small, the loop runs out.
    let out = eval(&["--budget", "50"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let decision: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(decision["decision"], "require_approval", "{decision}");
    assert_eq!(
        decision["errors"][0]["reason"], "evaluation budget exceeded",
        "{decision}"
    );
    assert!(text(&out.stderr).contains(" of a budget of 50"));
}
