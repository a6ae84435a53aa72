//! Prometheus metrics with bounded labels (DESIGN §9): decisions, outcomes, routes, result
//! kinds and configured principal ids only — never args, fingerprints or anything a client
//! sends, which go to tracing and the audit log.

use prometheus::{
    Encoder, Gauge, Histogram, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge,
    IntGaugeVec, Opts, Registry, TextEncoder,
};

pub struct Metrics {
    registry: Registry,
    /// Calls by `decision` (allow, deny, require_approval, rejected) and `outcome`.
    pub calls: IntCounterVec,
    pub policy_eval_seconds: Histogram,
    /// Rules that ran out of the evaluation budget (each yielded `on_error`).
    pub policy_budget_exceeded: IntCounter,
    /// Upstream latency by configured route pattern.
    pub upstream_seconds: HistogramVec,
    pub pending_approvals: IntGauge,
    pub held_requests: IntGauge,
    pub approval_wait_seconds: Histogram,
    /// Reloads by `result` (ok, error).
    pub policy_reloads: IntCounterVec,
    /// Calls the shadow set decided, by the `live` and the `shadow` decision.
    pub shadow_decisions: IntCounterVec,
    /// Requests to `/slack/interactions` by what they were (`click`, `decline`, `refused`).
    pub slack_interactions: IntCounterVec,
    pub store_errors: IntCounter,
    /// Classifier latency and failures by configured classifier name.
    pub classifier_seconds: HistogramVec,
    pub classifier_errors: IntCounterVec,
    /// Webhook deliveries by `result` (delivered, retried, dead, disabled, parked).
    pub webhook_deliveries: IntCounterVec,
    /// Attempts a delivery took, counted when it is delivered or given up.
    pub webhook_attempts: Histogram,
    pub webhook_oldest_undelivered_seconds: Gauge,
    /// Connections closed or refused by a listener guard, by `reason`.
    pub connections_closed: IntCounterVec,
    pub connections_open: IntGauge,
    /// Requests refused by a per-principal limit, by configured principal id and `reason`
    /// (rate_limited, too_many_pending).
    pub principal_refusals: IntCounterVec,
    /// Pending approvals of each principal that has `max_pending`.
    pub principal_pending: IntGaugeVec,
    /// MCP tool definitions by configured server and `event`: `changed` (a definition not
    /// the pinned one seen, a review opened), `refused` (a call refused for it), `unpinned`
    /// (a call run under `pin = "warn"` while it was not the pinned one).
    pub tool_definitions: IntCounterVec,
}

