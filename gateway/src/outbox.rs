//! What an event puts in the outbox: a delivery to every webhook subscribed to its kind, the
//! approval mail (`[email]`), and the approval's Slack messages (`[slack]`), each with its
//! target and payload. It only chooses; the outbox is the store's, and the worker
//! ([`crate::deliveries`]) sends, retries and dead-letters.

use airlock_storage::{Kind, NewDelivery};
use serde_json::{json, Value};

use crate::config::{Config, SlackConfig};
use crate::webhooks::Webhooks;

/// The outbox target of an approval's Slack message in channel `C…`: `slack:C…`.
pub const SLACK: &str = "slack:";

/// The deliveries event `kind` with `data` makes.
pub fn deliveries(
    config: &Config,
    webhooks: &Webhooks,
    kind: Kind,
    data: &Value,
) -> Vec<NewDelivery> {
    let mut deliveries = webhooks.deliveries_for(kind, data);
    if let Some(email) = &config.email {
        let redacted = webhooks.redacted(data);
        deliveries.extend(crate::email::deliveries_for(email, kind, &redacted));
    }
    if let Some(s) = &config.slack {
        deliveries.extend(slack(s, kind, data));
    }
    deliveries
}

/// The deliveries an event makes: for `approval.requested` a post to each channel of the
/// approval's groups, for `approval.decided` and `approval.expired` an update of each, and
/// for `approval.summary` one post of the summary to each channel of its groups.
pub fn slack(slack: &SlackConfig, kind: Kind, data: &Value) -> Vec<NewDelivery> {
    if kind == Kind::ApprovalSummary {
        let groups: Vec<&str> = data["approvers"]
            .as_array()
            .map(|a| a.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        return slack
            .channels_for(&groups)
            .into_iter()
            .map(|channel| NewDelivery {
                webhook: format!("{SLACK}{channel}"),
                event: kind.as_str().to_owned(),
                payload: json!({"summary": data, "channel": channel}).to_string(),
            })
            .collect();
    }
    if !matches!(
        kind,
        Kind::ApprovalRequested | Kind::ApprovalDecided | Kind::ApprovalExpired
    ) {
        return Vec::new();
    }
    let Some(id) = data["id"].as_str() else {
        return Vec::new();
    };
    let groups: Vec<&str> = data["approvers"]
        .as_array()
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    slack
        .channels_for(&groups)
        .into_iter()
        .map(|channel| NewDelivery {
            webhook: format!("{SLACK}{channel}"),
            event: kind.as_str().to_owned(),
            payload: json!({"approval_id": id, "channel": channel}).to_string(),
        })
        .collect()
}
