//! The gateway's one clock: milliseconds since the epoch, and RFC 3339 for humans. Everything
//! that needs "now" asks here, so the store and policy get time as an input.
//!
//! In the gateway's own tests a thread can make this clock follow tokio's (paused) time
//! ([`follow_tokio_time`]), so expiry is tested by advancing time instead of waiting for it.
//! The binary always reads the system clock.

use std::time::{SystemTime, UNIX_EPOCH};

pub fn now_ms() -> u64 {
    #[cfg(test)]
    if let Some(ms) = moved::now_ms() {
        return ms;
    }
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

pub fn rfc3339(ms: u64) -> String {
    chrono::DateTime::<chrono::Utc>::from_timestamp_millis(ms as i64)
        .map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::Millis, true))
        .unwrap_or_default()
}

pub fn to_system_time(ms: u64) -> SystemTime {
    UNIX_EPOCH + std::time::Duration::from_millis(ms)
}

/// From now on, this thread's [`now_ms`] is the system time at this call plus the tokio time
/// that has passed since (tests only: with `start_paused`, time moves when the test says).
/// Only the calling thread's reads follow it: a current-thread runtime's tasks, not the
/// blocking pool's.
#[cfg(test)]
pub fn follow_tokio_time() {
    let base = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0);
    moved::BASE.with(|b| b.set(Some((base, tokio::time::Instant::now()))));
}

#[cfg(test)]
mod moved {
    use std::cell::Cell;

    thread_local! {
        pub(super) static BASE: Cell<Option<(u64, tokio::time::Instant)>> = const { Cell::new(None) };
    }

    pub(super) fn now_ms() -> Option<u64> {
        BASE.with(Cell::get)
            .map(|(ms, at)| ms + at.elapsed().as_millis() as u64)
    }
}
