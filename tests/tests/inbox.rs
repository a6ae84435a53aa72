//! The approver inbox in a real browser (Debian's headless Chromium, driven by Selenium from
//! PyPI; both installed by scripts/test.sh), against the real gateway and backend processes.
//! The browser script (`peers/inbox_browser.py`) plays the approver and, over the JSON API,
//! the agent whose call is held. Screenshots land in `target/inbox-screenshots/`.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use serde_json::Value;
use support::*;

/// Runs one browser scenario against a fresh gateway; returns what it printed, merged.
fn scenario(name: &str) -> (Value, Backend) {
    let backend = Backend::start();
    let gw = Gateway::start(&backend);
    let r = browser_scenario(&gw.base, name);
    drop(gw);
    (r, backend)
}

#[test]
fn the_inbox_reads_well_at_1280_and_375_pixels() {
    let (r, _backend) = scenario("layout");
    // Two pending rows of one tool and run, told apart by their args.
    let summaries: Vec<&str> = r["summaries"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert_eq!(summaries.len(), 2, "{r}");
    assert!(summaries.iter().any(|s| s.contains("select 21")), "{r}");
    assert!(summaries.iter().any(|s| s.contains("select 22")), "{r}");
    // Each filter's label sits right above its input, all on one line at 1280 px.
    let ys = |k: &str| -> Vec<f64> {
        r[k].as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_f64().unwrap())
            .collect()
    };
    let (labels, inputs) = (ys("labels"), ys("inputs"));
    assert_eq!(labels.len(), 3, "{r}");
    assert!(labels.windows(2).all(|w| (w[0] - w[1]).abs() < 1.0), "{r}");
    assert!(inputs.windows(2).all(|w| (w[0] - w[1]).abs() < 1.0), "{r}");
    assert!(labels.iter().zip(&inputs).all(|(l, i)| l < i), "{r}");
    // At 375 px the header stays short and the keyboard hint is gone.
    assert!(r["header_height"].as_f64().unwrap() < 90.0, "{r}");
    assert!(
        r["page_width"].as_f64().unwrap() <= 375.0,
        "no sideways scrolling: {r}"
    );
    assert_eq!(r["keys_shown"], false, "{r}");
    // Decided, the page says how, on screen, with the next waiting call a click away.
    assert_eq!(r["heading"], "Approved: db.query", "{r}");
    assert!(
        r["notice"]
            .as_str()
            .unwrap()
            .starts_with("This call is approved. Next waiting: db.query"),
        "{r}"
    );
    assert!(
        r["next_links"][0]
            .as_str()
            .unwrap()
            .contains("/inbox/approvals/apr_"),
        "{r}"
    );
    assert_eq!(r["notice_on_screen"], true, "{r}");
    // Decided approvals keep their status at phone width.
    assert_eq!(r["statuses"], serde_json::json!(["approved"]), "{r}");
    // The audit page: times in the At column, headers on one line, and a phone-sized page.
    let ats = r["ats"].as_array().unwrap();
    assert!(!ats.is_empty(), "{r}");
    assert!(
        ats.iter()
            .all(|a| a.as_str().unwrap().starts_with("20") && a.as_str().unwrap().ends_with('Z')),
        "{r}"
    );
    let cells = ys("header_cells");
    assert!(
        cells.windows(2).all(|w| (w[0] - w[1]).abs() < 1.0) && cells[0] < 50.0,
        "{r}"
    );
    assert!(r["audit_height"].as_f64().unwrap() < 6000.0, "{r}");
    // The gateway's own URL sends a browser to the inbox; the favicon needs no token.
    assert_eq!(r["root"], serde_json::json!([303, "/inbox/"]), "{r}");
    assert_eq!(r["favicon"], 204, "{r}");
}

#[test]
fn an_approver_sees_a_held_call_appear_live_and_approves_it() {
    let (r, backend) = scenario("approve");
    assert_eq!(r["live_row"], true, "{r}");
    assert!(
        r["title_before"].as_str().unwrap().starts_with("(0)"),
        "{r}"
    );
    assert!(r["title_after"].as_str().unwrap().starts_with("(1)"), "{r}");
    assert!(r["fingerprint"].as_str().unwrap().starts_with("sha256:"));
    assert!(r["args"]
        .as_str()
        .unwrap()
        .contains("select * from users limit 5"));
    assert_eq!(r["agent_status"], 200, "{r}");
    assert_eq!(r["agent_body"]["status"], "completed");
    assert_eq!(backend.count(), 1);
    for shot in ["inbox-list", "inbox-approval", "inbox-approval-phone"] {
        assert!(shots().join(format!("{shot}.png")).exists(), "{shot}");
    }
}

#[test]
fn a_decline_with_a_reason_reaches_the_agent_and_an_empty_one_is_refused() {
    let (r, backend) = scenario("decline");
    assert_eq!(r["agent_status"], 403, "{r}");
    assert_eq!(code(&r["agent_body"]), "approval.declined");
    assert_eq!(
        r["agent_body"]["error"]["details"]["reason"],
        "not during business hours"
    );
    assert_eq!(backend.count(), 0);

    let (r, backend) = scenario("empty-decline");
    assert!(
        r["error"]
            .as_str()
            .unwrap()
            .contains("A decline needs a reason"),
        "{r}"
    );
    assert_eq!(r["pending"], 1, "nothing was decided");
    assert_eq!(backend.count(), 0);
}

