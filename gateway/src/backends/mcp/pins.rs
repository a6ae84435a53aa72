//! Whether an upstream tool may be shown and called as it is listed (DESIGN §20): its listed
//! definition's fingerprint against the pin the store keeps, under the server's `pin` mode.
//! Pure judgement: what is pinned comes in as a [`ToolPin`]; recording what was seen and
//! opening reviews is the store's ([`airlock_storage::Store::see_tool`]), driven by
//! [`crate::pins`].

use std::sync::Arc;

use airlock_storage::ToolPin;
use serde_json::{json, Value};

use crate::config::PinMode;
use crate::error::{ApiError, Code};

/// How soon an upstream not reached at start (or since) is tried again: the `Retry-After` its
/// refused calls are given.
pub(crate) const UNREACHED_RETRY: std::time::Duration = std::time::Duration::from_secs(5);

/// What airlock makes of one listed tool.
#[derive(Debug, Clone, PartialEq)]
pub enum Trust {
    /// The listed definition is the pinned one (or nothing is pinned under `pin = "off"`):
    /// shown and called as listed.
    Pinned,
    /// Not judged yet: seen on a list the store has not been told of. Shown as nothing and
    /// refused as a change, until it is (a moment after the list is read).
    Unseen,
    /// It is not what was pinned (or a tool never trusted): `pinned` is what a person saw,
    /// if anything; `review` the approval open on it; `declined` when a reviewer declined
    /// this very definition.
    Changed {
        pinned: Option<Arc<Value>>,
        review: Option<String>,
        declined: bool,
    },
}

/// Judges a listed definition by its fingerprint against the tool's pin.
pub fn judge(mode: PinMode, fingerprint: &str, pin: Option<&ToolPin>) -> Trust {
    if mode == PinMode::Off {
        return Trust::Pinned;
    }
    let Some(pin) = pin else {
        return Trust::Unseen;
    };
    if pin.fingerprint.as_deref() == Some(fingerprint) {
        return Trust::Pinned;
    }
    Trust::Changed {
        pinned: pin.definition.clone().map(Arc::new),
        review: pin
            .review
            .as_ref()
            .filter(|r| r.fingerprint == fingerprint)
            .map(|r| r.approval_id.clone()),
        declined: pin.declined.iter().any(|f| f == fingerprint),
    }
}

/// Whether a call to a tool goes on, as its upstream and its pin stand.
#[derive(Debug, Clone, PartialEq)]
pub enum Gate {
    /// Called (under `pin = "warn"`, `changed` says it is not what was pinned).
    Open { changed: bool },
    /// Refused `409 tool.definition_changed` until a reviewer approves (`pin = "enforce"`).
    Held {
        review: Option<String>,
        declined: bool,
    },
    /// Its upstream was never reached: `502 upstream.unavailable`.
    Unreached,
}

impl Gate {
    pub fn of(mode: PinMode, trust: &Trust) -> Gate {
        match (trust, mode) {
            (Trust::Pinned, _) => Gate::Open { changed: false },
            (_, PinMode::Warn | PinMode::Off) => Gate::Open { changed: true },
            (Trust::Unseen, PinMode::Enforce) => Gate::Held {
                review: None,
                declined: false,
            },
            (
                Trust::Changed {
                    review, declined, ..
                },
                PinMode::Enforce,
            ) => Gate::Held {
                review: review.clone(),
                declined: *declined,
            },
        }
    }

    /// The refusal of a call through this gate, if it is refused. `link` makes the inbox
    /// link of a review.
    pub fn refusal(
        &self,
        tool: &str,
        server: &str,
        link: impl Fn(&str) -> String,
    ) -> Option<ApiError> {
        match self {
            Gate::Open { .. } => None,
            Gate::Unreached => Some(
                ApiError::new(
                    Code::UpstreamUnavailable,
                    format!("MCP server `{server}` has not been reached yet; `{tool}` cannot be called until it is"),
                )
                .retry_after(UNREACHED_RETRY.as_secs()),
            ),
            Gate::Held { review, declined } => {
                let why = if *declined {
                    "a reviewer declined its current definition; it stays refused until the upstream serves the pinned one again, or a reviewer approves a later change"
                } else if review.is_some() {
                    "its definition changed since it was pinned, and the change waits for a reviewer"
                } else {
                    "its definition has not been reviewed yet"
                };
                let mut e = ApiError::new(
                    Code::ToolDefinitionChanged,
                    format!("`{tool}` of MCP server `{server}` cannot be called: {why}"),
                );
                let details = match review {
                    Some(id) => json!({"approval_id": id, "link": link(id), "declined": declined}),
                    None => json!({"declined": declined}),
                };
                e = e.with_details(details);
                Some(e)
            }
        }
    }
}

