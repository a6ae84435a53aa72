//! Operations: the policy (shown, evaluated, reloaded, its shadow), MCP tools and their pins,
//! webhooks, and the audit log.

use std::collections::BTreeMap;

use airlock_policy::{Decision, PolicySet, ToolCall};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::{given, Args, Json, Time, ToolName};
use crate::backends::mcp::pins::Trust;
use crate::backends::mcp::{Listed, LEGACY, MODERN};
use crate::state::Gateway;

/// The policy in force, rule by rule.
#[derive(Debug, Serialize, JsonSchema)]
#[schemars(example = Policy::example())]
pub(crate) struct Policy {
    pub version: String,
    /// Each source file, with its SHA-256.
    #[schemars(with = "Vec<Json>")]
    pub sources: Value,
    pub rules: Vec<PolicyRule>,
}

/// One rule, in the order the policy evaluates them.
#[derive(Debug, Serialize, JsonSchema)]
pub(crate) struct PolicyRule {
    pub id: String,
    pub tools: Vec<String>,
    pub when: Option<String>,
    pub decision: String,
    pub message: Option<String>,
    pub classifiers: Vec<String>,
    /// `file:line:col`.
    pub location: String,
}

impl Policy {
    fn example() -> Policy {
        Policy {
            version: "sha256:0f3a…".into(),
            sources: serde_json::json!([{"path": "policy.toml", "sha256": "0f3a…"}]),
            rules: vec![PolicyRule {
                id: "writes-need-approval".into(),
                tools: vec!["db.*".into()],
                when: Some("!args.sql.startsWith('SELECT')".into()),
                decision: "require_approval".into(),
                message: Some("a write to the database".into()),
                classifiers: vec![],
                location: "policy.toml:12:1".into(),
            }],
        }
    }

    pub(crate) fn of(p: &PolicySet) -> Policy {
        let rules = p
            .rules()
            .iter()
            .map(|r| PolicyRule {
                id: r.id.clone(),
                tools: r.tools.iter().map(|g| g.as_str().to_owned()).collect(),
                when: Some(r.when.clone()),
                decision: r.decision.as_str().to_owned(),
                message: r.message.clone(),
                classifiers: r.classifiers.clone(),
                location: format!(
                    "{}:{}:{}",
                    r.location.file.display(),
                    r.location.line,
                    r.location.col
                ),
            })
            .collect();
        Policy {
            version: p.version().to_owned(),
            sources: serde_json::to_value(p.sources()).unwrap_or_default(),
            rules,
        }
    }
}

/// A call to evaluate, with no call made: the principal, classifier results, resume data and
/// tool definition policy would see.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(transform = |s: &mut schemars::Schema| super::required(s, &["tool", "args"]))]
pub(crate) struct EvaluateRequest {
    /// A tool's name; anything else is refused as `request.invalid_tool`.
    #[serde(default, deserialize_with = "given")]
    #[schemars(with = "ToolName")]
    pub tool: Option<Value>,
    #[serde(default, deserialize_with = "given")]
    #[schemars(with = "Args")]
    pub args: Option<Value>,
    #[serde(default, deserialize_with = "given")]
    #[schemars(with = "super::Context")]
    pub context: Option<Value>,
    /// The principal policy sees (`id`, `role`, `groups`, …); a default agent when left out.
    #[serde(default, deserialize_with = "given")]
    #[schemars(with = "BTreeMap<String, Json>")]
    pub principal: Option<Value>,
    /// Fixed classifier results by name, instead of running them.
    #[serde(default, deserialize_with = "given")]
    #[schemars(with = "BTreeMap<String, FixedClassifier>")]
    pub classifier: Option<Value>,
    /// Evaluate a resume with this resume data.
    #[serde(default, deserialize_with = "given")]
    #[schemars(with = "Json")]
    pub resume: Option<Value>,
    /// The MCP tool definition policy reads as `definition`; the tool's pinned one when left
    /// out (null for an HTTP tool).
    #[serde(default, deserialize_with = "given")]
    #[schemars(with = "Json")]
    pub definition: Option<Value>,
}

/// A classifier's result, or its failure.
#[derive(JsonSchema)]
#[schemars(untagged, deny_unknown_fields)]
#[allow(
    dead_code,
    reason = "a schema: the policy crate reads fixed classifier results"
)]
pub(crate) enum FixedClassifier {
    Result {
        #[schemars(range(min = 0.0, max = 1.0))]
        score: f64,
        #[serde(default)]
        labels: Vec<String>,
        #[serde(default)]
        detail: Json,
    },
    Failed {
        error: String,
        on_error: Option<OnError>,
    },
}

