//! Classifier-backed policy through the real gateway: the builtin classifier holds what looks
//! destructive and shows why; an http classifier feeds policy; one that is down, slow or
//! answers garbage never yields allow.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use serde_json::json;
use support::*;

const POLICY: &str = r#"
version = 1
[defaults]
decision = "allow"
on_error = "deny"

[[rules]]
id = "risky"
tools = ["shell.*"]
classifier = "risk"
when = '"destructive" in classifier.risk.labels || classifier.risk.score >= 0.9'
decision = "require_approval"
message = "looks destructive"

[[rules]]
id = "remote"
tools = ["remote.*"]
classifier = "remote"
when = 'classifier.remote.score > 0.5'
decision = "require_approval"

[[rules]]
id = "down"
tools = ["cdown.*"]
classifier = "down"
when = 'classifier.down.score > 0.5'
decision = "allow"

[[rules]]
id = "slow"
tools = ["cslow.*"]
classifier = "slow"
when = 'classifier.slow.score > 0.5'
decision = "allow"

[[rules]]
id = "junk"
tools = ["cjunk.*"]
classifier = "junk"
when = 'classifier.junk.score > 0.5'
decision = "allow"
"#;

fn config(backend: &Backend) -> String {
    let mut c = config_text(backend, "");
    for tool in ["shell.*", "remote.*", "cdown.*", "cslow.*", "cjunk.*"] {
        c.push_str(&format!(
            "[[tools]]\nname = \"{tool}\"\nupstream = \"{}\"\n",
            backend.url("/echo")
        ));
    }
    c.push_str(&format!(
        "[[classifiers]]\nname = \"risk\"\nkind = \"builtin\"\n\
         [[classifiers]]\nname = \"remote\"\nkind = \"http\"\nurl = \"{}\"\n\
         [[classifiers]]\nname = \"down\"\nkind = \"http\"\nurl = \"http://127.0.0.1:9/classify\"\n\
         [[classifiers]]\nname = \"slow\"\nkind = \"http\"\nurl = \"{}\"\ntimeout = \"200ms\"\n\
         [[classifiers]]\nname = \"junk\"\nkind = \"http\"\nurl = \"{}\"\n",
        backend.url("/classify/pii"),
        backend.url("/slow/2000"),
        backend.url("/echo"),
    ));
    c
}

#[test]
fn classifier_results_drive_policy_and_are_shown_to_approvers() {
    let backend = Backend::start();
    let gw = Gateway::start_with(&config(&backend), POLICY);
    assert_eq!(
        gw.call("agent1", "shell.exec", json!({"command": "ls -la"}), None)
            .0,
        200
    );
    let (call, approval) = gw.call_async(
        "agent1",
        "shell.exec",
        json!({"command": "R\"\"M  -Rf /srv"}),
    );
    let (_, a) = gw.req(
        "GET",
        &format!("/v1/approvals/{approval}"),
        Some("ops"),
        None,
        None,
    );
    let risk = &a["explanation"]["classifiers"]["risk"];
    assert_eq!(risk["labels"], json!(["destructive"]), "{a}");
    assert_eq!(risk["detail"]["matches"][0]["pointer"], "/command");
    assert_eq!(
        a["explanation"]["messages"][0]["message"],
        "looks destructive"
    );
    let (_, audit) = gw.req("GET", "/v1/audit?limit=100", Some("admin"), None, None);
    let decided = audit["records"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["kind"] == "call.decided" && r["call_id"] == json!(call))
        .unwrap();
    assert_eq!(
        decided["classifiers"]["risk"]["labels"],
        json!(["destructive"])
    );

    let (s, _) = gw.call(
        "agent1",
        "remote.lookup",
        json!({"q": 1}),
        Some("respond-async"),
    );
    assert_eq!(s, 202, "the http classifier scored 0.9");
    let bodies = backend.seen().1;
    assert!(
        bodies
            .iter()
            .any(|b| b.contains("\"tool\":\"remote.lookup\"")
                && b.contains("\"fingerprint\":\"sha256:")),
        "{bodies:?}"
    );
}

#[test]
fn a_classifier_that_is_down_slow_or_wrong_never_allows() {
    let backend = Backend::start();
    let gw = Gateway::start_with(&config(&backend), POLICY);
    for tool in ["cdown.x", "cslow.x", "cjunk.x"] {
        let (s, b) = gw.call("agent1", tool, json!({}), Some("respond-async"));
        assert_eq!(s, 202, "{tool}: {b}");
        let (_, a) = gw.req(
            "GET",
            &format!("/v1/approvals/{}", b["approval"]["id"].as_str().unwrap()),
            Some("ops"),
            None,
            None,
        );
        assert!(
            a["explanation"]["errors"][0]["reason"]
                .as_str()
                .unwrap()
                .contains("failed"),
            "{a}"
        );
    }
    let metrics = gw.metrics();
    for name in ["down", "slow", "junk"] {
        assert!(
            metrics.contains(&format!(
                "airlock_classifier_errors_total{{classifier=\"{name}\"}} 1"
            )),
            "{name}\n{metrics}"
        );
    }
}
