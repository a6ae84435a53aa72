//! Approval mail, end to end: the real binary sends to a real SMTP server (PyPI `aiosmtpd`,
//! STARTTLS required, with a test certificate authority the gateway is told to trust); the
//! mail reaches the group's addresses, shows hostile args as text, and its link, followed in
//! headless Chromium, asks for a sign-in before anything is decided.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use support::*;

struct Smtp {
    child: std::process::Child,
    port: u16,
}

impl Drop for Smtp {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn smtp(dir: &Path, cert: &Path, key: &Path, fail_first: u32) -> Smtp {
    let port = free_port();
    let mut child = Command::new("python3")
        .arg(peers().join("smtp_server.py"))
        .args([
            &port.to_string(),
            cert.to_str().unwrap(),
            key.to_str().unwrap(),
            dir.to_str().unwrap(),
        ])
        .env("FAIL_FIRST", fail_first.to_string())
        .stdout(Stdio::piped())
        .spawn()
        .expect("python3 with aiosmtpd (installed by scripts/test.sh)");
    wait_for_line(&mut child, "listening");
    Smtp { child, port }
}

/// The mails the server has received: `(envelope, {subject, to, text, html})`, read with
/// Python's own `email` package.
fn mails(dir: &Path) -> Vec<(Value, Value)> {
    let mut out = Vec::new();
    for n in 1.. {
        let meta = dir.join(format!("{n}.json"));
        if !meta.exists() {
            break;
        }
        let envelope: Value = serde_json::from_slice(&std::fs::read(&meta).unwrap()).unwrap();
        let parsed = Command::new("python3")
            .args([
                "-c",
                "import email, email.policy, json, sys\n\
                 m = email.message_from_binary_file(open(sys.argv[1], 'rb'), policy=email.policy.default)\n\
                 print(json.dumps({'subject': m['subject'], 'to': m['to'], 'from': m['from'], 'message_id': m['message-id'],\n\
                   'text': m.get_body(('plain',)).get_content(), 'html': m.get_body(('html',)).get_content()}))",
                dir.join(format!("{n}.eml")).to_str().unwrap(),
            ])
            .output()
            .unwrap();
        assert!(
            parsed.status.success(),
            "{}",
            String::from_utf8_lossy(&parsed.stderr)
        );
        out.push((envelope, serde_json::from_slice(&parsed.stdout).unwrap()));
    }
    out
}

fn wait_mails(gw: &Gateway, dir: &Path, n: usize, within: Duration) -> Vec<(Value, Value)> {
    let start = Instant::now();
    loop {
        let m = mails(dir);
        if m.len() >= n {
            return m;
        }
        assert!(
            start.elapsed() < within,
            "{} of {n} mails arrived; the gateway's log:\n{}",
            m.len(),
            std::fs::read_to_string(gw.dir.path().join("gateway.log")).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn config(backend: &Backend, port: u16, smtp_port: u16, ca: &Path) -> String {
    format!(
        "{}\n[email]\nsmtp = \"smtp://localhost:{smtp_port}\"\nca = {:?}\nfrom = \"airlock <airlock@corp.example>\"\n\
         to = {{ dba = [\"dba@corp.example\", \"dba-lead@corp.example\"], \"*\" = [\"approvers@corp.example\"] }}\n",
        config_text(backend, &format!("public_url = \"http://127.0.0.1:{port}\"")),
        ca.to_str().unwrap()
    )
}

#[test]
fn an_approval_mail_reaches_the_group_and_its_link_decides_only_after_sign_in() {
    let dir = tempfile::tempdir().unwrap();
    let (ca, cert, key) = certs(dir.path(), "smtp");
    let inbox = dir.path().join("mail");
    std::fs::create_dir_all(&inbox).unwrap();
    let server = smtp(&inbox, &cert, &key, 0);
    let backend = Backend::start();
    let port = free_port();
    let gw = Gateway::start_at(
        &config(&backend, port, server.port, &ca),
        POLICY,
        port,
        "warn",
    );

    // A call the dba group must approve, with args made to look like markup and a link, and
    // a password the audit log redacts.
    let hostile = "select '<script>alert(1)</script><a href=\"https://evil.example\">click</a>'";
    let (call, approval) = gw.call_async(
        "agent1",
        "db.query",
        json!({"sql": hostile, "password": "hunter2"}),
    );
    let got = wait_mails(&gw, &inbox, 2, Duration::from_secs(15));
    let mut to: Vec<String> = got
        .iter()
        .map(|(e, _)| e["to"][0].as_str().unwrap().to_owned())
        .collect();
    to.sort();
    assert_eq!(to, ["dba-lead@corp.example", "dba@corp.example"], "{got:?}");
    // Each mail has its own Message-ID, on the sender's domain.
    let ids: std::collections::BTreeSet<&str> = got
        .iter()
        .map(|(_, m)| m["message_id"].as_str().unwrap_or(""))
        .collect();
    assert_eq!(ids.len(), 2, "{got:?}");
    assert!(
        ids.iter()
            .all(|i| i.starts_with('<') && i.ends_with("@corp.example>")),
        "{ids:?}"
    );
    for (envelope, mail) in &got {
        assert_eq!(envelope["tls"], true, "sent only after STARTTLS");
        assert_eq!(
            mail["subject"],
            "[airlock] Approval needed: db.query for agent1"
        );
        let text = mail["text"].as_str().unwrap();
        let html = mail["html"].as_str().unwrap();
        let link = format!("http://127.0.0.1:{port}/inbox/approvals/{approval}");
        assert!(text.contains(&link), "{text}");
        assert!(
            text.contains("<script>alert(1)</script>"),
            "the text is the args as sent: {text}"
        );
        assert!(
            !html.contains("<script>") && html.contains("&lt;script&gt;"),
            "{html}"
        );
        assert!(
            !html.contains("<a href=\\\"https://evil") && !html.contains("<a href=\"https://evil"),
            "{html}"
        );
        assert_eq!(
            html.matches("<a ").count(),
            1,
            "one link, the inbox page: {html}"
        );
        // No credential: no token, no secret, and the redacted field stays redacted.
        assert!(!text.contains("hunter2") && !html.contains("hunter2"));
        assert!(
            !text.contains("token-") && !text.to_lowercase().contains("approve?"),
            "{text}"
        );
    }
    // An approval any approver may decide goes to "*".
    gw.call_async("agent1", "multi.op", json!({"n": 1}));
    let got = wait_mails(&gw, &inbox, 3, Duration::from_secs(15));
    assert_eq!(got[2].0["to"], json!(["approvers@corp.example"]));

    // The link: a GET decides nothing (mail scanners open every link).
    let link = got[0].1["text"]
        .as_str()
        .unwrap()
        .lines()
        .find(|l| l.starts_with("http://"))
        .unwrap()
        .to_owned();
    let plain = reqwest::blocking::Client::builder()
        .redirect(reqwest::redirect::Policy::limited(5))
        .build()
        .unwrap();
    let page = plain.get(&link).send().unwrap();
    assert_eq!(page.status(), 200);
    assert!(page.text().unwrap().contains("Sign in"));
    let a = gw
        .req(
            "GET",
            &format!("/v1/approvals/{approval}"),
            Some("dba1"),
            None,
            None,
        )
        .1;
    assert_eq!(a["status"], "pending");
    // Followed in a browser: sign in, land on the approval, approve.
    let out = Command::new("python3")
        .arg(peers().join("inbox_browser.py"))
        .args([gw.base.as_str(), shots().to_str().unwrap(), "mail"])
        .env("MAIL_LINK", &link)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let r: Value = serde_json::from_str(stdout.lines().last().unwrap()).unwrap();
    assert_eq!(r["asked_to_sign_in"], true, "{r}");
    assert_eq!(r["landed"], link.as_str(), "{r}");
    assert!(r["decided"].as_str().unwrap().contains("approved"), "{r}");
    assert_eq!(gw.resume("agent1", &call).0, 200);
}

#[test]
fn a_mail_server_down_for_a_while_gets_the_mail_once_and_bad_config_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let (ca, cert, key) = certs(dir.path(), "smtp");
    let inbox = dir.path().join("mail");
    std::fs::create_dir_all(&inbox).unwrap();
    // The first two tries are refused with a transient failure.
    let server = smtp(&inbox, &cert, &key, 2);
    let backend = Backend::start();
    let port = free_port();
    let gw = Gateway::start_at(
        &config(&backend, port, server.port, &ca),
        POLICY,
        port,
        "warn",
    );
    gw.call_async("agent1", "multi.op", json!({"n": 1}));
    let got = wait_mails(&gw, &inbox, 1, Duration::from_secs(30));
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(mails(&inbox).len(), 1, "delivered once: {got:?}");
    let m = gw.metrics();
    assert!(
        m.contains("airlock_webhook_deliveries_total{result=\"retried\"} 2"),
        "{m}"
    );

    // Without the authority, the server's certificate is not trusted: nothing is sent.
    let (other_ca, _, _) = certs(dir.path(), "other");
    let inbox2 = dir.path().join("mail2");
    std::fs::create_dir_all(&inbox2).unwrap();
    let server2 = smtp(&inbox2, &cert, &key, 0);
    let port2 = free_port();
    let gw2 = Gateway::start_at(
        &config(&backend, port2, server2.port, &other_ca),
        POLICY,
        port2,
        "warn",
    );
    gw2.call_async("agent1", "multi.op", json!({"n": 2}));
    std::thread::sleep(Duration::from_secs(3));
    assert!(mails(&inbox2).is_empty());

    // The server's own self-signed certificate, marked as an authority, named as `ca`: TLS
    // would refuse every send, so the gateway refuses to start, in words.
    let mut params = rcgen::CertificateParams::new(vec!["localhost".to_owned()]).unwrap();
    params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    let self_signed = params
        .self_signed(&rcgen::KeyPair::generate().unwrap())
        .unwrap();
    let own = dir.path().join("own.pem");
    std::fs::write(&own, self_signed.pem()).unwrap();
    let cfg = dir.path().join("own.toml");
    std::fs::write(
        &cfg,
        format!(
            "{}\n[email]\nsmtp = \"smtp://localhost:2525\"\nca = {own:?}\nfrom = \"a@b.example\"\nto = {{ \"*\" = [\"c@d.example\"] }}\n",
            config_text(&backend, "")
        ),
    )
    .unwrap();
    let err = refused_at_start(&cfg);
    assert!(
        err.contains("email.ca")
            && err.contains("is a self-signed certificate for localhost")
            && !err.contains("CaUsedAsEndEntity"),
        "{err}"
    );

    // Config refusals name the key.
    for (email, key) in [
        ("smtp = \"http://localhost:25\"\nfrom = \"a@b.example\"\nto = { \"*\" = [\"c@d.example\"] }", "email.smtp"),
        ("smtp = \"smtp://localhost\"\nfrom = \"not an address\"\nto = { \"*\" = [\"c@d.example\"] }", "email.from"),
        ("smtp = \"smtp://localhost\"\nfrom = \"a@b.example\"\nto = { dba = [\"nope\"] }", "email.to.dba"),
        ("smtp = \"smtp://localhost\"\nfrom = \"a@b.example\"\nusername = \"u\"\nto = { \"*\" = [\"c@d.example\"] }", "email.password"),
        ("smtp = \"smtp://localhost\"\nfrom = \"a@b.example\"", "email.to"),
        ("smtp = \"smtp://localhost\"\nfrom = \"a@b.example\"\nca = \"no-such-ca.pem\"\nto = { \"*\" = [\"c@d.example\"] }", "email.ca"),
    ] {
        let cfg = dir.path().join("bad.toml");
        std::fs::write(&cfg, format!("{}\n[email]\n{email}\n", config_text(&backend, ""))).unwrap();
        let err = refused_at_start(&cfg);
        assert!(err.contains(key), "{key}: {err}");
    }
}

/// One agent cannot drown its approvers: 30 approvals in a few seconds are notified one by one
/// up to ten, and the other twenty as one summary when the minute is over, on each channel
/// (a webhook, mail, Slack), while every one of the 30 is listed at once.
#[test]
fn beyond_ten_a_minute_approvals_are_notified_as_one_summary_per_channel() {
    use support::slack::{slack_table, Slack, SLACK_ENV, USERS};
    let dir = tempfile::tempdir().unwrap();
    let (ca, cert, key) = certs(dir.path(), "smtp");
    let inbox = dir.path().join("mail");
    std::fs::create_dir_all(&inbox).unwrap();
    let server = smtp(&inbox, &cert, &key, 0);
    let receiver = Receiver::start("ok");
    let backend = Backend::start();
    let port = free_port();
    let slack = Slack::start(port);
    let config = format!(
        "{}{}[[webhooks]]\nid = \"approvers\"\nurl = \"http://127.0.0.1:{}/hook\"\nsecret = \"{SECRET}\"\nevents = [\"approval.requested\"]\n",
        config(&backend, port, server.port, &ca),
        slack_table(slack.port, USERS),
        receiver.port
    );
    let gw = Gateway::start_env(&config, POLICY, port, "warn", &SLACK_ENV);
    let started = Instant::now();
    let mut ids = Vec::new();
    for i in 0..30 {
        ids.push(
            gw.call_async("agent1", "db.query", json!({"sql": format!("select {i}")}))
                .1,
        );
    }
    assert!(started.elapsed() < Duration::from_secs(20));
    let (_, page) = gw.req(
        "GET",
        "/v1/approvals?status=pending&limit=100",
        Some("dba1"),
        None,
        None,
    );
    assert_eq!(
        page["approvals"].as_array().unwrap().len(),
        30,
        "all listed at once"
    );
    // The minute ends: one summary per channel.
    let hooks = receiver.wait_for(11, Duration::from_secs(90));
    let kinds: Vec<&str> = hooks
        .iter()
        .map(|r| r["body"]["type"].as_str().unwrap())
        .collect();
    assert_eq!(
        kinds.iter().filter(|k| **k == "approval.requested").count(),
        10,
        "{kinds:?}"
    );
    let summary = hooks
        .iter()
        .find(|r| r["body"]["type"] == "approval.summary")
        .unwrap_or_else(|| panic!("{kinds:?}"));
    let data = &summary["body"]["data"];
    assert_eq!(data["principal"], "agent1");
    assert_eq!(data["count"], 20);
    let summed: Vec<&str> = data["approval_ids"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    assert_eq!(
        summed,
        ids[10..].iter().map(String::as_str).collect::<Vec<_>>()
    );
    assert!(data["since"].as_str().unwrap().ends_with('Z'), "{data}");
    // Mail: ten approvals and the summary, each to the dba group's two addresses.
    let got = wait_mails(&gw, &inbox, 22, Duration::from_secs(30));
    std::thread::sleep(Duration::from_millis(500));
    let got_now = mails(&inbox);
    assert_eq!(got_now.len(), 22, "{got:?}");
    let summaries: Vec<_> = got_now
        .iter()
        .filter(|(_, m)| m["subject"] == "[airlock] 20 more approvals requested by agent1")
        .collect();
    assert_eq!(summaries.len(), 2);
    let text = summaries[0].1["text"].as_str().unwrap();
    assert!(
        text.contains(&format!(
            "http://127.0.0.1:{port}/inbox/approvals/{}",
            ids[29]
        )),
        "{text}"
    );
    // Slack: ten messages of their own and one summary in the dba channel.
    let start = Instant::now();
    let posted = loop {
        let messages: Vec<Value> = slack.get("messages").as_array().unwrap().clone();
        if messages.len() >= 11 || start.elapsed() > Duration::from_secs(20) {
            break messages;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    assert_eq!(posted.len(), 11, "{posted:?}");
    let summary_posts: Vec<&Value> = posted
        .iter()
        .filter(|m| {
            m.to_string()
                .contains("20 more approvals requested by agent1")
        })
        .collect();
    assert_eq!(summary_posts.len(), 1, "{posted:?}");
    assert_eq!(summary_posts[0]["channel"], "C0DBA", "{posted:?}");
    // Deciding them all updates only the ten messages there are; nothing is left to retry.
    let (s, b) = gw.req(
        "POST",
        "/v1/approvals/decline",
        Some("admin"),
        Some(r#"{"principal":"agent1","reason":"flood"}"#),
        None,
    );
    assert_eq!(
        (s, b["results"].as_array().unwrap().len()),
        (200, 30),
        "{b}"
    );
    let start = Instant::now();
    loop {
        let messages = slack.get("messages");
        let updated = messages
            .as_array()
            .unwrap()
            .iter()
            .filter(|m| m["versions"].as_array().unwrap().len() > 1)
            .count();
        if updated == 10 {
            break;
        }
        assert!(start.elapsed() < Duration::from_secs(20), "{messages}");
        std::thread::sleep(Duration::from_millis(200));
    }
    assert_eq!(slack.get("messages").as_array().unwrap().len(), 11);
}
