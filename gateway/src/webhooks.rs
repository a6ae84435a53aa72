//! Webhook approvers: which webhooks get which events, and their payloads. The worker that
//! delivers them from the durable outbox, signed per Standard Webhooks, is
//! [`crate::deliveries`].
//!
//! Every delivery keeps its outbox id as `webhook-id` on every attempt. A 2xx acks it (never
//! sent again); a 2xx body `{"decision":"approve"|"decline","reason"?}` to an
//! `approval.requested` event is a decision by the webhook's principal, under the same rules as
//! any approver. `410` disables the endpoint until an admin enables it (its deliveries wait,
//! parked). Anything else is retried on the webhook's schedule with ±20% jitter, or after the
//! answer's `Retry-After` (capped at an hour), and dead-lettered when the schedule runs out.

use airlock_storage::{Kind, NewDelivery};
use serde_json::{json, Value};
use tokio::sync::Notify;

use crate::clock::{now_ms, rfc3339};
use crate::config::WebhookConfig;

pub struct Webhooks {
    /// Swapped whole by a reload (`crate::reconfigure`): new secrets sign from then on.
    hooks: arc_swap::ArcSwap<Vec<WebhookConfig>>,
    /// JSON pointers into args redacted in payloads, as in the audit log.
    redact: Vec<String>,
    pub(crate) client: reqwest::Client,
    /// Woken when deliveries are enqueued, so they go out without waiting for the next tick.
    pub wake: Notify,
}

/// The body of one event: `{"type","timestamp","data"}`.
pub fn payload(kind: &str, data: &Value) -> String {
    json!({"type": kind, "timestamp": rfc3339(now_ms()), "data": data}).to_string()
}

/// Whether webhook `h` hears of `kind`: a summary of approvals goes to the webhooks that hear
/// of approvals being requested too, in place of the ones it sums up.
fn hears(h: &WebhookConfig, kind: Kind) -> bool {
    h.events.contains(&kind)
        || (kind == Kind::ApprovalSummary && h.events.contains(&Kind::ApprovalRequested))
}

impl Webhooks {
    pub fn new(hooks: Vec<WebhookConfig>, redact: Vec<String>) -> Result<Webhooks, String> {
        let client = reqwest::Client::builder()
            .tcp_nodelay(true)
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .map_err(|e| format!("cannot build the webhook client: {e}"))?;
        Ok(Webhooks {
            hooks: arc_swap::ArcSwap::from_pointee(hooks),
            redact,
            client,
            wake: Notify::new(),
        })
    }

    /// The webhooks in force.
    pub fn hooks(&self) -> std::sync::Arc<Vec<WebhookConfig>> {
        self.hooks.load_full()
    }

    /// Puts `hooks` in force: their URLs, events and secrets sign and go out from now on.
    pub fn replace(&self, hooks: Vec<WebhookConfig>) {
        self.hooks.store(std::sync::Arc::new(hooks));
    }

    /// Whether any webhook subscribes to `kind`.
    pub fn wants(&self, kind: Kind) -> bool {
        self.hooks.load().iter().any(|h| hears(h, kind))
    }

    /// One delivery per webhook that subscribes to `kind`, with the configured pointers
    /// redacted in the args it carries.
    pub fn deliveries_for(&self, kind: Kind, data: &Value) -> Vec<NewDelivery> {
        let data = &self.redacted(data);
        self.hooks
            .load()
            .iter()
            .filter(|h| hears(h, kind))
            .map(|h| NewDelivery {
                webhook: h.id.clone(),
                event: kind.as_str().to_owned(),
                payload: payload(kind.as_str(), data),
            })
            .collect()
    }

    /// An event's data with the `[audit] redact` pointers redacted in its args (and edited
    /// args), as every message that leaves the gateway carries them.
    pub fn redacted(&self, data: &Value) -> Value {
        let mut data = data.clone();
        for field in ["args", "edited_args"] {
            if let Some(args) = data.get(field).filter(|a| a.is_object()) {
                data[field] = airlock_storage::redact(args, &self.redact);
            }
        }
        data
    }

    pub(crate) fn hook(&self, id: &str) -> Option<WebhookConfig> {
        self.hooks.load().iter().find(|h| h.id == id).cloned()
    }
}
