//! The records the store keeps, as they are serialized (JSON, with a format version `v`).
//!
//! These are plain data. The rules about how they change live in [`crate::ops`]; the way they
//! are laid out on disk lives in [`crate::keys`].

use std::collections::BTreeSet;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Times are milliseconds since the Unix epoch, always passed in by the caller.
pub type Millis = u64;

/// Who asked for a call, or who decides one.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Principal {
    pub id: String,
    /// `agent`, `approver` or `admin`.
    pub role: String,
    #[serde(default)]
    pub groups: Vec<String>,
    /// The `[[issuers]]` id of a principal named by a JWT or an OIDC sign-in; none for a
    /// static token.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub issuer: Option<String>,
    /// Who acts for this principal (`<issuer>:<act.sub>` of an RFC 8693 `act` claim).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub actor: Option<String>,
    /// The token's claims that the policy may read (`[[issuers]] claims`).
    #[serde(default, skip_serializing_if = "serde_json::Map::is_empty")]
    pub claims: serde_json::Map<String, Value>,
    /// How the principal proved who it is (DESIGN §16): `{"kind":"jwt","issuer","sub",
    /// "jti","act"}` or `{"kind":"oidc","issuer","sub"}`; none is a static token. Never a
    /// token.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auth: Option<Value>,
    /// The agents this principal may name in `context.agent_id` (globs; DESIGN's
    /// identity-bound context), from its config; empty means only its own id. Config, not
    /// identity: never stored with a record.
    #[serde(skip)]
    pub agents: Vec<String>,
}

impl Principal {
    pub fn is_admin(&self) -> bool {
        self.role == "admin"
    }

    /// The `auth` member of an audit record that names this principal.
    pub fn auth_record(&self) -> Value {
        self.auth
            .clone()
            .unwrap_or_else(|| serde_json::json!({"kind": "token"}))
    }
}

/// The lifecycle of an approval. `Pending` is the only state with a way out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ApprovalStatus {
    Pending,
    Approved,
    Declined,
    Expired,
    Cancelled,
}

impl ApprovalStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            ApprovalStatus::Pending => "pending",
            ApprovalStatus::Approved => "approved",
            ApprovalStatus::Declined => "declined",
            ApprovalStatus::Expired => "expired",
            ApprovalStatus::Cancelled => "cancelled",
        }
    }

    pub fn parse(s: &str) -> Option<ApprovalStatus> {
        [
            ApprovalStatus::Pending,
            ApprovalStatus::Approved,
            ApprovalStatus::Declined,
            ApprovalStatus::Expired,
            ApprovalStatus::Cancelled,
        ]
        .into_iter()
        .find(|st| st.as_str() == s)
    }

    /// The only legal transitions: from `Pending` to any final state.
    pub fn can_become(self, next: ApprovalStatus) -> bool {
        self == ApprovalStatus::Pending && next != ApprovalStatus::Pending
    }
}

/// One approver's word on an approval.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ApprovalDecision {
    pub by: String,
    /// `approve` or `decline`.
    pub decision: String,
    pub reason: Option<String>,
    pub at: Millis,
    /// What was approved: an approval counts only toward the fingerprint it was given for.
    pub fingerprint: String,
    /// How the decider proved who it is (DESIGN §16); none in records written before it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auth: Option<Value>,
    /// The grant this approver chose, within the rule's maxima (an approve only); none: the
    /// rule's own terms.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub grant: Option<GrantChoice>,
    /// The decider's groups when it decided; none in records written before they were kept.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub groups: Option<Vec<String>>,
    /// Why an approve no longer counts toward the quorum (a reload narrowed the approver
    /// groups to ones the approver was in none of); none: it counts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub voided: Option<String>,
}

impl ApprovalDecision {
    /// An approve, not voided, given for `fingerprint`: what the quorum counts.
    pub fn counts_for(&self, fingerprint: &str) -> bool {
        self.decision == "approve" && self.voided.is_none() && self.fingerprint == fingerprint
    }
}

/// What an approval grants once approved (mirrors the policy's grant settings).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GrantTerms {
    pub uses: u32,
    pub ttl_ms: u64,
    /// `call`, `run` or `principal`.
    pub scope: String,
    /// The scope key the grant binds to, computed by the gateway from the scope.
    pub scope_key: String,
    /// The most an approver may give (DESIGN §22); none (and in records written before):
    /// these terms themselves.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max: Option<GrantMax>,
}

/// The most an approver may give when approving.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct GrantMax {
    pub uses: u32,
    pub ttl_ms: u64,
    pub scope: GrantScopeName,
}

/// A grant scope as the store writes it, narrowest first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum GrantScopeName {
    Call,
    Run,
    Principal,
}

