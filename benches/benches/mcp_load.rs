//! MCP load harness: an allowed `tools/call` through the release `airlock` binary's `/mcp`
//! against the same in-process MCP upstream called directly, side by side in one run.
//!
//! The upstream is a minimal streamable-HTTP MCP server (2025-11-25: `initialize` with a
//! session, `tools/list`, `tools/call` answered as JSON) on its own thread, so what is
//! measured is the gateway: JSON-RPC intake, policy, the durable decision, the upstream hop.
//! Clients speak 2026-07-28 to the gateway (stateless: one POST per call) and 2025-11-25 to
//! the upstream (a session opened once).
//!
//! - sequential calls: added p50 and p99;
//! - closed loop: calls per second with 32 concurrent clients.
//!
//! Run: `cargo build --release -p airlock-gateway && cargo bench -p airlock-benches --bench mcp_load`

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::{Request, Response};
use serde_json::{json, Value};
use sha2::{Digest, Sha256};

use support::{client, pct, GatewayProcess, HttpClient};

const AGENT: &str = "bench-agent-token";

/// The minimal MCP upstream: every answer is JSON; the session id is fixed.
fn start_upstream() -> (u16, Arc<AtomicU64>) {
    let calls = Arc::new(AtomicU64::new(0));
    let counter = calls.clone();
    let port = support::serve_on_thread(move |body| {
        let msg: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
        let id = msg.get("id").cloned();
        let result = match msg["method"].as_str().unwrap_or("") {
            "initialize" => json!({
                "protocolVersion": "2025-11-25", "capabilities": {"tools": {}},
                "serverInfo": {"name": "bench", "version": "1"},
            }),
            "tools/list" => json!({"tools": [{
                "name": "echo", "description": "echo",
                "inputSchema": {"type": "object"},
            }]}),
            "tools/call" => {
                counter.fetch_add(1, Ordering::Relaxed);
                json!({"content": [{"type": "text", "text": msg["params"]["arguments"].to_string()}], "isError": false})
            }
            _ => json!({}),
        };
        let mut r = match id {
            None => {
                let mut r = Response::new(Full::new(Bytes::new()));
                *r.status_mut() = hyper::StatusCode::ACCEPTED;
                r
            }
            Some(id) => Response::new(Full::new(Bytes::from(
                json!({"jsonrpc": "2.0", "id": id, "result": result}).to_string(),
            ))),
        };
        r.headers_mut()
            .insert("content-type", "application/json".parse().unwrap());
        r.headers_mut()
            .insert("mcp-session-id", "bench-session".parse().unwrap());
        r
    });
    (port, calls)
}

fn start_gateway(upstream: u16) -> GatewayProcess {
    let config = format!(
        "[server]\ndata_dir = \"data\"\npolicy = \"policy\"\n\
         [[principals]]\nid = \"agent\"\nrole = \"agent\"\ntoken_sha256 = \"{}\"\n\
         [[mcp_servers]]\nname = \"bench\"\nurl = \"http://127.0.0.1:{upstream}/mcp\"\n",
        airlock_policy::hex(&Sha256::digest(AGENT.as_bytes()))
    );
    GatewayProcess::start(
        &config,
        "version = 1\n[defaults]\ndecision = \"deny\"\n[[rules]]\nid = \"allow\"\ntools = [\"bench.echo\"]\ndecision = \"allow\"\n",
    )
}

/// How a call is sent: to the gateway (2026-07-28) or to the upstream (2025-11-25 session).
#[derive(Clone)]
struct Target {
    uri: String,
    gateway: bool,
}

impl Target {
    fn request(&self, n: u64) -> Request<Full<Bytes>> {
        let mut req = Request::post(&self.uri)
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream");
        let body = if self.gateway {
            req = req
                .header("authorization", format!("Bearer {AGENT}"))
                .header("mcp-protocol-version", "2026-07-28")
                .header("mcp-method", "tools/call")
                .header("mcp-name", "bench.echo");
            json!({"jsonrpc": "2.0", "id": n, "method": "tools/call", "params": {
                "name": "bench.echo", "arguments": {"n": n, "text": "hello"},
                "_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
                          "io.modelcontextprotocol/clientCapabilities": {}},
            }})
        } else {
            req = req
                .header("mcp-session-id", "bench-session")
                .header("mcp-protocol-version", "2025-11-25");
            json!({"jsonrpc": "2.0", "id": n, "method": "tools/call", "params": {
                "name": "echo", "arguments": {"n": n, "text": "hello"},
            }})
        };
        req.body(Full::new(Bytes::from(body.to_string()))).unwrap()
    }
}

async fn call(client: &HttpClient, target: &Target, n: u64) {
    // JSON answers: the benchmark clients do not accept an event stream from the gateway.
    let mut req = target.request(n);
    req.headers_mut()
        .insert("accept", "application/json".parse().unwrap());
    let resp = client.request(req).await.unwrap();
    assert_eq!(resp.status().as_u16(), 200);
    let body = resp.into_body().collect().await.unwrap().to_bytes();
    let v: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(v["result"]["isError"], false, "{v}");
}

async fn sequential(client: &HttpClient, target: &Target, count: u64) -> Vec<Duration> {
    let mut out = Vec::with_capacity(count as usize);
    for n in 0..count {
        let t = Instant::now();
        call(client, target, n).await;
        out.push(t.elapsed());
    }
    out.sort();
    out
}

async fn closed_loop(client: &HttpClient, target: &Target, workers: usize, secs: u64) -> f64 {
    let done = Arc::new(AtomicU64::new(0));
    let end = Instant::now() + Duration::from_secs(secs);
    let mut handles = Vec::new();
    for w in 0..workers {
        let (client, target, done) = (client.clone(), target.clone(), done.clone());
        handles.push(tokio::spawn(async move {
            let mut n = (w as u64) << 32;
            while Instant::now() < end {
                call(&client, &target, n).await;
                n += 1;
                done.fetch_add(1, Ordering::Relaxed);
            }
        }));
    }
    for h in handles {
        h.await.unwrap();
    }
    done.load(Ordering::Relaxed) as f64 / secs as f64
}

fn main() {
    let (upstream, calls) = start_upstream();
    let gw = start_gateway(upstream);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let direct = Target {
        uri: format!("http://127.0.0.1:{upstream}/mcp"),
        gateway: false,
    };
    let through = Target {
        uri: format!("http://127.0.0.1:{}/mcp", gw.port),
        gateway: true,
    };
    rt.block_on(async {
        let c = client();
        // Warm up both paths (connections, the gateway's upstream session).
        sequential(&c, &direct, 200).await;
        sequential(&c, &through, 200).await;
        let d = sequential(&c, &direct, 2000).await;
        let g = sequential(&c, &through, 2000).await;
        println!("sequential allowed tools/call, 2,000 each:");
        for (name, p) in [("p50", 0.5), ("p99", 0.99)] {
            println!(
                "  {name}: direct {:>7.1} µs, through airlock {:>7.1} µs, added {:>7.1} µs",
                pct(&d, p).as_secs_f64() * 1e6,
                pct(&g, p).as_secs_f64() * 1e6,
                (pct(&g, p).as_secs_f64() - pct(&d, p).as_secs_f64()) * 1e6
            );
        }
        let td = closed_loop(&c, &direct, 32, 5).await;
        let tg = closed_loop(&c, &through, 32, 5).await;
        println!(
            "32 concurrent clients, 5 s each: direct {td:.0} calls/s, through airlock {tg:.0} calls/s ({:.2}x)",
            tg / td
        );
    });
    println!("upstream served {} calls", calls.load(Ordering::Relaxed));
}