#[derive(JsonSchema)]
#[schemars(inline, rename_all = "snake_case")]
#[allow(dead_code, reason = "a schema of a failed classifier's `on_error`")]
pub(crate) enum OnError {
    Deny,
    RequireApproval,
}

/// What the policy would decide, and why: the policy's own decision as it serialises (its
/// explanation, and with `require_approval` the approval's settings), with the call's
/// fingerprint and tool.
#[derive(Debug, Serialize, JsonSchema)]
#[schemars(example = PolicyDecision::example())]
pub(crate) struct PolicyDecision {
    #[serde(flatten)]
    #[schemars(with = "DecisionFields")]
    pub decision: Decision,
    pub fingerprint: String,
    pub tool: String,
}

/// The fields of `airlock_policy::Decision` as it serialises.
#[derive(JsonSchema)]
#[allow(dead_code, reason = "a schema of the policy crate's decision")]
struct DecisionFields {
    decision: DecisionName,
    rules: Vec<String>,
    errors: Vec<Map<String, Value>>,
    messages: Vec<Map<String, Value>>,
    policy_version: String,
    /// With `require_approval`: the approval's settings (approvers, quorum, timeout, …).
    #[serde(flatten)]
    approval: Map<String, Value>,
}

#[derive(JsonSchema)]
#[schemars(inline, rename_all = "snake_case")]
#[allow(dead_code, reason = "a schema of a decision")]
enum DecisionName {
    Allow,
    Deny,
    RequireApproval,
}

impl PolicyDecision {
    /// None only if the example call were refused (a test would see the null).
    fn example() -> Option<PolicyDecision> {
        let call =
            ToolCall::new("db.query", serde_json::json!({"sql": "DROP TABLE t"}), None).ok()?;
        let decision = Decision {
            decision: airlock_policy::DecisionKind::Deny,
            rules: vec!["no-drops".into()],
            errors: vec![],
            messages: vec![airlock_policy::RuleMessage {
                rule: "no-drops".into(),
                message: "tables are never dropped by agents".into(),
            }],
            policy_version: "sha256:0f3a…".into(),
            approval: None,
            steps: 0,
        };
        Some(PolicyDecision::of(decision, &call))
    }

    pub(crate) fn of(decision: Decision, call: &ToolCall) -> PolicyDecision {
        PolicyDecision {
            decision,
            fingerprint: call.fingerprint.to_string(),
            tool: call.tool.clone(),
        }
    }
}

/// The version of the policy now in force, and what the reload took from the config file.
#[derive(Debug, Serialize, JsonSchema)]
#[schemars(example = PolicyVersion::example())]
pub(crate) struct PolicyVersion {
    pub version: String,
    pub config: ConfigReload,
}

