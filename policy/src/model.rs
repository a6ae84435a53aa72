//! The values policy evaluation takes and gives: [`Input`] in, [`Decision`] out.
//!
//! These are plain data with serde forms; the JSON of a [`Decision`] is what
//! `airlock policy eval` prints and `POST /v1/policy/evaluate` answers.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, SystemTime};

use serde::{Deserialize, Serialize, Serializer};
use serde_json::Value;

use crate::duration::format_duration;

/// What policy says about a call. Ordered by strictness: `Allow < RequireApproval < Deny`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DecisionKind {
    Allow,
    RequireApproval,
    Deny,
}

impl DecisionKind {
    pub fn as_str(self) -> &'static str {
        match self {
            DecisionKind::Allow => "allow",
            DecisionKind::RequireApproval => "require_approval",
            DecisionKind::Deny => "deny",
        }
    }
}

/// Whose later calls an approval's grant covers. Ordered narrowest first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum GrantScope {
    /// The approved call alone.
    Call,
    /// Calls of the same `context.run_id` (the call alone when it has none).
    Run,
    /// Calls of the same requesting principal.
    Principal,
}

/// What an approval grants: `uses` calls with the approved fingerprint within `ttl`, and the
/// most an approver may give instead when approving (`max_*`, never below the value itself:
/// left out, nothing widens).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct GrantSettings {
    pub uses: u32,
    #[serde(serialize_with = "ser_duration", deserialize_with = "de_duration")]
    pub ttl: Duration,
    pub scope: GrantScope,
    pub max_uses: u32,
    #[serde(serialize_with = "ser_duration", deserialize_with = "de_duration")]
    pub max_ttl: Duration,
    pub max_scope: GrantScope,
}

/// Who may approve, how many, and for how long, once a call needs approval.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ApprovalSettings {
    /// Approver groups allowed to decide; empty means any approver.
    pub approvers: BTreeSet<String>,
    /// Distinct approvals needed.
    pub quorum: u32,
    #[serde(serialize_with = "ser_duration", deserialize_with = "de_duration")]
    pub approval_ttl: Duration,
    pub grant: GrantSettings,
}

impl ApprovalSettings {
    /// The strictest of `self` and `other` (DESIGN §4): largest quorum, union of the groups
    /// that were named, shortest ttl, fewest grant uses, shortest grant ttl, narrowest scope,
    /// and the smallest of each grant maximum.
    ///
    /// An empty group list means "any approver" and so adds no group to the union: a rule that
    /// names groups is never widened to everyone by another rule that names none.
    pub fn strictest(&self, other: &ApprovalSettings) -> ApprovalSettings {
        ApprovalSettings {
            approvers: self.approvers.union(&other.approvers).cloned().collect(),
            quorum: self.quorum.max(other.quorum),
            approval_ttl: self.approval_ttl.min(other.approval_ttl),
            grant: GrantSettings {
                uses: self.grant.uses.min(other.grant.uses),
                ttl: self.grant.ttl.min(other.grant.ttl),
                scope: self.grant.scope.min(other.grant.scope),
                max_uses: self.grant.max_uses.min(other.grant.max_uses),
                max_ttl: self.grant.max_ttl.min(other.grant.max_ttl),
                max_scope: self.grant.max_scope.min(other.grant.max_scope),
            },
        }
    }
}

impl ApprovalSettings {
    /// The settings `other` loosens compared with `self` (DESIGN §23: a widening is a
    /// widening whatever it widens): approver groups beyond these (or any approver where
    /// these name groups), a smaller quorum, a longer approval ttl, a grant of more uses, a
    /// longer ttl or a wider scope, and larger grant maxima.
    pub fn loosened_in(&self, other: &ApprovalSettings) -> Vec<&'static str> {
        let mut out = Vec::new();
        let groups_beyond = if other.approvers.is_empty() {
            !self.approvers.is_empty()
        } else {
            !self.approvers.is_empty() && !other.approvers.is_subset(&self.approvers)
        };
        let (a, b) = (&self.grant, &other.grant);
        for (loosens, name) in [
            (groups_beyond, "approvers"),
            (other.quorum < self.quorum, "quorum"),
            (other.approval_ttl > self.approval_ttl, "approval_ttl"),
            (b.uses > a.uses, "grant.uses"),
            (b.ttl > a.ttl, "grant.ttl"),
            (b.scope > a.scope, "grant.scope"),
            (b.max_uses > a.max_uses, "grant.max_uses"),
            (b.max_ttl > a.max_ttl, "grant.max_ttl"),
            (b.max_scope > a.max_scope, "grant.max_scope"),
        ] {
            if loosens {
                out.push(name);
            }
        }
        out
    }

    /// The settings `other` tightens compared with `self`: [`ApprovalSettings::loosened_in`]
    /// the other way round.
    pub fn tightened_in(&self, other: &ApprovalSettings) -> Vec<&'static str> {
        other.loosened_in(self)
    }
}

