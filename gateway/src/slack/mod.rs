//! Approvers in Slack (DESIGN §22): an approval is posted to the channel of each of its
//! approver groups (`[slack] channels`, else the default `channel`) through the durable
//! outbox, and its message is updated in place on every decision and on expiry, wherever the
//! decision was made; a click in Slack ([`interactions`]) decides as the Slack user's mapped
//! principal through the same verdict as the API.
//!
//! A message is always drawn from the approval as the store has it when the delivery goes out,
//! so a late post shows a decided approval as decided, and an update is never older than the
//! decision that caused it. Where a message is (its channel and `ts`) is a store note, shared
//! by every gateway on the store.
//!
//! It does not decide who may approve (the store's verdict does), which events post or
//! update a message ([`crate::outbox`] does), nor lease or retry deliveries (the worker does,
//! [`crate::deliveries`]).

pub mod api;
pub mod blocks;
pub mod interactions;
pub mod messages;
pub mod signature;
pub mod users;

use std::time::Duration;

/// When a failed Slack delivery is tried again, unless Slack said when: after 1 s, 5 s,
/// 30 s, 2 min, 10 min and 1 h; then it is dead-lettered.
pub const RETRIES: [Duration; 6] = crate::email::RETRIES;

/// The store note that says where approval `approval_id`'s message in `channel` is.
pub(crate) fn note_key(approval_id: &str, channel: &str) -> String {
    format!("slack.{approval_id}.{channel}")
}