#[test]
fn an_edit_shows_its_decision_and_diff_and_the_agent_gets_the_edited_result() {
    let (r, backend) = scenario("edit");
    assert!(
        r["preview"].as_str().unwrap().contains("require_approval"),
        "{r}"
    );
    assert!(r["added"].to_string().contains("limit 10"), "{r}");
    assert!(r["removed"].to_string().contains("from orders"), "{r}");
    assert_eq!(r["agent_status"], 200, "{r}");
    assert_eq!(r["agent_body"]["edited"], true);
    assert_eq!(
        r["agent_body"]["args"]["sql"],
        "select * from orders limit 10"
    );
    let (_, bodies) = backend.seen();
    assert_eq!(bodies, vec![r#"{"sql":"select * from orders limit 10"}"#]);
}

#[test]
fn an_approver_outside_the_group_is_refused_in_words() {
    let (r, backend) = scenario("forbidden");
    assert!(
        r["error"]
            .as_str()
            .unwrap()
            .contains("You are not one of those who may decide this"),
        "{r}"
    );
    assert_eq!(r["pending"], 1);
    assert_eq!(backend.count(), 0);
}

#[test]
fn hostile_args_render_as_text_and_run_nothing() {
    let (r, backend) = scenario("xss");
    assert_eq!(r["pages"], 6, "{r}");
    assert_eq!(r["all_safe"], true, "{r}");
    assert_eq!(backend.count(), 0);
}

#[test]
fn forged_stale_and_cross_origin_requests_decide_nothing() {
    let (r, backend) = scenario("csrf");
    let res = &r["results"];
    for k in [
        "no_token",
        "wrong_token",
        "other_origin",
        "no_origin",
        "cross_site",
    ] {
        assert_eq!(res[k], 403, "{k}: {r}");
    }
    assert_eq!(res["bearer_on_inbox"], 401, "{r}");
    assert_eq!(res["cookie_on_api"], 401, "{r}");
    assert_eq!(r["still_pending"], true);

    let (r, _) = scenario("signout");
    assert_eq!(r["stale_post"], 401, "{r}");
    assert_eq!(r["still_pending"], true);

    let (r, _) = scenario("agent-signin");
    assert!(
        r["error"]
            .as_str()
            .unwrap()
            .contains("Agents cannot sign in"),
        "{r}"
    );
    assert_eq!(r["cookie"], Value::Null);
    assert_eq!(backend.count(), 0);
}

#[test]
fn a_link_from_a_webhook_or_mcp_client_signs_in_once_and_decides_on_a_phone() {
    let (r, backend) = scenario("link");
    let approval = r["approval"].as_str().unwrap();
    assert!(
        r["landed"]
            .as_str()
            .unwrap()
            .ends_with(&format!("/inbox/approvals/{approval}")),
        "after sign-in the approver lands on the linked approval: {r}"
    );
    assert_eq!(r["agent_status"], 200, "{r}");
    assert!(r["seconds"].as_f64().unwrap() < 10.0, "{r}");
    assert_eq!(r["history_has_it"], true, "{r}");
    assert_eq!(r["chain_ok"], true, "{r}");
    assert_eq!(backend.count(), 1);
}

#[test]
fn a_whole_run_is_declined_from_the_inbox_and_other_runs_are_untouched() {
    let (r, backend) = scenario("run");
    assert_eq!(
        r["filtered"], 2,
        "the run filter shows the run's calls: {r}"
    );
    assert_eq!(r["decided"].as_array().unwrap().len(), 2, "{r}");
    assert_eq!(
        (r["a"].as_u64(), r["b"].as_u64()),
        (Some(403), Some(403)),
        "{r}"
    );
    assert_eq!(r["pending"], 1, "run-B still waits: {r}");
    assert_eq!(backend.count(), 0);
}

#[test]
fn an_approver_answers_a_suspended_calls_generated_form_and_the_tool_continues() {
    let (r, backend) = scenario("suspend");
    assert_eq!(r["agent_status"], 202, "{r}");
    assert_eq!(r["agent_call"]["status"], "suspended");
    let list = r["list_text"].as_str().unwrap();
    assert!(
        list.contains("ask.deploy") && list.contains("which environment?"),
        "{r}"
    );
    assert!(r["list_title"].as_str().unwrap().starts_with("(1)"), "{r}");
    assert_eq!(r["question"], "which environment?");
    // The select offers the schema's enum (and nothing else).
    assert_eq!(
        r["options"],
        serde_json::json!(["staging", "production"]),
        "{r}"
    );
    // A refused answer is shown at the call's own address; a reload sends nothing again.
    assert!(!r["refused"].as_str().unwrap().is_empty(), "{r}");
    let refused_url = r["refused_url"].as_str().unwrap();
    assert!(
        refused_url.contains("/inbox/calls/call_") && !refused_url.ends_with("/resume"),
        "{r}"
    );
    assert_eq!(r["after_reload_error"], 0, "{r}");
    let after = r["after"].as_str().unwrap();
    assert!(after.contains("\"deployed_to\": \"staging\""), "{r}");
    assert_eq!(r["no_xss"], true);
    assert_eq!(r["agent_after_status"], 200, "{r}");
    assert_eq!(r["agent_after"]["result"]["deployed_to"], "staging");
    // Asked once, continued once.
    assert_eq!(backend.count(), 2);
    for shot in [
        "inbox-suspended-list",
        "inbox-suspended-form",
        "inbox-suspended-done",
    ] {
        assert!(shots().join(format!("{shot}.png")).exists(), "{shot}");
    }
}
