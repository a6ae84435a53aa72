//! TLS on both sides: the gateway listens with a test certificate (rcgen), and forwards to an
//! https backend whose certificate it trusts through `server.upstream_ca`.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use serde_json::json;
use support::*;

#[test]
fn tls_listener_and_https_upstream() {
    let dir = tempfile::tempdir().unwrap();
    let (backend_ca, backend_cert, backend_key) = certs(dir.path(), "backend");
    let (gateway_ca, gateway_cert, gateway_key) = certs(dir.path(), "gateway");
    let backend = Backend::start_tls(&backend_cert, &backend_key);
    let extra = format!(
        "tls = {{ cert = \"{}\", key = \"{}\" }}\nupstream_ca = \"{}\"\n",
        gateway_cert.display(),
        gateway_key.display(),
        backend_ca.display()
    );
    let mut gw = Gateway::start_with(&config_text(&backend, &extra), POLICY);
    assert!(gw.base.starts_with("https://"), "{}", gw.base);
    gw.client = reqwest::blocking::Client::builder()
        .tls_certs_only([
            reqwest::Certificate::from_pem(&std::fs::read(&gateway_ca).unwrap()).unwrap(),
        ])
        .build()
        .unwrap();
    let (s, b) = gw.call("agent1", "echo.secure", json!({"x": 1}), None);
    assert_eq!(s, 200, "{b}");
    assert_eq!(b["result"]["raw"], r#"{"x":1}"#);
    assert_eq!(b["upstream_status"], 200);
    // A client that does not trust the gateway's CA cannot talk to it.
    let untrusting = reqwest::blocking::Client::builder()
        .tls_certs_only([
            reqwest::Certificate::from_pem(&std::fs::read(&backend_ca).unwrap()).unwrap(),
        ])
        .build()
        .unwrap();
    assert!(untrusting
        .get(format!("{}/healthz", gw.base))
        .send()
        .is_err());
}

#[test]
fn a_stalled_tls_handshake_is_closed_after_its_timeout() {
    let dir = tempfile::tempdir().unwrap();
    let (gateway_ca, gateway_cert, gateway_key) = certs(dir.path(), "gateway");
    let backend = Backend::start();
    let extra = format!(
        "tls = {{ cert = \"{}\", key = \"{}\" }}\ntls_handshake_timeout = \"1s\"\nheader_timeout = \"30s\"\n",
        gateway_cert.display(),
        gateway_key.display(),
    );
    let mut gw = Gateway::start_with(&config_text(&backend, &extra), POLICY);
    gw.client = reqwest::blocking::Client::builder()
        .tls_certs_only([
            reqwest::Certificate::from_pem(&std::fs::read(&gateway_ca).unwrap()).unwrap(),
        ])
        .build()
        .unwrap();
    let addr = gw.base.trim_start_matches("https://").to_owned();
    // Half a TLS record header, then nothing.
    let mut stalled = std::net::TcpStream::connect(&addr).unwrap();
    std::io::Write::write_all(&mut stalled, &[0x16, 0x03]).unwrap();
    stalled
        .set_read_timeout(Some(std::time::Duration::from_secs(5)))
        .unwrap();
    let t = std::time::Instant::now();
    let mut buf = [0u8; 16];
    let n = std::io::Read::read(&mut stalled, &mut buf).unwrap_or(0);
    assert_eq!(n, 0, "closed without an answer");
    let waited = t.elapsed();
    assert!(
        waited >= std::time::Duration::from_millis(900)
            && waited < std::time::Duration::from_secs(4),
        "{waited:?}"
    );
    // Other clients were served meanwhile, and the close is counted.
    let (s, b) = gw.call("agent1", "echo.x", json!({}), None);
    assert_eq!(s, 200, "{b}");
    assert!(gw
        .metrics()
        .contains("airlock_connections_closed_total{reason=\"tls_handshake_timeout\"} 1"));
}
