//! The audit log as several chains (DESIGN §17): one per gateway, each gapless in its own
//! `seq`, read together.
//!
//! - [`Cursor`]: a position across every chain (the seq reached in each), what `GET /v1/audit`
//!   pages by and what run-stream event ids are. With one chain it is the plain seq.
//! - Reading: records after a cursor, merged by time then chain then seq, each chain in its
//!   own order, so a reader that goes on from the cursor it was given loses nothing and gets
//!   nothing twice, whichever gateway it asks.
//! - Proving: every chain from its genesis or its prune checkpoint, then every
//!   `chain.witness` record against the chain it saw, so a chain whose tail was cut is named.
//! - Witnessing: a gateway's record of the other chains' heads.
//! - Moving a store written before chains had names (the bare seq as key) into this layout:
//!   its records become the first chain's history.
//!
//! What it does not do: append records (the writer does, [`crate::writer::Tx::audit`]).

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

use serde_json::{json, Map, Value};

use crate::audit::{self, AuditSummary, ChainError, Kind, Verifier, GENESIS};
use crate::error::StoreError;
use crate::keys::{self, Ks};
use crate::kv::prefix_end;
use crate::writer::ChainHead;
use crate::{Millis, Store};

/// A position in the audit log: how far a reader has read each chain.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Cursor {
    /// A plain seq: of the only chain, or, once there are several, of the oldest one (the
    /// others began after it was handed out).
    Seq(u64),
    /// The seq reached in each chain; chains not named are read from their start.
    Heads(BTreeMap<String, u64>),
}

impl Default for Cursor {
    fn default() -> Self {
        Cursor::Seq(0)
    }
}

impl fmt::Display for Cursor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Cursor::Seq(n) => write!(f, "{n}"),
            Cursor::Heads(heads) => {
                let text = serde_json::to_string(heads).unwrap_or_default();
                f.write_str("c")?;
                for b in text.bytes() {
                    write!(f, "{b:02x}")?;
                }
                Ok(())
            }
        }
    }
}

impl FromStr for Cursor {
    type Err = String;

    fn from_str(text: &str) -> Result<Cursor, String> {
        let bad = || format!("`{text}` is not a position this log handed out");
        if let Ok(n) = text.parse::<u64>() {
            return Ok(Cursor::Seq(n));
        }
        let hex = text.strip_prefix('c').ok_or_else(bad)?;
        if !hex.len().is_multiple_of(2) || hex.len() > 16_384 {
            return Err(bad());
        }
        let bytes: Option<Vec<u8>> = (0..hex.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(hex.get(i..i + 2)?, 16).ok())
            .collect();
        let heads: BTreeMap<String, u64> =
            serde_json::from_slice(&bytes.ok_or_else(bad)?).map_err(|_| bad())?;
        Ok(Cursor::Heads(heads))
    }
}

/// One chain's records after a seq, read lazily, with the first one looked at.
struct Stream<'a> {
    chain: String,
    next: Option<(u64, u64, Value)>,
    rest: Box<dyn Iterator<Item = Result<crate::kv::Entry, StoreError>> + 'a>,
}

impl Stream<'_> {
    fn advance(&mut self) -> Result<(), StoreError> {
        self.next = match self.rest.next().transpose()? {
            None => None,
            Some((key, bytes)) => {
                let seq = keys::split_audit_key(&key).map_or(0, |(_, s)| s);
                let v: Value = serde_json::from_slice(&bytes)
                    .map_err(|e| StoreError::Corrupt(e.to_string()))?;
                let ts = v.get("ts").and_then(Value::as_u64).unwrap_or(0);
                Some((ts, seq, v))
            }
        };
        Ok(())
    }
}

impl Store {
    /// The name of every chain, in name order: one step per chain (a skip scan).
    pub fn chains(&self) -> Result<Vec<String>, StoreError> {
        self.shared.check()?;
        let mut out = Vec::new();
        let mut from = vec![1u8];
        while let Some((key, _)) = self.shared.backend.first_from(Ks::Audit, &from)? {
            let Some((chain, _)) = keys::split_audit_key(&key) else {
                return Err(StoreError::Corrupt("an audit key of no chain".into()));
            };
            let prefix = keys::chain_prefix(chain);
            out.push(chain.to_owned());
            match prefix_end(&prefix) {
                Some(end) => from = end,
                None => break,
            }
        }
        Ok(out)
    }

