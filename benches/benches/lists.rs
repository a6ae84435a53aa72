//! `tools/list` through the release gateway with an upstream of 500 tools, two principals
//! asking in turn, under a policy whose principal-only deny rules hide some tools from one of
//! them: what filtering a list per principal costs. Side by side in one run with another
//! build (`AIRLOCK_BENCH_BASELINE=<path>`, a build before the filter), in three rounds; the
//! medians of the rounds are quoted, and the ratio of the p50s.
//!
//! Each request is a stateless 2026-07-28 `tools/list` (one POST), its whole answer read;
//! pages are the gateway's own (the first page is measured).
//!
//! Run: `cargo build --release -p airlock-gateway && AIRLOCK_BENCH_BASELINE=<old airlock>
//! cargo bench -p airlock-benches --bench lists`

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::Request;
use serde_json::{json, Value};
use sha2::{Digest, Sha256};

use support::{client, pct, release_bin, GatewayProcess, HttpClient};

const TOOLS: usize = 500;
const TOKENS: [&str; 2] = ["bench-agent-one", "bench-agent-two"];
const ROUNDS: usize = 3;
const REQUESTS: usize = 400;

/// An MCP upstream listing `TOOLS` tools (2025-11-25, one session).
fn start_upstream() -> u16 {
    let tools: Vec<Value> = (0..TOOLS)
        .map(|i| {
            json!({"name": format!("tool{i:03}"), "description": format!("Tool number {i}, which does a thing."),
                   "inputSchema": {"type": "object", "properties": {"text": {"type": "string"}}}})
        })
        .collect();
    support::serve_on_thread(move |body| {
        let msg: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
        let result = match msg["method"].as_str().unwrap_or("") {
            "initialize" => json!({
                "protocolVersion": "2025-11-25", "capabilities": {"tools": {}},
                "serverInfo": {"name": "bench", "version": "1"},
            }),
            "tools/list" => json!({"tools": tools}),
            _ => json!({}),
        };
        let mut r = match msg.get("id") {
            None => {
                let mut r = hyper::Response::new(Full::new(Bytes::new()));
                *r.status_mut() = hyper::StatusCode::ACCEPTED;
                r
            }
            Some(id) => hyper::Response::new(Full::new(Bytes::from(
                json!({"jsonrpc": "2.0", "id": id, "result": result}).to_string(),
            ))),
        };
        r.headers_mut()
            .insert("content-type", "application/json".parse().unwrap());
        r.headers_mut()
            .insert("mcp-session-id", "bench-session".parse().unwrap());
        r
    })
}

/// Twenty rules: ten that hide a tool each from the second agent (principal only), ten that
/// read args (hide nothing), over a default allow.
fn policy() -> String {
    let mut p = String::from("version = 1\n[defaults]\ndecision = \"allow\"\n");
    for i in 0..10 {
        p.push_str(&format!(
            "[[rules]]\nid = \"hide{i}\"\ntools = [\"bench.tool{i:03}\"]\nwhen = 'principal.id == \"two\"'\ndecision = \"deny\"\n\
             [[rules]]\nid = \"args{i}\"\ntools = [\"bench.tool1{i:02}\"]\nwhen = 'has(args.text) && args.text == \"x\"'\ndecision = \"deny\"\n"
        ));
    }
    p
}

fn start_gateway(bin: &std::path::Path, upstream: u16) -> GatewayProcess {
    let mut config = String::from("[server]\ndata_dir = \"data\"\npolicy = \"policy\"\n");
    for (id, token) in ["one", "two"].iter().zip(TOKENS) {
        config.push_str(&format!(
            "[[principals]]\nid = \"{id}\"\nrole = \"agent\"\ntoken_sha256 = \"{}\"\n",
            airlock_policy::hex(&Sha256::digest(token.as_bytes()))
        ));
    }
    config.push_str(&format!(
        "[[mcp_servers]]\nname = \"bench\"\nurl = \"http://127.0.0.1:{upstream}/mcp\"\n"
    ));
    GatewayProcess::start_bin(bin, &config, &policy())
}

/// The names on the first page.
async fn list(client: &HttpClient, port: u16, token: &str) -> Vec<String> {
    let req = Request::post(format!("http://127.0.0.1:{port}/mcp"))
        .header("content-type", "application/json")
        .header("accept", "application/json")
        .header("authorization", format!("Bearer {token}"))
        .header("mcp-protocol-version", "2026-07-28")
        .header("mcp-method", "tools/list")
        .body(Full::new(Bytes::from(
            json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {
                "_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
                          "io.modelcontextprotocol/clientCapabilities": {}}}})
            .to_string(),
        )))
        .unwrap();
    let resp = client.request(req).await.unwrap();
    assert_eq!(resp.status().as_u16(), 200);
    let body = resp.into_body().collect().await.unwrap().to_bytes();
    let v: Value = serde_json::from_slice(&body).unwrap();
    v["result"]["tools"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|t| t["name"].as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

/// p50 of `REQUESTS` lists, the two agents in turn.
async fn round(client: &HttpClient, port: u16) -> Duration {
    let mut times = Vec::with_capacity(REQUESTS);
    for i in 0..REQUESTS {
        let start = Instant::now();
        list(client, port, TOKENS[i % 2]).await;
        times.push(start.elapsed());
    }
    times.sort();
    pct(&times, 0.5)
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn main() {
    let upstream = start_upstream();
    let mut builds: Vec<(String, PathBuf)> = vec![("this build".into(), release_bin())];
    if let Ok(b) = std::env::var("AIRLOCK_BENCH_BASELINE") {
        builds.push(("baseline".into(), PathBuf::from(b)));
    }
    let gateways: Vec<(String, GatewayProcess)> = builds
        .iter()
        .map(|(name, bin)| (name.clone(), start_gateway(bin, upstream)))
        .collect();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let client = client();
    // Reached, listed, and each agent's list seen once (what is hidden is kept after it).
    std::thread::sleep(Duration::from_secs(2));
    for (name, g) in &gateways {
        let (one, two) = rt.block_on(async {
            (
                list(&client, g.port, TOKENS[0]).await,
                list(&client, g.port, TOKENS[1]).await,
            )
        });
        println!(
            "{name}: the first page lists {} tools to one (from {}), {} to two (from {})",
            one.len(),
            one.first().map_or("-", String::as_str),
            two.len(),
            two.first().map_or("-", String::as_str),
        );
    }
    let mut p50s: Vec<Vec<Duration>> = vec![Vec::new(); gateways.len()];
    for _ in 0..ROUNDS {
        for (i, (_, g)) in gateways.iter().enumerate() {
            p50s[i].push(rt.block_on(round(&client, g.port)));
        }
    }
    let medians: Vec<Duration> = p50s.into_iter().map(median).collect();
    for ((name, _), m) in gateways.iter().zip(&medians) {
        println!("{name}: tools/list p50 {m:?} (median of {ROUNDS} rounds of {REQUESTS})");
    }
    if medians.len() == 2 {
        println!(
            "this build / baseline: {:.2}×",
            medians[0].as_secs_f64() / medians[1].as_secs_f64()
        );
    }
}
