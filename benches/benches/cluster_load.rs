//! Several gateways on one PostgreSQL database (DESIGN §14), measured side by side in one run:
//!
//! - approval cycles per second on PostgreSQL with 1 and 8 threads, beside fjall;
//! - allowed calls per second through three gateways on one database (32 clients spread over
//!   them), against one gateway on fjall and one on PostgreSQL (32 clients each), with the
//!   CPU per call of the PostgreSQL gateways and of PostgreSQL;
//! - decision -> answer across gateways: a call held on A, approved on B; the time from B's
//!   answer to A's, p50 and p99;
//! - then again over TCP, directly and through a proxy that adds 1 ms each way (a database in
//!   another zone, `support::delay`), with 8 connections per gateway so the network and not
//!   this machine's cores is what limits: a lone allowed call's latency, allowed calls/s and
//!   approval cycles/s of one gateway against three (alternating, five rounds: the medians and
//!   each round's ratio; only the gateways measured run, started afresh each round), the CPU
//!   of the gateways and of PostgreSQL per allowed call,
//!   decision -> answer across gateways.
//!
//! `cargo build --release -p airlock-gateway && cargo bench -p airlock-benches --bench
//! cluster_load`; with `AIRLOCK_BENCH_ONLY=delay` only the part over TCP runs, with
//! `AIRLOCK_BENCH_ONLY=allowed` only its allowed calls through the delay (the rounds of one
//! gateway against three and their CPU per call, in about a minute), and with
//! `AIRLOCK_BENCH_BIN=<path>` the gateways are that build of `airlock`; with
//! `AIRLOCK_BENCH_START=deployment` the database starts as a deployment's does (fresh, owned by
//! a role that is no superuser, signing in with a password over TCP) and only the part over
//! TCP runs. The database is a throwaway cluster the bench starts (Debian's PostgreSQL,
//! `scripts/postgres.sh`), or `AIRLOCK_TEST_DATABASE_URL`'s.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

#[path = "../../tests/tests/support/pg.rs"]
mod pg;
mod support;

use std::time::{Duration, Instant};

use airlock_benches::cycle_rate;
use airlock_storage::{PgOptions, Store, StoreOptions};
use sha2::{Digest, Sha256};
use support::{
    client, closed_loop, futures_join, pct, send, start_backend, CpuMark, GatewayProcess,
};

const AGENT: &str = "bench-agent-token";
const APPROVER: &str = "bench-approver-token";
const ROUNDS: usize = 3;
/// Rounds of one against three gateways over TCP, directly and through the delay.
const DELAY_ROUNDS: usize = 5;

fn median(mut xs: Vec<f64>) -> f64 {
    xs.sort_by(|a, b| a.total_cmp(b));
    xs[xs.len() / 2]
}

const POLICY: &str = "version = 1\n[defaults]\ndecision = \"deny\"\n\
    [[rules]]\nid = \"allow\"\ntools = [\"bench.allow\"]\ndecision = \"allow\"\n\
    [[rules]]\nid = \"hold\"\ntools = [\"bench.hold\"]\ndecision = \"require_approval\"\n";

/// A gateway on fjall (`url` None) or on the database at `url`.
fn gateway(backend: u16, url: Option<&str>, instance: &str) -> GatewayProcess {
    let store = url.map_or(String::new(), |u| {
        format!("[store]\nkind = \"postgres\"\nurl = \"{u}\"\ninstance = \"{instance}\"\n")
    });
    let hash = |t: &str| airlock_policy::hex(&Sha256::digest(t.as_bytes()));
    let config = format!(
        "[server]\ndata_dir = \"data\"\npolicy = \"policy\"\nhold_timeout = \"10s\"\n\
         [[principals]]\nid = \"agent\"\nrole = \"agent\"\ntoken_sha256 = \"{}\"\n\
         [[principals]]\nid = \"approver\"\nrole = \"approver\"\ntoken_sha256 = \"{}\"\n\
         [[tools]]\nname = \"bench.*\"\nupstream = \"http://127.0.0.1:{backend}/echo\"\n{store}",
        hash(AGENT),
        hash(APPROVER),
    );
    // `AIRLOCK_BENCH_BIN=<path to another airlock build>`: that build's gateways are measured,
    // to set two builds side by side run after run.
    match std::env::var_os("AIRLOCK_BENCH_BIN") {
        Some(bin) => GatewayProcess::start_bin(std::path::Path::new(&bin), &config, POLICY),
        None => GatewayProcess::start(&config, POLICY),
    }
}