/// What a reload took from the config file: the parts put in force, and those that changed
/// but need a restart (their running values stay).
#[derive(Debug, Serialize, JsonSchema)]
pub(crate) struct ConfigReload {
    /// Of `principals`, `issuers`, `webhooks`, `server.tls`: those that changed and are in
    /// force now.
    pub reloaded: Vec<String>,
    /// Config keys that changed and take effect only after a restart.
    pub restart_needed: Vec<String>,
    /// Why the config file could not be applied (nothing of it changed then).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

impl ConfigReload {
    pub(crate) fn of(r: crate::reconfigure::Reconfigured) -> ConfigReload {
        ConfigReload {
            reloaded: r.reloaded.iter().map(|s| (*s).to_owned()).collect(),
            restart_needed: r.restart_needed.iter().map(|s| (*s).to_owned()).collect(),
            error: r.error,
        }
    }
}

impl PolicyVersion {
    fn example() -> PolicyVersion {
        PolicyVersion {
            version: "sha256:0f3a…".into(),
            config: ConfigReload {
                reloaded: vec!["principals".into()],
                restart_needed: vec!["server.listen".into()],
                error: None,
            },
        }
    }
}

/// What the shadow set would have decided differently since it loaded.
#[derive(Debug, Serialize, JsonSchema)]
#[schemars(rename = "Shadow", example = ShadowSummary::example())]
pub(crate) struct ShadowSummary {
    pub configured: bool,
    pub live_version: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub shadow_version: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub since: Option<Time>,
    /// Calls the shadow set decided since it loaded.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub calls: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub transitions: Option<Vec<Transition>>,
}

impl From<&crate::shadow::Summary> for ShadowSummary {
    fn from(s: &crate::shadow::Summary) -> ShadowSummary {
        let Some(seen) = &s.seen else {
            return ShadowSummary {
                configured: false,
                live_version: s.live_version.clone(),
                shadow_version: None,
                since: None,
                calls: None,
                transitions: None,
            };
        };
        let transitions = seen.pairs.iter().map(|p| Transition {
            live: p.live.as_str(),
            shadow: p.shadow.as_str(),
            changed: p.changed,
            widening: p.widening,
            settings: p.settings,
            count: p.count,
            calls: p
                .calls
                .iter()
                .map(|c| ShadowCall {
                    call_id: c.call_id.clone(),
                    tool: c.tool.clone(),
                    principal: c.principal.clone(),
                    at: Time::of(c.at),
                    live_rules: c.live_rules.clone(),
                    shadow_rules: c.shadow_rules.clone(),
                    settings: c.settings.iter().map(|s| (*s).to_owned()).collect(),
                })
                .collect(),
        });
        ShadowSummary {
            configured: true,
            live_version: s.live_version.clone(),
            shadow_version: Some(seen.version.clone()),
            since: Some(Time::of(seen.since)),
            calls: Some(seen.calls),
            transitions: Some(transitions.collect()),
        }
    }
}

impl ShadowSummary {
    fn example() -> ShadowSummary {
        ShadowSummary {
            configured: true,
            live_version: "sha256:0f3a…".into(),
            shadow_version: Some("sha256:9b1c…".into()),
            since: Some(Time::of(1_767_225_000_000)),
            calls: Some(40),
            transitions: Some(vec![Transition {
                live: "deny",
                shadow: "allow",
                changed: true,
                widening: true,
                settings: None,
                count: 1,
                calls: vec![ShadowCall {
                    call_id: "c-1".into(),
                    tool: "db.query".into(),
                    principal: "agent1".into(),
                    at: Time::of(1_767_225_060_000),
                    live_rules: vec!["no-drops".into()],
                    shadow_rules: vec![],
                    settings: vec![],
                }],
            }]),
        }
    }
}

/// Calls by live and shadow decision.
#[derive(Debug, Serialize, JsonSchema)]
pub(crate) struct Transition {
    #[schemars(with = "DecisionName")]
    pub live: &'static str,
    #[schemars(with = "DecisionName")]
    pub shadow: &'static str,
    pub changed: bool,
    /// The shadow verdict lets the call go further: deny → allow, deny → require_approval,
    /// require_approval → allow, or an approval with looser settings.
    pub widening: bool,
    /// For calls both sets hold for approval: `looser` (other or more approver groups, a
    /// smaller quorum, a longer ttl, a larger grant or larger grant maxima) or `stricter`.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(with = "Option<String>")]
    pub settings: Option<&'static str>,
    pub count: u64,
    /// The latest calls of a pair that differs (at most 20), newest first.
    pub calls: Vec<ShadowCall>,
}

#[derive(Debug, Serialize, JsonSchema)]
pub(crate) struct ShadowCall {
    pub call_id: String,
    pub tool: String,
    pub principal: String,
    pub at: Time,
    pub live_rules: Vec<String>,
    pub shadow_rules: Vec<String>,
    /// The approval settings the shadow set changed (`approvers`, `quorum`,
    /// `approval_ttl`, `grant.uses`, …), for a call both sets hold for approval.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub settings: Vec<String>,
}

/// Every MCP upstream tool with its pin state.
#[derive(Debug, Serialize, JsonSchema)]
#[schemars(example = Tools { tools: vec![Tool::example(false)] })]
pub(crate) struct Tools {
    pub tools: Vec<Tool>,
}

/// An MCP upstream's tool as clients see it by name, with its pin.
#[derive(Debug, Serialize, JsonSchema)]
#[schemars(example = Tool::example(true))]
pub(crate) struct Tool {
    pub name: String,
    pub server: String,
    pub tool: String,
    #[schemars(with = "PinMode")]
    pub pin: &'static str,
    #[schemars(with = "PinState")]
    pub state: &'static str,
    pub fingerprint: Option<String>,
    pub pinned_fingerprint: Option<String>,
    pub pinned_by: Option<String>,
    /// The approval reviewing a changed definition, if one is open.
    pub review: Option<String>,
    /// The MCP revisions whose path serves the tool.
    #[schemars(with = "Vec<McpPath>")]
    pub paths: Vec<&'static str>,
    /// The tool object as the upstream lists it (one tool only).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(with = "Json")]
    pub definition: Option<Value>,
    /// The tool object pinned (one tool only).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(with = "Json")]
    pub pinned_definition: Option<Value>,
}

impl Tool {
    /// Every MCP upstream tool as `GET /v1/tools` and `airlock tools` show it: its names, its
    /// upstream, the paths serving it, its pin state, and the fingerprints of the definition
    /// listed and the one pinned; with `definitions`, both definitions too.
    pub(crate) fn all(gw: &Gateway, definitions: bool) -> Vec<Tool> {
        let mut out = Vec::new();
        for s in &gw.backends.mcp.servers {
            let pins = s.pins();
            let view = |name: &str, listed: Option<&Listed>| {
                let pin = pins.get(name);
                let state = match listed {
                    None => "unreached",
                    Some(l) => state_of(s.config.pin, &l.trust),
                };
                let mut paths = Vec::new();
                if let Some(l) = listed {
                    if l.paths.modern {
                        paths.push(MODERN);
                    }
                    if l.paths.legacy {
                        paths.push(LEGACY);
                    }
                }
                Tool {
                    name: format!("{}{name}", s.config.prefix),
                    server: s.config.name.clone(),
                    tool: name.to_owned(),
                    pin: s.config.pin.as_str(),
                    state,
                    fingerprint: listed.map(|l| l.fingerprint.clone()),
                    pinned_fingerprint: pin.and_then(|p| p.fingerprint.clone()),
                    pinned_by: pin.map(|p| p.pinned_by.clone()).filter(|b| !b.is_empty()),
                    review: pin
                        .and_then(|p| p.review.as_ref())
                        .map(|r| r.approval_id.clone()),
                    paths,
                    definition: definitions
                        .then(|| listed.map_or(Value::Null, |l| (*l.definition).clone())),
                    pinned_definition: definitions.then(|| {
                        pin.and_then(|p| p.definition.clone())
                            .unwrap_or(Value::Null)
                    }),
                }
            };
            match s.listed_tools() {
                Some(listed) => {
                    for l in &listed {
                        let name = l
                            .definition
                            .get("name")
                            .and_then(Value::as_str)
                            .unwrap_or("");
                        out.push(view(name, Some(l)));
                    }
                }
                None => {
                    let mut names: Vec<&String> = pins.keys().collect();
                    names.sort();
                    for name in names {
                        out.push(view(name, None));
                    }
                }
            }
        }
        out
    }
}

/// A listed tool's pin state, as the API names it.
fn state_of(mode: crate::config::PinMode, trust: &Trust) -> &'static str {
    match (mode, trust) {
        (crate::config::PinMode::Off, _) => "unpinned",
        (_, Trust::Pinned) => "pinned",
        (_, Trust::Unseen) => "unseen",
        (_, Trust::Changed { declined: true, .. }) => "declined",
        (_, Trust::Changed { pinned: None, .. }) => "unreviewed",
        (_, Trust::Changed { .. }) => "changed",
    }
}

