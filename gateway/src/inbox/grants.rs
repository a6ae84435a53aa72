//! The inbox page of live grants: each one's tool, the exact args it covers, its scope, uses
//! left and expiry, with a revoke button for those the signed-in person may revoke (the API's
//! rule: an approver of the grant's rule's groups, or an admin; the store refuses anyone else
//! either way).

use maud::{html, Markup};

use crate::api::Grant;

use super::pages::{layout, Who};

/// The page of `grants` (as `GET /v1/grants` lists them); `note` says what just happened.
pub fn grants(who: &Who, grants: &[Grant], note: Option<&str>) -> Markup {
    let text = |s: &Option<String>| s.clone().unwrap_or_default();
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
                                td { code { (text(&g.tool)) } }
                                td { code.args { (g.args.as_ref().map(ToString::to_string).unwrap_or_default()) } }
                                td { (text(&g.scope)) " " span.hint { (g.scope_key) } }
                                td { (g.uses_left) }
                                td.wide { (g.expires_at.0) }
                                td {
                                    form.inline method="post" action={ "/inbox/grants/" (g.id) "/revoke" } {
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
