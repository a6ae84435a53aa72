//! The delivery worker: leases due deliveries from the outbox, sends approval mail through
//! [`crate::email`] and Slack messages through [`crate::slack`], and sends each webhook
//! delivery signed per Standard
//! Webhooks, records the answer (ack, retry with jitter or `Retry-After`, dead letter,
//! `410` disabling), and turns a synchronous decision in a 2xx answer into an approver's
//! decision through [`crate::pipeline::decide`]. Like a front end, it feeds the pipeline
//! (a webhook approver's decision) and nothing imports it but `serve/`, which starts it;
//! which webhooks get which events is [`crate::webhooks`].

use std::sync::Arc;
use std::time::Duration;

use airlock_storage::{Delivery, Kind};
use serde_json::{json, Value};
use tokio::sync::Semaphore;

use crate::clock::now_ms;
use crate::config::WebhookConfig;
use crate::signing;
use crate::slack::api::Failure;
use crate::state::{audit_fields, Gateway};

/// Most a `Retry-After` may delay a delivery.
const MAX_RETRY_AFTER: Duration = Duration::from_secs(3600);

/// Deliveries in flight at once.
const CONCURRENCY: usize = 16;

/// The delivery loop: leases due deliveries and sends each, until shutdown.
pub async fn run(gw: Arc<Gateway>) {
    let permits = Arc::new(Semaphore::new(CONCURRENCY));
    let mut ticks: u64 = 0;
    let lease_ms = gw
        .webhooks
        .hooks()
        .iter()
        .map(|h| h.timeout)
        .max()
        .unwrap_or_default()
        .as_millis() as u64
        + 30_000;
    loop {
        tokio::select! {
            _ = gw.webhooks.wake.notified() => {}
            _ = tokio::time::sleep(Duration::from_millis(250)) => {}
            _ = gw.shutdown.cancelled() => break,
        }
        let now = now_ms();
        // The oldest-undelivered gauge scans the outbox: every 5 s is often enough.
        ticks += 1;
        if ticks % 20 == 1 {
            if let Ok(stats) = gw.store_op(|s| s.outbox_stats(10_000)).await {
                let age = stats.oldest_created_at.map_or(0, |c| now.saturating_sub(c));
                gw.metrics
                    .delivery
                    .webhook_oldest_undelivered_seconds
                    .set(age as f64 / 1000.0);
            }
        }
        let available = permits.available_permits();
        if available == 0 {
            continue;
        }
        let leased = match gw
            .store_op(move |s| s.lease_deliveries(now, lease_ms, available))
            .await
        {
            Ok(l) => l,
            Err(e) => {
                tracing::error!(
                    code = e.code.as_str(),
                    "cannot lease webhook deliveries: {}",
                    e.message
                );
                continue;
            }
        };
        for delivery in leased {
            let Ok(permit) = permits.clone().acquire_owned().await else {
                break;
            };
            let gw = gw.clone();
            tokio::spawn(async move {
                deliver(&gw, delivery).await;
                drop(permit);
            });
        }
    }
}

/// How one attempt went.
enum Attempt {
    Delivered(Option<Value>),
    Gone,
    Failed {
        error: String,
        retry_after: Option<Duration>,
    },
}

async fn attempt(gw: &Gateway, hook: &WebhookConfig, d: &Delivery) -> Attempt {
    let ts = (now_ms() / 1000) as i64;
    let signature = match signing::sign(&hook.key, &d.id, ts, d.payload.as_bytes()) {
        Ok(s) => s,
        Err(e) => {
            return Attempt::Failed {
                error: e,
                retry_after: None,
            }
        }
    };
    let sent = gw
        .webhooks
        .client
        .post(&hook.url)
        .timeout(hook.timeout)
        .header("content-type", "application/json")
        .header("webhook-id", &d.id)
        .header("webhook-timestamp", ts.to_string())
        .header("webhook-signature", signature)
        .body(d.payload.clone())
        .send()
        .await;
    let resp = match sent {
        Ok(r) => r,
        Err(e) => {
            let error = if e.is_timeout() {
                format!("timed out after {:?}", hook.timeout)
            } else {
                format!("unreachable: {e}")
            };
            return Attempt::Failed {
                error,
                retry_after: None,
            };
        }
    };
    let status = resp.status().as_u16();
    let retry_after = resp
        .headers()
        .get("retry-after")
        .and_then(|v| v.to_str().ok())
        .and_then(parse_retry_after);
    if status == 410 {
        return Attempt::Gone;
    }
    if !(200..300).contains(&status) {
        return Attempt::Failed {
            error: format!("HTTP {status}"),
            retry_after,
        };
    }
    let body = resp
        .bytes()
        .await
        .ok()
        .and_then(|b| serde_json::from_slice::<Value>(&b).ok());
    Attempt::Delivered(body)
}

