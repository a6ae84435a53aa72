//! What the gateway tells the approvers' event stream (`GET /v1/events`, the inbox): one
//! type, shared by whoever sends and whoever streams it. Nothing else lives here.

use airlock_storage::Kind;
use serde_json::Value;

/// An event for approvers' SSE stream and, later, webhooks.
#[derive(Debug, Clone)]
pub struct Event {
    pub kind: Kind,
    pub data: Value,
}
