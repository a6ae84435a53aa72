//! The threads that serve connections: one single-threaded tokio runtime per core, each
//! driving the connections it is handed from their first byte to their close. A request,
//! its store write, its backend exchange and its answer run on one thread: nothing hands a
//! request to another thread or wakes one, except the store's writer when calls share an
//! fsync. Measured against one multi-threaded runtime on the allow path: a lone call's
//! p50 25 µs lower, 32 connections at the same or better throughput (docs/speed.md).
//!
//! It does not accept: the accept loop (in [`crate::serve`]) hands each connection to the
//! thread with the fewest open. Background work (expiry, webhooks, MCP refresh) stays on the
//! runtime the gateway was started on. Tasks a request spawns (a claim finishing, an event
//! stream) run on its serving thread.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use tokio::runtime::Handle;
use tokio_util::sync::CancellationToken;

/// The serving threads; [`Servers::stop`] ends them.
pub(crate) struct Servers {
    threads: Vec<Server>,
    stop: CancellationToken,
}

struct Server {
    handle: Handle,
    /// Connections handed to this thread and not yet closed.
    open: Arc<AtomicUsize>,
    thread: std::thread::JoinHandle<()>,
}

/// A connection's place on a serving thread: counted open until dropped.
pub(crate) struct Seat {
    open: Arc<AtomicUsize>,
}

impl Drop for Seat {
    fn drop(&mut self) {
        self.open.fetch_sub(1, Ordering::Relaxed);
    }
}

/// How many serving threads: `AIRLOCK_SERVE_THREADS` if set to a number above zero, else
/// one per core.
pub(crate) fn thread_count() -> usize {
    std::env::var("AIRLOCK_SERVE_THREADS")
        .ok()
        .and_then(|n| n.parse::<usize>().ok())
        .filter(|n| *n > 0)
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
}

impl Servers {
    /// Starts `n` serving threads (at least one).
    pub(crate) fn start(n: usize) -> std::io::Result<Servers> {
        let stop = CancellationToken::new();
        let mut threads = Vec::new();
        for i in 0..n.max(1) {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?;
            let handle = runtime.handle().clone();
            let until = stop.clone();
            let thread = std::thread::Builder::new()
                .name(format!("airlock-serve-{i}"))
                .spawn(move || runtime.block_on(until.cancelled()))?;
            threads.push(Server {
                handle,
                open: Arc::new(AtomicUsize::new(0)),
                thread,
            });
        }
        Ok(Servers { threads, stop })
    }

    /// The thread with the fewest open connections, and a seat on it.
    pub(crate) fn pick(&self) -> (&Handle, Seat) {
        let server = self
            .threads
            .iter()
            .min_by_key(|s| s.open.load(Ordering::Relaxed))
            .unwrap_or_else(|| unreachable!("Servers::start starts at least one thread"));
        server.open.fetch_add(1, Ordering::Relaxed);
        (
            &server.handle,
            Seat {
                open: server.open.clone(),
            },
        )
    }

    /// Ends the threads; tasks still on them (streams whose clients stayed) are dropped.
    pub(crate) fn stop(self) {
        self.stop.cancel();
        for server in self.threads {
            let _ = server.thread.join();
        }
    }
}
