//! `airlock webhooks sign|verify`: what we sign verifies with the reference Standard Webhooks
//! library (the `standardwebhooks` Python package), what it signs verifies with us, and each
//! kind of bad signature is refused.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::io::Write;
use std::process::{Command, Output, Stdio};

const SECRET: &str = "whsec_MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY=";

fn airlock(args: &[&str], stdin: &[u8]) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_airlock"))
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(stdin).unwrap();
    child.wait_with_output().unwrap()
}

fn python(script: &str) -> Output {
    Command::new("python3")
        .args(["-c", script])
        .output()
        .expect("python3 is needed (see .ci/run)")
}

fn now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64
}

#[test]
fn our_signatures_verify_with_the_reference_library_and_back() {
    let ts = now().to_string();
    let body = br#"{"type":"approval.requested","data":{"id":"a1"}}"#;
    let out = airlock(
        &[
            "webhooks",
            "sign",
            "--secret",
            SECRET,
            "--id",
            "msg_2ab",
            "--timestamp",
            &ts,
        ],
        body,
    );
    assert!(out.status.success());
    let sig = String::from_utf8(out.stdout).unwrap().trim().to_owned();
    let script = format!(
        "from standardwebhooks import Webhook\n\
         Webhook('{SECRET}').verify({body:?}, {{'webhook-id': 'msg_2ab', 'webhook-timestamp': '{ts}', 'webhook-signature': '{sig}'}})\n\
         print('verified')",
        body = String::from_utf8_lossy(body)
    );
    let py = python(&script);
    assert_eq!(
        String::from_utf8_lossy(&py.stdout).trim(),
        "verified",
        "{}",
        String::from_utf8_lossy(&py.stderr)
    );

    // The reference library signs; we verify.
    let script = format!(
        "from standardwebhooks import Webhook\nimport datetime\n\
         print(Webhook('{SECRET}').sign('msg_3', datetime.datetime.fromtimestamp({ts}, datetime.timezone.utc), 'hello'))"
    );
    let theirs = String::from_utf8(python(&script).stdout)
        .unwrap()
        .trim()
        .to_owned();
    let out = airlock(
        &[
            "webhooks",
            "verify",
            "--secret",
            SECRET,
            "--id",
            "msg_3",
            "--timestamp",
            &ts,
            "--signature",
            &theirs,
        ],
        b"hello",
    );
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
}

#[test]
fn bad_signatures_are_refused_with_the_reason() {
    let ts = now();
    let sign = |secret: &str, body: &[u8], ts: i64| {
        String::from_utf8(
            airlock(
                &[
                    "webhooks",
                    "sign",
                    "--secret",
                    secret,
                    "--id",
                    "m1",
                    "--timestamp",
                    &ts.to_string(),
                ],
                body,
            )
            .stdout,
        )
        .unwrap()
        .trim()
        .to_owned()
    };
    let good = sign(SECRET, b"body", ts);
    let verify = |sig: &str, body: &[u8], ts: i64| {
        airlock(
            &[
                "webhooks",
                "verify",
                "--secret",
                SECRET,
                "--id",
                "m1",
                "--timestamp",
                &ts.to_string(),
                "--signature",
                sig,
            ],
            body,
        )
    };
    assert_eq!(verify(&good, b"body", ts).status.code(), Some(0));
    let cases: Vec<(&str, String, &[u8], i64, &str)> = vec![
        (
            "wrong secret",
            sign("whsec_b3RoZXIgc2VjcmV0IGtleQ==", b"body", ts),
            b"body",
            ts,
            "no signature matches",
        ),
        (
            "changed body",
            good.clone(),
            b"bodY",
            ts,
            "no signature matches",
        ),
        (
            "old timestamp",
            sign(SECRET, b"body", ts - 301),
            b"body",
            ts - 301,
            "seconds from now",
        ),
        (
            "empty v1,",
            "v1,".to_owned(),
            b"body",
            ts,
            "no signature matches",
        ),
        (
            "truncated",
            good[..good.len() - 6].to_owned(),
            b"body",
            ts,
            "no signature matches",
        ),
    ];
    for (name, sig, body, ts, why) in cases {
        let out = verify(&sig, body, ts);
        assert_eq!(out.status.code(), Some(1), "{name}");
        assert!(
            String::from_utf8_lossy(&out.stdout).contains(why),
            "{name}: {}",
            String::from_utf8_lossy(&out.stdout)
        );
    }
}
