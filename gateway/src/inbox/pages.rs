//! The inbox's pages, as maud templates checked at compile time. Every value is inserted
//! through maud's escaping: args, context fields, reasons and messages are agents' and
//! people's text and are never HTML, script or a URL the page loads. The only links are to
//! the inbox's own routes, built from ids the store made.

use airlock_policy::Decision;
use airlock_storage::{Approval, ApprovalKind};
use maud::{html, Markup, DOCTYPE};
use serde_json::Value;

use crate::clock::rfc3339;
use crate::error::{ApiError, Code};

/// Who is signed in, and the CSRF token their forms carry.
pub struct Who {
    pub id: String,
    pub csrf: String,
    /// An admin also sees the shadow policy's page.
    pub admin: bool,
}

/// The pending list's filters.
pub struct Filters {
    pub tool: Option<String>,
    pub agent: Option<String>,
    pub run: Option<String>,
}

pub(super) fn layout(title: &str, who: Option<&Who>, body: Markup) -> Markup {
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                title { (title) }
                link rel="stylesheet" href="/inbox/assets/app.css";
                script src="/inbox/assets/app.js" defer {}
            }
            body {
                header {
                    nav aria-label="Inbox" {
                        a.brand href="/inbox/" { "airlock" }
                        @if let Some(w) = who {
                            a href="/inbox/" { "Pending" }
                            a href="/inbox/suspended" { "Suspended" }
                            a href="/inbox/history" { "Decided" }
                            a href="/inbox/grants" { "Grants" }
                            a href="/inbox/audit" { "Audit" }
                            @if w.admin { a href="/inbox/shadow" { "Shadow" } }
                            span.who { span.wide { "Signed in as " } strong { (w.id) } }
                            form.inline method="post" action="/inbox/logout" {
                                input type="hidden" name="csrf" value=(w.csrf);
                                button type="submit" { "Sign out" }
                            }
                        }
                    }
                }
                main { (body) }
            }
        }
    }
}

/// How the sign-in page offers to sign in: with an issuer (`[inbox.oidc]`), a token, or both.
pub struct SignIn<'a> {
    pub oidc: Option<&'a str>,
    pub token: bool,
}

pub fn login(error: Option<&str>, next: &str, how: &SignIn) -> Markup {
    layout(
        "Sign in · airlock inbox",
        None,
        html! {
            h1 { "Sign in" }
            @if let Some(e) = error { p.error role="alert" { (e) } }
            @if let Some(issuer) = how.oidc {
                p { "Approvers and admins sign in with their company account. Agents cannot sign in." }
                p {
                    a.button #oidc href={ "/inbox/oidc/start?next=" (crate::urlencoded::encode_component(next)) } {
                        "Sign in with " (issuer)
                    }
                }
            }
            @if how.token {
                @if how.oidc.is_some() {
                    h2 { "Or with a token" }
                } @else {
                    p { "Use an approver's or an admin's token. Agents cannot sign in." }
                }
                form method="post" action="/inbox/login" {
                    input type="hidden" name="next" value=(next);
                    label for="token" { "Token" }
                    input #token type="password" name="token" autocomplete="off" required autofocus[how.oidc.is_none()];
                    button type="submit" { "Sign in" }
                }
            }
        },
    )
}

/// After a sign-in with OIDC: the session cookie is `SameSite=Strict`, which a browser does
/// not send on a redirect that began at the identity provider, so the page goes on by itself
/// (a same-site navigation) instead of redirecting.
pub fn signed_in(id: &str, next: &str) -> Markup {
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                meta http-equiv="refresh" content={ "0;url=" (next) };
                title { "Signed in · airlock inbox" }
                link rel="stylesheet" href="/inbox/assets/app.css";
            }
            body {
                main {
                    h1 { "Signed in" }
                    p { "Signed in as " strong { (id) } "." }
                    p { a href=(next) { "Continue to the inbox" } }
                }
            }
        }
    }
}

