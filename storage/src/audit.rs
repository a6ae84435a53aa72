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
        ApprovalTightened = "approval.tightened",
        // A principal's approvals beyond ten a minute, notified as one summary (DESIGN §23).
        ApprovalSummary = "approval.summary",
        GrantConsumed = "grant.consumed",
        GrantExpired = "grant.expired",
        GrantRevoked = "grant.revoked",
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
        // An MCP request other than a tool call (a resource read or subscription, a prompt, a
        // completion) decided by policy before it reached its upstream.
        RequestDecided = "request.decided",
        // An upstream's credential airlock could not get for an allowed call (a token
        // endpoint's refusal, with its error code; no subject for a token exchange).
        CredentialRefused = "credential.refused",
        // MCP tool definitions (DESIGN §20): pinned when first seen, a change seen and held
        // for review, the review withdrawn (the upstream went back, or changed again), and a
        // reviewed definition pinned.
        ToolPinned = "tool.pinned",
        ToolDefinitionChanged = "tool.definition_changed",
        ToolReviewWithdrawn = "tool.review_withdrawn",
        ToolRepinned = "tool.repinned",
        // The gateway and its log: a chain's witness of the others' heads (DESIGN §17).
        ChainWitness = "chain.witness",
        PolicyLoaded = "policy.loaded",
        SecretCreated = "secret.created",
        AuditPruned = "audit.pruned",
    }
}

/// The `prev_hash` of the first record.
pub const GENESIS: &str = "0000000000000000000000000000000000000000000000000000000000000000";

/// Builds record `seq` of `chain` after `prev_hash`; returns its canonical bytes and its hash.
pub fn seal(
    chain: &str,
    seq: u64,
    prev_hash: &str,
    ts: u64,
    kind: Kind,
    mut fields: Map<String, Value>,
) -> (Vec<u8>, String) {
    fields.insert("chain".into(), Value::from(chain));
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
#[error("audit chain broken at seq {seq}: {reason}{}", chain_note(.chain))]
pub struct ChainError {
    /// The chain the error is in (empty for records written before chains had names).
    pub chain: String,
    /// The seq where verification failed: the record that is wrong, or the one that is
    /// missing.
    pub seq: u64,
    pub reason: String,
}

fn chain_note(chain: &str) -> String {
    if chain.is_empty() {
        String::new()
    } else {
        format!(" (chain {chain})")
    }
}

/// What one verified chain holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChainSummary {
    pub records: u64,
    pub first_seq: u64,
    pub last_seq: u64,
    pub last_hash: String,
}

/// What a verified log holds: each chain, by name, and how many witness records were checked
/// against the chains they name (DESIGN §17).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct AuditSummary {
    pub chains: Vec<(String, ChainSummary)>,
    pub witnesses: u64,
}

impl AuditSummary {
    /// Records in every chain.
    pub fn records(&self) -> u64 {
        self.chains.iter().map(|(_, c)| c.records).sum()
    }
}

/// A record checked on its own: its self-hash is right.
struct Checked {
    chain: String,
    seq: u64,
    prev_hash: String,
    hash: String,
    /// Whether it is a `chain.witness` record, and its view of other chains: (chain, seq,
    /// hash).
    witness: bool,
    saw: Vec<(String, u64, String)>,
}

