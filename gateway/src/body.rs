//! HTTP plumbing shared by every route: the response body type, JSON responses, how a
//! refusal's code becomes a status (the "rescue" function), body reading with a size and
//! time limit, and the streaming body used by server-sent events.
//!
//! It knows nothing about tool calls or approvals.

use std::convert::Infallible;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::{Body as HttpBody, Frame, Incoming};
use hyper::{Response, StatusCode};
use tokio::sync::mpsc;

use crate::error::{ApiError, Code};

/// Every response body: a full buffer or a stream.
pub type Body = BoxBody<Bytes, Infallible>;

pub fn full(bytes: impl Into<Bytes>) -> Body {
    Full::new(bytes.into()).boxed()
}

/// `value` as a JSON answer: one of the JSON API's answer types (or, off the API, a value).
pub fn json_response<T: serde::Serialize + ?Sized>(
    status: StatusCode,
    value: &T,
) -> Response<Body> {
    json_bytes_response(status, serde_json::to_vec(value).unwrap_or_default())
}

/// [`json_response`] for a body already written as JSON.
pub fn json_bytes_response(status: StatusCode, json: Vec<u8>) -> Response<Body> {
    let mut r = Response::new(full(json));
    *r.status_mut() = status;
    r.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static("application/json"),
    );
    r
}

/// The HTTP status of a refusal (the JSON API writes its body: the error envelope).
impl ApiError {
    pub fn status(&self) -> StatusCode {
        status_for(self.code)
    }
}

/// The one place that maps error codes to HTTP statuses. The match is exhaustive: a new
/// code cannot be added without its status.
pub fn status_for(code: Code) -> StatusCode {
    use Code::*;
    match code {
        RequestTooLarge => StatusCode::PAYLOAD_TOO_LARGE,
        RequestBodyTimeout => StatusCode::REQUEST_TIMEOUT,
        RequestHeadersTooLarge => StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
        RequestInvalidJson
        | RequestDuplicateKey
        | RequestUnsafeNumber
        | RequestTooDeep
        | RequestInvalidArgs
        | RequestInvalidTool
        | RequestInvalidContext
        | RequestUnknownField
        | RequestInvalidField
        | RequestMissingField
        | RequestMissingReason
        | RequestInvalidHeader
        | RequestInvalidClassifier
        | RequestInvalidTime
        | ApprovalGrantTooWide
        | McpMissingCapability => StatusCode::BAD_REQUEST,
        RequestInvalidResumeData => StatusCode::UNPROCESSABLE_ENTITY,
        AuthUnauthenticated | AuthInvalidToken | SlackSignatureInvalid | SlackRequestStale => {
            StatusCode::UNAUTHORIZED
        }
        AuthForbidden
        | RequestAgentForbidden
        | AuthForbiddenOrigin
        | AuthForbiddenHost
        | AuthInsufficientScope
        | PolicyDenied
        | ApprovalDeclined
        | ApprovalExpired
        | ApprovalForbidden
        | ApprovalSelfApproval
        | ApprovalEditDenied
        | GrantRevoked => StatusCode::FORBIDDEN,
        ApprovalAlreadyDecided
        | ApprovalNotPending
        | CallInProgress
        | CallInvalidState
        | CallCancelled
        | CallExists
        | CallNotSuspended
        | CallAmbiguous
        | CallSuspended
        | ToolDefinitionChanged
        | SlackReplayed
        | AuditNotExported => StatusCode::CONFLICT,
        CallExpired => StatusCode::GONE,
        ApprovalNotFound | CallNotFound | ToolUnknown | RouteNotFound | DeliveryNotFound
        | WebhookNotFound | GrantNotFound => StatusCode::NOT_FOUND,
        RouteMethodNotAllowed => StatusCode::METHOD_NOT_ALLOWED,
        UpstreamUnavailable
        | UpstreamTooLarge
        | UpstreamInvalidSuspend
        | UpstreamInvalidResponse
        | CallInterrupted => StatusCode::BAD_GATEWAY,
        UpstreamTimeout => StatusCode::GATEWAY_TIMEOUT,
        UpstreamCredentialsUnavailable => StatusCode::BAD_GATEWAY,
        CredentialsNoSubject => StatusCode::FORBIDDEN,
        GatewayTooManyHeld
        | PrincipalRateLimited
        | PrincipalTooManyPending
        | PrincipalTooManyHeld => StatusCode::TOO_MANY_REQUESTS,
        GatewayOverloaded
        | GatewayShuttingDown
        | StoreUnavailable
        | PolicyUnavailable
        | AuthIssuerUnavailable => StatusCode::SERVICE_UNAVAILABLE,
        PolicyCelSyntax
        | PolicyDuplicateDefaults
        | PolicyDuplicateKey
        | PolicyDuplicateRule
        | PolicyDynamicRegex
        | PolicyEmpty
        | PolicyInternal
        | PolicyInvalid
        | PolicyInvalidDuration
        | PolicyInvalidGlob
        | PolicyInvalidRegex
        | PolicyInvalidRuleId
        | PolicyIo
        | PolicyMissingDefaults
        | PolicyOnErrorAllow
        | PolicyReservedName
        | PolicySyntax
        | PolicyUnknownClassifier
        | PolicyUnknownKey
        | PolicyUnknownVariable
        | PolicyUnsupportedVersion => StatusCode::UNPROCESSABLE_ENTITY,
        ApprovalInvalidState => StatusCode::BAD_REQUEST,
        CallFingerprintMismatch | StoreCorrupt | StoreNotFound | StoreSchemaTooNew | Internal => {
            StatusCode::INTERNAL_SERVER_ERROR
        }
    }
}

