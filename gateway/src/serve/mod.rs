//! Serving: the accept loop (plain TCP or rustls), HTTP/1.1 and HTTP/2 through hyper-util,
//! and graceful shutdown: stop accepting, answer held calls with `503 gateway.shutting_down`
//! (their approvals persist), let in-flight calls finish, close the store.
//!
//! Beside it: [`threads`], the serving threads each accepted connection is handed to, and
//! [`guards`], the limits at accept and the handshake, header and idle timeouts.
//!
//! [`prepare`] reads the TLS keys, loads the policy, opens the store and lists the MCP
//! upstreams; [`serve`] then serves the prepared gateway until shutdown.

pub mod guards;
mod threads;

use std::sync::Arc;
use std::time::Duration;

use http_body_util::BodyExt;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::{GracefulShutdown, Watcher};
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;
use tokio_util::sync::CancellationToken;

use crate::config::{Config, ConnectionLimits};
use crate::error::Code;
use crate::mcp::McpFront;
use crate::metrics::CloseReason;
use crate::state::Gateway;
use guards::{watchdog, Activity, Gate, Watched};
use threads::Servers;

/// How long in-flight requests get to finish after shutdown starts.
const DRAIN: Duration = Duration::from_secs(10);

/// A gateway whose store is open and whose policy has loaded, ready to serve: what
/// `airlock serve` waits for before it prints anything that claims success.
pub struct Prepared {
    gw: Arc<Gateway>,
    mcp: Arc<McpFront>,
    tls: Option<TlsAcceptor>,
}

/// Reads the TLS keys (`crate::tls`), loads the policy and opens the store (taking its lock).
pub async fn prepare(config: Config) -> Result<Prepared, String> {
    let gw = tokio::task::spawn_blocking(move || {
        Gateway::open(config, CancellationToken::new(), crate::api::Approval::face)
    })
    .await
    .map_err(|e| e.to_string())??;
    // The MCP upstreams are listed, and their tools' pins settled, before the gateway claims
    // to serve.
    crate::pins::start(&gw).await?;
    // The policy loaded at start reaches the approvals left pending: a file edited while the
    // gateway was down is applied as a reload would apply it.
    crate::repolicy::pending(&gw).await;
    let mut fresh = vec![0u8; 32];
    getrandom::fill(&mut fresh).map_err(|e| format!("no randomness for the state key: {e}"))?;
    let key = gw
        .store_op(move |s| s.secret("mcp.request_state", fresh, crate::clock::now_ms()))
        .await
        .map_err(|e| e.message)?;
    let tls = gw.tls.as_ref().map(crate::tls::Certs::acceptor);
    Ok(Prepared {
        gw,
        mcp: Arc::new(McpFront::new(key)),
        tls,
    })
}