pub fn message(title: &str, text: &str) -> Markup {
    layout(
        title,
        None,
        html! {
            h1 { (title) }
            p { (text) }
            p { a href="/inbox/" { "Back to the inbox" } }
        },
    )
}

/// A refusal of the API's rules, said so a person understands.
pub fn in_words(e: &ApiError) -> String {
    let said = match e.code {
        Code::ApprovalForbidden => "You are not one of those who may decide this.",
        Code::ApprovalSelfApproval => {
            "You asked for this call yourself: someone else must decide it."
        }
        Code::ApprovalAlreadyDecided => {
            "You have already decided this approval; it needs another approver."
        }
        Code::ApprovalNotPending => {
            "This approval is no longer pending: it was decided, expired or cancelled."
        }
        Code::ApprovalNotFound => "There is no such approval.",
        Code::ApprovalExpired => "Nobody approved it in time: it has expired, which is a deny.",
        Code::ApprovalEditDenied => {
            "Policy denies the call as edited, so it cannot be approved that way."
        }
        Code::RequestMissingReason => "A decline needs a reason: the agent reads it.",
        Code::StoreUnavailable => {
            "The gateway cannot reach its store; nothing was decided. Try again."
        }
        c if c.as_str().starts_with("request.") => "The edited arguments are not valid.",
        _ => "The gateway refused this.",
    };
    format!("{said} ({}: {})", e.code, e.message)
}

pub fn refusal(e: &ApiError) -> Markup {
    layout(
        "Refused · airlock inbox",
        None,
        html! {
            h1 { "Refused" }
            p.error role="alert" { (in_words(e)) }
            p { a href="/inbox/" { "Back to the inbox" } }
        },
    )
}

/// "12 min left", "40 s left", or "expired".
pub fn time_left(expires_at: u64, now: u64) -> String {
    if expires_at <= now {
        return "expired".into();
    }
    let s = (expires_at - now) / 1000;
    match s {
        0..=59 => format!("{s} s left"),
        60..=3599 => format!("{} min left", s / 60),
        _ => format!("{} h {} min left", s / 3600, (s % 3600) / 60),
    }
}

fn field<'a>(a: &'a Approval, key: &str) -> Option<&'a str> {
    a.context.get(key).and_then(Value::as_str)
}

pub fn list(who: &Who, shown: &[Approval], count: usize, f: &Filters, now: u64) -> Markup {
    let title = format!("({count}) Pending · airlock inbox");
    layout(
        &title,
        Some(who),
        html! {
            h1 { "Pending approvals" }
            form.filters method="get" action="/inbox/" role="search" {
                div.field {
                    label for="f-tool" { "Tool" }
                    input #f-tool name="tool" value=(f.tool.as_deref().unwrap_or(""));
                }
                div.field {
                    label for="f-agent" { "Agent" }
                    input #f-agent name="agent" value=(f.agent.as_deref().unwrap_or(""));
                }
                div.field {
                    label for="f-run" { "Run" }
                    input #f-run name="run" value=(f.run.as_deref().unwrap_or(""));
                }
                button type="submit" { "Filter" }
            }
            p.hint { "New calls appear here as they are held." span.keys { " Keys: j and k move, Enter opens." } }
            div #pending data-live="1" { (pending_table(shown, now)) }
        },
    )
}

