//! The gateway's background work, started once by [`Gateway::spawn_tasks`]: the expiry timer
//! (approvals, grants and suspended calls past their time, woken by the store's next deadline),
//! the witness timer (other gateways' chain heads, DESIGN §17), other gateways' audit records
//! told to this gateway's event streams, and the watch that reloads a policy (and the config
//! file's principals, issuers, webhooks and TLS files) read from disk.
//!
//! It holds nothing of its own: everything it touches is [`Gateway`]'s.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use airlock_storage::Kind;
use serde_json::Value;

use crate::clock::now_ms;
use crate::config::{PolicySource, StoreKind};
use crate::state::{Event, Gateway, Reloaded, DEADLINE_BACKSTOP};

impl Gateway {
    /// Expires approvals and grants whose time has come (their held requests wake from the
    /// store's notice of the calls it changed).
    /// Ends what is past its time (DESIGN §5, §11); false when the store refused.
    pub async fn expire(self: &Arc<Self>) -> bool {
        let now = now_ms();
        match self.store_op(move |s| s.expire_due(now)).await {
            Ok(expired) => {
                for call in expired.suspended {
                    tracing::info!(call_id = %call.call_id, "a suspended call expired");
                    self.backends.abandon(&call.call_id);
                    self.metrics.call(&call.decision, "expired");
                }
                for a in expired.approvals {
                    if a.kind == airlock_storage::ApprovalKind::ToolDefinition {
                        crate::pins::reviewed(self, &a).await;
                    } else {
                        self.approval_closed(&a.requester.id);
                        self.metrics.call("require_approval", "expired");
                    }
                    let event = self.approval_event(&a);
                    self.announce(Kind::ApprovalExpired, event).await;
                }
                true
            }
            Err(e) => {
                tracing::error!(code = e.code.as_str(), "expiry sweep failed: {}", e.message);
                false
            }
        }
    }

    /// Sends the summaries of principals' approvals held back beyond ten a minute
    /// (`crate::notices`) once their minute is over: audited `approval.summary`, and announced
    /// to the webhooks, mail and Slack channels that hear of approvals.
    async fn summaries(self: Arc<Self>) {
        let mut tick = tokio::time::interval(Duration::from_secs(1));
        loop {
            tokio::select! {
                _ = tick.tick() => {}
                _ = self.shutdown.cancelled() => break,
            }
            for s in self.notices.due(now_ms()) {
                let mut data = s.data;
                let links: Vec<Value> = data["approval_ids"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(Value::as_str)
                    .map(|id| Value::from(crate::approvals::inbox_link(&self.config, id)))
                    .collect();
                data["links"] = Value::Array(links);
                tracing::info!(
                    principal = data["principal"].as_str().unwrap_or(""),
                    count = data["count"].as_u64().unwrap_or(0),
                    groups = ?s.groups,
                    "approvals beyond ten a minute notified as one summary"
                );
                let record = crate::state::audit_fields(data.clone());
                let now = now_ms();
                if let Err(e) = self
                    .store_op(move |st| st.append_audit(Kind::ApprovalSummary, record, now))
                    .await
                {
                    tracing::error!(
                        code = e.code.as_str(),
                        "cannot audit a summary: {}",
                        e.message
                    );
                }
                self.announce(Kind::ApprovalSummary, data).await;
            }
        }
    }

    /// The expiry timer: sleeps until the store's next deadline and ends what is due then.
    /// A new deadline wakes it through [`Gateway::deadlines`]; it also looks again every
    /// [`DEADLINE_BACKSTOP`], in case a wake-up was missed or the wall clock jumped. A store
    /// that refuses is retried after a second, never in a tight loop.
    async fn expiry_timer(self: Arc<Self>) {
        loop {
            let next = self.store_op(|s| s.next_deadline()).await;
            let wait = match next {
                Ok(Some(at)) => Duration::from_millis(at.saturating_sub(now_ms())),
                Ok(None) => DEADLINE_BACKSTOP,
                Err(_) => Duration::from_secs(1),
            };
            if !wait.is_zero() {
                tokio::select! {
                    _ = tokio::time::sleep(wait.min(DEADLINE_BACKSTOP)) => {}
                    _ = self.deadlines.notified() => continue,
                    _ = self.shutdown.cancelled() => break,
                }
            }
            if !self.expire().await {
                tokio::select! {
                    _ = tokio::time::sleep(Duration::from_secs(1)) => {}
                    _ = self.shutdown.cancelled() => break,
                }
            }
        }
    }

    /// Every `interval`, a `chain.witness` record of the other gateways' chain heads, when
    /// any moved (DESIGN §17): what lets `verify` catch a chain whose tail was cut.
    async fn witness_timer(self: Arc<Self>, interval: Duration) {
        let mut tick = tokio::time::interval(interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = tick.tick() => {}
                _ = self.shutdown.cancelled() => break,
            }
            let now = now_ms();
            if let Err(e) = self.store_op(move |s| s.witness(now)).await {
                tracing::warn!(
                    code = e.code.as_str(),
                    "cannot witness the other chains: {}",
                    e.message
                );
            }
        }
    }

