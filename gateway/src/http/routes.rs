//! The JSON API's route table: every method and path the HTTP front end answers, each named by
//! an [`Op`]. The router dispatches only what this table finds, the `405` of a known path lists
//! its methods in `Allow` from it, and the OpenAPI document (`super::openapi`) is written from
//! it, so a route cannot be served without being documented, nor documented without being
//! served.
//!
//! Each route names the types of `crate::api` its handler reads (the request body) and answers
//! (each JSON answer by status), which the document's schemas are derived from.
//!
//! It holds no handlers and knows no roles: those are the router's and the handlers'.

use hyper::Method;
use schemars::{JsonSchema, Schema, SchemaGenerator};

use crate::api;

/// One operation of the API.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Op {
    Root,
    Favicon,
    Healthz,
    Readyz,
    Metrics,
    OpenApi,
    ProtectedResource,
    ProtectedResourceMcp,
    CreateCall,
    ListCalls,
    GetCall,
    ResumeCall,
    CancelCall,
    ResumeRun,
    StreamRun,
    ListApprovals,
    GetApproval,
    Approve,
    Decline,
    ApproveRun,
    DeclineRun,
    DeclinePrincipal,
    Events,
    GetPolicy,
    EvaluatePolicy,
    ReloadPolicy,
    GetShadow,
    ListGrants,
    RevokeGrant,
    ListTools,
    GetTool,
    ReviewTool,
    ListWebhooks,
    EnableWebhook,
    TestWebhook,
    ListAudit,
    ExportAudit,
    PruneAudit,
}

/// Which requests a route is served to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Access {
    /// No token: liveness, metrics, the document itself, browsers' conveniences.
    Open,
    /// No token, and only while `[[issuers]]` are configured (RFC 9728 metadata, DESIGN §16).
    OpenWithIssuers,
    /// A bearer token (static or from an issuer).
    Token,
}

pub(crate) struct Route {
    pub method: Method,
    /// The path, with `{name}` for a segment the handler is given.
    pub path: &'static str,
    pub op: Op,
    pub access: Access,
    /// The query parameters it takes; any other is refused (`request.unknown_field`), so a
    /// misspelt one is not read as left out.
    pub query: &'static [&'static str],
    /// The request body's type (`crate::api`), and whether a body is required.
    pub body: Option<(TypeOf, bool)>,
    /// The type of each JSON answer by status; the refusals are the error envelope.
    pub answers: &'static [(u16, TypeOf)],
}

/// A JSON body's type, as the table names it: what the OpenAPI document derives its schema
/// from and what the handler of the route answers.
#[derive(Clone, Copy)]
pub(crate) struct TypeOf(pub fn(&mut SchemaGenerator) -> Schema);

impl TypeOf {
    pub(crate) const fn of<T: JsonSchema>() -> TypeOf {
        TypeOf(schema_of::<T>)
    }
}

fn schema_of<T: JsonSchema>(generator: &mut SchemaGenerator) -> Schema {
    generator.subschema_for::<T>()
}

const fn route(method: Method, path: &'static str, op: Op, access: Access) -> Route {
    Route {
        method,
        path,
        op,
        access,
        query: &[],
        body: None,
        answers: &[],
    }
}

impl Route {
    const fn query(mut self, names: &'static [&'static str]) -> Route {
        self.query = names;
        self
    }

    const fn body(mut self, t: TypeOf, required: bool) -> Route {
        self.body = Some((t, required));
        self
    }

    const fn answers(mut self, answers: &'static [(u16, TypeOf)]) -> Route {
        self.answers = answers;
        self
    }

    /// The first query parameter this route does not take, if any.
    pub(crate) fn unknown_query<'q>(&self, query: &'q str) -> Option<&'q str> {
        query
            .split('&')
            .filter(|kv| !kv.is_empty())
            .map(|kv| kv.split_once('=').map_or(kv, |(k, _)| k))
            .find(|k| !self.query.contains(k))
    }
}

use Access::{Open, OpenWithIssuers, Token};

/// What a call's routes answer: the call ran (200), or it waits for approvers or resume data
/// (202).
const CALL_OUTCOME: &[(u16, TypeOf)] = &[
    (200, TypeOf::of::<api::CallCompleted>()),
    (202, TypeOf::of::<api::CallWaiting>()),
];

