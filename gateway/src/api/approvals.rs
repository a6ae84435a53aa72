//! Approvals (one, a page, deciding one or a run's) and the grants approvals leave.

use std::time::Duration;

use airlock_policy::format_duration;
use airlock_storage::{Approval as Stored, Grant as StoredGrant};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::{given, EditedArgs, Json, Time};

/// A held call, or an MCP tool's changed definition held for review.
#[derive(Debug, Serialize, JsonSchema)]
#[schemars(example = Approval::example())]
pub(crate) struct Approval {
    pub id: String,
    /// `call`: a held call; `tool_definition`: an MCP tool's changed definition held for
    /// review (`args` holds `server`, `tool`, `old`, `new` and their fingerprints; `call_id` is
    /// empty).
    #[schemars(with = "ApprovalKind")]
    pub kind: &'static str,
    pub call_id: String,
    /// The tool's visible name; `""` for an MCP request of another kind (`request`).
    pub tool: String,
    /// For an MCP request other than a tool call (a resource read, a prompt, a completion):
    /// what it asks of which upstream; `args` are then its params. `null` for a tool call.
    pub request: Option<McpRequest>,
    /// The canonical args as requested.
    #[schemars(with = "serde_json::Map<String, Value>")]
    pub args: Value,
    pub fingerprint: String,
    pub requester: Requester,
    pub policy_version: String,
    pub rules: Vec<String>,
    /// The policy decision's explanation (rules, messages, errors, classifier results).
    #[schemars(with = "Json")]
    pub explanation: Value,
    /// Approver groups that may decide; empty: any approver.
    pub approvers: Vec<String>,
    #[schemars(range(min = 1))]
    pub quorum: u32,
    #[schemars(with = "ApprovalStatus")]
    pub status: &'static str,
    pub decisions: Vec<ApprovalDecision>,
    pub created_at: Time,
    pub expires_at: Time,
    pub decided_at: Option<Time>,
    pub grant: GrantTerms,
    #[schemars(with = "Option<serde_json::Map<String, Value>>")]
    pub edited_args: Option<Value>,
    pub edited_fingerprint: Option<String>,
}

/// An MCP request other than a tool call, as policy judged it.
#[derive(Debug, Serialize, JsonSchema)]
pub(crate) struct McpRequest {
    #[schemars(with = "RequestKind")]
    pub kind: &'static str,
    /// The upstream's name (`[[mcp_servers]] name`).
    pub server: String,
    /// The resource's URI (a resource read, or the resource a completion is for).
    pub uri: Option<String>,
    /// The prompt's visible name (a prompt, or the prompt a completion is for).
    pub prompt: Option<String>,
}

impl McpRequest {
    pub(crate) fn of(r: &airlock_policy::OwnedRequest) -> McpRequest {
        McpRequest {
            kind: r.kind.as_str(),
            server: r.server.clone(),
            uri: r.uri.clone(),
            prompt: r.prompt.clone(),
        }
    }
}

#[derive(JsonSchema)]
#[schemars(inline, rename_all = "snake_case")]
#[allow(dead_code, reason = "a schema of `McpRequest::kind`")]
enum RequestKind {
    Resource,
    Prompt,
    Completion,
}

#[derive(JsonSchema)]
#[schemars(inline, rename_all = "snake_case")]
#[allow(dead_code, reason = "a schema of `Approval::kind`")]
enum ApprovalKind {
    Call,
    ToolDefinition,
}

#[derive(JsonSchema)]
#[schemars(inline, rename_all = "snake_case")]
#[allow(dead_code, reason = "a schema of `Approval::status`")]
enum ApprovalStatus {
    Pending,
    Approved,
    Declined,
    Expired,
    Cancelled,
}

/// Who asked for the call, and the call's context.
#[derive(Debug, Serialize, JsonSchema)]
pub(crate) struct Requester {
    pub principal: String,
    /// Who acts for the principal (an RFC 8693 `act` claim), if anyone.
    pub actor: Option<String>,
    #[schemars(with = "Json")]
    pub context: Value,
}

/// One approver's decision.
#[derive(Debug, Serialize, JsonSchema)]
pub(crate) struct ApprovalDecision {
    pub by: String,
    /// `approve` or `decline`.
    pub decision: String,
    pub reason: Option<String>,
    pub at: Time,
    /// The fingerprint the decision was given for.
    pub fingerprint: Option<String>,
    /// How the decider proved who it is.
    #[schemars(with = "Json")]
    pub auth: Option<Value>,
    /// Why this approve no longer counts toward the quorum (a policy reload narrowed the
    /// approver groups to ones its approver is in none of); `null`: it counts.
    pub voided: Option<String>,
}

/// What the approval grants, and the most an approver may choose (`max_*`).
#[derive(Debug, Serialize, JsonSchema)]
pub(crate) struct GrantTerms {
    pub uses: u32,
    pub ttl: String,
    pub scope: String,
    pub max_uses: u32,
    pub max_ttl: String,
    pub max_scope: String,
}

