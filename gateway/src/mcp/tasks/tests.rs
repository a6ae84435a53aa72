//! Tasks without a gateway: each revision's envelope, how each revision asks for a task, and the
//! owner key.
#![allow(clippy::unwrap_used)]

use super::*;

fn task() -> Task {
    Task {
        task_id: "task_1".into(),
        revision: LEGACY.into(),
        tool: "t".into(),
        call_id: Some("call_1".into()),
        result: None,
        ttl_ms: 1000,
        created_at: 1_700_000_000_000,
        expires_at: 1_700_000_001_000,
        upstream: None,
    }
}

#[test]
fn each_revision_writes_a_task_in_its_own_words() {
    let waiting = State::Input {
        message: "waiting".into(),
        requests: Map::from_iter([(APPROVAL_KEY.to_owned(), json!({"method": "x"}))]),
    };
    let modern = envelope(&task(), &waiting, 1_700_000_000_500, true);
    assert_eq!(modern["ttlMs"], 1000);
    assert_eq!(modern["pollIntervalMs"], POLL_MS);
    assert_eq!(modern["status"], "input_required");
    assert_eq!(modern["statusMessage"], "waiting");
    assert!(modern["inputRequests"][APPROVAL_KEY].is_object());
    assert!(!modern.contains_key("ttl") && !modern.contains_key("pollInterval"));
    assert_eq!(modern["createdAt"], "2023-11-14T22:13:20.000Z");
    assert_eq!(modern["lastUpdatedAt"], "2023-11-14T22:13:20.500Z");
    let legacy = envelope(&task(), &waiting, 1_700_000_000_500, false);
    assert_eq!(
        (legacy["ttl"].as_u64(), legacy["pollInterval"].as_u64()),
        (Some(1000), Some(POLL_MS))
    );
    assert!(!legacy.contains_key("inputRequests") && !legacy.contains_key("ttlMs"));
    // The result and the error are inlined in 2026 only, by status.
    let done = envelope(
        &task(),
        &State::Completed(json!({"isError": true})),
        0,
        true,
    );
    assert_eq!(done["result"]["isError"], true);
    let failed = envelope(&task(), &State::Failed(json!({"code": -32603})), 0, true);
    assert_eq!(
        (failed["status"].as_str(), failed["error"]["code"].as_i64()),
        (Some("failed"), Some(-32603))
    );
    assert!(!envelope(&task(), &State::Completed(json!({})), 0, false).contains_key("result"));
}

#[test]
fn a_task_is_asked_for_by_the_extension_in_2026_and_by_params_task_in_2025() {
    let exchange = |revision, capabilities| Exchange {
        revision,
        session: None,
        capabilities,
        accepts_sse: false,
        logs: false,
    };
    let msg = |params: Value| {
        wire::parse(
            json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": params})
                .to_string()
                .as_bytes(),
        )
        .unwrap()
    };
    let modern = crate::backends::mcp::MODERN;
    let with_ext = json!({"extensions": {EXTENSION: {}}});
    assert_eq!(
        asked(&exchange(modern, with_ext.clone()), &msg(json!({}))),
        Some(None)
    );
    assert_eq!(
        asked(
            &exchange(modern, json!({})),
            &msg(json!({"task": {"ttl": 5}}))
        ),
        None
    );
    assert_eq!(asked(&exchange(LEGACY, with_ext), &msg(json!({}))), None);
    assert_eq!(
        asked(
            &exchange(LEGACY, json!({})),
            &msg(json!({"task": {"ttl": 5}}))
        ),
        Some(Some(5))
    );
    assert_eq!(
        asked(&exchange(LEGACY, json!({})), &msg(json!({"task": {}}))),
        Some(None)
    );
    assert_eq!(
        asked(&exchange(LEGACY, json!({})), &msg(json!({"task": true}))),
        None
    );
}

#[test]
fn a_principals_key_is_a_fixed_length_hash_of_its_id() {
    let p = |id: &str| Principal {
        id: id.into(),
        ..Principal::default()
    };
    assert_eq!(owner(&p("a")).len(), 32);
    assert_ne!(owner(&p("a")), owner(&p("b")));
    assert!(owner(&p("we.ird/id\0"))
        .chars()
        .all(|c| c.is_ascii_hexdigit()));
}
