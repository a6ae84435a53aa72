//! Several gateways on one PostgreSQL database (DESIGN §14): three real `airlock` processes on
//! one fresh database, a real backend, and a real PostgreSQL server (a throwaway cluster).
//! A call held on one gateway is answered when another approves it; a grant use is spent once
//! across all three, however the calls race; parallel calls on all three leave one chain per
//! gateway without a gap, proven with the witnesses; a chain whose tail is cut in the database
//! is named; a gateway killed mid-traffic continues its chain without a gap; an approval that
//! expires is expired once; and the database going away under traffic gives 503s, then
//! recovery without a restart.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use support::pg::{Cluster, Database};
use support::*;

/// A gateway on the database at `url`, named `instance`; it witnesses the other chains every
/// 200 ms.
fn gateway(backend: &Backend, url: &str, instance: &str) -> Gateway {
    let config = format!(
        "{}\n[store]\nkind = \"postgres\"\nurl = \"{url}\"\ninstance = \"{instance}\"\nwitness_interval = \"200ms\"\n",
        config_text(backend, "")
    );
    Gateway::start_with(&config, POLICY)
}

fn three(backend: &Backend, db: &Database) -> Vec<Gateway> {
    ["gw-a", "gw-b", "gw-c"]
        .iter()
        .map(|name| gateway(backend, &db.url, name))
        .collect()
}

/// Runs `airlock` with `args`; returns exit code and stdout.
fn airlock(args: &[&str]) -> (i32, String) {
    let out = Command::new(airlock_bin()).args(args).output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr),
    )
}

