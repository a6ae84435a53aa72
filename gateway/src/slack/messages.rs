//! An approval's Slack messages: posted and updated from the outbox ([`deliver`]), always
//! drawn from the approval as the store has it when the delivery goes out.

use std::sync::Arc;

use airlock_storage::{Approval, Delivery, Kind};
use serde_json::{json, Value};

use super::api::{self, Failure};
use super::{blocks, note_key};
use crate::clock::now_ms;
use crate::config::SlackConfig;
use crate::state::Gateway;

/// How long after an approval's expiry its message's place is remembered.
const KEEP_NOTE_MS: u64 = 7 * 24 * 3600 * 1000;

/// One delivery of the outbox: the approval's message posted (for `approval.requested`) or
/// updated in place.
pub async fn deliver(gw: &Arc<Gateway>, slack: &SlackConfig, d: &Delivery) -> Result<(), Failure> {
    let p: Value = serde_json::from_str(&d.payload)
        .map_err(|e| Failure::Permanent(format!("a delivery that does not read: {e}")))?;
    if let (Some(summary), Some(channel)) = (p.get("summary"), p["channel"].as_str()) {
        let mut body = blocks::summary(summary, &crate::approvals::inbox_home(&gw.config));
        body["channel"] = json!(channel);
        body["unfurl_links"] = json!(false);
        return api::call(&gw.webhooks.client, slack, "chat.postMessage", &body)
            .await
            .map(|_| ());
    }
    let (Some(id), Some(channel)) = (p["approval_id"].as_str(), p["channel"].as_str()) else {
        return Err(Failure::Permanent(
            "a delivery without approval_id and channel".into(),
        ));
    };
    let a = approval(gw, id).await?;
    show(
        gw,
        slack,
        &a,
        channel,
        d.event == Kind::ApprovalRequested.as_str(),
    )
    .await
}

pub async fn approval(gw: &Arc<Gateway>, id: &str) -> Result<Approval, Failure> {
    let key = id.to_owned();
    gw.store_op(move |s| s.approval(&key))
        .await
        .map_err(|e| Failure::Retry {
            error: format!("the store: {}", e.message),
            retry_after: None,
        })?
        .ok_or_else(|| Failure::Permanent(format!("no approval `{id}`")))
}

/// Posts approval `a`'s message to `channel` (only when `may_post`, and only once: a message
/// already posted is updated), or updates it where it is.
pub async fn show(
    gw: &Arc<Gateway>,
    slack: &SlackConfig,
    a: &Approval,
    channel: &str,
    may_post: bool,
) -> Result<(), Failure> {
    let key = note_key(&a.id, channel);
    let k = key.clone();
    let now = now_ms();
    let note = gw
        .store_op(move |s| s.note(&k, now))
        .await
        .map_err(|e| Failure::Retry {
            error: format!("the store: {}", e.message),
            retry_after: None,
        })?;
    let args = airlock_storage::redact(a.effective_args(), &gw.config.redact);
    let inbox = crate::approvals::inbox_link(&gw.config, &a.id);
    let mut body = blocks::message(a, &args, &inbox, now);
    let client = &gw.webhooks.client;
    match note {
        Some(n) => {
            body["channel"] = n["channel"].clone();
            body["ts"] = n["ts"].clone();
            api::call(client, slack, "chat.update", &body)
                .await
                .map(|_| ())
        }
        None if may_post => {
            body["channel"] = json!(channel);
            body["unfurl_links"] = json!(false);
            body["unfurl_media"] = json!(false);
            let posted = api::call(client, slack, "chat.postMessage", &body).await?;
            let place = json!({"channel": posted["channel"], "ts": posted["ts"]});
            let until = a.expires_at.saturating_add(KEEP_NOTE_MS);
            gw.store_op(move |s| s.put_note(&key, place, until))
                .await
                .map_err(|e| {
                    // Posted, but where is not kept: the updates cannot find it. Not retried,
                    // which would post it twice.
                    Failure::Permanent(format!("posted, but cannot keep where: {}", e.message))
                })
        }
        // Notified in a summary (`crate::notices`): it has no message of its own to update.
        None if a.explanation["notified"] == "summary" => Ok(()),
        None => Err(Failure::Retry {
            error: "the approval's message is not posted yet".into(),
            retry_after: None,
        }),
    }
}