impl GrantScopeName {
    pub fn as_str(self) -> &'static str {
        match self {
            GrantScopeName::Call => "call",
            GrantScopeName::Run => "run",
            GrantScopeName::Principal => "principal",
        }
    }

    /// `call`, `run` or `principal`; anything else is `None`.
    pub fn parse(s: &str) -> Option<GrantScopeName> {
        match s {
            "call" => Some(GrantScopeName::Call),
            "run" => Some(GrantScopeName::Run),
            "principal" => Some(GrantScopeName::Principal),
            _ => None,
        }
    }
}

/// What one approver chose to grant; each part left out is the rule's own.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct GrantChoice {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uses: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttl_ms: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scope: Option<GrantScopeName>,
}

/// The key a grant binds to (DESIGN §5): a run-scoped grant is also bound to the requesting
/// principal, so another principal reusing a run id gets nothing; `run` without a run id is
/// the call alone.
pub fn scope_key(
    scope: GrantScopeName,
    call_id: &str,
    run_id: Option<&str>,
    principal: &str,
) -> String {
    match (scope, run_id) {
        (GrantScopeName::Run, Some(run)) => format!("run:{principal}:{run}"),
        (GrantScopeName::Principal, _) => format!("principal:{principal}"),
        _ => format!("call:{call_id}"),
    }
}

impl GrantTerms {
    /// The most an approver may give: [`GrantTerms::max`], or these terms.
    pub fn maxima(&self) -> GrantMax {
        self.max.unwrap_or(GrantMax {
            uses: self.uses,
            ttl_ms: self.ttl_ms,
            scope: GrantScopeName::parse(&self.scope).unwrap_or(GrantScopeName::Call),
        })
    }

    /// Why `choice` goes beyond the maxima, if it does (`uses` and `ttl` must also be above
    /// zero).
    pub fn too_wide(&self, choice: &GrantChoice) -> Option<String> {
        let max = self.maxima();
        if choice.uses == Some(0) || choice.ttl_ms == Some(0) {
            return Some("a grant's `uses` and `ttl` must be above zero".into());
        }
        let mut over = Vec::new();
        if let Some(u) = choice.uses.filter(|u| *u > max.uses) {
            over.push(format!("uses {u} (at most {})", max.uses));
        }
        if let Some(t) = choice.ttl_ms.filter(|t| *t > max.ttl_ms) {
            let words = |ms: u64| airlock_policy::format_duration(Duration::from_millis(ms));
            over.push(format!("ttl {} (at most {})", words(t), words(max.ttl_ms)));
        }
        if let Some(s) = choice.scope.filter(|s| *s > max.scope) {
            over.push(format!(
                "scope `{}` (at most `{}`)",
                s.as_str(),
                max.scope.as_str()
            ));
        }
        (!over.is_empty()).then(|| {
            format!(
                "beyond what the policy lets an approver give: {}",
                over.join(", ")
            )
        })
    }

    /// The terms a set of approvers' choices give: for each part, the narrowest any of them
    /// chose, where an approver who chose nothing chose the rule's own. `scope_key` makes the
    /// key of a scope.
    pub fn chosen<'a>(
        &self,
        choices: impl IntoIterator<Item = Option<&'a GrantChoice>>,
        scope_key: impl Fn(GrantScopeName) -> String,
    ) -> GrantTerms {
        let own = GrantScopeName::parse(&self.scope).unwrap_or(GrantScopeName::Call);
        let (mut uses, mut ttl_ms, mut scope) = (None::<u32>, None::<u64>, None::<GrantScopeName>);
        for c in choices {
            let c = c.copied().unwrap_or_default();
            let (u, t, s) = (
                c.uses.unwrap_or(self.uses),
                c.ttl_ms.unwrap_or(self.ttl_ms),
                c.scope.unwrap_or(own),
            );
            uses = Some(uses.map_or(u, |x| x.min(u)));
            ttl_ms = Some(ttl_ms.map_or(t, |x| x.min(t)));
            scope = Some(scope.map_or(s, |x| x.min(s)));
        }
        let scope = scope.unwrap_or(own);
        GrantTerms {
            uses: uses.unwrap_or(self.uses),
            ttl_ms: ttl_ms.unwrap_or(self.ttl_ms),
            scope: scope.as_str().to_owned(),
            scope_key: if scope == own {
                self.scope_key.clone()
            } else {
                scope_key(scope)
            },
            max: self.max,
        }
    }
}

/// What an approval is for.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ApprovalKind {
    /// A call held for a person (DESIGN §5).
    #[default]
    Call,
    /// An MCP upstream's changed tool definition held for review (DESIGN §20): it names no
    /// call; approving it pins the new definition ([`crate::ToolPin`]).
    ToolDefinition,
}

