//! The listener under attack and the per-principal limits, against the real binary: thousands
//! of half-open connections (slowloris), a connection flood from a few addresses, a principal
//! over its rate or its pending approvals, and generated garbage thrown at the socket.
//!
//! Clients on other loopback addresses (127.0.0.2, …) stand for other hosts: the gateway
//! counts connections per client address.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use support::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};

fn addr(gw: &Gateway) -> SocketAddr {
    gw.base.trim_start_matches("http://").parse().unwrap()
}

/// Opens `n` connections to `to` from the loopback address `from`, each sending `first`.
async fn open_from(from: &str, to: SocketAddr, n: usize, first: &[u8]) -> Vec<TcpStream> {
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        let socket = TcpSocket::new_v4().unwrap();
        socket.bind(format!("{from}:0").parse().unwrap()).unwrap();
        let mut s = socket.connect(to).await.unwrap();
        if !first.is_empty() {
            s.write_all(first).await.unwrap();
        }
        out.push(s);
    }
    out
}

/// Whether the peer closed `s` (EOF or reset) within `within`; any bytes it sent first (a
/// refusal's 503) are returned.
async fn closed_within(s: &mut TcpStream, within: Duration) -> Option<Vec<u8>> {
    let mut got = Vec::new();
    let mut buf = [0u8; 1024];
    let deadline = tokio::time::Instant::now() + within;
    loop {
        match tokio::time::timeout_at(deadline, s.read(&mut buf)).await {
            Err(_) => return None,
            Ok(Ok(0)) | Ok(Err(_)) => return Some(got),
            Ok(Ok(n)) => got.extend_from_slice(&buf[..n]),
        }
    }
}

fn metric(gw: &Gateway, name_and_labels: &str) -> f64 {
    gw.metrics()
        .lines()
        .find_map(|l| l.strip_prefix(name_and_labels)?.trim().parse().ok())
        .unwrap_or(0.0)
}

fn audit(gw: &Gateway, kind: &str) -> Vec<Value> {
    let (_, a) = gw.req("GET", "/v1/audit?limit=1000", Some("admin"), None, None);
    a["records"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["kind"] == kind)
        .cloned()
        .collect()
}

#[test]
fn slowloris_connections_are_closed_after_the_header_timeout_and_others_are_served() {
    let backend = Backend::start();
    let gw = Gateway::start_with(
        &config_text(&backend, "header_timeout = \"2s\"\nidle_timeout = \"60s\""),
        POLICY,
    );
    let rt = tokio::runtime::Runtime::new().unwrap();
    let to = addr(&gw);
    let opened = Instant::now();
    // 1,500 that send half a request line, 500 that send nothing at all.
    let (mut half, mut silent) = rt.block_on(async {
        (
            open_from(
                "127.0.0.2",
                to,
                1500,
                b"POST /v1/calls HTTP/1.1\r\nHost: x\r\n",
            )
            .await,
            open_from("127.0.0.3", to, 500, b"").await,
        )
    });

    // While they are held, a call and an approval each succeed within a second.
    let t = Instant::now();
    let (s, b) = gw.call("agent1", "echo.hi", json!({"n": 1}), None);
    assert_eq!(s, 200, "{b}");
    assert!(t.elapsed() < Duration::from_secs(1), "{:?}", t.elapsed());
    let (call, approval) = gw.call_async("agent1", "db.query", json!({"sql": "select 1"}));
    let t = Instant::now();
    assert_eq!(gw.approve("dba1", &approval).0, 200);
    let (s, b) = gw.resume("agent1", &call);
    assert_eq!(s, 200, "{b}");
    assert!(t.elapsed() < Duration::from_secs(1), "{:?}", t.elapsed());

    // Every half-open connection is closed once the header timeout has passed (and not
    // before it). Opening them took a while; the last one opened was last to time out.
    let all_open = Instant::now();
    rt.block_on(async {
        for (i, s) in half.iter_mut().chain(silent.iter_mut()).enumerate() {
            let left = Duration::from_secs(2 + 6).saturating_sub(all_open.elapsed());
            assert!(
                closed_within(s, left).await.is_some(),
                "connection {i} still open {:?} after it was opened",
                opened.elapsed()
            );
        }
    });
    assert!(opened.elapsed() >= Duration::from_millis(1900));
    assert!(
        metric(
            &gw,
            "airlock_connections_closed_total{reason=\"header_timeout\"}"
        ) >= 2000.0
    );
    assert_eq!(backend.count(), 2, "only the two real calls ran");
}

