//! `POST /slack/interactions`: Slack's Interactivity requests (DESIGN §22). Each is checked
//! first: Slack's `v0` signature with the app's signing secret, a timestamp within five
//! minutes, and a body never seen before (a one-time mark in the store, shared by every
//! gateway, so a replayed or retried request decides nothing). Then:
//!
//! - a button click (`block_actions`) is answered at once (Slack wants an answer within 3 s,
//!   and people click again without one) and handled after: an approve decides as the Slack
//!   user's mapped principal through the one verdict (groups, quorum, separation of duties);
//!   a decline opens a modal for the reason; a click that decides nothing (an unmapped user,
//!   one outside the groups, an approval already decided) is told why privately, with who
//!   decided;
//! - the modal's submission (`view_submission`) declines with its reason, or shows why not in
//!   the modal.
//!
//! The message itself is updated by the outbox ([`super::messages::show`]) on the decision's event, as
//! for a decision made anywhere else. It does not post messages, nor decide who may decide.

use std::sync::Arc;

use airlock_storage::{check_decider, Approval, ApprovalStatus, Principal};
use bytes::Bytes;
use hyper::body::Incoming;
use hyper::{Method, Request, Response, StatusCode};
use serde_json::{json, Value};

use super::blocks::{self, DECLINE, OPEN, REASON};
use super::signature;
use crate::body::{full, json_response, read_body, Body, BodyLimits};
use crate::clock::now_ms;
use crate::config::SlackConfig;
use crate::error::{ApiError, Code};
use crate::state::Gateway;

/// Most bytes of one interaction request (Slack's carry the message they were clicked in).
const MAX_BODY: usize = 256 * 1024;

/// Answers one request to `/slack/interactions`; never fails (errors become responses).
pub async fn handle(gw: Arc<Gateway>, req: Request<Incoming>) -> Response<Body> {
    match answer(&gw, req).await {
        Ok(r) => r,
        Err(e) => {
            gw.metrics
                .approvals
                .slack_interactions
                .with_label_values(&["refused"])
                .inc();
            tracing::warn!(
                code = e.code.as_str(),
                "a Slack interaction refused: {}",
                e.message
            );
            e.into_response()
        }
    }
}

fn empty() -> Response<Body> {
    Response::new(full(Bytes::new()))
}

async fn answer(gw: &Arc<Gateway>, req: Request<Incoming>) -> Result<Response<Body>, ApiError> {
    let Some(slack) = gw.config.slack.clone() else {
        return Err(ApiError::new(
            Code::RouteNotFound,
            "`/slack/interactions` answers only when `[slack]` is configured",
        ));
    };
    if req.method() != Method::POST {
        let mut e = ApiError::new(
            Code::RouteMethodNotAllowed,
            "`/slack/interactions` takes POST",
        );
        e.allow = Some("POST".into());
        return Err(e);
    }
    let payload = verified(gw, &slack, req).await?;
    match payload["type"].as_str() {
        Some("block_actions") => {
            gw.metrics
                .approvals
                .slack_interactions
                .with_label_values(&["click"])
                .inc();
            let gw = gw.clone();
            tokio::spawn(async move { click(&gw, &slack, &payload).await });
            Ok(empty())
        }
        Some("view_submission") if payload["view"]["callback_id"] == DECLINE => {
            gw.metrics
                .approvals
                .slack_interactions
                .with_label_values(&["decline"])
                .inc();
            Ok(submit_decline(gw, &slack, &payload).await)
        }
        _ => Ok(empty()),
    }
}

