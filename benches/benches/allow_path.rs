//! The allowed call, side by side in one run (DESIGN §13, issue 11): the same minimal backend
//! called directly, through an nginx `proxy_pass` hop (Debian's nginx, when installed), and
//! through airlock in `sync` and `batched` mode — and, with `AIRLOCK_BENCH_BASELINE=<path to
//! another airlock build>`, through that build too (both modes), so a change is measured against what it
//! replaced; with `AIRLOCK_BENCH_WORKERS=N`, `sync` with N tokio worker threads too; with
//! `AIRLOCK_BENCH_LOG=LEVEL`, `sync` logging at that level too (the others log only errors).
//!
//! In three rounds (the machine is shared; medians of the rounds are quoted), each round
//! measuring every target alone, then every target under load, each only once the gateways
//! have gone quiet (a gateway's store still flushing what the last load wrote would otherwise
//! land in the next target's figures):
//! - one call alone: 1,000 sequential calls, p50 and p99;
//! - 32 connections back to back for 3 s: throughput, and for gateways the CPU time of the
//!   gateway process (utime + stime from /proc) divided by the calls it served.
//!
//! Also, in the same run: a bare write + fdatasync of 512 bytes on the same disk (p50, each
//! round), and the
//! store's bytes on disk per allowed call (20,000 calls through `sync`, the gateway stopped,
//! the store reopened and flushed, `disk_space` minus an empty store's).
//!
//! Run: `cargo build --release -p airlock-gateway && cargo bench -p airlock-benches --bench allow_path`

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use sha2::{Digest, Sha256};
use support::{
    client, closed_loop, cpu_seconds, pct, release_bin, send, settle, start_backend, GatewayProcess,
};

const AGENT: &str = "bench-agent-token";
const ROUNDS: usize = 3;

fn gateway(bin: &Path, backend: u16, durability: &str) -> GatewayProcess {
    gateway_env(bin, backend, durability, &[])
}

fn gateway_env(bin: &Path, backend: u16, durability: &str, env: &[(&str, &str)]) -> GatewayProcess {
    let config = format!(
        "[server]\ndata_dir = \"data\"\npolicy = \"policy\"\ndurability = \"{durability}\"\n\
         [[principals]]\nid = \"agent\"\nrole = \"agent\"\ntoken_sha256 = \"{}\"\n\
         [[tools]]\nname = \"bench.*\"\nupstream = \"http://127.0.0.1:{backend}/echo\"\n",
        airlock_policy::hex(&Sha256::digest(AGENT.as_bytes())),
    );
    GatewayProcess::start_env(
        bin,
        &config,
        "version = 1\n[defaults]\ndecision = \"deny\"\n[[rules]]\nid = \"allow\"\ntools = [\"bench.allow\"]\ndecision = \"allow\"\n",
        env,
    )
}

/// nginx in front of the backend, killed when dropped.
struct Nginx {
    child: Child,
    port: u16,
    _dir: tempfile::TempDir,
}

impl Nginx {
    fn start(backend: u16) -> Option<Nginx> {
        let bin = ["/usr/sbin/nginx", "/usr/bin/nginx"]
            .into_iter()
            .map(PathBuf::from)
            .find(|p| p.exists())?;
        let dir = tempfile::tempdir().unwrap();
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let d = dir.path().display();
        let conf = format!(
            "worker_processes 1;\ndaemon off;\npid {d}/nginx.pid;\nerror_log {d}/error.log;\n\
             events {{ worker_connections 4096; }}\n\
             http {{\n access_log off;\n client_body_temp_path {d};\n proxy_temp_path {d};\n\
             upstream b {{ server 127.0.0.1:{backend}; keepalive 64; }}\n\
             server {{ listen 127.0.0.1:{port}; location / {{ proxy_pass http://b; \
             proxy_http_version 1.1; proxy_set_header Connection \"\"; }} }}\n}}\n"
        );
        std::fs::write(dir.path().join("nginx.conf"), conf).unwrap();
        let child = Command::new(bin)
            .args(["-c", &format!("{d}/nginx.conf"), "-p", &d.to_string()])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .ok()?;
        let deadline = Instant::now() + Duration::from_secs(5);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            if Instant::now() > deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Some(Nginx {
            child,
            port,
            _dir: dir,
        })
    }
}

impl Drop for Nginx {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .args(["-QUIT", &self.child.id().to_string()])
            .status();
        let _ = self.child.wait();
    }
}

