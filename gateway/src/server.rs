//! Serving: the accept loop (plain TCP or rustls), HTTP/1.1 and HTTP/2 through hyper-util,
//! and graceful shutdown: stop accepting, answer held calls with `503 gateway.shutting_down`
//! (their approvals persist), let in-flight calls finish, close the store.
//!
//! `run(config, listener, shutdown)` is the library entry point; `main` only parses flags.

use std::sync::Arc;
use std::time::Duration;

use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::GracefulShutdown;
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;
use tokio_util::sync::CancellationToken;

use crate::config::Config;
use crate::state::Gateway;

/// How long in-flight requests get to finish after shutdown starts.
const DRAIN: Duration = Duration::from_secs(10);

fn tls_acceptor(cert: &std::path::Path, key: &std::path::Path) -> Result<TlsAcceptor, String> {
    let read = |p: &std::path::Path| {
        std::fs::read(p).map_err(|e| format!("server.tls: cannot read {}: {e}", p.display()))
    };
    let certs = rustls_pemfile::certs(&mut read(cert)?.as_slice())
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("server.tls.cert: {e}"))?;
    let key = rustls_pemfile::private_key(&mut read(key)?.as_slice())
        .map_err(|e| format!("server.tls.key: {e}"))?
        .ok_or("server.tls.key: no private key in the file")?;
    let mut config = rustls::ServerConfig::builder()
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .map_err(|e| format!("server.tls: {e}"))?;
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(TlsAcceptor::from(Arc::new(config)))
}

/// A gateway whose store is open and whose policy has loaded, ready to serve: what
/// `airlock serve` waits for before it prints anything that claims success.
pub struct Prepared {
    gw: Arc<Gateway>,
    tls: Option<TlsAcceptor>,
}

/// Reads the TLS keys, loads the policy and opens the store (taking its lock).
pub async fn prepare(config: Config) -> Result<Prepared, String> {
    let tls = match &config.tls {
        Some((cert, key)) => Some(tls_acceptor(cert, key)?),
        None => None,
    };
    let gw = tokio::task::spawn_blocking(move || Gateway::open(config, CancellationToken::new()))
        .await
        .map_err(|e| e.to_string())??;
    Ok(Prepared { gw, tls })
}

/// Serves `config` on `listener` until `shutdown` is cancelled.
pub async fn run(
    config: Config,
    listener: TcpListener,
    shutdown: CancellationToken,
) -> Result<(), String> {
    serve(prepare(config).await?, listener, shutdown).await
}

/// Serves a prepared gateway on `listener` until `shutdown` is cancelled.
pub async fn serve(
    prepared: Prepared,
    listener: TcpListener,
    shutdown: CancellationToken,
) -> Result<(), String> {
    let Prepared { gw, tls } = prepared;
    let header_limit = gw.config.max_header_bytes;
    gw.spawn_tasks();
    let reload_gw = gw.clone();
    let reload_token = shutdown.clone();
    tokio::spawn(async move { reload_on_sighup(reload_gw, reload_token).await });

    let graceful = GracefulShutdown::new();
    let mut builder = auto::Builder::new(TokioExecutor::new());
    // hyper's own limit is above ours, so oversized headers get our JSON error and code.
    builder
        .http1()
        .max_buf_size((header_limit * 4).max(64 << 10));
    loop {
        let (stream, _) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(e) => {
                    tracing::warn!("accept failed: {e}");
                    continue;
                }
            },
            _ = shutdown.cancelled() => break,
        };
        let _ = stream.set_nodelay(true);
        let gw = gw.clone();
        let service = service_fn(move |req| {
            let gw = gw.clone();
            async move { Ok::<_, std::convert::Infallible>(crate::api::handle(gw, req).await) }
        });
        let builder = builder.clone();
        let watcher = graceful.watcher();
        let tls = tls.clone();
        tokio::spawn(async move {
            let result = match tls {
                Some(acceptor) => match acceptor.accept(stream).await {
                    Ok(s) => {
                        watcher
                            .watch(
                                builder
                                    .serve_connection_with_upgrades(TokioIo::new(s), service)
                                    .into_owned(),
                            )
                            .await
                    }
                    Err(e) => {
                        tracing::debug!("TLS handshake failed: {e}");
                        return;
                    }
                },
                None => {
                    watcher
                        .watch(
                            builder
                                .serve_connection_with_upgrades(TokioIo::new(stream), service)
                                .into_owned(),
                        )
                        .await
                }
            };
            if let Err(e) = result {
                tracing::debug!("connection ended: {e}");
            }
        });
    }
    tracing::info!("shutting down: held calls answer 503, pending approvals persist");
    gw.shutdown.cancel();
    if tokio::time::timeout(DRAIN, graceful.shutdown())
        .await
        .is_err()
    {
        tracing::warn!("some connections did not finish within {DRAIN:?}");
    }
    drop(gw);
    Ok(())
}

#[cfg(unix)]
async fn reload_on_sighup(gw: Arc<Gateway>, shutdown: CancellationToken) {
    let Ok(mut hup) = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup()) else {
        return;
    };
    loop {
        tokio::select! {
            _ = hup.recv() => { let _ = gw.reload("SIGHUP"); }
            _ = shutdown.cancelled() => break,
        }
    }
}

#[cfg(not(unix))]
async fn reload_on_sighup(_gw: Arc<Gateway>, _shutdown: CancellationToken) {}
