//! The written half of the OpenAPI document: the JSON Schemas of the API's request and
//! response bodies, as `components/schemas`. The handlers build their answers as JSON values,
//! not typed structs, so there is no type to derive these from; what keeps them honest is the
//! fuzzer run in CI (`tests/tests/openapi.rs`), which checks every answer the gateway gives
//! against them.

use serde_json::{json, Value};

/// `$ref` to a component schema.
pub(super) fn r(name: &str) -> Value {
    json!({"$ref": format!("#/components/schemas/{name}")})
}

/// Every component schema, by name.
pub(super) fn components() -> Value {
    let mut all = written();
    // Any JSON value whose numbers survive a double unchanged. Written without `anyOf` and
    // without `type`: each keyword applies to its own kind of value (numbers, arrays,
    // objects), which is the same set of values, in a form both generators of clients and
    // generators of test data read.
    all["Json"] = json!({
        "description": "Any JSON value whose numbers survive a double unchanged: within \
            ±(2^53−1) (larger integers are refused as `request.unsafe_number`), nested at most \
            64 deep (`request.too_deep`), with no duplicate keys (`request.duplicate_key`).",
        "minimum": -9007199254740991_i64,
        "maximum": 9007199254740991_i64,
        "items": r("Json"),
        "additionalProperties": r("Json"),
    });
    all
}

/// The written schemas, by what they describe.
fn written() -> Value {
    let mut all = serde_json::Map::new();
    for group in [
        shapes(),
        calls(),
        resuming(),
        approvals(),
        grants_and_runs(),
        policy(),
        shadow(),
        operations(),
        audit_and_open(),
    ] {
        if let Value::Object(m) = group {
            all.extend(m);
        }
    }
    Value::Object(all)
}

/// The shapes every call and approval shares: args, edited args, a tool's name, a call's context.
fn shapes() -> Value {
    let string = json!({"type": "string"});
    json!({
        "Args": {
            "description": "The tool's arguments: a JSON object. Its RFC 8785 form, with the \
                tool name, is what is fingerprinted and what the backend receives.",
            "type": "object",
            "additionalProperties": r("Json"),
        },
        "EditedArgs": {
            "description": "Edited args to run instead of the requested ones, where the rule \
                allows edits.",
            "type": "object",
            "additionalProperties": r("Json"),
        },
        "ToolName": {
            "type": "string",
            "pattern": "^[A-Za-z0-9][A-Za-z0-9_.:/-]{0,127}$",
            "description": "1 to 128 bytes: an ASCII letter or digit, then letters, digits and \
                `_ . : / -` (`request.invalid_tool` otherwise).",
        },
        "Context": {
            "description": "Who the call is for, as the agent framework knows it; policy reads \
                it as `context`.",
            "type": "object",
            "additionalProperties": false,
            "properties": {
                "agent_id": string, "run_id": string, "thread_id": string,
                "tool_call_id": string,
                "labels": {"type": "object", "additionalProperties": {"type": "string"}},
            },
        },
    })
}