/// The rows of the pending list (also fetched alone for the live refresh).
pub fn pending_table(shown: &[Approval], now: u64) -> Markup {
    html! {
        @if shown.is_empty() {
            p.empty { "Nothing is waiting for a decision." }
        } @else {
            table.pending {
                thead { tr { th { "Tool or request" } th { "Requester" } th.wide { "Run" } th { "Time left" } th.wide { "Quorum" } } }
                tbody {
                    @for a in shown {
                        tr {
                            td {
                                a.row href={ "/inbox/approvals/" (a.id) } { (a.subject()) }
                                // What sets one row apart from the next: its args, in short.
                                @if a.kind == ApprovalKind::ToolDefinition {
                                    code.args { "its definition changed: review it" }
                                } @else {
                                    code.args { (args_summary(&a.args)) }
                                }
                            }
                            td { (a.requester.id) }
                            td.wide { (field(a, "run_id").unwrap_or("—")) }
                            td data-expires=(a.expires_at) { (time_left(a.expires_at, now)) }
                            td.wide { (a.approvals_counted()) "/" (a.quorum) }
                        }
                    }
                }
            }
        }
    }
}

/// A decided approval's heading word.
pub(super) fn status_title(status: &str) -> &'static str {
    match status {
        "approved" => "Approved",
        "declined" => "Declined",
        "expired" => "Expired",
        "cancelled" => "Cancelled",
        _ => "Decided",
    }
}

/// A call's args on one short line: its canonical JSON, cut at 80 characters.
fn args_summary(args: &Value) -> String {
    let text = args.to_string();
    if text.chars().count() <= 80 {
        return text;
    }
    let cut: String = text.chars().take(79).collect();
    format!("{cut}…")
}

/// What an audit record is about, in a few words: its tool, call and who acted.
fn record_gist(r: &Value) -> String {
    let parts: Vec<String> = [
        "tool",
        "call_id",
        "principal",
        "by",
        "status",
        "decision",
        "code",
    ]
    .iter()
    .filter_map(|k| {
        r.get(*k)
            .and_then(Value::as_str)
            .map(|v| format!("{k} {v}"))
    })
    .collect();
    if parts.is_empty() {
        "details".to_owned()
    } else {
        parts.join(" · ")
    }
}

/// Pretty JSON of the args, with string values over 200 characters folded.
fn folded(args: &Value) -> (String, bool) {
    fn fold(v: &Value, folded: &mut bool) -> Value {
        match v {
            Value::String(s) if s.chars().count() > 200 => {
                *folded = true;
                let head: String = s.chars().take(200).collect();
                Value::String(format!(
                    "{head}… ({} more characters)",
                    s.chars().count() - 200
                ))
            }
            Value::Array(a) => Value::Array(a.iter().map(|x| fold(x, folded)).collect()),
            Value::Object(m) => Value::Object(
                m.iter()
                    .map(|(k, x)| (k.clone(), fold(x, folded)))
                    .collect(),
            ),
            other => other.clone(),
        }
    }
    let mut any = false;
    let v = fold(args, &mut any);
    (serde_json::to_string_pretty(&v).unwrap_or_default(), any)
}

/// One approval. Once decided, the heading says how, and `next` (the oldest other pending
/// approval, if any) is one click away.
pub fn approval(
    who: &Who,
    a: &Approval,
    error: Option<&ApiError>,
    now: u64,
    next: Option<&Approval>,
) -> Markup {
    let pretty = serde_json::to_string_pretty(&a.args).unwrap_or_default();
    let (short, was_folded) = folded(&a.args);
    let pending = a.status.as_str() == "pending";
    layout(
        &format!("{} · approval · airlock inbox", a.subject()),
        Some(who),
        html! {
            @if pending {
                h1 { "Approve " (subject(a)) "?" }
            } @else {
                h1 { (status_title(a.status.as_str())) ": " (subject(a)) }
                (decided_note(a, a.request.as_ref().map_or("call", |r| r.kind.noun()), next))
            }
            @if let Some(e) = error {
                p.error role="alert" data-canonical={ "/inbox/approvals/" (a.id) } { (in_words(e)) }
            }
            p.status {
                span class={ "badge status-" (a.status.as_str()) } { (a.status.as_str()) }
                @if pending { " · " span data-expires=(a.expires_at) { (time_left(a.expires_at, now)) } }
                " · approvals " (a.approvals_counted()) " of " (a.quorum)
            }
            h2 { @if a.request.is_some() { "Params" } @else { "Arguments" } }
            pre.args { (short) }
            @if was_folded {
                details { summary { "Show them whole" } pre.args { (pretty) } }
            }
            (facts(a))
            (why_held(a))
            (decisions(a))
            @if pending { (decide_section(a, who, &pretty)) }
        },
    )
}