/// `Retry-After` as seconds or an HTTP date, capped at an hour.
fn parse_retry_after(v: &str) -> Option<Duration> {
    let d = match v.trim().parse::<u64>() {
        Ok(secs) => Duration::from_secs(secs),
        Err(_) => {
            let at = chrono::DateTime::parse_from_rfc2822(v.trim()).ok()?;
            let ms = (at.timestamp_millis() as u64).saturating_sub(now_ms());
            Duration::from_millis(ms)
        }
    };
    Some(d.min(MAX_RETRY_AFTER))
}

/// `base` ± 20%.
fn jitter(base: Duration) -> Duration {
    let r = (uuid::Uuid::new_v4().as_u128() % 4001) as f64 / 10_000.0; // 0..0.4
    base.mul_f64(0.8 + r)
}

async fn deliver(gw: &Arc<Gateway>, d: Delivery) {
    if d.webhook.starts_with(crate::email::TARGET) {
        return deliver_mail(gw, d).await;
    }
    if d.webhook.starts_with(crate::outbox::SLACK) {
        return deliver_slack(gw, d).await;
    }
    let id = d.id.clone();
    let Some(hook) = gw.webhooks.hook(&d.webhook) else {
        let _ = gw
            .store_op(move |s| s.dead_letter(&id, "the webhook is no longer configured", now_ms()))
            .await;
        counted(gw, "dead");
        return;
    };
    let hook_id = hook.id.clone();
    if gw
        .store_op(move |s| s.webhook_disabled(&hook_id))
        .await
        .ok()
        .flatten()
        .is_some()
    {
        let _ = gw
            .store_op(move |s| s.park_delivery(&id, "the endpoint is disabled"))
            .await;
        counted(gw, "parked");
        return;
    }
    match attempt(gw, &hook, &d).await {
        Attempt::Delivered(body) => {
            let _ = gw.store_op(move |s| s.ack_delivery(&id, now_ms())).await;
            counted(gw, "delivered");
            gw.metrics
                .delivery
                .webhook_attempts
                .observe(f64::from(d.attempts));
            if d.event == Kind::ApprovalRequested.as_str() {
                if let Some(body) = body {
                    sync_decision(gw, &hook, &d, &body).await;
                }
            }
        }
        Attempt::Gone => gone(gw, &hook, id).await,
        Attempt::Failed { error, retry_after } => {
            let failed = Err(Failure::Retry { error, retry_after });
            if settle(gw, &d, "webhook delivery", &hook.retry_schedule, failed).await == "dead" {
                gw.metrics
                    .delivery
                    .webhook_attempts
                    .observe(f64::from(d.attempts));
            }
        }
    }
}

/// A webhook that answered `410 Gone`: disabled until an admin enables it, its delivery parked.
async fn gone(gw: &Arc<Gateway>, hook: &WebhookConfig, id: String) {
    let (hook_id, now) = (hook.id.clone(), now_ms());
    tracing::warn!(webhook = %hook.id, "the endpoint answered 410: disabled until an admin enables it");
    let _ = gw
        .store_op(move |s| s.disable_webhook(&hook_id, "the endpoint answered 410 Gone", now))
        .await;
    let _ = gw
        .store_op(move |s| s.park_delivery(&id, "the endpoint answered 410 Gone"))
        .await;
    counted(gw, "disabled");
}

/// One approval mail of the outbox: sent, retried on [`crate::email::RETRIES`], or
/// dead-lettered (a mail without `[email]` configured any more is dead at once).
async fn deliver_mail(gw: &Arc<Gateway>, d: Delivery) {
    let result = match &gw.config.email {
        Some(email) => crate::email::send(email, &d.id, &d.payload)
            .await
            .map_err(|error| Failure::Retry {
                error,
                retry_after: None,
            }),
        None => Err(Failure::Permanent(
            "`[email]` is no longer configured".to_owned(),
        )),
    };
    settle(gw, &d, "approval mail", &crate::email::RETRIES, result).await;
}

