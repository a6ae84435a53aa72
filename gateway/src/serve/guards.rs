//! Guards on the listener, below HTTP: how many connections may be open (in all and per
//! client address), and how long a connection may dawdle: to send a request's headers
//! (`header_timeout`, from its accept or from the first byte of the next request), or while
//! idle between requests (`idle_timeout`). The TLS handshake and body timeouts live where
//! those happen ([`crate::serve`], [`crate::body::read_body`]).
//!
//! How it sees a connection: [`Watched`] wraps the socket and notes when bytes arrive;
//! [`Activity::request_started`] and the guard it returns (dropped when the response body is
//! done) tell it when a request is in flight. [`watchdog`] reads those and says when, and
//! why, to close. A connection with a request in flight (a held call, an event stream) is
//! never closed by these timers: held calls have their own limit (`max_held`).
//!
//! It does not speak HTTP and decides nothing about calls.

use std::collections::HashMap;
use std::io;
use std::net::IpAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::time::Instant;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use crate::config::ConnectionLimits;
use crate::metrics::CloseReason;

/// Counts open connections, in all and per client address.
pub struct Gate {
    max: usize,
    per_client: usize,
    open: Mutex<HashMap<IpAddr, usize>>,
    total: AtomicUsize,
}

/// One admitted connection; dropping it gives its place back.
pub struct Admitted {
    gate: Arc<Gate>,
    ip: IpAddr,
}

impl Gate {
    pub fn new(limits: &ConnectionLimits) -> Arc<Gate> {
        Arc::new(Gate {
            max: limits.max_connections,
            per_client: limits.max_connections_per_client,
            open: Mutex::new(HashMap::new()),
            total: AtomicUsize::new(0),
        })
    }

    /// Admits a connection from `ip`, or says why not. A client that already holds its share
    /// is refused before the gateway is full, so a flood from one address leaves room for
    /// everyone else.
    pub fn admit(self: &Arc<Self>, ip: IpAddr) -> Result<Admitted, CloseReason> {
        let mut open = self.open.lock().unwrap_or_else(|e| e.into_inner());
        let total = self.total.load(Ordering::Relaxed);
        let mine = open.get(&ip).copied().unwrap_or(0);
        if mine >= self.per_client {
            return Err(CloseReason::ClientLimit);
        }
        if total >= self.max {
            return Err(CloseReason::Limit);
        }
        *open.entry(ip).or_insert(0) += 1;
        self.total.store(total + 1, Ordering::Relaxed);
        Ok(Admitted {
            gate: self.clone(),
            ip,
        })
    }

    pub fn open(&self) -> usize {
        self.total.load(Ordering::Relaxed)
    }
}

impl Drop for Admitted {
    fn drop(&mut self) {
        let mut open = self.gate.open.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(n) = open.get_mut(&self.ip) {
            *n -= 1;
            if *n == 0 {
                open.remove(&self.ip);
            }
        }
        self.gate.total.fetch_sub(1, Ordering::Relaxed);
    }
}

/// No request head is being waited for.
const NONE: u64 = u64::MAX;

/// What one connection is doing, as the watchdog needs it. Times are milliseconds since the
/// connection was accepted.
pub struct Activity {
    accepted: Instant,
    /// Requests whose response is not finished.
    in_flight: AtomicUsize,
    /// When the connection last finished a response or received a byte.
    last_io: AtomicU64,
    /// Since when a request's headers are awaited (from the accept, or from the first byte
    /// after the previous response), or [`NONE`].
    awaiting_head: AtomicU64,
    /// HTTP/2 carries frames (pings, settings) between requests: after the first request
    /// only the idle timer applies to it.
    h2: AtomicBool,
}

/// A request in flight; dropped when its response body is finished (or abandoned).
pub struct InFlight(Arc<Activity>);

impl Activity {
    pub fn new() -> Arc<Activity> {
        Arc::new(Activity {
            accepted: Instant::now(),
            in_flight: AtomicUsize::new(0),
            last_io: AtomicU64::new(0),
            awaiting_head: AtomicU64::new(0),
            h2: AtomicBool::new(false),
        })
    }

    fn now(&self) -> u64 {
        self.accepted.elapsed().as_millis() as u64
    }

    /// Marks the connection as HTTP/2 (from ALPN).
    pub fn set_h2(&self) {
        self.h2.store(true, Ordering::Relaxed);
    }

    /// A request's headers have arrived: it is in flight until the guard drops.
    pub fn request_started(self: &Arc<Self>) -> InFlight {
        self.in_flight.fetch_add(1, Ordering::AcqRel);
        self.awaiting_head.store(NONE, Ordering::Release);
        InFlight(self.clone())
    }