fn main() {
    if std::env::args().any(|a| a == "--list" || a == "--test") {
        return; // `cargo test --benches` probes harness=false benches; nothing to list.
    }
    // `AIRLOCK_BENCH_START=deployment`: the database starts as a deployment's does (fresh, owned
    // by a role that is no superuser and signs in with a password over TCP); only the part
    // over TCP runs then.
    let deployment = std::env::var("AIRLOCK_BENCH_START").as_deref() == Ok("deployment");
    let db = if deployment {
        pg::Database::owned_by_role("airlock_gw", "cluster-load-password")
    } else {
        pg::Database::fresh()
    };

    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    let (backend, _) = start_backend();
    let http = client();
    // `AIRLOCK_BENCH_ONLY=delay`: only the part over TCP, directly and through the delay;
    // `allowed`: only its allowed calls through the delay.
    let only = std::env::var("AIRLOCK_BENCH_ONLY").unwrap_or_default();
    if only != "delay" && only != "allowed" && !deployment {
        over_unix_sockets(&rt, &http, &db, backend);
    }
    through_a_delay(&rt, &http, &db, backend, only == "allowed");
}

/// Approval cycles of the store on fjall and PostgreSQL; allowed calls of three gateways on
/// one database (over its Unix socket) against one on fjall and one on PostgreSQL; decision ->
/// answer across gateways.
fn over_unix_sockets(
    rt: &tokio::runtime::Runtime,
    http: &support::HttpClient,
    db: &pg::Database,
    backend: u16,
) {
    // Approval cycles: fjall and PostgreSQL, 1 and 8 threads, alternating.
    let dir = tempfile::tempdir().unwrap();
    let fjall = Store::open(dir.path(), StoreOptions::default()).unwrap();
    let pg = Store::open_postgres(
        &PgOptions {
            url: db.url.clone(),
            ..PgOptions::default()
        },
        StoreOptions {
            instance: "bench".into(),
            ..StoreOptions::default()
        },
    )
    .unwrap();
    let (mut f1, mut f8, mut p1, mut p8) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for run in 0..ROUNDS {
        f1.push(cycle_rate(&fjall, 1, 100, &format!("f1-{run}")));
        p1.push(cycle_rate(&pg, 1, 100, &format!("p1-{run}")));
        f8.push(cycle_rate(&fjall, 8, 50, &format!("f8-{run}")));
        p8.push(cycle_rate(&pg, 8, 50, &format!("p8-{run}")));
    }
    println!(
        "approval cycles/s (create+approve+consume, each durable): fjall 1 thread {:.0}, 8 threads {:.0}; PostgreSQL 1 thread {:.0}, 8 threads {:.0}",
        median(f1),
        median(f8),
        median(p1),
        median(p8)
    );
    drop(pg);

    let body = r#"{"tool":"bench.allow","args":{"n":1}}"#;

    // Allowed calls: three gateways on one database against one on fjall.
    let cluster: Vec<GatewayProcess> = ["a", "b", "c"]
        .iter()
        .map(|n| gateway(backend, Some(&db.url), n))
        .collect();
    let single = gateway(backend, None, "");
    let solo = gateway(backend, Some(&db.url), "solo");
    let (mut three, mut one, mut one_pg) = (Vec::new(), Vec::new(), Vec::new());
    let (mut cpu_three, mut cpu_one) = (Vec::new(), Vec::new());
    rt.block_on(async {
        for _ in 0..ROUNDS {
            let loops = cluster.iter().enumerate().map(|(i, g)| {
                let uri = format!("http://127.0.0.1:{}/v1/calls", g.port);
                let http = http.clone();
                // 32 clients in all: 11, 11 and 10.
                let workers = if i < 2 { 11 } else { 10 };
                async move { closed_loop(&http, &uri, Some(AGENT), body, workers, 3).await }
            });
            let mark = CpuMark::now(&cluster.iter().collect::<Vec<_>>());
            let rates = futures_join(loops.collect()).await;
            three.push(rates.iter().sum::<f64>());
            cpu_three.push(mark.per_call(rates.iter().sum::<f64>() * 3.0));
            let uri = format!("http://127.0.0.1:{}/v1/calls", single.port);
            one.push(closed_loop(http, &uri, Some(AGENT), body, 32, 3).await);
            let uri = format!("http://127.0.0.1:{}/v1/calls", solo.port);
            let mark = CpuMark::now(&[&solo]);
            let rate = closed_loop(http, &uri, Some(AGENT), body, 32, 3).await;
            one_pg.push(rate);
            cpu_one.push(mark.per_call(rate * 3.0));
        }
    });
    let (three, one, one_pg) = (median(three), median(one), median(one_pg));
    println!(
        "allowed calls/s, 32 clients: three gateways on one PostgreSQL {three:.0}, one gateway on PostgreSQL {one_pg:.0}, one gateway on fjall {one:.0} (three on PostgreSQL / one on fjall: {:.2}x)",
        three / one
    );
    println!(
        "  CPU per allowed call, gateways + PostgreSQL: three gateways {}, one gateway on PostgreSQL {} (medians)",
        cpu_per_call(&cpu_three),
        cpu_per_call(&cpu_one)
    );
    drop(solo);

    // Decision -> answer across gateways.
    let lat = decision_to_answer(rt, http, &cluster[0], &cluster[1], 100);
    println!(
        "decision on B -> answer on A: p50 {:.2} ms, p99 {:.2} ms (100 calls)",
        lat.0, lat.1
    );
    drop(cluster);
    drop(single);
}

