//! One CEL expression evaluated the way a rule's condition is (the same environment, the
//! same load-time checks, the same budget), with its inputs and its answer in the typed JSON
//! of CEL's conformance suite (`{"int64Value": "1"}`, `{"listValue": {"values": […]}}`…).
//!
//! It exists so that airlock's CEL can be checked against the specification's own tests and
//! the reference implementation: a policy's conditions are booleans over JSON, but the
//! semantics underneath (integer overflow, heterogeneous equality, string functions) are the
//! whole language's. Nothing on the call path uses it.

use std::collections::HashMap;
use std::sync::Arc;

use base64::Engine as _;
use cel::objects::{Key, Map};
use cel::{Context, Value as Cel};
use serde_json::{json, Value};

use crate::budget::{meter, Meter};

/// Why an expression gave no value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ExpressionError {
    /// Refused before it ran, as a policy load would refuse it: its code and message.
    Refused(&'static str, String),
    /// It ran and failed (a runtime error, or the budget ran out).
    Failed(String),
    /// A binding or a result this module cannot express (protobuf messages, types).
    Unsupported(String),
}

/// Evaluates `src` with `bindings` (name → typed JSON value) under `budget` steps.
pub fn evaluate_expression(
    src: &str,
    bindings: &[(String, Value)],
    budget: u64,
) -> Result<Value, ExpressionError> {
    let env = crate::cel::shared_env().map_err(ExpressionError::Unsupported)?;
    let program = env
        .compile(src)
        .map_err(|e| ExpressionError::Refused("policy.cel_syntax", e.to_string()))?;
    if let Some(bad) = crate::functions::check_calls(program.expression())
        .into_iter()
        .next()
    {
        return Err(ExpressionError::Refused(bad.code, bad.message));
    }
    let metered = meter(program.expression());
    let mut ctx = Context::with_env(env);
    for (name, typed) in bindings {
        ctx.add_variable_from_value(name.clone(), from_typed(typed)?);
    }
    let run = Meter::start(budget);
    if !run.charge(metered.once) {
        return Err(ExpressionError::Failed(crate::budget::EXHAUSTED.into()));
    }
    let result = Cel::resolve(&metered.expr, &ctx);
    if run.refused() > 0 {
        return Err(ExpressionError::Failed(crate::budget::EXHAUSTED.into()));
    }
    match result {
        Ok(v) => to_typed(&v),
        Err(e) => Err(ExpressionError::Failed(e.to_string())),
    }
}

fn unsupported(what: &Value) -> ExpressionError {
    ExpressionError::Unsupported(format!("value {what}"))
}

fn from_typed(v: &Value) -> Result<Cel, ExpressionError> {
    let Some((kind, inner)) = v.as_object().and_then(|o| o.iter().next()) else {
        return Err(unsupported(v));
    };
    let number = |x: &Value| -> Option<String> {
        x.as_str()
            .map(str::to_owned)
            .or_else(|| x.as_number().map(|n| n.to_string()))
    };
    Ok(match kind.as_str() {
        "nullValue" => Cel::Null,
        "boolValue" => Cel::Bool(inner.as_bool().ok_or_else(|| unsupported(v))?),
        "int64Value" => Cel::Int(
            number(inner)
                .and_then(|s| s.parse().ok())
                .ok_or_else(|| unsupported(v))?,
        ),
        "uint64Value" => Cel::UInt(
            number(inner)
                .and_then(|s| s.parse().ok())
                .ok_or_else(|| unsupported(v))?,
        ),
        "doubleValue" => Cel::Float(double(inner).ok_or_else(|| unsupported(v))?),
        "stringValue" => Cel::String(Arc::new(
            inner.as_str().ok_or_else(|| unsupported(v))?.to_owned(),
        )),
        "bytesValue" => Cel::Bytes(Arc::new(
            base64::engine::general_purpose::STANDARD
                .decode(inner.as_str().unwrap_or_default())
                .map_err(|_| unsupported(v))?,
        )),
        "listValue" => {
            let items = inner["values"].as_array().cloned().unwrap_or_default();
            Cel::List(Arc::new(
                items.iter().map(from_typed).collect::<Result<_, _>>()?,
            ))
        }
        "mapValue" => {
            let mut map = HashMap::new();
            for entry in inner["entries"].as_array().cloned().unwrap_or_default() {
                let key = match from_typed(&entry["key"])? {
                    Cel::Int(i) => Key::Int(i),
                    Cel::UInt(u) => Key::Uint(u),
                    Cel::Bool(b) => Key::Bool(b),
                    Cel::String(s) => Key::String(s),
                    _ => return Err(unsupported(v)),
                };
                map.insert(key, from_typed(&entry["value"])?);
            }
            Cel::Map(Map { map: Arc::new(map) })
        }
        _ => return Err(unsupported(v)),
    })
}

