//! Crash safety: a child process writes approvals, decisions, grant uses and audit records in
//! a loop and is killed with SIGKILL at random moments, 60 times. After each reopen, every
//! write the child reported as acknowledged is there, the audit chain verifies, and no grant
//! use is lost or doubled.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use airlock_storage::{ApprovalStatus, Begin, Kind, StoreOptions, Verdict};
use support::*;

const USES: u32 = 3;

/// Not a test on its own: the body of the child process, which runs only when the parent
/// sets `AIRLOCK_CRASH_CHILD`.
#[test]
fn crash_child() {
    let Ok(dir) = std::env::var("AIRLOCK_CRASH_CHILD") else {
        return;
    };
    let round = std::env::var("AIRLOCK_CRASH_ROUND").unwrap();
    let store = open_at(&dir, StoreOptions::default()).unwrap();
    let mut out = std::io::stdout().lock();
    let mut ack = |line: String| {
        writeln!(out, "{line}").unwrap();
        out.flush().unwrap();
    };
    for i in 0.. {
        let key = format!("{round}-{i}");
        let fp = format!("sha256:{key}");
        let h = held(
            &format!("call-{key}"),
            &fp,
            &agent("bot"),
            &[],
            1,
            USES,
            1000,
            3_600_000,
        );
        let a = store
            .create_approval(h.call, h.approval, no_fields())
            .unwrap();
        ack(format!("created {} {fp}", a.id));
        store
            .decide(
                &a.id,
                &approver("bob", &[]),
                Verdict::Approve {
                    reason: None,
                    edit: None,
                },
                1100,
            )
            .unwrap();
        ack(format!("approved {}", a.id));
        // The approved call is the grant's first use, reserved for it; it spends nothing.
        assert!(matches!(
            store.begin_execution(&format!("call-{key}"), 1200).unwrap(),
            Begin::Run(_)
        ));
        ack(format!("started call-{key}"));
        let again = call(
            &format!("again-{key}"),
            &fp,
            &agent("bot"),
            "require_approval",
            1300,
        );
        if store
            .call_with_grant(again, "run:run-1", no_fields(), false)
            .unwrap()
            .is_some()
        {
            ack(format!("spent {fp}"));
        }
        let mut record = serde_json::Map::new();
        record.insert("note".into(), serde_json::Value::from(key.clone()));
        let seq = store
            .append_audit(Kind::PolicyLoaded, record, 1400)
            .unwrap();
        ack(format!("audit {seq}"));
    }
}

/// A small xorshift for kill timing.
fn rand(state: &mut u64) -> u64 {
    *state ^= *state << 13;
    *state ^= *state >> 7;
    *state ^= *state << 17;
    *state
}

#[test]
fn acknowledged_writes_survive_sigkill() {
    let place = Place::new();
    let exe = std::env::current_exe().unwrap();
    let mut seed = 0x2545F4914F6CDD1D_u64 ^ u64::from(std::process::id());
    let mut created: BTreeMap<String, String> = BTreeMap::new(); // approval id → fingerprint
    let mut approved: BTreeSet<String> = BTreeSet::new();
    let mut spent: BTreeMap<String, u32> = BTreeMap::new();
    let mut audited: BTreeSet<u64> = BTreeSet::new();
    let mut total_acks = 0;
    for round in 0..60 {
        let mut child = Command::new(&exe)
            .args(["--exact", "crash_child", "--nocapture", "--test-threads=1"])
            .env("AIRLOCK_CRASH_CHILD", place.env_value())
            .env("AIRLOCK_CRASH_ROUND", round.to_string())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let kill_after = Duration::from_millis(5 + rand(&mut seed) % 120);
        let (tx, rx) = std::sync::mpsc::channel();
        let reader = std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        // Kill at a random moment once the child has acknowledged its first write: a loaded
        // machine starts the child late, and the kill must still land mid-writing.
        let start = Instant::now();
        let mut lines: Vec<String> = Vec::new();
        while let Ok(line) = rx.recv_timeout(Duration::from_secs(20)) {
            let acked = ["created ", "approved ", "spent ", "audit "]
                .iter()
                .any(|k| line.starts_with(k));
            lines.push(line);
            if acked {
                break;
            }
        }
        std::thread::sleep(kill_after);
        child.kill().unwrap(); // SIGKILL
        child.wait().unwrap();
        reader.join().unwrap();
        lines.extend(rx.try_iter());
        assert!(start.elapsed() < Duration::from_secs(30));
        for line in lines {
            let parts: Vec<&str> = line.split(' ').collect();
            match parts.as_slice() {
                ["created", id, fp] => {
                    created.insert(id.to_string(), fp.to_string());
                }
                ["approved", id] => {
                    approved.insert(id.to_string());
                }
                ["spent", fp] => *spent.entry(fp.to_string()).or_default() += 1,
                ["started", _] => {}
                ["audit", seq] => {
                    audited.insert(seq.parse().unwrap());
                }
                _ => continue,
            }
            total_acks += 1;
        }

        let store = place.open(StoreOptions::default()).unwrap();
        for id in created.keys() {
            let a = store
                .approval(id)
                .unwrap()
                .unwrap_or_else(|| panic!("acknowledged approval {id} lost"));
            if approved.contains(id) {
                assert_eq!(a.status, ApprovalStatus::Approved, "{id}");
            }
        }
        let records = store.audit_after(0, usize::MAX).unwrap();
        let summary = store.verify_audit().unwrap().unwrap();
        assert_eq!(summary.records() as usize, records.len());
        for seq in &audited {
            assert!(
                *seq <= summary.chains[0].1.last_seq,
                "acknowledged audit record {seq} lost"
            );
        }
        let mut consumed_in_audit: BTreeMap<String, u32> = BTreeMap::new();
        for r in &records {
            if r["kind"] == "grant.consumed" {
                *consumed_in_audit
                    .entry(r["fingerprint"].as_str().unwrap().to_owned())
                    .or_default() += 1;
            }
        }
        for (id, fp) in &created {
            if !approved.contains(id)
                && store.approval(id).unwrap().unwrap().status != ApprovalStatus::Approved
            {
                continue;
            }
            let left = store
                .grant(fp, "run:run-1")
                .unwrap()
                .map_or(0, |g| g.uses_left);
            let used = (USES - 1) - left;
            let acked = spent.get(fp).copied().unwrap_or(0);
            // At most one use can be in flight (committed, not yet reported) when the kill lands.
            assert!(
                used == acked || used == acked + 1,
                "{fp}: {used} used, {acked} acknowledged"
            );
            assert_eq!(
                consumed_in_audit.get(fp).copied().unwrap_or(0),
                used,
                "{fp}: audit and grant disagree"
            );
        }
    }
    assert!(
        total_acks > 200,
        "the child made too little progress to test anything: {total_acks}"
    );
}
