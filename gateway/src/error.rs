//! The one refusal type every stage returns, and the stable codes it carries.
//!
//! [`Code`] is every code a refusal of the gateway can carry (DESIGN §3, §6, §11, §14): one
//! enum, written as text only through [`Code::as_str`] and read back only through
//! [`Code::parse`], which knows no code it was not given here. A stored code the reader does not
//! know is an error, never silently another code. The codes of the policy and store crates
//! are among them (a unit test checks each).
//!
//! [`ApiError`] is protocol-neutral: the HTTP front end turns it into a status and a JSON
//! error body (`crate::body`), MCP into an `isError` result or a JSON-RPC error.

use airlock_policy::RequestError;
use airlock_storage::StoreError;
use serde_json::{json, Value};

airlock_policy::stable_names! {
    /// A stable error code.
    pub enum Code {
        // Intake (DESIGN §3) and request shape.
        RequestInvalidJson = "request.invalid_json",
        RequestDuplicateKey = "request.duplicate_key",
        RequestUnsafeNumber = "request.unsafe_number",
        RequestTooDeep = "request.too_deep",
        RequestTooLarge = "request.too_large",
        RequestInvalidArgs = "request.invalid_args",
        RequestInvalidTool = "request.invalid_tool",
        RequestInvalidContext = "request.invalid_context",
        // `context.agent_id` names an agent the principal may not speak for (DESIGN §23).
        RequestAgentForbidden = "request.agent_forbidden",
        RequestUnknownField = "request.unknown_field",
        RequestInvalidField = "request.invalid_field",
        RequestMissingField = "request.missing_field",
        RequestMissingReason = "request.missing_reason",
        RequestInvalidHeader = "request.invalid_header",
        RequestInvalidClassifier = "request.invalid_classifier",
        RequestInvalidResumeData = "request.invalid_resume_data",
        RequestInvalidTime = "request.invalid_time",
        RequestBodyTimeout = "request.body_timeout",
        RequestHeadersTooLarge = "request.headers_too_large",
        // Who may ask.
        AuthUnauthenticated = "auth.unauthenticated",
        AuthInvalidToken = "auth.invalid_token",
        AuthInsufficientScope = "auth.insufficient_scope",
        AuthIssuerUnavailable = "auth.issuer_unavailable",
        AuthForbidden = "auth.forbidden",
        AuthForbiddenOrigin = "auth.forbidden_origin",
        AuthForbiddenHost = "auth.forbidden_host",
        PrincipalRateLimited = "principal.rate_limited",
        PrincipalTooManyPending = "principal.too_many_pending",
        // One principal's share of the held requests is taken (DESIGN §23).
        PrincipalTooManyHeld = "principal.too_many_held",
        // Routes.
        RouteNotFound = "route.not_found",
        RouteMethodNotAllowed = "route.method_not_allowed",
        ToolUnknown = "tool.unknown",
        // An MCP tool whose definition is not the pinned one (DESIGN §20).
        ToolDefinitionChanged = "tool.definition_changed",
        WebhookNotFound = "webhook.not_found",
        DeliveryNotFound = "delivery.not_found",
        // Decisions and approvals.
        PolicyDenied = "policy.denied",
        PolicyUnavailable = "policy.unavailable",
        ApprovalDeclined = "approval.declined",
        ApprovalExpired = "approval.expired",
        ApprovalForbidden = "approval.forbidden",
        ApprovalSelfApproval = "approval.self_approval",
        ApprovalAlreadyDecided = "approval.already_decided",
        ApprovalNotPending = "approval.not_pending",
        ApprovalNotFound = "approval.not_found",
        ApprovalEditDenied = "approval.edit_denied",
        // A grant chosen beyond the rule's maxima (DESIGN §22).
        ApprovalGrantTooWide = "approval.grant_too_wide",
        GrantNotFound = "grant.not_found",
        // An approved call whose grant was revoked before it ran (DESIGN §23).
        GrantRevoked = "grant.revoked",
        ApprovalInvalidState = "approval.invalid_state",
        // A request to `/slack/interactions` that is not Slack's (DESIGN §22).
        SlackSignatureInvalid = "slack.signature_invalid",
        SlackRequestStale = "slack.request_stale",
        SlackReplayed = "slack.replayed",
        // Calls.
        CallNotFound = "call.not_found",
        CallExists = "call.exists",
        CallInvalidState = "call.invalid_state",
        CallInProgress = "call.in_progress",
        CallCancelled = "call.cancelled",
        CallExpired = "call.expired",
        CallNotSuspended = "call.not_suspended",
        CallAmbiguous = "call.ambiguous",
        CallInterrupted = "call.interrupted",
        CallFingerprintMismatch = "call.fingerprint_mismatch",
        CallSuspended = "call.suspended",
        // Backends.
        UpstreamUnavailable = "upstream.unavailable",
        UpstreamTimeout = "upstream.timeout",
        UpstreamTooLarge = "upstream.too_large",
        UpstreamInvalidSuspend = "upstream.invalid_suspend",
        UpstreamInvalidResponse = "upstream.invalid_response",
        // The upstream's credential could not be had from its token endpoint (DESIGN §25).
        UpstreamCredentialsUnavailable = "upstream.credentials_unavailable",
        // Token exchange needs the caller's own JWT; a static token has none (DESIGN §25).
        CredentialsNoSubject = "credentials.no_subject",
        // MCP: an upstream's input request needs a capability the client did not declare.
        McpMissingCapability = "mcp.missing_capability",
        // The gateway itself.
        GatewayOverloaded = "gateway.overloaded",
        GatewayShuttingDown = "gateway.shutting_down",
        GatewayTooManyHeld = "gateway.too_many_held",
        StoreUnavailable = "store.unavailable",
        StoreCorrupt = "store.corrupt",
        StoreNotFound = "store.not_found",
        StoreSchemaTooNew = "store.schema_too_new",
        AuditNotExported = "audit.not_exported",
        Internal = "internal",
        // A policy set that does not load (DESIGN §4), as `POST /v1/policy/reload` reports it.
        PolicyCelSyntax = "policy.cel_syntax",
        PolicyDuplicateDefaults = "policy.duplicate_defaults",
        PolicyDuplicateKey = "policy.duplicate_key",
        PolicyDuplicateRule = "policy.duplicate_rule",
        PolicyDynamicRegex = "policy.dynamic_regex",
        PolicyEmpty = "policy.empty",
        PolicyInternal = "policy.internal",
        PolicyInvalid = "policy.invalid",
        PolicyInvalidDuration = "policy.invalid_duration",
        PolicyInvalidGlob = "policy.invalid_glob",
        PolicyInvalidRegex = "policy.invalid_regex",
        PolicyInvalidRuleId = "policy.invalid_rule_id",
        PolicyIo = "policy.io",
        PolicyMissingDefaults = "policy.missing_defaults",
        PolicyOnErrorAllow = "policy.on_error_allow",
        PolicyReservedName = "policy.reserved_name",
        PolicySyntax = "policy.syntax",
        PolicyUnknownClassifier = "policy.unknown_classifier",
        PolicyUnknownKey = "policy.unknown_key",
        PolicyUnknownVariable = "policy.unknown_variable",
        PolicyUnsupportedVersion = "policy.unsupported_version",
    }
}

