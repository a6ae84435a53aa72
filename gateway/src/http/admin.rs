//! The admin routes of the JSON API: the policy (shown, evaluated, reloaded), the webhooks
//! (listed, re-enabled, tested) and the audit log (read, exported, pruned). Admins only.

use airlock_policy::cases::{fixed_classifiers, EvalRequest};
use airlock_policy::{evaluate, ToolCall};
use hyper::body::Incoming;
use hyper::{Request, Response, StatusCode};
use serde_json::{json, Value};

use crate::api;
use crate::auth::{require, Role};
use crate::body::{full, json_response, Body};
use crate::clock::{now_ms, to_system_time};
use crate::error::{ApiError, Code};
use crate::state::Gateway;

use super::{body_json, query_cursor, query_int, Ctx};

/// `GET /v1/policy`: the policy in force, rule by rule.
pub(super) fn policy(cx: Ctx<'_>) -> Result<Response<Body>, ApiError> {
    let Ctx { gw, role, .. } = cx;
    require(role, &[Role::Admin])?;
    Ok(json_response(
        StatusCode::OK,
        &api::Policy::of(&gw.policy.load()),
    ))
}

/// `POST /v1/policy/evaluate`: what the policy in force would decide, with no call made.
pub(super) async fn evaluate_policy(
    cx: Ctx<'_>,
    req: Request<Incoming>,
) -> Result<Response<Body>, ApiError> {
    let Ctx {
        gw, role, limit, ..
    } = cx;
    require(role, &[Role::Admin])?;
    let body: api::EvaluateRequest = api::parse(body_json(req, limit).await?)?;
    // A tool that is not a string is a bad tool name, as the wire parser refuses it.
    let tool = match &body.tool {
        Some(Value::String(t)) => t.clone(),
        _ => String::new(),
    };
    let args = body.args.unwrap_or(Value::Null);
    let call = ToolCall::new(&tool, args, body.context)?;
    let principal = match body.principal {
        None => airlock_policy::cases::default_principal(),
        Some(p @ Value::Object(_)) => p,
        Some(_) => {
            return Err(ApiError::new(
                Code::RequestInvalidField,
                "`principal` must be an object (`id`, `role`, `groups`, …)",
            ))
        }
    };
    let classifiers = match &body.classifier {
        Some(c) => {
            fixed_classifiers(c).map_err(|e| ApiError::new(Code::RequestInvalidClassifier, e))?
        }
        None => Default::default(),
    };
    let request = EvalRequest {
        call,
        principal,
        classifiers,
        now: to_system_time(now_ms()),
        resume: body.resume.filter(|r| !r.is_null()),
        // The definition given, else the one a call of the tool would be judged with.
        definition: match body.definition {
            Some(d) => Some(d).filter(|d| !d.is_null()),
            None => crate::pipeline::decide::definition_of(gw, &tool).map(|d| (*d).clone()),
        },
        request: airlock_policy::OwnedRequest::tool(),
    };
    let decision = evaluate(&gw.policy.load(), &request.input());
    Ok(json_response(
        StatusCode::OK,
        &api::PolicyDecision::of(decision, &request.call),
    ))
}

/// `GET /v1/policy/shadow`: what the shadow set would have decided differently since it
/// loaded.
pub(super) fn shadow(cx: Ctx<'_>) -> Result<Response<Body>, ApiError> {
    let Ctx { gw, role, .. } = cx;
    require(role, &[Role::Admin])?;
    Ok(json_response(
        StatusCode::OK,
        &api::ShadowSummary::from(&gw.shadow.summary(gw.policy.load().version())),
    ))
}

/// `POST /v1/policy/reload`.
/// A changed live set has reached the pending approvals when it answers.
pub(super) async fn reload(cx: Ctx<'_>) -> Result<Response<Body>, ApiError> {
    let Ctx { gw, role, .. } = cx;
    require(role, &[Role::Admin])?;
    let config = crate::reconfigure::reload(gw);
    match gw.reload("api") {
        Ok(reloaded) => {
            if reloaded.changed {
                crate::repolicy::pending(gw).await;
            }
            let version = api::PolicyVersion {
                version: reloaded.version,
                config: api::ConfigReload::of(config),
            };
            Ok(json_response(StatusCode::OK, &version))
        }
        Err(refused) => Err(ApiError::of_crate(refused.errors.code(), format!("the {} policy does not load; the current live and shadow sets stay in force", refused.set)).with_details(json!({
            "set": refused.set,
            "errors": refused.errors.0.iter().map(|e| json!({"code": e.code, "file": e.file, "line": e.line, "col": e.col, "rule": e.rule, "message": e.message})).collect::<Vec<_>>(),
        }))),
    }
}

