//! `[[classifiers]]`: the built-in classifier or an HTTP one, and what its failure decides
//! (never allow).

use std::time::Duration;

use super::raw::RawClassifier;
use super::{duration, err, ConfigError};

/// How a classifier runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClassifierKind {
    /// The local classifier; URLs to hosts outside `allow_hosts` count as exfiltration.
    Builtin { allow_hosts: Vec<String> },
    /// A remote classifier service.
    Http { url: String, timeout: Duration },
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClassifierConfig {
    pub name: String,
    pub kind: ClassifierKind,
    /// What a rule naming this classifier yields when it fails; never allow.
    pub on_error: airlock_policy::DecisionKind,
}

/// Each classifier, checked: a unique name, a kind with what it needs, an `on_error` that
/// never allows.
pub(super) fn validate(raw: Vec<RawClassifier>) -> Result<Vec<ClassifierConfig>, ConfigError> {
    let mut classifiers: Vec<ClassifierConfig> = Vec::new();
    for (i, c) in raw.into_iter().enumerate() {
        let key = format!("classifiers[{i}]");
        if c.name.is_empty() || classifiers.iter().any(|x| x.name == c.name) {
            return Err(err(
                format!("{key}.name"),
                format!("`{}` is empty or used twice", c.name),
            ));
        }
        let kind = match (c.kind.as_str(), c.url) {
            ("builtin", None) => ClassifierKind::Builtin {
                allow_hosts: c.allow_hosts,
            },
            ("builtin", Some(_)) => {
                return Err(err(
                    format!("{key}.url"),
                    "a builtin classifier takes no url",
                ))
            }
            ("http", Some(url)) if url.starts_with("http://") || url.starts_with("https://") => {
                ClassifierKind::Http {
                    url,
                    timeout: duration(
                        &format!("{key}.timeout"),
                        c.timeout.as_deref(),
                        Duration::from_millis(300),
                    )?,
                }
            }
            ("http", other) => {
                return Err(err(
                    format!("{key}.url"),
                    format!("an http classifier needs an http(s) url, got {other:?}"),
                ))
            }
            (other, _) => {
                return Err(err(
                    format!("{key}.kind"),
                    format!("`{other}` must be builtin or http"),
                ))
            }
        };
        let on_error = match c.on_error.as_deref().unwrap_or("require_approval") {
            "require_approval" => airlock_policy::DecisionKind::RequireApproval,
            "deny" => airlock_policy::DecisionKind::Deny,
            other => {
                return Err(err(
                    format!("{key}.on_error"),
                    format!(
                    "`{other}` must be require_approval or deny: a failing classifier never allows"
                ),
                ))
            }
        };
        classifiers.push(ClassifierConfig {
            name: c.name,
            kind,
            on_error,
        });
    }
    Ok(classifiers)
}
