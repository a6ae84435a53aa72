//! The sealed `requestState` of a 2026-07-28 `input_required` answer: what it binds (the
//! approval, the call, the principal, the tool, the fingerprint, an expiry and a single-use
//! nonce), signed with HMAC-SHA256 under a key kept in the store.
//!
//! It only seals and opens; spending the nonce once is the store's (`spend_once`), and what a
//! valid state lets happen is the front end's.

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use hmac::{Hmac, KeyInit, Mac};
use serde::{Deserialize, Serialize};
use sha2::Sha256;

/// What a state binds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct State {
    pub v: u32,
    /// Single use: spent in the store when the state is redeemed.
    pub nonce: String,
    pub approval_id: String,
    pub call_id: String,
    pub principal: String,
    pub tool: String,
    pub fingerprint: String,
    /// Milliseconds since the epoch.
    pub expires_at: u64,
    /// Set for a suspended call's input request: the suspension it answers (DESIGN §11).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub suspension: Option<u32>,
    /// The input was asked for by URL (the inbox's resume form), not as a form: the client's
    /// answer carries no data, and the retry waits for someone to resume the call there.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub by_url: bool,
    /// Set for an upstream's `input_required` relayed to the client (DESIGN §15): the
    /// upstream's own `requestState`, sent back to it with the client's answers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub relay: Option<Relayed>,
    /// Set for a 2025 upstream's request relayed to a 2026 client while the call runs on
    /// (DESIGN §15): the key it was asked under, where the retry's answer goes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parked: Option<String>,
}

/// What a relayed `input_required` state carries of the upstream's.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Relayed {
    pub upstream_state: Option<serde_json::Value>,
}

/// `base64url(json) "." base64url(hmac)`.
pub fn seal(key: &[u8], state: &State) -> String {
    let payload = serde_json::to_vec(state).unwrap_or_default();
    let tag = mac(key, &payload);
    format!(
        "{}.{}",
        URL_SAFE_NO_PAD.encode(&payload),
        URL_SAFE_NO_PAD.encode(tag)
    )
}

/// Opens a sealed state: `None` when it was not sealed with `key` or is malformed. The
/// caller checks what it binds, its expiry and its nonce.
pub fn open(key: &[u8], sealed: &str) -> Option<State> {
    let (payload, tag) = sealed.split_once('.')?;
    let payload = URL_SAFE_NO_PAD.decode(payload).ok()?;
    let tag = URL_SAFE_NO_PAD.decode(tag).ok()?;
    let mut m = Hmac::<Sha256>::new_from_slice(key).ok()?;
    m.update(&payload);
    // Constant time.
    m.verify_slice(&tag).ok()?;
    let state: State = serde_json::from_slice(&payload).ok()?;
    (state.v == 1).then_some(state)
}

fn mac(key: &[u8], payload: &[u8]) -> Vec<u8> {
    match Hmac::<Sha256>::new_from_slice(key) {
        Ok(mut m) => {
            m.update(payload);
            m.finalize().into_bytes().to_vec()
        }
        Err(_) => Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn state() -> State {
        State {
            v: 1,
            nonce: "n1".into(),
            approval_id: "apr_1".into(),
            call_id: "call_1".into(),
            principal: "agent1".into(),
            tool: "db.query".into(),
            fingerprint: "sha256:ab".into(),
            expires_at: 99,
            suspension: None,
            by_url: false,
            relay: None,
            parked: None,
        }
    }

    #[test]
    fn a_sealed_state_opens_with_its_key_only_and_any_change_breaks_it() {
        let sealed = seal(b"key-1", &state());
        assert_eq!(open(b"key-1", &sealed), Some(state()));
        assert_eq!(open(b"key-2", &sealed), None);
        let (payload, tag) = sealed.split_once('.').unwrap();
        let mut forged = state();
        forged.principal = "agent2".into();
        let forged_payload = URL_SAFE_NO_PAD.encode(serde_json::to_vec(&forged).unwrap());
        assert_eq!(open(b"key-1", &format!("{forged_payload}.{tag}")), None);
        assert_eq!(open(b"key-1", payload), None);
        assert_eq!(open(b"key-1", "garbage"), None);
        let mut flipped = sealed.into_bytes();
        flipped[3] ^= 1;
        assert_eq!(open(b"key-1", &String::from_utf8_lossy(&flipped)), None);
    }
}
