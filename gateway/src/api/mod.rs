//! The JSON API's bodies as types: what every `/v1` route reads and what it answers, with the
//! error envelope. Answers derive `Serialize`, requests `Deserialize` (refusing unknown
//! fields), and both `JsonSchema`: the OpenAPI document's `components/schemas` are derived
//! from these types (`crate::http::openapi`), so a field added here is documented, and a
//! field the document names is one the handler writes.
//!
//! Descriptions are the types' doc comments; constraints the Rust type cannot say (a pattern,
//! a minimum, a date-time) are `schemars` attributes beside the field; each answer carries an
//! example built through the same conversion the handler uses, which a test validates
//! against the document.
//!
//! It holds no handlers and reads no store: the handlers (`crate::http`) build these from the
//! pipeline's and the store's values.

mod admin;
mod approvals;
mod calls;
mod open;

use schemars::JsonSchema;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::error::{ApiError, Code};

pub(crate) use admin::*;
pub(crate) use approvals::*;
pub(crate) use calls::*;
pub(crate) use open::*;

/// Any JSON value whose numbers survive a double unchanged: within ±(2^53−1) (larger integers
/// are refused as `request.unsafe_number`), nested at most 64 deep (`request.too_deep`), with
/// no duplicate keys (`request.duplicate_key`).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(transparent)]
pub(crate) struct Json(pub Value);

impl JsonSchema for Json {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "Json".into()
    }

    // Written without `anyOf` and without `type`: each keyword applies to its own kind of value
    // (numbers, arrays, objects), which is the same set of values, in a form both generators
    // of clients and generators of test data read.
    fn json_schema(generator: &mut schemars::SchemaGenerator) -> schemars::Schema {
        let json = generator.subschema_for::<Json>();
        schemars::json_schema!({
            "description": "Any JSON value whose numbers survive a double unchanged: within \
                ±(2^53−1) (larger integers are refused as `request.unsafe_number`), nested at \
                most 64 deep (`request.too_deep`), with no duplicate keys (`request.duplicate_key`).",
            "minimum": -9007199254740991_i64,
            "maximum": 9007199254740991_i64,
            "items": json,
            "additionalProperties": json,
        })
    }
}

/// Where the examples' inbox links point: a gateway on its default address.
pub(crate) const EXAMPLE_INBOX: &str = "http://127.0.0.1:8080/inbox/{}";

/// A time as RFC 3339 (UTC, milliseconds).
#[derive(Debug, Clone, Serialize, JsonSchema)]
#[serde(transparent)]
#[schemars(inline, extend("format" = "date-time"))]
pub(crate) struct Time(pub String);

impl Time {
    pub(crate) fn of(ms: u64) -> Time {
        Time(crate::clock::rfc3339(ms))
    }
}

/// Every refusal: `{"error": {"code", "message", "details"}}` with a stable code. Each
/// response of the document lists the codes its status can carry.
#[derive(Debug, Serialize, JsonSchema)]
pub(crate) struct ErrorBody {
    pub error: ErrorDetail,
}

#[derive(Debug, Serialize, JsonSchema)]
pub(crate) struct ErrorDetail {
    #[schemars(with = "String")]
    pub code: Code,
    pub message: String,
    #[schemars(with = "serde_json::Map<String, Value>")]
    pub details: Value,
}

/// Lists `fields` as required in a request's schema, where the handler refuses their absence
/// with the code of its own (serde would say `request.missing_field`).
fn required(schema: &mut schemars::Schema, fields: &[&str]) {
    let list: Vec<Value> = fields.iter().map(|f| Value::from(*f)).collect();
    schema.insert("required".into(), Value::Array(list));
}

/// A present field's value, `null` included; a field left out is `None` (serde's `Option`
/// alone reads `null` as left out).
pub(crate) fn given<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<Value>, D::Error> {
    Value::deserialize(d).map(Some)
}

