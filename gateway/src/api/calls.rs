//! Calls: the request, each answer (completed, pending, suspended, cancelled), suspended calls
//! and resuming them.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::{given, Json, Time, EXAMPLE_INBOX};
use crate::pipeline::{Completed, Pending, Suspended};

/// The value of a `status` that names one answer, as a type of one value.
macro_rules! status {
    ($name:ident, $value:literal) => {
        #[derive(Debug, Clone, Copy, Default, Serialize, JsonSchema)]
        #[schemars(inline)]
        pub(crate) enum $name {
            #[default]
            #[serde(rename = $value)]
            Is,
        }
    };
}
status!(IsCompleted, "completed");
status!(IsPending, "pending_approval");
status!(IsSuspended, "suspended");
status!(IsCancelled, "cancelled");

/// A tool call. Parsed by the gateway's strict wire parser (the fingerprint is computed from
/// the same pass); this type is what that parser accepts.
#[derive(Debug, JsonSchema)]
#[schemars(deny_unknown_fields)]
#[allow(
    dead_code,
    reason = "the wire parser reads the body; this type documents it"
)]
pub(crate) struct CallRequest {
    pub tool: ToolName,
    pub args: Args,
    #[serde(default)]
    pub context: Context,
}

/// 1 to 128 bytes: an ASCII letter or digit, then letters, digits and `_ . : / -`
/// (`request.invalid_tool` otherwise).
#[derive(Debug, JsonSchema)]
#[allow(
    dead_code,
    reason = "a schema: tool names are checked by the wire parser"
)]
pub(crate) struct ToolName(
    #[schemars(regex(pattern = r"^[A-Za-z0-9][A-Za-z0-9_.:/-]{0,127}$"))] String,
);

/// The tool's arguments: a JSON object. Its RFC 8785 form, with the tool name, is what is
/// fingerprinted and what the backend receives.
#[derive(Debug, JsonSchema)]
#[allow(dead_code, reason = "a schema: args are checked by the wire parser")]
pub(crate) struct Args(BTreeMap<String, Json>);

/// Edited args to run instead of the requested ones, where the rule allows edits.
#[derive(Debug, JsonSchema)]
#[allow(dead_code, reason = "a schema: edits are checked by the pipeline")]
pub(crate) struct EditedArgs(BTreeMap<String, Json>);

/// Who the call is for, as the agent framework knows it; policy reads it as `context`. Each
/// field is optional, and a string (`labels`: strings by name) when it is there.
#[derive(Debug, Default, JsonSchema)]
#[schemars(deny_unknown_fields)]
#[allow(
    dead_code,
    reason = "a schema: the context is checked by the wire parser"
)]
pub(crate) struct Context {
    #[serde(default)]
    agent_id: String,
    #[serde(default)]
    run_id: String,
    #[serde(default)]
    thread_id: String,
    #[serde(default)]
    tool_call_id: String,
    #[serde(default)]
    labels: BTreeMap<String, String>,
}

/// The backend answered. Any HTTP answer from it, 4xx and 5xx included, is a completed call:
/// the tool's own error is data for the model.
#[derive(Debug, Serialize, JsonSchema)]
#[schemars(example = CallCompleted::example())]
pub(crate) struct CallCompleted {
    pub call_id: String,
    pub status: IsCompleted,
    /// `allow`, or `require_approval` for a call that ran on an approval or a grant.
    #[schemars(with = "RanDecision")]
    pub decision: String,
    #[schemars(regex(pattern = r"^sha256:[0-9a-f]{64}$"))]
    pub fingerprint: String,
    /// The HTTP backend's status; null for an MCP upstream's result, which `result` holds as
    /// the upstream gave it.
    pub upstream_status: Option<u16>,
    /// The backend's body: JSON, or a string when it is not JSON.
    #[schemars(with = "Json")]
    pub result: Value,
    /// Present, and true, when an approver edited the args.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub edited: Option<bool>,
    /// The args that ran, when an approver edited them.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(with = "Option<EditedArgs>")]
    pub args: Option<Value>,
    /// The approval the call ran on: its own, or the one whose grant it spent.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub approval_id: Option<String>,
    /// The grant the call ran on (`DELETE /v1/grants/{id}` revokes it), when it was not the
    /// approved call itself.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub grant_id: Option<String>,
}

/// The decision a completed call ran on.
#[derive(JsonSchema)]
#[schemars(inline, rename_all = "snake_case")]
#[allow(dead_code, reason = "a schema of `CallCompleted::decision`")]
enum RanDecision {
    Allow,
    RequireApproval,
}

impl CallCompleted {
    pub(crate) fn of(c: Completed) -> CallCompleted {
        CallCompleted {
            call_id: c.call_id,
            status: IsCompleted::Is,
            decision: c.decision,
            fingerprint: c.fingerprint,
            upstream_status: c.upstream_status,
            result: c.result,
            edited: c.edited_args.is_some().then_some(true),
            args: c.edited_args,
            approval_id: c.approval_id,
            grant_id: c.grant_id,
        }
    }

    fn example() -> CallCompleted {
        CallCompleted::of(Completed {
            call_id: "c-1".into(),
            decision: "require_approval".into(),
            fingerprint: format!("sha256:{}", "0".repeat(64)),
            upstream_status: Some(200),
            result: serde_json::json!({"rows": 1}),
            edited_args: Some(serde_json::json!({"sql": "SELECT 1"})),
            approval_id: Some("apr_1".into()),
            grant_id: Some("grt_1".into()),
        })
    }
}

