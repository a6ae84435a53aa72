//! The Block Kit airlock sends: an approval's message (what is asked, the canonical args as
//! text, who decided, the buttons while it waits) and the decline modal. Everything a caller
//! or an upstream wrote (tool names, args, rule messages, reasons) goes out as `plain_text` or
//! preformatted rich text, which Slack never parses for mentions, links or markup; the only
//! `mrkdwn` is the gateway's own (its inbox link and a date). Views only: no I/O.
//!
//! Which button gives which grant is here too ([`approve_actions`]), so the message that
//! offers a choice and the interaction that takes it read one list.

use airlock_storage::{
    Approval, ApprovalKind, ApprovalStatus, GrantChoice, GrantScopeName, Millis,
};
use serde_json::{json, Value};

use crate::clock::rfc3339;

/// The action id of the decline button, and the callback id of its modal.
pub const DECLINE: &str = "airlock.decline";
/// The action id of the "Open in inbox" link button (Slack tells us of its clicks too).
pub const OPEN: &str = "airlock.open";
/// The modal's reason input: its block id and action id.
pub const REASON: &str = "reason";

/// Most characters of args shown in a message; the inbox shows them all.
const MAX_ARGS_CHARS: usize = 2500;

/// One approve button: its action id, label, and the grant it chooses (none: the rule's own).
#[derive(Debug, Clone, PartialEq)]
pub struct ApproveAction {
    pub id: &'static str,
    pub label: &'static str,
    pub grant: Option<GrantChoice>,
}

/// The approve buttons an approval offers: "Approve once" and "Approve for this run" (as many
/// uses and as long as the rule allows) where the rule lets an approver grant its run more
/// than one use (and the call has a run), else "Approve" on the rule's own terms.
pub fn approve_actions(a: &Approval) -> Vec<ApproveAction> {
    let max = a.grant.maxima();
    let has_run = a.context.get("run_id").and_then(Value::as_str).is_some();
    // A run grant of one use is the call alone: no choice to offer.
    if a.kind == ApprovalKind::Call && max.scope >= GrantScopeName::Run && max.uses > 1 && has_run {
        vec![
            ApproveAction {
                id: "airlock.approve_once",
                label: "Approve once",
                grant: Some(GrantChoice {
                    uses: Some(1),
                    ttl_ms: None,
                    scope: Some(GrantScopeName::Call),
                }),
            },
            ApproveAction {
                id: "airlock.approve_run",
                label: "Approve for this run",
                grant: Some(GrantChoice {
                    uses: Some(max.uses),
                    ttl_ms: Some(max.ttl_ms),
                    scope: Some(GrantScopeName::Run),
                }),
            },
        ]
    } else {
        vec![ApproveAction {
            id: "airlock.approve",
            label: "Approve",
            grant: None,
        }]
    }
}

/// At most `n` characters.
fn clip(s: &str, n: usize) -> String {
    if s.chars().count() <= n {
        return s.to_owned();
    }
    let mut out: String = s.chars().take(n.saturating_sub(1)).collect();
    out.push('…');
    out
}

fn plain(text: &str, n: usize) -> Value {
    json!({"type": "plain_text", "text": clip(text, n), "emoji": false})
}

/// A summary's message (`approval.summary`): a principal's approvals beyond ten a minute,
/// counted, with a link to the inbox where each waits. Plain text only: the principal's id is
/// the only thing in it that is not the gateway's.
pub fn summary(s: &Value, inbox: &str) -> Value {
    let principal = s["principal"].as_str().unwrap_or("");
    let count = s["count"].as_u64().unwrap_or(0);
    let since = s["since"].as_str().unwrap_or("");
    let headline = format!("{count} more approvals requested by {principal}");
    let text = format!(
        "{principal} asked for {count} more approvals since {since}: more than ten a minute, so they are sent as one summary. Each waits in the inbox; an admin can decline every pending call of {principal} at once."
    );
    json!({
        "text": escape(&headline),
        "blocks": [
            {"type": "header", "text": plain(&headline, 150)},
            {"type": "section", "text": plain(&text, 3000)},
            {"type": "actions", "elements": [
                {"type": "button", "action_id": OPEN, "text": plain("Open the inbox", 75), "url": inbox}
            ]},
        ],
    })
}