/// What an approval holds, for a heading: the tool's name, or what the request asks of which
/// server.
fn subject(a: &Approval) -> Markup {
    let Some(r) = &a.request else {
        return html! { code { (a.tool) } };
    };
    html! {
        "the " (r.kind.noun()) " " code { (r.target()) } " from " code { (r.server) }
    }
}

/// An approval's facts: its fingerprint, who asked, its context, its groups and times.
fn facts(a: &Approval) -> Markup {
    html! {
        dl {
            @if let Some(r) = &a.request {
                dt { "Kind" } dd { (r.kind.noun()) }
                dt { "Server" } dd { code { (r.server) } }
                @if let Some(u) = &r.uri { dt { "URI" } dd { code { (u) } } }
                @if let Some(p) = &r.prompt { dt { "Prompt" } dd { code { (p) } } }
            }
            dt { "Fingerprint" } dd { code.fp { (a.fingerprint) } }
            dt { "Requester" } dd { (a.requester.id) }
            @for key in ["agent_id", "run_id", "thread_id", "tool_call_id"] {
                @if let Some(v) = field(a, key) { dt { (key) } dd { (v) } }
            }
            @if let Some(l) = a.context.get("labels") { dt { "labels" } dd { code { (l.to_string()) } } }
            dt { "Approvers" } dd {
                @if a.approvers.is_empty() { "any approver" } @else {
                    (a.approvers.iter().cloned().collect::<Vec<_>>().join(", "))
                }
            }
            dt { "Asked" } dd { (rfc3339(a.created_at)) }
            dt { "Expires" } dd { (rfc3339(a.expires_at)) }
            dt { "Call" } dd { code { (a.call_id) } }
        }
    }
}

/// Why an approval was held: its rules with their messages, and the classifiers' results.
fn why_held(a: &Approval) -> Markup {
    let messages = a
        .explanation
        .get("messages")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let classifiers = a
        .explanation
        .get("classifiers")
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default();
    let errors: Vec<(String, String)> = a
        .explanation
        .get("errors")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .map(|e| {
            let text = |k: &str| e.get(k).and_then(Value::as_str).unwrap_or("").to_owned();
            (text("rule"), text("reason"))
        })
        .collect();
    html! {
        h2 { "Why it was held" }
        @if a.rules.is_empty() && errors.is_empty() {
            p { "No rule matched: the policy's default decision." }
        }
        ul.rules {
            @for (rule, reason) in &errors {
                li.error {
                    code { (rule) } " failed to evaluate: " (reason)
                }
            }
            @for r in &a.rules {
                li {
                    code { (r) }
                    @for m in messages.iter().filter(|m| m.get("rule").and_then(Value::as_str) == Some(r.as_str())) {
                        " — " (m.get("message").and_then(Value::as_str).unwrap_or(""))
                    }
                }
            }
        }
        @if !classifiers.is_empty() {
            h2 { "Classifiers" }
            table {
                thead { tr { th { "Classifier" } th { "Score" } th { "Labels" } } }
                tbody {
                    @for (name, c) in &classifiers {
                        tr {
                            td { (name) }
                            td { (c.get("score").map(Value::to_string).unwrap_or_default()) }
                            td { (c.get("labels").and_then(Value::as_array).map(|l| l.iter().filter_map(Value::as_str).collect::<Vec<_>>().join(", ")).unwrap_or_default()) }
                        }
                    }
                }
            }
        }
    }
}