/// Checks one record's own hash; `position_seq` names it in errors when its seq is unreadable.
fn check_one(bytes: &[u8], position_seq: u64) -> Result<Checked, ChainError> {
    let bad = |reason: String| ChainError {
        chain: String::new(),
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
    let chain = map
        .get("chain")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned();
    let seq = map
        .get("seq")
        .and_then(Value::as_u64)
        .ok_or_else(|| bad("no `seq`".into()))?;
    let fail = |reason: &str| ChainError {
        chain: chain.clone(),
        seq,
        reason: reason.into(),
    };
    let prev_hash = map
        .get("prev_hash")
        .and_then(Value::as_str)
        .ok_or_else(|| fail("no `prev_hash`"))?
        .to_owned();
    let mut saw = Vec::new();
    let witness = map.get("kind").and_then(Value::as_str) == Some(Kind::ChainWitness.as_str());
    if witness {
        let heads = map
            .get("heads")
            .and_then(Value::as_object)
            .ok_or_else(|| fail("a witness without `heads`"))?;
        for (other, head) in heads {
            let (Some(at), Some(h)) = (
                head.get("seq").and_then(Value::as_u64),
                head.get("hash").and_then(Value::as_str),
            ) else {
                return Err(fail("a witness head without `seq` and `hash`"));
            };
            saw.push((other.clone(), at, h.to_owned()));
        }
    }
    if hash_of(&prev_hash, &record) != hash {
        return Err(fail("hash does not match the record's contents"));
    }
    Ok(Checked {
        chain,
        seq,
        prev_hash,
        hash,
        witness,
        saw,
    })
}

/// Verifies records in order. A chain that starts at seq 1 must start from [`GENESIS`]; one
/// that starts later (an export with `--after`) is anchored at its first record's `prev_hash`.
/// Records of several chains may come interleaved (an export orders them by time); each
/// chain is checked on its own, then every witness against the chains it names.
pub fn verify<I, E>(records: I) -> Result<AuditSummary, ChainError>
where
    I: IntoIterator<Item = Result<Vec<u8>, E>>,
    E: std::fmt::Display,
{
    let mut v = Verifier::default();
    v.push_all(records)?;
    v.finish()
}

/// Checks records as they come, chain by chain, and the witnesses at the end. Self-hashes
/// are checked on all cores in chunks; the links between records in order, so an error names
/// the first bad seq of its chain.
#[derive(Default)]
pub(crate) struct Verifier {
    /// Where each chain must start (the genesis, or a prune's checkpoint): with anchors, a
    /// chain missing its first records is caught.
    anchors: std::collections::BTreeMap<String, (u64, String)>,
    chains: std::collections::BTreeMap<String, ChainSummary>,
    /// Every record's hash, by chain and seq, for the witnesses to be checked against.
    hashes: std::collections::HashMap<(String, u64), [u8; 32]>,
    /// What witnesses saw: (witness chain, witness seq, chain seen, its seq, its hash).
    claims: Vec<(String, u64, String, u64, String)>,
    /// How many of `claims` were read before every chain was read again (see
    /// [`Verifier::settle`]); `None` until then: all are checked.
    settled: Option<usize>,
    witnesses: u64,
}

impl Verifier {
    /// A verifier of a whole store: each chain must start right after its anchor.
    pub(crate) fn anchored(anchors: std::collections::BTreeMap<String, (u64, String)>) -> Self {
        Verifier {
            anchors,
            ..Verifier::default()
        }
    }

    pub(crate) fn push_all<I, E>(&mut self, records: I) -> Result<(), ChainError>
    where
        I: IntoIterator<Item = Result<Vec<u8>, E>>,
        E: std::fmt::Display,
    {
        const CHUNK: usize = 8192;
        let threads = std::thread::available_parallelism()
            .map_or(1, |n| n.get())
            .clamp(1, 8);
        let mut iter = records.into_iter();
        let mut read = 0u64;
        loop {
            let mut chunk = Vec::with_capacity(CHUNK);
            for item in iter.by_ref().take(CHUNK) {
                read += 1;
                chunk.push(item.map_err(|e| ChainError {
                    chain: String::new(),
                    seq: read,
                    reason: format!("cannot read record {read}: {e}"),
                })?);
            }
            if chunk.is_empty() {
                return Ok(());
            }
            let base = read - chunk.len() as u64 + 1;
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
                                chain: String::new(),
                                seq: base,
                                reason: "verifier thread failed".into(),
                            })]
                        })
                    })
                    .collect()
            });
            for c in checked {
                self.link(c?)?;
            }
        }
    }

    /// Links a checked record to the one before it in its chain.
    fn link(&mut self, c: Checked) -> Result<(), ChainError> {
        let fail = |seq: u64, reason: String| ChainError {
            chain: c.chain.clone(),
            seq,
            reason,
        };
        // Records written before chains had names, and the named chain that continues them
        // (the log of a store that moved to one chain per gateway): one chain.
        if !c.chain.is_empty() && !self.chains.contains_key(&c.chain) {
            let continues = self
                .chains
                .get("")
                .is_some_and(|old| old.last_seq + 1 == c.seq && old.last_hash == c.prev_hash);
            if continues {
                if let Some(old) = self.chains.remove("") {
                    let moved: Vec<_> = self
                        .hashes
                        .keys()
                        .filter(|(chain, _)| chain.is_empty())
                        .cloned()
                        .collect();
                    for key in moved {
                        if let Some(h) = self.hashes.remove(&key) {
                            self.hashes.insert((c.chain.clone(), key.1), h);
                        }
                    }
                    self.chains.insert(c.chain.clone(), old);
                }
            }
        }
        let next = match self.chains.get(&c.chain) {
            None => {
                if let Some((seq, hash)) = self.anchors.get(&c.chain) {
                    if c.seq != seq + 1 || &c.prev_hash != hash {
                        return Err(fail(
                            seq + 1,
                            format!(
                                "the chain must start at seq {} after {}; found seq {} (records were removed or the checkpoint does not match)",
                                seq + 1,
                                if *seq == 0 { "the genesis".to_owned() } else { format!("the checkpoint at seq {seq}") },
                                c.seq
                            ),
                        ));
                    }
                }
                if c.seq == 1 && c.prev_hash != GENESIS {
                    return Err(fail(
                        1,
                        "the first record's prev_hash is not 64 zeros".into(),
                    ));
                }
                ChainSummary {
                    records: 1,
                    first_seq: c.seq,
                    last_seq: c.seq,
                    last_hash: c.hash.clone(),
                }
            }
            Some(s) => {
                if c.seq != s.last_seq + 1 {
                    return Err(fail(
                        s.last_seq + 1,
                        format!(
                            "expected seq {} after {}, found seq {}",
                            s.last_seq + 1,
                            s.last_seq,
                            c.seq
                        ),
                    ));
                }
                if c.prev_hash != s.last_hash {
                    return Err(fail(
                        c.seq,
                        "prev_hash does not match the previous record's hash".into(),
                    ));
                }
                ChainSummary {
                    records: s.records + 1,
                    first_seq: s.first_seq,
                    last_seq: c.seq,
                    last_hash: c.hash.clone(),
                }
            }
        };
        if let Some(bytes) = unhex32(&c.hash) {
            self.hashes.insert((c.chain.clone(), c.seq), bytes);
        }
        if c.witness {
            self.witnesses += 1;
        }
        for (other, seq, hash) in c.saw {
            self.claims.push((c.chain.clone(), c.seq, other, seq, hash));
        }
        self.chains.insert(c.chain, next);
        Ok(())
    }

    /// Where `chain` ends so far (`None`: no record of it yet).
    pub(crate) fn last_seq(&self, chain: &str) -> Option<u64> {
        self.chains.get(chain).map(|s| s.last_seq)
    }

    /// Marks the witnesses pushed so far as settled: the caller is about to read every chain
    /// again from where it ended, so every record they saw is read by then, whatever the
    /// gateways append meanwhile. A witness pushed after this (written while the store was
    /// being read) may have seen records appended after its chain was read: one that saw past
    /// a chain's end proves nothing, and is not held against it (one that saw a record that
    /// is there still must match its hash).
    pub(crate) fn settle(&mut self) {
        self.settled = Some(self.claims.len());
    }

    /// Checks every witness against the chain it names, and says what was verified. A chain a
    /// witness saw at seq N must reach seq N with the hash it saw: a chain cut short, or
    /// missing, is named with the witness that proves it.
    pub(crate) fn finish(self) -> Result<AuditSummary, ChainError> {
        for (i, (by, at, chain, seq, hash)) in self.claims.iter().enumerate() {
            let late = self.settled.is_some_and(|settled| i >= settled);
            let fail = |reason: String| ChainError {
                chain: chain.clone(),
                seq: *seq,
                reason,
            };
            let summary = self.chains.get(chain);
            if late && summary.is_none_or(|s| *seq > s.last_seq) {
                continue;
            }
            let Some(summary) = summary else {
                return Err(fail(format!(
                    "the chain is missing, but chain {by}'s witness at seq {at} saw it at seq {seq}"
                )));
            };
            if *seq < summary.first_seq {
                // Pruned (or exported after it): nothing left to compare.
                continue;
            }
            if *seq > summary.last_seq {
                return Err(fail(format!(
                    "the chain ends at seq {}, but chain {by}'s witness at seq {at} saw it at seq {seq}: its tail was cut",
                    summary.last_seq
                )));
            }
            if self.hashes.get(&(chain.clone(), *seq)).copied() != unhex32(hash) {
                return Err(fail(format!(
                    "record {seq} is not the one chain {by}'s witness at seq {at} saw (its hash differs)"
                )));
            }
        }
        Ok(AuditSummary {
            chains: self.chains.into_iter().collect(),
            witnesses: self.witnesses,
        })
    }
}