/// Calls: the request and each answer (completed, pending, suspended, cancelled).
fn calls() -> Value {
    let string = json!({"type": "string"});
    let nullable_string = json!({"type": ["string", "null"]});
    let time = json!({"type": "string", "format": "date-time"});
    json!({
        "CallRequest": {
            "type": "object",
            "additionalProperties": false,
            "required": ["tool", "args"],
            "properties": {"tool": r("ToolName"), "args": r("Args"), "context": r("Context")},
        },
        "CallCompleted": {
            "description": "The backend answered. Any HTTP answer from it, 4xx and 5xx \
                included, is a completed call: the tool's own error is data for the model.",
            "type": "object",
            "required": ["call_id", "status", "decision", "fingerprint", "upstream_status", "result"],
            "properties": {
                "call_id": string,
                "status": {"const": "completed"},
                "decision": {"enum": ["allow", "require_approval"]},
                "fingerprint": {"type": "string", "pattern": "^sha256:[0-9a-f]{64}$"},
                "upstream_status": {"type": ["integer", "null"], "description": "The HTTP backend's status; null for an MCP upstream's result, which `result` holds as the upstream gave it."},
                "result": {"description": "The backend's body: JSON, or a string when it is not JSON."},
                "edited": {"type": "boolean", "description": "Present, and true, when an approver edited the args."},
                "args": {"type": "object", "description": "The args that ran, when an approver edited them."},
            },
        },
        "CallPending": {
            "description": "The call waits for approvers; poll `GET /v1/calls/{call_id}` or \
                resume it after the decision.",
            "type": "object",
            "required": ["call_id", "status", "approval"],
            "properties": {
                "call_id": string,
                "status": {"const": "pending_approval"},
                "approval": {
                    "type": "object",
                    "required": ["id", "expires_at", "approvers", "quorum", "link"],
                    "properties": {
                        "id": string, "expires_at": time,
                        "approvers": {"type": "array", "items": string},
                        "quorum": {"type": "integer", "minimum": 1},
                        "link": {"type": "string", "description": "The approval's inbox page."},
                    },
                },
            },
        },
        "CallSuspended": {
            "description": "The tool suspended itself and waits for `resume_data` that fits \
                `suspend.resume_schema` (DESIGN §11).",
            "type": "object",
            "required": ["call_id", "status", "tool", "suspend", "expires_at", "suspensions", "link"],
            "properties": {
                "call_id": string,
                "status": {"const": "suspended"},
                "tool": string,
                "tool_call_id": nullable_string,
                "run_id": nullable_string,
                "suspend": {
                    "type": "object",
                    "required": ["payload"],
                    "properties": {"payload": {}, "resume_schema": {}},
                },
                "expires_at": time,
                "suspensions": {"type": "integer", "minimum": 1},
                "link": string,
            },
        },
        "CallAnswer": {
            "oneOf": [r("CallCompleted"), r("CallPending"), r("CallSuspended")],
        },
        "CallWaiting": {"oneOf": [r("CallPending"), r("CallSuspended")]},
        "CallCancelled": {
            "type": "object",
            "required": ["call_id", "status"],
            "properties": {"call_id": string, "status": {"const": "cancelled"}},
        },
    })
}

/// Suspended calls and resuming them, one by one or by run.
fn resuming() -> Value {
    let nullable_string = json!({"type": ["string", "null"]});
    json!({
        "SuspendedCalls": {
            "type": "object",
            "required": ["calls"],
            "properties": {"calls": {"type": "array", "items": r("CallSuspended")}},
        },
        "ResumeRequest": {
            "type": "object",
            "additionalProperties": false,
            "properties": {
                "resume_data": {"$ref": "#/components/schemas/Json", "description": "For a suspended call: the data it resumes with. \
                    Without it, the call's outcome (DESIGN §6's resume)."},
            },
        },
        "RunResumeRequest": {
            "type": "object",
            "additionalProperties": false,
            "required": ["resume_data"],
            "properties": {"resume_data": r("Json"), "tool_call_id": nullable_string},
        },
    })
}

