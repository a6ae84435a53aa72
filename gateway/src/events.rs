//! What the gateway tells the approvers' event stream (`GET /v1/events`, the inbox): one
//! type, shared by whoever sends and whoever streams it; and the face an approval shows in
//! events, which the door hands in. Nothing else lives here.

use airlock_storage::{Approval, Kind};
use serde_json::Value;

/// An event for approvers' SSE stream and, later, webhooks.
#[derive(Debug, Clone)]
pub struct Event {
    pub kind: Kind,
    pub data: Value,
}

/// How an approval reads in events (SSE, webhooks, mail): the JSON API's face of it, the
/// object `GET /v1/approvals/{id}` answers. The front door hands it in when it opens the
/// gateway, so what the domain announces never names the wire's types.
pub type ApprovalFace = fn(&Approval) -> Value;
