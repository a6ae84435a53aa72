//! A real backend process for end-to-end tests. It listens on 127.0.0.1:0 (TLS with
//! `--tls CERT KEY`), prints `listening <port>`, and serves:
//! - `POST /echo`: 200 with the body it got and the `airlock-*` headers;
//! - `POST /status/<code>`: that status;
//! - `POST /slow/<ms>`: 200 after a delay;
//! - `POST /classify/<label>`: a classifier's answer, score 0.9 with that label;
//! - `POST /ask`: a tool that asks a person mid-call (DESIGN §11): it suspends with "which
//!   environment?" and a schema; resumed (`airlock-resume`), it answers with the choice, or
//!   with `"rounds": 2` in the args first asks again for a confirmation;
//! - `POST /asknested`: suspends with a nested schema (not a flat form), then echoes the answer;
//! - `POST /badsuspend`: suspends with a schema that is not JSON Schema;
//! - `GET /count`: how many POSTs it has served, and their bodies (raw, as received).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::convert::Infallible;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper::{Request, Response};
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use serde_json::{json, Value};

#[derive(Default)]
struct Seen {
    bodies: Vec<String>,
}

async fn handle(seen: Arc<Mutex<Seen>>, req: Request<Incoming>) -> Response<Full<Bytes>> {
    let path = req.uri().path().to_owned();
    let headers: serde_json::Map<String, Value> = req
        .headers()
        .iter()
        .filter(|(k, _)| k.as_str().starts_with("airlock-"))
        .map(|(k, v)| (k.as_str().to_owned(), Value::from(v.to_str().unwrap_or(""))))
        .collect();
    let method = req.method().clone();
    let body = req
        .into_body()
        .collect()
        .await
        .map(|b| b.to_bytes())
        .unwrap_or_default();
    let text = String::from_utf8_lossy(&body).into_owned();
    let reply = |status: u16, v: Value| {
        let mut r = Response::new(Full::new(Bytes::from(v.to_string())));
        *r.status_mut() = hyper::StatusCode::from_u16(status).unwrap();
        r.headers_mut()
            .insert("content-type", "application/json".parse().unwrap());
        r
    };
    if method == hyper::Method::GET && path == "/count" {
        let s = seen.lock().unwrap();
        return reply(200, json!({"count": s.bodies.len(), "bodies": s.bodies}));
    }
    seen.lock().unwrap().bodies.push(text.clone());
    let parsed: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
    let parts: Vec<&str> = path.trim_matches('/').split('/').collect();
    match parts.as_slice() {
        ["status", code] => reply(
            code.parse().unwrap_or(500),
            json!({"error": "backend says no", "args": parsed}),
        ),
        ["classify", label] => reply(
            200,
            json!({"score": 0.9, "labels": [label], "detail": {"seen_fingerprint": parsed["fingerprint"]}}),
        ),
        ["ask"] => {
            let resumed = headers.contains_key("airlock-resume");
            let data = &parsed["resume_data"];
            let rounds = if resumed {
                &parsed["args"]["rounds"]
            } else {
                &parsed["rounds"]
            };
            if !resumed {
                reply(
                    202,
                    json!({"suspend": {
                        "payload": {"question": "which environment?"},
                        "resume_schema": {
                            "type": "object",
                            "properties": {"environment": {"type": "string", "enum": ["staging", "production"]}},
                            "required": ["environment"],
                            "additionalProperties": false,
                        },
                    }}),
                )
            } else if rounds == 2 && data.get("confirm").is_none() {
                reply(
                    202,
                    json!({"suspend": {
                        "payload": {"question": format!("deploy to {}?", data["environment"])},
                        "resume_schema": {
                            "type": "object",
                            "properties": {
                                "confirm": {"type": "boolean"},
                                "environment": {"type": "string"},
                            },
                            "required": ["confirm", "environment"],
                        },
                    }}),
                )
            } else {
                reply(
                    200,
                    json!({"deployed_to": data["environment"], "resume_data": data, "args": parsed["args"], "headers": headers}),
                )
            }
        }
        ["asknested"] if headers.contains_key("airlock-resume") => reply(
            200,
            json!({"target": parsed["resume_data"]["target"], "args": parsed["args"]}),
        ),
        ["asknested"] => reply(
            202,
            json!({"suspend": {
                "payload": {"message": "where exactly?"},
                "resume_schema": {
                    "type": "object",
                    "properties": {"target": {
                        "type": "object",
                        "properties": {"region": {"type": "string"}, "zone": {"type": "integer"}},
                        "required": ["region", "zone"],
                    }},
                    "required": ["target"],
                },
            }}),
        ),
        ["badsuspend"] => reply(
            202,
            json!({"suspend": {"payload": {}, "resume_schema": {"type": 12}}}),
        ),
        ["slow", ms] => {
            tokio::time::sleep(Duration::from_millis(ms.parse().unwrap_or(1000))).await;
            reply(200, json!({"slow": true}))
        }
        _ => reply(
            200,
            json!({"path": path, "args": parsed, "raw": text, "headers": headers}),
        ),
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    let tls = match args.iter().position(|a| a == "--tls") {
        Some(i) => {
            let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
            let certs = rustls_pemfile::certs(&mut std::fs::read(&args[i + 1]).unwrap().as_slice())
                .collect::<Result<Vec<_>, _>>()
                .unwrap();
            let key =
                rustls_pemfile::private_key(&mut std::fs::read(&args[i + 2]).unwrap().as_slice())
                    .unwrap()
                    .unwrap();
            let mut config = rustls::ServerConfig::builder()
                .with_no_client_auth()
                .with_single_cert(certs, key)
                .unwrap();
            config.alpn_protocols = vec![b"http/1.1".to_vec()];
            Some(tokio_rustls::TlsAcceptor::from(Arc::new(config)))
        }
        None => None,
    };
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    println!("listening {}", listener.local_addr().unwrap().port());
    let seen = Arc::new(Mutex::new(Seen::default()));
    loop {
        let (stream, _) = listener.accept().await.unwrap();
        let _ = stream.set_nodelay(true);
        let seen = seen.clone();
        let tls = tls.clone();
        tokio::spawn(async move {
            let service = service_fn(move |req| {
                let seen = seen.clone();
                async move { Ok::<_, Infallible>(handle(seen, req).await) }
            });
            let builder = auto::Builder::new(TokioExecutor::new());
            match tls {
                Some(acceptor) => {
                    if let Ok(s) = acceptor.accept(stream).await {
                        let _ = builder.serve_connection(TokioIo::new(s), service).await;
                    }
                }
                None => {
                    let _ = builder
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                }
            }
        });
    }
}
