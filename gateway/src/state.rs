//! The running gateway's shared state: the policy (swapped atomically on reload), the store,
//! the hold registry, the event stream for approvers, metrics, the upstream client. The
//! background work that keeps it current (expiry, witnesses, other gateways' events, the
//! policy watch) is [`crate::background`].
//!
//! Request handling lives in [`crate::pipeline`] and the front ends ([`crate::http`]); this module only holds
//! things and keeps them fresh.

use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use airlock_policy::{PolicyErrors, PolicySet};
use airlock_storage::{
    ApprovalFilter, ApprovalStatus, Kind, PgOptions, Store, StoreError, StoreOptions,
};
use arc_swap::ArcSwap;
use serde_json::{json, Map, Value};
use tokio::sync::{broadcast, Notify, Semaphore};
use tokio_util::sync::CancellationToken;

use crate::auth::Auth;
use crate::backends::http::Upstreams;
use crate::backends::mcp::Registry as McpRegistry;
use crate::backends::{Backends, Route};
use crate::classifiers::Classifiers;
use crate::clock::now_ms;
use crate::config::{Config, PolicySource, StoreKind};
use crate::error::{ApiError, Code};
pub use crate::events::{ApprovalFace, Event};
use crate::limits::PrincipalLimits;
use crate::metrics::Metrics;
use crate::webhooks::Webhooks;

/// Held requests, by call id: each waits on a `Notify` that fires when its call changes.
#[derive(Default)]
pub struct Holds {
    waiters: Mutex<HashMap<String, Arc<Notify>>>,
}

impl Holds {
    /// The notifier for `call_id`, created on first use.
    pub fn watch(&self, call_id: &str) -> Arc<Notify> {
        let mut w = self.waiters.lock().unwrap_or_else(|e| e.into_inner());
        w.entry(call_id.to_owned()).or_default().clone()
    }

    /// Wakes every request held on `call_id`.
    pub fn notify(&self, call_id: &str) {
        let w = self.waiters.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(n) = w.get(call_id) {
            n.notify_waiters();
        }
    }

    /// Wakes every held request: after a change nobody could say the extent of (another
    /// gateway's, while this one was not listening), each re-reads its call.
    pub fn notify_all(&self) {
        let w = self.waiters.lock().unwrap_or_else(|e| e.into_inner());
        for n in w.values() {
            n.notify_waiters();
        }
    }

    /// Drops the notifier when nobody else holds it.
    pub fn release(&self, call_id: &str, notify: Arc<Notify>) {
        let mut w = self.waiters.lock().unwrap_or_else(|e| e.into_inner());
        drop(notify);
        if w.get(call_id).is_some_and(|n| Arc::strong_count(n) == 1) {
            w.remove(call_id);
        }
    }
}

pub struct Gateway {
    pub config: Config,
    /// The current policy set; a reload swaps in a new one or changes nothing.
    pub policy: ArcSwap<PolicySet>,
    /// The shadow set (`[server] shadow_policy`) and what it has seen since it loaded.
    pub shadow: crate::shadow::Shadow,
    pub store: Store,
    pub holds: Arc<Holds>,
    /// Approval and call events, for `GET /v1/events`.
    pub events: broadcast::Sender<Event>,
    pub metrics: Metrics,
    /// Where decided calls are forwarded: HTTP backends and MCP upstreams.
    pub backends: Backends,
    pub auth: Auth,
    pub classifiers: Classifiers,
    pub webhooks: Webhooks,
    /// Cancelled at shutdown: held requests answer `503 gateway.shutting_down`.
    pub shutdown: CancellationToken,
    /// Requests in flight; beyond `max_in_flight` new ones get 503.
    pub in_flight: Semaphore,
    /// Where calls with big bodies run, away from the serving threads (DESIGN §19).
    pub heavy: crate::lanes::HeavyLane,
    /// Requests held waiting for a decision; beyond `max_held` a call that would wait gets 429.
    pub held: Semaphore,
    /// False until a policy has loaded (for `/readyz`).
    pub policy_loaded: AtomicBool,
    /// Per-principal request rates and pending-approval counts.
    pub limits: PrincipalLimits,
    /// Pending calls by [`attach_key`]: an identical call joins them.
    attached: Mutex<HashMap<String, String>>,
    /// Resume schemas, compiled once per suspension.
    pub schemas: crate::schemas::Schemas,
    /// Woken when a deadline may have come nearer (an approval, a grant or a suspension was
    /// written, here or by another gateway), so the expiry timer looks at the next one again.
    pub deadlines: Arc<Notify>,
    /// The audit records other gateways on the same database appended, by seq range: the
    /// approvals and calls in them are told on this gateway's event streams too.
    pub(crate) remote_audit: Mutex<Option<RemoteAudit>>,
    /// How many of each principal's approvals were notified this minute, and those held back
    /// for the minute's summary.
    pub notices: crate::notices::Notices,
    /// How an approval reads in events ([`ApprovalFace`]).
    pub approval_face: ApprovalFace,
    /// What each principal is shown in lists ([`crate::visible`]).
    pub visible: crate::visible::Visible,
    /// `[server] tls`: the certificate served, read again on reload.
    pub tls: Option<Arc<crate::tls::Certs>>,
    /// The config as last applied (at start, then by each reload that read the file): what a
    /// reload compares the file with to name what changed (`crate::reconfigure`).
    pub applied: Mutex<Config>,
}