/// The definition clients see of a listed tool: as listed when it is trusted (or under
/// `warn`), the pinned one under `enforce` while a change waits, nothing when no definition
/// was ever trusted.
pub fn shown(mode: PinMode, listed: &Arc<Value>, trust: &Trust) -> Option<Arc<Value>> {
    match (trust, mode) {
        (Trust::Pinned, _) | (_, PinMode::Warn | PinMode::Off) => Some(listed.clone()),
        (Trust::Unseen, PinMode::Enforce) => None,
        (Trust::Changed { pinned, .. }, PinMode::Enforce) => pinned.clone(),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use airlock_storage::PinReview;

    fn pin(fp: Option<&str>) -> ToolPin {
        ToolPin {
            server: "s".into(),
            tool: "t".into(),
            fingerprint: fp.map(str::to_owned),
            definition: fp.map(|f| json!({"name": "t", "description": f})),
            pinned_at: 0,
            pinned_by: "first_seen".into(),
            review: Some(PinReview {
                approval_id: "apr_1".into(),
                fingerprint: "sha256:new".into(),
            }),
            declined: vec!["sha256:bad".into()],
        }
    }

    #[test]
    fn a_listed_definition_is_judged_against_its_pin() {
        let p = pin(Some("sha256:old"));
        assert_eq!(
            judge(PinMode::Enforce, "sha256:old", Some(&p)),
            Trust::Pinned
        );
        assert_eq!(judge(PinMode::Off, "sha256:new", Some(&p)), Trust::Pinned);
        assert_eq!(judge(PinMode::Enforce, "sha256:new", None), Trust::Unseen);
        let Trust::Changed {
            pinned,
            review,
            declined,
        } = judge(PinMode::Enforce, "sha256:new", Some(&p))
        else {
            panic!("a change")
        };
        assert_eq!(pinned.unwrap()["description"], "sha256:old");
        assert_eq!(review.as_deref(), Some("apr_1"));
        assert!(!declined);
        let bad = judge(PinMode::Enforce, "sha256:bad", Some(&p));
        assert!(matches!(
            bad,
            Trust::Changed {
                declined: true,
                review: None,
                ..
            }
        ));
    }

    #[test]
    fn enforce_holds_and_shows_the_pinned_definition_warn_runs_and_shows_the_new() {
        let p = pin(Some("sha256:old"));
        let listed = Arc::new(json!({"name": "t", "description": "new"}));
        let changed = judge(PinMode::Enforce, "sha256:new", Some(&p));
        assert_eq!(
            shown(PinMode::Enforce, &listed, &changed).unwrap()["description"],
            "sha256:old"
        );
        assert_eq!(
            shown(PinMode::Warn, &listed, &changed).unwrap()["description"],
            "new"
        );
        let held = Gate::of(PinMode::Enforce, &changed);
        let e = held
            .refusal("s.t", "s", |id| format!("/inbox/approvals/{id}"))
            .unwrap();
        assert_eq!(e.code, Code::ToolDefinitionChanged);
        assert_eq!(e.details["link"], "/inbox/approvals/apr_1");
        assert_eq!(
            Gate::of(PinMode::Warn, &changed),
            Gate::Open { changed: true }
        );
        // A tool never trusted is neither shown nor called under enforce.
        let never = judge(PinMode::Enforce, "sha256:x", Some(&pin(None)));
        assert!(shown(PinMode::Enforce, &listed, &never).is_none());
        assert!(Gate::of(PinMode::Enforce, &never)
            .refusal("s.t", "s", |i| i.into())
            .is_some());
    }
}