/// A pending approval's forms: approve or decline (with the grant choices the rule allows),
/// edit then approve, and decide the whole run.
fn decide_section(a: &Approval, who: &Who, pretty: &str) -> Markup {
    let run = field(a, "run_id");
    html! {
        section.actions aria-label="Decide" {
            (decide_forms(a, who, ["Approve", "Reason (required: the agent reads it)", "Decline"], grant_fields(a)))
            // A held MCP request is approved as it was asked: its params are not edited.
            @if a.request.is_none() { details.edit {
                summary { "Edit the arguments, then approve" }
                form #edit-form method="post" action={ "/inbox/approvals/" (a.id) "/approve" } data-preview={ "/inbox/approvals/" (a.id) "/preview" } {
                    input type="hidden" name="csrf" value=(who.csrf);
                    label for="edit-args" { "Arguments (JSON)" }
                    textarea #edit-args name="args" rows="10" spellcheck="false" { (pretty) }
                    label for="edit-reason" { "Reason (optional)" }
                    input #edit-reason name="reason";
                    button #preview-button type="button" { "Preview the decision" }
                    div #preview aria-live="polite" {}
                    button.approve type="submit" { "Approve the edited call" }
                }
            } }
            @if who.admin && a.kind == ApprovalKind::Call {
                details.flood {
                    summary { "Decline every pending call of " code { (a.requester.id) } }
                    form method="post" action="/inbox/principals/decline" {
                        input type="hidden" name="csrf" value=(who.csrf);
                        input type="hidden" name="principal" value=(a.requester.id);
                        label for="flood-reason" { "Reason (required: each agent call reads it)" }
                        input #flood-reason name="reason" required;
                        button.decline type="submit" name="verb" value="decline" { "Decline them all" }
                    }
                }
            }
            @if let Some(run) = run {
                details.run {
                    summary { "Decide every pending call of run " code { (run) } " of " code { (a.requester.id) } }
                    form method="post" action="/inbox/runs/decide" {
                        input type="hidden" name="csrf" value=(who.csrf);
                        input type="hidden" name="run_id" value=(run);
                        input type="hidden" name="principal" value=(a.requester.id);
                        label for="run-reason" { "Reason (required to decline)" }
                        input #run-reason name="reason";
                        button.approve type="submit" name="verb" value="approve" { "Approve the run" }
                        button.decline type="submit" name="verb" value="decline" { "Decline the run" }
                    }
                }
            }
        }
    }
}

/// The decision the edited call would get, and what changed.
pub fn preview(d: &Decision, old: &str, new: &str) -> Markup {
    html! {
        p.decision {
            "Policy would " strong { (d.decision.as_str()) } " the edited call"
            @if !d.rules.is_empty() { " (" (d.rules.join(", ")) ")" }
            @if d.decision.as_str() == "deny" { ": it cannot be approved as edited." } @else { "." }
        }
        pre.diff {
            @for row in crate::diff::rows_text(old, new) {
                @if !row.changed {
                    span.same { "  " (row.old.unwrap_or_default()) "\n" }
                } @else {
                    @if let Some(l) = row.old { del { "- " (l) "\n" } }
                    @if let Some(l) = row.new { ins { "+ " (l) "\n" } }
                }
            }
        }
    }
}

pub fn preview_error(why: &str) -> Markup {
    html! { p.error role="alert" { "Not valid arguments: " (why) } }
}

pub fn history(who: &Who, decided: &[Approval]) -> Markup {
    layout(
        "Decided · airlock inbox",
        Some(who),
        html! {
            h1 { "Decided approvals" }
            @if decided.is_empty() { p.empty { "Nothing has been decided yet." } } @else {
                table {
                    thead { tr { th { "Tool or request" } th.wide { "Requester" } th { "Status" } th.wide { "Decided" } th { "By" } } }
                    tbody {
                        @for a in decided {
                            tr {
                                td { a href={ "/inbox/approvals/" (a.id) } { (a.subject()) } }
                                td.wide { (a.requester.id) }
                                td { span class={ "badge status-" (a.status.as_str()) } { (a.status.as_str()) } }
                                td.wide { (a.decided_at.map(rfc3339).unwrap_or_default()) }
                                td { (a.decisions.iter().map(|d| d.by.clone()).collect::<Vec<_>>().join(", ")) }
                            }
                        }
                    }
                }
            }
        },
    )
}