/// `&`, `<` and `>` escaped, as Slack asks of text it may parse.
fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

fn headline(a: &Approval) -> String {
    match a.kind {
        ApprovalKind::ToolDefinition => format!("Review the changed definition of {}", a.tool),
        ApprovalKind::Call => format!("Approval needed: {}", a.subject()),
    }
}

/// What the approval's status says, with who decided: one line per decision.
pub(crate) fn outcome(a: &Approval) -> Vec<String> {
    let mut lines: Vec<String> = a
        .decisions
        .iter()
        .map(|d| {
            let verb = if d.decision == "approve" {
                "Approved"
            } else {
                "Declined"
            };
            let slack = d
                .auth
                .as_ref()
                .filter(|x| x["kind"] == "slack")
                .and_then(|x| x["user"].as_str())
                .map(|u| format!(" in Slack (user {u})"))
                .unwrap_or_default();
            let reason = d
                .reason
                .as_deref()
                .filter(|r| !r.is_empty())
                .map(|r| format!(": {r}"))
                .unwrap_or_default();
            let voided = d
                .voided
                .as_deref()
                .map(|why| format!(" (no longer counts: {why})"))
                .unwrap_or_default();
            format!(
                "{verb} by {}{slack} at {}{reason}{voided}",
                d.by,
                rfc3339(d.at)
            )
        })
        .collect();
    match a.status {
        ApprovalStatus::Expired => lines.push(format!(
            "Expired at {} without a decision",
            rfc3339(a.decided_at.unwrap_or(a.expires_at))
        )),
        ApprovalStatus::Cancelled => lines.push("Cancelled: the call no longer waits".into()),
        _ => {}
    }
    lines
}

/// The message of approval `a`: `{"text", "blocks"}` for `chat.postMessage` and
/// `chat.update`. `args` are the args as they may leave the gateway (redacted); `inbox` is the
/// approval's inbox page.
pub fn message(a: &Approval, args: &Value, inbox: &str, now: Millis) -> Value {
    let status = a.status.as_str();
    let requester = &a.requester.id;
    let mut blocks = vec![json!({"type": "header", "text": plain(&headline(a), 150)})];
    let names: Vec<&str> = a.rules.iter().map(String::as_str).collect();
    let rules = crate::approvals::rules_line(&names, &a.explanation);
    let approvals = a.approvals_counted();
    blocks.push(json!({"type": "section", "fields": [
        plain(&format!("Requested by\n{requester}"), 2000),
        plain(&format!("Rules\n{rules}"), 2000),
        plain(&format!("Status\n{status}"), 2000),
        plain(&format!("Approvals\n{approvals} of {}", a.quorum), 2000),
    ]}));
    let messages: Vec<&str> = a.explanation["messages"]
        .as_array()
        .map(|m| m.iter().filter_map(|m| m["message"].as_str()).collect())
        .unwrap_or_default();
    for m in messages.iter().take(5) {
        blocks.push(json!({"type": "section", "text": plain(&format!("Why: {m}"), 3000)}));
    }
    let shown = serde_json::to_string_pretty(args).unwrap_or_default();
    let total = shown.chars().count();
    let mut text = clip(&shown, MAX_ARGS_CHARS);
    if total > MAX_ARGS_CHARS {
        text.push_str(&format!(
            "\n({} more characters: the inbox shows them all)",
            total - MAX_ARGS_CHARS
        ));
    }
    blocks.push(json!({"type": "rich_text", "elements": [
        {"type": "rich_text_section", "elements": [{"type": "text", "text": if a.request.is_some() { "Params (canonical JSON)" } else { "Arguments (canonical JSON)" }, "style": {"bold": true}}]},
        {"type": "rich_text_preformatted", "elements": [{"type": "text", "text": text}]},
    ]}));
    let expires = a.expires_at / 1000;
    let minutes = a.expires_at.saturating_sub(now) / 60_000;
    let when = if a.status == ApprovalStatus::Pending {
        format!(
            "Expires <!date^{expires}^{{date_short_pretty}} at {{time}}|{}> (in {minutes} min when posted)",
            rfc3339(a.expires_at)
        )
    } else {
        format!("Decided or ended: {}", escape(status))
    };
    blocks.push(json!({"type": "context", "elements": [
        {"type": "mrkdwn", "text": format!("{when} · <{inbox}|Open in the inbox>")},
    ]}));
    let lines = outcome(a);
    if !lines.is_empty() {
        blocks.push(json!({"type": "section", "text": plain(&lines.join("\n"), 3000)}));
    }
    if a.status == ApprovalStatus::Pending {
        let mut buttons: Vec<Value> = approve_actions(a)
            .into_iter()
            .map(|b| json!({"type": "button", "action_id": b.id, "text": plain(b.label, 75), "style": "primary", "value": a.id}))
            .collect();
        buttons.push(json!({"type": "button", "action_id": DECLINE, "text": plain("Decline", 75), "style": "danger", "value": a.id}));
        buttons.push(json!({"type": "button", "action_id": OPEN, "text": plain("Open in inbox", 75), "url": inbox}));
        blocks.push(json!({"type": "actions", "block_id": format!("airlock.{}", a.id), "elements": buttons}));
    }
    let summary = match a.status {
        ApprovalStatus::Pending => format!("{} (requested by {requester})", headline(a)),
        _ => format!("{}: {status}", headline(a)),
    };
    json!({"text": escape(&summary), "blocks": blocks})
}