#[test]
fn a_connection_flood_is_refused_fast_and_other_clients_keep_working() {
    let backend = Backend::start();
    let gw = Gateway::start_with(
        &config_text(
            &backend,
            "max_connections = 100\nmax_connections_per_client = 50\nheader_timeout = \"30s\"",
        ),
        POLICY,
    );
    let rt = tokio::runtime::Runtime::new().unwrap();
    let to = addr(&gw);
    // A client with a keep-alive connection from before the flood.
    let mut keepalive = rt.block_on(async {
        let mut s = open_from("127.0.0.1", to, 1, b"").await.pop().unwrap();
        s.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
            .await
            .unwrap();
        let mut buf = [0u8; 512];
        let n = s.read(&mut buf).await.unwrap();
        assert!(buf[..n].starts_with(b"HTTP/1.1 200"));
        s
    });

    // One address floods: it gets its share (50), and the rest are refused at once.
    let mut flood = rt.block_on(open_from("127.0.0.2", to, 80, b""));
    let t = Instant::now();
    let mut refused = 0;
    rt.block_on(async {
        for s in flood.iter_mut() {
            if let Some(answer) = closed_within(s, Duration::from_millis(100)).await {
                refused += 1;
                assert!(
                    answer.is_empty() || answer.starts_with(b"HTTP/1.1 503"),
                    "{}",
                    String::from_utf8_lossy(&answer)
                );
            }
        }
    });
    assert_eq!(refused, 30, "a client beyond its share is refused");
    assert!(t.elapsed() < Duration::from_secs(20));
    // Calls from other clients keep working.
    let (s, b) = gw.call("agent1", "echo.hi", json!({}), None);
    assert_eq!(s, 200, "{b}");

    // A second address fills the gateway: now a new client is refused too...
    let _more = rt.block_on(open_from("127.0.0.3", to, 49, b""));
    let mut late = rt
        .block_on(open_from("127.0.0.4", to, 1, b""))
        .pop()
        .unwrap();
    let answer = rt
        .block_on(closed_within(&mut late, Duration::from_millis(500)))
        .expect("refused at once");
    assert!(answer.is_empty() || answer.starts_with(b"HTTP/1.1 503 Service Unavailable"));
    // ...but a connection already open keeps working.
    rt.block_on(async {
        keepalive
            .write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
            .await
            .unwrap();
        let mut buf = [0u8; 512];
        let n = keepalive.read(&mut buf).await.unwrap();
        assert!(buf[..n].starts_with(b"HTTP/1.1 200"));
    });
    assert_eq!(
        metric(
            &gw,
            "airlock_connections_closed_total{reason=\"max_connections_per_client\"}"
        ),
        30.0
    );
    assert!(
        metric(
            &gw,
            "airlock_connections_closed_total{reason=\"max_connections\"}"
        ) >= 1.0
    );
    drop(flood);
}

/// The test config with a rate on agent1 and a pending limit on agent2.
fn limited_config(backend: &Backend) -> String {
    config_text(backend, "")
        .replacen("id = \"agent1\"\n", "id = \"agent1\"\nrate = \"5/s\"\n", 1)
        .replacen("id = \"agent2\"\n", "id = \"agent2\"\nmax_pending = 2\n", 1)
}

#[test]
fn a_principal_over_its_rate_gets_429_and_others_are_unaffected() {
    let backend = Backend::start();
    let gw = Gateway::start_with(&limited_config(&backend), POLICY);
    let mut ok = 0;
    let mut limited = Vec::new();
    for i in 0..12 {
        let (s, b) = gw.call("agent1", "echo.hi", json!({"i": i}), None);
        match s {
            200 => ok += 1,
            429 => limited.push(b),
            other => panic!("{other} {b}"),
        }
        // agent2 is never limited by agent1's rate.
        assert_eq!(gw.call("agent2", "echo.hi", json!({"i": i}), None).0, 200);
    }
    // A burst of 5, plus what refilled (5/s) while the 24 calls ran.
    assert!((5..=9).contains(&ok), "{ok} admitted");
    assert!(limited.len() >= 3);
    for b in &limited {
        assert_eq!(code(b), "principal.rate_limited");
    }
    // Retry-After is given, and honouring it works.
    let r = gw
        .client
        .post(format!("{}/v1/calls", gw.base))
        .bearer_auth("token-agent1")
        .json(&json!({"tool": "echo.hi", "args": {}}))
        .send()
        .unwrap();
    let extra_ran = usize::from(r.status().as_u16() == 200);
    let retry: u64 = if r.status().as_u16() == 429 {
        r.headers()["retry-after"]
            .to_str()
            .unwrap()
            .parse()
            .unwrap()
    } else {
        0
    };
    assert!(retry <= 1);
    std::thread::sleep(Duration::from_secs(retry.max(1)));
    assert_eq!(gw.call("agent1", "echo.hi", json!({}), None).0, 200);
    // Audited once per burst of refusals, not once per refused request; counted by principal.
    let audited = audit(&gw, "principal.limited");
    // Each refill that admitted a call ended a burst; at most one more for the last request.
    assert!(
        !audited.is_empty() && audited.len() <= ok - 5 + 2,
        "{audited:?}"
    );
    assert!(audited.len() < limited.len());
    assert_eq!(audited[0]["principal"], "agent1");
    assert_eq!(audited[0]["code"], "principal.rate_limited");
    assert!(
        metric(
            &gw,
            "airlock_principal_refusals_total{principal=\"agent1\",reason=\"rate_limited\"}"
        ) >= limited.len() as f64
    );
    assert_eq!(backend.count() as usize, ok + 12 + extra_ran + 1);
}