/// A double as the suite writes it: a number, or `"NaN"`, `"Infinity"`, `"-Infinity"`.
fn double(v: &Value) -> Option<f64> {
    match v {
        Value::Number(n) => n.as_f64(),
        Value::String(s) => match s.as_str() {
            "NaN" => Some(f64::NAN),
            "Infinity" => Some(f64::INFINITY),
            "-Infinity" => Some(f64::NEG_INFINITY),
            other => other.parse().ok(),
        },
        _ => None,
    }
}

fn to_typed(v: &Cel) -> Result<Value, ExpressionError> {
    Ok(match v {
        Cel::Null => json!({"nullValue": null}),
        Cel::Bool(b) => json!({ "boolValue": b }),
        Cel::Int(i) => json!({"int64Value": i.to_string()}),
        Cel::UInt(u) => json!({"uint64Value": u.to_string()}),
        Cel::Float(f) => {
            let x = if f.is_nan() {
                json!("NaN")
            } else if f.is_infinite() {
                json!(if *f > 0.0 { "Infinity" } else { "-Infinity" })
            } else {
                json!(f)
            };
            json!({ "doubleValue": x })
        }
        Cel::String(s) => json!({"stringValue": s.as_str()}),
        Cel::Bytes(b) => {
            json!({"bytesValue": base64::engine::general_purpose::STANDARD.encode(b.as_slice())})
        }
        Cel::List(items) => {
            let values: Vec<Value> = items.iter().map(to_typed).collect::<Result<_, _>>()?;
            json!({"listValue": {"values": values}})
        }
        Cel::Map(m) => {
            let mut entries = Vec::new();
            for (k, val) in m.map.iter() {
                entries.push(json!({"key": to_typed(&Cel::from(k))?, "value": to_typed(val)?}));
            }
            json!({"mapValue": {"entries": entries}})
        }
        Cel::Timestamp(t) => json!({"objectValue": {
            "@type": "type.googleapis.com/google.protobuf.Timestamp",
            "value": t.to_rfc3339_opts(chrono::SecondsFormat::AutoSi, true)
        }}),
        Cel::Duration(d) => json!({"objectValue": {
            "@type": "type.googleapis.com/google.protobuf.Duration",
            "value": duration_text(d)
        }}),
        other => return Err(ExpressionError::Unsupported(format!("result {other:?}"))),
    })
}

/// A duration as protobuf's JSON writes it: seconds with up to nine decimals, then `s`.
fn duration_text(d: &chrono::Duration) -> String {
    let nanos = d.num_nanoseconds().unwrap_or(i64::MAX);
    let sign = if nanos < 0 { "-" } else { "" };
    let nanos = nanos.unsigned_abs();
    let (secs, frac) = (nanos / 1_000_000_000, nanos % 1_000_000_000);
    if frac == 0 {
        format!("{sign}{secs}s")
    } else {
        let digits = format!("{frac:09}");
        format!("{sign}{secs}.{}s", digits.trim_end_matches('0'))
    }
}
