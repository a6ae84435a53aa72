//! The inbox page of live grants: each one's tool, the exact args it covers, its scope, uses
//! left and expiry, with a revoke button for those the signed-in person may revoke (the API's
//! rule: an approver of the grant's rule's groups, or an admin; the store refuses anyone else
//! either way).

use maud::{html, Markup};
use serde_json::Value;

use super::pages::{layout, Who};

/// The page of `grants` (as `GET /v1/grants` lists them); `note` says what just happened.
pub fn grants(who: &Who, grants: &[Value], note: Option<&str>) -> Markup {
    let s = |g: &Value, k: &str| g.get(k).and_then(Value::as_str).unwrap_or("").to_owned();
    layout(
        "Grants · airlock inbox",
        Some(who),
        html! {
            h1 { "Live grants" }
            @if let Some(n) = note { p.ok role="status" { (n) } }
            p.hint {
                "An approval may let identical calls run again without asking: the same tool with "
                "exactly the same arguments, within its scope, uses and time. Revoking one stops it at once."
            }
            @if grants.is_empty() { p.empty { "No grant is live." } } @else {
                table.grants {
                    thead { tr { th { "Tool" } th { "Arguments" } th { "Scope" } th { "Uses left" } th.wide { "Expires" } th { "" } } }
                    tbody {
                        @for g in grants {
                            tr {
                                td { code { (s(g, "tool")) } }
                                td { code.args { (g.get("args").map(Value::to_string).unwrap_or_default()) } }
                                td { (s(g, "scope")) " " span.hint { (s(g, "scope_key")) } }
                                td { (g.get("uses_left").and_then(Value::as_u64).unwrap_or(0)) }
                                td.wide { (s(g, "expires_at")) }
                                td {
                                    form.inline method="post" action={ "/inbox/grants/" (s(g, "id")) "/revoke" } {
                                        input type="hidden" name="csrf" value=(who.csrf);
                                        button.decline type="submit" { "Revoke" }
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
