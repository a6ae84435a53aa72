//! The on-disk layout: keyspace names, key encodings and the versioned value codec.
//!
//! Every value is JSON with a format version `"v"`, so a later release can migrate it; a value
//! with an unknown version is refused as `store.corrupt`, never guessed at. Keys that must sort
//! by time or sequence start with a big-endian integer.

use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::Value;

use crate::error::StoreError;

/// The format version written into every value.
pub const FORMAT_VERSION: u64 = 1;

/// The keyspaces, in one enum so a staged write names its target without a handle.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Ks {
    /// approval id → [`crate::Approval`]
    Approvals,
    /// `{field}\0{value}\0{id}` → empty: approval listing indexes (`a`ll, `s`tatus, `t`ool,
    /// `r`un id, `p`rincipal), calls e`x`ecuting, calls `S`uspended by run, and a run's audit
    /// records (`e`, by seq).
    ApprovalIndex,
    /// `{fingerprint}\0{scope key}` → [`crate::Grant`]
    Grants,
    /// call id → [`crate::CallRecord`]; a call that has ended keeps the record it ran with
    /// (status `executing`), and how it ended is in `CallEnds`
    Calls,
    /// `{chain}\0{seq, u64 BE}` → audit record (canonical JSON, hash included): one chain per
    /// gateway, each in seq order ([`audit_key`])
    Audit,
    /// delivery id → [`crate::Delivery`]
    Outbox,
    /// due time (u64 BE) + delivery id → empty: pending and leased deliveries by due time
    OutboxDue,
    /// expiry time (u64 BE) + kind byte + id → empty: pending approvals and grants by expiry
    Expiry,
    /// `webhook.disabled.{id}` → why and when a webhook endpoint was disabled
    Settings,
    /// call id → [`crate::model::CallEnd`]: how an executing call ended, written apart so
    /// that finishing a call (most often an allowed one) does not write its record again.
    /// Every read of a call merges it in.
    CallEnds,
}

impl Ks {
    pub const ALL: [Ks; 10] = [
        Ks::Approvals,
        Ks::ApprovalIndex,
        Ks::Grants,
        Ks::Calls,
        Ks::Audit,
        Ks::Outbox,
        Ks::OutboxDue,
        Ks::Expiry,
        Ks::Settings,
        Ks::CallEnds,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Ks::Approvals => "approvals",
            Ks::ApprovalIndex => "approval_index",
            Ks::Grants => "grants",
            Ks::Calls => "calls",
            Ks::Audit => "audit",
            Ks::Outbox => "outbox",
            Ks::OutboxDue => "outbox_due",
            Ks::Expiry => "expiry",
            Ks::Settings => "settings",
            Ks::CallEnds => "call_ends",
        }
    }

    pub fn index(self) -> usize {
        self as usize
    }
}

/// A value with its format version, serialized in one pass (no intermediate JSON tree).
#[derive(Serialize)]
struct Versioned<'a, T> {
    v: u64,
    #[serde(flatten)]
    value: &'a T,
}

/// Serializes `value` (a struct, so a JSON object) with the format version.
pub fn encode<T: Serialize>(value: &T) -> Result<Vec<u8>, StoreError> {
    serde_json::to_vec(&Versioned {
        v: FORMAT_VERSION,
        value,
    })
    .map_err(|e| StoreError::Corrupt(e.to_string()))
}

/// Deserializes a value written by [`encode`], refusing unknown format versions.
pub fn decode<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, StoreError> {
    let mut v: Value =
        serde_json::from_slice(bytes).map_err(|e| StoreError::Corrupt(e.to_string()))?;
    match v.as_object_mut().and_then(|m| m.remove("v")) {
        Some(Value::Number(n)) if n.as_u64() == Some(FORMAT_VERSION) => {}
        other => {
            return Err(StoreError::Corrupt(format!(
                "unsupported value format version {other:?}"
            )))
        }
    }
    serde_json::from_value(v).map_err(|e| StoreError::Corrupt(e.to_string()))
}

