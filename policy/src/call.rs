//! A tool call as every front end hands it to the pipeline: strictly parsed, validated and
//! fingerprinted.
//!
//! It takes the JSON body `{"tool","args","context"?}` (or the parts, for the command line) and
//! gives a [`ToolCall`] whose `canonical_args` are the exact bytes the backend will receive.
//! It does not authenticate, decide or talk to anything.

use serde_json::{Map, Value};

use crate::canonical::{self, Fingerprint};
use crate::error::RequestError;
use crate::json;

/// How deep `args` may nest; `args` itself is level 1 (DESIGN §3).
pub const MAX_ARGS_DEPTH: usize = 64;

/// The context keys a caller may send; anything else is refused.
const CONTEXT_KEYS: [&str; 5] = ["agent_id", "run_id", "thread_id", "tool_call_id", "labels"];

/// A validated tool call.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolCall {
    pub tool: String,
    /// Always a JSON object.
    pub args: Value,
    /// Always a JSON object, empty when the caller sent none.
    pub context: Value,
    /// RFC 8785 form of `args`: what is fingerprinted and what the backend receives.
    pub canonical_args: String,
    pub fingerprint: Fingerprint,
    /// What an MCP request of another kind than a tool call asks (its kind, upstream and
    /// URI or prompt); `None` for a tool call. Boxed: a tool call, the common case, carries
    /// one pointer's worth of it through every stage.
    pub request: Option<Box<crate::OwnedRequest>>,
}

impl ToolCall {
    /// Builds a call from parts that are already parsed strictly.
    pub fn new(tool: &str, args: Value, context: Option<Value>) -> Result<ToolCall, RequestError> {
        canonical::validate_tool_name(tool)?;
        if !args.is_object() {
            return Err(RequestError::InvalidArgs);
        }
        let context = validate_context(context.unwrap_or_else(|| Value::Object(Map::new())))?;
        let (canonical_args, fingerprint) = canonical::fingerprint(tool, &args);
        Ok(ToolCall {
            tool: tool.to_owned(),
            args,
            context,
            canonical_args,
            fingerprint,
            request: None,
        })
    }

    /// An MCP request of another kind than a tool call, as policy judges it: `params` (the
    /// request's params without `_meta`) in the place of args, no tool name, fingerprinted
    /// over `{"kind", "target", "params"}` ([`canonical::request_fingerprint`]).
    pub fn request(
        request: crate::OwnedRequest,
        params: Value,
        context: Option<Value>,
    ) -> Result<ToolCall, RequestError> {
        if !params.is_object() {
            return Err(RequestError::InvalidArgs);
        }
        let context = validate_context(context.unwrap_or_else(|| Value::Object(Map::new())))?;
        let canonical_args = canonical::canonicalize(&params);
        let fingerprint =
            canonical::request_fingerprint(request.kind.as_str(), request.target(), &params);
        Ok(ToolCall {
            tool: String::new(),
            args: params,
            context,
            canonical_args,
            fingerprint,
            request: Some(Box::new(request)),
        })
    }

    /// A recorded call built again from its parts: a tool call of `tool`, or `request` with
    /// `args` as its params.
    pub fn again(
        tool: &str,
        request: Option<&crate::OwnedRequest>,
        args: Value,
        context: Option<Value>,
    ) -> Result<ToolCall, RequestError> {
        match request {
            Some(r) => ToolCall::request(r.clone(), args, context),
            None => ToolCall::new(tool, args, context),
        }
    }