/// Gateways that reach PostgreSQL over TCP, directly and through a proxy that adds 1 ms each
/// way (a database in another zone), side by side: a lone allowed call's latency (and so how
/// many round trips it waits for), allowed calls/s and approval cycles/s of one gateway and
/// of three (8 connections each), and decision -> answer across gateways.
fn through_a_delay(
    rt: &tokio::runtime::Runtime,
    http: &support::HttpClient,
    db: &pg::Database,
    backend: u16,
    allowed_only: bool,
) {
    let pg_port: u16 = db
        .url
        .split_whitespace()
        .find_map(|kv| kv.strip_prefix("port="))
        .and_then(|p| p.parse().ok())
        .expect("a port in the database URL");
    let target = std::net::SocketAddr::from(([127, 0, 0, 1], pg_port));
    let proxy = support::delay::DelayProxy::start(target, Duration::from_millis(1));
    let url = |port: u16| format!("host=127.0.0.1 port={port} {} dbname={}", db.login, db.name);
    for (label, port) in [("direct", pg_port), ("1 ms each way", proxy.port)] {
        if allowed_only && port == pg_port {
            continue;
        }
        let url = url(port);
        let rtt = select_one_round_trip(&url);
        let tag = if port == pg_port { "t" } else { "d" };
        // Only the gateways measured run: one gateway alone is a cluster of one, and an idle
        // gateway still hears (and its database process delivers) every commit's announcement.
        // Each round starts its gateways afresh, with chains of their own.
        let start_one = |round: usize| gateway(backend, Some(&url), &format!("{tag}-solo-{round}"));
        let start_three = |round: usize| -> Vec<GatewayProcess> {
            ["a", "b", "c"]
                .iter()
                .map(|n| gateway(backend, Some(&url), &format!("{tag}-{n}-{round}")))
                .collect()
        };
        let body = r#"{"tool":"bench.allow","args":{"n":1}}"#;
        let lone = rt.block_on(async {
            let solo = start_one(0);
            let uri = format!("http://127.0.0.1:{}/v1/calls", solo.port);
            let mut lone = Vec::new();
            for _ in 0..100 {
                let start = Instant::now();
                let (status, _) = send(http, &uri, Some(AGENT), None, body.into()).await;
                assert_eq!(status, 200);
                lone.push(start.elapsed());
            }
            lone.sort();
            pct(&lone, 0.5)
        });
        // One against three, alternating, DELAY_ROUNDS times: the machine is shared and noisy,
        // so each round's ratio is printed and the medians are what count.
        let mut allowed = Vec::new();
        let mut cycles = Vec::new();
        let mut three = Vec::new();
        let (mut cpu_one, mut cpu_three) = (Vec::new(), Vec::new());
        for round in 1..=DELAY_ROUNDS {
            let solo = start_one(round);
            let uri = format!("http://127.0.0.1:{}/v1/calls", solo.port);
            let (one_allowed, one_cycles) = rt.block_on(async {
                warm_up(http, solo.port, body).await;
                let mark = CpuMark::now(&[&solo]);
                let allowed = closed_loop(http, &uri, Some(AGENT), body, 8, 3).await;
                cpu_one.push(mark.per_call(allowed * 3.0));
                if allowed_only {
                    return (allowed, 0.0);
                }
                (allowed, approval_cycles(http, solo.port, 8, 3).await)
            });
            drop(solo);
            three = start_three(round);
            let (all_allowed, all_cycles) = rt.block_on(async {
                for g in &three {
                    warm_up(http, g.port, body).await;
                }
                let loops = three.iter().map(|g| {
                    let (http, uri) = (
                        http.clone(),
                        format!("http://127.0.0.1:{}/v1/calls", g.port),
                    );
                    async move { closed_loop(&http, &uri, Some(AGENT), body, 8, 3).await }
                });
                let mark = CpuMark::now(&three.iter().collect::<Vec<_>>());
                let allowed: f64 = futures_join(loops.collect()).await.iter().sum();
                cpu_three.push(mark.per_call(allowed * 3.0));
                if allowed_only {
                    return (allowed, 0.0);
                }
                let loops = three.iter().map(|g| {
                    let (http, port) = (http.clone(), g.port);
                    async move { approval_cycles(&http, port, 8, 3).await }
                });
                let cycles: f64 = futures_join(loops.collect()).await.iter().sum();
                (allowed, cycles)
            });
            allowed.push((one_allowed, all_allowed));
            cycles.push((one_cycles, all_cycles));
            if round < DELAY_ROUNDS {
                drop(std::mem::take(&mut three));
            }
        }
        println!("PostgreSQL over TCP, {label} (SELECT 1 round trip {rtt:.2} ms):");
        println!(
            "  lone allowed call p50 {:.2} ms",
            lone.as_secs_f64() * 1000.0
        );
        println!(
            "  allowed calls/s, 8 connections per gateway: {}",
            one_against_three(&allowed)
        );
        println!(
            "  CPU per allowed call, gateways + PostgreSQL: one gateway {}, three {} (medians)",
            cpu_per_call(&cpu_one),
            cpu_per_call(&cpu_three)
        );
        if allowed_only {
            continue;
        }
        println!(
            "  approval cycles/s, 8 connections per gateway: {}",
            one_against_three(&cycles)
        );
        let (p50, p99) = decision_to_answer(rt, http, &three[0], &three[1], 50);
        println!("  decision on B -> answer on A: p50 {p50:.2} ms, p99 {p99:.2} ms (50 calls)");
    }
}

