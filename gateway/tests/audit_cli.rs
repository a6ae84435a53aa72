//! `airlock audit verify|export` as a new user runs them: on a stopped gateway's store and on
//! an exported file, intact and tampered with.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::Path;
use std::process::{Command, Output};

use airlock_storage::{Kind, Store, StoreOptions};
use serde_json::{Map, Value};

fn airlock(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_airlock"))
        .args(args)
        .output()
        .unwrap()
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// The key of record `seq` of fjall's one chain, as the store lays it out: the chain's name,
/// a NUL, the seq big-endian.
fn audit_key(seq: u64) -> Vec<u8> {
    let mut k = b"local\0".to_vec();
    k.extend_from_slice(&seq.to_be_bytes());
    k
}

#[test]
fn a_store_written_before_chains_had_names_keeps_its_records_as_its_chains_history() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    fill(&data, 12);
    {
        // Lay the records out as a store of the last release did: keyed by the bare seq.
        let db = fjall::Database::builder(&data).open().unwrap();
        let audit = db
            .keyspace("audit", fjall::KeyspaceCreateOptions::default)
            .unwrap();
        for seq in 1..=12u64 {
            let v = audit.get(audit_key(seq)).unwrap().unwrap();
            audit.insert(seq.to_be_bytes(), v).unwrap();
            audit.remove(audit_key(seq)).unwrap();
        }
        db.persist(fjall::PersistMode::SyncAll).unwrap();
    }
    let store = Store::open(&data, StoreOptions::default()).unwrap();
    // Adopted: read, proven, and continued from.
    assert_eq!(store.audit_after(0, 100).unwrap().len(), 12);
    let seq = store
        .append_audit(Kind::PolicyLoaded, Map::new(), 5000)
        .unwrap();
    assert_eq!(seq, 13);
    let summary = store.verify_audit().unwrap().unwrap();
    assert_eq!(summary.chains.len(), 1);
    assert_eq!(
        (summary.chains[0].0.as_str(), summary.records()),
        ("local", 13)
    );
    drop(store);
    let v = airlock(&["audit", "verify", "--data-dir", data.to_str().unwrap()]);
    assert!(
        stdout(&v).starts_with("ok: 13 records (seq 1..13)"),
        "{}",
        stdout(&v)
    );
}

fn fill(dir: &Path, n: u64) {
    let store = Store::open(dir, StoreOptions::default()).unwrap();
    for i in 0..n {
        let mut record = Map::new();
        record.insert("note".into(), Value::from(format!("record {i}")));
        store
            .append_audit(Kind::PolicyLoaded, record, 1000 + i)
            .unwrap();
    }
}

#[test]
fn verify_and_export_a_store_and_catch_every_kind_of_tampering() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    fill(&data, 30);
    let data_s = data.to_str().unwrap();

    let v = airlock(&["audit", "verify", "--data-dir", data_s]);
    assert_eq!(v.status.code(), Some(0), "{}", stdout(&v));
    assert!(
        stdout(&v).starts_with("ok: 30 records (seq 1..30)"),
        "{}",
        stdout(&v)
    );

    let export = dir.path().join("audit.jsonl");
    let e = airlock(&[
        "audit",
        "export",
        "--data-dir",
        data_s,
        "--out",
        export.to_str().unwrap(),
    ]);
    assert!(e.status.success());
    let f = airlock(&["audit", "verify", "--file", export.to_str().unwrap()]);
    assert_eq!(f.status.code(), Some(0));
    assert!(stdout(&f).starts_with("ok: 30 records"));

    // --after gives a tail that verifies on its own, anchored at its first record.
    let tail = airlock(&["audit", "export", "--data-dir", data_s, "--after", "20"]);
    let tail_file = dir.path().join("tail.jsonl");
    std::fs::write(&tail_file, &tail.stdout).unwrap();
    let t = airlock(&["audit", "verify", "--file", tail_file.to_str().unwrap()]);
    assert!(
        stdout(&t).starts_with("ok: 10 records (seq 21..30)"),
        "{}",
        stdout(&t)
    );

    let original = std::fs::read_to_string(&export).unwrap();
    let lines: Vec<&str> = original.lines().collect();
    let check = |name: &str, text: String, seq: u64| {
        let path = dir.path().join(format!("{name}.jsonl"));
        std::fs::write(&path, text).unwrap();
        let out = airlock(&["audit", "verify", "--file", path.to_str().unwrap()]);
        assert_eq!(out.status.code(), Some(1), "{name}: {}", stdout(&out));
        assert!(
            stdout(&out).contains(&format!("at seq {seq}:")),
            "{name}: {}",
            stdout(&out)
        );
    };
    // Flip one byte inside record 12's note.
    let mut flipped = lines.clone();
    let edited = flipped[11].replace("record 11", "record 1l");
    flipped[11] = &edited;
    check("flipped", flipped.join("\n"), 12);
    // Delete record 7.
    let mut deleted = lines.clone();
    deleted.remove(6);
    check("deleted", deleted.join("\n"), 7);
    // Swap records 3 and 4.
    let mut swapped = lines.clone();
    swapped.swap(2, 3);
    check("swapped", swapped.join("\n"), 3);
    // Cut out the middle.
    let mut truncated = lines.clone();
    truncated.drain(10..20);
    check("truncated", truncated.join("\n"), 11);
    // A byte flipped anywhere in the raw file is caught too.
    let mut raw = original.clone().into_bytes();
    let at = raw.len() / 2;
    raw[at] ^= 0x20;
    let path = dir.path().join("raw.jsonl");
    std::fs::write(&path, raw).unwrap();
    assert_eq!(
        airlock(&["audit", "verify", "--file", path.to_str().unwrap()])
            .status
            .code(),
        Some(1)
    );
}

