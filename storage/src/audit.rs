//! The tamper-evident audit chain (DESIGN §9): building records, verifying a sequence of them,
//! and redacting args in the audit copy.
//!
//! A record is a JSON object with `seq`, `prev_hash`, `ts`, `kind`, `v` and event fields, plus
//! `hash = SHA-256(prev_hash + JCS(record without hash))` in lower-case hex. Records are stored
//! and exported as their canonical JSON, one per line in an export.
//!
//! Verification needs nothing but the records: it runs on the live store and on an exported
//! file alike. It detects any edited, deleted, inserted or reordered record. It cannot detect
//! the loss of the newest records from the end of a file, and a chain without an outside anchor
//! can be rewritten whole by someone who can rewrite every record: compare the last hash with
//! a copy kept elsewhere for that.

use serde_json::{Map, Value};
use sha2::{Digest, Sha256};

use crate::keys::FORMAT_VERSION;

airlock_policy::stable_names! {
    /// What an audit record records: its `kind` (DESIGN §9). Every record the gateway and the
    /// store write has one of these; verification does not need them, so a chain written by a
    /// newer binary with kinds this one does not know still verifies.
    pub enum Kind {
        // A call's life.
        CallDecided = "call.decided",
        CallRejected = "call.rejected",
        CallAttached = "call.attached",
        CallStarted = "call.started",
        CallCompleted = "call.completed",
        CallFailed = "call.failed",
        CallCancelled = "call.cancelled",
        CallExpired = "call.expired",
        CallSuspended = "call.suspended",
        CallResumed = "call.resumed",
        CallResumeDenied = "call.resume_denied",
        // Approvals and grants.
        ApprovalRequested = "approval.requested",
        ApprovalDecided = "approval.decided",
        ApprovalExpired = "approval.expired",
        GrantConsumed = "grant.consumed",
        GrantExpired = "grant.expired",
        // Webhook deliveries.
        WebhookDelivered = "webhook.delivered",
        WebhookDead = "webhook.dead",
        WebhookDisabled = "webhook.disabled",
        WebhookEnabled = "webhook.enabled",
        WebhookDecisionRefused = "webhook.decision_refused",
        // Principals and sign-in.
        PrincipalLimited = "principal.limited",
        InboxSignedIn = "inbox.signed_in",
        InboxSignedOut = "inbox.signed_out",
        // MCP: an upstream's input request relayed to the client, or the answer relayed back;
        // a task made for a call (DESIGN §15).
        McpRelayed = "mcp.relayed",
        McpTaskCreated = "mcp.task_created",
        // The gateway and its log.
        PolicyLoaded = "policy.loaded",
        SecretCreated = "secret.created",
        AuditPruned = "audit.pruned",
    }
}

/// The `prev_hash` of the first record.
pub const GENESIS: &str = "0000000000000000000000000000000000000000000000000000000000000000";

/// Builds record `seq` after `prev_hash`; returns its canonical bytes and its hash.
pub fn seal(
    seq: u64,
    prev_hash: &str,
    ts: u64,
    kind: Kind,
    mut fields: Map<String, Value>,
) -> (Vec<u8>, String) {
    fields.insert("seq".into(), Value::from(seq));
    fields.insert("prev_hash".into(), Value::from(prev_hash));
    fields.insert("ts".into(), Value::from(ts));
    fields.insert("kind".into(), Value::from(kind.as_str()));
    fields.insert("v".into(), Value::from(FORMAT_VERSION));
    // The hash covers the canonical record without it; the stored bytes are the canonical
    // record with it, spliced in where canonical order puts it (one pass, not two).
    let mut bytes = Vec::with_capacity(768);
    let mut hash = String::new();
    airlock_policy::write_canonical_with(
        &fields,
        "hash",
        |canonical| {
            hash = hash_canonical(prev_hash, canonical);
            hash.clone()
        },
        &mut bytes,
    );
    (bytes, hash)
}

fn hash_of(prev_hash: &str, record_without_hash: &Value) -> String {
    let mut canonical = Vec::with_capacity(512);
    airlock_policy::write_canonical(record_without_hash, &mut canonical);
    hash_canonical(prev_hash, &canonical)
}

/// SHA-256 over the previous hash and a record's canonical bytes (without its own hash), hex.
fn hash_canonical(prev_hash: &str, canonical: &[u8]) -> String {
    let mut h = Sha256::new();
    h.update(prev_hash.as_bytes());
    h.update(canonical);
    airlock_policy::hex(&h.finalize())
}

/// Replaces each JSON pointer of `pointers` found in `args` with `"[redacted]"`.
pub fn redact(args: &Value, pointers: &[String]) -> Value {
    let mut copy = args.clone();
    for p in pointers {
        if let Some(v) = copy.pointer_mut(p) {
            *v = Value::from("[redacted]");
        }
    }
    copy
}

