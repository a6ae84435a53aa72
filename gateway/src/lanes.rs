//! The heavy lane: where a call with a big body does its work, so that it cannot delay the
//! calls of other agents.
//!
//! A serving thread drives every connection it was handed (`crate::serve`), so a request
//! that keeps it busy for tens of milliseconds (parsing, canonicalising and fingerprinting a
//! 500 KB body, deciding it, recording it) delays every other request on that thread. A call
//! whose body is at least [`HEAVY_BYTES`] is therefore run, whole, on the heavy lane: one
//! thread of its own with a single-threaded runtime: any `/v1` request whose declared
//! `Content-Length` is that big (an approver's edit, resume data), a `POST /v1/calls` whose
//! body read that big, and an MCP message or an inbox form that big. Big calls queue there
//! behind each other and use at most that one core; the serving threads stay free for the
//! rest. The evaluation budget (`airlock_policy`) bounds what deciding one call may cost;
//! this lane bounds where that cost is paid.
//!
//! The request that hands its work over awaits it; if the client goes away, the work is
//! aborted as it would have been on the serving thread. It does not bound how many big calls
//! wait: the in-flight limit and the per-principal rate do.

use std::cell::Cell;
use std::future::Future;

use tokio::runtime::Handle;
use tokio_util::sync::CancellationToken;

use crate::error::{ApiError, Code};

/// Bodies of this many bytes or more run on the heavy lane.
pub const HEAVY_BYTES: usize = 64 * 1024;

thread_local! {
    /// Set on the lane's own thread: work handed over there runs where it is.
    static ON_LANE: Cell<bool> = const { Cell::new(false) };
}

/// The heavy lane's thread; it stops when this is dropped.
pub struct HeavyLane {
    handle: Handle,
    stop: CancellationToken,
}

impl HeavyLane {
    /// Starts the lane's thread.
    pub fn start() -> Result<HeavyLane, String> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| format!("cannot start the heavy lane: {e}"))?;
        let handle = runtime.handle().clone();
        let stop = CancellationToken::new();
        let stopped = stop.clone();
        std::thread::Builder::new()
            .name("airlock-heavy".into())
            .spawn(move || {
                ON_LANE.with(|on| on.set(true));
                runtime.block_on(stopped.cancelled())
            })
            .map_err(|e| format!("cannot start the heavy lane: {e}"))?;
        Ok(HeavyLane { handle, stop })
    }

    /// Whether a body of `size` bytes is to be worked on here: a big one, when this is not
    /// already the lane. Ask before building the work, so that the common, small request
    /// builds and awaits its future in place as it always did (a boxed or moved handler
    /// future costs thousands of instructions of copying per request).
    pub fn takes(&self, size: usize) -> bool {
        size >= HEAVY_BYTES && !ON_LANE.with(Cell::get)
    }

    /// Runs `work` on the lane's thread and waits for it.
    pub async fn run<F>(&self, work: F) -> Result<F::Output, ApiError>
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
        let task = self.handle.spawn(work);
        // Aborts the work if this request is dropped (the client went away).
        let abort = AbortOnDrop(task.abort_handle());
        let result = task.await;
        std::mem::forget(abort);
        result.map_err(|e| {
            tracing::error!("a call on the heavy lane did not finish: {e}");
            ApiError::new(Code::Internal, "the call's work did not finish")
        })
    }
}

impl Drop for HeavyLane {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

struct AbortOnDrop(tokio::task::AbortHandle);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn big_work_runs_on_the_lanes_thread_and_the_lane_takes_no_work_of_its_own() {
        let lane = std::sync::Arc::new(HeavyLane::start().unwrap_or_else(|e| unreachable!("{e}")));
        assert!(!lane.takes(HEAVY_BYTES - 1));
        assert!(lane.takes(HEAVY_BYTES));
        let name = || std::thread::current().name().map(str::to_owned);
        let inner = lane.clone();
        let (there, takes_there) = lane
            .run(async move { (name(), inner.takes(HEAVY_BYTES)) })
            .await
            .unwrap_or_default();
        assert_eq!(there.as_deref(), Some("airlock-heavy"));
        assert!(!takes_there, "work already on the lane runs where it is");
    }
}
