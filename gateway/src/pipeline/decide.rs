//! The decide stage: classifiers, then the pure policy evaluation of `airlock_policy`, for one
//! parsed call. It takes the call, its principal and `now`, and gives a [`Decided`]: the
//! decision with its explanation and the call record it starts. It writes nothing; the stage
//! that acts on the decision (deny here, [`super::claim`], [`super::grant`], [`super::hold`])
//! writes the record.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Instant;

use airlock_policy::cases::classifiers_json;
use airlock_policy::{
    evaluate, ClassifierOutcome, Decision, DecisionKind, Input, ToolCall, BUDGET_EXCEEDED,
};
use airlock_storage::{CallRecord, CallStatus, Principal};
use serde_json::{json, Map, Value};

use super::Front;
use crate::clock::to_system_time;
use crate::error::{ApiError, Code};
use crate::state::{audit_fields, Gateway};

/// A call and what policy decided for it: everything the later stages act on.
pub(super) struct Decided {
    pub call_id: String,
    pub call: ToolCall,
    pub principal: Principal,
    pub decision: Decision,
    pub classified: BTreeMap<String, ClassifierOutcome>,
    pub front: Front,
    /// When the call was decided (ms since the epoch): the time its records carry.
    pub now: u64,
    /// What the shadow set decided, when one is loaded.
    pub shadow: Option<Decision>,
}

impl Decided {
    /// What the audit log and the approval record say about the decision.
    pub fn explanation(&self) -> Map<String, Value> {
        let mut e = explanation(&self.decision, &self.classified);
        self.front.tag(&mut e);
        if let Some(shadow) = self
            .shadow
            .as_ref()
            .filter(|s| crate::shadow::differs(&self.decision, s))
        {
            e.insert(
                "shadow".into(),
                crate::shadow::record(&self.decision, shadow),
            );
        }
        e
    }

    /// The call's record as the decision starts it.
    pub fn record(&self) -> CallRecord {
        let (call, principal, now) = (&self.call, &self.principal, self.now);
        CallRecord {
            call_id: self.call_id.clone(),
            tool: call.tool.clone(),
            request: call.request.clone(),
            args: call.args.clone(),
            fingerprint: call.fingerprint.to_string(),
            requester: principal.clone(),
            context: call.context.clone(),
            decision: self.decision.decision.as_str().to_owned(),
            status: match self.decision.decision {
                DecisionKind::Allow => CallStatus::Allowed,
                DecisionKind::Deny => CallStatus::Denied,
                DecisionKind::RequireApproval => CallStatus::PendingApproval,
            },
            approval_id: None,
            reason: None,
            code: None,
            edited: false,
            granted: false,
            run_by: None,
            outcome: None,
            suspension: None,
            created_at: now,
            updated_at: now,
        }
    }
}

/// Decides a parsed call of `principal` that came through `front`.
pub(super) async fn decide(
    gw: &Gateway,
    call_id: String,
    call: ToolCall,
    principal: Principal,
    front: Front,
    now: u64,
) -> Decided {
    let (decision, classified, shadow) = policies(gw, &call, &principal, None, now, true).await;
    tracing::Span::current().record("decision", decision.decision.as_str());
    if let Some(s) = &shadow {
        gw.metrics
            .shadow_decisions
            .with_label_values(&[decision.decision.as_str(), s.decision.as_str()])
            .inc();
        gw.shadow
            .observe(&call_id, &call.tool, &principal.id, now, &decision, s);
    }
    Decided {
        call_id,
        call,
        principal,
        decision,
        classified,
        front,
        now,
        shadow,
    }
}

/// A denied call: its record and audit, then the `policy.denied` refusal.
pub(super) async fn deny(gw: &Arc<Gateway>, d: Decided) -> Result<super::Outcome, ApiError> {
    let (mut record, mut expl) = (d.record(), d.explanation());
    // A denied call's big args are not kept, only their fingerprint and size: an agent
    // sending calls padded until a deny rule runs out would otherwise have every one of them
    // written (and fsynced) whole, and every other caller's record would wait behind them.
    let bytes = d.call.canonical_args.len();
    if bytes > crate::lanes::HEAVY_BYTES {
        record.args = json!({});
        expl.insert("args_elided".into(), json!({"bytes": bytes}));
    }
    gw.store_op(move |s| s.record_call(record, expl, false))
        .await?;
    gw.metrics.call("deny", "denied");
    Err(denied(&d.decision))
}

/// The principal as policy sees it (DESIGN §16): `issuer` and `actor` are null for a static
/// token, `claims` holds only the claims its issuer lists.
pub(crate) fn principal_json(p: &Principal) -> Value {
    json!({"id": p.id, "role": p.role, "groups": p.groups, "issuer": p.issuer, "actor": p.actor, "claims": p.claims})
}