/// Approvals: one, a page of them, and the approve body.
fn approvals() -> Value {
    let string = json!({"type": "string"});
    let nullable_string = json!({"type": ["string", "null"]});
    let time = json!({"type": "string", "format": "date-time"});
    json!({
        "Approval": {
            "type": "object",
            "required": ["id", "kind", "call_id", "tool", "args", "fingerprint", "requester",
                "policy_version", "rules", "approvers", "quorum", "status", "decisions",
                "created_at", "expires_at", "grant"],
            "properties": {
                "id": string,
                "kind": {"enum": ["call", "tool_definition"],
                    "description": "A held call, or an MCP tool's changed definition held for review (`args` holds `server`, `tool`, `old`, `new` and their fingerprints; `call_id` is empty)."},
                "call_id": string, "tool": string,
                "args": {"type": "object"},
                "fingerprint": string,
                "requester": {
                    "type": "object",
                    "required": ["principal"],
                    "properties": {"principal": string, "actor": nullable_string, "context": {"type": "object"}},
                },
                "policy_version": string,
                "rules": {"type": "array", "items": string},
                "explanation": {},
                "approvers": {"type": "array", "items": string},
                "quorum": {"type": "integer", "minimum": 1},
                "status": {"enum": ["pending", "approved", "declined", "expired", "cancelled"]},
                "decisions": {"type": "array", "items": {
                    "type": "object",
                    "required": ["by", "decision", "at"],
                    "properties": {
                        "by": string, "decision": string, "reason": nullable_string,
                        "at": time, "fingerprint": nullable_string, "auth": {},
                    },
                }},
                "created_at": time,
                "expires_at": time,
                "decided_at": {"type": ["string", "null"], "format": "date-time"},
                "grant": {
                    "type": "object",
                    "description": "What the approval grants, and the most an approver may choose (`max_*`).",
                    "properties": {
                        "uses": {"type": "integer"}, "ttl": string, "scope": string,
                        "max_uses": {"type": "integer"}, "max_ttl": string, "max_scope": string,
                    },
                },
                "edited_args": {"type": ["object", "null"]},
                "edited_fingerprint": nullable_string,
            },
        },
        "ApprovalPage": {
            "type": "object",
            "required": ["approvals", "next_cursor"],
            "properties": {
                "approvals": {"type": "array", "items": r("Approval")},
                "next_cursor": {"type": ["string", "null"], "description": "Pass as `cursor` for the next page; null on the last."},
            },
        },
        "ApproveRequest": {
            "type": "object",
            "additionalProperties": false,
            "properties": {
                "reason": nullable_string,
                "args": r("EditedArgs"),
                "grant": {
                    "type": "object",
                    "additionalProperties": false,
                    "description": "What this approval grants, within the rule's maxima; each part left out is the rule's own.",
                    "properties": {
                        "scope": {"enum": ["call", "run", "principal"]},
                        "ttl": {"type": "string", "pattern": "^[1-9][0-9]{0,8}(ms|s|m|h|d)$", "description": "A duration: `30m`, `1h`."},
                        "uses": {"type": "integer", "minimum": 1, "maximum": 4294967295u64},
                    },
                },
            },
        },
    })
}

/// Grants, declining, and deciding a whole run.
fn grants_and_runs() -> Value {
    let string = json!({"type": "string"});
    let nullable_string = json!({"type": ["string", "null"]});
    let time = json!({"type": "string", "format": "date-time"});
    json!({
        "Grants": {
            "type": "object",
            "required": ["grants"],
            "properties": {"grants": {"type": "array", "items": r("Grant")}},
        },
        "RevokedGrant": {
            "type": "object",
            "required": ["revoked"],
            "properties": {"revoked": r("Grant")},
        },
        "Grant": {
            "type": "object",
            "required": ["id", "approval_id", "fingerprint", "scope_key", "uses_left", "expires_at"],
            "properties": {
                "id": string, "approval_id": string,
                "tool": nullable_string,
                "args": {"type": ["object", "null"], "description": "The canonical args the grant is bound to."},
                "fingerprint": string,
                "scope": nullable_string, "scope_key": string,
                "uses_left": {"type": "integer"},
                "expires_at": time,
                "approvers": {"type": ["array", "null"], "items": string},
                "requester": nullable_string,
            },
        },
        "DeclineRequest": {
            "type": "object",
            "additionalProperties": false,
            "required": ["reason"],
            "properties": {"reason": {"type": "string", "minLength": 1, "description": "Fed back to the agent."}},
        },
        "RunApproveRequest": {
            "type": "object",
            "additionalProperties": false,
            "properties": {"reason": nullable_string, "tool_call_id": nullable_string},
        },
        "RunDeclineRequest": {
            "type": "object",
            "additionalProperties": false,
            "required": ["reason"],
            "properties": {"reason": {"type": "string", "minLength": 1}, "tool_call_id": nullable_string},
        },
        "RunDecisions": {
            "type": "object",
            "required": ["results"],
            "properties": {"results": {"type": "array", "items": {
                "type": "object",
                "required": ["approval_id", "call_id"],
                "properties": {
                    "approval_id": string, "call_id": string, "status": string,
                    "error": {"type": "object", "properties": {"code": string, "message": string}},
                },
            }}},
        },
    })
}