/// The first place a chain is broken.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("audit chain broken at seq {seq}: {reason}")]
pub struct ChainError {
    /// The seq where verification failed: the record that is wrong, or the one that is
    /// missing.
    pub seq: u64,
    pub reason: String,
}

/// What a verified chain holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChainSummary {
    pub records: u64,
    pub first_seq: u64,
    pub last_seq: u64,
    pub last_hash: String,
}

/// A record checked on its own: its self-hash is right.
struct Checked {
    seq: u64,
    prev_hash: String,
    hash: String,
}

/// Checks one record's own hash; `position_seq` names it in errors when its seq is unreadable.
fn check_one(bytes: &[u8], position_seq: u64) -> Result<Checked, ChainError> {
    let bad = |reason: String| ChainError {
        seq: position_seq,
        reason,
    };
    let mut record: Value =
        serde_json::from_slice(bytes).map_err(|e| bad(format!("not JSON: {e}")))?;
    let map = record
        .as_object_mut()
        .ok_or_else(|| bad("not a JSON object".into()))?;
    let hash = match map.remove("hash") {
        Some(Value::String(h)) => h,
        _ => return Err(bad("no `hash`".into())),
    };
    let seq = map
        .get("seq")
        .and_then(Value::as_u64)
        .ok_or_else(|| bad("no `seq`".into()))?;
    let prev_hash = map
        .get("prev_hash")
        .and_then(Value::as_str)
        .ok_or_else(|| ChainError {
            seq,
            reason: "no `prev_hash`".into(),
        })?
        .to_owned();
    if hash_of(&prev_hash, &record) != hash {
        return Err(ChainError {
            seq,
            reason: "hash does not match the record's contents".into(),
        });
    }
    Ok(Checked {
        seq,
        prev_hash,
        hash,
    })
}

/// Verifies records in order. A chain that starts at seq 1 must start from [`GENESIS`]; one
/// that starts later (an export with `--after`) is anchored at its first record's `prev_hash`.
///
/// Self-hashes are checked on all cores in chunks; the links between records are checked in
/// order, so the error names the first bad seq.
pub fn verify<I, E>(records: I) -> Result<ChainSummary, ChainError>
where
    I: IntoIterator<Item = Result<Vec<u8>, E>>,
    E: std::fmt::Display,
{
    verify_from(records, None)
}

