//! The store that grows: allowed calls through one gateway, then three, each on a fresh
//! PostgreSQL database, until the store holds `AIRLOCK_BENCH_RECORDS` records (rows of its one
//! table; default 1,000,000), directly over TCP and through a proxy that adds 1 ms each way.
//! Started the way a deployment starts: a fresh database owned by a role that is not a
//! superuser, signing in with a password over TCP (SCRAM), each gateway's connections opened
//! before the first measured call.
//!
//! Every second of load is a segment; each report line covers the segments since the last one, one
//! line per `AIRLOCK_BENCH_STEP` records (default 100,000): the records then, calls/s, and the
//! CPU per call of the gateways and of PostgreSQL. The first line (the store under 10,000
//! records) is what the last is compared with: PostgreSQL's CPU per call should not grow with
//! the store.
//!
//! `cargo build --release -p airlock-gateway && cargo bench -p airlock-benches --bench growth`;
//! `AIRLOCK_BENCH_ONLY=direct|delay` runs one path, `AIRLOCK_BENCH_GATEWAYS=1|3` one size,
//! `AIRLOCK_BENCH_BIN=<path>` another build of `airlock`. Its own PostgreSQL cluster (Debian's,
//! `scripts/postgres.sh`), always: a cluster that asks TCP clients for a password.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

#[path = "../../tests/tests/support/pg.rs"]
mod pg;
mod support;

use std::time::{Duration, Instant};

use sha2::{Digest, Sha256};
use support::{client, closed_loop, futures_join, send, start_backend, CpuMark, GatewayProcess};

const AGENT: &str = "bench-agent-token";
const ROLE: &str = "airlock_gw";
const PASSWORD: &str = "growth-bench-password";
const SEGMENT_SECS: u64 = 1;
/// Clients per gateway.
const CLIENTS: usize = 8;

const POLICY: &str = "version = 1\n[defaults]\ndecision = \"deny\"\n\
    [[rules]]\nid = \"allow\"\ntools = [\"bench.allow\"]\ndecision = \"allow\"\n";

fn env_number(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.replace('_', "").parse().ok())
        .unwrap_or(default)
}

fn gateway(backend: u16, url: &str, instance: &str) -> GatewayProcess {
    let hash = airlock_policy::hex(&Sha256::digest(AGENT.as_bytes()));
    let config = format!(
        "[server]\ndata_dir = \"data\"\npolicy = \"policy\"\n\
         [[principals]]\nid = \"agent\"\nrole = \"agent\"\ntoken_sha256 = \"{hash}\"\n\
         [[tools]]\nname = \"bench.*\"\nupstream = \"http://127.0.0.1:{backend}/echo\"\n\
         [store]\nkind = \"postgres\"\nurl = \"{url}\"\ninstance = \"{instance}\"\n"
    );
    match std::env::var_os("AIRLOCK_BENCH_BIN") {
        Some(bin) => GatewayProcess::start_bin(std::path::Path::new(&bin), &config, POLICY),
        None => GatewayProcess::start(&config, POLICY),
    }
}

/// Rows of the store's table, read over the trusted socket (outside any measured segment).
fn records(admin: &str, db: &str) -> u64 {
    let mut c =
        postgres::Client::connect(&format!("{admin} dbname={db}"), postgres::NoTls).unwrap();
    let n: i64 = c
        .query_one("SELECT count(*) FROM airlock_kv", &[])
        .unwrap()
        .get(0);
    n as u64
}

/// What the segments since the last report cost.
#[derive(Default)]
struct Window {
    calls: f64,
    secs: f64,
    gateway_us: f64,
    postgres_us: f64,
}

impl Window {
    fn line(&self, records: u64) -> String {
        format!(
            "{records:>9} records: {:>6.0} calls/s, CPU per call {:>4.0} µs gateways + {:>4.0} µs PostgreSQL",
            self.calls / self.secs,
            self.gateway_us / self.calls,
            self.postgres_us / self.calls
        )
    }
}