/// A fresh gateway's first calls, before it is measured: its connections to the database are
/// opened as they are first needed.
async fn warm_up(http: &support::HttpClient, port: u16, body: &str) {
    let uri = format!("http://127.0.0.1:{port}/v1/calls");
    let calls = (0..8).map(|_| {
        let (http, uri, body) = (http.clone(), uri.clone(), body.to_owned());
        async move {
            for _ in 0..4 {
                let (status, _) = send(&http, &uri, Some(AGENT), None, body.clone()).await;
                assert_eq!(status, 200);
            }
            0.0
        }
    });
    futures_join(calls.collect()).await;
}

/// Rounds' CPU per call, (gateways, PostgreSQL) µs: the medians of each.
fn cpu_per_call(rounds: &[(f64, f64)]) -> String {
    format!(
        "{:.0} + {:.0} us",
        median(rounds.iter().map(|r| r.0).collect()),
        median(rounds.iter().map(|r| r.1).collect())
    )
}

/// Rounds of (one gateway, three gateways) rates: the medians of each and of the rounds'
/// ratios, then every round's ratio.
fn one_against_three(rounds: &[(f64, f64)]) -> String {
    let ratios: Vec<f64> = rounds.iter().map(|(one, three)| three / one).collect();
    format!(
        "one gateway {:.0}, three {:.0} (median of {} rounds; three / one {:.2}x, rounds {})",
        median(rounds.iter().map(|r| r.0).collect()),
        median(rounds.iter().map(|r| r.1).collect()),
        rounds.len(),
        median(ratios.clone()),
        ratios
            .iter()
            .map(|r| format!("{r:.2}"))
            .collect::<Vec<_>>()
            .join(", ")
    )
}

/// The median time of `SELECT 1` over a connection to `url`: what one round trip costs.
fn select_one_round_trip(url: &str) -> f64 {
    let mut client = postgres::Client::connect(url, postgres::NoTls).unwrap();
    let mut times = Vec::new();
    for _ in 0..50 {
        let start = Instant::now();
        client.simple_query("SELECT 1").unwrap();
        times.push(start.elapsed().as_secs_f64() * 1000.0);
    }
    median(times)
}

