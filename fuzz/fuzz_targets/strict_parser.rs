//! Fuzzes strict intake: any bytes either fail with a stable code or give a call whose
//! canonical args parse back to themselves (canonicalization is idempotent).
#![no_main]

use airlock_policy::{canonicalize, json, ToolCall, MAX_ARGS_DEPTH};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(value) = json::parse(data, MAX_ARGS_DEPTH) {
        let canonical = canonicalize(&value);
        let again = json::parse(canonical.as_bytes(), MAX_ARGS_DEPTH)
            .expect("canonical form must parse");
        assert_eq!(canonicalize(&again), canonical);
    }
    match ToolCall::from_body(data) {
        Ok(call) => assert!(call.fingerprint.as_str().starts_with("sha256:")),
        Err(e) => assert!(e.code().starts_with("request.")),
    }
});
