//! `[[webhooks]]`: approver and notification endpoints, their secrets, events and retries.

use std::time::Duration;

use airlock_policy::parse_duration;
use airlock_storage::Kind;

use super::principals::PrincipalConfig;
use super::raw::RawWebhook;
use super::{duration, err, secret, ConfigError};

/// The events a webhook can receive.
pub const EVENTS: [Kind; 5] = [
    Kind::ApprovalRequested,
    Kind::ApprovalSummary,
    Kind::ApprovalDecided,
    Kind::ApprovalExpired,
    Kind::CallCompleted,
];

/// A webhook approver or notification endpoint (DESIGN §8).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WebhookConfig {
    pub id: String,
    pub url: String,
    /// The decoded key of its `whsec_` secret.
    pub key: Vec<u8>,
    pub events: Vec<Kind>,
    /// The approver a synchronous decision is recorded as.
    pub principal: Option<String>,
    pub retry_schedule: Vec<Duration>,
    pub timeout: Duration,
}

/// Each webhook, checked: a unique id, an http(s) URL, a `whsec_` secret, known events, an
/// approver principal if it decides, a retry schedule.
pub(super) fn validate(
    raw: Vec<RawWebhook>,
    principals: &[PrincipalConfig],
) -> Result<Vec<WebhookConfig>, ConfigError> {
    let mut webhooks: Vec<WebhookConfig> = Vec::new();
    for (i, w) in raw.into_iter().enumerate() {
        let key = format!("webhooks[{i}]");
        if w.id.starts_with("email:") || w.id.starts_with("slack:") {
            return Err(err(
                format!("{key}.id"),
                format!(
                    "`{}`: ids starting `email:` or `slack:` are airlock's own channels",
                    w.id
                ),
            ));
        }
        if w.id.is_empty() || webhooks.iter().any(|x| x.id == w.id) {
            return Err(err(
                format!("{key}.id"),
                format!("`{}` is empty or used twice", w.id),
            ));
        }
        if !(w.url.starts_with("http://") || w.url.starts_with("https://")) {
            return Err(err(
                format!("{key}.url"),
                format!("`{}` must be an http:// or https:// URL", w.url),
            ));
        }
        let secret = secret(&format!("{key}.secret"), &w.secret)?;
        let signing_key =
            crate::signing::secret_key(&secret).map_err(|m| err(format!("{key}.secret"), m))?;
        let events = events(&key, w.events)?;
        if let Some(p) = &w.principal {
            if !principals
                .iter()
                .any(|q| &q.id == p && (q.role == "approver" || q.role == "admin"))
            {
                return Err(err(
                    format!("{key}.principal"),
                    format!("`{p}` must be a configured principal with role approver (or admin)"),
                ));
            }
        }
        let retry_schedule = retry_schedule(&key, w.retry_schedule)?;
        let timeout = duration(
            &format!("{key}.timeout"),
            w.timeout.as_deref(),
            Duration::from_secs(10),
        )?;
        webhooks.push(WebhookConfig {
            id: w.id,
            url: w.url,
            key: signing_key,
            events,
            principal: w.principal,
            retry_schedule,
            timeout,
        });
    }
    Ok(webhooks)
}

/// The events a webhook subscribes to (all of [`EVENTS`] when it names none).
fn events(key: &str, names: Option<Vec<String>>) -> Result<Vec<Kind>, ConfigError> {
    let events = match names {
        None => EVENTS.to_vec(),
        Some(names) => names
            .iter()
            .map(|name| {
                Kind::parse(name)
                    .filter(|k| EVENTS.contains(k))
                    .ok_or_else(|| {
                        let known: Vec<&str> = EVENTS.iter().map(|k| k.as_str()).collect();
                        err(
                            format!("{key}.events"),
                            format!("unknown event `{name}`; events are {}", known.join(", ")),
                        )
                    })
            })
            .collect::<Result<_, _>>()?,
    };
    Ok(events)
}

/// The delays between attempts (the default: 5s, 30s, 2m, 10m, 30m, 1h, 3h, 6h).
fn retry_schedule(key: &str, written: Option<Vec<String>>) -> Result<Vec<Duration>, ConfigError> {
    let schedule_text = written.unwrap_or_else(|| {
        ["5s", "30s", "2m", "10m", "30m", "1h", "3h", "6h"]
            .iter()
            .map(|s| s.to_string())
            .collect()
    });
    let mut retry_schedule = Vec::new();
    for (j, d) in schedule_text.iter().enumerate() {
        retry_schedule
            .push(parse_duration(d).map_err(|m| err(format!("{key}.retry_schedule[{j}]"), m))?);
    }
    Ok(retry_schedule)
}