/// How long the expiry timer sleeps at most before it looks at the next deadline again.
pub const DEADLINE_BACKSTOP: Duration = Duration::from_secs(5);

/// The hold-registry key a run's stream waits on.
pub fn run_key(run_id: &str) -> String {
    format!("run:{run_id}")
}

/// What makes two calls identical for attaching (DESIGN §10): principal, fingerprint and run
/// id (both absent counts as the same).
pub fn attach_key(principal: &str, fingerprint: &str, run_id: Option<&str>) -> String {
    format!("{principal}\0{fingerprint}\0{}", run_id.unwrap_or(""))
}

/// Loads the policy set from its source, refusing one that names an unconfigured classifier.
fn load_policy(
    source: &PolicySource,
    classifiers: &BTreeSet<String>,
    budget: u64,
) -> Result<PolicySet, PolicyErrors> {
    let set = match source {
        PolicySource::Path(p) => PolicySet::load(p),
        PolicySource::Embedded(sources) => PolicySet::from_sources(sources.clone()),
    }?;
    set.check_classifiers(classifiers)?;
    for w in set.warnings() {
        tracing::warn!(code = w.code, "{}", w.located());
    }
    Ok(set.with_budget(budget))
}

/// A reload that loaded: the live set's version, and whether it differs from the one before.
pub struct Reloaded {
    pub version: String,
    pub changed: bool,
}

/// A reload that did not load, and which of the two sets refused.
pub struct ReloadRefused {
    /// `"live"` or `"shadow"`.
    pub set: &'static str,
    pub errors: PolicyErrors,
}

/// Loads the live set and, when `[server] shadow_policy` names one, the shadow set: both or
/// neither.
fn load_sets(
    config: &Config,
    classifiers: &BTreeSet<String>,
) -> Result<(PolicySet, Option<PolicySet>), ReloadRefused> {
    let live =
        load_policy(&config.policy, classifiers, config.policy_budget).map_err(|errors| {
            ReloadRefused {
                set: "live",
                errors,
            }
        })?;
    let shadow = match &config.shadow_policy {
        None => None,
        Some(path) => Some(
            load_policy(
                &PolicySource::Path(path.clone()),
                classifiers,
                config.policy_budget,
            )
            .map_err(|errors| ReloadRefused {
                set: "shadow",
                errors,
            })?,
        ),
    };
    Ok((live, shadow))
}