impl GrantTerms {
    pub(crate) fn of(a: &Stored) -> GrantTerms {
        let max = a.grant.maxima();
        GrantTerms {
            uses: a.grant.uses,
            ttl: format_duration(Duration::from_millis(a.grant.ttl_ms)),
            scope: a.grant.scope.clone(),
            max_uses: max.uses,
            max_ttl: format_duration(Duration::from_millis(max.ttl_ms)),
            max_scope: max.scope.as_str().to_owned(),
        }
    }
}

impl Approval {
    /// The face of an approval in events ([`crate::events::ApprovalFace`]): this type, as
    /// JSON.
    pub(crate) fn face(a: &Stored) -> Value {
        serde_json::to_value(Approval::of(a)).unwrap_or_default()
    }

    pub(crate) fn of(a: &Stored) -> Approval {
        Approval {
            id: a.id.clone(),
            kind: a.kind.as_str(),
            call_id: a.call_id.clone(),
            tool: a.tool.clone(),
            request: a.request.as_deref().map(McpRequest::of),
            args: a.args.clone(),
            fingerprint: a.fingerprint.clone(),
            requester: Requester {
                principal: a.requester.id.clone(),
                actor: a.requester.actor.clone(),
                context: a.context.clone(),
            },
            policy_version: a.policy_version.clone(),
            rules: a.rules.clone(),
            explanation: a.explanation.clone(),
            approvers: a.approvers.iter().cloned().collect(),
            quorum: a.quorum,
            status: a.status.as_str(),
            decisions: a
                .decisions
                .iter()
                .map(|d| ApprovalDecision {
                    by: d.by.clone(),
                    decision: d.decision.clone(),
                    reason: d.reason.clone(),
                    at: Time::of(d.at),
                    fingerprint: Some(d.fingerprint.clone()),
                    auth: d.auth.clone(),
                    voided: d.voided.clone(),
                })
                .collect(),
            created_at: Time::of(a.created_at),
            expires_at: Time::of(a.expires_at),
            decided_at: a.decided_at.map(Time::of),
            grant: GrantTerms::of(a),
            edited_args: a.edited_args.clone(),
            edited_fingerprint: a.edited_fingerprint.clone(),
        }
    }

    /// A pending approval of `db.query` as the store holds it.
    fn stored_example() -> Stored {
        Stored {
            id: "apr_1".into(),
            kind: Default::default(),
            call_id: "c-1".into(),
            tool: "db.query".into(),
            request: None,
            args: serde_json::json!({"sql": "DELETE FROM users"}),
            fingerprint: format!("sha256:{}", "0".repeat(64)),
            requester: airlock_storage::Principal {
                id: "agent1".into(),
                role: "agent".into(),
                ..Default::default()
            },
            context: serde_json::json!({"run_id": "run-1"}),
            policy_version: "v1".into(),
            explanation: serde_json::json!({"rules": ["writes-need-approval"]}),
            rules: vec!["writes-need-approval".into()],
            approvers: ["dba".to_owned()].into(),
            quorum: 1,
            status: airlock_storage::ApprovalStatus::Pending,
            decisions: vec![],
            created_at: 1_767_225_000_000,
            expires_at: 1_767_225_600_000,
            grant: airlock_storage::GrantTerms {
                uses: 1,
                ttl_ms: 600_000,
                scope: "call".into(),
                scope_key: "c-1".into(),
                max: None,
            },
            edited_args: None,
            edited_fingerprint: None,
            decided_at: None,
        }
    }

    fn example() -> Approval {
        Approval::of(&Approval::stored_example())
    }
}

/// A page of approvals, newest first.
#[derive(Debug, Serialize, JsonSchema)]
#[schemars(example = ApprovalPage { approvals: vec![Approval::example()], next_cursor: None })]
pub(crate) struct ApprovalPage {
    pub approvals: Vec<Approval>,
    /// Pass as `cursor` for the next page; null on the last.
    pub next_cursor: Option<String>,
}

/// Approving: a reason, edited args where the rule allows edits, and what the approval grants.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct ApproveRequest {
    #[serde(default)]
    pub reason: Option<String>,
    #[serde(default, deserialize_with = "given")]
    #[schemars(with = "EditedArgs")]
    pub args: Option<Value>,
    #[serde(default, deserialize_with = "given")]
    #[schemars(with = "GrantChoice")]
    pub grant: Option<Value>,
}

/// What this approval grants, within the rule's maxima; each part left out is the rule's own.
#[derive(JsonSchema)]
#[schemars(inline, deny_unknown_fields)]
#[allow(
    dead_code,
    reason = "a schema: `crate::grants::choice` reads the grant"
)]
struct GrantChoice {
    #[serde(default)]
    scope: GrantScope,
    /// A duration: `30m`, `1h`.
    #[serde(default)]
    #[schemars(regex(pattern = r"^[1-9][0-9]{0,8}(ms|s|m|h|d)$"))]
    ttl: String,
    #[serde(default)]
    #[schemars(range(min = 1))]
    uses: u32,
}