/// [`verify`], with the chain required to start right after `anchor` (the seq and hash of the
/// record before the first one): the genesis `(0, 64 zeros)` for a whole store, or a prune's
/// checkpoint. Without an anchor a chain may start at any seq (an export made with `--after`),
/// and only a chain starting at seq 1 is tied to the genesis.
pub fn verify_from<I, E>(
    records: I,
    anchor: Option<(u64, &str)>,
) -> Result<ChainSummary, ChainError>
where
    I: IntoIterator<Item = Result<Vec<u8>, E>>,
    E: std::fmt::Display,
{
    const CHUNK: usize = 8192;
    let threads = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .clamp(1, 8);
    let mut summary: Option<ChainSummary> = None;
    let mut iter = records.into_iter();
    loop {
        let mut chunk = Vec::with_capacity(CHUNK);
        for item in iter.by_ref().take(CHUNK) {
            let next_seq = summary.as_ref().map_or(1, |s| s.last_seq + 1) + chunk.len() as u64;
            chunk.push(item.map_err(|e| ChainError {
                seq: next_seq,
                reason: format!("cannot read the record: {e}"),
            })?);
        }
        if chunk.is_empty() {
            break;
        }
        let base = summary.as_ref().map_or(1, |s| s.last_seq + 1);
        let per = chunk.len().div_ceil(threads);
        let checked: Vec<Result<Checked, ChainError>> = std::thread::scope(|scope| {
            let handles: Vec<_> = chunk
                .chunks(per)
                .enumerate()
                .map(|(part, records)| {
                    scope.spawn(move || {
                        records
                            .iter()
                            .enumerate()
                            .map(|(i, r)| check_one(r, base + (part * per + i) as u64))
                            .collect::<Vec<_>>()
                    })
                })
                .collect();
            handles
                .into_iter()
                .flat_map(|h| {
                    h.join().unwrap_or_else(|_| {
                        vec![Err(ChainError {
                            seq: base,
                            reason: "verifier thread failed".into(),
                        })]
                    })
                })
                .collect()
        });
        for c in checked {
            let c = c?;
            summary = Some(match summary {
                None => {
                    if let Some((seq, hash)) = anchor {
                        if c.seq != seq + 1 || c.prev_hash != hash {
                            return Err(ChainError {
                                seq: seq + 1,
                                reason: format!(
                                    "the chain must start at seq {} after {}; found seq {} (records were removed or the checkpoint does not match)",
                                    seq + 1,
                                    if seq == 0 { "the genesis".to_owned() } else { format!("the checkpoint at seq {seq}") },
                                    c.seq
                                ),
                            });
                        }
                    }
                    if c.seq == 1 && c.prev_hash != GENESIS {
                        return Err(ChainError {
                            seq: 1,
                            reason: "the first record's prev_hash is not 64 zeros".into(),
                        });
                    }
                    ChainSummary {
                        records: 1,
                        first_seq: c.seq,
                        last_seq: c.seq,
                        last_hash: c.hash,
                    }
                }
                Some(s) => {
                    if c.seq != s.last_seq + 1 {
                        return Err(ChainError {
                            seq: s.last_seq + 1,
                            reason: format!(
                                "expected seq {} after {}, found seq {}",
                                s.last_seq + 1,
                                s.last_seq,
                                c.seq
                            ),
                        });
                    }
                    if c.prev_hash != s.last_hash {
                        return Err(ChainError {
                            seq: c.seq,
                            reason: "prev_hash does not match the previous record's hash".into(),
                        });
                    }
                    ChainSummary {
                        records: s.records + 1,
                        first_seq: s.first_seq,
                        last_seq: c.seq,
                        last_hash: c.hash,
                    }
                }
            });
        }
    }
    Ok(summary.unwrap_or(ChainSummary {
        records: 0,
        first_seq: 0,
        last_seq: 0,
        last_hash: GENESIS.to_owned(),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chain(n: u64) -> Vec<Vec<u8>> {
        let mut prev = GENESIS.to_owned();
        (1..=n)
            .map(|seq| {
                let mut f = Map::new();
                f.insert("call_id".into(), Value::from(format!("c{seq}")));
                let (bytes, hash) = seal(seq, &prev, 1000 + seq, Kind::CallDecided, f);
                prev = hash;
                bytes
            })
            .collect()
    }

    fn run(records: &[Vec<u8>]) -> Result<ChainSummary, ChainError> {
        verify(records.iter().cloned().map(Ok::<_, String>))
    }

    #[test]
    fn every_kind_reads_back_as_itself_and_no_other_text_is_a_kind() {
        for kind in Kind::ALL {
            assert_eq!(Kind::parse(kind.as_str()), Some(*kind));
        }
        let mut texts: Vec<&str> = Kind::ALL.iter().map(|k| k.as_str()).collect();
        texts.sort_unstable();
        texts.dedup();
        assert_eq!(texts.len(), Kind::ALL.len(), "two kinds share a spelling");
        for text in [
            "",
            "call",
            "call.Completed",
            "call.completed ",
            "webhook.pending",
        ] {
            assert_eq!(Kind::parse(text), None, "{text:?}");
        }
    }

    #[test]
    fn an_intact_chain_verifies() {
        let s = run(&chain(20_000)).unwrap();
        assert_eq!((s.records, s.first_seq, s.last_seq), (20_000, 1, 20_000));
        assert_eq!(run(&[]).unwrap().records, 0);
    }

    #[test]
    fn edits_deletions_swaps_and_truncations_name_the_first_bad_seq() {
        let good = chain(50);
        let mut edited = good.clone();
        let text = String::from_utf8(edited[9].clone())
            .unwrap()
            .replace("c10", "c99");
        edited[9] = text.into_bytes();
        assert_eq!(run(&edited).unwrap_err().seq, 10);

        let mut flipped = good.clone();
        let last = flipped[30].len() - 3;
        flipped[30][last] ^= 0x01;
        assert_eq!(run(&flipped).unwrap_err().seq, 31);

        let mut deleted = good.clone();
        deleted.remove(20);
        assert_eq!(run(&deleted).unwrap_err().seq, 21);

        let mut swapped = good.clone();
        swapped.swap(5, 6);
        assert_eq!(run(&swapped).unwrap_err().seq, 6);

        let mut truncated = good.clone();
        truncated.drain(10..40);
        assert_eq!(run(&truncated).unwrap_err().seq, 11);

        // A tail starting later is anchored at its own first record.
        assert_eq!(run(&good[25..]).unwrap().first_seq, 26);
    }

    #[test]
    fn redaction_replaces_pointers_only_in_the_copy() {
        let args = serde_json::json!({"user": "a", "password": "p", "card": {"number": "4111"}});
        let r = redact(
            &args,
            &["/password".into(), "/card/number".into(), "/absent".into()],
        );
        assert_eq!(
            r,
            serde_json::json!({"user": "a", "password": "[redacted]", "card": {"number": "[redacted]"}})
        );
        assert_eq!(args["password"], "p");
    }
}