impl ApprovalKind {
    pub fn as_str(self) -> &'static str {
        match self {
            ApprovalKind::Call => "call",
            ApprovalKind::ToolDefinition => "tool_definition",
        }
    }

    fn is_call(&self) -> bool {
        *self == ApprovalKind::Call
    }
}

/// A call held for approval (DESIGN §5), or a tool definition held for review (§20).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Approval {
    pub id: String,
    /// Left out of the stored record for a call's approval (the records written before kinds).
    #[serde(default, skip_serializing_if = "ApprovalKind::is_call")]
    pub kind: ApprovalKind,
    pub call_id: String,
    pub tool: String,
    /// The call's request when it is not a tool call ([`CallRecord::request`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request: Option<Box<airlock_policy::OwnedRequest>>,
    /// The canonical args as requested.
    pub args: Value,
    pub fingerprint: String,
    pub requester: Principal,
    pub context: Value,
    pub policy_version: String,
    /// The policy decision's explanation (`rules`, `messages`, `errors`, classifier results).
    pub explanation: Value,
    pub rules: Vec<String>,
    /// Approver groups allowed to decide; empty means any approver.
    pub approvers: BTreeSet<String>,
    pub quorum: u32,
    pub status: ApprovalStatus,
    pub decisions: Vec<ApprovalDecision>,
    pub created_at: Millis,
    pub expires_at: Millis,
    pub grant: GrantTerms,
    /// Args an approver edited, with their fingerprint; what runs when set.
    pub edited_args: Option<Value>,
    pub edited_fingerprint: Option<String>,
    /// When the status left `pending`.
    pub decided_at: Option<Millis>,
}

impl Approval {
    /// What it holds, in words: the tool's name, or what its request asks.
    pub fn subject(&self) -> String {
        airlock_policy::subject(&self.tool, self.request.as_deref())
    }

    /// The fingerprint that approvals count toward and the grant binds: the edited one if any.
    pub fn effective_fingerprint(&self) -> &str {
        self.edited_fingerprint
            .as_deref()
            .unwrap_or(&self.fingerprint)
    }

    pub fn effective_args(&self) -> &Value {
        self.edited_args.as_ref().unwrap_or(&self.args)
    }

    /// Distinct approvers whose approval was given for the effective fingerprint and still
    /// counts ([`ApprovalDecision::counts_for`]).
    pub fn approvals_counted(&self) -> usize {
        let fp = self.effective_fingerprint();
        self.decisions
            .iter()
            .filter(|d| d.counts_for(fp))
            .map(|d| d.by.as_str())
            .collect::<BTreeSet<_>>()
            .len()
    }
}

/// What airlock trusts of one MCP upstream tool (DESIGN §20): the definition pinned (first
/// seen, or approved by a reviewer), and the change waiting for review.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolPin {
    /// The `[[mcp_servers]]` name, and the tool's name there (unprefixed).
    pub server: String,
    pub tool: String,
    /// The definition fingerprint pinned (`sha256:` + hex); `None` while a tool never trusted
    /// (`trust_first = false`) waits for its first review.
    pub fingerprint: Option<String>,
    /// The tool object pinned, `_meta` left out.
    pub definition: Option<Value>,
    pub pinned_at: Millis,
    /// `first_seen`, or the reviewer whose approval pinned it.
    pub pinned_by: String,
    /// The review open for a definition not pinned: its approval id and fingerprint.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub review: Option<PinReview>,
    /// Fingerprints reviewers declined (the latest [`MAX_DECLINED`]): seen again, the tool
    /// stays refused and no review opens.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub declined: Vec<String>,
}

/// How many declined fingerprints a pin remembers.
pub const MAX_DECLINED: usize = 16;

/// A review open on a tool's changed definition.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PinReview {
    pub approval_id: String,
    pub fingerprint: String,
}

/// A grant: `uses_left` more calls with `fingerprint` under `scope_key` until `expires_at`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Grant {
    pub fingerprint: String,
    pub scope_key: String,
    pub approval_id: String,
    pub uses_left: u32,
    pub expires_at: Millis,
}

/// Where a call is in its life. Terminal: `denied`, `declined`, `expired`, `cancelled`,
/// `completed`, `failed`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CallStatus {
    /// Allowed by policy, or by a grant use: may execute once.
    Allowed,
    PendingApproval,
    /// Approved: executes once when its requester asks.
    Approved,
    Executing,
    /// Its upstream suspended it mid-call (DESIGN §11): waits for resume data.
    Suspended,
    Completed,
    Failed,
    Denied,
    Declined,
    Expired,
    Cancelled,
}

