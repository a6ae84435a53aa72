//! The webhook outbox (DESIGN §8): deliveries staged in the same batch as their event, leased,
//! acknowledged, retried on a schedule, dead-lettered, and parked while an endpoint is disabled.

use serde_json::{json, Value};

use crate::audit::Kind;
use crate::error::StoreError;
use crate::keys::{self, Ks};
use crate::model::{Delivery, Millis};
use crate::writer::Tx;
use crate::Store;

use super::{fields, get, put};

/// The due time of parked deliveries (a disabled endpoint's): never, until enabled.
pub const PARKED: Millis = u64::MAX >> 1;

/// A delivery to put in the outbox.
#[derive(Debug, Clone, PartialEq)]
pub struct NewDelivery {
    pub webhook: String,
    pub event: String,
    pub payload: String,
}

/// The outbox at a glance, for metrics.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct OutboxStats {
    /// Pending or leased deliveries.
    pub undelivered: u64,
    /// `created_at` of the oldest undelivered one.
    pub oldest_created_at: Option<Millis>,
}

/// Puts deliveries in the outbox, due at `now`, as part of the current job.
pub(super) fn stage_deliveries(
    tx: &mut Tx<'_>,
    deliveries: Vec<NewDelivery>,
    now: Millis,
) -> Result<Vec<Delivery>, StoreError> {
    let mut out = Vec::new();
    for d in deliveries {
        let delivery = Delivery {
            id: crate::new_id("msg"),
            webhook: d.webhook,
            event: d.event,
            payload: d.payload,
            attempts: 0,
            state: "pending".into(),
            due_at: now,
            created_at: now,
            last_error: None,
        };
        put(tx, Ks::Outbox, delivery.id.as_bytes(), &delivery)?;
        tx.put(
            Ks::OutboxDue,
            keys::timed_key(now, delivery.id.as_bytes()),
            Vec::new(),
        );
        out.push(delivery);
    }
    Ok(out)
}

impl Store {
    /// Puts deliveries in the outbox, due now.
    pub fn enqueue_deliveries(
        &self,
        deliveries: Vec<NewDelivery>,
        now: Millis,
    ) -> Result<Vec<Delivery>, StoreError> {
        self.writer
            .submit(move |tx| stage_deliveries(tx, deliveries, now))
    }

    /// Leases up to `max` deliveries that are due (pending ones whose time has come, and
    /// leased ones whose worker did not answer before the lease ran out) for `lease_ms`.
    pub fn lease_deliveries(
        &self,
        now: Millis,
        lease_ms: u64,
        max: usize,
    ) -> Result<Vec<Delivery>, StoreError> {
        self.writer.submit(move |tx| {
            let end = keys::timed_key(now, &[0xff]);
            let mut out = Vec::new();
            for key in tx.committed_keys_until(Ks::OutboxDue, &end, max)? {
                if !tx.exists(Ks::OutboxDue, &key)? {
                    continue;
                }
                let Some((_, id)) = keys::split_timed(&key) else {
                    continue;
                };
                let Some(mut d) = get::<Delivery>(tx, Ks::Outbox, id)? else {
                    tx.delete(Ks::OutboxDue, key);
                    continue;
                };
                tx.delete(Ks::OutboxDue, key.clone());
                d.state = "leased".into();
                d.attempts += 1;
                d.due_at = now.saturating_add(lease_ms);
                tx.put(
                    Ks::OutboxDue,
                    keys::timed_key(d.due_at, d.id.as_bytes()),
                    Vec::new(),
                );
                put(tx, Ks::Outbox, d.id.as_bytes(), &d)?;
                out.push(d);
            }
            Ok(out)
        })
    }

    /// Marks a delivery delivered; it is never handed out again. Acking twice is harmless.
    pub fn ack_delivery(&self, id: &str, now: Millis) -> Result<Delivery, StoreError> {
        self.finish_delivery(id, now, "delivered", None, None)
    }

    /// Schedules another attempt at `due_at`.
    pub fn retry_delivery(
        &self,
        id: &str,
        due_at: Millis,
        error: &str,
    ) -> Result<Delivery, StoreError> {
        self.finish_delivery(id, due_at, "pending", Some(error.to_owned()), Some(due_at))
    }

    /// Gives up on a delivery: it stays in the outbox as `dead` for an operator to see.
    pub fn dead_letter(&self, id: &str, error: &str, now: Millis) -> Result<Delivery, StoreError> {
        self.finish_delivery(id, now, "dead", Some(error.to_owned()), None)
    }

