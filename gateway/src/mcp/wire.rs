//! JSON-RPC 2.0 on the MCP endpoint: strict parsing of one message (the same strict parser as
//! the HTTP API, so a duplicate key or an unsafe number is caught everywhere in the message),
//! telling an intake problem inside `arguments` (`-32602`) from one elsewhere (`-32600`), and
//! building responses and notifications.
//!
//! It knows no MCP method; [`super`] dispatches.

use airlock_policy::{json as strict_json, MAX_ARGS_DEPTH};
use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{json, Value};

use crate::error::Code;

pub const PARSE_ERROR: i64 = -32700;
pub const INVALID_REQUEST: i64 = -32600;
pub const METHOD_NOT_FOUND: i64 = -32601;
pub const INVALID_PARAMS: i64 = -32602;
pub const HEADER_MISMATCH: i64 = -32020;
/// A request needs a client capability the client did not declare (SEP-2575).
pub const MISSING_CAPABILITY: i64 = -32021;
pub const UNSUPPORTED_PROTOCOL_VERSION: i64 = -32022;

/// A JSON-RPC error, with the id of the message it answers (when it could be read).
#[derive(Debug, Clone, PartialEq)]
pub struct RpcError {
    pub id: Value,
    pub code: i64,
    pub message: String,
    pub data: Option<Value>,
}

impl RpcError {
    pub fn new(id: Value, code: i64, message: impl Into<String>) -> RpcError {
        RpcError {
            id,
            code,
            message: message.into(),
            data: None,
        }
    }

    pub fn with_data(mut self, data: Value) -> RpcError {
        self.data = Some(data);
        self
    }

    /// An intake refusal: `data.code` is the stable airlock code.
    pub fn intake(id: Value, code: i64, e: &airlock_policy::RequestError) -> RpcError {
        RpcError::new(id, code, e.to_string()).with_data(json!({"code": e.code()}))
    }

    pub fn to_json(&self) -> Value {
        let mut error = json!({"code": self.code, "message": self.message});
        if let Some(d) = &self.data {
            error["data"] = d.clone();
        }
        json!({"jsonrpc": "2.0", "id": self.id, "error": error})
    }
}

/// One message from the client.
#[derive(Debug, Clone, PartialEq)]
pub struct Message {
    /// Absent for a notification.
    pub id: Option<Value>,
    /// Absent for a response to one of our requests.
    pub method: Option<String>,
    pub params: Value,
    /// A response's `{"result": …}` or `{"error": …}`.
    pub response: Option<Value>,
}

impl Message {
    pub fn id(&self) -> Value {
        self.id.clone().unwrap_or(Value::Null)
    }
}

#[derive(Deserialize)]
struct Lenient<'a> {
    #[serde(borrow, default)]
    params: Option<LenientParams<'a>>,
    #[serde(default)]
    id: Option<Value>,
}

#[derive(Deserialize)]
struct LenientParams<'a> {
    #[serde(borrow, default)]
    arguments: Option<&'a RawValue>,
}

/// The value at `keys` inside nested objects, as `Value::pointer` finds it for a path of
/// plain keys, without building the path's strings (it is read several times per call).
pub fn at<'a>(v: &'a Value, keys: &[&str]) -> Option<&'a Value> {
    keys.iter().try_fold(v, |v, k| v.get(*k))
}

/// Parses one message strictly. A refusal inside `params.arguments` is `-32602` with the §3
/// code in `data.code`; a duplicate key, unsafe number or excess depth elsewhere is `-32600`
/// with the code; bytes that are not JSON are `-32700`.
pub fn parse(body: &[u8]) -> Result<Message, RpcError> {
    let value = match strict_json::parse(body, MAX_ARGS_DEPTH + 3) {
        Ok(v) => v,
        Err(e) if e.code() == Code::RequestInvalidJson.as_str() => {
            return Err(RpcError::intake(Value::Null, PARSE_ERROR, &e));
        }
        Err(e) => {
            let lenient: Option<Lenient> = serde_json::from_slice(body).ok();
            let id = lenient
                .as_ref()
                .and_then(|l| l.id.clone())
                .unwrap_or(Value::Null);
            let in_arguments = lenient
                .as_ref()
                .and_then(|l| l.params.as_ref())
                .and_then(|p| p.arguments)
                .and_then(|raw| strict_json::parse(raw.get().as_bytes(), MAX_ARGS_DEPTH).err());
            return Err(match in_arguments {
                Some(inner) => RpcError::intake(id, INVALID_PARAMS, &inner),
                None => RpcError::intake(id, INVALID_REQUEST, &e),
            });
        }
    };
    let Value::Object(mut m) = value else {
        return Err(RpcError::new(
            Value::Null,
            INVALID_REQUEST,
            "a message must be one JSON-RPC object (batches are not supported)",
        ));
    };
    let id = m.remove("id");
    let id_for_errors = id.clone().unwrap_or(Value::Null);
    if m.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
        return Err(RpcError::new(
            id_for_errors,
            INVALID_REQUEST,
            "`jsonrpc` must be \"2.0\"",
        ));
    }
    if let Some(i) = &id {
        if !(i.is_string() || i.is_i64() || i.is_u64()) {
            return Err(RpcError::new(
                Value::Null,
                INVALID_REQUEST,
                "`id` must be a string or an integer",
            ));
        }
    }
    let method = match m.remove("method") {
        None => None,
        Some(Value::String(s)) => Some(s),
        Some(_) => {
            return Err(RpcError::new(
                id_for_errors,
                INVALID_REQUEST,
                "`method` must be a string",
            ))
        }
    };
    if method.is_none() && !(m.contains_key("result") || m.contains_key("error")) {
        return Err(RpcError::new(
            id_for_errors,
            INVALID_REQUEST,
            "a message needs a `method` (or is a response with `result` or `error`)",
        ));
    }
    let response = if method.is_none() {
        ["result", "error"]
            .into_iter()
            .find_map(|k| m.get(k).map(|v| json!({k: v})))
    } else {
        None
    };
    let params = match m.remove("params") {
        None => json!({}),
        Some(p @ Value::Object(_)) => p,
        Some(_) => {
            return Err(RpcError::new(
                id_for_errors,
                INVALID_PARAMS,
                "`params` must be an object",
            ))
        }
    };
    Ok(Message {
        id,
        method,
        params,
        response,
    })
}