    /// What policy judges this call as: a tool call, or the request it carries.
    pub fn judged_as(&self) -> crate::Request<'_> {
        self.request
            .as_ref()
            .map_or(crate::Request::TOOL, |r| r.as_request())
    }

    /// Parses a request body `{"tool","args","context"?}`.
    pub fn from_body(body: &[u8]) -> Result<ToolCall, RequestError> {
        // The body object is one level above `args`.
        let value = json::parse(body, MAX_ARGS_DEPTH + 1).map_err(|e| match e {
            RequestError::TooDeep { .. } => RequestError::TooDeep {
                limit: MAX_ARGS_DEPTH,
            },
            other => other,
        })?;
        let Value::Object(mut fields) = value else {
            return Err(RequestError::InvalidJson {
                offset: 0,
                reason: "the body must be a JSON object",
            });
        };
        if let Some(field) = fields
            .keys()
            .find(|k| !matches!(k.as_str(), "tool" | "args" | "context"))
        {
            let hint = match crate::near::nearest(field, &["tool", "args", "context"]) {
                Some(n) => format!(" (did you mean `{n}`?)"),
                None if field == "arguments" || field == "params" || field == "input" => {
                    " (the tool's arguments go in `args`)".to_owned()
                }
                None => String::new(),
            };
            return Err(RequestError::UnknownField {
                field: field.clone(),
                hint,
            });
        }
        let tool = match fields.remove("tool") {
            Some(Value::String(tool)) => tool,
            Some(other) => {
                return Err(RequestError::InvalidTool {
                    tool: other.to_string().chars().take(200).collect(),
                })
            }
            None => {
                return Err(RequestError::InvalidTool {
                    tool: String::new(),
                })
            }
        };
        let args = fields.remove("args").ok_or(RequestError::InvalidArgs)?;
        ToolCall::new(&tool, args, fields.remove("context"))
    }

    /// Parses args alone (as `airlock fingerprint --args` takes them) and builds the call.
    pub fn from_args_json(tool: &str, args: &[u8]) -> Result<ToolCall, RequestError> {
        let args = json::parse(args, MAX_ARGS_DEPTH)?;
        ToolCall::new(tool, args, None)
    }

    /// `context.run_id`, when the caller sent one.
    pub fn run_id(&self) -> Option<&str> {
        self.context.get("run_id").and_then(Value::as_str)
    }
}

fn validate_context(context: Value) -> Result<Value, RequestError> {
    let invalid = |reason: String| RequestError::InvalidContext { reason };
    let Value::Object(map) = &context else {
        return Err(invalid("it must be a JSON object".into()));
    };
    for (key, value) in map {
        match key.as_str() {
            "labels" => {
                let ok = value
                    .as_object()
                    .is_some_and(|labels| labels.values().all(Value::is_string));
                if !ok {
                    return Err(invalid("`labels` must be an object of strings".into()));
                }
            }
            k if CONTEXT_KEYS.contains(&k) => {
                if !value.is_string() {
                    return Err(invalid(format!("`{k}` must be a string")));
                }
            }
            other => return Err(invalid(format!("unknown key `{other}`"))),
        }
    }
    Ok(context)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn code(body: &str) -> &'static str {
        ToolCall::from_body(body.as_bytes())
            .map(|_| "ok")
            .unwrap_or_else(|e| e.code())
    }

    #[test]
    fn body_classes() {
        assert_eq!(
            code(r#"{"tool":"a.b","args":{"x":1},"context":{"run_id":"r1"}}"#),
            "ok"
        );
        assert_eq!(code(r#"{"tool":"a.b","args":[]}"#), "request.invalid_args");
        assert_eq!(code(r#"{"tool":"a.b"}"#), "request.invalid_args");
        assert_eq!(code(r#"{"tool":"a b","args":{}}"#), "request.invalid_tool");
        assert_eq!(code(r#"{"tool":7,"args":{}}"#), "request.invalid_tool");
        assert_eq!(code(r#"{"args":{}}"#), "request.invalid_tool");
        assert_eq!(
            code(r#"{"tool":"a","args":{},"extra":1}"#),
            "request.unknown_field"
        );
        assert_eq!(
            code(r#"{"tool":"a","args":{},"context":{"who":"x"}}"#),
            "request.invalid_context"
        );
        assert_eq!(
            code(r#"{"tool":"a","args":{},"context":{"run_id":1}}"#),
            "request.invalid_context"
        );
        assert_eq!(
            code(r#"{"tool":"a","args":{},"context":[]}"#),
            "request.invalid_context"
        );
        assert_eq!(code(r#"[1]"#), "request.invalid_json");
        assert_eq!(
            code(r#"{"tool":"a","args":{"a":1,"a":1}}"#),
            "request.duplicate_key"
        );
    }

    #[test]
    fn args_depth_counts_args_as_level_one() {
        let nest = |n: usize| {
            let inner = format!("{}{}", "[".repeat(n - 1), "]".repeat(n - 1));
            format!(r#"{{"tool":"t","args":{{"k":{inner}}}}}"#)
        };
        assert_eq!(code(&nest(64)), "ok");
        let err = ToolCall::from_body(nest(65).as_bytes()).unwrap_err();
        assert_eq!(err, RequestError::TooDeep { limit: 64 });
    }
}