    /// This gateway's chain.
    pub fn chain(&self) -> &str {
        &self.shared.chain
    }

    /// The seq a cursor reached in each chain. A plain seq is the oldest chain's (the one
    /// whose first record is oldest): the others began after it was handed out.
    fn reached(
        &self,
        cursor: &Cursor,
        chains: &[String],
    ) -> Result<BTreeMap<String, u64>, StoreError> {
        let mut reached: BTreeMap<String, u64> = chains.iter().map(|c| (c.clone(), 0)).collect();
        match cursor {
            Cursor::Heads(heads) => {
                for (chain, seq) in heads {
                    reached.insert(chain.clone(), *seq);
                }
            }
            Cursor::Seq(0) => {}
            Cursor::Seq(n) => {
                let mut oldest: Option<(u64, &String)> = None;
                for chain in chains {
                    let first = self
                        .shared
                        .backend
                        .first_from(Ks::Audit, &keys::chain_prefix(chain))?;
                    let ts = first
                        .and_then(|(_, v)| serde_json::from_slice::<Value>(&v).ok())
                        .and_then(|v| v.get("ts").and_then(Value::as_u64))
                        .unwrap_or(u64::MAX);
                    if oldest.is_none_or(|(t, _)| ts < t) {
                        oldest = Some((ts, chain));
                    }
                }
                if let Some((_, chain)) = oldest {
                    reached.insert(chain.clone(), *n);
                }
            }
        }
        Ok(reached)
    }

    /// The cursor that hands out `reached`: the plain seq while there is one chain.
    fn cursor_of(reached: BTreeMap<String, u64>) -> Cursor {
        if reached.len() <= 1 {
            Cursor::Seq(reached.values().next().copied().unwrap_or(0))
        } else {
            Cursor::Heads(reached)
        }
    }