fn unhex32(text: &str) -> Option<[u8; 32]> {
    let mut out = [0u8; 32];
    if text.len() != 64 {
        return None;
    }
    for (i, b) in out.iter_mut().enumerate() {
        *b = u8::from_str_radix(text.get(2 * i..2 * i + 2)?, 16).ok()?;
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chain(n: u64) -> Vec<Vec<u8>> {
        named("a", n).into_iter().map(|(b, _)| b).collect()
    }

    /// `n` records of chain `name`, with their hashes.
    fn named(name: &str, n: u64) -> Vec<(Vec<u8>, String)> {
        let mut prev = GENESIS.to_owned();
        (1..=n)
            .map(|seq| {
                let mut f = Map::new();
                f.insert("call_id".into(), Value::from(format!("c{seq}")));
                let (bytes, hash) = seal(name, seq, &prev, 1000 + seq, Kind::CallDecided, f);
                prev = hash.clone();
                (bytes, hash)
            })
            .collect()
    }

    fn run(records: &[Vec<u8>]) -> Result<ChainSummary, ChainError> {
        let s = verify(records.iter().cloned().map(Ok::<_, String>))?;
        Ok(s.chains.into_iter().next().map_or(
            ChainSummary {
                records: 0,
                first_seq: 0,
                last_seq: 0,
                last_hash: GENESIS.to_owned(),
            },
            |(_, c)| c,
        ))
    }

    #[test]
    fn interleaved_chains_verify_apart_and_a_witness_catches_a_cut_tail() {
        let b = named("b", 6);
        // Chain a's third record witnesses chain b at seq 5.
        let mut a = named("a", 2);
        let mut f = Map::new();
        f.insert(
            "heads".into(),
            serde_json::json!({"b": {"seq": 5, "hash": b[4].1}}),
        );
        let witness = seal("a", 3, &a[1].1, 2000, Kind::ChainWitness, f);
        a.push(witness);
        let all = |b_len: usize| -> Vec<Vec<u8>> {
            let mut v: Vec<Vec<u8>> = Vec::new();
            for i in 0..6 {
                if i < a.len() {
                    v.push(a[i].0.clone());
                }
                if i < b_len {
                    v.push(b[i].0.clone());
                }
            }
            v
        };
        let s = verify(all(6).into_iter().map(Ok::<_, String>)).unwrap();
        assert_eq!(s.records(), 9);
        assert_eq!(s.witnesses, 1);
        assert_eq!(s.chains.len(), 2);
        assert_eq!(
            s.chains[1],
            (
                "b".to_owned(),
                ChainSummary {
                    records: 6,
                    first_seq: 1,
                    last_seq: 6,
                    last_hash: b[5].1.clone(),
                }
            )
        );
        // Chain b cut after seq 4: each chain links, but a's witness saw b at 5.
        let e = verify(all(4).into_iter().map(Ok::<_, String>)).unwrap_err();
        assert_eq!((e.chain.as_str(), e.seq), ("b", 5), "{e}");
        assert!(e.reason.contains("tail was cut"), "{e}");
        // A witness claiming another hash is caught too.
        let mut lying = all(6);
        let mut f = Map::new();
        f.insert(
            "heads".into(),
            serde_json::json!({"b": {"seq": 5, "hash": b[3].1}}),
        );
        lying[4] = seal("a", 3, &a[1].1, 2000, Kind::ChainWitness, f).0;
        let e = verify(lying.into_iter().map(Ok::<_, String>)).unwrap_err();
        assert_eq!((e.chain.as_str(), e.seq), ("b", 5), "{e}");
    }

    #[test]
    fn a_witness_written_while_the_chains_were_read_is_not_taken_for_a_cut_tail() {
        // Chain b is read (4 records); then b appends 5 and chain a witnesses it at 5; then a
        // is read, with that witness: what a live cluster's verify sees.
        let b = named("b", 5);
        let mut a = named("a", 1);
        let first = a[0].1.clone();
        let witness_of = |seq: usize, hash: &str| {
            let mut f = Map::new();
            f.insert(
                "heads".into(),
                serde_json::json!({"b": {"seq": seq, "hash": hash}}),
            );
            seal("a", 2, &first, 2000, Kind::ChainWitness, f)
        };
        a.push(witness_of(5, &b[4].1));
        let ok = |r: &[(Vec<u8>, String)]| {
            r.iter()
                .map(|(v, _)| Ok::<_, String>(v.clone()))
                .collect::<Vec<_>>()
        };
        let mut v = Verifier::anchored(Default::default());
        v.push_all(ok(&b[..4])).unwrap();
        v.push_all(ok(&a)).unwrap();
        // Read once, and not again: the witness is held against b, which ends at 4.
        let mut once = Verifier::anchored(Default::default());
        once.push_all(ok(&b[..4])).unwrap();
        once.push_all(ok(&a)).unwrap();
        once.settle();
        let e = once.finish().unwrap_err();
        assert!(e.reason.contains("tail was cut"), "{e}");
        // Read again from where each chain ended: b's fifth record is there, and the witness
        // of the first reading holds.
        v.settle();
        assert_eq!(v.last_seq("b"), Some(4));
        v.push_all(ok(&b[4..])).unwrap();
        assert_eq!(v.finish().unwrap().witnesses, 1);
        // A witness first read in the second reading that saw past a chain's end proves
        // nothing (the chain may have grown since it was read) ...
        let mut late = Verifier::anchored(Default::default());
        late.push_all(ok(&b[..4])).unwrap();
        late.push_all(ok(&a[..1])).unwrap();
        late.settle();
        late.push_all(ok(&a[1..])).unwrap();
        assert_eq!(late.finish().unwrap().witnesses, 1);
        // ... but one that saw a record that is there must match its hash.
        let mut lying = Verifier::anchored(Default::default());
        lying.push_all(ok(&b)).unwrap();
        lying.push_all(ok(&a[..1])).unwrap();
        lying.settle();
        lying.push_all(ok(&[witness_of(5, &b[3].1)])).unwrap();
        let e = lying.finish().unwrap_err();
        assert!(e.reason.contains("hash differs"), "{e}");
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
