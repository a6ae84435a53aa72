//! Standard Webhooks signatures: `v1,` + base64(HMAC-SHA256(key, "{id}.{timestamp}.{body}")),
//! keyed with the base64-decoded part of a `whsec_` secret.
//!
//! Signing takes one secret; verification accepts a space-separated list of signatures (as
//! sent while a secret rotates) and checks each in constant time, plus the timestamp's
//! distance from now. It does no I/O.

use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;

type HmacSha256 = Hmac<Sha256>;

/// The key inside a `whsec_…` secret.
pub fn secret_key(secret: &str) -> Result<Vec<u8>, String> {
    let b64 = secret.strip_prefix("whsec_").unwrap_or(secret);
    let key = STANDARD
        .decode(b64)
        .map_err(|_| "the secret must be `whsec_` followed by base64".to_owned())?;
    if key.is_empty() {
        return Err("the secret is empty".into());
    }
    Ok(key)
}

fn mac(key: &[u8], id: &str, timestamp: i64, body: &[u8]) -> Result<HmacSha256, String> {
    let mut mac =
        <HmacSha256 as KeyInit>::new_from_slice(key).map_err(|e| format!("bad HMAC key: {e}"))?;
    mac.update(id.as_bytes());
    mac.update(b".");
    mac.update(timestamp.to_string().as_bytes());
    mac.update(b".");
    mac.update(body);
    Ok(mac)
}

/// The `webhook-signature` value for one message.
pub fn sign(key: &[u8], id: &str, timestamp: i64, body: &[u8]) -> Result<String, String> {
    Ok(format!(
        "v1,{}",
        STANDARD.encode(mac(key, id, timestamp, body)?.finalize().into_bytes())
    ))
}

/// Why a signature is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum VerifyError {
    #[error("the timestamp is {0} seconds from now, more than the tolerance allows")]
    Timestamp(i64),
    #[error("no `v1,` signature in the header")]
    NoSignature,
    #[error("no signature matches: wrong secret, or the id, timestamp or body changed")]
    Mismatch,
}

/// Checks `header` (space-separated `v1,<base64>` values) against the message.
pub fn verify(
    key: &[u8],
    id: &str,
    timestamp: i64,
    body: &[u8],
    header: &str,
    now: i64,
    tolerance: i64,
) -> Result<(), VerifyError> {
    if (now - timestamp).abs() > tolerance {
        return Err(VerifyError::Timestamp(now - timestamp));
    }
    let mut any = false;
    for candidate in header.split_whitespace() {
        let Some(b64) = candidate.strip_prefix("v1,") else {
            continue;
        };
        any = true;
        let Ok(bytes) = STANDARD.decode(b64) else {
            continue;
        };
        if mac(key, id, timestamp, body).is_ok_and(|m| m.verify_slice(&bytes).is_ok()) {
            return Ok(());
        }
    }
    if any {
        Err(VerifyError::Mismatch)
    } else {
        Err(VerifyError::NoSignature)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECRET: &str = "whsec_MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY=";

    #[test]
    fn matches_the_reference_library() {
        // From the `standardwebhooks` Python package: Webhook(SECRET).sign("msg_1", 1700000000, '{"a":1}').
        let key = secret_key(SECRET).unwrap();
        assert_eq!(
            sign(&key, "msg_1", 1_700_000_000, br#"{"a":1}"#).unwrap(),
            "v1,rkwp5YuvdrMkcu0ZhuMsXoTg44mHAr1Q0+FFgFpXsjY="
        );
    }

    #[test]
    fn verification_refuses_each_kind_of_mismatch() {
        let key = secret_key(SECRET).unwrap();
        let sig = sign(&key, "msg_1", 1000, b"body").unwrap();
        assert_eq!(
            verify(&key, "msg_1", 1000, b"body", &sig, 1000, 300),
            Ok(())
        );
        let rotating = format!("v1,AAAA {sig}");
        assert_eq!(
            verify(&key, "msg_1", 1000, b"body", &rotating, 1100, 300),
            Ok(())
        );
        let other = secret_key("whsec_b3RoZXIgc2VjcmV0").unwrap();
        assert_eq!(
            verify(&other, "msg_1", 1000, b"body", &sig, 1000, 300),
            Err(VerifyError::Mismatch)
        );
        assert_eq!(
            verify(&key, "msg_1", 1000, b"bodY", &sig, 1000, 300),
            Err(VerifyError::Mismatch)
        );
        assert_eq!(
            verify(&key, "msg_1", 1000, b"body", &sig, 1301, 300),
            Err(VerifyError::Timestamp(301))
        );
        assert_eq!(
            verify(&key, "msg_1", 1000, b"body", "v1,", 1000, 300),
            Err(VerifyError::Mismatch)
        );
        assert_eq!(
            verify(
                &key,
                "msg_1",
                1000,
                b"body",
                &sig[..sig.len() - 4],
                1000,
                300
            ),
            Err(VerifyError::Mismatch)
        );
        assert_eq!(
            verify(&key, "msg_1", 1000, b"body", "v2,abc", 1000, 300),
            Err(VerifyError::NoSignature)
        );
        assert!(secret_key("whsec_!!").is_err());
    }
}