    /// Keeps the principals' pending counts (`max_pending`) of the whole store, not only of
    /// this gateway's own approvals: another gateway's record of a call approval opened, or
    /// closed (decided for good, expired, cancelled while pending), counts here too.
    async fn count_remote(self: &Arc<Self>, kind: Kind, r: &Value, a: &airlock_storage::Approval) {
        if a.kind == airlock_storage::ApprovalKind::ToolDefinition {
            // A review opened or decided on another gateway: this one's pin, and so its
            // lists, follow at once (not at the next list refresh).
            crate::pins::reviewed(self, a).await;
            return;
        }
        let status = r.get("status").and_then(Value::as_str);
        match kind {
            Kind::ApprovalRequested => self.approval_opened_elsewhere(&a.requester.id),
            Kind::ApprovalDecided if status != Some("pending") => {
                self.approval_closed(&a.requester.id)
            }
            Kind::ApprovalExpired => self.approval_closed(&a.requester.id),
            Kind::CallCancelled if a.status == airlock_storage::ApprovalStatus::Cancelled => {
                self.approval_closed(&a.requester.id)
            }
            _ => {}
        }
    }

    /// Tells this gateway's event streams of the approvals and calls in audit records
    /// `from..=to`, which another gateway appended: an approver's inbox on any gateway sees
    /// every approval. The pending counts and the tools' pins follow them too.
    async fn tell_remote(self: &Arc<Self>, chain: String, from: u64, to: u64) {
        let to = to.min(from.saturating_add(10_000));
        let records = match self
            .store_op(move |s| s.audit_range(&chain, from, to))
            .await
        {
            Ok(r) => r,
            Err(e) => {
                tracing::warn!(
                    code = e.code.as_str(),
                    "cannot read another gateway's records: {}",
                    e.message
                );
                return;
            }
        };
        for r in records {
            let kind = match r.get("kind").and_then(Value::as_str).and_then(Kind::parse) {
                Some(
                    k @ (Kind::ApprovalRequested
                    | Kind::ApprovalDecided
                    | Kind::ApprovalExpired
                    | Kind::CallCancelled),
                ) => k,
                Some(Kind::CallCompleted | Kind::CallFailed) => Kind::CallCompleted,
                _ => continue,
            };
            let data = if kind == Kind::CallCompleted {
                // Nobody listening: no event to build.
                if self.events.receiver_count() == 0 {
                    continue;
                }
                let Some(id) = r.get("call_id").and_then(Value::as_str).map(str::to_owned) else {
                    continue;
                };
                match self.store_op(move |s| s.call(&id)).await {
                    Ok(Some(call)) => crate::approvals::call_completed_event(&call),
                    _ => continue,
                }
            } else {
                let Some(id) = r
                    .get("approval_id")
                    .and_then(Value::as_str)
                    .map(str::to_owned)
                else {
                    continue;
                };
                match self.store_op(move |s| s.approval(&id)).await {
                    Ok(Some(a)) => {
                        self.count_remote(kind, &r, &a).await;
                        if kind == Kind::CallCancelled {
                            continue;
                        }
                        self.approval_event(&a)
                    }
                    _ => continue,
                }
            };
            let _ = self.events.send(Event { kind, data });
        }
    }