fn build() -> Result<Metrics, prometheus::Error> {
    let registry = Registry::new();
    let fast = vec![
        0.000_005, 0.000_01, 0.000_025, 0.000_05, 0.000_1, 0.000_25, 0.000_5, 0.001, 0.005, 0.01,
    ];
    let m = Metrics {
        calls: IntCounterVec::new(
            Opts::new("airlock_calls_total", "Tool calls by decision and outcome"),
            &["decision", "outcome"],
        )?,
        policy_eval_seconds: Histogram::with_opts(
            HistogramOpts::new("airlock_policy_eval_seconds", "Policy evaluation latency")
                .buckets(fast),
        )?,
        policy_budget_exceeded: IntCounter::new(
            "airlock_policy_budget_exceeded_total",
            "Rules that ran out of the evaluation budget and yielded on_error",
        )?,
        upstream_seconds: HistogramVec::new(
            HistogramOpts::new(
                "airlock_upstream_seconds",
                "Upstream latency by configured route",
            ),
            &["route"],
        )?,
        pending_approvals: IntGauge::new(
            "airlock_pending_approvals",
            "Approvals waiting for a decision",
        )?,
        held_requests: IntGauge::new(
            "airlock_held_requests",
            "Requests held open waiting for a decision",
        )?,
        approval_wait_seconds: Histogram::with_opts(
            HistogramOpts::new(
                "airlock_approval_wait_seconds",
                "Time from approval request to decision",
            )
            .buckets(vec![1.0, 5.0, 15.0, 60.0, 300.0, 900.0, 3600.0, 14400.0]),
        )?,
        policy_reloads: IntCounterVec::new(
            Opts::new("airlock_policy_reloads_total", "Policy reloads by result"),
            &["result"],
        )?,
        slack_interactions: IntCounterVec::new(
            Opts::new(
                "airlock_slack_interactions_total",
                "Requests from Slack to /slack/interactions, by kind (click, decline, refused)",
            ),
            &["kind"],
        )?,
        shadow_decisions: IntCounterVec::new(
            Opts::new(
                "airlock_shadow_decisions_total",
                "Calls the shadow policy set decided, by the live and the shadow decision",
            ),
            &["live", "shadow"],
        )?,
        store_errors: IntCounter::new(
            "airlock_store_errors_total",
            "Store operations that failed",
        )?,
        classifier_seconds: HistogramVec::new(
            HistogramOpts::new("airlock_classifier_seconds", "Classifier latency").buckets(vec![
                0.000_01, 0.000_05, 0.000_1, 0.000_5, 0.001, 0.01, 0.05, 0.1, 0.3, 1.0,
            ]),
            &["classifier"],
        )?,
        classifier_errors: IntCounterVec::new(
            Opts::new(
                "airlock_classifier_errors_total",
                "Classifier runs that failed or timed out",
            ),
            &["classifier"],
        )?,
        webhook_deliveries: IntCounterVec::new(
            Opts::new(
                "airlock_webhook_deliveries_total",
                "Webhook delivery attempts by result",
            ),
            &["result"],
        )?,
        webhook_attempts: Histogram::with_opts(
            HistogramOpts::new(
                "airlock_webhook_attempts",
                "Attempts a webhook delivery took",
            )
            .buckets(vec![1.0, 2.0, 3.0, 5.0, 9.0]),
        )?,
        webhook_oldest_undelivered_seconds: Gauge::new(
            "airlock_webhook_oldest_undelivered_seconds",
            "Age of the oldest webhook delivery not yet delivered",
        )?,
        connections_closed: IntCounterVec::new(
            Opts::new(
                "airlock_connections_closed_total",
                "Connections closed or refused by a listener limit or timeout, by reason",
            ),
            &["reason"],
        )?,
        connections_open: IntGauge::new("airlock_connections_open", "Open client connections")?,
        principal_refusals: IntCounterVec::new(
            Opts::new(
                "airlock_principal_refusals_total",
                "Requests refused by a per-principal limit",
            ),
            &["principal", "reason"],
        )?,
        principal_pending: IntGaugeVec::new(
            Opts::new(
                "airlock_principal_pending_approvals",
                "Pending approvals of principals that have max_pending",
            ),
            &["principal"],
        )?,
        tool_definitions: IntCounterVec::new(
            Opts::new(
                "airlock_tool_definitions_total",
                "MCP tool definitions not the pinned one: seen, calls refused, calls run under warn",
            ),
            &["server", "event"],
        )?,
        registry,
    };
    m.registry.register(Box::new(m.calls.clone()))?;
    m.registry.register(Box::new(m.tool_definitions.clone()))?;
    m.registry
        .register(Box::new(m.policy_eval_seconds.clone()))?;
    m.registry
        .register(Box::new(m.policy_budget_exceeded.clone()))?;
    m.registry.register(Box::new(m.upstream_seconds.clone()))?;
    m.registry.register(Box::new(m.pending_approvals.clone()))?;
    m.registry.register(Box::new(m.held_requests.clone()))?;
    m.registry
        .register(Box::new(m.approval_wait_seconds.clone()))?;
    m.registry.register(Box::new(m.policy_reloads.clone()))?;
    m.registry.register(Box::new(m.shadow_decisions.clone()))?;
    m.registry
        .register(Box::new(m.slack_interactions.clone()))?;
    m.registry.register(Box::new(m.store_errors.clone()))?;
    m.registry
        .register(Box::new(m.classifier_seconds.clone()))?;
    m.registry.register(Box::new(m.classifier_errors.clone()))?;
    m.registry
        .register(Box::new(m.webhook_deliveries.clone()))?;
    m.registry.register(Box::new(m.webhook_attempts.clone()))?;
    m.registry
        .register(Box::new(m.webhook_oldest_undelivered_seconds.clone()))?;
    m.registry
        .register(Box::new(m.connections_closed.clone()))?;
    m.registry.register(Box::new(m.connections_open.clone()))?;
    m.registry
        .register(Box::new(m.principal_refusals.clone()))?;
    m.registry.register(Box::new(m.principal_pending.clone()))?;
    Ok(m)
}

/// Why a connection was closed or refused: the `reason` label of
/// `airlock_connections_closed_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CloseReason {
    HeaderTimeout,
    IdleTimeout,
    BodyTimeout,
    TlsHandshakeTimeout,
    /// Refused at accept: `max_connections` reached.
    Limit,
    /// Refused at accept: this client already holds `max_connections_per_client`.
    ClientLimit,
}

impl CloseReason {
    pub fn as_str(self) -> &'static str {
        match self {
            CloseReason::HeaderTimeout => "header_timeout",
            CloseReason::IdleTimeout => "idle_timeout",
            CloseReason::BodyTimeout => "body_timeout",
            CloseReason::TlsHandshakeTimeout => "tls_handshake_timeout",
            CloseReason::Limit => "max_connections",
            CloseReason::ClientLimit => "max_connections_per_client",
        }
    }
}

impl Metrics {
    pub fn new() -> Result<Metrics, String> {
        build().map_err(|e| format!("cannot set up metrics: {e}"))
    }

    pub fn call(&self, decision: &str, outcome: &str) {
        self.calls.with_label_values(&[decision, outcome]).inc();
    }

    pub fn connection_closed(&self, reason: CloseReason) {
        self.connections_closed
            .with_label_values(&[reason.as_str()])
            .inc();
    }

    /// The Prometheus text exposition.
    pub fn render(&self) -> Vec<u8> {
        let mut out = Vec::new();
        let _ = TextEncoder::new().encode(&self.registry.gather(), &mut out);
        out
    }
}