impl Code {
    /// Whether a refusal with this code may come with `Retry-After` (the seconds to wait before
    /// trying again): the OpenAPI document declares the header on every response that lists
    /// one of these codes, and [`ApiError::retry_after`] is for these codes only.
    pub(crate) const fn carries_retry_after(self) -> bool {
        matches!(
            self,
            Code::AuthIssuerUnavailable
                | Code::PrincipalRateLimited
                | Code::PrincipalTooManyPending
                | Code::PrincipalTooManyHeld
                | Code::CallInProgress
                | Code::UpstreamUnavailable
                | Code::UpstreamCredentialsUnavailable
                | Code::GatewayOverloaded
                | Code::GatewayShuttingDown
                | Code::GatewayTooManyHeld
                | Code::StoreUnavailable
        )
    }
}

/// A refusal: a stable code, a message for people (and models), and details for programs.
#[derive(Debug, Clone, PartialEq)]
pub struct ApiError {
    pub code: Code,
    pub message: String,
    pub details: Value,
    /// Seconds, for `Retry-After` (only with a code that [`Code::carries_retry_after`]).
    pub retry_after: Option<u64>,
    /// A `WWW-Authenticate` challenge (DESIGN §16), on a 401 or an insufficient scope.
    pub challenge: Option<String>,
    /// The methods a known path takes, for `Allow` on a `405`.
    pub allow: Option<Box<str>>,
}