/// Approval cycles per second on the gateway at `port`, `workers` at a time for `secs`: a call
/// held (answered 202 at once), approved, then resumed and run.
async fn approval_cycles(http: &support::HttpClient, port: u16, workers: usize, secs: u64) -> f64 {
    let end = Instant::now() + Duration::from_secs(secs);
    let mut handles = Vec::new();
    for w in 0..workers {
        let http = http.clone();
        handles.push(tokio::spawn(async move {
            let mut n = 0u64;
            while Instant::now() < end {
                let base = format!("http://127.0.0.1:{port}/v1");
                let body =
                    format!(r#"{{"tool":"bench.hold","args":{{"w":{w},"n":{n},"p":{port}}}}}"#);
                let (status, held) = send(
                    &http,
                    &format!("{base}/calls"),
                    Some(AGENT),
                    Some("respond-async"),
                    body,
                )
                .await;
                assert_eq!(status, 202);
                let held: serde_json::Value = serde_json::from_slice(&held).unwrap();
                let (call, approval) = (
                    held["call_id"].as_str().unwrap().to_owned(),
                    held["approval"]["id"].as_str().unwrap().to_owned(),
                );
                let approve = format!("{base}/approvals/{approval}/approve");
                let (status, _) = send(&http, &approve, Some(APPROVER), None, "{}".into()).await;
                assert_eq!(status, 200);
                let resume = format!("{base}/calls/{call}/resume");
                let (status, _) = send(&http, &resume, Some(AGENT), None, "{}".into()).await;
                assert_eq!(status, 200);
                n += 1;
            }
            n
        }));
    }
    let mut done = 0;
    for h in handles {
        done += h.await.unwrap();
    }
    done as f64 / secs as f64
}

/// A call held on `a`, approved on `b`: the time from `b`'s answer to `a`'s, p50 and p99 in
/// ms over `n` calls.
fn decision_to_answer(
    rt: &tokio::runtime::Runtime,
    http: &support::HttpClient,
    a: &GatewayProcess,
    b: &GatewayProcess,
    n: usize,
) -> (f64, f64) {
    let mut lat = Vec::new();
    rt.block_on(async {
        for i in 0..n {
            let held = {
                let http = http.clone();
                let uri = format!("http://127.0.0.1:{}/v1/calls", a.port);
                let body = format!(
                    r#"{{"tool":"bench.hold","args":{{"i":{i},"a":{}}}}}"#,
                    a.port
                );
                tokio::spawn(async move {
                    let (status, _) = send(&http, &uri, Some(AGENT), None, body).await;
                    (status, Instant::now())
                })
            };
            let approval = loop {
                let (_, list) = get(http, b.port, "/v1/approvals?status=pending").await;
                let v: serde_json::Value = serde_json::from_slice(&list).unwrap();
                if let Some(id) = v["approvals"]
                    .as_array()
                    .and_then(|l| {
                        l.iter()
                            .find(|x| x["args"]["i"] == i && x["args"]["a"] == a.port)
                    })
                    .and_then(|x| x["id"].as_str())
                {
                    break id.to_owned();
                }
                tokio::time::sleep(Duration::from_millis(2)).await;
            };
            let uri = format!(
                "http://127.0.0.1:{}/v1/approvals/{approval}/approve",
                b.port
            );
            let (status, _) = send(http, &uri, Some(APPROVER), None, "{}".into()).await;
            assert_eq!(status, 200);
            let decided = Instant::now();
            let (status, answered) = held.await.unwrap();
            assert_eq!(status, 200);
            lat.push(answered.saturating_duration_since(decided));
        }
    });
    lat.sort();
    (
        pct(&lat, 0.5).as_secs_f64() * 1000.0,
        pct(&lat, 0.99).as_secs_f64() * 1000.0,
    )
}

/// Runs the futures concurrently on the current runtime; their outputs in order.
async fn get(http: &support::HttpClient, port: u16, path: &str) -> (u16, bytes::Bytes) {
    use http_body_util::BodyExt;
    let req = hyper::Request::get(format!("http://127.0.0.1:{port}{path}"))
        .header("authorization", format!("Bearer {APPROVER}"))
        .body(http_body_util::Full::new(bytes::Bytes::new()))
        .unwrap();
    let resp = http.request(req).await.unwrap();
    let status = resp.status().as_u16();
    (status, resp.into_body().collect().await.unwrap().to_bytes())
}
