//! MCP load harness: an allowed `tools/call` through the release `airlock` binary's `/mcp`,
//! side by side in one run with an allowed `POST /v1/calls` through the same gateway to an
//! HTTP backend, each against its backend called directly (issue 20: the allowed MCP call
//! costs what the allowed HTTP call costs).
//!
//! The MCP upstream is a minimal streamable-HTTP MCP server (2025-11-25: `initialize` with a
//! session, `tools/list`, `tools/call` answered as JSON) on its own thread; the HTTP backend is
//! the harnesses' minimal backend, on another. What is measured is the gateway: intake,
//! policy, the durable decision, the backend hop. Clients speak 2026-07-28 to the gateway
//! (stateless: one POST per call) and 2025-11-25 to the upstream (a session opened once).
//!
//! In three rounds (the machine is shared; medians of the rounds are quoted), each round
//! measuring the four targets (MCP direct, MCP through airlock, HTTP direct, HTTP through
//! airlock) in turn:
//! - sequential calls: added p50 and p99 (through airlock minus direct);
//! - closed loop: calls per second with 32 concurrent clients, and MCP's over HTTP's.
//!
//! With `AIRLOCK_BENCH_BASELINE=<path to another airlock build>`, that build is measured in
//! the same rounds too, so a change is measured against what it replaced. With
//! `AIRLOCK_BENCH_ONLY=<name prefix>` (`MCP airlock`, say) only those targets run, for a
//! profiler attached to the gateway; no medians are printed then. With
//! `AIRLOCK_BENCH_SHADOW=<policy path>` the gateway evaluates that set too, as its
//! `shadow_policy` (`bash benches/callgrind.sh` with and without it gives the shadow's cost).
//! With `AIRLOCK_BENCH_CREDENTIALS=1`, the HTTP tool and the MCP server get OAuth client
//! credentials from a token endpoint on another thread (a token that lives an hour): every
//! call but the first carries the cached token, which is what that costs.
//!
//! Run: `cargo build --release -p airlock-gateway && cargo bench -p airlock-benches --bench mcp_load`

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::{Request, Response};
use serde_json::{json, Value};
use sha2::{Digest, Sha256};