/// How a verdict changed between two decisions of the same call (a live set and a shadow
/// set, or a recorded decision and its replay).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Change {
    /// The same decision, and the same approval settings.
    Same,
    /// Another decision.
    Decision,
    /// Both require approval, and the other's settings are looser (a widening).
    Looser,
    /// Both require approval, and the other's settings are only stricter.
    Stricter,
}

impl Change {
    /// How `other` changes `this`: `(decision, approval settings)` of each.
    pub fn of(
        this: (DecisionKind, Option<&ApprovalSettings>),
        other: (DecisionKind, Option<&ApprovalSettings>),
    ) -> (Change, Vec<&'static str>) {
        if this.0 != other.0 {
            return (Change::Decision, Vec::new());
        }
        let (Some(a), Some(b)) = (this.1, other.1) else {
            return (Change::Same, Vec::new());
        };
        let looser = a.loosened_in(b);
        if !looser.is_empty() {
            return (Change::Looser, looser);
        }
        let stricter = a.tightened_in(b);
        if !stricter.is_empty() {
            return (Change::Stricter, stricter);
        }
        (Change::Same, Vec::new())
    }
}

fn de_duration<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
    let text = String::deserialize(d)?;
    crate::duration::parse_duration(&text).map_err(serde::de::Error::custom)
}

fn ser_duration<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&format_duration(*d))
}

/// A classifier's verdict on one call, as the gateway hands it to evaluation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClassifierResult {
    /// 0..1.
    pub score: f64,
    #[serde(default)]
    pub labels: Vec<String>,
    /// What matched and where; free-form.
    #[serde(default)]
    pub detail: Value,
}

/// The result of running a classifier, or why there is none.
#[derive(Debug, Clone, PartialEq)]
pub enum ClassifierOutcome {
    Ok(ClassifierResult),
    /// The classifier failed or timed out: each rule that names it yields `on_error`.
    Failed {
        reason: String,
        on_error: DecisionKind,
    },
}

/// What a request is: a tool call, or an MCP request of another kind that reaches an upstream
/// (a resource read or subscription, a prompt, a completion). CEL reads it as `kind`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RequestKind {
    Tool,
    Resource,
    Prompt,
    Completion,
}

impl RequestKind {
    pub fn as_str(self) -> &'static str {
        match self {
            RequestKind::Tool => "tool",
            RequestKind::Resource => "resource",
            RequestKind::Prompt => "prompt",
            RequestKind::Completion => "completion",
        }
    }

    /// A field's label for this kind where a tool call says `Tool`: `Resource`, `Prompt`,
    /// `Completion`.
    pub fn label(self) -> &'static str {
        match self {
            RequestKind::Tool => "Tool",
            RequestKind::Resource => "Resource",
            RequestKind::Prompt => "Prompt",
            RequestKind::Completion => "Completion",
        }
    }

    /// What a held request of this kind is called in a sentence: `tool call`, `resource read`,
    /// `prompt`, `completion`.
    pub fn noun(self) -> &'static str {
        match self {
            RequestKind::Tool => "tool call",
            RequestKind::Resource => "resource read",
            RequestKind::Prompt => "prompt",
            RequestKind::Completion => "completion",
        }
    }

    pub fn parse(s: &str) -> Option<RequestKind> {
        [
            RequestKind::Tool,
            RequestKind::Resource,
            RequestKind::Prompt,
            RequestKind::Completion,
        ]
        .into_iter()
        .find(|k| k.as_str() == s)
    }
}

/// Where a request goes and what it names, besides a tool: CEL's `kind`, `server`, `uri` and
/// `prompt`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Request<'a> {
    pub kind: RequestKind,
    /// The MCP upstream it goes to; `""` for an HTTP or built-in tool.
    pub server: &'a str,
    /// A resource's URI: a read or subscription, or the resource a completion is for.
    pub uri: Option<&'a str>,
    /// A prompt's visible name: `prompts/get`, or the prompt a completion is for.
    pub prompt: Option<&'a str>,
}

impl Request<'_> {
    /// A tool call to no MCP upstream.
    pub const TOOL: Request<'static> = Request {
        kind: RequestKind::Tool,
        server: "",
        uri: None,
        prompt: None,
    };
}

/// [`Request`], owned: what cases, `airlock policy eval`, a request's call and its records
/// hold.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OwnedRequest {
    pub kind: RequestKind,
    pub server: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uri: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt: Option<String>,
}

impl OwnedRequest {
    /// A tool call to no MCP upstream.
    pub fn tool() -> OwnedRequest {
        OwnedRequest {
            kind: RequestKind::Tool,
            server: String::new(),
            uri: None,
            prompt: None,
        }
    }

