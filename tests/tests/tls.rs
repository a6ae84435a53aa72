//! TLS on both sides: the gateway listens with a test certificate (rcgen), and forwards to an
//! https backend whose certificate it trusts through `server.upstream_ca`.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use rcgen::{BasicConstraints, CertificateParams, IsCa, Issuer, KeyPair};
use serde_json::json;
use support::*;

/// A test CA and a leaf for 127.0.0.1 signed by it, written as PEM files: (ca, cert, key).
fn certs(
    dir: &std::path::Path,
    name: &str,
) -> (std::path::PathBuf, std::path::PathBuf, std::path::PathBuf) {
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca_key = KeyPair::generate().unwrap();
    let ca_cert = ca_params.self_signed(&ca_key).unwrap();
    let issuer = Issuer::new(ca_params, ca_key);
    let leaf_key = KeyPair::generate().unwrap();
    let leaf = CertificateParams::new(vec!["127.0.0.1".to_owned(), "localhost".to_owned()])
        .unwrap()
        .signed_by(&leaf_key, &issuer)
        .unwrap();
    let paths = (
        dir.join(format!("{name}-ca.pem")),
        dir.join(format!("{name}.pem")),
        dir.join(format!("{name}-key.pem")),
    );
    std::fs::write(&paths.0, ca_cert.pem()).unwrap();
    std::fs::write(&paths.1, leaf.pem()).unwrap();
    std::fs::write(&paths.2, leaf_key.serialize_pem()).unwrap();
    paths
}

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