/// p50 of a 512-byte write + fdatasync in `dir`.
fn fsync_p50(dir: &Path) -> Duration {
    let mut f = std::fs::File::create(dir.join("fsync-probe")).unwrap();
    let mut lat = Vec::new();
    for _ in 0..300 {
        let start = Instant::now();
        f.write_all(&[7u8; 512]).unwrap();
        f.sync_data().unwrap();
        lat.push(start.elapsed());
    }
    lat.sort();
    pct(&lat, 0.5)
}

struct Target {
    name: String,
    uri: String,
    token: Option<&'static str>,
    body: String,
    pid: Option<u32>,
    alone: Vec<(Duration, Duration)>,
    throughput: Vec<f64>,
    cpu_per_call: Vec<f64>,
}

fn us(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    if std::env::args().any(|a| a == "--list" || a == "--test") {
        return;
    }
    let (backend, _) = start_backend();
    let nginx = Nginx::start(backend);
    if nginx.is_none() {
        eprintln!(
            "nginx is not installed (apt-get install nginx-light): the hop column is left out"
        );
    }
    let current = release_bin();
    let sync = gateway(&current, backend, "sync");
    let batched = gateway(&current, backend, "batched");
    let baseline_bin = std::env::var("AIRLOCK_BENCH_BASELINE")
        .ok()
        .map(PathBuf::from);
    let baseline = baseline_bin.as_ref().map(|b| gateway(b, backend, "sync"));
    let baseline_batched = baseline_bin
        .as_ref()
        .map(|b| gateway(b, backend, "batched"));
    // `AIRLOCK_BENCH_WORKERS=N` adds `sync` with N serving threads (the gateway reads
    // AIRLOCK_SERVE_THREADS; the default is one per core).
    let workers = std::env::var("AIRLOCK_BENCH_WORKERS").ok();
    let few = workers
        .as_deref()
        .map(|n| gateway_env(&current, backend, "sync", &[("AIRLOCK_SERVE_THREADS", n)]));
    // `AIRLOCK_BENCH_LOG=LEVEL` adds `sync` logging at that level (the others log errors
    // only; a gateway's default is `info`, a line per call, to stderr, here /dev/null).
    let log = std::env::var("AIRLOCK_BENCH_LOG").ok();
    let logging = log
        .as_deref()
        .map(|l| gateway_env(&current, backend, "sync", &[("AIRLOCK_LOG", l)]));

    let args = r#"{"n":1,"text":"hello"}"#;
    let call = format!(r#"{{"tool":"bench.allow","args":{args}}}"#);
    let plain = |name: &str, port: u16| Target {
        name: name.into(),
        uri: format!("http://127.0.0.1:{port}/echo"),
        token: None,
        body: args.into(),
        pid: None,
        alone: vec![],
        throughput: vec![],
        cpu_per_call: vec![],
    };
    let airlock = |name: &str, g: &GatewayProcess| Target {
        name: name.into(),
        uri: format!("http://127.0.0.1:{}/v1/calls", g.port),
        token: Some(AGENT),
        body: call.clone(),
        pid: Some(g.child.id()),
        alone: vec![],
        throughput: vec![],
        cpu_per_call: vec![],
    };
    let mut targets = vec![plain("direct", backend)];
    if let Some(n) = &nginx {
        targets.push(plain("nginx hop", n.port));
    }
    if let Some(b) = &baseline {
        targets.push(airlock("airlock sync (baseline build)", b));
    }
    targets.push(airlock("airlock sync", &sync));
    if let (Some(g), Some(n)) = (&few, &workers) {
        targets.push(airlock(&format!("airlock sync, {n} serving thread(s)"), g));
    }
    if let (Some(g), Some(l)) = (&logging, &log) {
        targets.push(airlock(&format!("airlock sync, AIRLOCK_LOG={l}"), g));
    }
    targets.push(airlock("airlock batched", &batched));
    if let Some(b) = &baseline_batched {
        targets.push(airlock("airlock batched (baseline build)", b));
    }

    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let pids: Vec<u32> = targets.iter().filter_map(|t| t.pid).collect();
    let mut fsyncs = Vec::new();
    rt.block_on(async {
        let client = client();
        for t in &targets {
            for _ in 0..300 {
                let (s, _) = send(&client, &t.uri, t.token, None, t.body.clone()).await;
                assert_eq!(s, 200, "{}", t.name);
            }
        }
        for round in 0..ROUNDS {
            // Each round: every target alone, then every target under load, each after the
            // gateways have gone quiet; the fsync reference is measured each round too.
            settle(&pids);
            fsyncs.push(fsync_p50(sync.dir.path()));
            for t in targets.iter_mut() {
                settle(&pids);
                let mut lat = Vec::with_capacity(1000);
                for _ in 0..1000 {
                    let start = Instant::now();
                    let (s, _) = send(&client, &t.uri, t.token, None, t.body.clone()).await;
                    assert_eq!(s, 200);
                    lat.push(start.elapsed());
                }
                lat.sort();
                t.alone.push((pct(&lat, 0.5), pct(&lat, 0.99)));
            }
            for t in targets.iter_mut() {
                settle(&pids);
                let cpu_before = t.pid.map(cpu_seconds);
                let rate = closed_loop(&client, &t.uri, t.token, &t.body, 32, 3).await;
                if let (Some(pid), Some(before)) = (t.pid, cpu_before) {
                    t.cpu_per_call
                        .push((cpu_seconds(pid) - before) / (rate * 3.0));
                }
                t.throughput.push(rate);
                eprintln!(
                    "round {round} {}: alone p50 {:.0} µs, 32 connections {rate:.0} req/s",
                    t.name,
                    us(t.alone[round].0)
                );
            }
        }
    });

    let direct_p50 = median(targets[0].alone.iter().map(|a| us(a.0)).collect());
    let hop = targets
        .iter()
        .find(|t| t.name == "nginx hop")
        .map(|t| median(t.throughput.clone()));
    let fsync = median(fsyncs.iter().map(|d| us(*d)).collect());
    println!(
        "bare write + fdatasync of 512 bytes on this disk: p50 {fsync:.0} µs (median of the rounds' p50s)",
    );
    println!("| target | alone p50 | added p50 | alone p99 | 32 connections | vs nginx hop | CPU per call |");
    println!("|---|---|---|---|---|---|---|");
    for t in &targets {
        let p50 = median(t.alone.iter().map(|a| us(a.0)).collect());
        let p99 = median(t.alone.iter().map(|a| us(a.1)).collect());
        let rate = median(t.throughput.clone());
        let cpu = if t.cpu_per_call.is_empty() {
            String::new()
        } else {
            format!("{:.0} µs", median(t.cpu_per_call.clone()) * 1e6)
        };
        println!(
            "| {} | {p50:.0} µs | {:+.0} µs | {p99:.0} µs | {rate:.0} req/s | {} | {cpu} |",
            t.name,
            p50 - direct_p50,
            hop.map(|h| format!("{:.2}×", rate / h)).unwrap_or_default(),
        );
    }

    // Disk per allowed call: 20,000 more calls through `sync`, then the store alone.
    drop(batched);
    drop(baseline);
    drop(baseline_batched);
    drop(few);
    let calls = 20_000u64;
    rt.block_on(async {
        let client = client();
        let t = &targets.iter().find(|t| t.name == "airlock sync").unwrap();
        let sem = std::sync::Arc::new(tokio::sync::Semaphore::new(32));
        let mut handles = Vec::new();
        for _ in 0..calls {
            let permit = sem.clone().acquire_owned().await.unwrap();
            let (c, uri, body) = (client.clone(), t.uri.clone(), t.body.clone());
            handles.push(tokio::spawn(async move {
                let (s, _) = send(&c, &uri, Some(AGENT), None, body).await;
                assert_eq!(s, 200);
                drop(permit);
            }));
        }
        for h in handles {
            h.await.unwrap();
        }
    });
    let served: u64 = targets
        .iter()
        .find(|t| t.name == "airlock sync")
        .map(|t| (t.throughput.iter().sum::<f64>() * 3.0) as u64 + 300 + 3000)
        .unwrap()
        + calls;
    let data = sync.dir.path().join("data");
    let mut sync = sync;
    let _ = Command::new("kill")
        .args(["-TERM", &sync.child.id().to_string()])
        .status();
    let _ = sync.child.wait();
    let empty = tempfile::tempdir().unwrap();
    let base = airlock_storage::Store::open(empty.path(), Default::default())
        .unwrap()
        .disk_space()
        .unwrap();
    let store = airlock_storage::Store::open(&data, Default::default()).unwrap();
    let used = store.disk_space().unwrap();
    store.flush().unwrap();
    let flushed = store.disk_space().unwrap();
    println!(
        "disk: {:.0} bytes per allowed call after a flush ({:.0} before it, journal included; {served} calls, the store reopened after a graceful stop, an empty store's {base} bytes subtracted)",
        flushed.saturating_sub(base) as f64 / served as f64,
        used.saturating_sub(base) as f64 / served as f64
    );
    drop(nginx);
}
