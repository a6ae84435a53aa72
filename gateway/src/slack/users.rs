//! Who a Slack user is to airlock: the approver principal `[slack] users` maps it to, with
//! the role and groups it decides with, and how it proved who it is (`via: "slack"` and the
//! Slack user id, on the audit record of its decision).

use std::sync::Arc;

use airlock_storage::Principal;
use serde_json::json;

use crate::clock::now_ms;
use crate::config::SlackConfig;
use crate::state::Gateway;

/// The approver principal Slack user `user` is mapped to (`[slack] users`), as it decides
/// from Slack; `Err` says, for the user, why none. A principal of an issuer has the role and
/// groups of its latest inbox sign-in, while that sign-in's session would last: Slack does
/// not say which groups a person is in.
pub async fn principal(
    gw: &Arc<Gateway>,
    slack: &SlackConfig,
    user: &str,
    team: Option<&str>,
) -> Result<Principal, String> {
    let Some(id) = slack.users.get(user) else {
        return Err(format!(
            "Your Slack user ({user}) is not mapped to an airlock approver, so you cannot decide here. An admin can add it to `[slack] users`."
        ));
    };
    let mut p = if id.contains(':') {
        let key = format!("identity.{id}");
        let now = now_ms();
        let seen = gw.store_op(move |s| s.note(&key, now)).await.ok().flatten();
        match seen.and_then(|v| serde_json::from_value::<Principal>(v).ok()) {
            Some(p) => p,
            None => {
                return Err(format!(
                    "airlock does not know which groups {id} is in: sign in to the inbox once (within the last 12 hours), then click again."
                ))
            }
        }
    } else {
        let Some(c) = gw.config.principals.iter().find(|p| &p.id == id) else {
            return Err(format!("`{id}` is no longer a configured principal."));
        };
        Principal {
            id: c.id.clone(),
            role: c.role.clone(),
            groups: c.groups.clone(),
            ..Default::default()
        }
    };
    p.auth = Some(json!({"kind": "slack", "via": "slack", "user": user, "team": team}));
    Ok(p)
}

/// Remembers an issuer's principal as it signed in to the inbox, for `until`: what a click in
/// Slack by the user mapped to it decides as.
pub async fn remember_identity(gw: &Arc<Gateway>, p: &Principal, until: u64) {
    if p.issuer.is_none() || gw.config.slack.is_none() {
        return;
    }
    let key = format!("identity.{}", p.id);
    let mut p = p.clone();
    p.auth = None;
    let value = json!(p);
    if let Err(e) = gw.store_op(move |s| s.put_note(&key, value, until)).await {
        tracing::warn!(
            code = e.code.as_str(),
            "cannot keep the identity Slack decides as: {}",
            e.message
        );
    }
}