/// `{field}\0{value}\0{id}`: one listing index entry.
pub fn index_key(field: u8, value: &str, id: &str) -> Vec<u8> {
    let mut k = index_prefix(field, value);
    k.extend_from_slice(id.as_bytes());
    k
}

/// The prefix of every index entry for `field` = `value`.
pub fn index_prefix(field: u8, value: &str) -> Vec<u8> {
    let mut k = Vec::with_capacity(value.len() + 40);
    k.push(field);
    k.push(0);
    k.extend_from_slice(value.as_bytes());
    k.push(0);
    k
}

pub fn grant_key(fingerprint: &str, scope_key: &str) -> Vec<u8> {
    let mut k = Vec::with_capacity(fingerprint.len() + scope_key.len() + 1);
    k.extend_from_slice(fingerprint.as_bytes());
    k.push(0);
    k.extend_from_slice(scope_key.as_bytes());
    k
}

/// A time- or sequence-ordered key: `at` big-endian, then `tail`.
pub fn timed_key(at: u64, tail: &[u8]) -> Vec<u8> {
    let mut k = Vec::with_capacity(8 + tail.len());
    k.extend_from_slice(&at.to_be_bytes());
    k.extend_from_slice(tail);
    k
}

/// Splits a [`timed_key`] back into its time and tail.
pub fn split_timed(key: &[u8]) -> Option<(u64, &[u8])> {
    let (at, tail) = key.split_at_checked(8)?;
    Some((u64::from_be_bytes(at.try_into().ok()?), tail))
}

/// Kinds of entries in the expiry index.
pub const EXPIRE_APPROVAL: u8 = b'a';
pub const EXPIRE_GRANT: u8 = b'g';
/// A suspended call (by call id).
pub const EXPIRE_SUSPENDED: u8 = b's';

/// Index field of a run's audit records: `e\0{run id}\0{chain}\0{seq, 20 digits}`.
pub const IDX_RUN_EVENT: u8 = b'e';

/// The index entry of audit record `seq` of `chain` under run `run`; seqs sort as numbers.
pub fn run_event_key(run: &str, chain: &str, seq: u64) -> Vec<u8> {
    let mut k = index_prefix(IDX_RUN_EVENT, run);
    k.extend_from_slice(chain.as_bytes());
    k.push(0);
    k.extend_from_slice(format!("{seq:020}").as_bytes());
    k
}

/// The chain and seq a [`run_event_key`] names, given its run's prefix.
pub fn split_run_event<'a>(key: &'a [u8], prefix: &[u8]) -> Option<(&'a str, u64)> {
    let rest = key.strip_prefix(prefix)?;
    let at = rest.iter().rposition(|b| *b == 0)?;
    let chain = std::str::from_utf8(&rest[..at]).ok()?;
    let seq = std::str::from_utf8(&rest[at + 1..]).ok()?.parse().ok()?;
    Some((chain, seq))
}

/// The key of record `seq` of audit chain `chain` (a chain name never holds a NUL).
pub fn audit_key(chain: &str, seq: u64) -> Vec<u8> {
    let mut k = chain_prefix(chain);
    k.extend_from_slice(&seq.to_be_bytes());
    k
}

/// The prefix of every record of `chain`.
pub fn chain_prefix(chain: &str) -> Vec<u8> {
    let mut k = Vec::with_capacity(chain.len() + 9);
    k.extend_from_slice(chain.as_bytes());
    k.push(0);
    k
}

/// The chain and seq an [`audit_key`] names; `None` for any other shape (the one-chain
/// layout before chains had names was the bare seq).
pub fn split_audit_key(key: &[u8]) -> Option<(&str, u64)> {
    let at = key.len().checked_sub(9)?;
    if key[at] != 0 || at == 0 {
        return None;
    }
    let chain = std::str::from_utf8(&key[..at]).ok()?;
    let seq = u64::from_be_bytes(key[at + 1..].try_into().ok()?);
    Some((chain, seq))
}