/// Every route, in the order the document lists them.
pub(crate) const ROUTES: &[Route] = &[
    route(Method::GET, "/", Op::Root, Open),
    route(Method::GET, "/favicon.ico", Op::Favicon, Open),
    route(Method::GET, "/healthz", Op::Healthz, Open)
        .answers(&[(200, TypeOf::of::<api::Health>())]),
    route(Method::GET, "/readyz", Op::Readyz, Open).answers(&[(200, TypeOf::of::<api::Ready>())]),
    route(Method::GET, "/metrics", Op::Metrics, Open),
    route(Method::GET, "/v1/openapi.json", Op::OpenApi, Open)
        .answers(&[(200, TypeOf::of::<api::OpenApiDocument>())]),
    route(
        Method::GET,
        "/.well-known/oauth-protected-resource",
        Op::ProtectedResource,
        OpenWithIssuers,
    )
    .answers(&[(200, TypeOf::of::<api::ProtectedResourceMetadata>())]),
    route(
        Method::GET,
        "/.well-known/oauth-protected-resource/mcp",
        Op::ProtectedResourceMcp,
        OpenWithIssuers,
    )
    .answers(&[(200, TypeOf::of::<api::ProtectedResourceMetadata>())]),
    route(Method::POST, "/v1/calls", Op::CreateCall, Token)
        .body(TypeOf::of::<api::CallRequest>(), true)
        .answers(CALL_OUTCOME),
    route(Method::GET, "/v1/calls", Op::ListCalls, Token)
        .query(&["status"])
        .answers(&[(200, TypeOf::of::<api::SuspendedCalls>())]),
    route(Method::GET, "/v1/calls/{call_id}", Op::GetCall, Token)
        .query(&["wait"])
        .answers(CALL_OUTCOME),
    route(
        Method::POST,
        "/v1/calls/{call_id}/resume",
        Op::ResumeCall,
        Token,
    )
    .query(&["wait"])
    .body(TypeOf::of::<api::ResumeRequest>(), false)
    .answers(CALL_OUTCOME),
    route(
        Method::POST,
        "/v1/calls/{call_id}/cancel",
        Op::CancelCall,
        Token,
    )
    .answers(&[(200, TypeOf::of::<api::CallCancelled>())]),
    route(
        Method::POST,
        "/v1/runs/{run_id}/resume",
        Op::ResumeRun,
        Token,
    )
    .body(TypeOf::of::<api::RunResumeRequest>(), true)
    .answers(CALL_OUTCOME),
    route(
        Method::GET,
        "/v1/runs/{run_id}/stream",
        Op::StreamRun,
        Token,
    ),
    route(
        Method::POST,
        "/v1/runs/{run_id}/approve",
        Op::ApproveRun,
        Token,
    )
    .body(TypeOf::of::<api::RunApproveRequest>(), false)
    .answers(&[(200, TypeOf::of::<api::RunDecisions>())]),
    route(
        Method::POST,
        "/v1/runs/{run_id}/decline",
        Op::DeclineRun,
        Token,
    )
    .body(TypeOf::of::<api::RunDeclineRequest>(), true)
    .answers(&[(200, TypeOf::of::<api::RunDecisions>())]),
    route(Method::GET, "/v1/approvals", Op::ListApprovals, Token)
        .query(&["status", "tool", "run_id", "principal", "cursor", "limit"])
        .answers(&[(200, TypeOf::of::<api::ApprovalPage>())]),
    route(
        Method::POST,
        "/v1/approvals/decline",
        Op::DeclinePrincipal,
        Token,
    )
    .body(TypeOf::of::<api::DeclinePrincipalRequest>(), true)
    .answers(&[(200, TypeOf::of::<api::RunDecisions>())]),
    route(Method::GET, "/v1/approvals/{id}", Op::GetApproval, Token)
        .answers(&[(200, TypeOf::of::<api::Approval>())]),
    route(
        Method::POST,
        "/v1/approvals/{id}/approve",
        Op::Approve,
        Token,
    )
    .body(TypeOf::of::<api::ApproveRequest>(), false)
    .answers(&[(200, TypeOf::of::<api::Approval>())]),
    route(
        Method::POST,
        "/v1/approvals/{id}/decline",
        Op::Decline,
        Token,
    )
    .body(TypeOf::of::<api::DeclineRequest>(), true)
    .answers(&[(200, TypeOf::of::<api::Approval>())]),
    route(Method::GET, "/v1/events", Op::Events, Token),
    route(Method::GET, "/v1/policy", Op::GetPolicy, Token)
        .answers(&[(200, TypeOf::of::<api::Policy>())]),
    route(
        Method::POST,
        "/v1/policy/evaluate",
        Op::EvaluatePolicy,
        Token,
    )
    .body(TypeOf::of::<api::EvaluateRequest>(), true)
    .answers(&[(200, TypeOf::of::<api::PolicyDecision>())]),
    route(Method::POST, "/v1/policy/reload", Op::ReloadPolicy, Token)
        .answers(&[(200, TypeOf::of::<api::PolicyVersion>())]),
    route(Method::GET, "/v1/policy/shadow", Op::GetShadow, Token)
        .answers(&[(200, TypeOf::of::<api::ShadowSummary>())]),
    route(Method::GET, "/v1/grants", Op::ListGrants, Token)
        .answers(&[(200, TypeOf::of::<api::Grants>())]),
    route(Method::DELETE, "/v1/grants/{id}", Op::RevokeGrant, Token)
        .answers(&[(200, TypeOf::of::<api::RevokedGrant>())]),
    route(Method::GET, "/v1/tools", Op::ListTools, Token)
        .answers(&[(200, TypeOf::of::<api::Tools>())]),
    route(Method::GET, "/v1/tools/{name}", Op::GetTool, Token)
        .answers(&[(200, TypeOf::of::<api::Tool>())]),
    route(
        Method::POST,
        "/v1/tools/{name}/review",
        Op::ReviewTool,
        Token,
    )
    .answers(&[(200, TypeOf::of::<api::Approval>())]),
    route(Method::GET, "/v1/webhooks", Op::ListWebhooks, Token)
        .answers(&[(200, TypeOf::of::<api::Webhooks>())]),
    route(
        Method::POST,
        "/v1/webhooks/{id}/enable",
        Op::EnableWebhook,
        Token,
    )
    .answers(&[(200, TypeOf::of::<api::WebhookEnabled>())]),
    route(
        Method::POST,
        "/v1/webhooks/{id}/test",
        Op::TestWebhook,
        Token,
    )
    .answers(&[(202, TypeOf::of::<api::WebhookTestQueued>())]),
    route(Method::GET, "/v1/audit", Op::ListAudit, Token)
        .query(&["after", "limit"])
        .answers(&[(200, TypeOf::of::<api::AuditPage>())]),
    route(Method::GET, "/v1/audit/export", Op::ExportAudit, Token).query(&["after"]),
    route(Method::POST, "/v1/audit/prune", Op::PruneAudit, Token)
        .body(TypeOf::of::<api::PruneRequest>(), true)
        .answers(&[(200, TypeOf::of::<api::Pruned>())]),
];