impl Gateway {
    /// Opens the store and loads the policy; a bad policy at start-up is fatal. Approvals are
    /// announced with `approval_face` (the JSON API's view of one).
    pub fn open(
        config: Config,
        shutdown: CancellationToken,
        approval_face: ApprovalFace,
    ) -> Result<Arc<Gateway>, String> {
        let tls = match &config.tls {
            Some((cert, key)) => Some(crate::tls::Certs::load(cert, key)?),
            None => None,
        };
        let classifiers = Classifiers::new(&config.classifiers, config.classifier_cache_ttl)?;
        let (policy, shadow_set) = load_sets(&config, &classifiers.names()).map_err(|r| {
            let which = if r.set == "shadow" { "shadow " } else { "" };
            format!("the {which}policy does not load:\n{}", r.errors)
        })?;
        let store = open_store(&config)?;
        let metrics = Metrics::new()?;
        let (limits, attached) = pending_at_start(&config, &store, &metrics)?;
        // Held calls and run streams wait on the hold registry; the store tells it which calls
        // and runs each commit changed, this gateway's and (on PostgreSQL) every other's.
        let holds = Arc::new(Holds::default());
        let (deadlines, remote_rx) = listen_for_changes(&store, &holds);
        // One set of per-thread connection pools for HTTP backends and MCP upstreams alike.
        let pool = Arc::new(Upstreams::new(&config)?);
        let vault = Arc::new(crate::credentials::Vault::new(
            metrics.credential_requests.clone(),
        )?);
        let gw = Gateway {
            approval_face,
            visible: Default::default(),
            backends: Backends::new(
                pool.clone(),
                Arc::new(McpRegistry::new(&config.mcp_servers, pool, vault.clone())?),
                vault,
                &config,
            ),
            auth: Auth::new(&config)?,
            classifiers,
            webhooks: Webhooks::new(config.webhooks.clone(), config.redact.clone())?,
            policy: ArcSwap::from_pointee(policy),
            shadow: Default::default(),
            store,
            holds,
            events: broadcast::channel(1024).0,
            metrics,
            shutdown,
            in_flight: Semaphore::new(config.max_in_flight),
            heavy: crate::lanes::HeavyLane::start()?,
            held: Semaphore::new(config.max_held),
            policy_loaded: AtomicBool::new(true),
            limits,
            attached: Mutex::new(attached),
            schemas: Default::default(),
            deadlines,
            remote_audit: Mutex::new(Some(remote_rx)),
            notices: Default::default(),
            tls,
            applied: Mutex::new(config.clone()),
            config,
        };
        let version = gw.policy.load().version().to_owned();
        let mut fields = audit_fields(json!({"policy_version": version, "trigger": "start"}));
        if let Some(set) = shadow_set {
            fields.insert("shadow_version".into(), Value::from(set.version()));
            gw.shadow.install(set, now_ms());
        }
        gw.store
            .append_audit(Kind::PolicyLoaded, fields, now_ms())
            .map_err(|e| e.to_string())?;
        Ok(Arc::new(gw))
    }

