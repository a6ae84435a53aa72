//! Gateway load harness: the release `airlock` binary in front of an in-process backend,
//! measured side by side with the same backend called directly.
//!
//! - open loop at a fixed rate (1,000 req/s): latency percentiles, direct vs through the
//!   gateway's allow path;
//! - closed loop: maximum throughput with 32 concurrent clients, direct vs gateway;
//! - decision to answer: from sending an approval to the held call's response;
//! - memory: the gateway's RSS idle and with 10,000 pending approvals.
//!
//! Run: `cargo build --release -p airlock-gateway && cargo bench -p airlock-benches --bench gateway_load`
//! (`AIRLOCK_BENCH_DURABILITY=batched` for the batched mode).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::Request;
use sha2::{Digest, Sha256};

use support::{client, closed_loop, pct, send, start_backend, GatewayProcess, HttpClient};

const AGENT: &str = "bench-agent-token";
const APPROVER: &str = "bench-approver-token";

fn hash(t: &str) -> String {
    airlock_policy::hex(&Sha256::digest(t.as_bytes()))
}

fn start_gateway(backend: u16) -> GatewayProcess {
    // `AIRLOCK_BENCH_DURABILITY=batched` measures the batched mode.
    let durability = std::env::var("AIRLOCK_BENCH_DURABILITY").unwrap_or_else(|_| "sync".into());
    let config = format!(
        "[server]\ndata_dir = \"data\"\npolicy = \"policy\"\nmax_held = 20000\ndurability = \"{durability}\"\n\
         [[principals]]\nid = \"agent\"\nrole = \"agent\"\ntoken_sha256 = \"{}\"\n\
         [[principals]]\nid = \"approver\"\nrole = \"approver\"\ntoken_sha256 = \"{}\"\n\
         [[tools]]\nname = \"bench.*\"\nupstream = \"http://127.0.0.1:{backend}/echo\"\n",
        hash(AGENT),
        hash(APPROVER),
    );
    GatewayProcess::start(
        &config,
        "version = 1\n[defaults]\ndecision = \"deny\"\n[[rules]]\nid = \"allow\"\ntools = [\"bench.allow\"]\ndecision = \"allow\"\n[[rules]]\nid = \"hold\"\ntools = [\"bench.hold\"]\ndecision = \"require_approval\"\n",
    )
}

async fn get(client: &HttpClient, uri: &str, token: &str) -> Bytes {
    let req = Request::get(uri)
        .header("authorization", format!("Bearer {token}"))
        .body(Full::new(Bytes::new()))
        .unwrap();
    client
        .request(req)
        .await
        .unwrap()
        .into_body()
        .collect()
        .await
        .unwrap()
        .to_bytes()
}

/// Requests at a fixed `rate` for `count` requests; latency of each from its send.
async fn open_loop(
    client: &HttpClient,
    uri: &str,
    token: Option<&str>,
    body: &str,
    rate: u64,
    count: u64,
) -> Vec<Duration> {
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let start = tokio::time::Instant::now() + Duration::from_millis(50);
    for i in 0..count {
        let at = start + Duration::from_micros(i * 1_000_000 / rate);
        tokio::time::sleep_until(at).await;
        let (client, uri, token, body, tx) = (
            client.clone(),
            uri.to_owned(),
            token.map(str::to_owned),
            body.to_owned(),
            tx.clone(),
        );
        tokio::spawn(async move {
            // Timed from the actual send: tokio's timer wakes with up to 1 ms of slop, which
            // would otherwise dominate both sides at this rate.
            let sent = Instant::now();
            let (status, _) = send(&client, &uri, token.as_deref(), None, body).await;
            assert_eq!(status, 200);
            let _ = tx.send(sent.elapsed());
        });
    }
    drop(tx);
    let mut lat = Vec::new();
    while let Some(d) = rx.recv().await {
        lat.push(d);
    }
    lat.sort();
    lat
}

fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

