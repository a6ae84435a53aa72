//! The one flow of DESIGN §1, as named stages, each a module of its own:
//!
//! admit → parse and fingerprint → decide → (grant | join | hold) → claim → forward → record
//!
//! - [`admit`]: the in-flight permit, authentication and rate, and a call's strict intake;
//!   every refusal there is audited `call.rejected`, whichever front end it came through;
//! - [`decide`]: classifiers and policy, for a parsed call (pure evaluation, `now` an input);
//! - [`grant`]: a grant's use spent, or an identical waiting call joined;
//! - [`hold`]: an approval opened and the request held for the decision;
//! - [`claim`]: the at-most-once claim to run, never left behind;
//! - [`forward`]: the canonical args to the backend ([`crate::backends`]);
//! - [`outcome`]: the outcome recorded, and a call's state as an answer;
//! - [`verdict`]: an approver's decision; [`suspend`]: suspend and resume (DESIGN §11).
//!
//! [`run_call`] reads the stages top to bottom. Every path writes its audit record through the
//! store, errors included. The front ends (`http`, `mcp`, `inbox`) only translate in and out
//! of these functions; their answer is an [`Outcome`] or an [`ApiError`] with a stable code.

pub mod admit;
mod claim;
pub mod decide;
mod forward;
pub(crate) mod grant;
mod hold;
mod outcome;
pub mod suspend;
mod verdict;

pub use admit::{intake, Raw};
pub(crate) use claim::cancelled;
pub(crate) use hold::wait_while;
pub use hold::{call_outcome, cancel};
pub use outcome::{
    call_not_found, question_of, tool_call_id, Completed, Outcome, Pending, Suspended,
};
pub use verdict::{decide, decide_granting, decline_all, run_pending};

use std::sync::Arc;
use std::time::Duration;

use airlock_policy::{DecisionKind, ToolCall};
use airlock_storage::Principal;
use serde_json::{Map, Value};
use tracing::Instrument;

use crate::clock::now_ms;
use crate::error::{ApiError, Code};
use crate::state::Gateway;

/// How long the caller is willing to wait for a decision (`Prefer`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Hold {
    /// `Prefer: respond-async`: answer 202 at once.
    Async,
    Wait(Duration),
}

impl Hold {
    /// How long to wait: nothing for `respond-async`.
    pub fn wait(self) -> Duration {
        match self {
            Hold::Async => Duration::ZERO,
            Hold::Wait(d) => d,
        }
    }
}

/// Parses `Prefer: wait=N` / `respond-async`; without either, the server's hold timeout.
pub fn parse_prefer(value: Option<&str>, default: Duration, max: Duration) -> Hold {
    let mut hold = Hold::Wait(default);
    for pref in value.unwrap_or("").split(',').map(str::trim) {
        if pref.eq_ignore_ascii_case("respond-async") {
            return Hold::Async;
        }
        if let Some(n) = pref
            .strip_prefix("wait=")
            .and_then(|n| n.trim().parse::<u64>().ok())
        {
            hold = Hold::Wait(Duration::from_secs(n).min(max));
        }
    }
    hold
}

/// Which front end a call came through, for its audit records.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Front {
    /// `None` for the HTTP API; `Some("mcp")` with the revision and the 2025 session id.
    pub name: Option<&'static str>,
    pub mcp_revision: Option<&'static str>,
    pub mcp_session: Option<String>,
}

impl Front {
    /// The MCP front end, in `revision` (when known) and the 2025 session `session`.
    pub fn mcp(revision: Option<&'static str>, session: Option<String>) -> Front {
        Front {
            name: Some("mcp"),
            mcp_revision: revision,
            mcp_session: session,
        }
    }

    pub(crate) fn tag(&self, e: &mut Map<String, Value>) {
        if let Some(n) = self.name {
            e.insert("front".into(), Value::String(n.into()));
        }
        if let Some(r) = self.mcp_revision {
            e.insert("mcp_revision".into(), Value::String(r.into()));
        }
        if let Some(s) = &self.mcp_session {
            e.insert("mcp_session".into(), Value::String(s.clone()));
        }
    }
}

/// `POST /v1/calls`, after admission and body reading: the strict intake, then the flow.
pub async fn handle_call(
    gw: &Arc<Gateway>,
    principal: Principal,
    body: &[u8],
    hold: Hold,
) -> Result<Outcome, ApiError> {
    let front = Front::default();
    let call = intake(gw, &principal, Raw::Body(body), &front).await?;
    run_call(gw, principal, call, hold, front).await
}

