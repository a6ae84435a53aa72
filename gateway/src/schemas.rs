//! JSON Schemas the gateway checks what a caller sends against, each compiled once (JSON
//! Schema 2020-12, no remote references: the crate is built without fetching):
//! - resume schemas (DESIGN §11): each suspension's, for every resume of it; validating
//!   resume data and deciding on it are the pipeline's (`pipeline::suspend`);
//! - tools' input schemas (DESIGN §23): an MCP tool's pinned `inputSchema`, or an HTTP tool's
//!   `schema` file, compiled once per definition; [`Schemas::check_args`] refuses args that
//!   do not fit `400 request.invalid_args`, naming the JSON pointer and the keyword.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use airlock_storage::CallRecord;
use jsonschema::Validator;
use serde_json::{json, Value};

use crate::error::{ApiError, Code};

/// Compiled resume schemas kept at once; past it the cache starts over (a schema is compiled
/// again on its next resume, never skipped).
const MAX_COMPILED: usize = 4096;

/// Compiled schemas: resume schemas by suspension, input schemas by tool.
#[derive(Default)]
pub struct Schemas {
    /// Resume schemas, by call id and suspension count.
    compiled: Mutex<HashMap<(String, u32), Arc<Validator>>>,
    /// Input schemas, by tool: the definition (or schema file) they were compiled from, kept
    /// so a repinned definition (another `Arc`) is compiled anew, and the validator or why
    /// the schema does not compile.
    inputs: Mutex<HashMap<String, Input>>,
}

/// An input schema as compiled from its holder.
type Input = (Arc<Value>, Result<Arc<Validator>, String>);

impl Schemas {
    pub fn validator(&self, call: &CallRecord) -> Result<Arc<Validator>, ApiError> {
        let Some(s) = &call.suspension else {
            return Err(not_suspended(call));
        };
        let key = (call.call_id.clone(), s.count);
        let mut compiled = self.compiled.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(v) = compiled.get(&key) {
            return Ok(v.clone());
        }
        let v = Arc::new(compile(&s.resume_schema).map_err(|why| {
            ApiError::new(
                Code::UpstreamInvalidSuspend,
                format!("the call's resume schema does not compile: {why}"),
            )
        })?);
        if compiled.len() >= MAX_COMPILED {
            compiled.clear();
        }
        compiled.insert(key, v.clone());
        Ok(v)
    }

    /// Checks a call's `args` against the input schema `schema` of tool `key`, found in
    /// `holder` (an MCP tool's pinned definition, or an HTTP tool's schema file): compiled
    /// once per holder. Args that do not fit are `400 request.invalid_args` with each failing
    /// JSON pointer and keyword; a schema that does not compile refuses every call
    /// (`upstream.invalid_response`), never lets one through unchecked.
    pub fn check_args(
        &self,
        key: &str,
        holder: &Arc<Value>,
        schema: &Value,
        args: &Value,
    ) -> Result<(), ApiError> {
        let validator = {
            let mut inputs = self.inputs.lock().unwrap_or_else(|e| e.into_inner());
            match inputs.get(key) {
                Some((h, v)) if Arc::ptr_eq(h, holder) => v.clone(),
                _ => {
                    let v = compile_input(schema).map(Arc::new);
                    if inputs.len() >= MAX_COMPILED {
                        inputs.clear();
                    }
                    inputs.insert(key.to_owned(), (holder.clone(), v.clone()));
                    v
                }
            }
        };
        let validator = validator.map_err(|why| {
            ApiError::new(
                Code::UpstreamInvalidResponse,
                format!(
                    "the input schema of `{key}` does not compile, so no call to it can be \
                     checked: {why} (set `validate_args = false` on its server to call it \
                     unchecked)"
                ),
            )
        })?;
        if validator.is_valid(args) {
            return Ok(());
        }
        let errors: Vec<Value> = validator
            .iter_errors(args)
            .take(20)
            .map(|e| {
                json!({
                    "pointer": e.instance_path().as_str(),
                    "keyword": e.kind().keyword(),
                    "message": e.to_string(),
                })
            })
            .collect();
        let first = errors.first().cloned().unwrap_or_default();
        let at = match first["pointer"].as_str() {
            Some("") | None => "the args".to_owned(),
            Some(p) => format!("`{p}`"),
        };
        Err(ApiError::new(
            Code::RequestInvalidArgs,
            format!(
                "the args do not fit the input schema of `{key}`: {at} fails `{}`: {}",
                first["keyword"].as_str().unwrap_or(""),
                first["message"].as_str().unwrap_or("")
            ),
        )
        .with_details(json!({
            "tool": key,
            "pointer": first["pointer"],
            "keyword": first["keyword"],
            "errors": errors,
        })))
    }

    pub fn forget(&self, call_id: &str) {
        let mut compiled = self.compiled.lock().unwrap_or_else(|e| e.into_inner());
        compiled.retain(|(id, _), _| id != call_id);
    }
}

fn compile(schema: &Value) -> Result<Validator, String> {
    jsonschema::draft202012::meta::validate(schema).map_err(|e| e.to_string())?;
    jsonschema::draft202012::new(schema).map_err(|e| e.to_string())
}

/// Whether a refusal is [`Schemas::check_args`]'s (args that do not fit the tool's input
/// schema), not the strict intake's (args that are not an object at all).
pub fn is_schema_refusal(e: &ApiError) -> bool {
    e.code == Code::RequestInvalidArgs && e.details.get("keyword").is_some()
}

/// A tool's input schema: 2020-12 unless it names another dialect in `$schema`, as MCP says.
fn compile_input(schema: &Value) -> Result<Validator, String> {
    if schema.get("$schema").is_some() {
        jsonschema::validator_for(schema).map_err(|e| e.to_string())
    } else {
        compile(schema)
    }
}

/// Whether `schema` is a JSON Schema 2020-12 that compiles (no remote references: the crate
/// is built without fetching).
pub fn check_schema(schema: &Value) -> Result<(), String> {
    if !schema.is_object() && !schema.is_boolean() {
        return Err("a schema is an object or a boolean".into());
    }
    compile(schema).map(drop)
}

/// `call.not_suspended`: there is nothing to resume.
pub fn not_suspended(call: &CallRecord) -> ApiError {
    ApiError::new(
        Code::CallNotSuspended,
        format!(
            "call `{}` is {}, not suspended: there is nothing to resume",
            call.call_id,
            call.status.as_str()
        ),
    )
    .with_details(json!({"call_id": call.call_id, "status": call.status.as_str()}))
}