fn main() {
    if std::env::args().any(|a| a == "--list" || a == "--test") {
        return;
    }
    let (backend_port, served) = start_backend();
    let gw = start_gateway(backend_port);
    let pid = gw.child.id();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let client = client();
        let direct = format!("http://127.0.0.1:{backend_port}/echo");
        let through = format!("http://127.0.0.1:{}/v1/calls", gw.port);
        let args = r#"{"n":1,"text":"hello"}"#;
        let call = format!(r#"{{"tool":"bench.allow","args":{args}}}"#);
        tokio::time::sleep(Duration::from_millis(300)).await;
        let idle = rss_kib(pid);

        // Warm both paths.
        open_loop(&client, &direct, None, args, 1000, 500).await;
        open_loop(&client, &through, Some(AGENT), &call, 1000, 500).await;
        let mut rows = Vec::new();
        for round in 0..3 {
            let d = open_loop(&client, &direct, None, args, 1000, 3000).await;
            let g = open_loop(&client, &through, Some(AGENT), &call, 1000, 3000).await;
            rows.push((pct(&d, 0.5), pct(&d, 0.99), pct(&g, 0.5), pct(&g, 0.99)));
            eprintln!("open loop round {round}: direct p50 {:?} p99 {:?}, gateway p50 {:?} p99 {:?}", rows[round].0, rows[round].1, rows[round].2, rows[round].3);
        }
        rows.sort_by_key(|r| r.2);
        let (dp50, dp99, gp50, gp99) = rows[1];
        println!("open loop 1000 req/s (median round of 3): direct p50 {:.0} µs p99 {:.0} µs; gateway p50 {:.0} µs p99 {:.0} µs; added p50 {:.0} µs, added p99 {:.0} µs",
            dp50.as_secs_f64() * 1e6, dp99.as_secs_f64() * 1e6, gp50.as_secs_f64() * 1e6, gp99.as_secs_f64() * 1e6,
            (gp50.as_secs_f64() - dp50.as_secs_f64()) * 1e6, (gp99.as_secs_f64() - dp99.as_secs_f64()) * 1e6);

        let mut ratios = Vec::new();
        for _ in 0..3 {
            let d = closed_loop(&client, &direct, None, args, 32, 3).await;
            let g = closed_loop(&client, &through, Some(AGENT), &call, 32, 3).await;
            ratios.push((g / d, d, g));
        }
        ratios.sort_by(|a, b| a.0.total_cmp(&b.0));
        let (ratio, d, g) = ratios[1];
        println!("closed loop, 32 clients (median of 3): direct {d:.0} req/s, gateway {g:.0} req/s, ratio {ratio:.2}");

        // Decision to answer.
        let approvals = format!("http://127.0.0.1:{}/v1/approvals?status=pending&tool=bench.hold", gw.port);
        let mut lat = Vec::new();
        for i in 0..200 {
            let body = format!(r#"{{"tool":"bench.hold","args":{{"i":{i}}}}}"#);
            let (c, t) = (client.clone(), through.clone());
            let held = tokio::spawn(async move { send(&c, &t, Some(AGENT), Some("wait=30"), body).await });
            let id = loop {
                let list: serde_json::Value = serde_json::from_slice(&get(&client, &approvals, APPROVER).await).unwrap();
                if let Some(id) = list["approvals"].as_array().and_then(|a| a.first()).and_then(|a| a["id"].as_str()) {
                    break id.to_owned();
                }
                tokio::time::sleep(Duration::from_millis(1)).await;
            };
            let start = Instant::now();
            let (s, _) = send(&client, &format!("http://127.0.0.1:{}/v1/approvals/{id}/approve", gw.port), Some(APPROVER), None, "{}".into()).await;
            assert_eq!(s, 200);
            let (s, _) = held.await.unwrap();
            assert_eq!(s, 200);
            lat.push(start.elapsed());
        }
        lat.sort();
        println!("decision to answer (approve sent → held call answered, 200 trials): p50 {:.2} ms, p99 {:.2} ms",
            pct(&lat, 0.5).as_secs_f64() * 1e3, pct(&lat, 0.99).as_secs_f64() * 1e3);

        // Memory with 10,000 pending approvals.
        let sem = Arc::new(tokio::sync::Semaphore::new(32));
        let mut handles = Vec::new();
        for i in 0..10_000 {
            let permit = sem.clone().acquire_owned().await.unwrap();
            let (c, t) = (client.clone(), through.clone());
            handles.push(tokio::spawn(async move {
                let body = format!(r#"{{"tool":"bench.hold","args":{{"pending":{i}}}}}"#);
                let (s, _) = send(&c, &t, Some(AGENT), Some("respond-async"), body).await;
                assert_eq!(s, 202);
                drop(permit);
            }));
        }
        for h in handles {
            h.await.unwrap();
        }
        println!("memory: RSS idle {} MiB, with 10,000 pending approvals {} MiB", idle / 1024, rss_kib(pid) / 1024);
    });
    eprintln!("backend served {} requests", served.load(Ordering::Relaxed));
}
