//! What a bearer JWT costs an allowed call (DESIGN §16, issue 21): one release gateway with a
//! static principal and an issuer, called side by side in one run with the static token and
//! with an ES256 JWT of that issuer (keys cached, as they are after the first call), in three
//! rounds; medians of the rounds are quoted.
//!
//! - one call alone: 2,000 sequential calls each way, interleaved, p50 (the difference is what
//!   the JWT adds);
//! - 32 connections back to back for 3 s each way: calls/s;
//! - and the signature check alone, in process: `jsonwebtoken::decode` of the same token with
//!   its ES256 key, 20,000 times, median per call.
//!
//! The issuer's JWKS is served by the bench itself (a key made by rcgen); the token is signed
//! by jsonwebtoken with the private half.
//!
//! Run: `cargo build --release -p airlock-gateway && cargo bench -p airlock-benches --bench jwt_auth`

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::Full;
use jsonwebtoken::jwk::{Jwk, JwkSet};
use jsonwebtoken::{Algorithm, DecodingKey, EncodingKey, Header, Validation};
use serde_json::json;
use sha2::{Digest, Sha256};
use support::{client, closed_loop, pct, send, serve_on_thread, start_backend, GatewayProcess};

const STATIC: &str = "bench-agent-token";
const ROUNDS: usize = 3;

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[v.len() / 2]
}

fn main() {
    let pair = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).unwrap();
    let signing = EncodingKey::from_ec_der(&pair.serialize_der());
    let mut jwk = Jwk::from_encoding_key(&signing, Algorithm::ES256).unwrap();
    jwk.common.key_id = Some("bench".into());
    let set = serde_json::to_vec(&JwkSet {
        keys: vec![jwk.clone()],
    })
    .unwrap();
    let jwks_port =
        serve_on_thread(move |_| hyper::Response::new(Full::new(Bytes::from(set.clone()))));
    let issuer = "https://idp.bench.example";

    let (backend, _) = start_backend();
    let config = format!(
        "[server]\ndata_dir = \"data\"\npolicy = \"policy\"\n\
         [[principals]]\nid = \"agent\"\nrole = \"agent\"\ntoken_sha256 = \"{}\"\n\
         [[issuers]]\nid = \"bench\"\nissuer = \"{issuer}\"\njwks_uri = \"http://127.0.0.1:{jwks_port}/jwks\"\naudience = \"airlock-bench\"\nroles = {{ agent = [\"agents\"] }}\n\
         [[tools]]\nname = \"bench.*\"\nupstream = \"http://127.0.0.1:{backend}/echo\"\n",
        airlock_policy::hex(&Sha256::digest(STATIC.as_bytes())),
    );
    let gw = GatewayProcess::start(
        &config,
        "version = 1\n[defaults]\ndecision = \"deny\"\n[[rules]]\nid = \"allow\"\ntools = [\"bench.allow\"]\ndecision = \"allow\"\n",
    );
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let mut header = Header::new(Algorithm::ES256);
    header.kid = Some("bench".into());
    let claims = json!({"iss": issuer, "sub": "bench-agent", "aud": "airlock-bench", "exp": now + 3600, "iat": now, "groups": ["agents"], "jti": "bench-1"});
    let jwt = jsonwebtoken::encode(&header, &claims, &signing).unwrap();

    // The signature and claims check alone.
    let key = DecodingKey::from_jwk(&jwk).unwrap();
    let mut v = Validation::new(Algorithm::ES256);
    v.set_audience(&["airlock-bench"]);
    v.set_issuer(&[issuer]);
    let mut per = Vec::new();
    for _ in 0..20 {
        let t = Instant::now();
        for _ in 0..1000 {
            jsonwebtoken::decode::<serde_json::Value>(&jwt, &key, &v).unwrap();
        }
        per.push(t.elapsed().as_secs_f64() * 1e6 / 1000.0);
    }
    let decode_us = median(per);

    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    let uri = format!("http://127.0.0.1:{}/v1/calls", gw.port);
    let body = r#"{"tool":"bench.allow","args":{"n":1}}"#.to_owned();
    let c = client();
    let (mut p50_static, mut p50_jwt, mut rps_static, mut rps_jwt) =
        (vec![], vec![], vec![], vec![]);
    rt.block_on(async {
        let (s, b) = send(&c, &uri, Some(&jwt), None, body.clone()).await;
        assert_eq!(s, 200, "{}", String::from_utf8_lossy(&b));
        for _ in 0..ROUNDS {
            // Interleaved, one of each in turn, so the machine's drift falls on both alike.
            let (mut a, mut b) = (Vec::with_capacity(2000), Vec::with_capacity(2000));
            for _ in 0..2000 {
                for (token, lat) in [(STATIC, &mut a), (jwt.as_str(), &mut b)] {
                    let t = Instant::now();
                    let (s, _) = send(&c, &uri, Some(token), None, body.clone()).await;
                    assert_eq!(s, 200);
                    lat.push(t.elapsed());
                }
            }
            a.sort();
            b.sort();
            p50_static.push(pct(&a, 0.5).as_secs_f64() * 1e6);
            p50_jwt.push(pct(&b, 0.5).as_secs_f64() * 1e6);
            for (token, out) in [(STATIC, &mut rps_static), (jwt.as_str(), &mut rps_jwt)] {
                out.push(closed_loop(&c, &uri, Some(token), &body, 32, 3).await);
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
        }
    });
    let (ps, pj) = (median(p50_static.clone()), median(p50_jwt.clone()));
    let (rs, rj) = (median(rps_static.clone()), median(rps_jwt.clone()));
    println!("jwt_auth (medians of {ROUNDS} rounds; one gateway, one run)");
    println!(
        "  one call alone, p50: static token {ps:.0} µs, ES256 JWT {pj:.0} µs, JWT adds {:.0} µs",
        pj - ps
    );
    println!("    rounds: static {p50_static:.0?} jwt {p50_jwt:.0?}");
    println!(
        "  32 connections: static token {rs:.0} calls/s, ES256 JWT {rj:.0} calls/s ({:.2}x)",
        rj / rs
    );
    println!("    rounds: static {rps_static:.0?} jwt {rps_jwt:.0?}");
    println!("  jsonwebtoken::decode alone (ES256, in process): {decode_us:.1} µs per token");
}
