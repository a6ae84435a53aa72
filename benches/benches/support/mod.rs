//! What the load harnesses share: the release `airlock` binary started as its own process
//! with a config and policy in a temp dir, a minimal in-process backend, a pooled HTTP client
//! with `TCP_NODELAY`, one request, a closed loop, percentiles, the CPU a load cost the gateways
//! and PostgreSQL ([`CpuMark`]), and ([`delay`]) a TCP proxy that adds network delay.

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::HashMap;
use std::convert::Infallible;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::{Request, Response};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use hyper_util::rt::TokioIo;

pub mod delay;

pub type HttpClient = Client<HttpConnector, Full<Bytes>>;

/// The release gateway, killed when dropped.
pub struct GatewayProcess {
    pub child: Child,
    pub port: u16,
    pub dir: tempfile::TempDir,
}

impl Drop for GatewayProcess {
    /// Stops the gateway as an operator would (SIGTERM: it drains and exits, so a profiler
    /// wrapped around it writes its output), and kills it if it is still there after 10 s.
    fn drop(&mut self) {
        if let Ok(Some(_)) = self.child.try_wait() {
            return;
        }
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .stderr(Stdio::null())
            .status();
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl GatewayProcess {
    /// Starts `target/release/airlock serve` with `config` (its `[server]` names `data_dir =
    /// "data"` and `policy = "policy"`) and `policy`, on a free loopback port.
    pub fn start(config: &str, policy: &str) -> GatewayProcess {
        GatewayProcess::start_bin(&release_bin(), config, policy)
    }

    /// [`GatewayProcess::start`] with another build of `airlock` (to compare two side by side).
    pub fn start_bin(bin: &Path, config: &str, policy: &str) -> GatewayProcess {
        GatewayProcess::start_env(bin, config, policy, &[])
    }

    /// [`GatewayProcess::start_bin`] with extra environment variables.
    pub fn start_env(
        bin: &Path,
        config: &str,
        policy: &str,
        env: &[(&str, &str)],
    ) -> GatewayProcess {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("policy")).unwrap();
        std::fs::write(dir.path().join("policy/policy.toml"), policy).unwrap();
        std::fs::write(dir.path().join("airlock.toml"), config).unwrap();
        let mut child = Command::new(bin)
            .args([
                "serve",
                "--config",
                dir.path().join("airlock.toml").to_str().unwrap(),
                "--listen",
                "127.0.0.1:0",
            ])
            .env("AIRLOCK_LOG", "error")
            .envs(env.iter().copied())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let mut reader = BufReader::new(child.stdout.take().unwrap());
        let mut line = String::new();
        let port = loop {
            line.clear();
            reader.read_line(&mut line).unwrap();
            if let Some(rest) = line
                .trim()
                .strip_prefix("airlock listening on http://127.0.0.1:")
            {
                break rest.split(' ').next().unwrap().parse().unwrap();
            }
        };
        std::thread::spawn(move || for _ in reader.lines() {});
        GatewayProcess { child, port, dir }
    }
}

/// `target/release/airlock`.
pub fn release_bin() -> std::path::PathBuf {
    let exe = std::env::current_exe().unwrap();
    let bin = exe.parent().unwrap().parent().unwrap().join("airlock");
    assert!(
        bin.exists(),
        "build the release binary first: cargo build --release -p airlock-gateway"
    );
    bin
}

/// Serves HTTP/1.1 on a loopback port from its own thread (a current-thread runtime), each
/// request's body handed to `answer`; returns the port.
pub fn serve_on_thread<F>(answer: F) -> u16
where
    F: Fn(Bytes) -> Response<Full<Bytes>> + Send + Sync + 'static,
{
    let answer = Arc::new(answer);
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async move {
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            tx.send(listener.local_addr().unwrap().port()).unwrap();
            loop {
                let (stream, _) = listener.accept().await.unwrap();
                stream.set_nodelay(true).unwrap();
                let answer = answer.clone();
                tokio::spawn(async move {
                    let service =
                        hyper::service::service_fn(move |req: Request<hyper::body::Incoming>| {
                            let answer = answer.clone();
                            async move {
                                let body = req.into_body().collect().await.unwrap().to_bytes();
                                Ok::<_, Infallible>(answer(body))
                            }
                        });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
            }
        });
    });
    rx.recv().unwrap()
}

/// A minimal backend on its own thread: answers every POST with a small JSON body.
pub fn start_backend() -> (u16, Arc<AtomicU64>) {
    let served = Arc::new(AtomicU64::new(0));
    let counter = served.clone();
    let port = serve_on_thread(move |_| {
        counter.fetch_add(1, Ordering::Relaxed);
        Response::new(Full::new(Bytes::from_static(b"{\"ok\":true}")))
    });
    (port, served)
}

/// One request; returns the status and body.
pub async fn send(
    client: &HttpClient,
    uri: &str,
    token: Option<&str>,
    prefer: Option<&str>,
    body: String,
) -> (u16, Bytes) {
    let mut req = Request::post(uri).header("content-type", "application/json");
    if let Some(t) = token {
        req = req.header("authorization", format!("Bearer {t}"));
    }
    if let Some(p) = prefer {
        req = req.header("prefer", p);
    }
    let resp = client
        .request(req.body(Full::new(Bytes::from(body))).unwrap())
        .await
        .unwrap();
    let status = resp.status().as_u16();
    (status, resp.into_body().collect().await.unwrap().to_bytes())
}