pub fn audit(who: &Who, tail: &[Value], chain: Result<u64, String>) -> Markup {
    layout(
        "Audit · airlock inbox",
        Some(who),
        html! {
            h1 { "Audit log" }
            @match &chain {
                Ok(n) => p.ok { "The chain verifies: " (n) " records, every hash intact." },
                Err(e) => p.error role="alert" { "The chain does NOT verify: " (e) },
            }
            table.audit {
                thead { tr { th { "Seq" } th { "Kind" } th.wide { "At" } th { "Record" } } }
                tbody {
                    @for r in tail.iter().rev() {
                        tr {
                            td { (r.get("seq").map(Value::to_string).unwrap_or_default()) }
                            td {
                                // A kind may wrap after its dot, never inside a word.
                                @let kind = r.get("kind").and_then(Value::as_str).unwrap_or("");
                                @match kind.split_once('.') {
                                    Some((head, tail)) => { (head) "." wbr; (tail) }
                                    None => { (kind) }
                                }
                            }
                            td.wide { (r.get("ts").and_then(Value::as_u64).map(rfc3339).unwrap_or_default()) }
                            td {
                                // The record's gist on one line; the whole of it on request.
                                details {
                                    summary { (record_gist(r)) }
                                    pre { (serde_json::to_string_pretty(r).unwrap_or_default()) }
                                }
                            }
                        }
                    }
                }
            }
        },
    )
}

pub fn run_result(who: &Who, run: &str, results: &[(String, String, Option<ApiError>)]) -> Markup {
    layout(
        "Run decided · airlock inbox",
        Some(who),
        html! {
            h1 { "Run " code { (run) } }
            @if results.is_empty() { p { "No pending call of this run." } }
            ul {
                @for (id, tool, err) in results {
                    li {
                        a href={ "/inbox/approvals/" (id) } { (tool) } " — "
                        @match err { None => "decided", Some(e) => span.error { (in_words(e)) } }
                    }
                }
            }
            p { a href="/inbox/" { "Back to the inbox" } }
        },
    )
}

/// What declining every pending call of `principal` did, each approval with its result.
pub fn principal_declined(
    who: &Who,
    principal: &str,
    results: &[(String, String, Option<ApiError>)],
) -> Markup {
    layout(
        "Declined · airlock inbox",
        Some(who),
        html! {
            h1 { "Every pending call of " code { (principal) } }
            @if results.is_empty() { p { "No pending call of this principal." } }
            @else { p role="status" { (results.len()) " declined or tried:" } }
            ul {
                @for (id, tool, err) in results {
                    li {
                        a href={ "/inbox/approvals/" (id) } { (tool) } " — "
                        @match err { None => "declined", Some(e) => span.error { (in_words(e)) } }
                    }
                }
            }
            p { a href="/inbox/" { "Back to the inbox" } }
        },
    )
}

/// What a decided approval's page says first: how it ended, and the next one waiting (a
/// call's args in short beside its tool), or that nothing is.
pub(super) fn decided_note(a: &Approval, what: &str, next: Option<&Approval>) -> Markup {
    html! {
        p class={ "decided status-" (a.status.as_str()) } role="status" {
            "This " (what) " is " (a.status.as_str()) ". "
            @if let Some(n) = next {
                "Next waiting: " a href={ "/inbox/approvals/" (n.id) } { (n.subject()) }
                @if n.kind == ApprovalKind::Call { " " code.args { (args_summary(&n.args)) } }
            } @else {
                "Nothing else is waiting. " a href="/inbox/" { "Back to the inbox" }
            }
        }
    }
}