/// Serves a prepared gateway on `listener` until `shutdown` is cancelled.
pub async fn serve(
    prepared: Prepared,
    listener: TcpListener,
    shutdown: CancellationToken,
) -> Result<(), String> {
    let Prepared { gw, mcp, tls } = prepared;
    let header_limit = gw.config.max_header_bytes;
    start_background(&gw, &shutdown);
    let graceful = GracefulShutdown::new();
    let mut builder = auto::Builder::new(TokioExecutor::new());
    // hyper's own limit is above ours, so oversized headers get our JSON error and code.
    builder
        .http1()
        .max_buf_size((header_limit * 4).max(64 << 10));
    let limits = gw.config.connections.clone();
    let gate = Gate::new(&limits);
    let refusal = refusal_response();
    let servers = Servers::start(threads::thread_count())
        .map_err(|e| format!("cannot start the serving threads: {e}"))?;
    loop {
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(e) => {
                    // Out of file descriptors, say: wait a moment instead of spinning.
                    tracing::warn!("accept failed: {e}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            _ = shutdown.cancelled() => break,
        };
        let admitted = match gate.admit(peer.ip()) {
            Ok(a) => a,
            Err(reason) => {
                // Refused at once, before reading anything: a plain-HTTP client gets a 503 it
                // can read (if its socket takes it without waiting), then the close.
                gw.metrics.connection_closed(reason);
                if tls.is_none() {
                    let _ = stream.try_write(&refusal);
                }
                continue;
            }
        };
        gw.metrics
            .connections
            .connections_open
            .set(gate.open() as i64);
        let _ = stream.set_nodelay(true);
        // Handed to a serving thread: the socket leaves this runtime's reactor for that one's.
        let stream = match stream.into_std() {
            Ok(s) => s,
            Err(e) => {
                tracing::warn!("cannot hand over a connection: {e}");
                continue;
            }
        };
        let conn = Connection {
            gw: gw.clone(),
            mcp: mcp.clone(),
            builder: builder.clone(),
            watcher: graceful.watcher(),
            activity: Activity::new(),
            limits: limits.clone(),
        };
        let tls = tls.clone();
        let (gw, gate) = (gw.clone(), gate.clone());
        let (server, seat) = servers.pick();
        server.spawn(async move {
            conn.serve_stream(stream, tls).await;
            drop((admitted, seat));
            gw.metrics
                .connections
                .connections_open
                .set(gate.open() as i64);
        });
    }
    stop(gw, graceful, servers).await;
    Ok(())
}

/// The gateway's own tasks beside the serving: expiry and the other timers, webhook
/// deliveries, the MCP upstreams' list refresh, each issuer's first key fetch, and SIGHUP.
fn start_background(gw: &Arc<Gateway>, shutdown: &CancellationToken) {
    gw.spawn_tasks();
    tokio::spawn(crate::deliveries::run(gw.clone()));
    tokio::spawn(crate::pins::refresh_loop(gw.clone()));
    tokio::spawn(crate::pins::follow_store(gw.clone()));
    // Each issuer's keys are fetched at start, so the first token waits for no fetch; an
    // issuer that cannot be reached is no reason not to serve (its tokens get 503 until it is).
    for issuer in &gw.auth.issuers().list {
        let issuer = issuer.clone();
        tokio::spawn(async move {
            let _ = issuer.keys.refresh(true).await;
        });
    }
    let reload_gw = gw.clone();
    let reload_token = shutdown.clone();
    tokio::spawn(async move { reload_on_sighup(reload_gw, reload_token).await });
}

/// The stop: held calls are told, connections drain, the store flushes, threads end.
async fn stop(gw: Arc<Gateway>, graceful: GracefulShutdown, servers: Servers) {
    tracing::info!("shutting down: held calls answer 503, pending approvals persist");
    gw.shutdown.cancel();
    if tokio::time::timeout(DRAIN, graceful.shutdown())
        .await
        .is_err()
    {
        tracing::warn!("some connections did not finish within {DRAIN:?}");
    }
    // Memtables out to tables: the next start replays little of the journal.
    let store = gw.store.clone();
    match tokio::task::spawn_blocking(move || store.flush()).await {
        Ok(Err(e)) => tracing::warn!("the store was not flushed at stop: {e}"),
        Err(e) => tracing::warn!("the store was not flushed at stop: {e}"),
        Ok(Ok(())) => {}
    }
    // Last, so what a stopped request left to record (its `Unfinished` guard's task) had the
    // drain and the flush to finish in. Off the async threads: joining waits for each serving
    // thread to see the stop.
    let _ = tokio::task::spawn_blocking(move || servers.stop()).await;
    drop(gw);
}

/// What one accepted connection needs to be served.
struct Connection {
    gw: Arc<Gateway>,
    mcp: Arc<McpFront>,
    builder: auto::Builder<TokioExecutor>,
    watcher: Watcher,
    activity: Arc<Activity>,
    limits: ConnectionLimits,
}

impl Connection {
    /// Serves a connection handed to this serving thread: its TLS handshake first, within
    /// `tls_handshake_timeout`, when the listener speaks TLS.
    async fn serve_stream(self, stream: std::net::TcpStream, tls: Option<TlsAcceptor>) {
        let stream = match tokio::net::TcpStream::from_std(stream) {
            Ok(s) => s,
            Err(e) => {
                tracing::warn!("cannot serve a connection: {e}");
                return;
            }
        };
        let io = Watched::new(stream, self.activity.clone());
        let Some(acceptor) = tls else {
            return self.drive(io).await;
        };
        match tokio::time::timeout(self.limits.tls_handshake_timeout, acceptor.accept(io)).await {
            Ok(Ok(s)) => {
                if s.get_ref().1.alpn_protocol() == Some(b"h2") {
                    self.activity.set_h2();
                }
                self.drive(s).await;
            }
            Ok(Err(e)) => tracing::debug!("TLS handshake failed: {e}"),
            Err(_) => self
                .gw
                .metrics
                .connection_closed(CloseReason::TlsHandshakeTimeout),
        }
    }

    /// Serves HTTP on `io` until the client closes, shutdown drains it, or a timer of
    /// [`crate::serve::guards`] fires (then the connection is dropped, which closes it).
    async fn drive<IO>(self, io: IO)
    where
        IO: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
    {
        let Connection {
            gw,
            mcp,
            builder,
            watcher,
            activity,
            limits,
        } = self;
        let requests = activity.clone();
        let service_gw = gw.clone();
        let service = service_fn(move |req: hyper::Request<hyper::body::Incoming>| {
            let gw = service_gw.clone();
            let mcp = mcp.clone();
            // In flight until the response body is finished: the timers leave it alone.
            let in_flight = requests.request_started();
            async move {
                // One front end per path: MCP, or the JSON API.
                let path = req.uri().path();
                let response = if path == "/mcp" {
                    crate::mcp::handle(gw, mcp, req).await
                } else if path == "/inbox" || path.starts_with("/inbox/") {
                    crate::inbox::handle(gw, req).await
                } else if path == "/slack/interactions" {
                    crate::slack::interactions::handle(gw, req).await
                } else {
                    crate::http::handle(gw, req).await
                };
                Ok::<_, std::convert::Infallible>(response.map(|body| {
                    body.map_frame(move |frame| {
                        let _ = &in_flight;
                        frame
                    })
                    .boxed()
                }))
            }
        });
        let served = watcher.watch(
            builder
                .serve_connection_with_upgrades(TokioIo::new(io), service)
                .into_owned(),
        );
        tokio::select! {
            result = served => {
                if let Err(e) = result {
                    tracing::debug!("connection ended: {e}");
                }
            }
            reason = watchdog(activity, limits) => {
                tracing::debug!(reason = reason.as_str(), "connection closed");
                gw.metrics.connection_closed(reason);
            }
        }
    }
}

/// The answer written to a connection refused at accept.
fn refusal_response() -> Vec<u8> {
    let body = format!(
        r#"{{"error":{{"code":"{}","message":"too many connections; retry later","details":{{}}}}}}"#,
        Code::GatewayOverloaded.as_str()
    );
    let mut r = format!(
        "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\nretry-after: 1\r\nconnection: close\r\ncontent-length: {}\r\n\r\n",
        body.len()
    )
    .into_bytes();
    r.extend_from_slice(body.as_bytes());
    r
}

#[cfg(unix)]
async fn reload_on_sighup(gw: Arc<Gateway>, shutdown: CancellationToken) {
    let Ok(mut hup) = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup()) else {
        return;
    };
    loop {
        tokio::select! {
            _ = hup.recv() => {
                crate::reconfigure::reload(&gw);
                if let Ok(crate::state::Reloaded { changed: true, .. }) = gw.reload("SIGHUP") {
                    crate::repolicy::pending(&gw).await;
                }
            }
            _ = shutdown.cancelled() => break,
        }
    }
}

#[cfg(not(unix))]
async fn reload_on_sighup(_gw: Arc<Gateway>, _shutdown: CancellationToken) {}
