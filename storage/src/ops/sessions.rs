//! Small durable state beside the calls: inbox sessions, one-time marks (spent once, swept
//! when their time has passed), notes kept until a deadline (where an approval's Slack
//! message is, the groups an issuer's principal signed in with) and the gateway's named
//! secrets, created once.

use serde_json::{json, Map, Value};

use crate::audit::Kind;
use crate::error::StoreError;
use crate::keys::Ks;
use crate::model::Millis;
use crate::Store;

use super::{fields, get, put};

/// The bytes of a stored `{"hex": …}` secret.
fn hex_field(v: &Value) -> Result<Vec<u8>, StoreError> {
    let hex = v
        .get("hex")
        .and_then(Value::as_str)
        .ok_or_else(|| StoreError::Corrupt("a stored secret has no `hex`".into()))?;
    (0..hex.len())
        .step_by(2)
        .map(|i| {
            hex.get(i..i + 2)
                .and_then(|h| u8::from_str_radix(h, 16).ok())
                .ok_or_else(|| StoreError::Corrupt("a stored secret is not hex".into()))
        })
        .collect()
}

/// Where notes ([`Store::put_note`]) live among the settings.
const NOTE_PREFIX: &str = "note.";

impl Store {
    /// The named secret, created from `fresh` (random bytes the caller drew) on first use and
    /// durable from then on: the same bytes after a restart.
    pub fn secret(&self, name: &str, fresh: Vec<u8>, now: Millis) -> Result<Vec<u8>, StoreError> {
        let key = format!("secret.{name}");
        if let Some(v) = self.read::<Value>(Ks::Settings, key.as_bytes())? {
            return hex_field(&v);
        }
        let name = name.to_owned();
        self.writer.submit(move |tx| {
            if let Some(v) = get::<Value>(tx, Ks::Settings, key.as_bytes())? {
                return hex_field(&v);
            }
            let hex: String = fresh.iter().map(|b| format!("{b:02x}")).collect();
            put(
                tx,
                Ks::Settings,
                key.as_bytes(),
                &json!({"hex": hex, "created_at": now}),
            )?;
            tx.audit(now, Kind::SecretCreated, fields(json!({"name": name})));
            Ok(fresh)
        })
    }

    /// Spends a single-use token (durably): true the first time, false ever after.
    /// The mark is kept until `keep_until` (when what the token unlocks has expired anyway),
    /// then [`Store::sweep_settings`] drops it.
    pub fn spend_once(
        &self,
        token: &str,
        keep_until: Millis,
        now: Millis,
    ) -> Result<bool, StoreError> {
        let key = format!("spent.{token}");
        self.writer.submit(move |tx| {
            if get::<Value>(tx, Ks::Settings, key.as_bytes())?.is_some() {
                return Ok(false);
            }
            put(
                tx,
                Ks::Settings,
                key.as_bytes(),
                &json!({"at": now, "keep_until": keep_until}),
            )?;
            Ok(true)
        })
    }

    /// Drops what has outlived its use from the settings: spent tokens past their
    /// `keep_until`, and sessions and MCP tasks past their `expires_at`. Returns how many went.
    pub fn sweep_settings(&self, now: Millis) -> Result<usize, StoreError> {
        self.writer.submit(move |tx| {
            let mut gone = 0;
            for (prefix, field) in [
                ("session.", "expires_at"),
                ("spent.", "keep_until"),
                (NOTE_PREFIX, "expires_at"),
                (super::tasks::TASK_PREFIX, "expires_at"),
            ] {
                for key in tx.committed_keys_from(Ks::Settings, prefix.as_bytes(), 10_000)? {
                    if !key.starts_with(prefix.as_bytes()) {
                        break;
                    }
                    let Some(v) = get::<Value>(tx, Ks::Settings, &key)? else {
                        continue;
                    };
                    if v.get(field)
                        .and_then(Value::as_u64)
                        .is_some_and(|t| t < now)
                    {
                        tx.delete(Ks::Settings, key);
                        gone += 1;
                    }
                }
            }
            Ok(gone)
        })
    }

    /// Keeps `value` under `key` until `expires_at`, replacing what was there; then
    /// [`Store::sweep_settings`] drops it. No audit record: a note is a convenience the
    /// gateway can do without (the audit log has what happened).
    pub fn put_note(&self, key: &str, value: Value, expires_at: Millis) -> Result<(), StoreError> {
        let key = format!("{NOTE_PREFIX}{key}");
        self.writer.submit(move |tx| {
            put(
                tx,
                Ks::Settings,
                key.as_bytes(),
                &json!({"value": value, "expires_at": expires_at}),
            )
        })
    }

    /// The note under `key`, unless it has expired at `now`.
    pub fn note(&self, key: &str, now: Millis) -> Result<Option<Value>, StoreError> {
        let stored: Option<Value> =
            self.read(Ks::Settings, format!("{NOTE_PREFIX}{key}").as_bytes())?;
        Ok(stored.and_then(|mut v| {
            let live = v
                .get("expires_at")
                .and_then(Value::as_u64)
                .is_some_and(|t| t >= now);
            live.then(|| v["value"].take())
        }))
    }

    /// Stores a sign-in session under `key` (the caller passes a hash of the session's secret,
    /// never the secret), durably, with its audit record.
    pub fn put_session(
        &self,
        key: &str,
        session: Value,
        audit_kind: Kind,
        audit: Map<String, Value>,
        now: Millis,
    ) -> Result<(), StoreError> {
        let key = format!("session.{key}");
        self.writer.submit(move |tx| {
            put(tx, Ks::Settings, key.as_bytes(), &session)?;
            tx.audit(now, audit_kind, audit);
            Ok(())
        })
    }

    /// A session stored by [`Store::put_session`].
    pub fn session(&self, key: &str) -> Result<Option<Value>, StoreError> {
        self.read(Ks::Settings, format!("session.{key}").as_bytes())
    }

    /// Ends a session (sign-out), durably, with its audit record.
    pub fn delete_session(
        &self,
        key: &str,
        audit: Map<String, Value>,
        now: Millis,
    ) -> Result<(), StoreError> {
        let key = format!("session.{key}");
        self.writer.submit(move |tx| {
            tx.delete(Ks::Settings, key.into_bytes());
            tx.audit(now, Kind::InboxSignedOut, audit);
            Ok(())
        })
    }
}