impl Tool {
    fn example(definitions: bool) -> Tool {
        let definition = serde_json::json!({"name": "search", "inputSchema": {"type": "object"},
            "annotations": {"readOnlyHint": true}});
        Tool {
            name: "docs.search".into(),
            server: "docs".into(),
            tool: "search".into(),
            pin: "enforce",
            state: "pinned",
            fingerprint: Some(format!("sha256:{}", "1".repeat(64))),
            pinned_fingerprint: Some(format!("sha256:{}", "1".repeat(64))),
            pinned_by: Some("trust_first".into()),
            review: None,
            paths: vec!["2026-07-28", "2025-11-25"],
            definition: definitions.then(|| definition.clone()),
            pinned_definition: definitions.then_some(definition),
        }
    }
}

#[derive(JsonSchema)]
#[schemars(inline, rename_all = "snake_case")]
#[allow(dead_code, reason = "a schema of `[[mcp_servers]] pin`")]
enum PinMode {
    Enforce,
    Warn,
    Off,
}

#[derive(JsonSchema)]
#[schemars(inline, rename_all = "snake_case")]
#[allow(dead_code, reason = "a schema of a tool's pin state")]
enum PinState {
    Pinned,
    Changed,
    Declined,
    Unreviewed,
    Unseen,
    Unpinned,
    Unreached,
}