/// An approval's decisions so far, if any.
pub(super) fn decisions(a: &Approval) -> Markup {
    html! {
        @if !a.decisions.is_empty() {
            h2 { "Decisions" }
            ul {
                @for d in &a.decisions {
                    li {
                        (d.by) " — " (d.decision) " at " (rfc3339(d.at)) @if let Some(r) = &d.reason { ": " (r) }
                        @if let Some(why) = &d.voided { " (no longer counts: " (why) ")" }
                    }
                }
            }
        }
    }
}

/// The approve form (an optional reason, and `extra` fields) and the decline form (a required
/// reason) of a pending approval; `words` are the approve button, the decline reason's label
/// and the decline button.
pub(super) fn decide_forms(a: &Approval, who: &Who, words: [&str; 3], extra: Markup) -> Markup {
    let [approve, decline_reason, decline] = words;
    html! {
        form method="post" action={ "/inbox/approvals/" (a.id) "/approve" } {
            input type="hidden" name="csrf" value=(who.csrf);
            label for="approve-reason" { "Reason (optional)" }
            input #approve-reason name="reason";
            (extra)
            button.approve type="submit" { (approve) }
        }
        form method="post" action={ "/inbox/approvals/" (a.id) "/decline" } {
            input type="hidden" name="csrf" value=(who.csrf);
            label for="decline-reason" { (decline_reason) }
            input #decline-reason name="reason" required;
            button.decline type="submit" { (decline) }
        }
    }
}

/// What an approver may choose to grant, where the rule allows more than its own terms: the
/// scope as radio buttons (narrowest first, the rule's own checked), and the ttl and uses with
/// their most. Nothing where there is no choice.
fn grant_fields(a: &Approval) -> Markup {
    let scopes = crate::grants::scopes_allowed(a);
    let max = a.grant.maxima();
    let ttl = airlock_policy::format_duration(std::time::Duration::from_millis(a.grant.ttl_ms));
    let max_ttl = airlock_policy::format_duration(std::time::Duration::from_millis(max.ttl_ms));
    let words = |s: &str| match s {
        "call" => "this call only",
        "run" => "this run",
        _ => "this agent",
    };
    html! {
        @if scopes.len() > 1 || max.ttl_ms > a.grant.ttl_ms || max.uses > a.grant.uses {
            fieldset.grant {
                legend { "Approve for" }
                @if scopes.len() > 1 {
                    @for s in &scopes {
                        label.choice {
                            input type="radio" name="grant_scope" value=(s.as_str()) checked[s.as_str() == a.grant.scope];
                            " " (words(s.as_str()))
                        }
                    }
                }
                @if max.ttl_ms > a.grant.ttl_ms {
                    label for="grant-ttl" { "For how long (up to " (max_ttl) ")" }
                    input #grant-ttl name="grant_ttl" placeholder=(ttl);
                }
                @if max.uses > a.grant.uses {
                    label for="grant-uses" { "Identical calls it lets run (up to " (max.uses) ")" }
                    input #grant-uses name="grant_uses" type="number" min="1" max=(max.uses) placeholder=(a.grant.uses);
                }
                p.hint { "Only calls with exactly these arguments, of this tool, are covered." }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn time_left_reads_naturally() {
        assert_eq!(time_left(0, 5), "expired");
        assert_eq!(time_left(45_000, 0), "45 s left");
        assert_eq!(time_left(15 * 60_000, 0), "15 min left");
        assert_eq!(time_left(3_600_000 + 120_000, 0), "1 h 2 min left");
    }

    #[test]
    fn values_are_escaped_text() {
        let m = message(
            "<script>alert(1)</script>",
            "\"><img src=x onerror=alert(1)>",
        );
        let s = m.into_string();
        assert!(!s.contains("<script>alert"));
        assert!(!s.contains("<img"));
        assert!(s.contains("&lt;script&gt;"));
    }
}