    /// Each chain's records after the seq `reached` names, merged: by time, then chain, then
    /// seq, each chain kept in its own order.
    fn merged<'a>(
        &'a self,
        reached: &BTreeMap<String, u64>,
    ) -> Result<impl Iterator<Item = Result<(String, u64, Value), StoreError>> + 'a, StoreError>
    {
        let mut streams = Vec::new();
        for (chain, seq) in reached {
            let prefix = keys::chain_prefix(chain);
            let mut s = Stream {
                chain: chain.clone(),
                next: None,
                rest: self.shared.backend.iter(
                    Ks::Audit,
                    keys::audit_key(chain, seq.saturating_add(1)),
                    prefix_end(&prefix),
                    false,
                ),
            };
            s.advance()?;
            streams.push(s);
        }
        Ok(std::iter::from_fn(move || {
            let at = streams
                .iter()
                .enumerate()
                .filter_map(|(i, s)| s.next.as_ref().map(|(ts, seq, _)| (*ts, i, *seq)))
                .min()?;
            let s = &mut streams[at.1];
            let (_, seq, v) = s.next.take()?;
            let chain = s.chain.clone();
            Some(s.advance().map(|()| (chain, seq, v)))
        }))
    }

    /// Up to `limit` audit records after `after`, oldest first, and the cursor to go on from.
    pub fn audit_page(
        &self,
        after: &Cursor,
        limit: usize,
    ) -> Result<(Vec<Value>, Cursor), StoreError> {
        self.shared.check()?;
        let chains = self.chains()?;
        let mut reached = self.reached(after, &chains)?;
        let mut out = Vec::new();
        for item in self.merged(&reached.clone())?.take(limit) {
            let (chain, seq, v) = item?;
            reached.insert(chain, seq);
            out.push(v);
        }
        Ok((out, Self::cursor_of(reached)))
    }

    /// Up to `limit` audit records after the plain seq `after` (the only chain's, or the
    /// oldest's), oldest first.
    pub fn audit_after(&self, after: u64, limit: usize) -> Result<Vec<Value>, StoreError> {
        self.audit_page(&Cursor::Seq(after), limit).map(|(r, _)| r)
    }

    /// The last `n` audit records across every chain, oldest first (for the inbox's view).
    pub fn audit_tail(&self, n: usize) -> Result<Vec<Value>, StoreError> {
        self.shared.check()?;
        let mut start = BTreeMap::new();
        for chain in self.chains()? {
            let head = self.head_of_chain(&chain)?;
            start.insert(chain, head.seq.saturating_sub(n as u64));
        }
        let mut out = std::collections::VecDeque::with_capacity(n + 1);
        for item in self.merged(&start)? {
            out.push_back(item?.2);
            if out.len() > n {
                out.pop_front();
            }
        }
        Ok(out.into())
    }

    /// The records `from..=to` of `chain` (what another gateway's commit announced).
    pub fn audit_range(&self, chain: &str, from: u64, to: u64) -> Result<Vec<Value>, StoreError> {
        self.shared.check()?;
        let mut out = Vec::new();
        for entry in self.shared.backend.iter(
            Ks::Audit,
            keys::audit_key(chain, from),
            Some(keys::audit_key(chain, to.saturating_add(1))),
            false,
        ) {
            let (_, bytes) = entry?;
            out.push(
                serde_json::from_slice(&bytes).map_err(|e| StoreError::Corrupt(e.to_string()))?,
            );
        }
        Ok(out)
    }

    /// Up to `limit` audit records of run `run_id` after `after`, oldest first, each with the
    /// cursor that follows it (its event id). Records a prune dropped are skipped.
    pub fn run_events(
        &self,
        run_id: &str,
        after: &Cursor,
        limit: usize,
    ) -> Result<Vec<(Cursor, Value)>, StoreError> {
        self.shared.check()?;
        let prefix = keys::index_prefix(keys::IDX_RUN_EVENT, run_id);
        let mut found = Vec::new();
        for entry in self.shared.backend.prefix(Ks::ApprovalIndex, &prefix) {
            let (key, _) = entry?;
            if let Some((chain, seq)) = keys::split_run_event(&key, &prefix) {
                found.push((chain.to_owned(), seq));
            }
        }
        let mut chains: Vec<String> = found.iter().map(|(c, _)| c.clone()).collect();
        chains.sort_unstable();
        chains.dedup();
        let mut reached = self.reached(after, &chains)?;
        let mut records = Vec::new();
        for (chain, seq) in found {
            if seq <= reached.get(&chain).copied().unwrap_or(0) {
                continue;
            }
            if let Some(bytes) = self
                .shared
                .backend
                .get(Ks::Audit, &keys::audit_key(&chain, seq))?
            {
                let v: Value = serde_json::from_slice(&bytes)
                    .map_err(|e| StoreError::Corrupt(e.to_string()))?;
                let ts = v.get("ts").and_then(Value::as_u64).unwrap_or(0);
                records.push((ts, chain, seq, v));
            }
        }
        // By time then chain then seq, but each chain in its own order (its ts may step back).
        let mut by_chain: BTreeMap<String, std::collections::VecDeque<(u64, u64, Value)>> =
            BTreeMap::new();
        for (ts, chain, seq, v) in records {
            by_chain.entry(chain).or_default().push_back((ts, seq, v));
        }
        for q in by_chain.values_mut() {
            q.make_contiguous().sort_by_key(|(_, seq, _)| *seq);
        }
        let mut out = Vec::new();
        while out.len() < limit {
            let Some(chain) = by_chain
                .iter()
                .filter_map(|(c, q)| q.front().map(|(ts, _, _)| (*ts, c.clone())))
                .min()
                .map(|(_, c)| c)
            else {
                break;
            };
            let Some((_, seq, v)) = by_chain.get_mut(&chain).and_then(|q| q.pop_front()) else {
                break;
            };
            reached.insert(chain, seq);
            out.push((Self::cursor_of(reached.clone()), v));
        }
        Ok(out)
    }

    /// Where `chain` ends: its last record's seq and hash (the genesis when it has none).
    pub(crate) fn head_of_chain(&self, chain: &str) -> Result<ChainHead, StoreError> {
        crate::head_of(
            self.shared
                .backend
                .last_with(Ks::Audit, &keys::chain_prefix(chain))?,
        )
    }

    /// The last audit seq and hash of this gateway's chain.
    pub fn audit_head(&self) -> Result<(u64, String), StoreError> {
        let head = self.head_of_chain(&self.shared.chain)?;
        Ok((head.seq, head.hash))
    }

    /// The seq and hash of the last record of `chain` a prune dropped, if any.
    pub fn audit_checkpoint(&self, chain: &str) -> Result<Option<(u64, String)>, StoreError> {
        let v: Option<Value> = self.read(Ks::Settings, checkpoint_key(chain).as_bytes())?;
        Ok(v.and_then(|v| Some((v.get("seq")?.as_u64()?, v.get("hash")?.as_str()?.to_owned()))))
    }

    /// Up to which seq `chain` was exported (`export_audit` to its end).
    pub fn audit_exported_through(&self, chain: &str) -> Result<u64, StoreError> {
        let v: Option<Value> = self.read(Ks::Settings, exported_key(chain).as_bytes())?;
        Ok(v.and_then(|v| v.get("seq").and_then(Value::as_u64))
            .unwrap_or(0))
    }

    /// Pushes into `v` the records of `chain` after the last it holds (all, if none).
    fn push_chain_from(&self, v: &mut Verifier, chain: &str) -> Result<(), ChainError> {
        let prefix = keys::chain_prefix(chain);
        let from = v
            .last_seq(chain)
            .map_or(prefix.clone(), |seq| keys::audit_key(chain, seq + 1));
        let records = self
            .shared
            .backend
            .iter(Ks::Audit, from, prefix_end(&prefix), false)
            .map(|e| e.map(|(_, v)| v));
        v.push_all(records)
    }

    /// Proves every chain as stored, from its genesis or the checkpoint a prune left (so a
    /// removed first record is caught like any other), then every witness.
    pub fn verify_audit(&self) -> Result<Result<AuditSummary, ChainError>, StoreError> {
        self.shared.check()?;
        let chains = self.chains()?;
        let mut anchors = BTreeMap::new();
        let mut pruned = BTreeMap::new();
        for chain in &chains {
            let anchor = self.audit_checkpoint(chain)?;
            if let Some(a) = &anchor {
                pruned.insert(chain.clone(), a.clone());
            }
            anchors.insert(chain.clone(), anchor.unwrap_or((0, GENESIS.to_owned())));
        }
        // Chains pruned to nothing still stand at their checkpoint.
        for (key, _) in self
            .shared
            .backend
            .prefix(Ks::Settings, CHECKPOINT.as_bytes())
            .collect::<Result<Vec<_>, _>>()?
        {
            let chain = String::from_utf8_lossy(&key[CHECKPOINT.len()..]).into_owned();
            if !anchors.contains_key(&chain) {
                if let Some(a) = self.audit_checkpoint(&chain)? {
                    pruned.insert(chain, a);
                }
            }
        }
        let mut v = Verifier::anchored(anchors);
        // Gateways may append while this reads (`verify --database-url` on a live cluster),
        // and the chains are read one after another, not at one instant: a witness read in
        // a later chain may have seen records of an earlier one appended after it was read.
        // So every chain is read again from where it ended, after all were read once; what
        // the witnesses of the first reading saw is in the second (DESIGN §17).
        for chain in &chains {
            if let Err(e) = self.push_chain_from(&mut v, chain) {
                return Ok(Err(e));
            }
        }
        v.settle();
        for chain in self.chains()? {
            if let Err(e) = self.push_chain_from(&mut v, &chain) {
                return Ok(Err(e));
            }
        }
        Ok(v.finish().map(|mut s| {
            for (chain, (seq, hash)) in pruned {
                if !s.chains.iter().any(|(c, _)| *c == chain) {
                    s.chains.push((
                        chain,
                        audit::ChainSummary {
                            records: 0,
                            first_seq: 0,
                            last_seq: seq,
                            last_hash: hash,
                        },
                    ));
                }
            }
            s
        }))
    }

    /// Hands every record to `each`, every chain, by time then chain then seq, until `each`
    /// says stop (false); returns how many it was handed. Unlike [`Store::export_audit`] it
    /// notes nothing: reading the log this way writes nothing (a policy replay).
    pub fn read_audit(&self, each: &mut dyn FnMut(Value) -> bool) -> Result<u64, StoreError> {
        self.shared.check()?;
        let chains = self.chains()?;
        let start = self.reached(&Cursor::default(), &chains)?;
        let mut n = 0;
        for item in self.merged(&start)? {
            let (_, _, v) = item?;
            n += 1;
            if !each(v) {
                break;
            }
        }
        Ok(n)
    }

    /// Writes the records after `after` as JSONL, every chain, by time then chain then seq;
    /// returns how many. Once they are all written (and `out` flushed), the store notes how
    /// far each chain has been exported, which is as far as a prune of it may go.
    pub fn export_audit(
        &self,
        after: &Cursor,
        out: &mut dyn std::io::Write,
    ) -> Result<u64, StoreError> {
        self.shared.check()?;
        let chains = self.chains()?;
        let start = self.reached(after, &chains)?;
        let mut last: BTreeMap<String, u64> = BTreeMap::new();
        let mut n = 0;
        for item in self.merged(&start)? {
            let (chain, seq, v) = item?;
            let bytes = serde_json::to_vec(&v).map_err(|e| StoreError::Corrupt(e.to_string()))?;
            out.write_all(&bytes)
                .and_then(|_| out.write_all(b"\n"))
                .map_err(|e| StoreError::Unavailable(format!("cannot write the export: {e}")))?;
            last.insert(chain, seq);
            n += 1;
        }
        out.flush()
            .map_err(|e| StoreError::Unavailable(format!("cannot write the export: {e}")))?;
        // Only an export that starts where the last one ended (or at the start) extends what
        // is covered: a gap would let a prune drop records nobody has.
        let mut covered = Vec::new();
        for (chain, last) in last {
            let through = self.audit_exported_through(&chain)?;
            let from = start.get(&chain).copied().unwrap_or(0);
            let floor = through.max(self.audit_checkpoint(&chain)?.map_or(0, |c| c.0));
            if from <= floor && last > through {
                covered.push((chain, last));
            }
        }
        if !covered.is_empty() {
            self.writer.submit(move |tx| {
                for (chain, last) in covered {
                    tx.put(
                        Ks::Settings,
                        exported_key(&chain).into_bytes(),
                        keys::encode(&json!({"seq": last}))?,
                    );
                }
                Ok(())
            })?;
        }
        Ok(n)
    }

    /// Drops the records of `chain` (this gateway's when `None`, or the only chain) with seq
    /// < `before`, keeping the seq and hash of the last one dropped as the checkpoint `verify`
    /// starts from. Refused for records not exported yet (`audit.not_exported`).
    pub fn prune_audit(
        &self,
        chain: Option<&str>,
        before: u64,
        now: Millis,
    ) -> Result<(u64, u64), StoreError> {
        self.shared.check()?;
        let chain = match chain {
            Some(c) => c.to_owned(),
            None => {
                let chains = self.chains()?;
                match chains.as_slice() {
                    [only] => only.clone(),
                    _ if chains.contains(&self.shared.chain) => self.shared.chain.clone(),
                    [] => self.shared.chain.clone(),
                    _ => {
                        return Err(StoreError::NotExported(format!(
                            "the log has {} chains ({}): name the one to prune",
                            chains.len(),
                            chains.join(", ")
                        )))
                    }
                }
            }
        };
        let through = self.audit_exported_through(&chain)?;
        let last_dropped = before.saturating_sub(1);
        if last_dropped > through {
            return Err(StoreError::NotExported(format!(
                "records up to seq {last_dropped} would be dropped, but the log was exported only through seq {through}: export first (`airlock audit export`)"
            )));
        }
        self.writer.submit(move |tx| {
            if last_dropped == 0 {
                return Ok((0, 0));
            }
            let Some(bytes) = tx.get(Ks::Audit, &keys::audit_key(&chain, last_dropped))? else {
                return Err(StoreError::NotExported(format!(
                    "no audit record {last_dropped} to keep as the checkpoint (already pruned?)"
                )));
            };
            let record: Value =
                serde_json::from_slice(&bytes).map_err(|e| StoreError::Corrupt(e.to_string()))?;
            let hash = record
                .get("hash")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned();
            let from = keys::chain_prefix(&chain);
            let keys = tx.committed_keys_between(
                Ks::Audit,
                &from,
                &keys::audit_key(&chain, last_dropped),
                usize::MAX,
            )?;
            let dropped = keys.len() as u64;
            for k in keys {
                tx.delete(Ks::Audit, k);
            }
            tx.put(
                Ks::Settings,
                checkpoint_key(&chain).into_bytes(),
                keys::encode(&json!({"seq": last_dropped, "hash": hash}))?,
            );
            let mut f = Map::new();
            f.insert("pruned_chain".into(), Value::from(chain.clone()));
            f.insert("before".into(), Value::from(before));
            f.insert("dropped".into(), Value::from(dropped));
            f.insert("checkpoint_seq".into(), Value::from(last_dropped));
            f.insert("checkpoint_hash".into(), Value::from(hash));
            tx.audit(now, Kind::AuditPruned, f);
            Ok((dropped, last_dropped))
        })
    }

    /// Appends a `chain.witness` record holding the head of every other chain, if any of them
    /// wrote something since this gateway's last witness; returns whether it wrote one
    /// (DESIGN §17). Another chain's own witness records do not count as something: two
    /// idle gateways would otherwise witness each other's witnesses for ever.
    pub fn witness(&self, now: Millis) -> Result<bool, StoreError> {
        self.shared.check()?;
        let mut heads = Map::new();
        let mut moved = false;
        let last = self
            .witnessed
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        for chain in self.chains()? {
            if chain == self.shared.chain {
                continue;
            }
            let head = self.head_of_chain(&chain)?;
            let seen = last
                .get(&chain)
                .and_then(|h| h.get("seq"))
                .and_then(Value::as_u64)
                .unwrap_or(0);
            if head.seq > seen && !moved {
                moved = self.wrote_more_than_witnesses(&chain, seen, head.seq)?;
            }
            heads.insert(chain, json!({"seq": head.seq, "hash": head.hash}));
        }
        if !moved {
            return Ok(false);
        }
        let mut f = Map::new();
        f.insert("heads".into(), Value::Object(heads.clone()));
        self.writer
            .submit(move |tx| Ok(tx.audit(now, Kind::ChainWitness, f)))?;
        *self.witnessed.lock().unwrap_or_else(|e| e.into_inner()) = heads;
        Ok(true)
    }

    /// Whether `chain`'s records `after+1..=head` hold anything but witness records (read from
    /// the head down; past a few, assumed so).
    fn wrote_more_than_witnesses(
        &self,
        chain: &str,
        after: u64,
        head: u64,
    ) -> Result<bool, StoreError> {
        let records = self.shared.backend.iter(
            Ks::Audit,
            keys::audit_key(chain, after.saturating_add(1)),
            Some(keys::audit_key(chain, head.saturating_add(1))),
            true,
        );
        for entry in records.take(16) {
            let (_, bytes) = entry?;
            let v: Value =
                serde_json::from_slice(&bytes).map_err(|e| StoreError::Corrupt(e.to_string()))?;
            if v.get("kind").and_then(Value::as_str) != Some(Kind::ChainWitness.as_str()) {
                return Ok(true);
            }
        }
        Ok(head - after > 16)
    }

    /// Moves records written before chains had names (keyed by the bare seq) into a chain:
    /// the first store to open the log after the change adopts them as its chain's history,
    /// their checkpoint and export mark with them. In steps, each atomic; one cut short by a
    /// crash is taken up by the next open. `verify` proves the records across the move (they
    /// hash as written; the chain's next record links to the last of them).
    pub(crate) fn adopt_unnamed_records(&self) -> Result<(), StoreError> {
        const STEP: usize = 2000;
        const ADOPTER: &[u8] = b"audit.unnamed_chain";
        loop {
            let chain = self.shared.chain.clone();
            let moved = self.writer.submit(move |tx| {
                // Read (and locked) first: one store at a time moves them, into one chain.
                let adopter = match tx.get(Ks::Settings, ADOPTER)? {
                    Some(v) => keys::decode::<Value>(&v)?
                        .get("chain")
                        .and_then(Value::as_str)
                        .unwrap_or_default()
                        .to_owned(),
                    None => chain.clone(),
                };
                let old = tx.committed_keys_between(
                    Ks::Audit,
                    &[0],
                    &[0, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff],
                    STEP,
                )?;
                let old: Vec<_> = old.into_iter().filter(|k| k.len() == 8).collect();
                if old.is_empty() {
                    return Ok(false);
                }
                tx.put(
                    Ks::Settings,
                    ADOPTER.to_vec(),
                    keys::encode(&json!({"chain": adopter}))?,
                );
                for key in old {
                    let seq = u64::from_be_bytes(key.as_slice().try_into().unwrap_or([0; 8]));
                    if let Some(bytes) = tx.get(Ks::Audit, &key)? {
                        tx.put(Ks::Audit, keys::audit_key(&adopter, seq), bytes);
                    }
                    tx.delete(Ks::Audit, key);
                }
                for (from, to) in [
                    (&b"audit.checkpoint"[..], checkpoint_key(&adopter)),
                    (b"audit.exported_through", exported_key(&adopter)),
                ] {
                    if let Some(v) = tx.get(Ks::Settings, from)? {
                        tx.put(Ks::Settings, to.into_bytes(), v);
                        tx.delete(Ks::Settings, from.to_vec());
                    }
                }
                // The run index: `e\0{run}\0{seq}` becomes `e\0{run}\0{chain}\0{seq}`.
                for key in tx.committed_keys_between(
                    Ks::ApprovalIndex,
                    &[keys::IDX_RUN_EVENT, 0],
                    &[keys::IDX_RUN_EVENT, 1],
                    usize::MAX,
                )? {
                    if key.iter().filter(|b| **b == 0).count() != 2 {
                        continue;
                    }
                    let at = key.iter().rposition(|b| *b == 0).unwrap_or(0);
                    let run = String::from_utf8_lossy(&key[2..at]).into_owned();
                    if let Some(seq) = std::str::from_utf8(&key[at + 1..])
                        .ok()
                        .and_then(|s| s.parse().ok())
                    {
                        tx.put(
                            Ks::ApprovalIndex,
                            keys::run_event_key(&run, &adopter, seq),
                            Vec::new(),
                        );
                    }
                    tx.delete(Ks::ApprovalIndex, key);
                }
                Ok(true)
            })?;
            if !moved {
                let head = crate::chain_head(&self.shared)?;
                self.writer.restart_chain_at(head);
                return Ok(());
            }
        }
    }
}

const CHECKPOINT: &str = "audit.checkpoint.";

fn checkpoint_key(chain: &str) -> String {
    format!("{CHECKPOINT}{chain}")
}

fn exported_key(chain: &str) -> String {
    format!("audit.exported_through.{chain}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cursors_read_back_as_themselves_and_a_foreign_text_is_refused() {
        let one = Cursor::Seq(42);
        assert_eq!(one.to_string(), "42");
        let heads = Cursor::Heads(BTreeMap::from([("gw-a".into(), 7), ("host:/d".into(), 0)]));
        let text = heads.to_string();
        assert!(text.starts_with('c') && text.bytes().all(|b| b.is_ascii_alphanumeric()));
        assert_eq!(text.parse::<Cursor>(), Ok(heads));
        assert_eq!("42".parse::<Cursor>(), Ok(one));
        for bad in ["", "-1", "c0", "cz1", "x12", "c7b", "c7b2278223a2d317d"] {
            assert!(bad.parse::<Cursor>().is_err(), "{bad}");
        }
    }
}
