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
    /// MCP requests other than tool calls by `kind` (resource, prompt, completion) and
    /// `decision` (allow, deny).
    pub requests: IntCounterVec,
    /// Credentials asked of the vault by configured `upstream`, `kind` (client_credentials,
    /// token_exchange) and `result` (cached, fetched, failed, no_subject).
    pub credential_requests: IntCounterVec,
    pub policy_eval_seconds: Histogram,
    /// Rules that ran out of the evaluation budget (each yielded `on_error`).
    pub policy_budget_exceeded: IntCounter,
    /// Upstream latency by configured route pattern.
    pub upstream_seconds: HistogramVec,
    /// Reloads by `result` (ok, error).
    pub policy_reloads: IntCounterVec,
    /// Calls the shadow set decided, by the `live` and the `shadow` decision.
    pub shadow_decisions: IntCounterVec,
    pub store_errors: IntCounter,
    /// Classifier latency and failures by configured classifier name.
    pub classifier_seconds: HistogramVec,
    pub classifier_errors: IntCounterVec,
    /// MCP tool definitions by configured server and `event`: `changed` (a definition not
    /// the pinned one seen, a review opened), `refused` (a call refused for it), `unpinned`
    /// (a call run under `pin = "warn"` while it was not the pinned one).
    pub tool_definitions: IntCounterVec,
    pub approvals: ApprovalMetrics,
    pub delivery: DeliveryMetrics,
    pub connections: ConnectionMetrics,
}

/// Approvals, the requests held for them, and the limits on who may open them.
pub struct ApprovalMetrics {
    pub pending_approvals: IntGauge,
    pub held_requests: IntGauge,
    pub approval_wait_seconds: Histogram,
    /// Requests refused by a per-principal limit, by configured principal id and `reason`
    /// (rate_limited, too_many_pending).
    pub principal_refusals: IntCounterVec,
    /// Pending approvals of each principal that has `max_pending`.
    pub principal_pending: IntGaugeVec,
    /// Requests to `/slack/interactions` by what they were (`click`, `decline`, `refused`).
    pub slack_interactions: IntCounterVec,
}

/// The outbox: webhook deliveries.
pub struct DeliveryMetrics {
    /// Webhook deliveries by `result` (delivered, retried, dead, disabled, parked).
    pub webhook_deliveries: IntCounterVec,
    /// Attempts a delivery took, counted when it is delivered or given up.
    pub webhook_attempts: Histogram,
    pub webhook_oldest_undelivered_seconds: Gauge,
}

/// The listeners' connections.
pub struct ConnectionMetrics {
    /// Connections closed or refused by a listener guard, by `reason`.
    pub connections_closed: IntCounterVec,
    pub connections_open: IntGauge,
}

/// Makes each metric and registers it in the one step, so that none is made and left out of
/// `/metrics`.
struct Reg(Registry);

impl Reg {
    fn add<M: prometheus::core::Collector + Clone + 'static>(
        &self,
        m: M,
    ) -> Result<M, prometheus::Error> {
        self.0.register(Box::new(m.clone()))?;
        Ok(m)
    }

    fn counter(&self, name: &str, help: &str) -> Result<IntCounter, prometheus::Error> {
        self.add(IntCounter::new(name, help)?)
    }

    fn counters(
        &self,
        name: &str,
        help: &str,
        labels: &[&str],
    ) -> Result<IntCounterVec, prometheus::Error> {
        self.add(IntCounterVec::new(Opts::new(name, help), labels)?)
    }

    fn gauge(&self, name: &str, help: &str) -> Result<IntGauge, prometheus::Error> {
        self.add(IntGauge::new(name, help)?)
    }

    fn histogram(
        &self,
        name: &str,
        help: &str,
        buckets: Vec<f64>,
    ) -> Result<Histogram, prometheus::Error> {
        self.add(Histogram::with_opts(
            HistogramOpts::new(name, help).buckets(buckets),
        )?)
    }

    fn histograms(
        &self,
        name: &str,
        help: &str,
        buckets: Vec<f64>,
        labels: &[&str],
    ) -> Result<HistogramVec, prometheus::Error> {
        self.add(HistogramVec::new(
            HistogramOpts::new(name, help).buckets(buckets),
            labels,
        )?)
    }
}