/// One Slack message of the outbox: posted or updated, retried (after Slack's `Retry-After`
/// when it gave one), or dead-lettered.
async fn deliver_slack(gw: &Arc<Gateway>, d: Delivery) {
    let result = match &gw.config.slack {
        Some(slack) => crate::slack::messages::deliver(gw, slack, &d).await,
        None => Err(Failure::Permanent(
            "`[slack]` is no longer configured".to_owned(),
        )),
    };
    settle(gw, &d, "Slack message", &crate::slack::RETRIES, result).await;
}

/// Records how a delivery's attempt went: acked, retried on `schedule` (or when the answer
/// said), or dead-lettered when the schedule has run out or a retry would fail the same way.
/// Returns which (`delivered`, `retried`, `dead`).
async fn settle(
    gw: &Arc<Gateway>,
    d: &Delivery,
    what: &str,
    schedule: &[Duration],
    result: Result<(), Failure>,
) -> &'static str {
    let id = d.id.clone();
    let attempts = d.attempts as usize;
    let outcome = match result {
        Ok(()) => {
            let _ = gw.store_op(move |s| s.ack_delivery(&id, now_ms())).await;
            "delivered"
        }
        Err(Failure::Retry { error, retry_after }) if attempts <= schedule.len() => {
            tracing::warn!(delivery = %d.id, target = %d.webhook, "{what} not sent, trying again: {error}");
            let delay = retry_after
                .map(|r| r.min(MAX_RETRY_AFTER))
                .unwrap_or_else(|| jitter(schedule[attempts.max(1) - 1]));
            let due = now_ms() + delay.as_millis() as u64;
            let _ = gw
                .store_op(move |s| s.retry_delivery(&id, due, &error))
                .await;
            "retried"
        }
        Err(f) => {
            let error = f.message().to_owned();
            tracing::warn!(delivery = %d.id, target = %d.webhook, "{what} given up after {attempts} attempts: {error}");
            let _ = gw
                .store_op(move |s| s.dead_letter(&id, &error, now_ms()))
                .await;
            "dead"
        }
    };
    counted(gw, outcome);
    outcome
}

/// A webhook's answer `{"decision":"approve"|"decline","reason"?}`: a decision by its
/// principal. A refusal (the principal is the requester, outside the groups, ...) is audited.
async fn sync_decision(gw: &Arc<Gateway>, hook: &WebhookConfig, d: &Delivery, body: &Value) {
    let approve = match body.get("decision").and_then(Value::as_str) {
        Some("approve") => true,
        Some("decline") => false,
        _ => return,
    };
    // The principal as the config now has it (a reload may have removed or changed it).
    let Some((principal, _)) = hook.principal.as_ref().and_then(|p| gw.auth.principal(p)) else {
        tracing::warn!(webhook = %hook.id, "a synchronous decision from a webhook with no principal is ignored");
        return;
    };
    let Some(approval_id) = serde_json::from_str::<Value>(&d.payload)
        .ok()
        .and_then(|p| {
            p.pointer("/data/id")
                .and_then(Value::as_str)
                .map(str::to_owned)
        })
    else {
        return;
    };
    let reason = body
        .get("reason")
        .and_then(Value::as_str)
        .map(str::to_owned)
        .or_else(|| (!approve).then(|| format!("declined by webhook {}", hook.id)));
    if let Err(e) =
        crate::pipeline::decide(gw, &approval_id, &principal, approve, reason, None).await
    {
        tracing::warn!(webhook = %hook.id, code = e.code.as_str(), "the webhook's decision was refused: {}", e.message);
        let record = audit_fields(
            json!({"webhook": hook.id, "approval_id": approval_id, "principal": principal.id, "auth": principal.auth_record(), "code": e.code}),
        );
        let _ = gw
            .store_op(move |s| s.append_audit(Kind::WebhookDecisionRefused, record, now_ms()))
            .await;
    }
}

/// Counts a webhook delivery's `result` in `airlock_webhook_deliveries_total`.
fn counted(gw: &Gateway, result: &str) {
    gw.metrics
        .delivery
        .webhook_deliveries
        .with_label_values(&[result])
        .inc();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_after_and_jitter() {
        assert_eq!(parse_retry_after("7"), Some(Duration::from_secs(7)));
        assert_eq!(parse_retry_after("999999"), Some(MAX_RETRY_AFTER));
        assert_eq!(
            parse_retry_after("Thu, 01 Jan 1970 00:00:00 GMT"),
            Some(Duration::ZERO)
        );
        assert_eq!(parse_retry_after("soon"), None);
        for _ in 0..100 {
            let j = jitter(Duration::from_secs(10));
            assert!(
                j >= Duration::from_secs(8) && j <= Duration::from_secs(12),
                "{j:?}"
            );
        }
    }
}
