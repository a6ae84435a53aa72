//! Fuzzes the policy loader: any text either loads or is refused with coded errors; it never
//! panics, and a loaded set evaluates a call without panicking.
#![no_main]

use std::collections::BTreeMap;
use std::path::PathBuf;

use airlock_policy::{evaluate, Input, PolicySet};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    match PolicySet::from_sources(vec![(PathBuf::from("fuzz.toml"), text.to_owned())]) {
        Ok(set) => {
            let args = serde_json::json!({"command": "ls", "amount": 5, "sql": "select 1"});
            let ctx = serde_json::json!({"agent_id": "a"});
            let principal = serde_json::json!({"id": "p", "role": "agent", "groups": []});
            let classifiers = BTreeMap::new();
            let _ = evaluate(&set, &Input {
                tool: "shell.exec",
                args: &args,
                context: &ctx,
                principal: &principal,
                fingerprint: "sha256:00",
                now: std::time::SystemTime::UNIX_EPOCH,
                classifiers: &classifiers,
                resume: None,
                definition: None,
                request: airlock_policy::Request::TOOL,
            });
        }
        Err(errors) => assert!(errors.0.iter().all(|e| e.code.starts_with("policy."))),
    }
});
