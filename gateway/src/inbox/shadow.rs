//! The inbox page of the shadow policy (admins only): what the shadow set
//! (`[server] shadow_policy`) would have decided differently from the live one since it
//! loaded, the same summary `GET /v1/policy/shadow` answers. Each pair of decisions with its
//! count; the pairs that differ first, widening ones (towards allow) marked and before the
//! rest; each with its latest calls and the rules that matched on either side.
//!
//! It changes nothing: the shadow set's decisions are never acted on.

use maud::{html, Markup};

use crate::api::ShadowSummary;

use super::pages::{layout, Who};

fn strs(rules: &[String]) -> String {
    Some(rules.join(", "))
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "defaults".to_owned())
}

/// A decision's name that may break after its underscore (`require_` / `approval`) on a
/// narrow screen, and nowhere else.
fn decision(name: &str) -> Markup {
    match name.split_once('_') {
        Some((first, rest)) => html! { (first) "_" wbr; (rest) },
        None => html! { (name) },
    }
}

/// The page of `summary` (as [`crate::shadow::Shadow::summary`] gives it).
pub fn shadow(who: &Who, summary: &ShadowSummary) -> Markup {
    let s = |v: &Option<String>| v.clone().unwrap_or_default();
    let transitions = summary.transitions.as_deref().unwrap_or_default();
    let changed: u64 = transitions
        .iter()
        .filter(|t| t.changed)
        .map(|t| t.count)
        .sum();
    layout(
        "Shadow policy · airlock inbox",
        Some(who),
        html! {
            h1 { "Shadow policy" }
            @if !summary.configured {
                p.empty {
                    "No shadow policy is configured. Name one with " code { "shadow_policy" }
                    " in the " code { "[server]" } " table to see what it would decide, call by call, before it decides anything."
                }
            } @else {
                p.hint {
                    "Every call is evaluated by the shadow set " code.fp { (s(&summary.shadow_version)) }
                    " too, with the same inputs; its decision changes nothing. The live set is "
                    code.fp { (summary.live_version) } ". Since " (summary.since.as_ref().map(|t| t.0.as_str()).unwrap_or("")) ": "
                    strong { (summary.calls.unwrap_or(0)) } " calls, "
                    strong { (changed) } " decided differently."
                }
                table.shadow {
                    thead { tr { th { "Live" } th { "Shadow" } th { "Calls" } th.wide { "" } } }
                    tbody {
                        @for t in transitions {
                            tr class={ @if t.widening { "widening" } @else if t.changed { "narrowing" } @else { "same" } } {
                                td { (decision(t.live)) }
                                td { (decision(t.shadow)) @if let Some(s) = t.settings { " (" (s) " settings)" } }
                                td { (t.count) }
                                td.wide {
                                    @if t.widening { span.badge.status-declined { "widening" } }
                                    @else if t.changed { span.badge { "narrowing" } }
                                }
                            }
                        }
                    }
                }
                @for t in transitions.iter().filter(|t| t.changed) {
                    h2 {
                        (t.live) " → " (t.shadow)
                        @if let Some(s) = t.settings { ", " (s) " settings" }
                        @if t.widening { " (widening)" }
                    }
                    table.shadow-calls {
                        thead { tr { th { "Call" } th { "Tool" } th.wide { "Principal" } th.wide { "At" } th { "Live rules" } th { "Shadow rules" } } }
                        tbody {
                            @for c in &t.calls {
                                @let id = &c.call_id;
                                tr {
                                    td { a href={ "/inbox/calls/" (id) } { code { (id) } } }
                                    td { code { (c.tool) } }
                                    td.wide { (c.principal) }
                                    td.wide { (c.at.0) }
                                    td { (strs(&c.live_rules)) }
                                    td {
                                        (strs(&c.shadow_rules))
                                        @if !c.settings.is_empty() { br; "settings: " (c.settings.join(", ")) }
                                    }
                                }
                            }
                        }
                    }
                }
            }
        },
    )
}