    /// Where `tool`'s calls go: an MCP upstream's tool of that exact name first, else the
    /// first `[[tools]]` route that matches.
    pub fn route(&self, tool: &str) -> Option<Route<'_>> {
        self.backends.route(&self.config, tool)
    }

    /// The pending call an identical call would join.
    pub fn attached(&self, key: &str) -> Option<String> {
        let a = self.attached.lock().unwrap_or_else(|e| e.into_inner());
        a.get(key).cloned()
    }

    pub fn attach(&self, key: String, call_id: &str) {
        let mut a = self.attached.lock().unwrap_or_else(|e| e.into_inner());
        a.insert(key, call_id.to_owned());
    }

    /// Forgets a joinable call that has moved on (only if it is still the one named).
    pub fn detach(&self, key: &str, call_id: &str) {
        let mut a = self.attached.lock().unwrap_or_else(|e| e.into_inner());
        if a.get(key).is_some_and(|c| c == call_id) {
            a.remove(key);
        }
    }

    /// Reserves a pending approval for `requester` under its `max_pending`; the caller
    /// releases it through [`Gateway::approval_closed`].
    pub fn approval_opening(&self, requester: &str) -> Result<(), crate::limits::Refusal> {
        let n = self.limits.reserve_pending(requester)?;
        self.metrics.approvals.pending_approvals.inc();
        principal_pending_gauge(&self.metrics, &self.limits, requester, n);
        Ok(())
    }

    /// Another gateway opened an approval of `requester`: counted here too, past its limit or
    /// not (it is open already).
    pub fn approval_opened_elsewhere(&self, requester: &str) {
        let n = self.limits.count_pending(requester);
        self.metrics.approvals.pending_approvals.inc();
        principal_pending_gauge(&self.metrics, &self.limits, requester, n);
    }

    /// An approval of `requester` left `pending` (decided, expired, cancelled), or was never
    /// opened after [`Gateway::approval_opening`].
    pub fn approval_closed(&self, requester: &str) {
        self.metrics.approvals.pending_approvals.dec();
        let n = self.limits.release_pending(requester);
        principal_pending_gauge(&self.metrics, &self.limits, requester, n);
    }

    /// Runs a store operation off the async threads.
    pub async fn store_op<T, F>(self: &Arc<Self>, f: F) -> Result<T, ApiError>
    where
        T: Send + 'static,
        F: FnOnce(&Store) -> Result<T, StoreError> + Send + 'static,
    {
        let gw = self.clone();
        let result = tokio::task::spawn_blocking(move || f(&gw.store))
            .await
            .map_err(|e| ApiError::new(Code::Internal, format!("store task failed: {e}")))?;
        self.store_result(result)
    }

    /// Whether the request asking is the only one being served: then nobody could share its
    /// fsync, and the store may do a durable write on this thread (see
    /// [`airlock_storage::Store::record_call_async`]).
    pub fn alone(&self) -> bool {
        self.config.max_in_flight - self.in_flight.available_permits() <= 1
    }

    /// Awaits one of the store's async writes (the allow path's): the writer wakes this task
    /// itself, so no thread is handed the wait.
    pub async fn store_async<T>(
        &self,
        write: impl std::future::Future<Output = Result<T, StoreError>>,
    ) -> Result<T, ApiError> {
        let result = write.await;
        self.store_result(result)
    }

    fn store_result<T>(&self, result: Result<T, StoreError>) -> Result<T, ApiError> {
        if let Err(e) = &result {
            if e.code() == Code::StoreUnavailable.as_str() {
                self.metrics.store_errors.inc();
            }
        }
        result.map_err(ApiError::from)
    }

    /// What an event puts in the outbox: a delivery to every webhook subscribed to `kind`, the
    /// approval mail (`[email]`), and the approval's Slack messages (`[slack]`).
    pub fn outbound(&self, kind: Kind, data: &Value) -> Vec<airlock_storage::NewDelivery> {
        crate::outbox::deliveries(&self.config, &self.webhooks, kind, data)
    }

    /// Tells approvers: the SSE stream, and the outbox of every webhook subscribed to `kind`
    /// and of the approval mail (durable before this returns).
    pub async fn announce(self: &Arc<Self>, kind: Kind, data: Value) {
        let deliveries = self.outbound(kind, &data);
        let _ = self.events.send(Event { kind, data });
        if deliveries.is_empty() {
            return;
        }
        let now = now_ms();
        match self
            .store_op(move |s| s.enqueue_deliveries(deliveries, now))
            .await
        {
            Ok(_) => self.webhooks.wake.notify_one(),
            Err(e) => tracing::error!(
                code = e.code.as_str(),
                "cannot queue webhook deliveries for {kind}: {}",
                e.message
            ),
        }
    }

    /// An approval as events carry it: the record plus links to decide it.
    pub fn approval_event(&self, a: &airlock_storage::Approval) -> Value {
        crate::approvals::approval_event(&self.config, &a.id, (self.approval_face)(a))
    }

    /// Reloads the policy, and the shadow set with it: a reload where either does not load
    /// leaves both as they were. The caller takes a changed live set to the pending approvals
    /// ([`crate::repolicy::pending`]).
    pub fn reload(self: &Arc<Self>, trigger: &str) -> Result<Reloaded, ReloadRefused> {
        match load_sets(&self.config, &self.classifiers.names()) {
            Ok((set, shadow)) => {
                let version = set.version().to_owned();
                let changed = version != self.policy.load().version();
                let shadow_version = shadow.as_ref().map(|s| s.version().to_owned());
                let shadow_changed =
                    shadow_version.as_deref() != self.shadow.set().as_ref().map(|s| s.version());
                self.policy.store(Arc::new(set));
                if let Some(shadow) = shadow {
                    self.shadow.install(shadow, now_ms());
                }
                self.metrics.policy_reloads.with_label_values(&["ok"]).inc();
                if changed || shadow_changed {
                    tracing::info!(policy_version = %version, shadow_version = ?shadow_version, trigger, "policy reloaded");
                    let mut fields =
                        audit_fields(json!({"policy_version": version, "trigger": trigger}));
                    if let Some(v) = shadow_version {
                        fields.insert("shadow_version".into(), Value::from(v));
                    }
                    if let Err(e) = self
                        .store
                        .append_audit(Kind::PolicyLoaded, fields, now_ms())
                    {
                        tracing::error!(error = %e, "cannot audit the policy reload");
                    }
                }
                Ok(Reloaded { version, changed })
            }
            Err(refused) => {
                self.metrics
                    .policy_reloads
                    .with_label_values(&["error"])
                    .inc();
                for e in &refused.errors.0 {
                    tracing::error!(
                        trigger,
                        set = refused.set,
                        "policy reload refused, keeping the current policies: {e}"
                    );
                }
                Err(refused)
            }
        }
    }

    pub fn is_ready(&self) -> bool {
        self.store.is_available() && self.policy_loaded.load(Ordering::Acquire)
    }
}