/// The `payload` of a request Slack signed, not seen before: refused `slack.signature_invalid`,
/// `slack.request_stale` or `slack.replayed` otherwise.
async fn verified(
    gw: &Arc<Gateway>,
    slack: &SlackConfig,
    req: Request<Incoming>,
) -> Result<Value, ApiError> {
    let header = |name: &str| {
        req.headers()
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
    };
    let (timestamp, sig) = (
        header("x-slack-request-timestamp"),
        header("x-slack-signature"),
    );
    let limits = BodyLimits {
        max_bytes: MAX_BODY,
        timeout: gw.config.connections.body_timeout,
    };
    let body = read_body(req.into_body(), limits).await?;
    let now = now_ms();
    let ts = signature::verify(
        slack.signing_secret.as_bytes(),
        timestamp.as_deref(),
        sig.as_deref(),
        &body,
        (now / 1000) as i64,
    )
    .map_err(|r| {
        let code = match r {
            signature::Refusal::Stale(_) => Code::SlackRequestStale,
            _ => Code::SlackSignatureInvalid,
        };
        ApiError::new(code, r.to_string())
    })?;
    // The signature covers the timestamp and the body: the same signature is the same request.
    let mark = format!("slack.{}", sig.unwrap_or_default().to_ascii_lowercase());
    let keep_until = (ts.max(0) as u64 + 2 * signature::TOLERANCE_SECS as u64) * 1000;
    if !gw
        .store_op(move |s| s.spend_once(&mark, keep_until, now))
        .await?
    {
        return Err(ApiError::new(
            Code::SlackReplayed,
            "this request was answered before: a replayed or retried request decides nothing",
        ));
    }
    let form = std::str::from_utf8(&body).map_err(|_| bad("the body is not UTF-8"))?;
    let pairs = crate::urlencoded::pairs(form);
    crate::urlencoded::get(&pairs, "payload")
        .and_then(|p| serde_json::from_str(p).ok())
        .ok_or_else(|| bad("no `payload` form field of JSON"))
}

fn bad(message: &str) -> ApiError {
    ApiError::new(Code::RequestInvalidField, message.to_owned())
}

/// Says `text` to `user` alone, in `channel`.
async fn tell(gw: &Arc<Gateway>, slack: &SlackConfig, channel: &str, user: &str, text: &str) {
    let body = json!({"channel": channel, "user": user, "text": escape(text)});
    if let Err(e) = super::api::call(&gw.webhooks.client, slack, "chat.postEphemeral", &body).await
    {
        tracing::warn!(user, "cannot tell a Slack user privately: {}", e.message());
    }
}

fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// What a decided (or ended) approval says to a later click.
fn already(a: &Approval) -> String {
    let lines = blocks::outcome(a);
    let what = match a.status {
        ApprovalStatus::Approved => "already approved",
        ApprovalStatus::Declined => "already declined",
        ApprovalStatus::Expired => "expired",
        ApprovalStatus::Cancelled => "cancelled",
        ApprovalStatus::Pending => "still waiting",
    };
    format!(
        "Nothing changed: this approval is {what}. {}",
        lines.join("; ")
    )
}

/// A button click, after Slack has had its answer.
async fn click(gw: &Arc<Gateway>, slack: &SlackConfig, p: &Value) {
    let who = Clicker {
        gw,
        slack,
        user: p["user"]["id"].as_str().unwrap_or(""),
        channel: p["container"]["channel_id"]
            .as_str()
            .or_else(|| p["channel"]["id"].as_str())
            .unwrap_or(""),
    };
    let team = p["user"]["team_id"]
        .as_str()
        .or_else(|| p["team"]["id"].as_str());
    let action = &p["actions"][0];
    let action_id = action["action_id"].as_str().unwrap_or("");
    let Some(approval_id) = action["value"].as_str() else {
        return; // "Open in inbox" and anything not ours carry no approval.
    };
    if action_id == OPEN || !action_id.starts_with("airlock.") {
        return;
    }
    let a = match super::messages::approval(gw, approval_id).await {
        Ok(a) => a,
        Err(e) => return who.tell(e.message()).await,
    };
    if a.status != ApprovalStatus::Pending {
        who.tell(&already(&a)).await;
        // A message that still offers buttons is brought up to date.
        let _ = super::messages::show(gw, slack, &a, who.channel, false).await;
        return;
    }
    let principal = match super::users::principal(gw, slack, who.user, team).await {
        Ok(p) => p,
        Err(why) => return who.tell(&why).await,
    };
    if action_id == DECLINE {
        open_decline(&who, &a, &principal, &p["trigger_id"]).await;
    } else {
        approve(&who, &a, &principal, action_id).await;
    }
}