/// Requests per second with `workers` clients sending back to back for `secs`.
pub async fn closed_loop(
    client: &HttpClient,
    uri: &str,
    token: Option<&str>,
    body: &str,
    workers: usize,
    secs: u64,
) -> f64 {
    let done = Arc::new(AtomicU64::new(0));
    let end = Instant::now() + Duration::from_secs(secs);
    let mut handles = Vec::new();
    for _ in 0..workers {
        let (client, uri, token, body, done) = (
            client.clone(),
            uri.to_owned(),
            token.map(str::to_owned),
            body.to_owned(),
            done.clone(),
        );
        handles.push(tokio::spawn(async move {
            while Instant::now() < end {
                let (status, _) = send(&client, &uri, token.as_deref(), None, body.clone()).await;
                assert_eq!(status, 200);
                done.fetch_add(1, Ordering::Relaxed);
            }
        }));
    }
    for h in handles {
        h.await.unwrap();
    }
    done.load(Ordering::Relaxed) as f64 / secs as f64
}

/// A pooled client with `TCP_NODELAY`.
pub fn client() -> HttpClient {
    let mut connector = HttpConnector::new();
    connector.set_nodelay(true);
    Client::builder(TokioExecutor::new())
        .pool_max_idle_per_host(256)
        .build(connector)
}

/// The `p` percentile of sorted durations.
pub fn pct(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

/// CPU seconds (user + system) a process has used, from /proc (clock ticks of 10 ms).
pub fn cpu_seconds(pid: u32) -> f64 {
    try_cpu_seconds(pid).expect("the process's /proc/PID/stat")
}

/// [`cpu_seconds`] of a process that may have exited meanwhile (`None` then).
pub fn try_cpu_seconds(pid: u32) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let after = &stat[stat.rfind(')')? + 2..];
    let fields: Vec<&str> = after.split_whitespace().collect();
    // After the name: state is field 3; utime and stime are fields 14 and 15.
    let ticks: u64 = fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?;
    Some(ticks as f64 / 100.0)
}

/// Waits (up to 5 s) until the gateways in `pids` are quiet: under 2 % of a core over 200 ms,
/// so one target's background work (the store flushing what the last load wrote) does not
/// land in the next target's figures.
pub fn settle(pids: &[u32]) {
    let deadline = Instant::now() + Duration::from_secs(5);
    while Instant::now() < deadline {
        let before: f64 = pids.iter().map(|p| cpu_seconds(*p)).sum();
        std::thread::sleep(Duration::from_millis(200));
        let after: f64 = pids.iter().map(|p| cpu_seconds(*p)).sum();
        if after - before < 0.004 {
            return;
        }
    }
}

/// CPU time used by the gateways measured and by every PostgreSQL process on this machine
/// (the bench's database is the only one that works while it measures), read when a load
/// starts: what the load cost each side, per call, is read from it when the load ends. A
/// database process that exits during the load is not counted (none does: each gateway's
/// connections live as long as it does).
pub struct CpuMark {
    gateways: Vec<u32>,
    gateways_then: f64,
    postgres_then: HashMap<u32, f64>,
}

impl CpuMark {
    pub fn now(gateways: &[&GatewayProcess]) -> CpuMark {
        let gateways: Vec<u32> = gateways.iter().map(|g| g.child.id()).collect();
        CpuMark {
            gateways_then: gateways.iter().map(|p| cpu_seconds(*p)).sum(),
            gateways,
            postgres_then: postgres_cpu(),
        }
    }

    /// Microseconds of CPU per call, (gateways, PostgreSQL), for `calls` calls since the mark.
    pub fn per_call(&self, calls: f64) -> (f64, f64) {
        let gateways: f64 = self.gateways.iter().map(|p| cpu_seconds(*p)).sum();
        let postgres: f64 = postgres_cpu()
            .iter()
            .map(|(pid, now)| now - self.postgres_then.get(pid).unwrap_or(&0.0))
            .sum();
        let per = |seconds: f64| seconds / calls * 1e6;
        (per(gateways - self.gateways_then), per(postgres))
    }
}

/// CPU seconds used so far by each process named `postgres`.
pub fn postgres_cpu() -> HashMap<u32, f64> {
    let Ok(proc) = std::fs::read_dir("/proc") else {
        return HashMap::new();
    };
    proc.flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/comm"))
                .is_ok_and(|name| name.trim_end() == "postgres")
        })
        .filter_map(|pid| Some((pid, try_cpu_seconds(pid)?)))
        .collect()
}

/// Runs `futures` each on a task of its own, at once; their outputs in order.
pub async fn futures_join<F>(futures: Vec<F>) -> Vec<F::Output>
where
    F: std::future::Future + Send + 'static,
    F::Output: Send + 'static,
{
    let handles: Vec<_> = futures.into_iter().map(tokio::spawn).collect();
    let mut out = Vec::new();
    for h in handles {
        out.push(h.await.unwrap());
    }
    out
}