/// The call waits for approvers; poll `GET /v1/calls/{call_id}` or resume it after the
/// decision.
#[derive(Debug, Serialize, JsonSchema)]
#[schemars(example = CallPending::example())]
pub(crate) struct CallPending {
    pub call_id: String,
    pub status: IsPending,
    pub approval: PendingApproval,
}

/// The approval a pending call waits for.
#[derive(Debug, Serialize, JsonSchema)]
pub(crate) struct PendingApproval {
    pub id: String,
    pub expires_at: Time,
    pub approvers: Vec<String>,
    #[schemars(range(min = 1))]
    pub quorum: u32,
    /// The approval's inbox page.
    pub link: String,
}

impl CallPending {
    /// `link` is the approval's inbox page (`crate::approvals::inbox_link`).
    pub(crate) fn of(p: Pending, link: String) -> CallPending {
        CallPending {
            call_id: p.call_id,
            status: IsPending::Is,
            approval: PendingApproval {
                id: p.approval_id,
                expires_at: Time::of(p.expires_at),
                approvers: p.approvers.into_iter().collect(),
                quorum: p.quorum,
                link,
            },
        }
    }

    fn example() -> CallPending {
        let pending = Pending {
            call_id: "c-1".into(),
            approval_id: "a-1".into(),
            expires_at: 1_767_225_600_000,
            approvers: ["dba".to_owned()].into(),
            quorum: 1,
        };
        CallPending::of(pending, EXAMPLE_INBOX.replace("{}", "approvals/a-1"))
    }
}

/// The tool suspended itself and waits for `resume_data` that fits `suspend.resume_schema`.
#[derive(Debug, Serialize, JsonSchema)]
#[schemars(example = CallSuspended::example())]
pub(crate) struct CallSuspended {
    pub call_id: String,
    pub status: IsSuspended,
    pub tool: String,
    pub tool_call_id: Option<String>,
    pub run_id: Option<String>,
    pub suspend: Suspension,
    pub expires_at: Time,
    #[schemars(range(min = 1))]
    pub suspensions: u32,
    /// The inbox page with the call's resume form.
    pub link: String,
}

/// What the tool said when it suspended, and the schema resume data must fit.
#[derive(Debug, Serialize, JsonSchema)]
pub(crate) struct Suspension {
    #[schemars(with = "Json")]
    pub payload: Value,
    #[schemars(with = "Json")]
    pub resume_schema: Value,
}

impl CallSuspended {
    /// `link` is the call's resume page (`crate::approvals::resume_link`).
    pub(crate) fn of(v: Suspended, link: String) -> CallSuspended {
        CallSuspended {
            call_id: v.call_id,
            status: IsSuspended::Is,
            tool: v.tool,
            tool_call_id: Some(v.tool_call_id),
            run_id: v.run_id,
            suspend: Suspension {
                payload: v.payload,
                resume_schema: v.resume_schema,
            },
            expires_at: Time::of(v.expires_at),
            suspensions: v.count,
            link,
        }
    }

    fn example() -> CallSuspended {
        let v = Suspended {
            call_id: "c-2".into(),
            tool: "deploy.run".into(),
            tool_call_id: "tc-1".into(),
            run_id: Some("run-1".into()),
            payload: serde_json::json!({"question": "which region?"}),
            resume_schema: serde_json::json!({"type": "object", "required": ["region"]}),
            expires_at: 1_767_225_600_000,
            count: 1,
        };
        CallSuspended::of(v, EXAMPLE_INBOX.replace("{}", "calls/c-2"))
    }
}

/// A call that waits: for approvers, or for resume data.
#[derive(Debug, Serialize, JsonSchema)]
#[schemars(example = CallWaiting::Pending(CallPending::example()),
    example = CallWaiting::Suspended(CallSuspended::example()))]
#[serde(untagged)]
pub(crate) enum CallWaiting {
    Pending(CallPending),
    Suspended(CallSuspended),
}

/// A cancelled call.
#[derive(Debug, Serialize, JsonSchema)]
#[schemars(example = CallCancelled { call_id: "c-1".into(), status: IsCancelled::Is })]
pub(crate) struct CallCancelled {
    pub call_id: String,
    pub status: IsCancelled,
}

/// Calls waiting for resume data.
#[derive(Debug, Serialize, JsonSchema)]
#[schemars(example = SuspendedCalls { calls: vec![CallSuspended::example()] })]
pub(crate) struct SuspendedCalls {
    pub calls: Vec<CallSuspended>,
}

/// Resuming one call.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct ResumeRequest {
    /// For a suspended call: the data it resumes with. Without it, the call's outcome (executed
    /// at most once).
    #[serde(default, deserialize_with = "given")]
    #[schemars(with = "Json")]
    pub resume_data: Option<Value>,
}

/// Resuming a run's suspended call (or one tool call's, in it).
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(transform = |s: &mut schemars::Schema| super::required(s, &["resume_data"]))]
pub(crate) struct RunResumeRequest {
    #[serde(default, deserialize_with = "given")]
    #[schemars(with = "Json")]
    pub resume_data: Option<Value>,
    #[serde(default)]
    pub tool_call_id: Option<String>,
}