#[test]
fn a_principal_at_max_pending_cannot_open_another_approval_but_its_grants_work() {
    let backend = Backend::start();
    let gw = Gateway::start_with(&limited_config(&backend), POLICY);
    let (multi_call, multi_approval) = gw.call_async("agent2", "multi.op", json!({"n": 1}));
    gw.call_async("agent2", "db.query", json!({"sql": "select 1"}));
    let (s, b) = gw.call(
        "agent2",
        "db.query",
        json!({"sql": "select 2"}),
        Some("respond-async"),
    );
    assert_eq!((s, code(&b)), (429, "principal.too_many_pending"), "{b}");
    // Another principal is not affected.
    gw.call_async("agent1", "db.query", json!({"sql": "select 2"}));

    // A decision frees a place.
    assert_eq!(gw.approve("ops", &multi_approval).0, 200);
    assert_eq!(gw.resume("agent2", &multi_call).0, 200);
    gw.call_async("agent2", "db.query", json!({"sql": "select 3"}));
    let (s, _) = gw.call(
        "agent2",
        "db.query",
        json!({"sql": "select 4"}),
        Some("respond-async"),
    );
    assert_eq!(s, 429);
    // At its limit, the principal's grant still works: the same call in the same run spends
    // a use of the approved grant (uses = 3) and runs.
    let (s, b) = gw.call("agent2", "multi.op", json!({"n": 1}), None);
    assert_eq!(s, 200, "{b}");
    assert_eq!(b["status"], "completed");
    assert_eq!(
        metric(
            &gw,
            "airlock_principal_pending_approvals{principal=\"agent2\"}"
        ),
        2.0
    );
    assert_eq!(audit(&gw, "principal.limited").len(), 2, "one per burst");
}

/// A small deterministic generator (xorshift64*), so a failing case can be replayed.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.next() as u8).collect()
    }
}