    /// Moves a leased delivery to `state`; `due_at` puts it back in the due index.
    fn finish_delivery(
        &self,
        id: &str,
        now: Millis,
        state: &'static str,
        error: Option<String>,
        due_at: Option<Millis>,
    ) -> Result<Delivery, StoreError> {
        let id = id.to_owned();
        self.writer.submit(move |tx| {
            let mut d: Delivery = get(tx, Ks::Outbox, id.as_bytes())?
                .ok_or_else(|| StoreError::DeliveryNotFound(id.clone()))?;
            if d.state == "delivered" || d.state == "dead" {
                return Ok(d);
            }
            tx.delete(Ks::OutboxDue, keys::timed_key(d.due_at, d.id.as_bytes()));
            d.state = state.into();
            if error.is_some() {
                d.last_error = error;
            }
            if let Some(at) = due_at {
                d.due_at = at;
                tx.put(
                    Ks::OutboxDue,
                    keys::timed_key(at, d.id.as_bytes()),
                    Vec::new(),
                );
            }
            let kind = match state {
                "delivered" => Some(Kind::WebhookDelivered),
                "dead" => Some(Kind::WebhookDead),
                _ => None,
            };
            if let Some(kind) = kind {
                tx.audit(
                    now,
                    kind,
                    fields(json!({
                        "delivery_id": d.id, "webhook": d.webhook, "event": d.event,
                        "attempts": d.attempts, "error": d.last_error,
                    })),
                );
            }
            put(tx, Ks::Outbox, d.id.as_bytes(), &d)?;
            Ok(d)
        })
    }

    /// Disables a webhook endpoint (it answered 410): its deliveries wait until an admin
    /// enables it again.
    pub fn disable_webhook(
        &self,
        webhook: &str,
        reason: &str,
        now: Millis,
    ) -> Result<(), StoreError> {
        let (webhook, reason) = (webhook.to_owned(), reason.to_owned());
        self.writer.submit(move |tx| {
            let record = json!({"webhook": webhook, "reason": reason, "at": now});
            put(
                tx,
                Ks::Settings,
                format!("webhook.disabled.{webhook}").as_bytes(),
                &record,
            )?;
            tx.audit(now, Kind::WebhookDisabled, fields(record));
            Ok(())
        })
    }

    /// Enables a disabled webhook endpoint and makes its parked deliveries due now; returns
    /// how many were parked.
    pub fn enable_webhook(&self, webhook: &str, now: Millis) -> Result<usize, StoreError> {
        let webhook = webhook.to_owned();
        self.writer.submit(move |tx| {
            tx.delete(
                Ks::Settings,
                format!("webhook.disabled.{webhook}").into_bytes(),
            );
            let mut moved = 0;
            for key in
                tx.committed_keys_from(Ks::OutboxDue, &keys::timed_key(PARKED, &[]), usize::MAX)?
            {
                let Some((_, id)) = keys::split_timed(&key) else {
                    continue;
                };
                let Some(mut d) = get::<Delivery>(tx, Ks::Outbox, id)? else {
                    continue;
                };
                if d.webhook != webhook || d.due_at != PARKED {
                    continue;
                }
                tx.delete(Ks::OutboxDue, key);
                d.state = "pending".into();
                d.due_at = now;
                tx.put(
                    Ks::OutboxDue,
                    keys::timed_key(now, d.id.as_bytes()),
                    Vec::new(),
                );
                put(tx, Ks::Outbox, d.id.as_bytes(), &d)?;
                moved += 1;
            }
            tx.audit(
                now,
                Kind::WebhookEnabled,
                fields(json!({"webhook": webhook, "requeued": moved})),
            );
            Ok(moved)
        })
    }

    /// Whether a webhook endpoint is disabled, and why.
    pub fn webhook_disabled(&self, webhook: &str) -> Result<Option<Value>, StoreError> {
        self.read(
            Ks::Settings,
            format!("webhook.disabled.{webhook}").as_bytes(),
        )
    }

    /// Parks a delivery of a disabled endpoint until it is enabled again.
    pub fn park_delivery(&self, id: &str, reason: &str) -> Result<Delivery, StoreError> {
        self.finish_delivery(id, PARKED, "pending", Some(reason.to_owned()), Some(PARKED))
    }

    /// Undelivered deliveries and the oldest one's age, scanning at most `limit` of them.
    pub fn outbox_stats(&self, limit: usize) -> Result<OutboxStats, StoreError> {
        self.shared.check()?;
        let mut stats = OutboxStats::default();
        for entry in self
            .shared
            .backend
            .iter(Ks::OutboxDue, Vec::new(), None, false)
            .take(limit)
        {
            let (key, _) = entry?;
            let Some((_, id)) = keys::split_timed(&key) else {
                continue;
            };
            if let Some(d) = self.read::<Delivery>(Ks::Outbox, id)? {
                stats.undelivered += 1;
                stats.oldest_created_at = Some(
                    stats
                        .oldest_created_at
                        .map_or(d.created_at, |o| o.min(d.created_at)),
                );
            }
        }
        Ok(stats)
    }
}