/// Who clicked, and where: what a private answer needs.
struct Clicker<'a> {
    gw: &'a Arc<Gateway>,
    slack: &'a SlackConfig,
    user: &'a str,
    channel: &'a str,
}

impl Clicker<'_> {
    async fn tell(&self, text: &str) {
        tell(self.gw, self.slack, self.channel, self.user, text).await;
    }
}

/// Decline: the modal that asks for the reason, for a principal who may decline.
async fn open_decline(who: &Clicker<'_>, a: &Approval, principal: &Principal, trigger: &Value) {
    if let Err(e) = check_decider(a, principal, false) {
        let e = ApiError::from(e);
        return who
            .tell(&format!("You cannot decline this: {}", e.message))
            .await;
    }
    let meta = json!({"approval_id": a.id, "channel": who.channel}).to_string();
    let view = json!({"trigger_id": trigger, "view": blocks::decline_modal(a, &meta)});
    let opened = super::api::call(&who.gw.webhooks.client, who.slack, "views.open", &view).await;
    if let Err(e) = opened {
        tracing::warn!("cannot open the decline modal: {}", e.message());
        who.tell("Slack did not open the form for a reason: decline in the inbox instead.")
            .await;
    }
}

/// An approve button: the grant it chooses, through the one verdict.
async fn approve(who: &Clicker<'_>, a: &Approval, principal: &Principal, action_id: &str) {
    let Some(choice) = blocks::approve_actions(a)
        .into_iter()
        .find(|b| b.id == action_id)
    else {
        let _ = super::messages::show(who.gw, who.slack, a, who.channel, false).await;
        return who
            .tell("That choice is no longer offered (the policy changed): the message now shows what is.")
            .await;
    };
    let decided =
        crate::pipeline::decide_granting(who.gw, &a.id, principal, true, None, None, choice.grant)
            .await;
    match decided {
        Ok(after) if after.status == ApprovalStatus::Pending => {
            let n = after.approvals_counted();
            who.tell(&format!(
                "Your approval counts: {n} of {} so far.",
                after.quorum
            ))
            .await;
        }
        Ok(_) => {}
        Err(e)
            if matches!(
                e.code,
                Code::ApprovalAlreadyDecided | Code::ApprovalNotPending
            ) =>
        {
            let text = match super::messages::approval(who.gw, &a.id).await {
                Ok(now) if now.status != ApprovalStatus::Pending => already(&now),
                _ => format!("Nothing changed: {}", e.message),
            };
            who.tell(&text).await;
        }
        Err(e) => {
            who.tell(&format!("You cannot approve this: {}", e.message))
                .await;
        }
    }
}

/// The decline modal's submission: declines with its reason, or keeps the modal open with
/// why not.
async fn submit_decline(gw: &Arc<Gateway>, slack: &SlackConfig, p: &Value) -> Response<Body> {
    let in_modal = |text: &str| {
        json_response(
            StatusCode::OK,
            &json!({"response_action": "errors", "errors": {REASON: text}}),
        )
    };
    let meta: Value = p["view"]["private_metadata"]
        .as_str()
        .and_then(|m| serde_json::from_str(m).ok())
        .unwrap_or(Value::Null);
    let Some(approval_id) = meta["approval_id"].as_str() else {
        return in_modal("This form names no approval.");
    };
    let user = p["user"]["id"].as_str().unwrap_or("");
    let team = p["user"]["team_id"].as_str();
    let principal = match super::users::principal(gw, slack, user, team).await {
        Ok(p) => p,
        Err(why) => return in_modal(&why),
    };
    let reason = p["view"]["state"]["values"][REASON][REASON]["value"]
        .as_str()
        .map(str::trim)
        .unwrap_or("");
    if reason.is_empty() {
        return in_modal("Give a reason: it is sent back to the agent.");
    }
    match crate::pipeline::decide(
        gw,
        approval_id,
        &principal,
        false,
        Some(reason.to_owned()),
        None,
    )
    .await
    {
        Ok(_) => empty(),
        Err(e) => match super::messages::approval(gw, approval_id).await {
            Ok(a) if a.status != ApprovalStatus::Pending => in_modal(&already(&a)),
            _ => in_modal(&format!("You cannot decline this: {}", e.message)),
        },
    }
}