/// The policy: the loaded set and evaluating a call.
fn policy() -> Value {
    let string = json!({"type": "string"});
    let nullable_string = json!({"type": ["string", "null"]});
    json!({
        "Policy": {
            "type": "object",
            "required": ["version", "sources", "rules"],
            "properties": {
                "version": string,
                "sources": {"type": "array", "items": {}},
                "rules": {"type": "array", "items": {
                    "type": "object",
                    "required": ["id", "tools", "decision", "location"],
                    "properties": {
                        "id": string, "tools": {"type": "array", "items": string},
                        "when": nullable_string, "decision": string,
                        "message": nullable_string, "classifiers": {}, "location": string,
                    },
                }},
            },
        },
        "EvaluateRequest": {
            "type": "object",
            "additionalProperties": false,
            "required": ["tool", "args"],
            "properties": {
                "tool": r("ToolName"),
                "args": r("Args"),
                "context": r("Context"),
                "principal": {"type": "object", "additionalProperties": r("Json"),
                    "description": "The principal policy sees (`id`, `role`, `groups`, …); a default agent when left out."},
                "classifier": {"type": "object", "additionalProperties": r("FixedClassifier"),
                    "description": "Fixed classifier results by name, instead of running them."},
                "resume": {"$ref": "#/components/schemas/Json", "description": "Evaluate a resume with this resume data."},
                "definition": {"$ref": "#/components/schemas/Json", "description": "The MCP tool definition policy reads as `definition`; the tool's pinned one when left out (null for an HTTP tool)."},
            },
        },
        "FixedClassifier": {
            "oneOf": [
                {"type": "object", "additionalProperties": false, "required": ["score"], "properties": {
                    "score": {"type": "number", "minimum": 0, "maximum": 1},
                    "labels": {"type": "array", "items": string},
                    "detail": r("Json"),
                }},
                {"type": "object", "additionalProperties": false, "required": ["error"], "properties": {
                    "error": string,
                    "on_error": {"enum": ["deny", "require_approval", null]},
                }},
            ],
        },
        "PolicyDecision": {
            "type": "object",
            "required": ["decision", "rules", "errors", "messages", "policy_version", "fingerprint", "tool"],
            "properties": {
                "decision": {"enum": ["allow", "deny", "require_approval"]},
                "rules": {"type": "array", "items": string},
                "errors": {"type": "array", "items": {"type": "object"}},
                "messages": {"type": "array", "items": {"type": "object"}},
                "policy_version": string,
                "fingerprint": string,
                "tool": string,
            },
        },
        "PolicyVersion": {
            "type": "object",
            "required": ["version"],
            "properties": {"version": string},
        },
    })
}

/// The shadow policy set's transitions.
fn shadow() -> Value {
    let string = json!({"type": "string"});
    json!({
        "Shadow": {
            "type": "object",
            "required": ["configured", "live_version"],
            "properties": {
                "configured": {"type": "boolean"},
                "live_version": string,
                "shadow_version": string,
                "since": {"type": "string", "format": "date-time"},
                "calls": {"type": "integer", "description": "Calls the shadow set decided since it loaded."},
                "transitions": {"type": "array", "items": {
                    "type": "object",
                    "required": ["live", "shadow", "changed", "widening", "count", "calls"],
                    "properties": {
                        "live": {"enum": ["allow", "deny", "require_approval"]},
                        "shadow": {"enum": ["allow", "deny", "require_approval"]},
                        "changed": {"type": "boolean"},
                        "widening": {"type": "boolean", "description": "The shadow decision lets the call go further: deny → allow, deny → require_approval, require_approval → allow."},
                        "count": {"type": "integer"},
                        "calls": {"type": "array", "description": "The latest calls of a pair that differs (at most 20), newest first.", "items": {
                            "type": "object",
                            "required": ["call_id", "tool", "principal", "at", "live_rules", "shadow_rules"],
                            "properties": {
                                "call_id": string, "tool": string, "principal": string,
                                "at": {"type": "string", "format": "date-time"},
                                "live_rules": {"type": "array", "items": string},
                                "shadow_rules": {"type": "array", "items": string},
                            },
                        }},
                    },
                }},
            },
        },
    })
}

