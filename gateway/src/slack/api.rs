//! Slack's Web API, the few methods airlock calls (`chat.postMessage`, `chat.update`,
//! `chat.postEphemeral`, `views.open`), with the bot token, and what an answer means: Slack
//! answers `200 {"ok": false, "error": "…"}` for most failures, and `429` with `Retry-After`
//! when rate limited. A failure is either worth retrying (rate limits, Slack's own errors, a
//! network that failed) or not (a bad token, a channel the bot is not in, blocks Slack
//! refuses): the outbox retries the first kind and dead-letters the second at once.

use std::time::Duration;

use serde_json::Value;

use crate::config::SlackConfig;

/// How long one Web API request may take.
const TIMEOUT: Duration = Duration::from_secs(10);

/// Most a `Retry-After` from Slack may delay a delivery.
const MAX_RETRY_AFTER: Duration = Duration::from_secs(3600);

/// Slack's `error`s that are worth retrying; any other is permanent.
const TRANSIENT: [&str; 5] = [
    "ratelimited",
    "internal_error",
    "fatal_error",
    "service_unavailable",
    "request_timeout",
];

/// Why a Web API call failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Failure {
    /// Try again (after `retry_after` when Slack said so).
    Retry {
        error: String,
        retry_after: Option<Duration>,
    },
    /// Trying again would fail the same way.
    Permanent(String),
}

impl Failure {
    pub fn message(&self) -> &str {
        match self {
            Failure::Retry { error, .. } | Failure::Permanent(error) => error,
        }
    }
}

/// Calls `method` with a JSON body; `Ok` is Slack's answer (with `ok: true`).
pub async fn call(
    client: &reqwest::Client,
    slack: &SlackConfig,
    method: &str,
    body: &Value,
) -> Result<Value, Failure> {
    let sent = client
        .post(format!("{}/{method}", slack.api_url))
        .timeout(TIMEOUT)
        .bearer_auth(&slack.bot_token)
        .header("content-type", "application/json; charset=utf-8")
        .body(body.to_string())
        .send()
        .await;
    let resp = match sent {
        Ok(r) => r,
        Err(e) => {
            return Err(Failure::Retry {
                error: format!("{method}: Slack unreachable: {e}"),
                retry_after: None,
            })
        }
    };
    let status = resp.status().as_u16();
    if status == 429 {
        let retry_after = resp
            .headers()
            .get("retry-after")
            .and_then(|v| v.to_str().ok()?.trim().parse::<u64>().ok())
            .map(|s| Duration::from_secs(s).min(MAX_RETRY_AFTER));
        return Err(Failure::Retry {
            error: "Slack: ratelimited".into(),
            retry_after,
        });
    }
    if status >= 500 {
        return Err(Failure::Retry {
            error: format!("{method}: Slack answered HTTP {status}"),
            retry_after: None,
        });
    }
    let answer: Value = match resp.json().await {
        Ok(v) => v,
        Err(e) if status < 300 => {
            return Err(Failure::Retry {
                error: format!("{method}: an answer that is not JSON: {e}"),
                retry_after: None,
            })
        }
        Err(_) => {
            return Err(Failure::Permanent(format!(
                "{method}: Slack answered HTTP {status}"
            )))
        }
    };
    if answer["ok"] == true {
        return Ok(answer);
    }
    let code = answer["error"]
        .as_str()
        .unwrap_or("unknown_error")
        .to_owned();
    if TRANSIENT.contains(&code.as_str()) {
        Err(Failure::Retry {
            error: format!("Slack: {code}"),
            retry_after: None,
        })
    } else {
        Err(Failure::Permanent(format!("Slack: {code}")))
    }
}