/// A result message.
pub fn result(id: Value, result: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "result": result})
}

/// A result message written straight to bytes, the same text as [`result`]'s (keys in the
/// same order), without building the message as a tree first.
pub fn result_bytes(id: &Value, result: &Value) -> Vec<u8> {
    #[derive(serde::Serialize)]
    struct Out<'a> {
        id: &'a Value,
        jsonrpc: &'static str,
        result: &'a Value,
    }
    serde_json::to_vec(&Out {
        id,
        jsonrpc: "2.0",
        result,
    })
    .unwrap_or_default()
}

/// A notification message.
pub fn notification(method: &str, params: Value) -> Value {
    json!({"jsonrpc": "2.0", "method": method, "params": params})
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    /// The result written straight to bytes is the very text of the result message.
    #[test]
    fn result_bytes_are_the_result_messages_text() {
        for (id, result) in [
            (
                json!(1),
                json!({"content": [{"type": "text", "text": "a\"b"}], "isError": false}),
            ),
            (
                json!("req-7"),
                json!({"resultType": "complete", "z": null, "a": [1.5, -2]}),
            ),
        ] {
            let tree = serde_json::to_vec(&super::result(id.clone(), result.clone())).unwrap();
            assert_eq!(
                String::from_utf8(result_bytes(&id, &result)).unwrap(),
                String::from_utf8(tree).unwrap()
            );
        }
    }

    fn code_of(body: &str) -> (i64, Option<String>) {
        let e = parse(body.as_bytes()).unwrap_err();
        (
            e.code,
            e.data
                .and_then(|d| d.get("code").and_then(Value::as_str).map(str::to_owned)),
        )
    }

    #[test]
    fn intake_problems_are_placed_where_they_are() {
        let call = |args: &str| {
            format!(
                r#"{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{{"name":"a.b","arguments":{args}}}}}"#
            )
        };
        assert_eq!(
            code_of(&call(r#"{"x":1,"x":2}"#)),
            (INVALID_PARAMS, Some("request.duplicate_key".into()))
        );
        assert_eq!(
            code_of(&call(r#"{"x":9007199254740993}"#)),
            (INVALID_PARAMS, Some("request.unsafe_number".into()))
        );
        assert_eq!(
            code_of(r#"{"jsonrpc":"2.0","id":1,"id":2,"method":"ping"}"#),
            (INVALID_REQUEST, Some("request.duplicate_key".into()))
        );
        assert_eq!(
            code_of(
                r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"a","name":"b","arguments":{}}}"#
            ),
            (INVALID_REQUEST, Some("request.duplicate_key".into()))
        );
        assert_eq!(code_of("{nope").0, PARSE_ERROR);
        assert_eq!(
            code_of(r#"[{"jsonrpc":"2.0","id":1,"method":"ping"}]"#).0,
            INVALID_REQUEST
        );
        assert_eq!(
            code_of(r#"{"jsonrpc":"1.0","id":1,"method":"ping"}"#).0,
            INVALID_REQUEST
        );
        assert_eq!(
            code_of(r#"{"jsonrpc":"2.0","id":1,"method":"ping","params":[1]}"#).0,
            INVALID_PARAMS
        );
        let deep = format!("{}{}", "[".repeat(70), "]".repeat(70));
        assert_eq!(
            code_of(&call(&format!(r#"{{"a":{deep}}}"#))),
            (INVALID_PARAMS, Some("request.too_deep".into()))
        );
        let ok = parse(call(r#"{"x":1}"#).as_bytes()).unwrap();
        assert_eq!(ok.method.as_deref(), Some("tools/call"));
        assert_eq!(ok.id, Some(json!(1)));
    }
}
