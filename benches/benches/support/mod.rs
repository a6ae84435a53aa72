//! What the load harnesses share: the release `airlock` binary started as its own process
//! with a config and policy in a temp dir, a pooled HTTP client with `TCP_NODELAY`, and
//! percentiles.

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;

pub type HttpClient = Client<HttpConnector, Full<Bytes>>;

/// The release gateway, killed when dropped.
pub struct GatewayProcess {
    pub child: Child,
    pub port: u16,
    _dir: tempfile::TempDir,
}

impl Drop for GatewayProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl GatewayProcess {
    /// Starts `target/release/airlock serve` with `config` (its `[server]` names `data_dir =
    /// "data"` and `policy = "policy"`) and `policy`, on a free loopback port.
    pub fn start(config: &str, policy: &str) -> GatewayProcess {
        let exe = std::env::current_exe().unwrap();
        let bin = exe.parent().unwrap().parent().unwrap().join("airlock");
        assert!(
            bin.exists(),
            "build the release binary first: cargo build --release -p airlock-gateway"
        );
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
        GatewayProcess {
            child,
            port,
            _dir: dir,
        }
    }
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