/// Tools and webhooks.
fn operations() -> Value {
    let string = json!({"type": "string"});
    let nullable_string = json!({"type": ["string", "null"]});
    json!({
        "Tools": {
            "type": "object",
            "required": ["tools"],
            "properties": {"tools": {"type": "array", "items": r("Tool")}},
        },
        "Tool": {
            "type": "object",
            "required": ["name", "server", "tool", "pin", "state", "fingerprint", "pinned_fingerprint", "review", "paths"],
            "properties": {
                "name": string, "server": string, "tool": string,
                "pin": {"enum": ["enforce", "warn", "off"]},
                "state": {"enum": ["pinned", "changed", "declined", "unreviewed", "unseen", "unpinned", "unreached"]},
                "fingerprint": nullable_string,
                "pinned_fingerprint": nullable_string,
                "pinned_by": nullable_string,
                "review": nullable_string,
                "paths": {"type": "array", "items": {"enum": ["2026-07-28", "2025-11-25"]}},
                "definition": {"description": "The tool object as the upstream lists it (one tool only)."},
                "pinned_definition": {"description": "The tool object pinned (one tool only)."},
            },
        },
        "Webhooks": {
            "type": "object",
            "required": ["webhooks"],
            "properties": {"webhooks": {"type": "array", "items": {
                "type": "object",
                "required": ["id", "url", "events", "disabled"],
                "properties": {
                    "id": string, "url": string,
                    "events": {"type": "array", "items": string},
                    "principal": nullable_string,
                    "disabled": {
                        "description": "Null while enabled; why and when (ms since the epoch) it was disabled.",
                        "type": ["object", "null"],
                        "required": ["webhook", "reason", "at"],
                        "properties": {"webhook": string, "reason": string, "at": {"type": "integer"}},
                    },
                },
            }}},
        },
        "WebhookEnabled": {
            "type": "object",
            "required": ["enabled", "requeued"],
            "properties": {"enabled": {"type": "boolean"}, "requeued": {"type": "integer", "minimum": 0}},
        },
        "WebhookTestQueued": {
            "type": "object",
            "required": ["delivery_id"],
            "properties": {"delivery_id": nullable_string},
        },
    })
}

/// The audit log's routes, and the open routes (health, readiness, metadata, the document).
fn audit_and_open() -> Value {
    let string = json!({"type": "string"});
    json!({
        "AuditPage": {
            "type": "object",
            "required": ["records", "next_after"],
            "properties": {
                "records": {"type": "array", "items": {
                    "type": "object",
                    "required": ["seq", "kind", "hash"],
                    "properties": {"seq": {"type": "integer"}, "kind": string, "hash": string},
                }},
                "next_after": {"type": ["integer", "string", "null"], "description": "What `after` takes to read on: the last record's seq while the log has one chain, else an opaque position across chains; null for an empty page."},
            },
        },
        "PruneRequest": {
            "type": "object",
            "additionalProperties": false,
            "required": ["before"],
            "properties": {
                "before": {"type": "integer", "minimum": 0, "maximum": 9007199254740991_i64, "description": "Drop exported records with a smaller seq."},
                "chain": {"type": ["string", "null"], "description": "The chain to prune (a gateway's `[store] instance`): needed when the log has several."}
            },
        },
        "Pruned": {
            "type": "object",
            "required": ["dropped"],
            "properties": {"dropped": {"type": "integer", "minimum": 0}, "checkpoint_seq": {"type": ["integer", "null"]}},
        },
        "Health": {
            "type": "object",
            "required": ["status"],
            "properties": {"status": {"const": "ok"}},
        },
        "Ready": {
            "type": "object",
            "required": ["status", "policy_version"],
            "properties": {"status": {"const": "ready"}, "policy_version": string},
        },
        "ProtectedResourceMetadata": {
            "description": "RFC 9728 metadata: the issuers whose tokens this gateway takes.",
            "type": "object",
            "required": ["resource", "authorization_servers"],
            "properties": {
                "resource": string,
                "authorization_servers": {"type": "array", "items": string},
                "scopes_supported": {"type": "array", "items": string},
                "bearer_methods_supported": {"type": "array", "items": string},
            },
        },
        "OpenApiDocument": {"type": "object", "required": ["openapi", "paths"]},
    })
}
