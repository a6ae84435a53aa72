//! `[store]`: the embedded store, or PostgreSQL with its URL, instance name and CA.

use std::path::{Path, PathBuf};

use super::raw::RawStore;
use super::{err, secret, ConfigError};

/// Where the store lives.
#[derive(Clone, PartialEq, Eq)]
pub enum StoreKind {
    /// Embedded fjall in `data_dir`, held by this process alone.
    Fjall,
    /// A PostgreSQL database shared by any number of gateways. `instance` names this gateway
    /// among them: a restarted gateway recovers only the calls it left executing. `ca`: PEM
    /// certificates to verify the database's TLS certificate with, instead of the system's.
    /// `instance` also names this gateway's audit chain, whose `chain.witness` records of the
    /// other chains' heads are written every `witness_interval` (DESIGN §17).
    Postgres {
        url: String,
        instance: String,
        ca: Option<PathBuf>,
        witness_interval: std::time::Duration,
    },
}

impl std::fmt::Debug for StoreKind {
    // The URL may carry a password: it is never printed.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StoreKind::Fjall => f.write_str("Fjall"),
            StoreKind::Postgres { instance, ca, .. } => f
                .debug_struct("Postgres")
                .field("instance", instance)
                .field("ca", ca)
                .finish_non_exhaustive(),
        }
    }
}

/// A gateway's default name among those sharing a database: its host and its `data_dir`, which
/// stay the same across its restarts and differ between gateways on one host.
fn default_instance(data_dir: &Path) -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .or_else(|_| std::fs::read_to_string("/etc/hostname"))
        .map(|h| h.trim().to_owned())
        .unwrap_or_default();
    let dir = std::fs::canonicalize(data_dir).unwrap_or_else(|_| data_dir.to_path_buf());
    format!("{host}:{}", dir.display())
}

/// The store section, checked; `data_dir` names the default instance.
pub(super) fn validate(
    raw: RawStore,
    data_dir: &Path,
    resolve: &dyn Fn(PathBuf) -> PathBuf,
) -> Result<StoreKind, ConfigError> {
    let store = match raw.kind.as_deref().unwrap_or("fjall") {
        "fjall" => {
            if raw.url.is_some() {
                return Err(err("store.url", "is only for `kind = \"postgres\"`"));
            }
            if raw.ca.is_some() {
                return Err(err("store.ca", "is only for `kind = \"postgres\"`"));
            }
            if raw.witness_interval.is_some() {
                return Err(err(
                    "store.witness_interval",
                    "is only for `kind = \"postgres\"` (fjall keeps one chain)",
                ));
            }
            StoreKind::Fjall
        }
        "postgres" => {
            let Some(url) = raw.url.as_deref() else {
                return Err(err(
                    "store.url",
                    "is required with `kind = \"postgres\"` (e.g. `env:AIRLOCK_DATABASE_URL`)",
                ));
            };
            let url = secret("store.url", url)?;
            let instance = match raw.instance {
                Some(i) => {
                    let i = secret("store.instance", &i)?;
                    if i.trim().is_empty() {
                        return Err(err("store.instance", "must not be empty"));
                    }
                    if i.chars().any(char::is_control) || i.len() > 200 {
                        return Err(err(
                            "store.instance",
                            "names this gateway's audit chain: at most 200 bytes, no control characters",
                        ));
                    }
                    i
                }
                None => default_instance(data_dir),
            };
            StoreKind::Postgres {
                url,
                instance,
                ca: raw.ca.map(resolve),
                witness_interval: super::positive(
                    "store.witness_interval",
                    raw.witness_interval.as_deref(),
                    std::time::Duration::from_secs(5),
                )?,
            }
        }
        other => {
            return Err(err(
                "store.kind",
                format!("`{other}` must be `fjall` or `postgres`"),
            ))
        }
    };
    Ok(store)
}
