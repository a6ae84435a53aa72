//! The inbox page of an MCP tool definition held for review (DESIGN §20): the definition a
//! person (or the first sight) pinned beside the one the upstream lists now, the changed lines
//! marked, and the approve and decline forms the call approvals use. At phone width the two
//! columns stack, each line still marked.
//!
//! A definition is a third party's text: descriptions, titles and schemas go through maud's
//! escaping like every other value, never as markup or a link.

use airlock_storage::Approval;
use maud::{html, Markup};
use serde_json::Value;

use super::pages::{
    decide_forms, decided_note, decisions, in_words, layout, status_title, time_left, Who,
};
use crate::clock::rfc3339;
use crate::error::ApiError;

/// The review page of `a` (an approval of kind `tool_definition`).
pub fn review(
    who: &Who,
    a: &Approval,
    error: Option<&ApiError>,
    now: u64,
    next: Option<&Approval>,
) -> Markup {
    let arg = |k: &str| a.args.get(k).and_then(Value::as_str).unwrap_or("—");
    let rows = crate::diff::rows(&a.args["old"], &a.args["new"]);
    let changed = rows.iter().filter(|r| r.changed).count();
    let pending = a.status.as_str() == "pending";
    let first = a.args["old"].is_null();
    layout(
        &format!("{} · definition review · airlock inbox", a.tool),
        Some(who),
        html! {
            @if pending {
                h1 { "Trust the changed definition of " code { (a.tool) } "?" }
            } @else {
                h1 { (status_title(a.status.as_str())) ": the definition of " code { (a.tool) } }
                (decided_note(a, "review", next))
            }
            @if let Some(e) = error {
                p.error role="alert" data-canonical={ "/inbox/approvals/" (a.id) } { (in_words(e)) }
            }
            p.status {
                span class={ "badge status-" (a.status.as_str()) } { (a.status.as_str()) }
                @if pending { " · " span data-expires=(a.expires_at) { (time_left(a.expires_at, now)) } }
                " · approvals " (a.approvals_counted()) " of " (a.quorum)
            }
            p.hint {
                @if first {
                    "MCP server " code { (arg("server")) } " lists this tool for the first time, and it is not trusted until a reviewer approves it. "
                } @else {
                    "MCP server " code { (arg("server")) } " now lists a definition of this tool that is not the one pinned. "
                }
                "Until it is approved, agents see the pinned definition (if any) and calls to the tool are refused. "
                "Approving pins the new definition; declining keeps the tool refused while the server lists it."
            }
            dl {
                dt { "Tool" } dd { code { (arg("tool")) } " of " code { (arg("server")) } }
                dt { "Pinned" } dd { code.fp { (a.args.get("old_fingerprint").and_then(Value::as_str).unwrap_or("nothing yet")) } }
                dt { "Listed now" } dd { code.fp { (a.fingerprint) } }
                dt { "Reviewers" } dd {
                    @if a.approvers.is_empty() { "any approver" } @else {
                        (a.approvers.iter().cloned().collect::<Vec<_>>().join(", "))
                    }
                }
                dt { "Seen" } dd { (rfc3339(a.created_at)) }
                dt { "Expires" } dd { (rfc3339(a.expires_at)) }
            }
            h2 { "What changed" span.hint { " (" (changed) @if changed == 1 { " line)" } @else { " lines)" } } }
            table.sbs {
                thead { tr { th { "Pinned" } th { "Listed now" } } }
                tbody {
                    @for r in &rows {
                        tr class=(if r.changed { "changed" } else { "same" }) {
                            @match &r.old {
                                Some(l) if r.changed => td.old { del { (l) } },
                                Some(l) => td.old { (l) },
                                None => td.old.empty {},
                            }
                            @match &r.new {
                                Some(l) if r.changed => td.new { ins { (l) } },
                                Some(l) => td.new { (l) },
                                None => td.new.empty {},
                            }
                        }
                    }
                }
            }
            (decisions(a))
            @if pending {
                section.actions aria-label="Decide" {
                    (decide_forms(a, who, ["Approve the new definition", "Reason (required)", "Decline: keep refusing it"], html! {}))
                }
            }
        },
    )
}