/// One generated case: garbage of one of the kinds the listener must survive.
fn garbage(rng: &mut Rng) -> Vec<u8> {
    let body = r#"{"tool":"echo.hi","args":{"a":1}}"#;
    let valid = format!(
        "POST /v1/calls HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer token-agent1\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .into_bytes();
    match rng.below(8) {
        // Random bytes.
        0 => {
            let n = rng.below(600);
            rng.bytes(n)
        }
        // A valid call, truncated before its end: it must never run.
        1 => valid[..rng.below(valid.len() - 1)].to_vec(),
        // Huge header counts.
        2 => {
            let mut r = b"GET /healthz HTTP/1.1\r\nHost: x\r\n".to_vec();
            for i in 0..(100 + rng.below(3000)) {
                r.extend_from_slice(format!("x-h{i}: {}\r\n", rng.next()).as_bytes());
            }
            r.extend_from_slice(b"\r\n");
            r
        }
        // Bad chunked encodings on an authenticated call.
        3 => {
            let chunks = [
                "zz\r\n{}\r\n0\r\n\r\n",
                "-5\r\nhello\r\n0\r\n\r\n",
                "ffffffffffffffffffff\r\nx\r\n",
                "4\r\n{\"to\r\n",
                "3\r\nabcdef\r\n0\r\n\r\n",
                "0\r\nbad-trailer\r\n",
            ];
            format!(
                "POST /v1/calls HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer token-agent1\r\nTransfer-Encoding: chunked\r\n\r\n{}",
                chunks[rng.below(chunks.len())]
            )
            .into_bytes()
        }
        // The HTTP/2 preface, then garbage.
        4 => {
            let mut r = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec();
            let n = rng.below(300);
            r.extend(rng.bytes(n));
            r
        }
        // Invalid UTF-8 in the path and in header values and names.
        5 => {
            let mut r = b"GET /v1/calls/".to_vec();
            r.extend_from_slice(&[0xff, 0xfe, 0xc3, 0x28]);
            r.extend_from_slice(b" HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ");
            r.extend_from_slice(&[0xc0, 0xaf, 0xed, 0xa0, 0x80]);
            r.extend_from_slice(b"\r\nx-\xff\xfe: \x80\x81\r\n\r\n");
            r
        }
        // A valid call whose body bytes were flipped: never a valid call any more.
        6 => {
            let mut r = valid.clone();
            let head = r.len() - body.len();
            for _ in 0..(1 + rng.below(4)) {
                let i = head + rng.below(body.len());
                r[i] = r[i].wrapping_add(1 + rng.below(254) as u8) | 0x80;
            }
            r
        }
        // A header section cut in the middle of a line, then random bytes.
        _ => {
            let mut r = valid[..20 + rng.below(60)].to_vec();
            let n = rng.below(200);
            r.extend(rng.bytes(n));
            r
        }
    }
}

#[test]
fn generated_garbage_crashes_nothing_and_runs_no_call() {
    let backend = Backend::start();
    let mut gw = Gateway::start_with(
        &config_text(&backend, "header_timeout = \"2s\"\nbody_timeout = \"2s\""),
        POLICY,
    );
    let to = addr(&gw);
    let rt = tokio::runtime::Runtime::new().unwrap();
    let cases = 1200;
    let started = Instant::now();
    rt.block_on(async {
        let mut rng = Rng(0x5eed_a1e0_c0ff_ee01);
        let inputs: Vec<Vec<u8>> = (0..cases).map(|_| garbage(&mut rng)).collect();
        let mut tasks = tokio::task::JoinSet::new();
        for (i, input) in inputs.into_iter().enumerate() {
            // 16 at a time.
            if tasks.len() >= 16 {
                tasks.join_next().await;
            }
            tasks.spawn(async move {
                let Ok(mut s) = TcpStream::connect(to).await else {
                    panic!("case {i}: the gateway refused a connection");
                };
                let _ = s.write_all(&input).await;
                let _ = s.shutdown().await;
                let mut sink = Vec::new();
                // Whatever the answer, it comes (or the connection closes) in bounded time.
                let read = tokio::time::timeout(Duration::from_secs(5), s.read_to_end(&mut sink));
                assert!(read.await.is_ok(), "case {i} hung");
            });
        }
        while tasks.join_next().await.is_some() {}
    });
    assert!(started.elapsed() < Duration::from_secs(120));
    // Nothing crashed, nothing reached the backend, and the gateway still answers.
    assert!(gw_alive(&mut gw));
    assert_eq!(backend.count(), 0, "a garbage request reached the backend");
    let (s, _) = gw.req("GET", "/healthz", None, None, None);
    assert_eq!(s, 200);
    let (s, b) = gw.call("agent1", "echo.hi", json!({"after": "fuzz"}), None);
    assert_eq!(s, 200, "{b}");
    assert_eq!(backend.count(), 1);
    let log = std::fs::read_to_string(gw.dir.path().join("gateway.log")).unwrap();
    assert!(!log.contains("panicked"), "{log}");
}

fn gw_alive(gw: &mut Gateway) -> bool {
    gw.try_wait().is_none()
}

#[test]
fn a_slow_body_gets_408_and_an_idle_connection_is_closed() {
    let backend = Backend::start();
    let gw = Gateway::start_with(
        &config_text(&backend, "body_timeout = \"1s\"\nidle_timeout = \"1s\""),
        POLICY,
    );
    let rt = tokio::runtime::Runtime::new().unwrap();
    let to = addr(&gw);
    rt.block_on(async {
        // Headers promise 100 bytes; 10 come, then nothing.
        let mut s = open_from("127.0.0.1", to, 1, b"").await.pop().unwrap();
        s.write_all(b"POST /v1/calls HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer token-agent1\r\nContent-Length: 100\r\n\r\n{\"tool\":\"e")
            .await
            .unwrap();
        let t = Instant::now();
        let answer = closed_within(&mut s, Duration::from_secs(5)).await.unwrap();
        let text = String::from_utf8_lossy(&answer);
        assert!(text.starts_with("HTTP/1.1 408"), "{text}");
        assert!(text.contains("request.body_timeout"), "{text}");
        assert!(t.elapsed() >= Duration::from_millis(900));

        // A keep-alive connection that goes quiet after its request is closed after the
        // idle timeout.
        let mut s = open_from("127.0.0.1", to, 1, b"").await.pop().unwrap();
        s.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
            .await
            .unwrap();
        let mut buf = [0u8; 512];
        let n = s.read(&mut buf).await.unwrap();
        assert!(buf[..n].starts_with(b"HTTP/1.1 200"));
        let t = Instant::now();
        assert!(closed_within(&mut s, Duration::from_secs(5)).await.is_some());
        assert!(t.elapsed() >= Duration::from_millis(800), "{:?}", t.elapsed());
    });
    assert_eq!(backend.count(), 0);
    assert_eq!(
        metric(
            &gw,
            "airlock_connections_closed_total{reason=\"body_timeout\"}"
        ),
        1.0
    );
    assert!(
        metric(
            &gw,
            "airlock_connections_closed_total{reason=\"idle_timeout\"}"
        ) >= 1.0
    );
}