pub fn expiry_key(at: u64, kind: u8, id: &[u8]) -> Vec<u8> {
    let mut tail = Vec::with_capacity(1 + id.len());
    tail.push(kind);
    tail.extend_from_slice(id);
    timed_key(at, &tail)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_carry_their_format_version_and_unknown_ones_are_refused() {
        let bytes = encode(&serde_json::json!({"a": 1})).unwrap();
        let v: Value = serde_json::from_slice(&bytes).unwrap();
        assert_eq!(v["v"], FORMAT_VERSION);
        assert_eq!(
            decode::<Value>(&bytes).unwrap(),
            serde_json::json!({"a": 1})
        );
        for bad in [&br#"{"a":1,"v":2}"#[..], br#"{"a":1}"#, b"not json"] {
            assert_eq!(decode::<Value>(bad).unwrap_err().code(), "store.corrupt");
        }
    }

    #[test]
    fn a_call_record_leaves_out_its_unset_fields_and_older_records_with_them_still_read() {
        use crate::model::CallRecord;
        // Read with only the fields a call always has.
        let call: CallRecord = serde_json::from_value(serde_json::json!({
            "call_id": "call_1", "tool": "t", "args": {"n": 1}, "fingerprint": "sha256:00",
            "requester": {"id": "agent", "role": "agent"}, "context": {}, "decision": "allow",
            "status": "executing", "created_at": 1, "updated_at": 1,
        }))
        .unwrap();
        let bytes = encode(&call).unwrap();
        let text = String::from_utf8(bytes.clone()).unwrap();
        for unset in ["approval_id", "reason", "edited", "run_by", "outcome"] {
            assert!(!text.contains(unset), "{unset} written in {text}");
        }
        assert_eq!(decode::<CallRecord>(&bytes).unwrap(), call);
        // As records were written before: every field present, unset ones null or false.
        let mut old: Value = serde_json::from_slice(&bytes).unwrap();
        for (k, v) in [
            ("approval_id", Value::Null),
            ("reason", Value::Null),
            ("edited", Value::Bool(false)),
            ("run_by", Value::Null),
            ("outcome", Value::Null),
        ] {
            old[k] = v;
        }
        let old = serde_json::to_vec(&old).unwrap();
        assert_eq!(decode::<CallRecord>(&old).unwrap(), call);
        // A set field is written.
        let approved = CallRecord {
            approval_id: Some("apr_1".into()),
            edited: true,
            granted: false,
            ..call
        };
        let back = decode::<CallRecord>(&encode(&approved).unwrap()).unwrap();
        assert_eq!(back, approved);
    }

    #[test]
    fn audit_keys_sort_by_chain_then_seq_and_split_back() {
        let a = audit_key("gw-a", 255);
        let b = audit_key("gw-a", 256);
        let c = audit_key("gw-b", 1);
        assert!(a < b && b < c);
        assert_eq!(split_audit_key(&b), Some(("gw-a", 256)));
        // The layout before chains had names: the bare seq.
        assert_eq!(split_audit_key(&7u64.to_be_bytes()), None);
        let prefix = index_prefix(IDX_RUN_EVENT, "run-1");
        let e = run_event_key("run-1", "host:/data", 42);
        assert_eq!(split_run_event(&e, &prefix), Some(("host:/data", 42)));
        assert!(run_event_key("r", "a", 9) < run_event_key("r", "a", 10));
    }

    #[test]
    fn timed_keys_sort_by_time() {
        let a = expiry_key(5, EXPIRE_APPROVAL, b"zzz");
        let b = expiry_key(256, EXPIRE_APPROVAL, b"aaa");
        assert!(a < b);
        // The tail is the kind byte (`a`) and the id.
        assert_eq!(split_timed(&b), Some((256, &b"aaaa"[..])));
    }
}