impl ApiError {
    pub fn new(code: Code, message: impl Into<String>) -> ApiError {
        ApiError {
            code,
            message: message.into(),
            details: json!({}),
            retry_after: None,
            challenge: None,
            allow: None,
        }
    }

    pub fn with_details(mut self, details: Value) -> ApiError {
        self.details = details;
        self
    }

    pub fn retry_after(mut self, seconds: u64) -> ApiError {
        debug_assert!(
            self.code.carries_retry_after(),
            "`{}` is not documented with Retry-After",
            self.code.as_str()
        );
        self.retry_after = Some(seconds);
        self
    }

    /// A refusal whose code another crate gave as text. Every such code is a [`Code`] (a
    /// test checks); one that is not is reported as `internal`, naming it, never as another.
    pub(crate) fn of_crate(text: &str, message: String) -> ApiError {
        match Code::parse(text) {
            Some(code) => ApiError::new(code, message),
            None => ApiError::new(Code::Internal, format!("{message} (code `{text}`)")),
        }
    }
}

impl From<RequestError> for ApiError {
    fn from(e: RequestError) -> Self {
        ApiError::of_crate(e.code(), e.to_string())
    }
}

impl From<StoreError> for ApiError {
    fn from(e: StoreError) -> Self {
        let err = ApiError::of_crate(e.code(), e.to_string());
        if err.code == Code::StoreUnavailable {
            err.retry_after(5)
        } else {
            err
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_code_reads_back_as_itself_and_no_other_text_reads_at_all() {
        for c in Code::ALL {
            assert_eq!(Code::parse(c.as_str()), Some(*c));
        }
        assert_eq!(Code::parse("upstream.unavailabl"), None);
        assert_eq!(Code::parse(""), None);
    }

    #[test]
    fn the_policy_and_store_crates_codes_are_all_known() {
        let s = String::new;
        let request = [
            RequestError::InvalidJson {
                offset: 0,
                reason: "x",
            },
            RequestError::DuplicateKey { key: s() },
            RequestError::UnsafeNumber { literal: s() },
            RequestError::TooDeep { limit: 1 },
            RequestError::TooLarge { limit: 1 },
            RequestError::InvalidArgs,
            RequestError::InvalidTool { tool: s() },
            RequestError::InvalidContext { reason: s() },
            RequestError::UnknownField {
                field: s(),
                hint: s(),
            },
        ];
        let store = [
            StoreError::Unavailable(s()),
            StoreError::Locked(s()),
            StoreError::Corrupt(s()),
            StoreError::ApprovalNotFound(s()),
            StoreError::Forbidden(s()),
            StoreError::SelfApproval,
            StoreError::AlreadyDecided(s()),
            StoreError::NotPending("x"),
            StoreError::CallNotFound(s()),
            StoreError::CallExists(s()),
            StoreError::CallState("x", "y"),
            StoreError::GrantGone,
            StoreError::DeliveryNotFound(s()),
            StoreError::NoStore(s()),
            StoreError::NotExported(s()),
            StoreError::NotSuspended("x"),
            StoreError::SuspensionExpired,
            StoreError::SchemaTooNew {
                found: 2,
                supported: 1,
            },
        ];
        for text in request
            .iter()
            .map(RequestError::code)
            .chain(store.iter().map(StoreError::code))
        {
            assert!(Code::parse(text).is_some(), "`{text}` is not a Code");
        }
    }
}