/// Every metric, registered: those of calls and the policy here, the rest by what they show.
fn build() -> Result<Metrics, prometheus::Error> {
    let r = Reg(Registry::new());
    let fast = vec![
        0.000_005, 0.000_01, 0.000_025, 0.000_05, 0.000_1, 0.000_25, 0.000_5, 0.001, 0.005, 0.01,
    ];
    let classify = vec![
        0.000_01, 0.000_05, 0.000_1, 0.000_5, 0.001, 0.01, 0.05, 0.1, 0.3, 1.0,
    ];
    Ok(Metrics {
        calls: r.counters(
            "airlock_calls_total",
            "Tool calls by decision and outcome",
            &["decision", "outcome"],
        )?,
        requests: r.counters(
            "airlock_requests_total",
            "MCP requests other than tool calls, by kind and decision",
            &["kind", "decision"],
        )?,
        credential_requests: r.counters(
            "airlock_credential_requests_total",
            "Upstream credentials asked for, by upstream, kind and result",
            &["upstream", "kind", "result"],
        )?,
        policy_eval_seconds: r.histogram(
            "airlock_policy_eval_seconds",
            "Policy evaluation latency",
            fast,
        )?,
        policy_budget_exceeded: r.counter(
            "airlock_policy_budget_exceeded_total",
            "Rules that ran out of the evaluation budget and yielded on_error",
        )?,
        upstream_seconds: r.histograms(
            "airlock_upstream_seconds",
            "Upstream latency by configured route",
            prometheus::DEFAULT_BUCKETS.to_vec(),
            &["route"],
        )?,
        policy_reloads: r.counters(
            "airlock_policy_reloads_total",
            "Policy reloads by result",
            &["result"],
        )?,
        shadow_decisions: r.counters(
            "airlock_shadow_decisions_total",
            "Calls the shadow policy set decided, by the live and the shadow decision",
            &["live", "shadow"],
        )?,
        store_errors: r.counter("airlock_store_errors_total", "Store operations that failed")?,
        classifier_seconds: r.histograms(
            "airlock_classifier_seconds",
            "Classifier latency",
            classify,
            &["classifier"],
        )?,
        classifier_errors: r.counters(
            "airlock_classifier_errors_total",
            "Classifier runs that failed or timed out",
            &["classifier"],
        )?,
        tool_definitions: r.counters(
            "airlock_tool_definitions_total",
            "MCP tool definitions not the pinned one: seen, calls refused, calls run under warn",
            &["server", "event"],
        )?,
        approvals: approval_metrics(&r)?,
        delivery: delivery_metrics(&r)?,
        connections: connection_metrics(&r)?,
        registry: r.0,
    })
}

fn approval_metrics(r: &Reg) -> Result<ApprovalMetrics, prometheus::Error> {
    let waits = vec![1.0, 5.0, 15.0, 60.0, 300.0, 900.0, 3600.0, 14400.0];
    Ok(ApprovalMetrics {
        pending_approvals: r.gauge(
            "airlock_pending_approvals",
            "Approvals waiting for a decision",
        )?,
        held_requests: r.gauge(
            "airlock_held_requests",
            "Requests held open waiting for a decision",
        )?,
        approval_wait_seconds: r.histogram(
            "airlock_approval_wait_seconds",
            "Time from approval request to decision",
            waits,
        )?,
        principal_refusals: r.counters(
            "airlock_principal_refusals_total",
            "Requests refused by a per-principal limit",
            &["principal", "reason"],
        )?,
        principal_pending: r.add(IntGaugeVec::new(
            Opts::new(
                "airlock_principal_pending_approvals",
                "Pending approvals of principals that have max_pending",
            ),
            &["principal"],
        )?)?,
        slack_interactions: r.counters(
            "airlock_slack_interactions_total",
            "Requests from Slack to /slack/interactions, by kind (click, decline, refused)",
            &["kind"],
        )?,
    })
}

fn delivery_metrics(r: &Reg) -> Result<DeliveryMetrics, prometheus::Error> {
    Ok(DeliveryMetrics {
        webhook_deliveries: r.counters(
            "airlock_webhook_deliveries_total",
            "Webhook delivery attempts by result",
            &["result"],
        )?,
        webhook_attempts: r.histogram(
            "airlock_webhook_attempts",
            "Attempts a webhook delivery took",
            vec![1.0, 2.0, 3.0, 5.0, 9.0],
        )?,
        webhook_oldest_undelivered_seconds: r.add(Gauge::new(
            "airlock_webhook_oldest_undelivered_seconds",
            "Age of the oldest webhook delivery not yet delivered",
        )?)?,
    })
}

fn connection_metrics(r: &Reg) -> Result<ConnectionMetrics, prometheus::Error> {
    Ok(ConnectionMetrics {
        connections_closed: r.counters(
            "airlock_connections_closed_total",
            "Connections closed or refused by a listener limit or timeout, by reason",
            &["reason"],
        )?,
        connections_open: r.gauge("airlock_connections_open", "Open client connections")?,
    })
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
        self.connections
            .connections_closed
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