/// The definition policy reads as `definition` for a call of `tool`: an MCP tool's pinned one
/// (as listed, under `pin = "warn"` or `"off"`); none for an HTTP tool.
pub fn definition_of(gw: &Gateway, tool: &str) -> Option<Arc<Value>> {
    gw.backends.mcp.resolve(tool).and_then(|t| t.definition)
}

/// Runs the classifiers named by the rules that may apply to `call`, then evaluates it for
/// `principal` under the current policy at `now`. Returns the decision and the classifier
/// results. Also what an approver's edit and a resume are checked by.
pub async fn policy(
    gw: &Gateway,
    call: &ToolCall,
    principal: &Principal,
    resume: Option<&Value>,
    now: u64,
) -> (Decision, BTreeMap<String, ClassifierOutcome>) {
    let (decision, classified, _) = policies(gw, call, principal, resume, now, false).await;
    (decision, classified)
}

/// [`policy`], and with `shadow` the shadow set's decision too, from the same inputs: the
/// classifiers either set names run once, and the shadow set reads their same results.
async fn policies(
    gw: &Gateway,
    call: &ToolCall,
    principal: &Principal,
    resume: Option<&Value>,
    now: u64,
    shadow: bool,
) -> (
    Decision,
    BTreeMap<String, ClassifierOutcome>,
    Option<Decision>,
) {
    let policy = gw.policy.load_full();
    let shadow = if shadow { gw.shadow.set() } else { None };
    let mut names = policy.classifiers_for(&call.tool);
    if let Some(s) = &shadow {
        names.extend(s.classifiers_for(&call.tool));
    }
    let classifiers = if names.is_empty() {
        BTreeMap::new()
    } else {
        // Boxed: a classifier's request is a large future the common call never needs.
        Box::pin(gw.classifiers.run(&names, call, &gw.metrics)).await
    };
    let principal = principal_json(principal);
    // An MCP tool's pinned definition, looked up only when a rule reads it.
    let definition =
        if policy.reads("definition") || shadow.as_ref().is_some_and(|s| s.reads("definition")) {
            definition_of(gw, &call.tool)
        } else {
            None
        };
    // The MCP upstream a tool call goes to, looked up only when a rule reads `server`.
    let reads_server = policy.reads("server") || shadow.as_ref().is_some_and(|s| s.reads("server"));
    let server = if reads_server && call.request.is_none() {
        gw.backends
            .mcp
            .resolve(&call.tool)
            .map(|t| t.server.config.name.clone())
            .unwrap_or_default()
    } else {
        String::new()
    };
    let start = Instant::now();
    let input = Input {
        tool: &call.tool,
        args: &call.args,
        context: &call.context,
        principal: &principal,
        fingerprint: call.fingerprint.as_str(),
        now: to_system_time(now),
        classifiers: &classifiers,
        resume,
        definition: definition.as_deref(),
        request: match &call.request {
            Some(r) => r.as_request(),
            None => airlock_policy::Request {
                server: &server,
                ..airlock_policy::Request::TOOL
            },
        },
    };
    let decision = evaluate(&policy, &input);
    gw.metrics
        .policy_eval_seconds
        .observe(start.elapsed().as_secs_f64());
    let shadow = shadow.map(|s| evaluate(&s, &input));
    let ran_out = decision
        .errors
        .iter()
        .filter(|e| e.reason == BUDGET_EXCEEDED)
        .count();
    if ran_out > 0 {
        gw.metrics.policy_budget_exceeded.inc_by(ran_out as u64);
    }
    (decision, classifiers, shadow)
}

/// What the audit log and the approval record say about a decision: the matched rules, their
/// errors and messages, the policy version, and the classifier results.
pub(super) fn explanation(
    d: &Decision,
    classifiers: &BTreeMap<String, ClassifierOutcome>,
) -> Map<String, Value> {
    let mut e = audit_fields(json!({
        "rules": d.rules,
        "errors": d.errors,
        "messages": d.messages,
        "policy_version": d.policy_version,
    }));
    if !classifiers.is_empty() {
        e.insert("classifiers".into(), classifiers_json(classifiers));
    }
    // The settings an approval was asked with, so replay can tell a looser verdict.
    if let Some(a) = &d.approval {
        e.insert(
            "approval".into(),
            serde_json::to_value(a).unwrap_or_default(),
        );
    }
    e
}

/// `policy.denied`, with the rules' messages.
pub(super) fn denied(d: &Decision) -> ApiError {
    let message = if d.messages.is_empty() {
        "denied by policy".to_owned()
    } else {
        d.messages
            .iter()
            .map(|m| m.message.as_str())
            .collect::<Vec<_>>()
            .join("; ")
    };
    ApiError::new(Code::PolicyDenied, message).with_details(json!({
        "rules": d.rules, "messages": d.messages, "errors": d.errors, "policy_version": d.policy_version,
    }))
}
