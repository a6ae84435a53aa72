//! Slack's request signature (`v0`): `v0=` + hex HMAC-SHA256 of `v0:{timestamp}:{raw body}`
//! keyed with the app's signing secret, sent as `X-Slack-Signature` beside
//! `X-Slack-Request-Timestamp`. Checked in constant time (the `hmac` crate's own comparison),
//! with the timestamp at most five minutes from now. It does no I/O and keeps no memory of
//! what it saw: refusing a replayed request is the caller's (the store's one-time marks).

use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;

type HmacSha256 = Hmac<Sha256>;

/// How far a request's timestamp may be from now, in seconds.
pub const TOLERANCE_SECS: i64 = 300;

/// Why a request is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    #[error("no `X-Slack-Signature` and `X-Slack-Request-Timestamp` headers")]
    Missing,
    #[error("the request's timestamp is {0} seconds from now: more than five minutes")]
    Stale(i64),
    #[error("the signature does not match: a wrong signing secret, or the body changed")]
    Mismatch,
}

fn mac(secret: &[u8], timestamp: &str, body: &[u8]) -> HmacSha256 {
    // INVARIANT: HMAC takes a key of any length; `new_from_slice` cannot fail for it.
    let mut mac = <HmacSha256 as KeyInit>::new_from_slice(secret)
        .unwrap_or_else(|_| unreachable!("HMAC accepts keys of every length"));
    mac.update(b"v0:");
    mac.update(timestamp.as_bytes());
    mac.update(b":");
    mac.update(body);
    mac
}

/// The `X-Slack-Signature` of a body sent at `timestamp`, as Slack computes it (the end-to-end
/// tests sign with Slack's own SDK instead).
#[cfg(test)]
fn sign(secret: &[u8], timestamp: &str, body: &[u8]) -> String {
    format!(
        "v0={}",
        airlock_policy::hex(&mac(secret, timestamp, body).finalize().into_bytes())
    )
}

/// Checks a request's signature; `Ok` is its timestamp (seconds).
pub fn verify(
    secret: &[u8],
    timestamp: Option<&str>,
    signature: Option<&str>,
    body: &[u8],
    now_secs: i64,
) -> Result<i64, Refusal> {
    let (Some(timestamp), Some(signature)) = (timestamp, signature) else {
        return Err(Refusal::Missing);
    };
    let ts: i64 = timestamp.trim().parse().map_err(|_| Refusal::Mismatch)?;
    if (now_secs - ts).abs() > TOLERANCE_SECS {
        return Err(Refusal::Stale(now_secs - ts));
    }
    let given = signature
        .strip_prefix("v0=")
        .and_then(hex_bytes)
        .ok_or(Refusal::Mismatch)?;
    mac(secret, timestamp, body)
        .verify_slice(&given)
        .map(|()| ts)
        .map_err(|_| Refusal::Mismatch)
}

/// Lower- or upper-case hex, two digits a byte.
fn hex_bytes(s: &str) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Slack's documented example ("Verifying requests from Slack").
    const SECRET: &[u8] = b"8f742231b10e8888abcd99yyyzzz85a5";
    const TS: &str = "1531420618";
    const BODY: &[u8] = b"token=xyzz0WbapA4vBCDEFasx0q6G&team_id=T1DC2JH3J&team_domain=testteamnow&channel_id=G8PSS9T3V&channel_name=foobar&user_id=U2CERLKJA&user_name=roadrunner&command=%2Fwebhook-collect&text=&response_url=https%3A%2F%2Fhooks.slack.com%2Fcommands%2FT1DC2JH3J%2F397700885554%2F96rGlfmibIGlgcZRskXaIFfN&trigger_id=398738663015.47445629121.803a0bc887a14d10d2c447fce8b6703c";
    const EXPECTED: &str = "v0=a2114d57b48eac39b9ad189dd8316235a7b4a8d21a10bd27519666489c69b503";

    #[test]
    fn slack_s_documented_example_signs_and_verifies() {
        assert_eq!(sign(SECRET, TS, BODY), EXPECTED);
        let now = 1_531_420_618 + 10;
        assert_eq!(
            verify(SECRET, Some(TS), Some(EXPECTED), BODY, now),
            Ok(1_531_420_618)
        );
        let upper = format!("v0={}", EXPECTED[3..].to_uppercase());
        assert!(verify(SECRET, Some(TS), Some(&upper), BODY, now).is_ok());
    }

    #[test]
    fn a_changed_byte_a_wrong_secret_an_old_or_future_time_and_garbage_are_refused() {
        let now = 1_531_420_618;
        let mut body = BODY.to_vec();
        body[10] ^= 1;
        assert_eq!(
            verify(SECRET, Some(TS), Some(EXPECTED), &body, now),
            Err(Refusal::Mismatch)
        );
        assert_eq!(
            verify(
                b"another-secret-000000",
                Some(TS),
                Some(EXPECTED),
                BODY,
                now
            ),
            Err(Refusal::Mismatch)
        );
        assert_eq!(
            verify(SECRET, Some(TS), Some(EXPECTED), BODY, now + 301),
            Err(Refusal::Stale(301))
        );
        assert_eq!(
            verify(SECRET, Some(TS), Some(EXPECTED), BODY, now - 301),
            Err(Refusal::Stale(-301))
        );
        for bad in [
            "",
            "v0=",
            "v1=abcd",
            "v0=zz",
            &EXPECTED[..EXPECTED.len() - 1],
        ] {
            assert_eq!(
                verify(SECRET, Some(TS), Some(bad), BODY, now),
                Err(Refusal::Mismatch),
                "{bad}"
            );
        }
        assert_eq!(
            verify(SECRET, Some("later"), Some(EXPECTED), BODY, now),
            Err(Refusal::Mismatch)
        );
        assert_eq!(
            verify(SECRET, None, Some(EXPECTED), BODY, now),
            Err(Refusal::Missing)
        );
    }
}