#[derive(JsonSchema)]
#[schemars(inline)]
#[allow(dead_code, reason = "a schema of an MCP path")]
enum McpPath {
    #[serde(rename = "2026-07-28")]
    Modern,
    #[serde(rename = "2025-11-25")]
    Legacy,
}

/// The configured webhooks.
#[derive(Debug, Serialize, JsonSchema)]
#[schemars(example = Webhooks::example())]
pub(crate) struct Webhooks {
    pub webhooks: Vec<Webhook>,
}

impl Webhooks {
    fn example() -> Webhooks {
        Webhooks {
            webhooks: vec![Webhook {
                id: "pager".into(),
                url: "https://hooks.example/airlock".into(),
                events: vec![airlock_storage::Kind::ApprovalRequested],
                principal: Some("pager-bot".into()),
                disabled: Some(serde_json::json!({"webhook": "pager",
                    "reason": "410 Gone", "at": 1_767_225_000_000_u64})),
            }],
        }
    }
}

/// A webhook and, when it is disabled, why.
#[derive(Debug, Serialize, JsonSchema)]
pub(crate) struct Webhook {
    pub id: String,
    pub url: String,
    #[schemars(with = "Vec<String>")]
    pub events: Vec<airlock_storage::Kind>,
    pub principal: Option<String>,
    /// Null while enabled; why and when (ms since the epoch) it was disabled.
    #[schemars(with = "Option<Disabled>")]
    pub disabled: Option<Value>,
}

#[derive(JsonSchema)]
#[allow(
    dead_code,
    reason = "a schema: the store writes why a webhook is disabled"
)]
struct Disabled {
    webhook: String,
    reason: String,
    at: u64,
}

/// A webhook enabled again, and how many parked deliveries go out again.
#[derive(Debug, Serialize, JsonSchema)]
#[schemars(example = WebhookEnabled { enabled: true, requeued: 3 })]
pub(crate) struct WebhookEnabled {
    pub enabled: bool,
    pub requeued: u64,
}

/// A test event, queued in the outbox.
#[derive(Debug, Serialize, JsonSchema)]
#[schemars(example = WebhookTestQueued { delivery_id: Some("dlv_1".into()) })]
pub(crate) struct WebhookTestQueued {
    pub delivery_id: Option<String>,
}

/// Audit records in order, and where to read on.
#[derive(Debug, Serialize, JsonSchema)]
#[schemars(example = AuditPage {
    records: vec![serde_json::json!({"seq": 7, "kind": "call.allowed", "ts": "2026-01-01T00:00:00.000Z",
        "chain": "main", "prev": "sha256:…", "hash": "sha256:…"})],
    next_after: Value::from(7),
})]
pub(crate) struct AuditPage {
    #[schemars(with = "Vec<AuditRecord>")]
    pub records: Vec<Value>,
    /// What `after` takes to read on: the last record's seq while the log has one chain, else
    /// an opaque position across chains; null for an empty page.
    #[schemars(with = "Option<AuditPosition>")]
    pub next_after: Value,
}

/// One record of the audit log (every record has these; each kind has its own fields).
#[derive(JsonSchema)]
#[allow(dead_code, reason = "a schema: the store writes audit records")]
struct AuditRecord {
    seq: u64,
    kind: String,
    hash: String,
}

#[derive(JsonSchema)]
#[schemars(untagged)]
#[allow(dead_code, reason = "a schema of `next_after`")]
enum AuditPosition {
    Seq(u64),
    Cursor(String),
}

/// Drop exported records.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct PruneRequest {
    /// Drop exported records with a smaller seq.
    #[schemars(required, range(max = 9007199254740991_u64))]
    pub before: Option<u64>,
    /// The chain to prune (a gateway's `[store] instance`): needed when the log has several.
    #[serde(default)]
    pub chain: Option<String>,
}

/// What a prune dropped, and the checkpoint that keeps the chain verifiable.
#[derive(Debug, Serialize, JsonSchema)]
#[schemars(example = Pruned { dropped: 120, checkpoint_seq: Some(121) })]
pub(crate) struct Pruned {
    pub dropped: u64,
    pub checkpoint_seq: Option<u64>,
}