/// The modal that asks for a decline's reason; `meta` comes back with the submission.
pub fn decline_modal(a: &Approval, meta: &str) -> Value {
    json!({
        "type": "modal",
        "callback_id": DECLINE,
        "private_metadata": meta,
        "title": plain("Decline", 24),
        "submit": plain("Decline", 24),
        "close": plain("Cancel", 24),
        "blocks": [
            {"type": "section", "text": plain(&format!("Decline {} for {}. The reason is sent back to the agent.", a.subject(), a.requester.id), 3000)},
            {"type": "input", "block_id": REASON, "label": plain("Reason", 2000),
             "element": {"type": "plain_text_input", "action_id": REASON, "multiline": true, "min_length": 1, "max_length": 2000}},
        ],
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use airlock_storage::{ApprovalDecision, GrantMax, GrantTerms, Principal};

    pub(crate) fn approval(
        status: ApprovalStatus,
        run: bool,
        max_scope: GrantScopeName,
    ) -> Approval {
        Approval {
            id: "apr_1".into(),
            kind: ApprovalKind::Call,
            call_id: "call_1".into(),
            tool: "db.query".into(),
            request: None,
            args: json!({"sql": "select 1"}),
            fingerprint: "f".into(),
            requester: Principal {
                id: "agent1".into(),
                role: "agent".into(),
                ..Default::default()
            },
            context: if run {
                json!({"run_id": "r1"})
            } else {
                json!({})
            },
            policy_version: "v".into(),
            explanation: json!({"messages": [{"message": "<!channel> needs a *DBA*"}]}),
            rules: vec!["approve-db".into()],
            approvers: ["dba".to_owned()].into(),
            quorum: 1,
            status,
            decisions: vec![],
            created_at: 0,
            expires_at: 900_000,
            grant: GrantTerms {
                uses: 1,
                ttl_ms: 60_000,
                scope: "call".into(),
                scope_key: "call:call_1".into(),
                max: Some(GrantMax {
                    uses: 20,
                    ttl_ms: 3_600_000,
                    scope: max_scope,
                }),
            },
            edited_args: None,
            edited_fingerprint: None,
            decided_at: None,
        }
    }

    #[test]
    fn hostile_text_is_plain_and_only_the_gateway_writes_mrkdwn() {
        let a = approval(ApprovalStatus::Pending, false, GrantScopeName::Call);
        let args = json!({"sql": "<!channel> <https://evil.example|click> *bold* ```x```"});
        let m = message(
            &a,
            &args,
            "https://airlock.example/inbox/approvals/apr_1",
            0,
        );
        let blocks = m["blocks"].as_array().unwrap();
        for b in blocks {
            let s = b.to_string();
            if s.contains("mrkdwn") {
                assert!(!s.contains("evil") && !s.contains("DBA"), "{s}");
            }
        }
        let text = m.to_string();
        assert!(
            text.contains("<!channel> <https://evil.example|click>"),
            "the args as sent, in preformatted text"
        );
        assert!(
            m["text"].as_str().unwrap().contains("&lt;")
                || !m["text"].as_str().unwrap().contains('<')
        );
        let actions = blocks.iter().find(|b| b["type"] == "actions").unwrap();
        let ids: Vec<&str> = actions["elements"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["action_id"].as_str().unwrap())
            .collect();
        assert_eq!(ids, ["airlock.approve", DECLINE, OPEN]);
    }

    #[test]
    fn the_run_choice_only_where_the_rule_allows_it_and_the_call_has_a_run() {
        let ids = |a: &Approval| {
            approve_actions(a)
                .into_iter()
                .map(|b| b.id)
                .collect::<Vec<_>>()
        };
        assert_eq!(
            ids(&approval(
                ApprovalStatus::Pending,
                true,
                GrantScopeName::Call
            )),
            ["airlock.approve"]
        );
        assert_eq!(
            ids(&approval(
                ApprovalStatus::Pending,
                false,
                GrantScopeName::Run
            )),
            ["airlock.approve"]
        );
        let a = approval(ApprovalStatus::Pending, true, GrantScopeName::Run);
        let actions = approve_actions(&a);
        assert_eq!(actions[1].grant.unwrap().scope, Some(GrantScopeName::Run));
        assert_eq!(actions[1].grant.unwrap().uses, Some(20));
        assert_eq!(actions[0].grant.unwrap().uses, Some(1));
    }

    #[test]
    fn a_decided_approval_has_no_buttons_and_says_who_decided() {
        let mut a = approval(ApprovalStatus::Approved, false, GrantScopeName::Call);
        a.decisions.push(ApprovalDecision {
            by: "dba1".into(),
            decision: "approve".into(),
            reason: None,
            at: 1000,
            fingerprint: "f".into(),
            auth: Some(json!({"kind": "slack", "via": "slack", "user": "U1"})),
            grant: None,
            groups: Some(vec!["dba".into()]),
            voided: None,
        });
        let m = message(&a, &a.args, "https://x/inbox/approvals/apr_1", 0);
        assert!(!m.to_string().contains("\"actions\""), "{m}");
        assert!(
            m.to_string()
                .contains("Approved by dba1 in Slack (user U1)"),
            "{m}"
        );
        let mut e = approval(ApprovalStatus::Expired, false, GrantScopeName::Call);
        e.decided_at = Some(900_000);
        assert!(message(&e, &e.args, "x", 0)
            .to_string()
            .contains("Expired at"));
    }

    #[test]
    fn a_held_mcp_request_is_named_as_what_it_is() {
        let mut a = approval(ApprovalStatus::Pending, false, GrantScopeName::Call);
        a.tool = String::new();
        a.request = Some(Box::new(airlock_policy::OwnedRequest {
            kind: airlock_policy::RequestKind::Prompt,
            server: "gh".into(),
            uri: None,
            prompt: Some("gh.triage".into()),
        }));
        let m = message(&a, &json!({"name": "gh.triage"}), "x", 0);
        assert_eq!(
            m["blocks"][0]["text"]["text"],
            "Approval needed: prompt gh.triage (gh)"
        );
        assert!(m.to_string().contains("Params (canonical JSON)"), "{m}");
    }

    #[test]
    fn long_args_are_clipped_with_a_pointer_to_the_inbox() {
        let a = approval(ApprovalStatus::Pending, false, GrantScopeName::Call);
        let args = json!({"sql": "x".repeat(10_000)});
        let m = message(&a, &args, "x", 0).to_string();
        assert!(m.len() < 6000, "{}", m.len());
        assert!(m.contains("more characters: the inbox shows them all"));
    }
}
