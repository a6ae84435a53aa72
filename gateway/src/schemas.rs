//! Resume schemas (DESIGN §11): checking that a schema an upstream sent is JSON Schema
//! 2020-12 that compiles (no remote references: the crate is built without fetching), and
//! compiling each suspension's schema once, for every resume of it. Validating resume data
//! and deciding on it are the pipeline's (`pipeline::suspend`).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use airlock_storage::CallRecord;
use jsonschema::Validator;
use serde_json::{json, Value};

use crate::error::{ApiError, Code};

/// Compiled resume schemas kept at once; past it the cache starts over (a schema is compiled
/// again on its next resume, never skipped).
const MAX_COMPILED: usize = 4096;

/// Resume schemas compiled once per suspension (by call id and suspension count).
#[derive(Default)]
pub struct Schemas {
    compiled: Mutex<HashMap<(String, u32), Arc<Validator>>>,
}

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

    pub fn forget(&self, call_id: &str) {
        let mut compiled = self.compiled.lock().unwrap_or_else(|e| e.into_inner());
        compiled.retain(|(id, _), _| id != call_id);
    }
}

fn compile(schema: &Value) -> Result<Validator, String> {
    jsonschema::draft202012::meta::validate(schema).map_err(|e| e.to_string())?;
    jsonschema::draft202012::new(schema).map_err(|e| e.to_string())
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