fn main() {
    if std::env::args().any(|a| a == "--list" || a == "--test") {
        return; // `cargo test --benches` probes harness=false benches; nothing to list.
    }
    let target = env_number("AIRLOCK_BENCH_RECORDS", 1_000_000);
    let step = env_number("AIRLOCK_BENCH_STEP", 100_000);
    let only = std::env::var("AIRLOCK_BENCH_ONLY").unwrap_or_default();
    let sizes: Vec<usize> = match std::env::var("AIRLOCK_BENCH_GATEWAYS").as_deref() {
        Ok("1") => vec![1],
        Ok("3") => vec![3],
        _ => vec![1, 3],
    };
    let cluster = pg::Cluster::start_host_auth("scram-sha-256");
    let admin = cluster.url.replace(" dbname=postgres", "");
    cluster.create_role(ROLE, PASSWORD);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    let (backend, _) = start_backend();
    let http = client();
    let proxy = support::delay::DelayProxy::start(
        std::net::SocketAddr::from(([127, 0, 0, 1], cluster.port)),
        Duration::from_millis(1),
    );
    let mut n = 0;
    for (label, port) in [("direct", cluster.port), ("1 ms each way", proxy.port)] {
        if (only == "direct" && port != cluster.port) || (only == "delay" && port == cluster.port) {
            continue;
        }
        for &size in &sizes {
            n += 1;
            let db = format!("growth_{n}");
            cluster.create_database(&db, ROLE);
            let url =
                format!("host=127.0.0.1 port={port} user={ROLE} password={PASSWORD} dbname={db}");
            println!("{size} gateway(s), PostgreSQL over TCP {label}, a fresh database, a password role:");
            let gateways: Vec<GatewayProcess> = (0..size)
                .map(|i| gateway(backend, &url, &format!("g{n}-{i}")))
                .collect();
            let body = r#"{"tool":"bench.allow","args":{"n":1}}"#;
            rt.block_on(async {
                // Each gateway's connections open before the first measured call.
                for g in &gateways {
                    let uri = format!("http://127.0.0.1:{}/v1/calls", g.port);
                    let warm = (0..CLIENTS).map(|_| {
                        let (http, uri) = (http.clone(), uri.clone());
                        async move { send(&http, &uri, Some(AGENT), None, body.into()).await }
                    });
                    for (status, _) in futures_join(warm.collect()).await {
                        assert_eq!(status, 200);
                    }
                }
            });
            let started = Instant::now();
            let mut window = Window::default();
            let mut first: Option<String> = None;
            let mut next_report = 10_000.min(step);
            loop {
                let mark = CpuMark::now(&gateways.iter().collect::<Vec<_>>());
                let calls: f64 = rt.block_on(async {
                    let loops = gateways.iter().map(|g| {
                        let (http, uri) = (
                            http.clone(),
                            format!("http://127.0.0.1:{}/v1/calls", g.port),
                        );
                        async move {
                            closed_loop(&http, &uri, Some(AGENT), body, CLIENTS, SEGMENT_SECS).await
                        }
                    });
                    futures_join(loops.collect()).await.iter().sum::<f64>() * SEGMENT_SECS as f64
                });
                let (gw_us, pg_us) = mark.per_call(calls);
                window.calls += calls;
                window.secs += SEGMENT_SECS as f64;
                window.gateway_us += gw_us * calls;
                window.postgres_us += pg_us * calls;
                let now = records(&admin, &db);
                if now >= next_report || now >= target {
                    let line = window.line(now);
                    println!("  {line}");
                    if first.is_none() {
                        first = Some(line);
                    }
                    window = Window::default();
                    next_report = (now / step + 1) * step;
                }
                if now >= target {
                    break;
                }
            }
            println!(
                "  {} records in {:.0} s; the first line and the last: compare their PostgreSQL CPU per call",
                records(&admin, &db),
                started.elapsed().as_secs_f64()
            );
        }
    }
}