/// `GET /v1/webhooks`: the configured webhooks, and which are disabled.
pub(super) async fn webhooks(cx: Ctx<'_>) -> Result<Response<Body>, ApiError> {
    let Ctx { gw, role, .. } = cx;
    require(role, &[Role::Admin])?;
    let mut list = Vec::new();
    for h in gw.webhooks.hooks().iter() {
        let id = h.id.clone();
        let disabled = gw.store_op(move |s| s.webhook_disabled(&id)).await?;
        list.push(api::Webhook {
            id: h.id.clone(),
            url: h.url.clone(),
            events: h.events.clone(),
            principal: h.principal.clone(),
            disabled,
        });
    }
    let webhooks = api::Webhooks { webhooks: list };
    Ok(json_response(StatusCode::OK, &webhooks))
}

/// `POST /v1/webhooks/{id}/enable`: its parked deliveries go out again.
pub(super) async fn enable_webhook(cx: Ctx<'_>, id: &str) -> Result<Response<Body>, ApiError> {
    let Ctx { gw, role, .. } = cx;
    require(role, &[Role::Admin])?;
    webhook_exists(gw, id)?;
    let (id, now) = (id.to_string(), now_ms());
    let requeued = gw.store_op(move |s| s.enable_webhook(&id, now)).await?;
    gw.webhooks.wake.notify_one();
    let enabled = api::WebhookEnabled {
        enabled: true,
        requeued: requeued as u64,
    };
    Ok(json_response(StatusCode::OK, &enabled))
}

/// `POST /v1/webhooks/{id}/test`: a test event, through the outbox like any other.
pub(super) async fn test_webhook(cx: Ctx<'_>, id: &str) -> Result<Response<Body>, ApiError> {
    let Ctx { gw, role, .. } = cx;
    require(role, &[Role::Admin])?;
    webhook_exists(gw, id)?;
    let delivery = airlock_storage::NewDelivery {
        webhook: id.to_string(),
        event: "webhook.test".into(),
        payload: crate::webhooks::payload(
            "webhook.test",
            &json!({"webhook": id, "message": "a test event from airlock"}),
        ),
    };
    let now = now_ms();
    let queued = gw
        .store_op(move |s| s.enqueue_deliveries(vec![delivery], now))
        .await?;
    gw.webhooks.wake.notify_one();
    let queued = api::WebhookTestQueued {
        delivery_id: queued.first().map(|d| d.id.clone()),
    };
    Ok(json_response(StatusCode::ACCEPTED, &queued))
}

/// `GET /v1/audit/export`.
pub(super) async fn export(cx: Ctx<'_>) -> Result<Response<Body>, ApiError> {
    let Ctx {
        gw, role, query, ..
    } = cx;
    require(role, &[Role::Admin])?;
    // The online `airlock audit export`: JSONL of the records after `after`; once it
    // is all written, the store notes how far the log is exported (what a prune may
    // drop).
    let after = query_cursor(query, "after")?;
    let bytes = gw
        .store_op(move |s| {
            let mut out = Vec::new();
            s.export_audit(&after, &mut out)?;
            Ok(out)
        })
        .await?;
    let mut r = Response::new(full(bytes));
    r.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static("application/x-ndjson"),
    );
    Ok(r)
}

/// `POST /v1/audit/prune`.
pub(super) async fn prune(cx: Ctx<'_>, req: Request<Incoming>) -> Result<Response<Body>, ApiError> {
    let Ctx {
        gw, role, limit, ..
    } = cx;
    require(role, &[Role::Admin])?;
    let body: api::PruneRequest = api::parse(body_json(req, limit).await?)?;
    let chain = body.chain;
    let before = body.before.ok_or_else(|| {
        ApiError::new(
            Code::RequestInvalidField,
            "`before` must be a seq (an integer)",
        )
    })?;
    let now = now_ms();
    let (dropped, checkpoint) = gw
        .store_op(move |s| s.prune_audit(chain.as_deref(), before, now))
        .await?;
    let pruned = api::Pruned {
        dropped,
        checkpoint_seq: Some(checkpoint),
    };
    Ok(json_response(StatusCode::OK, &pruned))
}

/// `GET /v1/audit`: records after `after`, by page.
pub(super) async fn audit(cx: Ctx<'_>) -> Result<Response<Body>, ApiError> {
    let Ctx {
        gw, role, query, ..
    } = cx;
    require(role, &[Role::Admin])?;
    let after = query_cursor(query, "after")?;
    let n = query_int(query, "limit")?.unwrap_or(100).clamp(1, 1000) as usize;
    let (records, next) = gw.store_op(move |s| s.audit_page(&after, n)).await?;
    // With one chain the cursor is the plain seq of the last record; with several, an opaque
    // string `after` takes back; `null` for an empty page (read again from the same `after`).
    let next = match (records.is_empty(), next) {
        (true, _) => Value::Null,
        (_, airlock_storage::Cursor::Seq(n)) => Value::from(n),
        (_, heads) => Value::from(heads.to_string()),
    };
    let page = api::AuditPage {
        records,
        next_after: next,
    };
    Ok(json_response(StatusCode::OK, &page))
}

fn webhook_exists(gw: &Gateway, id: &str) -> Result<(), ApiError> {
    if gw.webhooks.hooks().iter().any(|h| h.id == id) {
        Ok(())
    } else {
        Err(ApiError::new(
            Code::WebhookNotFound,
            format!("no webhook `{id}` is configured"),
        ))
    }
}