/// What the table says of a request's method and path.
pub(crate) enum Lookup<'p> {
    /// The route, and its `{name}` segments in order (as sent, still percent-encoded).
    Route(&'static Route, Vec<&'p str>),
    /// A known path that does not take this method; the methods it takes, for `Allow`.
    WrongMethod(String),
    NotFound,
}

/// Looks a request up. `with_issuers` says whether the [`Access::OpenWithIssuers`] routes exist.
/// A path that a route names literally (`/v1/approvals/decline`) is that route's alone: it is
/// never read as a template's parameter (`/v1/approvals/{id}`), whatever the method.
pub(crate) fn find<'p>(method: &Method, path: &'p str, with_issuers: bool) -> Lookup<'p> {
    let segments: Vec<&str> = path.trim_matches('/').split('/').collect();
    let mut allowed: Vec<&str> = Vec::new();
    let routes = || {
        ROUTES
            .iter()
            .filter(|r| r.access != OpenWithIssuers || with_issuers)
    };
    let literal = routes().any(|r| matches(r.path, &segments).is_some_and(|p| p.is_empty()));
    for r in routes() {
        let Some(params) = matches(r.path, &segments) else {
            continue;
        };
        if literal && !params.is_empty() {
            continue;
        }
        if r.method == *method {
            return Lookup::Route(r, params);
        }
        if !allowed.contains(&r.method.as_str()) {
            allowed.push(r.method.as_str());
        }
    }
    if allowed.is_empty() {
        Lookup::NotFound
    } else {
        Lookup::WrongMethod(allowed.join(", "))
    }
}

/// The `{name}` segments of `segments` if they fit the template.
fn matches<'p>(template: &str, segments: &[&'p str]) -> Option<Vec<&'p str>> {
    let parts: Vec<&str> = template.trim_matches('/').split('/').collect();
    if parts.len() != segments.len() {
        return None;
    }
    let mut params = Vec::new();
    for (part, seg) in parts.iter().zip(segments) {
        if part.starts_with('{') {
            if seg.is_empty() {
                return None;
            }
            params.push(*seg);
        } else if part != seg {
            return None;
        }
    }
    Some(params)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_op_has_exactly_one_route_and_paths_do_not_shadow_each_other() {
        let mut seen = std::collections::HashSet::new();
        for r in ROUTES {
            assert!(seen.insert(r.op), "{:?} twice", r.op);
            // A request for the route's own path finds that route, not an earlier one.
            let concrete = r.path.replace("{call_id}", "c1").replace("{run_id}", "r1");
            let concrete = concrete.replace("{id}", "x1");
            match find(&r.method, &concrete, true) {
                Lookup::Route(found, _) => assert_eq!(found.op, r.op, "{}", r.path),
                _ => panic!("{} {} not found", r.method, r.path),
            }
        }
    }

    #[test]
    fn a_known_path_with_another_method_lists_its_methods_and_unknown_paths_are_not_found() {
        assert!(matches!(
            find(&Method::DELETE, "/v1/calls", false),
            Lookup::WrongMethod(m) if m == "POST, GET"
        ));
        match find(&Method::GET, "/v1/calls/abc%2F1", false) {
            Lookup::Route(r, p) => {
                assert_eq!(r.op, Op::GetCall);
                assert_eq!(p, ["abc%2F1"]);
            }
            _ => panic!("not found"),
        }
        assert!(matches!(
            find(&Method::GET, "/v1/nothing", false),
            Lookup::NotFound
        ));
        assert!(matches!(
            find(&Method::GET, "/.well-known/oauth-protected-resource", false),
            Lookup::NotFound
        ));
        // A trailing slash is the same path, as it always was.
        assert!(matches!(
            find(&Method::GET, "/v1/approvals/", false),
            Lookup::Route(r, _) if r.op == Op::ListApprovals
        ));
    }
}