/// The database's audit records, through `airlock audit export --database-url`.
fn audit(url: &str) -> Vec<Value> {
    let (code, out) = airlock(&["audit", "export", "--database-url", url]);
    assert_eq!(code, 0, "{out}");
    out.lines()
        .filter(|l| l.starts_with('{'))
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

fn verify(url: &str) -> String {
    let (code, out) = airlock(&["audit", "verify", "--database-url", url]);
    assert_eq!(code, 0, "the chain must verify: {out}");
    out
}

/// The pending approval of `call_id`, as gateway `gw` lists it.
fn pending_approval_of(gw: &Gateway, call_id: Option<&str>, sql: &str) -> (String, String) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let (s, b) = gw.req(
            "GET",
            "/v1/approvals?status=pending",
            Some("admin"),
            None,
            None,
        );
        assert_eq!(s, 200, "{b}");
        let found = b["approvals"]
            .as_array()
            .unwrap()
            .iter()
            .find(|a| call_id.is_none_or(|c| a["call_id"] == c) && a["args"]["sql"] == sql);
        if let Some(a) = found {
            return (
                a["id"].as_str().unwrap().to_owned(),
                a["call_id"].as_str().unwrap().to_owned(),
            );
        }
        assert!(Instant::now() < deadline, "no pending approval for {sql}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn a_call_held_on_one_gateway_is_answered_when_another_approves_it() {
    let db = Database::fresh();
    let backend = Backend::start();
    let mut gws = three(&backend, &db);
    let mut latencies = Vec::new();
    for i in 0..10 {
        let sql = format!("update t set x = {i}");
        let (held, approved_at) = std::thread::scope(|s| {
            let gw_a = &gws[0];
            let sql_a = sql.clone();
            let held = s.spawn(move || {
                let (status, body) = gw_a.call("agent1", "db.query", json!({"sql": sql_a}), None);
                (status, body, Instant::now())
            });
            let (approval, _) = pending_approval_of(&gws[1], None, &sql);
            let (s, b) = gws[1].approve("dba1", &approval);
            assert_eq!((s, b["status"].as_str()), (200, Some("approved")), "{b}");
            let approved_at = Instant::now();
            (held.join().unwrap(), approved_at)
        });
        let (status, body, answered_at) = held;
        // The hold lasts 5 s: a 200 means the approval on B woke the call held on A.
        assert_eq!(status, 200, "{body}");
        latencies.push(answered_at.saturating_duration_since(approved_at));
    }
    latencies.sort();
    eprintln!(
        "decision on B -> answer on A: p50 {:?}, max {:?}",
        latencies[latencies.len() / 2],
        latencies[latencies.len() - 1]
    );
    assert!(latencies[latencies.len() - 1] < Duration::from_secs(1));
    assert_eq!(backend.count(), 10);

    // Kill the gateway a call was held on: the call is decided on another and resumed on a
    // third, and runs once.
    let (call, approval) = gws[0].call_async("agent1", "db.query", json!({"sql": "select 42"}));
    gws[0].kill9();
    let (s, b) = gws[1].approve("dba2", &approval);
    assert_eq!(s, 200, "{b}");
    let (s, b) = gws[2].resume("agent1", &call);
    assert_eq!(s, 200, "{b}");
    assert_eq!(backend.count(), 11);
    let (s, b) = gws[1].resume("agent1", &call);
    assert_eq!(s, 200, "the outcome is served again, not re-run: {b}");
    assert_eq!(backend.count(), 11);
    verify(&db.url);
}

#[test]
fn a_grant_use_is_spent_once_across_gateways() {
    let db = Database::fresh();
    let backend = Backend::start();
    let gws = three(&backend, &db);
    // `multi.*` grants three uses: the approved call itself, one more here, one left; then 20
    // identical calls spread over the three race for that last use. Twenty times, each round
    // with a grant of its own.
    for round in 0..20u64 {
        let args = json!({"n": round});
        let (call, approval) = gws[0].call_async("agent1", "multi.op", args.clone());
        assert_eq!(gws[1].approve("ops", &approval).0, 200);
        assert_eq!(gws[2].resume("agent1", &call).0, 200);
        assert_eq!(gws[1].call("agent1", "multi.op", args.clone(), None).0, 200);
        let before = backend.count();
        let statuses: Vec<u16> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..20)
                .map(|i| {
                    let gw = &gws[i % 3];
                    let args = args.clone();
                    s.spawn(move || gw.call("agent1", "multi.op", args, Some("respond-async")).0)
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        assert_eq!(
            backend.count(),
            before + 1,
            "round {round}: statuses {statuses:?}"
        );
        assert_eq!(
            statuses.iter().filter(|s| **s == 200).count(),
            1,
            "round {round}: {statuses:?}"
        );
        assert!(
            statuses.iter().all(|s| [200, 202].contains(s)),
            "round {round}: {statuses:?}"
        );
        // The round's losers wait for approvals nobody will give: an admin declines them all
        // at once on one gateway (each agent may have 100 pending, counted on every gateway).
        let (s, b) = gws[round as usize % 3].req(
            "POST",
            "/v1/approvals/decline",
            Some("admin"),
            Some(r#"{"principal":"agent1","reason":"the round is over"}"#),
            None,
        );
        assert_eq!(s, 200, "{b}");
    }
    verify(&db.url);
}

/// Each chain's seqs in `records`, in the order read.
fn seqs_by_chain(records: &[Value]) -> BTreeMap<String, Vec<u64>> {
    let mut by: BTreeMap<String, Vec<u64>> = BTreeMap::new();
    for r in records {
        by.entry(r["chain"].as_str().unwrap().to_owned())
            .or_default()
            .push(r["seq"].as_u64().unwrap());
    }
    by
}

#[test]
fn parallel_calls_on_three_gateways_keep_a_chain_each_without_a_gap() {
    let db = Database::fresh();
    let backend = Backend::start();
    let gws = three(&backend, &db);
    std::thread::scope(|s| {
        for (g, gw) in gws.iter().enumerate() {
            for t in 0..5 {
                s.spawn(move || {
                    for i in 0..10 {
                        let (st, b) =
                            gw.call("agent1", "echo.x", json!({"g": g, "t": t, "i": i}), None);
                        assert_eq!(st, 200, "{b}");
                    }
                });
            }
        }
    });
    assert_eq!(backend.count(), 150);
    // The witnesses see the others' last records.
    std::thread::sleep(Duration::from_millis(600));
    let out = verify(&db.url);
    let records = audit(&db.url);
    let by = seqs_by_chain(&records);
    assert_eq!(
        by.keys().map(String::as_str).collect::<Vec<_>>(),
        ["gw-a", "gw-b", "gw-c"]
    );
    for (chain, seqs) in &by {
        assert_eq!(
            seqs,
            &(1..=seqs.len() as u64).collect::<Vec<_>>(),
            "chain {chain}: no gap, no fork"
        );
    }
    assert!(
        out.contains(&format!("ok: {} records in 3 chains", records.len())),
        "{out}"
    );
    assert!(records.iter().any(|r| r["kind"] == "chain.witness"));
    assert!(!out.contains(" 0 witness"), "{out}");
    // Within a chain, time never goes back (DESIGN §17: a record never carries an earlier ts
    // than the one before it), so the export, ordered by time, then chain, then seq, keeps
    // each chain in seq order.
    for chain in by.keys() {
        let ts: Vec<u64> = records
            .iter()
            .filter(|r| r["chain"] == chain.as_str())
            .map(|r| r["ts"].as_u64().unwrap())
            .collect();
        assert!(
            ts.windows(2).all(|w| w[0] <= w[1]),
            "chain {chain}: time went back: {ts:?}"
        );
    }
    let key = |r: &Value| {
        (
            r["ts"].as_u64().unwrap(),
            r["chain"].as_str().unwrap().to_owned(),
            r["seq"].as_u64().unwrap(),
        )
    };
    for w in records.windows(2) {
        assert!(key(&w[0]) < key(&w[1]), "{} then {}", w[0], w[1]);
    }
    let decided: BTreeSet<&str> = records
        .iter()
        .filter(|r| r["kind"] == "call.decided")
        .map(|r| r["call_id"].as_str().unwrap())
        .collect();
    assert_eq!(decided.len(), 150);
    // Paging `/v1/audit` by its cursor, on any gateway, gets every record once.
    let mut after = "0".to_owned();
    let mut paged = Vec::new();
    for i in 0.. {
        let (st, page) = gws[i % 3].req(
            "GET",
            &format!("/v1/audit?after={after}&limit=7"),
            Some("admin"),
            None,
            None,
        );
        assert_eq!(st, 200, "{page}");
        let got = page["records"].as_array().unwrap();
        if got.is_empty() {
            break;
        }
        paged.extend(got.iter().cloned());
        after = page["next_after"].as_str().unwrap().to_owned();
    }
    let key = |r: &Value| {
        (
            r["chain"].as_str().unwrap().to_owned(),
            r["seq"].as_u64().unwrap(),
        )
    };
    let mut want: Vec<_> = records.iter().map(key).collect();
    let mut got: Vec<_> = paged.iter().map(key).collect();
    want.sort();
    let before = got.len();
    got.sort();
    got.dedup();
    assert_eq!(got.len(), before, "a record came twice");
    // The gateways may have witnessed since the export: every exported record was paged.
    assert!(want.iter().all(|k| got.binary_search(k).is_ok()));
}

#[test]
fn a_chain_whose_tail_is_cut_in_the_database_is_named_by_the_others_witnesses() {
    let db = Database::fresh();
    let backend = Backend::start();
    let gws = three(&backend, &db);
    for (g, gw) in gws.iter().enumerate() {
        for i in 0..5 {
            assert_eq!(
                gw.call("agent1", "echo.x", json!({"g": g, "i": i}), None).0,
                200
            );
        }
    }
    std::thread::sleep(Duration::from_millis(1000));
    drop(gws);
    verify(&db.url);
    // Someone with the database drops gw-b's last records: its own chain still links.
    let mut client = postgres::Client::connect(&db.url, postgres::NoTls).unwrap();
    let cut = client
        .execute(
            "DELETE FROM airlock_kv WHERE ks = 4 AND k IN (SELECT k FROM airlock_kv \
             WHERE ks = 4 AND k >= 'gw-b'::bytea || '\\x00'::bytea \
             AND k < 'gw-b'::bytea || '\\x01'::bytea ORDER BY k DESC LIMIT 4)",
            &[],
        )
        .unwrap();
    assert_eq!(cut, 4);
    let (code, out) = airlock(&["audit", "verify", "--database-url", &db.url]);
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains("(chain gw-b)") && out.contains("tail was cut"),
        "{out}"
    );
}

#[test]
fn a_gateway_killed_mid_traffic_continues_its_chain_without_a_gap() {
    let db = Database::fresh();
    let backend = Backend::start();
    let mut gws = three(&backend, &db);
    let stop = AtomicBool::new(false);
    std::thread::scope(|s| {
        let (base, stop) = (gws[1].base.clone(), &stop);
        s.spawn(move || {
            let client = reqwest::blocking::Client::new();
            let mut i = 0;
            while !stop.load(Ordering::Relaxed) {
                i += 1;
                // Refused or cut short while the gateway is down: that is expected.
                let _ = client
                    .post(format!("{base}/v1/calls"))
                    .bearer_auth("token-agent1")
                    .json(&json!({"tool": "echo.x", "args": {"i": i}}))
                    .timeout(Duration::from_secs(2))
                    .send();
            }
        });
        std::thread::sleep(Duration::from_millis(700));
        gws[1].kill9();
        stop.store(true, Ordering::Relaxed);
    });
    gws[1].spawn();
    for i in 0..5 {
        assert_eq!(
            gws[1].call("agent1", "echo.x", json!({"after": i}), None).0,
            200
        );
    }
    // verify proves every chain gapless from its genesis.
    let out = verify(&db.url);
    assert!(out.contains("chain gw-b"), "{out}");
    let by = seqs_by_chain(&audit(&db.url));
    let b = &by["gw-b"];
    assert_eq!(b, &(1..=b.len() as u64).collect::<Vec<_>>());
    assert!(b.len() > 10, "{}", b.len());
}

#[test]
fn an_approval_expiring_is_expired_once() {
    let db = Database::fresh();
    let backend = Backend::start();
    let gws = three(&backend, &db);
    // `short.*` approvals live 1 s; every gateway's expiry timer wakes at that deadline (the
    // others' writes wake it too), so all three race to expire each one.
    let ids: Vec<String> = (0..6)
        .map(|i| {
            gws[i % 3]
                .call_async("agent1", "short.op", json!({"i": i}))
                .1
        })
        .collect();
    let deadline = Instant::now() + Duration::from_secs(10);
    for id in &ids {
        loop {
            let (_, b) = gws[1].req(
                "GET",
                &format!("/v1/approvals/{id}"),
                Some("admin"),
                None,
                None,
            );
            if b["status"] == "expired" {
                break;
            }
            assert!(Instant::now() < deadline, "{id} never expired: {b}");
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    // Give every gateway more sweeps in which to expire them again, wrongly.
    std::thread::sleep(Duration::from_secs(1));
    let mut expired: BTreeMap<String, usize> = BTreeMap::new();
    for r in audit(&db.url) {
        if r["kind"] == "approval.expired" {
            *expired
                .entry(r["approval_id"].as_str().unwrap().to_owned())
                .or_default() += 1;
        }
    }
    for id in &ids {
        assert_eq!(expired.get(id), Some(&1), "{id}: {expired:?}");
    }
    assert_eq!(backend.count(), 0);
}

#[test]
fn the_database_going_away_under_traffic_loses_nothing() {
    let cluster = Cluster::start();
    let db = Database::in_cluster(&cluster);
    let backend = Backend::start();
    let gw = gateway(&backend, &db.url, "gw-a");
    let other = gateway(&backend, &db.url, "gw-b");
    // A call resumed after the outage, and one held through it, both decided after it.
    let (call, approval) = gw.call_async("agent1", "db.query", json!({"sql": "select 7"}));

    let stop = AtomicBool::new(false);
    let answers: Mutex<Vec<(u16, String, Value)>> = Mutex::new(Vec::new());
    let (down_for, back_after, held) = std::thread::scope(|s| {
        let held = s.spawn(|| {
            gw.call(
                "agent1",
                "db.query",
                json!({"sql": "select 8"}),
                Some("wait=30"),
            )
        });
        pending_approval_of(&other, None, "select 8");
        for t in 0..4 {
            let (gw, stop, answers) = (&gw, &stop, &answers);
            s.spawn(move || {
                let mut i = 0;
                while !stop.load(Ordering::Relaxed) {
                    let args = json!({"t": t, "i": i});
                    let (st, b) = gw.call("agent1", "echo.x", args.clone(), None);
                    answers
                        .lock()
                        .unwrap()
                        .push((st, code(&b).to_owned(), args));
                    i += 1;
                    std::thread::sleep(Duration::from_millis(5));
                }
            });
        }
        std::thread::sleep(Duration::from_millis(500));
        cluster.stop();
        let stopped = Instant::now();
        // While it is down: calls are refused with 503, and the gateway says it is not ready.
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let (s, _) = gw.req("GET", "/readyz", None, None, None);
            if s == 503 {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "/readyz stayed ready with the database down"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        std::thread::sleep(Duration::from_millis(700));
        let (s, b) = gw.call("agent1", "echo.x", json!({"down": true}), None);
        assert_eq!((s, code(&b)), (503, "store.unavailable"), "{b}");
        let down_for = stopped.elapsed();
        cluster.restart();
        let restarted = Instant::now();
        // Back within 10 s, without a restart of the gateway.
        loop {
            let (s, b) = gw.call("agent1", "echo.x", json!({"back": true}), None);
            if s == 200 {
                break;
            }
            assert!(
                restarted.elapsed() < Duration::from_secs(10),
                "not serving 10 s after the database came back: {s} {b}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        let back_after = restarted.elapsed();
        std::thread::sleep(Duration::from_millis(300));
        stop.store(true, Ordering::Relaxed);
        // The request held through the outage is still waiting, and a decision on the other
        // gateway answers it.
        let (held_approval, _) = pending_approval_of(&other, None, "select 8");
        assert_eq!(other.approve("dba2", &held_approval).0, 200);
        (down_for, back_after, held.join().unwrap())
    });
    assert_eq!(held.0, 200, "the call held through the outage: {}", held.1);
    eprintln!("down for {down_for:?}; serving again {back_after:?} after the database was back");
    let (s, _) = gw.req("GET", "/readyz", None, None, None);
    assert_eq!(s, 200);

    // The call held across the outage is decided on the other gateway and runs once.
    assert_eq!(other.approve("dba1", &approval).0, 200);
    let (s, b) = gw.resume("agent1", &call);
    assert_eq!(s, 200, "{b}");

    let answers = answers.into_inner().unwrap();
    let ok = answers.iter().filter(|a| a.0 == 200).count();
    let refused = answers
        .iter()
        .filter(|a| a.0 == 503 && a.1 == "store.unavailable")
        .count();
    assert!(ok > 0 && refused > 0, "{ok} answered, {refused} refused");
    assert!(
        answers.iter().all(|a| a.0 == 200 || a.0 == 503),
        "{:?}",
        answers
            .iter()
            .filter(|a| a.0 != 200 && a.0 != 503)
            .collect::<Vec<_>>()
    );
    // Nothing ran unrecorded: every call the backend saw has its decision in the chain, and
    // every call answered 200 did run.
    verify(&db.url);
    let records = audit(&db.url);
    let decided: Vec<&Value> = records
        .iter()
        .filter(|r| r["kind"] == "call.decided")
        .map(|r| &r["args"])
        .collect();
    let (_, bodies) = backend.seen();
    for body in &bodies {
        let args: Value = serde_json::from_str(body).unwrap();
        assert!(
            decided.contains(&&args),
            "the backend ran {body} with no decision recorded"
        );
    }
    for (_, _, args) in answers.iter().filter(|a| a.0 == 200) {
        assert!(
            bodies
                .iter()
                .any(|b| serde_json::from_str::<Value>(b).unwrap() == *args),
            "answered 200 but never ran: {args}"
        );
    }
}

#[test]
fn migrations_run_by_command_and_a_newer_schema_refuses_to_start() {
    let db = Database::fresh();
    let out = Command::new(airlock_bin())
        .args(["store", "migrate", "--database-url", "env:AIRLOCK_DB"])
        .env("AIRLOCK_DB", &db.url)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    assert!(text.contains("from version 0 to 2"), "{text}");
    let (code, text) = airlock(&["store", "migrate", "--database-url", &db.url]);
    assert_eq!(code, 0, "{text}");
    assert!(text.contains("at version 2"), "{text}");

    // A schema from a newer binary: the gateway refuses to start, and says why.
    let mut client = postgres::Client::connect(&db.url, postgres::NoTls).unwrap();
    client
        .batch_execute("UPDATE airlock_schema SET version = 99")
        .unwrap();
    let backend = Backend::start();
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("policy")).unwrap();
    std::fs::write(dir.path().join("policy/policy.toml"), POLICY).unwrap();
    let config = format!(
        "{}\n[store]\nkind = \"postgres\"\nurl = \"{}\"\n",
        config_text(&backend, ""),
        db.url
    );
    std::fs::write(dir.path().join("airlock.toml"), config).unwrap();
    let out = Command::new(airlock_bin())
        .args(["serve", "--config"])
        .arg(dir.path().join("airlock.toml"))
        .args(["--listen", "127.0.0.1:0"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(stderr.contains("newer than this binary"), "{stderr}");
    let (code, text) = airlock(&["store", "migrate", "--database-url", &db.url]);
    assert_ne!(code, 0);
    assert!(text.contains("store.schema_too_new"), "{text}");

    // A database that cannot be reached is `store.unavailable`, not a new empty chain.
    let (code, text) = airlock(&[
        "audit",
        "verify",
        "--database-url",
        "host=127.0.0.1 port=9 user=postgres connect_timeout=2",
    ]);
    assert_ne!(code, 0);
    assert!(text.contains("store.unavailable"), "{text}");
}

#[test]
fn an_event_stream_on_one_gateway_tells_what_happens_on_the_others() {
    use std::io::{BufRead, BufReader};
    let db = Database::fresh();
    let backend = Backend::start();
    let gws = three(&backend, &db);
    let resp = gws[2]
        .client
        .get(format!("{}/v1/events", gws[2].base))
        .bearer_auth("token-ops")
        .send()
        .unwrap();
    let mut lines = BufReader::new(resp).lines();
    assert_eq!(lines.next().unwrap().unwrap(), ": connected");
    let (call, approval) = gws[0].call_async("agent1", "db.query", json!({"sql": "select 9"}));
    assert_eq!(gws[1].approve("dba1", &approval).0, 200);
    assert_eq!(gws[0].resume("agent1", &call).0, 200);
    let mut seen = Vec::new();
    let mut kind = String::new();
    for line in lines.by_ref() {
        let line = line.unwrap();
        if let Some(k) = line.strip_prefix("event: ") {
            kind = k.to_owned();
        } else if let Some(data) = line.strip_prefix("data: ") {
            let v: Value = serde_json::from_str(data).unwrap();
            let id = v
                .get("id")
                .or(v.get("call_id"))
                .cloned()
                .unwrap_or_default();
            seen.push((kind.clone(), id));
            if kind == "call.completed" {
                break;
            }
        }
    }
    assert_eq!(
        seen,
        vec![
            ("approval.requested".to_owned(), json!(approval)),
            ("approval.decided".to_owned(), json!(approval)),
            ("call.completed".to_owned(), json!(call)),
        ]
    );
}

#[test]
fn the_database_over_tls_is_verified_before_it_is_used() {
    let dir = tempfile::tempdir().unwrap();
    let (ca, cert, key) = certs(dir.path(), "pg");
    let cluster = Cluster::start_tls(&cert, &key);
    let db = Database::in_cluster(&cluster);
    let tcp = format!(
        "host=127.0.0.1 port={} user=postgres dbname={} sslmode=require",
        cluster.port, db.name
    );
    // A server whose certificate the system does not trust is refused, not used.
    let (code, text) = airlock(&["store", "migrate", "--database-url", &tcp]);
    assert_ne!(code, 0, "{text}");
    assert!(
        text.contains("store.unavailable") && text.contains("certificate"),
        "{text}"
    );
    let ca_arg = ca.to_str().unwrap();
    let (code, text) = airlock(&[
        "store",
        "migrate",
        "--database-url",
        &tcp,
        "--database-ca",
        ca_arg,
    ]);
    assert_eq!(code, 0, "{text}");

    // A gateway told which CA to trust serves calls over TLS.
    let backend = Backend::start();
    let config = format!(
        "{}\n[store]\nkind = \"postgres\"\nurl = \"{tcp}\"\ninstance = \"gw-tls\"\nca = \"{ca_arg}\"\n",
        config_text(&backend, "")
    );
    let gw = Gateway::start_with(&config, POLICY);
    let (s, b) = gw.call("agent1", "echo.x", json!({"tls": true}), None);
    assert_eq!(s, 200, "{b}");
    let mut client = postgres::Client::connect(&db.url, postgres::NoTls).unwrap();
    let rows = client
        .query(
            "SELECT s.ssl FROM pg_stat_ssl s JOIN pg_stat_activity a USING (pid) \
             WHERE a.application_name = 'airlock' AND a.datname = $1",
            &[&db.name],
        )
        .unwrap();
    assert!(!rows.is_empty());
    assert!(
        rows.iter().all(|r| r.get::<_, bool>(0)),
        "every connection of the gateway is encrypted"
    );
    let (code, text) = airlock(&[
        "audit",
        "verify",
        "--database-url",
        &tcp,
        "--database-ca",
        ca_arg,
    ]);
    assert_eq!(code, 0, "{text}");
}

#[test]
fn each_webhook_delivery_is_sent_by_one_gateway() {
    let db = Database::fresh();
    let backend = Backend::start();
    // The first four attempts fail, so retries are due while all three gateways poll the outbox.
    let receiver = Receiver::start("fail:4");
    let hook = format!(
        "[[webhooks]]\nid = \"oncall\"\nurl = \"http://127.0.0.1:{}/hook\"\nsecret = \"{SECRET}\"\n\
         events = [\"approval.requested\"]\nretry_schedule = [\"1s\", \"1s\"]\n",
        receiver.port
    );
    let gws: Vec<Gateway> = ["gw-a", "gw-b", "gw-c"]
        .iter()
        .map(|name| {
            let config = format!(
                "{}{hook}\n[store]\nkind = \"postgres\"\nurl = \"{}\"\ninstance = \"{name}\"\n",
                config_text(&backend, ""),
                db.url
            );
            Gateway::start_with(&config, POLICY)
        })
        .collect();
    let approvals: BTreeSet<String> = (0..9)
        .map(|i| {
            gws[i % 3]
                .call_async("agent1", "db.query", json!({"sql": format!("select {i}")}))
                .1
        })
        .collect();
    // Nine messages, four failed attempts retried: thirteen requests, and no more.
    receiver.wait_for(13, Duration::from_secs(20));
    std::thread::sleep(Duration::from_secs(2));
    let records = receiver.records();
    assert_eq!(records.len(), 13, "{records:#?}");
    assert!(records.iter().all(|r| r["valid"] == true));
    let delivered: Vec<&str> = records
        .iter()
        .filter(|r| r["n"].as_u64().unwrap() > 4)
        .map(|r| r["id"].as_str().unwrap())
        .collect();
    let distinct: BTreeSet<&str> = delivered.iter().copied().collect();
    assert_eq!(
        distinct.len(),
        9,
        "each message delivered once: {delivered:?}"
    );
    let named: BTreeSet<String> = records
        .iter()
        .map(|r| {
            r["body"]["data"]["id"]
                .as_str()
                .unwrap_or_default()
                .to_owned()
        })
        .collect();
    assert!(approvals.is_subset(&named), "{approvals:?} vs {named:?}");
}

/// A round-robin balancer (`tests/peers/round_robin.py`) in front of `ports`; its port, its
/// process and its log of which backend served each request.
fn balancer(ports: &[u16], log: &std::path::Path) -> (u16, std::process::Child) {
    let mut child = Command::new("python3")
        .arg(peers().join("round_robin.py"))
        .arg(log)
        .args(ports.iter().map(u16::to_string))
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let port = wait_for_line(&mut child, "listening ").parse().unwrap();
    (port, child)
}

#[test]
fn a_2026_mcp_client_behind_a_round_robin_balancer_is_held_approved_and_run_across_gateways() {
    let db = Database::fresh();
    let backend = Backend::start();
    let up = Upstream::start();
    let gws: Vec<Gateway> = ["gw-a", "gw-b"]
        .iter()
        .map(|name| {
            let config = format!(
                "{}[[mcp_servers]]\nname = \"up\"\nurl = \"http://127.0.0.1:{}/mcp\"\ntimeout = \"10s\"\n\n\
                 [store]\nkind = \"postgres\"\nurl = \"{}\"\ninstance = \"{name}\"\n",
                config_text(&backend, ""),
                up.port,
                db.url
            );
            Gateway::start_with(&config, MCP_POLICY)
        })
        .collect();
    let port_of = |gw: &Gateway| -> u16 { gw.base.rsplit(':').next().unwrap().parse().unwrap() };
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("balancer.log");
    let (lb, mut lb_child) = balancer(&[port_of(&gws[0]), port_of(&gws[1])], &log);
    // The official SDK client, stateless revision, through the balancer: its call is held for
    // approval with a sealed request state, the approval is decided on one gateway, and the
    // retry carrying the state may land on either.
    let out = Command::new("python3")
        .arg(peers().join("mcp_client.py"))
        .args([
            &format!("http://127.0.0.1:{lb}/mcp"),
            "token-agent1",
            "2026-07-28",
            "approve-on-elicit",
            "up.echo",
            r#"{"text":"balanced","n":777}"#,
            &gws[1].base,
            "token-ops",
            "approve",
        ])
        .output()
        .unwrap();
    let _ = lb_child.kill();
    let _ = lb_child.wait();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let lines: Vec<Value> = stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines[0]["elicited"]["mode"], "url", "{lines:?}");
    assert_eq!(lines[0]["elicited"]["decided"], 200, "{lines:?}");
    assert_eq!(lines[1]["result"]["isError"], false, "{lines:?}");
    assert_eq!(lines[1]["result"]["resultType"], "complete", "{lines:?}");
    // The call was held by one gateway and its retry, carrying the sealed state, was served by
    // the other.
    let log = std::fs::read_to_string(&log).unwrap();
    let port_for = |rpc: &str| -> Vec<&str> {
        log.lines()
            .filter(|l| l.ends_with(&format!(" {rpc}")))
            .map(|l| l.split(' ').next().unwrap())
            .collect()
    };
    let (held, retried) = (port_for("tools/call"), port_for("tools/call+state"));
    assert_eq!((held.len(), retried.len()), (1, 1), "{log}");
    assert_ne!(held[0], retried[0], "{log}");
    // The call ran once, and the one chain says so.
    verify(&db.url);
    let completed = audit(&db.url)
        .into_iter()
        .filter(|r| r["kind"] == "call.completed" && r["tool"] == "up.echo")
        .count();
    assert_eq!(completed, 1);
}
