//! The forward stage: a claimed call's canonical args (re-fingerprinted first: what runs is
//! what was approved) go to its backend, and the answer is recorded ([`super::outcome`]) or
//! stored as a suspension. A held MCP request of another kind goes to its upstream as that
//! request, its JSON-RPC answer kept whole. The backend is named by the tool's route;
//! the pipeline does not know whether it is an HTTP tool or an MCP upstream
//! ([`crate::backends`]).

use std::sync::Arc;

use airlock_storage::{CallOutcome, CallRecord};
use serde_json::Value;

use super::outcome::{finished, record_outcome, record_suspension, Unfinished};
use super::Outcome;
use crate::backends::{Answer, Route};
use crate::error::{ApiError, Code};
use crate::schemas::check_schema;
use crate::state::Gateway;

/// Forwards a call this request has claimed (it is `executing`), records the outcome, answers.
/// `resume` carries the resume data of a suspended call being resumed; `guard` records the
/// outcome if this request is dropped before it does.
pub(super) async fn run(
    gw: &Arc<Gateway>,
    call: CallRecord,
    resume: Option<&Value>,
    guard: Unfinished,
) -> Result<Outcome, ApiError> {
    let decision = call.decision.clone();
    let canonical = airlock_policy::canonicalize(&call.args);
    // INVARIANT: what runs is what was approved. The bytes sent are re-fingerprinted and must
    // match the call's fingerprint; if they ever did not, nothing is sent.
    let fp = match &call.request {
        None => airlock_policy::fingerprint_canonical(&call.tool, canonical.as_bytes()),
        Some(r) => airlock_policy::request_fingerprint(r.kind.as_str(), r.target(), &call.args),
    };
    let answer = if fp.as_str() != call.fingerprint {
        Err(ApiError::new(
            Code::CallFingerprintMismatch,
            "the args to send do not match the approved fingerprint; nothing was sent",
        ))
    } else {
        forward(gw, &call, &canonical, resume).await
    };
    let answer = match answer {
        Ok(Answer::Suspend(s)) => match check_schema(&s.resume_schema) {
            Ok(()) => return guard.disarm(record_suspension(gw, &call, s)).await,
            Err(why) => {
                // Not suspended: an upstream request kept open for it is abandoned.
                gw.backends.abandon(&call.call_id);
                Err(ApiError::new(
                    Code::UpstreamInvalidSuspend,
                    format!("the upstream suspended the call with a resume schema that is not valid JSON Schema 2020-12: {why}"),
                ))
            }
        },
        Ok(Answer::Result(status, body)) => Ok((status, body)),
        Err(e) => Err(e),
    };
    let stored = match &answer {
        Ok((status, body)) => CallOutcome {
            upstream_status: *status,
            result: Some(body.clone()),
            error: None,
            message: None,
        },
        Err(e) => CallOutcome {
            upstream_status: None,
            result: None,
            error: Some(e.code.as_str().to_owned()),
            message: Some(e.message.clone()),
        },
    };
    // Disarmed whatever the write did: a failed write is not retried as an interruption.
    let call_id = call.call_id.clone();
    let written = record_outcome(gw, &call_id, Some(call), &decision, stored).await;
    let record = guard.disarm(written)?;
    finished(&record)
}

/// Sends the call's canonical args (and resume data) to the backend of its tool.
async fn forward(
    gw: &Arc<Gateway>,
    call: &CallRecord,
    canonical: &str,
    resume: Option<&Value>,
) -> Result<Answer, ApiError> {
    // A held MCP request of another kind (never suspended): its upstream's JSON-RPC answer.
    if let Some(request) = &call.request {
        let start = std::time::Instant::now();
        let answer = gw.backends.mcp.send_request(request, &call.args).await;
        gw.metrics
            .upstream_seconds
            .with_label_values(&[request.server.as_str()])
            .observe(start.elapsed().as_secs_f64());
        return answer.map(|a| Answer::Result(None, a));
    }
    let route = match gw.route(&call.tool) {
        None => return Err(super::admit::unknown_tool(gw, &call.tool)),
        // Checked again when it runs: a definition that changed while the call waited for
        // its approval is not called under the old one's trust.
        Some(Route::Mcp(t)) => Route::Mcp(crate::pins::admit(gw, t, &call.tool, true).await?),
        Some(route) => route,
    };
    let server = match &route {
        Route::Mcp(t) => Some(t.server.config.name.clone()),
        _ => None,
    };
    let refused = crate::backends::mcp::RefusedAsks::default();
    let answer = crate::backends::mcp::REFUSED_ASKS
        .scope(
            refused.clone(),
            gw.backends
                .send(route, call, canonical, resume, &gw.metrics),
        )
        .await;
    let refused = std::mem::take(&mut *refused.lock().unwrap_or_else(|e| e.into_inner()));
    if let (Some(server), false) = (server, refused.is_empty()) {
        audit_refused(gw, call, &server, refused).await;
    }
    if let Err(e) = &answer {
        if matches!(
            e.code,
            Code::UpstreamCredentialsUnavailable | Code::CredentialsNoSubject
        ) {
            audit_credential_refused(gw, call, e).await;
        }
    }
    answer
}

/// `credential.refused`: an allowed call went nowhere for want of its upstream's credential
/// (the token endpoint's error code, never a token).
async fn audit_credential_refused(gw: &Arc<Gateway>, call: &CallRecord, e: &ApiError) {
    let fields = crate::state::audit_fields(serde_json::json!({
        "call_id": call.call_id, "principal": call.requester.id, "tool": call.tool,
        "code": e.code.as_str(), "provider_error": e.details.get("provider_error"),
        "message": e.message,
    }));
    audit(
        gw,
        airlock_storage::Kind::CredentialRefused,
        fields,
        "a refused credential",
    )
    .await;
}

/// `mcp.relayed` with `direction: "refused"`: what an upstream asked the agent's client during
/// the call and its `relay` left out (methods only, never what they carried).
async fn audit_refused(gw: &Arc<Gateway>, call: &CallRecord, server: &str, methods: Vec<String>) {
    let fields = crate::state::audit_fields(serde_json::json!({
        "call_id": call.call_id, "principal": call.requester.id, "tool": call.tool,
        "fingerprint": call.fingerprint, "server": server, "direction": "refused",
        "methods": methods,
    }));
    audit(
        gw,
        airlock_storage::Kind::McpRelayed,
        fields,
        "a refused upstream request",
    )
    .await;
}

/// Appends a record of what happened around a call; a failed write is logged, and the call's
/// own outcome is recorded apart from it.
async fn audit(
    gw: &Arc<Gateway>,
    kind: airlock_storage::Kind,
    fields: serde_json::Map<String, Value>,
    what: &str,
) {
    let now = crate::clock::now_ms();
    if let Err(e) = gw
        .store_op(move |s| s.append_audit(kind, fields, now))
        .await
    {
        tracing::error!(code = e.code.as_str(), "cannot audit {what}: {}", e.message);
    }
}