    pub fn as_request(&self) -> Request<'_> {
        Request {
            kind: self.kind,
            server: &self.server,
            uri: self.uri.as_deref(),
            prompt: self.prompt.as_deref(),
        }
    }

    /// A request as a case or `airlock policy eval` names it, checked: a resource names its
    /// `uri`, a prompt its `prompt`, a completion one of them, a tool call neither.
    pub fn checked(
        kind: RequestKind,
        server: Option<String>,
        uri: Option<String>,
        prompt: Option<String>,
    ) -> Result<OwnedRequest, String> {
        use RequestKind::*;
        let ok = match kind {
            Tool => uri.is_none() && prompt.is_none(),
            Resource => uri.is_some() && prompt.is_none(),
            Prompt => prompt.is_some() && uri.is_none(),
            Completion => uri.is_some() != prompt.is_some(),
        };
        if !ok {
            return Err(format!(
                "a {} names {}",
                kind.as_str(),
                match kind {
                    Tool => "neither `uri` nor `prompt`",
                    Resource => "its `uri` (and no `prompt`)",
                    Prompt => "its `prompt` (and no `uri`)",
                    Completion => "the `uri` or the `prompt` it completes",
                }
            ));
        }
        Ok(OwnedRequest {
            kind,
            server: server.unwrap_or_default(),
            uri,
            prompt,
        })
    }

    /// The call policy judges for this request: a tool call of `tool`, or the request itself
    /// with `args` as its params.
    pub fn call(
        &self,
        tool: Option<&str>,
        args: Value,
        context: Option<Value>,
    ) -> Result<crate::ToolCall, String> {
        let call = match (self.kind, tool) {
            (RequestKind::Tool, Some(tool)) => crate::ToolCall::new(tool, args, context),
            (RequestKind::Tool, None) => return Err("a tool call names its `tool`".into()),
            (kind, Some(_)) => return Err(format!("a {} names no `tool`", kind.as_str())),
            (_, None) => crate::ToolCall::request(self.clone(), args, context),
        };
        call.map_err(|e| format!("{e} ({})", e.code()))
    }

    /// What the request asks, in words, where a tool call shows its tool's name:
    /// `resource file:///etc/hosts (fs)`, `prompt review (gh)`,
    /// `completion for prompt review (gh)`.
    pub fn subject(&self) -> String {
        let what = match (self.kind, &self.uri) {
            (RequestKind::Completion, Some(_)) => "completion for resource",
            (RequestKind::Completion, None) => "completion for prompt",
            (kind, _) => kind.as_str(),
        };
        format!("{what} {} ({})", self.target(), self.server)
    }

    /// What a request of this kind names: its URI or prompt ([`crate::request_fingerprint`]'s
    /// target).
    pub fn target(&self) -> &str {
        self.uri.as_deref().or(self.prompt.as_deref()).unwrap_or("")
    }
}

/// Everything one evaluation looks at. Evaluation reads nothing else: no clock, no I/O.
#[derive(Debug, Clone, Copy)]
pub struct Input<'a> {
    /// The tool's name; `""` for a request of another kind.
    pub tool: &'a str,
    /// A JSON object.
    pub args: &'a Value,
    /// A JSON object (`agent_id`, `run_id`, `thread_id`, `tool_call_id`, `labels`).
    pub context: &'a Value,
    /// A JSON object (`id`, `role`, `groups`).
    pub principal: &'a Value,
    pub fingerprint: &'a str,
    pub now: SystemTime,
    /// Results for the classifiers named by rules that may match (see
    /// [`crate::PolicySet::classifiers_for`]).
    pub classifiers: &'a BTreeMap<String, ClassifierOutcome>,
    /// The data a suspended call is resumed with (DESIGN §11); `None` binds `resume` to
    /// `null`, as on every call that is not a resume.
    pub resume: Option<&'a Value>,
    /// The pinned definition of an MCP tool (DESIGN §20: the tool object as its upstream
    /// listed it and a person, or the first sight, trusted); `None` binds `definition` to
    /// `null`, as for an HTTP tool.
    pub definition: Option<&'a Value>,
    /// The request's kind and what it names ([`Request::TOOL`] for a tool call of no MCP
    /// upstream).
    pub request: Request<'a>,
}

/// A rule that could not be evaluated, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RuleError {
    pub rule: String,
    pub reason: String,
}

/// A matched rule's `message`, for the agent (on deny) and approvers (on approval).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RuleMessage {
    pub rule: String,
    pub message: String,
}

/// The outcome of evaluation, with its explanation.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Decision {
    pub decision: DecisionKind,
    /// Ids of every matched rule, plus `agent:<id>` and `tool:<pattern>` for each flag that
    /// applies to the call; sorted.
    pub rules: Vec<String>,
    /// Rules that failed to evaluate; each yielded `on_error`.
    pub errors: Vec<RuleError>,
    /// Messages of the matched rules that have one and decide as the whole verdict does (a
    /// deny shows its deny rules' messages, not those of approval rules that also matched).
    pub messages: Vec<RuleMessage>,
    pub policy_version: String,
    /// Present exactly when `decision` is `require_approval`.
    #[serde(flatten, skip_serializing_if = "Option::is_none")]
    pub approval: Option<ApprovalSettings>,
    /// Steps of the evaluation budget the decision used (not part of its JSON).
    #[serde(skip)]
    pub steps: u64,
}

/// A call's subject in words: the tool's name, or what its request asks
/// ([`OwnedRequest::subject`]).
pub fn subject(tool: &str, request: Option<&OwnedRequest>) -> String {
    request.map_or_else(|| tool.to_owned(), OwnedRequest::subject)
}