    /// Background work: the expiry timer ([`Gateway::expiry_timer`]), events from other gateways on the
    /// same database and, for a policy read from disk, a watch for changes (every second, by
    /// modification time and size).
    pub fn spawn_tasks(self: &Arc<Self>) {
        let remote = self
            .remote_audit
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        if let Some(mut remote) = remote {
            let gw = self.clone();
            tokio::spawn(async move {
                loop {
                    let (chain, from, to) = tokio::select! {
                        r = remote.recv() => match r {
                            Some(r) => r,
                            None => break,
                        },
                        _ = gw.shutdown.cancelled() => break,
                    };
                    // Read even with nobody listening: the pending counts and the tools' pins
                    // follow what other gateways did.
                    gw.tell_remote(chain, from, to).await;
                }
            });
        }
        tokio::spawn(self.clone().expiry_timer());
        tokio::spawn(self.clone().summaries());
        if let StoreKind::Postgres {
            witness_interval, ..
        } = &self.config.store
        {
            tokio::spawn(self.clone().witness_timer(*witness_interval));
        }
        let gw = self.clone();
        tokio::spawn(async move {
            // Spent single-use tokens and ended inbox sessions are dropped once a minute.
            let mut sweep = tokio::time::interval(Duration::from_secs(60));
            loop {
                tokio::select! {
                    _ = sweep.tick() => {
                        let now = now_ms();
                        if let Err(e) = gw.store_op(move |s| s.sweep_settings(now)).await {
                            tracing::error!(code = e.code.as_str(), "settings sweep failed: {}", e.message);
                        }
                    }
                    _ = gw.shutdown.cancelled() => break,
                }
            }
        });
        let mut watched: Vec<std::path::PathBuf> =
            self.config.shadow_policy.iter().cloned().collect();
        if let PolicySource::Path(path) = &self.config.policy {
            watched.push(path.clone());
        }
        // The config file too: its principals, issuers, webhooks and TLS files reload.
        watched.extend(self.config.file.iter().cloned());
        if !watched.is_empty() {
            let gw = self.clone();
            let stamp = move || watched.iter().map(|p| stamp(p)).collect::<Vec<_>>();
            tokio::spawn(async move {
                let mut last = stamp();
                let mut tick = tokio::time::interval(Duration::from_secs(1));
                loop {
                    tokio::select! {
                        _ = tick.tick() => {}
                        _ = gw.shutdown.cancelled() => break,
                    }
                    let now = stamp();
                    if now != last {
                        last = now;
                        crate::reconfigure::reload(&gw);
                        if let Ok(Reloaded { changed: true, .. }) = gw.reload("file change") {
                            crate::repolicy::pending(&gw).await;
                        }
                    }
                }
            });
        }
    }
}

