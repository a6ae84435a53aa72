//! What the MCP front end keeps between requests ([`McpFront`]): the 2025-11-25 sessions,
//! each bound to the principal that opened it and bounded per principal; the cancel tokens
//! of their calls in flight; our requests to their clients waiting for an answer; the key
//! that seals `requestState`; and the 2025 upstreams' requests parked for a 2026 client.
//!
//! It holds state only: [`super`] reads requests and decides what they mean.

use std::collections::HashMap;
use std::sync::Mutex;

use serde_json::Value;

use super::parked;
use crate::auth::random_hex;
use crate::error::ApiError;

/// A 2025-11-25 session: who opened it and what its client can do.
#[derive(Debug, Clone)]
pub(super) struct Session {
    pub(super) principal: String,
    pub(super) capabilities: Value,
    /// When it was last used (a session idle for [`SESSION_IDLE`] is forgotten).
    pub(super) used: std::time::Instant,
}

/// How long an unused 2025 session is kept.
const SESSION_IDLE: std::time::Duration = std::time::Duration::from_secs(24 * 3600);

/// Sessions one principal may hold; opening one more forgets its least recently used.
const SESSIONS_PER_PRINCIPAL: usize = 256;

/// What the MCP front end keeps between requests.
pub struct McpFront {
    pub(super) sessions: Mutex<HashMap<String, Session>>,
    /// In-flight `tools/call`s of 2025 sessions, by session and request id, for
    /// `notifications/cancelled`.
    pub(super) cancels: Mutex<HashMap<String, tokio_util::sync::CancellationToken>>,
    /// Our requests to 2025 clients (form elicitations of suspended calls) waiting for the
    /// client's response, by session and request id.
    pub(super) replies: Mutex<HashMap<String, tokio::sync::oneshot::Sender<Value>>>,
    /// The key sealing `requestState` (kept in the store, so it survives restarts).
    pub(super) state_key: Vec<u8>,
    /// 2025 upstreams' requests waiting for a 2026 client's retry.
    pub(super) parking: parked::Parking,
}

impl McpFront {
    pub fn new(state_key: Vec<u8>) -> McpFront {
        McpFront {
            sessions: Mutex::new(HashMap::new()),
            cancels: Mutex::new(HashMap::new()),
            replies: Mutex::new(HashMap::new()),
            state_key,
            parking: parked::Parking::default(),
        }
    }

    /// Opens a session for `principal`. Sessions are memory: idle ones are forgotten, and a
    /// principal past its share loses its least recently used one, so `initialize` in a loop
    /// cannot grow the gateway without bound. A forgotten session is answered 404, and the
    /// client initializes again.
    pub(super) fn open_session(
        &self,
        principal: &str,
        capabilities: Value,
    ) -> Result<String, ApiError> {
        let sid = random_hex(16)?;
        let now = std::time::Instant::now();
        let mut sessions = self.sessions.lock().unwrap_or_else(|e| e.into_inner());
        sessions.retain(|_, s| now.duration_since(s.used) < SESSION_IDLE);
        let mut mine: Vec<(String, std::time::Instant)> = sessions
            .iter()
            .filter(|(_, s)| s.principal == principal)
            .map(|(k, s)| (k.clone(), s.used))
            .collect();
        if mine.len() >= SESSIONS_PER_PRINCIPAL {
            mine.sort_by_key(|(_, used)| *used);
            for (k, _) in mine.iter().take(mine.len() + 1 - SESSIONS_PER_PRINCIPAL) {
                sessions.remove(k);
            }
        }
        sessions.insert(
            sid.clone(),
            Session {
                principal: principal.to_owned(),
                capabilities,
                used: now,
            },
        );
        Ok(sid)
    }

    /// A cancellation handle for request `id` of session `sid`, until [`McpFront::done`].
    pub fn cancellable(&self, sid: &str, id: &Value) -> tokio_util::sync::CancellationToken {
        let token = tokio_util::sync::CancellationToken::new();
        let mut c = self.cancels.lock().unwrap_or_else(|e| e.into_inner());
        c.insert(format!("{sid}\0{id}"), token.clone());
        token
    }

    pub fn done(&self, sid: &str, id: &Value) {
        let mut c = self.cancels.lock().unwrap_or_else(|e| e.into_inner());
        c.remove(&format!("{sid}\0{id}"));
    }

    /// `notifications/cancelled` from session `sid`: the call stops waiting (its hold ends,
    /// an upstream request in flight is dropped).
    pub(super) fn cancel(&self, sid: &str, id: &Value) {
        let mut c = self.cancels.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(t) = c.remove(&format!("{sid}\0{id}")) {
            t.cancel();
        }
    }

    /// Waits for session `sid`'s response to our request `id`; the receiver ends when it is
    /// dropped unanswered (see [`McpFront::forget_reply`]).
    pub fn expect_reply(&self, sid: &str, id: &str) -> tokio::sync::oneshot::Receiver<Value> {
        let (tx, rx) = tokio::sync::oneshot::channel();
        let mut r = self.replies.lock().unwrap_or_else(|e| e.into_inner());
        r.insert(format!("{sid}\0{id}"), tx);
        rx
    }

    pub fn forget_reply(&self, sid: &str, id: &str) {
        let mut r = self.replies.lock().unwrap_or_else(|e| e.into_inner());
        r.remove(&format!("{sid}\0{id}"));
    }

    /// A client's response to one of our requests: handed to whoever waits for it.
    pub(super) fn reply(&self, sid: &str, id: &Value, response: Value) -> bool {
        let Some(id) = id.as_str() else { return false };
        let mut r = self.replies.lock().unwrap_or_else(|e| e.into_inner());
        match r.remove(&format!("{sid}\0{id}")) {
            Some(tx) => tx.send(response).is_ok(),
            None => false,
        }
    }

    /// The session `sid` if `principal` opened it, marked as used.
    pub(super) fn session(&self, sid: &str, principal: &str) -> Option<Session> {
        let mut sessions = self.sessions.lock().unwrap_or_else(|e| e.into_inner());
        let s = sessions.get_mut(sid).filter(|s| s.principal == principal)?;
        s.used = std::time::Instant::now();
        Some(s.clone())
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    pub(super) fn sessions_belong_to_their_principal_and_are_bounded_per_principal() {
        let front = McpFront::new(vec![1; 32]);
        let first = front.open_session("a", Value::Null).unwrap();
        assert!(front.session(&first, "a").is_some());
        assert!(front.session(&first, "b").is_none());
        for _ in 0..SESSIONS_PER_PRINCIPAL {
            front.open_session("a", Value::Null).unwrap();
        }
        // The oldest went to make room; another principal's are untouched.
        assert!(front.session(&first, "a").is_none());
        let other = front.open_session("b", Value::Null).unwrap();
        assert!(front.session(&other, "b").is_some());
        let sessions = front.sessions.lock().unwrap();
        assert_eq!(
            sessions.values().filter(|s| s.principal == "a").count(),
            SESSIONS_PER_PRINCIPAL
        );
    }
}