use support::{client, cpu_seconds, pct, release_bin, settle, GatewayProcess, HttpClient};

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
                // As the official Python SDK lists `echo(text: str = "", n: int = 0)`: every
                // call's args are checked against it (DESIGN's args-against-the-pinned-schema).
                "inputSchema": {"type": "object", "title": "echoArguments", "properties": {
                    "text": {"type": "string", "title": "Text", "default": ""},
                    "n": {"type": "integer", "title": "N", "default": 0}}},
            }]}),
            "tools/call" => {
                counter.fetch_add(1, Ordering::Relaxed);
                tool_result(&msg["params"]["arguments"])
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

/// What both backends answer a call: an MCP tool result whose text is the args, so the two
/// paths store and send answers of the same size (the MCP upstream wraps it in JSON-RPC).
fn tool_result(args: &Value) -> Value {
    json!({"content": [{"type": "text", "text": args.to_string()}], "isError": false})
}

/// The HTTP backend: answers each call with [`tool_result`] of its body.
fn start_backend() -> (u16, Arc<AtomicU64>) {
    let served = Arc::new(AtomicU64::new(0));
    let counter = served.clone();
    let port = support::serve_on_thread(move |body| {
        counter.fetch_add(1, Ordering::Relaxed);
        let args: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
        let mut r = Response::new(Full::new(Bytes::from(tool_result(&args).to_string())));
        r.headers_mut()
            .insert("content-type", "application/json".parse().unwrap());
        r
    });
    (port, served)
}

fn start_gateway(bin: &Path, upstream: u16, backend: u16) -> GatewayProcess {
    let shadow = std::env::var("AIRLOCK_BENCH_SHADOW")
        .map(|p| format!("shadow_policy = {:?}\n", std::fs::canonicalize(p).unwrap()))
        .unwrap_or_default();
    let credentials = if std::env::var_os("AIRLOCK_BENCH_CREDENTIALS").is_some() {
        let port = support::serve_on_thread(|_| {
            let mut r = Response::new(Full::new(Bytes::from_static(
                br#"{"access_token":"bench-token","token_type":"Bearer","expires_in":3600}"#,
            )));
            r.headers_mut()
                .insert("content-type", "application/json".parse().unwrap());
            r
        });
        format!("credentials = {{ kind = \"client_credentials\", token_url = \"http://127.0.0.1:{port}/token\", client_id = \"bench\", client_secret = \"bench-secret\" }}\n")
    } else {
        String::new()
    };
    let config = format!(
        "[server]\ndata_dir = \"data\"\npolicy = \"policy\"\n{shadow}\
         [[principals]]\nid = \"agent\"\nrole = \"agent\"\ntoken_sha256 = \"{}\"\n\
         [[mcp_servers]]\nname = \"bench\"\nurl = \"http://127.0.0.1:{upstream}/mcp\"\n{credentials}\
         [[tools]]\nname = \"http.*\"\nupstream = \"http://127.0.0.1:{backend}/echo\"\n{credentials}",
        airlock_policy::hex(&Sha256::digest(AGENT.as_bytes()))
    );
    GatewayProcess::start_bin(
        bin,
        &config,
        "version = 1\n[defaults]\ndecision = \"deny\"\n[[rules]]\nid = \"allow\"\ntools = [\"bench.echo\", \"http.allow\"]\ndecision = \"allow\"\n",
    )
}

/// Where a call is sent and in which protocol.
#[derive(Clone, Copy, PartialEq)]
enum Kind {
    /// `tools/call` to the gateway's `/mcp` (2026-07-28).
    McpGateway,
    /// `tools/call` to the upstream (its 2025-11-25 session).
    McpDirect,
    /// `POST /v1/calls` to the gateway.
    HttpGateway,
    /// The HTTP backend itself.
    HttpDirect,
}

#[derive(Clone)]
struct Target {
    uri: String,
    kind: Kind,
    /// The gateway's process, for its CPU time.
    pid: Option<u32>,
}

impl Target {
    fn request(&self, n: u64) -> Request<Full<Bytes>> {
        // JSON answers: the benchmark clients do not accept an event stream from the gateway.
        let mut req = Request::post(&self.uri)
            .header("content-type", "application/json")
            .header("accept", "application/json");
        let body = match self.kind {
            Kind::McpGateway => {
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
            }
            Kind::McpDirect => {
                req = req
                    .header("mcp-session-id", "bench-session")
                    .header("mcp-protocol-version", "2025-11-25");
                json!({"jsonrpc": "2.0", "id": n, "method": "tools/call", "params": {
                    "name": "echo", "arguments": {"n": n, "text": "hello"},
                }})
            }
            Kind::HttpGateway => {
                req = req.header("authorization", format!("Bearer {AGENT}"));
                json!({"tool": "http.allow", "args": {"n": n, "text": "hello"}})
            }
            Kind::HttpDirect => json!({"n": n, "text": "hello"}),
        };
        req.body(Full::new(Bytes::from(body.to_string()))).unwrap()
    }
}

async fn call(client: &HttpClient, target: &Target, n: u64) {
    let resp = client.request(target.request(n)).await.unwrap();
    assert_eq!(resp.status().as_u16(), 200);
    let body = resp.into_body().collect().await.unwrap().to_bytes();
    // Every target's answer is read the same way (the client's work is the same for both
    // protocols): the tool result, inside a JSON-RPC response for MCP and inside the call's
    // outcome for `/v1/calls`.
    let v: Value = serde_json::from_slice(&body).unwrap();
    let result = match target.kind {
        Kind::McpGateway | Kind::McpDirect | Kind::HttpGateway => &v["result"],
        Kind::HttpDirect => &v,
    };
    assert_eq!(result["isError"], false, "{v}");
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

/// One round's figures for one target: sorted sequential latencies, 32-client calls/s and,
/// through a gateway, the gateway's CPU time per call under that load.
struct Figures {
    lone: Vec<Duration>,
    rate: f64,
    cpu: f64,
}

async fn measure(client: &HttpClient, target: &Target, gateways: &[u32]) -> Figures {
    settle(gateways);
    sequential(client, target, 100).await;
    let lone = sequential(client, target, 2000).await;
    settle(gateways);
    let before = target.pid.map(cpu_seconds);
    let rate = closed_loop(client, target, 32, 3).await;
    let cpu = match (target.pid, before) {
        (Some(pid), Some(before)) => (cpu_seconds(pid) - before) / (rate * 3.0),
        _ => 0.0,
    };
    Figures { lone, rate, cpu }
}

fn us(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    const ROUNDS: usize = 3;
    let (upstream, calls) = start_upstream();
    let (backend, served) = start_backend();
    let mut builds = vec![("airlock", release_bin())];
    if let Ok(base) = std::env::var("AIRLOCK_BENCH_BASELINE") {
        builds.push(("baseline", base.into()));
    }
    let gateways: Vec<GatewayProcess> = builds
        .iter()
        .map(|(_, bin)| start_gateway(bin, upstream, backend))
        .collect();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let target = |kind, port: u16, path: &str, pid| Target {
        uri: format!("http://127.0.0.1:{port}{path}"),
        kind,
        pid,
    };
    let mut targets = vec![
        (
            "MCP direct".to_owned(),
            target(Kind::McpDirect, upstream, "/mcp", None),
        ),
        (
            "HTTP direct".to_owned(),
            target(Kind::HttpDirect, backend, "/echo", None),
        ),
    ];
    for ((name, _), gw) in builds.iter().zip(&gateways) {
        let pid = Some(gw.child.id());
        targets.push((
            format!("MCP {name}"),
            target(Kind::McpGateway, gw.port, "/mcp", pid),
        ));
        targets.push((
            format!("HTTP {name}"),
            target(Kind::HttpGateway, gw.port, "/v1/calls", pid),
        ));
    }
    if let Ok(only) = std::env::var("AIRLOCK_BENCH_ONLY") {
        // Profiling one target: the figures below need them all.
        targets.retain(|(name, _)| name.starts_with(&only));
    }
    let pids: Vec<u32> = gateways.iter().map(|g| g.child.id()).collect();
    // Per target: each round's p50, p99, calls/s and CPU µs per call.
    let mut results: Vec<Vec<[f64; 4]>> = vec![Vec::new(); targets.len()];
    rt.block_on(async {
        let c = client();
        for round in 1..=ROUNDS {
            println!("round {round}:");
            for (i, (name, target)) in targets.iter().enumerate() {
                let f = measure(&c, target, &pids).await;
                let (p50, p99, cpu) = (us(pct(&f.lone, 0.5)), us(pct(&f.lone, 0.99)), f.cpu * 1e6);
                println!(
                    "  {name:<18} p50 {p50:>7.1} µs  p99 {p99:>7.1} µs  32 clients {:>7.0} calls/s  CPU {cpu:>5.1} µs/call",
                    f.rate
                );
                results[i].push([p50, p99, f.rate, cpu]);
            }
        }
    });
    println!(
        "the MCP upstream served {} calls, the HTTP backend {}",
        calls.load(Ordering::Relaxed),
        served.load(Ordering::Relaxed)
    );
    if results.len() < 4 {
        return;
    }
    let med = |i: usize, k: usize| median(results[i].iter().map(|r| r[k]).collect());
    println!("medians of {ROUNDS} rounds (added = through airlock minus the same backend direct, in the same round):");
    for (b, (name, _)) in builds.iter().enumerate() {
        let (mcp, http) = (2 + 2 * b, 3 + 2 * b);
        let added = |i: usize, d: usize, k: usize| {
            median(
                results[i]
                    .iter()
                    .zip(&results[d])
                    .map(|(g, x)| g[k] - x[k])
                    .collect(),
            )
        };
        let (mcp_p50, http_p50) = (added(mcp, 0, 0), added(http, 1, 0));
        println!("  {name}:");
        println!(
            "    MCP  added p50 {mcp_p50:>6.1} µs, p99 {:>7.1} µs, 32 clients {:>6.0} calls/s, CPU {:>5.1} µs/call",
            added(mcp, 0, 1),
            med(mcp, 2),
            med(mcp, 3)
        );
        println!(
            "    HTTP added p50 {http_p50:>6.1} µs, p99 {:>7.1} µs, 32 clients {:>6.0} calls/s, CPU {:>5.1} µs/call",
            added(http, 1, 1),
            med(http, 2),
            med(http, 3)
        );
        println!(
            "    MCP - HTTP: added p50 {:+.1} µs, calls/s {:.2}x, CPU per call {:+.1} µs",
            mcp_p50 - http_p50,
            med(mcp, 2) / med(http, 2),
            med(mcp, 3) - med(http, 3)
        );
    }
    println!(
        "direct, 32 clients: MCP upstream {:.0} calls/s, HTTP backend {:.0} req/s",
        med(0, 2),
        med(1, 2)
    );
}