/// The modification times and sizes of the policy files: what the watch compares.
fn stamp(path: &std::path::Path) -> Vec<(std::path::PathBuf, Option<SystemTime>, u64)> {
    let mut out = Vec::new();
    let entries: Vec<std::path::PathBuf> = if path.is_dir() {
        std::fs::read_dir(path)
            .map(|rd| rd.filter_map(|e| e.ok().map(|e| e.path())).collect())
            .unwrap_or_default()
    } else {
        vec![path.to_path_buf()]
    };
    for p in entries {
        if let Ok(m) = std::fs::metadata(&p) {
            out.push((p, m.modified().ok(), m.len()));
        }
    }
    out.sort();
    out
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::panic)]
    use super::*;
    use crate::config::Config;
    use crate::pipeline::{run_call, Front, Hold, Outcome};
    use airlock_policy::ToolCall;
    use airlock_storage::{ApprovalStatus, CallStatus, Principal};
    use serde_json::json;
    use tokio_util::sync::CancellationToken;

    /// The status of approval `id` as the store has it.
    async fn status(gw: &Arc<Gateway>, id: &str) -> ApprovalStatus {
        let id = id.to_owned();
        gw.store_op(move |s| s.approval(&id))
            .await
            .unwrap()
            .unwrap()
            .status
    }

    /// A gateway on the demo config in `dir`, its background tasks started, with its clock
    /// following tokio's paused time; and the demo agent.
    fn demo_on_paused_time(
        dir: &std::path::Path,
        suspend_ttl: Duration,
    ) -> (Arc<Gateway>, Principal) {
        crate::clock::follow_tokio_time();
        let mut config = Config::demo();
        config.data_dir = dir.to_path_buf();
        config.suspend_ttl = suspend_ttl;
        // These tests read the store, not events: an approval's face is its id alone.
        let gw = Gateway::open(config, CancellationToken::new(), |a| json!({"id": a.id})).unwrap();
        gw.spawn_tasks();
        let agent = Principal {
            id: "demo-agent".into(),
            role: "agent".into(),
            ..Principal::default()
        };
        (gw, agent)
    }

    /// Waits (virtual time, 5 s at most) until `done` says so.
    async fn within_5s<F, Fut>(mut done: F)
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = bool>,
    {
        let mut waited = 0;
        while !done().await {
            assert!(waited < 5_000, "not expired 5 s after its deadline");
            tokio::time::sleep(Duration::from_millis(100)).await;
            waited += 100;
        }
    }

    /// The expiry timer ends a pending approval at its deadline, not before, on paused time:
    /// 15 minutes (the demo policy's `approval_ttl`) pass in virtual time, with no sweep
    /// polling in between (the timer sleeps to the store's next deadline, or 5 s at most).
    #[tokio::test(start_paused = true)]
    async fn a_pending_approval_expires_at_its_deadline_and_not_before() {
        let dir = tempfile::tempdir().unwrap();
        let (gw, agent) = demo_on_paused_time(dir.path(), Duration::from_secs(3600));
        let call = ToolCall::new("demo.shell_preview", json!({"command": "ls"}), None).unwrap();
        let opened = now_ms();
        let pending = match run_call(&gw, agent, call, Hold::Async, Front::default()).await {
            Ok(Outcome::Pending(p)) => p,
            other => panic!("expected a pending approval, got {:?}", other.err()),
        };
        assert_eq!(pending.expires_at - opened, 15 * 60 * 1000);

        // Ten seconds before its deadline it still waits.
        tokio::time::sleep(Duration::from_millis(pending.expires_at - opened - 10_000)).await;
        assert_eq!(
            status(&gw, &pending.approval_id).await,
            ApprovalStatus::Pending
        );

        // Within a few (virtual) seconds after it, it has expired.
        tokio::time::sleep(Duration::from_secs(10)).await;
        let id = pending.approval_id.clone();
        within_5s(|| async { status(&gw, &id).await != ApprovalStatus::Pending }).await;
        assert_eq!(status(&gw, &id).await, ApprovalStatus::Expired);
        assert!(now_ms() >= pending.expires_at);
        gw.shutdown.cancel();
    }

    /// A suspended call (the demo's `demo.deploy` asks which environment) expires at its
    /// `suspend_ttl`, not before, on paused time.
    #[tokio::test(start_paused = true)]
    async fn a_suspended_call_expires_at_its_deadline_and_not_before() {
        let dir = tempfile::tempdir().unwrap();
        let ttl = Duration::from_secs(600);
        let (gw, agent) = demo_on_paused_time(dir.path(), ttl);
        let call = ToolCall::new("demo.deploy", json!({"service": "api"}), None).unwrap();
        let suspended = match run_call(&gw, agent, call, Hold::Async, Front::default()).await {
            Ok(Outcome::Suspended(v)) => v,
            Ok(_) => panic!("expected a suspended call"),
            Err(e) => panic!("expected a suspended call, got {}", e.message),
        };
        let call_status = |id: String| {
            let gw = gw.clone();
            async move {
                gw.store_op(move |s| s.call(&id))
                    .await
                    .unwrap()
                    .unwrap()
                    .status
            }
        };
        let id = suspended.call_id.clone();

        tokio::time::sleep(ttl - Duration::from_secs(10)).await;
        assert_eq!(call_status(id.clone()).await, CallStatus::Suspended);

        tokio::time::sleep(Duration::from_secs(10)).await;
        within_5s(|| {
            let s = call_status(id.clone());
            async move { s.await != CallStatus::Suspended }
        })
        .await;
        assert_eq!(call_status(id).await, CallStatus::Expired);
        gw.shutdown.cancel();
    }
}