/// What the approvals left pending at start count for: the pending gauge, each principal's
/// `max_pending`, and the calls identical ones attach to.
fn pending_at_start(
    config: &Config,
    store: &Store,
    metrics: &Metrics,
) -> Result<(PrincipalLimits, HashMap<String, String>), String> {
    let pending = store
        .list_approvals(
            &ApprovalFilter {
                status: Some(ApprovalStatus::Pending),
                ..Default::default()
            },
            None,
            1_000_000,
        )
        .map_err(|e| e.to_string())?
        .0;
    metrics
        .approvals
        .pending_approvals
        .set(pending.len() as i64);
    let limits = PrincipalLimits::new(
        &config.principals,
        &config.issuers,
        config.max_held_per_principal,
        std::time::Instant::now(),
    );
    let mut by_principal: HashMap<String, usize> = HashMap::new();
    for a in &pending {
        *by_principal.entry(a.requester.id.clone()).or_default() += 1;
    }
    limits.set_pending(&by_principal);
    let attached = pending
        .iter()
        .filter(|a| a.kind == airlock_storage::ApprovalKind::Call)
        .map(|a| {
            let run = a.context.get("run_id").and_then(Value::as_str);
            (
                attach_key(&a.requester.id, &a.fingerprint, run),
                a.call_id.clone(),
            )
        })
        .collect();
    for p in &config.principals {
        let n = by_principal.get(&p.id).copied().unwrap_or(0);
        principal_pending_gauge(metrics, &limits, &p.id, n);
    }
    Ok((limits, attached))
}

/// The store `[store]` names: fjall in `data_dir` (made if missing), or PostgreSQL.
fn open_store(config: &Config) -> Result<Store, String> {
    let options = StoreOptions {
        redact: config.redact.clone(),
        flush_interval: config.flush_interval,
        instance: String::new(),
    };
    match &config.store {
        StoreKind::Fjall => {
            std::fs::create_dir_all(&config.data_dir)
                .map_err(|e| format!("cannot create {}: {e}", config.data_dir.display()))?;
            Store::open(&config.data_dir, options)
        }
        StoreKind::Postgres {
            url, instance, ca, ..
        } => {
            let ca_pem = match ca {
                Some(path) => Some(
                    std::fs::read(path)
                        .map_err(|e| format!("store.ca: cannot read {}: {e}", path.display()))?,
                ),
                None => None,
            };
            Store::open_postgres(
                &PgOptions {
                    url: url.clone(),
                    ca_pem,
                },
                StoreOptions {
                    instance: instance.clone(),
                    ..options
                },
            )
        }
    }
    .map_err(|e| e.to_string())
}

/// The other gateways' audit records, by chain and seq range (PostgreSQL).
type RemoteAudit = tokio::sync::mpsc::UnboundedReceiver<(String, u64, u64)>;

/// Has the store tell `holds` which calls and runs each commit changed, this gateway's and
/// (on PostgreSQL) every other's. Returns what wakes the expiry timer, and where the audit
/// ranges other gateways appended arrive.
fn listen_for_changes(store: &Store, holds: &Arc<Holds>) -> (Arc<Notify>, RemoteAudit) {
    let told = holds.clone();
    let (remote_tx, remote_rx) = tokio::sync::mpsc::unbounded_channel();
    // The expiry timer looks again for its next deadline when another gateway scheduled one
    // (or anything may have changed), not at every change another gateway makes: on a busy
    // cluster that was a database read for every other gateway's commit.
    let deadlines = Arc::new(Notify::new());
    let nearer = deadlines.clone();
    store.on_changes(Box::new(move |change| {
        if change.remote && (change.all || change.deadline.is_some()) {
            nearer.notify_one();
        }
        if let (true, Some((from, to))) = (change.remote, change.audit) {
            let _ = remote_tx.send((change.chain.clone(), from, to));
        }
        if change.all {
            told.notify_all();
            return;
        }
        for call in &change.calls {
            told.notify(call);
        }
        for run in &change.runs {
            told.notify(&run_key(run));
        }
    }));
    (deadlines, remote_rx)
}

/// `airlock_principal_pending_approvals{principal}`, for principals that have `max_pending`
/// (the label stays bounded to configured ids with a limit).
/// An issuer's principals (`<issuer>:<sub>`) are as many as its users: they get no gauge of
/// their own, so the metrics' series stay as few as the config's principals.
fn principal_pending_gauge(metrics: &Metrics, limits: &PrincipalLimits, principal: &str, n: usize) {
    if !principal.contains(':') && limits.has_pending_limit(principal) {
        metrics
            .approvals
            .principal_pending
            .with_label_values(&[principal])
            .set(n as i64);
    }
}

pub fn audit_fields(v: Value) -> Map<String, Value> {
    match v {
        Value::Object(m) => m,
        _ => Map::new(),
    }
}