#[derive(Default, JsonSchema)]
#[schemars(inline, rename_all = "snake_case")]
#[allow(dead_code, reason = "a schema of a grant's scope")]
enum GrantScope {
    #[default]
    Call,
    Run,
    Principal,
}

/// Declining: the reason is fed back to the agent.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct DeclineRequest {
    #[schemars(required, length(min = 1))]
    pub reason: Option<String>,
}

/// Approving every pending call of a run (or of one tool call in it).
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct RunApproveRequest {
    #[serde(default)]
    pub reason: Option<String>,
    #[serde(default)]
    pub tool_call_id: Option<String>,
    /// The principal whose run it is, when several principals use the run id (else `409
    /// call.ambiguous` names them).
    #[serde(default)]
    pub principal: Option<String>,
}

/// Declining every pending call of a run (or of one tool call in it).
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct RunDeclineRequest {
    #[schemars(required, length(min = 1))]
    pub reason: Option<String>,
    #[serde(default)]
    pub tool_call_id: Option<String>,
    /// The principal whose run it is, when several principals use the run id (else `409
    /// call.ambiguous` names them).
    #[serde(default)]
    pub principal: Option<String>,
}

/// Declining every pending approval of one principal at once (an admin's).
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct DeclinePrincipalRequest {
    /// The requesting principal whose pending approvals are declined.
    #[schemars(length(min = 1))]
    pub principal: String,
    /// Fed back to the agent for each call.
    #[schemars(required, length(min = 1))]
    pub reason: Option<String>,
}

/// Each pending approval of the run, decided on its own.
#[derive(Debug, Serialize, JsonSchema)]
#[schemars(example = RunDecisions::example())]
pub(crate) struct RunDecisions {
    pub results: Vec<RunDecision>,
}

/// One approval of a run: its new status, or why it was not decided.
#[derive(Debug, Serialize, JsonSchema)]
pub(crate) struct RunDecision {
    pub approval_id: String,
    pub call_id: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub status: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<RunDecisionError>,
}

#[derive(Debug, Serialize, JsonSchema)]
pub(crate) struct RunDecisionError {
    #[schemars(with = "String")]
    pub code: crate::error::Code,
    pub message: String,
}

impl RunDecisions {
    fn example() -> RunDecisions {
        RunDecisions {
            results: vec![
                RunDecision {
                    approval_id: "apr_1".into(),
                    call_id: "c-1".into(),
                    status: Some("approved".into()),
                    error: None,
                },
                RunDecision {
                    approval_id: "apr_2".into(),
                    call_id: "c-2".into(),
                    status: None,
                    error: Some(RunDecisionError {
                        code: crate::error::Code::ApprovalSelfApproval,
                        message: "an approver cannot approve its own call".into(),
                    }),
                },
            ],
        }
    }
}

/// A live grant: uses left, not expired, bound to one fingerprint and one scope key.
#[derive(Debug, Serialize, JsonSchema)]
#[schemars(example = Grant::example())]
pub(crate) struct Grant {
    pub id: String,
    pub approval_id: String,
    pub tool: Option<String>,
    /// The canonical args the grant is bound to.
    #[schemars(with = "Option<serde_json::Map<String, Value>>")]
    pub args: Option<Value>,
    pub fingerprint: String,
    pub scope: Option<String>,
    pub scope_key: String,
    pub uses_left: u32,
    pub expires_at: Time,
    pub approvers: Option<Vec<String>>,
    pub requester: Option<String>,
}

impl Grant {
    /// Grant `g` with what its approval `a` says of it (the tool, args, scope, groups).
    pub(crate) fn of(g: &StoredGrant, a: Option<&Stored>) -> Grant {
        Grant {
            id: crate::grants::grant_id(&g.approval_id),
            approval_id: g.approval_id.clone(),
            tool: a.map(|a| a.tool.clone()),
            args: a.map(|a| a.effective_args().clone()),
            fingerprint: g.fingerprint.clone(),
            scope: a.map(|a| a.grant.scope.clone()),
            scope_key: g.scope_key.clone(),
            uses_left: g.uses_left,
            expires_at: Time::of(g.expires_at),
            approvers: a.map(|a| a.approvers.iter().cloned().collect()),
            requester: a.map(|a| a.requester.id.clone()),
        }
    }

    fn example() -> Grant {
        let a = Approval::stored_example();
        let g = StoredGrant {
            fingerprint: a.fingerprint.clone(),
            scope_key: "c-1".into(),
            approval_id: a.id.clone(),
            uses_left: 1,
            expires_at: 1_767_225_600_000,
        };
        Grant::of(&g, Some(&a))
    }
}

/// The live grants.
#[derive(Debug, Serialize, JsonSchema)]
#[schemars(example = Grants { grants: vec![Grant::example()] })]
pub(crate) struct Grants {
    pub grants: Vec<Grant>,
}

/// A grant, revoked: its uses left are gone.
#[derive(Debug, Serialize, JsonSchema)]
#[schemars(example = RevokedGrant { revoked: Grant::example() })]
pub(crate) struct RevokedGrant {
    pub revoked: Grant,
}