#[test]
fn a_store_held_by_a_running_gateway_is_refused_with_its_code() {
    let dir = tempfile::tempdir().unwrap();
    let _held = Store::open(dir.path(), StoreOptions::default()).unwrap();
    let out = airlock(&[
        "audit",
        "verify",
        "--data-dir",
        dir.path().to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("error[store.unavailable]"));
}

#[test]
fn prune_keeps_a_checkpoint_refuses_what_was_not_exported_and_tampering_still_shows() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    fill(&data, 40);
    let data_s = data.to_str().unwrap();

    // Nothing exported yet: a prune is refused, and drops nothing.
    let p = airlock(&["audit", "prune", "--data-dir", data_s, "--before", "11"]);
    assert_eq!(p.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&p.stderr).contains("error[audit.not_exported]"));
    let v = airlock(&["audit", "verify", "--data-dir", data_s]);
    assert!(
        stdout(&v).starts_with("ok: 40 records (seq 1..40)"),
        "{}",
        stdout(&v)
    );

    // Export, then prune what was exported; verify proves the rest from the checkpoint.
    let export = dir.path().join("audit.jsonl");
    assert!(airlock(&[
        "audit",
        "export",
        "--data-dir",
        data_s,
        "--out",
        export.to_str().unwrap()
    ])
    .status
    .success());
    let p = airlock(&["audit", "prune", "--data-dir", data_s, "--before", "21"]);
    assert_eq!(
        p.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&p.stderr)
    );
    assert!(stdout(&p).contains("pruned 20 records"), "{}", stdout(&p));
    let v = airlock(&["audit", "verify", "--data-dir", data_s]);
    assert_eq!(v.status.code(), Some(0), "{}", stdout(&v));
    // 20 remaining plus the `audit.pruned` record.
    assert!(
        stdout(&v).starts_with("ok: 21 records (seq 21..41)"),
        "{}",
        stdout(&v)
    );
    // The export still verifies on its own: nothing in it changed.
    assert!(
        airlock(&["audit", "verify", "--file", export.to_str().unwrap()])
            .status
            .success()
    );
    // Past the export (which ended at seq 40) is refused.
    let p = airlock(&["audit", "prune", "--data-dir", data_s, "--before", "42"]);
    assert_eq!(p.status.code(), Some(2), "{}", stdout(&p));

    // Tampering after a prune is still caught: removing the first remaining record, or
    // editing one.
    {
        // Straight into the database, as an attacker with the disk would.
        let db = fjall::Database::builder(&data).open().unwrap();
        let audit = db
            .keyspace("audit", fjall::KeyspaceCreateOptions::default)
            .unwrap();
        audit.remove(audit_key(21)).unwrap();
        db.persist(fjall::PersistMode::SyncAll).unwrap();
    }
    let v = airlock(&["audit", "verify", "--data-dir", data_s]);
    assert_eq!(v.status.code(), Some(1), "{}", stdout(&v));
    assert!(
        stdout(&v).contains("the chain must start at seq 21"),
        "{}",
        stdout(&v)
    );
}