/// A parsed call from any front end, through the rest of the flow, inside its span.
pub async fn run_call(
    gw: &Arc<Gateway>,
    principal: Principal,
    call: ToolCall,
    hold: Hold,
    front: Front,
) -> Result<Outcome, ApiError> {
    let call_id = airlock_storage::new_id("call");
    let span = tracing::info_span!(
        "call",
        call_id = %call_id,
        tool = %call.tool,
        fingerprint = %call.fingerprint,
        principal = %principal.id,
        decision = tracing::field::Empty,
    );
    async move {
        let result = stages(gw, principal, call, call_id, hold, front).await;
        match &result {
            Ok(Outcome::Completed(c)) => {
                tracing::info!(upstream_status = c.upstream_status, "call completed")
            }
            Ok(Outcome::Pending(p)) => {
                tracing::info!(approval_id = %p.approval_id, "call pending approval")
            }
            Ok(Outcome::Suspended(_)) => tracing::info!("call suspended"),
            Err(e) => tracing::info!(code = e.code.as_str(), "call refused"),
        }
        result
    }
    .instrument(span)
    .await
}

/// The stages after intake, in order.
async fn stages(
    gw: &Arc<Gateway>,
    principal: Principal,
    call: ToolCall,
    call_id: String,
    hold: Hold,
    front: Front,
) -> Result<Outcome, ApiError> {
    let d = decide::decide(gw, call_id, call, principal, front, now_ms()).await;
    match d.decision.decision {
        DecisionKind::Deny => decide::deny(gw, d).await,
        DecisionKind::Allow => {
            let (record, guard) = claim::allowed(gw, &d).await?;
            forward::run(gw, record, None, guard).await
        }
        // Boxed: what waits for a decision is far larger than the allow path, and every
        // caller's future would otherwise carry (and copy) it.
        DecisionKind::RequireApproval => Box::pin(needs_approval(gw, d, hold)).await,
    }
}

/// An MCP request of another kind than a tool call that policy holds, as the MCP front end
/// judged it (`call_id`, `decision`, the shadow set's `shadow`, at `now`): the grant, join and hold
/// stages of a tool call's, in its span. Allowed and denied ones never come here.
#[allow(
    clippy::too_many_arguments,
    reason = "the parts of a decision the front end made"
)]
pub async fn hold_request(
    gw: &Arc<Gateway>,
    call_id: String,
    principal: Principal,
    call: ToolCall,
    decision: airlock_policy::Decision,
    shadow: Option<airlock_policy::Decision>,
    front: Front,
    now: u64,
    hold: Hold,
) -> Result<Outcome, ApiError> {
    let span = tracing::info_span!(
        "call",
        call_id = %call_id,
        request = %call.request.as_deref().map(airlock_policy::OwnedRequest::subject).unwrap_or_default(),
        fingerprint = %call.fingerprint,
        principal = %principal.id,
        decision = decision.decision.as_str(),
    );
    let d = decide::Decided {
        call_id,
        call,
        principal,
        decision,
        classified: Default::default(),
        front,
        now,
        shadow,
    };
    Box::pin(needs_approval(gw, d, hold)).instrument(span).await
}

/// A call that needs approval: a grant's use spent, an identical waiting call joined, or an
/// approval opened and the request held.
async fn needs_approval(
    gw: &Arc<Gateway>,
    d: decide::Decided,
    hold: Hold,
) -> Result<Outcome, ApiError> {
    let Some(settings) = d.decision.approval.clone() else {
        return Err(ApiError::new(
            Code::Internal,
            "an approval decision without approval settings",
        ));
    };
    let scope_key = grant::scope_key(settings.grant.scope, &d.call_id, &d.call, &d.principal);
    // A grant an approver gave for a wider scope than the rule's own (up to its `max_scope`)
    // is found under that scope's key: narrowest first.
    for key in grant::keys_to_try(&settings.grant, &d.call_id, &d.call, &d.principal) {
        if let Some((record, guard)) = grant::spend(gw, &d, &key).await? {
            return forward::run(gw, record, None, guard).await;
        }
    }
    if let Some(joined) = grant::join(gw, &d).await? {
        return call_outcome(gw, &d.principal, &joined, hold.wait(), false).await;
    }
    hold::open(gw, d, settings, scope_key, hold).await
}