/// How much body a request may send, and how long it may take.
#[derive(Debug, Clone, Copy)]
pub struct BodyLimits {
    pub max_bytes: usize,
    /// From the headers to the whole body; beyond it `408 request.body_timeout` and the
    /// connection is closed.
    pub timeout: std::time::Duration,
}

/// Reads a request body within `limits`.
pub async fn read_body(body: Incoming, limits: BodyLimits) -> Result<Bytes, ApiError> {
    let limit = limits.max_bytes;
    let collected = tokio::time::timeout(limits.timeout, Limited::new(body, limit).collect())
        .await
        .map_err(|_| {
            ApiError::new(
                Code::RequestBodyTimeout,
                format!("the body did not arrive within {:?}", limits.timeout),
            )
        })?;
    match collected {
        Ok(collected) => Ok(collected.to_bytes()),
        Err(e) if e.is::<http_body_util::LengthLimitError>() => Err(ApiError::new(
            Code::RequestTooLarge,
            format!("the body is larger than {limit} bytes"),
        )),
        Err(e) => Err(ApiError::new(
            Code::RequestInvalidJson,
            format!("cannot read the body: {e}"),
        )),
    }
}

/// A `text/event-stream` response fed by `rx`, one chunk per event.
pub fn sse_response(rx: mpsc::Receiver<Bytes>) -> Response<Body> {
    let mut r = Response::new(ChannelBody::new(rx).boxed());
    r.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static("text/event-stream"),
    );
    r.headers_mut().insert(
        hyper::header::CACHE_CONTROL,
        hyper::header::HeaderValue::from_static("no-cache"),
    );
    r
}

/// A server-sent event stream of the gateway's events, as `chunk` renders each (`None`
/// skips it), with a keep-alive comment every 15 seconds, until the client leaves or
/// `shutdown` is cancelled. A client too slow to keep up gets `lagged(n)`.
pub fn event_stream(
    mut events: tokio::sync::broadcast::Receiver<crate::events::Event>,
    shutdown: tokio_util::sync::CancellationToken,
    chunk: impl Fn(&crate::events::Event) -> Option<Bytes> + Send + 'static,
    lagged: impl Fn(u64) -> Bytes + Send + 'static,
) -> Response<Body> {
    let (tx, rx) = mpsc::channel::<Bytes>(64);
    tokio::spawn(async move {
        if tx
            .send(Bytes::from_static(b": connected\n\n"))
            .await
            .is_err()
        {
            return;
        }
        let mut keepalive = tokio::time::interval(std::time::Duration::from_secs(15));
        loop {
            let next = tokio::select! {
                e = events.recv() => match e {
                    Ok(e) => match chunk(&e) {
                        Some(c) => c,
                        None => continue,
                    },
                    Err(tokio::sync::broadcast::error::RecvError::Lagged(n)) => lagged(n),
                    Err(_) => break,
                },
                _ = keepalive.tick() => Bytes::from_static(b": keep-alive\n\n"),
                _ = shutdown.cancelled() => break,
            };
            if tx.send(next).await.is_err() {
                break;
            }
        }
    });
    sse_response(rx)
}

/// A body fed by a channel: server-sent events, one chunk per message.
pub struct ChannelBody {
    rx: mpsc::Receiver<Bytes>,
}

impl ChannelBody {
    pub fn new(rx: mpsc::Receiver<Bytes>) -> ChannelBody {
        ChannelBody { rx }
    }
}

impl HttpBody for ChannelBody {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        self.rx
            .poll_recv(cx)
            .map(|chunk| chunk.map(|b| Ok(Frame::data(b))))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_map_to_statuses() {
        use Code::*;
        for (code, status) in [
            (RequestDuplicateKey, 400),
            (RequestTooLarge, 413),
            (AuthUnauthenticated, 401),
            (AuthInvalidToken, 401),
            (AuthInsufficientScope, 403),
            (AuthIssuerUnavailable, 503),
            (PolicyDenied, 403),
            (ApprovalDeclined, 403),
            (ApprovalNotPending, 409),
            (ToolUnknown, 404),
            (UpstreamUnavailable, 502),
            (UpstreamTimeout, 504),
            (GatewayTooManyHeld, 429),
            (GatewayOverloaded, 503),
            (PolicyCelSyntax, 422),
            (Internal, 500),
        ] {
            assert_eq!(status_for(code).as_u16(), status, "{code}");
        }
    }
}