impl CallStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            CallStatus::Allowed => "allowed",
            CallStatus::PendingApproval => "pending_approval",
            CallStatus::Approved => "approved",
            CallStatus::Executing => "executing",
            CallStatus::Suspended => "suspended",
            CallStatus::Completed => "completed",
            CallStatus::Failed => "failed",
            CallStatus::Denied => "denied",
            CallStatus::Declined => "declined",
            CallStatus::Expired => "expired",
            CallStatus::Cancelled => "cancelled",
        }
    }
}

/// What the backend answered, or why there is no answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CallOutcome {
    /// The backend's HTTP status, when it answered.
    pub upstream_status: Option<u16>,
    /// The backend's body (JSON, or a string when it was not JSON).
    pub result: Option<Value>,
    /// A stable error code when the call failed (`upstream.timeout`, ...).
    pub error: Option<String>,
    pub message: Option<String>,
}

/// A call's durable record: enough to answer a resume without running it again.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CallRecord {
    pub call_id: String,
    /// The tool's visible name; `""` for a request of another kind (`request`).
    pub tool: String,
    /// An MCP request other than a tool call (a resource read, a prompt, a completion): its
    /// kind, upstream and URI or prompt. `args` are then its params.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request: Option<Box<airlock_policy::OwnedRequest>>,
    /// The canonical args that run (edited ones after an edit).
    pub args: Value,
    pub fingerprint: String,
    pub requester: Principal,
    pub context: Value,
    /// `allow`, `deny` or `require_approval`.
    pub decision: String,
    pub status: CallStatus,
    // Fields at their default are left out of the stored record (most calls are allowed
    // ones with none of them): less to write and fsync on every call.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approval_id: Option<String>,
    /// Set when an approver's reason is part of the answer (declines).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// The stable code of what ended a cancelled call when nobody cancelled it by hand:
    /// `grant.revoked` for an approved call whose grant was revoked before it ran.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub code: Option<String>,
    /// True when an approver edited the args: `args` and `fingerprint` are the edited ones.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub edited: bool,
    /// True when the call ran on a grant that `approval_id` made (not the approved call).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub granted: bool,
    /// For an approved call: the last moment it may start (the grant's ttl after approval).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_by: Option<Millis>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub outcome: Option<CallOutcome>,
    /// The call's latest suspension (kept after it is resumed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub suspension: Option<Suspension>,
    pub created_at: Millis,
    pub updated_at: Millis,
}

/// How an executing call ended: stored apart from its record (keyspace `call_ends`), so that
/// finishing a call writes this and its audit record, not the whole record again.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct CallEnd {
    /// `completed` or `failed`.
    pub status: CallStatus,
    pub outcome: CallOutcome,
    pub updated_at: Millis,
}

impl CallRecord {
    /// What it runs, in words: the tool's name, or what its request asks.
    pub fn subject(&self) -> String {
        airlock_policy::subject(&self.tool, self.request.as_deref())
    }

    /// The record as it stands: `end` is asked for how the call ended when the stored record
    /// says it is executing (only an executing call can have an end stored apart).
    pub(crate) fn with_end<E>(
        mut self,
        end: impl FnOnce(&str) -> Result<Option<CallEnd>, E>,
    ) -> Result<CallRecord, E> {
        if self.status == CallStatus::Executing {
            if let Some(end) = end(&self.call_id)? {
                self.status = end.status;
                self.outcome = Some(end.outcome);
                self.updated_at = end.updated_at;
            }
        }
        Ok(self)
    }
}

/// Why and until when a call is suspended (DESIGN §11).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Suspension {
    /// What the upstream said when it suspended (shown to the agent and approvers).
    pub payload: Value,
    /// The JSON Schema (2020-12) resume data must satisfy.
    pub resume_schema: Value,
    pub suspended_at: Millis,
    pub expires_at: Millis,
    /// How many times the call has suspended, this one included.
    pub count: u32,
    /// What the upstream needs to continue, when it keeps no state of its own (an MCP
    /// upstream's `requestState` and input key); `None` for HTTP backends.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub upstream_state: Option<Value>,
}

/// A webhook delivery in the outbox.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Delivery {
    /// Stable across retries: it is the `webhook-id` header.
    pub id: String,
    pub webhook: String,
    pub event: String,
    /// The exact body to send.
    pub payload: String,
    /// Attempts made so far.
    pub attempts: u32,
    /// `pending`, `leased`, `delivered` or `dead`.
    pub state: String,
    /// When it is next due (pending) or when its lease runs out (leased).
    pub due_at: Millis,
    pub created_at: Millis,
    pub last_error: Option<String>,
}