    fn bytes_received(&self, first: &[u8]) {
        let now = self.now();
        self.last_io.store(now, Ordering::Relaxed);
        if first.starts_with(b"PRI * HTTP/2.0") {
            self.set_h2();
        }
        if self.in_flight.load(Ordering::Acquire) == 0 && !self.h2.load(Ordering::Relaxed) {
            // The first byte of the next request starts its header timer.
            let _ =
                self.awaiting_head
                    .compare_exchange(NONE, now, Ordering::AcqRel, Ordering::Relaxed);
        }
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.last_io.store(self.0.now(), Ordering::Relaxed);
        self.0.in_flight.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Resolves when the connection should be closed, with the reason. Checks at least once a
/// second, so a timer that started early is never missed by more than that.
pub async fn watchdog(activity: Arc<Activity>, limits: ConnectionLimits) -> CloseReason {
    let (header, idle) = (
        limits.header_timeout.as_millis() as u64,
        limits.idle_timeout.as_millis() as u64,
    );
    loop {
        let now = activity.now();
        let mut next = now + 1000;
        if activity.in_flight.load(Ordering::Acquire) == 0 {
            let awaiting = activity.awaiting_head.load(Ordering::Acquire);
            if awaiting != NONE {
                if now >= awaiting + header {
                    return CloseReason::HeaderTimeout;
                }
                next = next.min(awaiting + header);
            } else {
                let last = activity.last_io.load(Ordering::Relaxed);
                if now >= last + idle {
                    return CloseReason::IdleTimeout;
                }
                next = next.min(last + idle);
            }
        }
        tokio::time::sleep(Duration::from_millis(next.saturating_sub(now).max(1))).await;
    }
}

/// A socket that tells its [`Activity`] when bytes arrive.
pub struct Watched<IO> {
    inner: IO,
    activity: Arc<Activity>,
}

impl<IO> Watched<IO> {
    pub fn new(inner: IO, activity: Arc<Activity>) -> Watched<IO> {
        Watched { inner, activity }
    }
}

impl<IO: AsyncRead + Unpin> AsyncRead for Watched<IO> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let result = Pin::new(&mut self.inner).poll_read(cx, buf);
        if buf.filled().len() > before {
            self.activity.bytes_received(&buf.filled()[before..]);
        }
        result
    }
}

impl<IO: AsyncWrite + Unpin> AsyncWrite for Watched<IO> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn limits(max: usize, per_client: usize) -> ConnectionLimits {
        ConnectionLimits {
            max_connections: max,
            max_connections_per_client: per_client,
            ..ConnectionLimits::default()
        }
    }

    #[test]
    fn a_client_at_its_share_is_refused_before_the_gateway_is_full() {
        let gate = Gate::new(&limits(4, 2));
        let (a, b, c): (IpAddr, IpAddr, IpAddr) = (
            "127.0.0.2".parse().unwrap(),
            "127.0.0.3".parse().unwrap(),
            "127.0.0.4".parse().unwrap(),
        );
        let a1 = gate.admit(a).unwrap();
        let _a2 = gate.admit(a).unwrap();
        assert_eq!(gate.admit(a).err(), Some(CloseReason::ClientLimit));
        let _b1 = gate.admit(b).unwrap();
        let _b2 = gate.admit(b).unwrap();
        assert_eq!(gate.admit(c).err(), Some(CloseReason::Limit));
        assert_eq!(gate.open(), 4);
        drop(a1);
        assert_eq!(gate.open(), 3);
        let _c1 = gate.admit(c).unwrap();
    }

    #[tokio::test(start_paused = true)]
    async fn a_silent_connection_times_out_on_headers_and_an_idle_one_on_idle() {
        let l = ConnectionLimits {
            header_timeout: Duration::from_secs(2),
            idle_timeout: Duration::from_secs(5),
            ..ConnectionLimits::default()
        };
        // Nothing sent since the accept: the header timer runs.
        let a = Activity::new();
        assert_eq!(
            watchdog(a.clone(), l.clone()).await,
            CloseReason::HeaderTimeout
        );
        // A request in flight is never timed out; once it is done, the idle timer runs.
        let b = Activity::new();
        let guard = b.request_started();
        let w = tokio::spawn(watchdog(b.clone(), l.clone()));
        tokio::time::sleep(Duration::from_secs(30)).await;
        assert!(!w.is_finished());
        drop(guard);
        assert_eq!(w.await.unwrap(), CloseReason::IdleTimeout);
        // A byte of the next request starts its header timer.
        let c = Activity::new();
        drop(c.request_started());
        c.bytes_received(b"P");
        assert_eq!(watchdog(c, l).await, CloseReason::HeaderTimeout);
    }
}