/// A request body as its type: not an object is `request.invalid_json`, a field the type does
/// not have `request.unknown_field` (before any other refusal, so a misspelt field is never
/// read as left out), a field of the wrong kind `request.invalid_field`, a required one left
/// out `request.missing_field`.
pub(crate) fn parse<T: DeserializeOwned + JsonSchema>(body: Value) -> Result<T, ApiError> {
    let Some(fields) = body.as_object() else {
        return Err(ApiError::new(
            Code::RequestInvalidJson,
            "the body must be a JSON object",
        ));
    };
    let schema = schemars::SchemaGenerator::default().into_root_schema_for::<T>();
    let known: Vec<&str> = schema
        .get("properties")
        .and_then(Value::as_object)
        .map(|p| p.keys().map(String::as_str).collect())
        .unwrap_or_default();
    if let Some(k) = fields.keys().find(|k| !known.contains(&k.as_str())) {
        return Err(ApiError::new(
            Code::RequestUnknownField,
            format!("unknown field `{k}`; this route takes {}", known.join(", ")),
        ));
    }
    serde_path_to_error::deserialize(body).map_err(|e| {
        let field = e.path().to_string();
        let inner = e.into_inner().to_string();
        let code = if inner.starts_with("missing field") {
            Code::RequestMissingField
        } else {
            Code::RequestInvalidField
        };
        ApiError::new(code, format!("`{field}`: {inner}"))
    })
}

/// How a refusal leaves over HTTP: its status, the error envelope, and the headers it asks
/// for (`Retry-After`, `WWW-Authenticate`, `Allow`).
impl ApiError {
    pub fn into_response(self) -> hyper::Response<crate::body::Body> {
        let status = self.status();
        let retry_after = self.retry_after;
        let challenge = self.challenge.clone();
        let allow = self.allow.clone();
        let body = ErrorBody {
            error: ErrorDetail {
                code: self.code,
                message: self.message,
                details: self.details,
            },
        };
        let mut r = crate::body::json_response(status, &body);
        if let Some(s) = retry_after {
            if let Ok(v) = hyper::header::HeaderValue::from_str(&s.to_string()) {
                r.headers_mut().insert(hyper::header::RETRY_AFTER, v);
            }
        }
        if let Some(v) = challenge.and_then(|c| hyper::header::HeaderValue::from_str(&c).ok()) {
            r.headers_mut().insert(hyper::header::WWW_AUTHENTICATE, v);
        }
        if let Some(v) = allow.and_then(|a| hyper::header::HeaderValue::from_str(&a).ok()) {
            r.headers_mut().insert(hyper::header::ALLOW, v);
        }
        r
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn refused<T: DeserializeOwned + JsonSchema + std::fmt::Debug>(body: Value) -> (Code, String) {
        let e = parse::<T>(body).expect_err("refused");
        (e.code, e.message)
    }

    #[test]
    fn each_class_of_bad_body_gets_its_code() {
        let (code, _) = refused::<ApproveRequest>(json!(["reason"]));
        assert_eq!(code, Code::RequestInvalidJson);
        // An unknown field is named before a field of the wrong kind, wherever it is.
        let (code, message) = refused::<ApproveRequest>(json!({"reason": 5, "reasn": "x"}));
        assert_eq!(code, Code::RequestUnknownField);
        assert!(
            message.contains("`reasn`") && message.contains("grant"),
            "{message}"
        );
        let (code, message) = refused::<ApproveRequest>(json!({"reason": 5}));
        assert_eq!(code, Code::RequestInvalidField);
        assert!(message.starts_with("`reason`"), "{message}");
        let (code, message) = refused::<PruneRequest>(json!({"before": -1}));
        assert_eq!(code, Code::RequestInvalidField);
        assert!(message.starts_with("`before`"), "{message}");
        let (code, _) = refused::<RunResumeRequest>(json!({"tool_call_id": 7}));
        assert_eq!(code, Code::RequestInvalidField);
    }

    #[test]
    fn a_field_given_as_null_is_told_from_one_left_out() {
        let r: EvaluateRequest = parse(json!({"tool": "t", "definition": null})).unwrap();
        assert_eq!(r.definition, Some(Value::Null));
        assert_eq!(r.resume, None);
        let r: ResumeRequest = parse(json!({"resume_data": null})).unwrap();
        assert_eq!(r.resume_data, Some(Value::Null));
        let r: ResumeRequest = parse(json!({})).unwrap();
        assert_eq!(r.resume_data, None);
        // Left out where the handler refuses it with a code of its own.
        let r: DeclineRequest = parse(json!({})).unwrap();
        assert_eq!(r.reason, None);
        let r: PruneRequest = parse(json!({"chain": null})).unwrap();
        assert_eq!((r.before, r.chain), (None, None));
    }
}
