//! The inbox page of the shadow policy (admins only): what the shadow set
//! (`[server] shadow_policy`) would have decided differently from the live one since it
//! loaded, the same summary `GET /v1/policy/shadow` answers. Each pair of decisions with its
//! count; the pairs that differ first, widening ones (towards allow) marked and before the
//! rest; each with its latest calls and the rules that matched on either side.
//!
//! It changes nothing: the shadow set's decisions are never acted on.

use maud::{html, Markup};
use serde_json::Value;

use super::pages::{layout, Who};

fn strs(v: &Value) -> String {
    v.as_array()
        .map(|a| {
            a.iter()
                .filter_map(Value::as_str)
                .collect::<Vec<_>>()
                .join(", ")
        })
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "defaults".to_owned())
}

/// The page of `summary` (as [`crate::shadow::Shadow::summary`] gives it).
pub fn shadow(who: &Who, summary: &Value) -> Markup {
    let s = |k: &str| summary.get(k).and_then(Value::as_str).unwrap_or("");
    let transitions = summary["transitions"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let changed: u64 = transitions
        .iter()
        .filter(|t| t["changed"] == true)
        .filter_map(|t| t["count"].as_u64())
        .sum();
    layout(
        "Shadow policy · airlock inbox",
        Some(who),
        html! {
            h1 { "Shadow policy" }
            @if summary["configured"] != true {
                p.empty {
                    "No shadow policy is configured. Name one with " code { "shadow_policy" }
                    " in the " code { "[server]" } " table to see what it would decide, call by call, before it decides anything."
                }
            } @else {
                p.hint {
                    "Every call is evaluated by the shadow set " code.fp { (s("shadow_version")) }
                    " too, with the same inputs; its decision changes nothing. The live set is "
                    code.fp { (s("live_version")) } ". Since " (s("since")) ": "
                    strong { (summary["calls"].as_u64().unwrap_or(0)) } " calls, "
                    strong { (changed) } " decided differently."
                }
                table.shadow {
                    thead { tr { th { "Live" } th { "Shadow" } th { "Calls" } th.wide { "" } } }
                    tbody {
                        @for t in &transitions {
                            tr class={ @if t["widening"] == true { "widening" } @else if t["changed"] == true { "narrowing" } @else { "same" } } {
                                td { (t["live"].as_str().unwrap_or("")) }
                                td { (t["shadow"].as_str().unwrap_or("")) }
                                td { (t["count"].as_u64().unwrap_or(0)) }
                                td.wide {
                                    @if t["widening"] == true { span.badge.status-declined { "widening" } }
                                    @else if t["changed"] == true { span.badge { "narrowing" } }
                                }
                            }
                        }
                    }
                }
                @for t in transitions.iter().filter(|t| t["changed"] == true) {
                    h2 {
                        (t["live"].as_str().unwrap_or("")) " → " (t["shadow"].as_str().unwrap_or(""))
                        @if t["widening"] == true { " (widening)" }
                    }
                    table.shadow-calls {
                        thead { tr { th { "Call" } th { "Tool" } th.wide { "Principal" } th.wide { "At" } th { "Live rules" } th { "Shadow rules" } } }
                        tbody {
                            @for c in t["calls"].as_array().into_iter().flatten() {
                                @let id = c["call_id"].as_str().unwrap_or("");
                                tr {
                                    td { a href={ "/inbox/calls/" (id) } { code { (id) } } }
                                    td { code { (c["tool"].as_str().unwrap_or("")) } }
                                    td.wide { (c["principal"].as_str().unwrap_or("")) }
                                    td.wide { (c["at"].as_str().unwrap_or("")) }
                                    td { (strs(&c["live_rules"])) }
                                    td { (strs(&c["shadow_rules"])) }
                                }
                            }
                        }
                    }
                }
            }
        },
    )
}
