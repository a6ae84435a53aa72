//! The document's structure: every route once, codes under their statuses, headers.

use super::*;

fn operations(doc: &Value) -> Vec<(String, String, Value)> {
    let mut out = Vec::new();
    for (path, ops) in doc["paths"].as_object().into_iter().flatten() {
        for (method, op) in ops.as_object().into_iter().flatten() {
            out.push((method.to_uppercase(), path.clone(), op.clone()));
        }
    }
    out
}

#[test]
fn every_route_is_one_operation_with_the_query_parameters_the_router_takes() {
    let doc = document(&Config::demo());
    let ops = operations(&doc);
    let expected: Vec<&super::super::routes::Route> = ROUTES
        .iter()
        .filter(|r| r.access != Access::OpenWithIssuers)
        .collect();
    assert_eq!(ops.len(), expected.len());
    let mut ids = std::collections::HashSet::new();
    for route in expected {
        let (_, _, op) = ops
            .iter()
            .find(|(m, p, _)| m == route.method.as_str() && p == route.path)
            .unwrap_or_else(|| panic!("{} {} is not documented", route.method, route.path));
        assert!(ids.insert(op["operationId"].to_string()), "{op}");
        let documented: Vec<&str> = op["parameters"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|p| p["in"] == "query")
            .filter_map(|p| p["name"].as_str())
            .collect();
        assert_eq!(documented, route.query, "{}", route.path);
        // A success answer, and a token route documents its refusals of authentication.
        let responses = op["responses"].as_object().unwrap();
        assert!(responses
            .keys()
            .any(|s| s.starts_with('2') || s.starts_with('3')));
        if route.access == Access::Token {
            let codes = &responses["401"]["content"]["application/json"]["schema"]["properties"]
                ["error"]["properties"]["code"]["enum"];
            assert!(codes
                .as_array()
                .unwrap()
                .contains(&json!("auth.unauthenticated")));
            assert_eq!(op["security"][0], json!({"bearer": []}));
        } else {
            assert_eq!(op["security"], json!([]));
        }
    }
}

#[test]
fn each_code_is_listed_under_the_status_the_gateway_answers_it_with() {
    let doc = document(&Config::demo());
    for (method, path, op) in operations(&doc) {
        for (status, answer) in op["responses"].as_object().unwrap() {
            let codes = &answer["content"]["application/json"]["schema"]["properties"]["error"]
                ["properties"]["code"]["enum"];
            for c in codes.as_array().into_iter().flatten() {
                let code = Code::parse(c.as_str().unwrap()).unwrap();
                assert_eq!(
                    status_for(code).as_u16().to_string(),
                    *status,
                    "{method} {path} {code}"
                );
            }
        }
    }
    // The decline of §6 lists every refusal DESIGN orders, and a reload every load error.
    let decline = &doc["paths"]["/v1/approvals/{id}/decline"]["post"]["responses"];
    for (status, code) in [
        ("403", "approval.forbidden"),
        ("403", "approval.self_approval"),
        ("409", "approval.already_decided"),
        ("409", "approval.not_pending"),
        ("404", "approval.not_found"),
        ("400", "request.missing_reason"),
    ] {
        let codes = &decline[status]["content"]["application/json"]["schema"]["properties"]
            ["error"]["properties"]["code"]["enum"];
        assert!(codes.as_array().unwrap().contains(&json!(code)), "{code}");
    }
    let reload = &doc["paths"]["/v1/policy/reload"]["post"]["responses"]["422"];
    assert!(reload["description"]
        .as_str()
        .unwrap()
        .contains("`policy.cel_syntax`"));
}

#[test]
fn refusals_that_may_wait_document_retry_after() {
    let doc = document(&Config::demo());
    let create = &doc["paths"]["/v1/calls"]["post"];
    assert!(create["responses"]["429"]["headers"]["Retry-After"].is_object());
    assert!(create["responses"]["503"]["headers"]["Retry-After"].is_object());
    // Not only overload: an MCP upstream not reached yet, and a call still executing.
    assert!(create["responses"]["502"]["headers"]["Retry-After"].is_object());
    let get = &doc["paths"]["/v1/calls/{call_id}"]["get"];
    let in_progress = crate::body::status_for(Code::CallInProgress)
        .as_u16()
        .to_string();
    assert!(get["responses"][&in_progress]["headers"]["Retry-After"].is_object());
    // And only where one of the status's codes carries it.
    assert!(create["responses"]["400"]["headers"]["Retry-After"].is_null());
    for (path, item) in doc["paths"].as_object().unwrap() {
        for (method, op) in item.as_object().unwrap() {
            for (status, response) in op["responses"].as_object().unwrap() {
                let Some(codes) = response["content"]["application/json"]["schema"]["properties"]
                    ["error"]["properties"]["code"]["enum"]
                    .as_array()
                else {
                    continue;
                };
                let carries = codes.iter().any(|c| {
                    Code::parse(c.as_str().unwrap()).is_some_and(|c| c.carries_retry_after())
                });
                assert_eq!(
                    response["headers"]["Retry-After"].is_object(),
                    carries,
                    "{method} {path} {status}"
                );
            }
        }
    }
    assert!(create["responses"]["401"]["headers"]["WWW-Authenticate"].is_object());
    assert_eq!(create["parameters"][0]["name"], "Prefer");
    let stream = &doc["paths"]["/v1/events"]["get"]["responses"]["200"]["content"];
    assert!(stream["text/event-stream"].is_object());
}

/// The JSON schema of `method path`'s answer with `status`, as a validator whose `$ref`s
/// resolve in the document.
fn answer_validator(doc: &Value, method: &str, path: &str, status: &str) -> jsonschema::Validator {
    let escaped = path.replace('~', "~0").replace('/', "~1");
    let pointer = format!(
        "#/paths/{escaped}/{}/responses/{status}/content/application~1json/schema",
        method.to_lowercase()
    );
    let mut root = doc.clone();
    root["$ref"] = Value::String(pointer.replace('{', "%7B").replace('}', "%7D"));
    jsonschema::draft202012::new(&root).expect("the document's schemas compile")
}

/// The examples of the type an answer names: its own, or each of its variants'.
fn examples_of(doc: &Value, schema: &Value) -> Vec<Value> {
    let component = |r: &Value| {
        let name = r
            .as_str()
            .unwrap()
            .trim_start_matches("#/components/schemas/");
        doc["components"]["schemas"][name].clone()
    };
    let target = match schema.get("$ref") {
        Some(r) => component(r),
        None => schema.clone(),
    };
    if let Some(e) = target["examples"].as_array() {
        return e.clone();
    }
    target["anyOf"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|v| examples_of(doc, v))
        .collect()
}

#[test]
fn every_json_answer_of_every_route_has_examples_that_validate_against_its_derived_schema() {
    // The examples are the answer types serialised (most through the conversion the handler
    // uses), so a type whose serde output and derived schema part ways fails here.
    // With an issuer, so the RFC 9728 routes are in the document too.
    let mut config = Config::demo();
    config.issuers.push(crate::config::IssuerConfig {
        id: "corp".into(),
        issuer: "https://idp.example".into(),
        jwks_uri: None,
        audience: None,
        principal_claim: "sub".into(),
        groups_claim: "groups".into(),
        roles: vec![],
        scopes: vec![],
        claims: vec![],
        ca: None,
        rate: None,
        max_pending: None,
        jwks_ttl: std::time::Duration::from_secs(300),
        agents: vec![],
    });
    let doc = document(&config);
    let mut checked = 0;
    for (method, path, op) in operations(&doc) {
        for (status, answer) in op["responses"].as_object().unwrap() {
            let Some(schema) = answer.pointer("/content/application~1json/schema") else {
                continue;
            };
            if !(status.starts_with('2') || status.starts_with('3')) {
                continue;
            }
            let examples = examples_of(&doc, schema);
            assert!(
                !examples.is_empty(),
                "{method} {path} {status} has no example"
            );
            let v = answer_validator(&doc, &method, &path, status);
            for e in examples {
                let errors: Vec<String> = v.iter_errors(&e).map(|e| e.to_string()).collect();
                assert!(
                    errors.is_empty(),
                    "{method} {path} {status}: {errors:?}\n{e}"
                );
                checked += 1;
            }
        }
    }
    assert!(checked >= 30, "{checked}");
}

#[tokio::test]
async fn every_refusal_a_route_lists_is_the_body_the_gateway_answers_it_with() {
    use http_body_util::BodyExt;
    let doc = document(&Config::demo());
    let mut checked = 0;
    for (method, path, op) in operations(&doc) {
        for (status, answer) in op["responses"].as_object().unwrap() {
            let Some(codes) = answer
                .pointer("/content/application~1json/schema/properties/error/properties/code/enum")
                .and_then(Value::as_array)
            else {
                continue;
            };
            let v = answer_validator(&doc, &method, &path, status);
            for c in codes {
                let code = Code::parse(c.as_str().unwrap()).unwrap();
                let r = crate::error::ApiError::new(code, "a refusal").into_response();
                assert_eq!(r.status().as_u16().to_string(), *status);
                let bytes = r.into_body().collect().await.unwrap().to_bytes();
                let body: Value = serde_json::from_slice(&bytes).unwrap();
                let errors: Vec<String> = v.iter_errors(&body).map(|e| e.to_string()).collect();
                assert!(
                    errors.is_empty(),
                    "{method} {path} {status}: {errors:?}\n{body}"
                );
                checked += 1;
            }
        }
    }
    assert!(checked > 300, "{checked}");
}

#[test]
fn a_type_used_as_a_request_and_as_an_answer_has_one_schema() {
    let mut bodies = derive::Bodies::new();
    for route in ROUTES {
        if let Some((t, _)) = route.body {
            bodies.request(t);
        }
        for (_, t) in route.answers {
            bodies.answer(&Shape::Json, Some(*t));
        }
    }
    assert_eq!(bodies.clashes(), Vec::<String>::new());
}

#[test]
fn the_route_table_names_a_type_for_each_json_answer_the_operation_describes() {
    for route in ROUTES {
        let described: Vec<u16> = operation(route.op)
            .ok
            .iter()
            .filter(|(_, _, shape, _)| matches!(shape, Shape::Json))
            .map(|(status, ..)| *status)
            .collect();
        let typed: Vec<u16> = route.answers.iter().map(|(status, _)| *status).collect();
        assert_eq!(described, typed, "{} {}", route.method, route.path);
    }
}

#[test]
fn the_components_are_the_types_the_operations_name_and_nothing_else() {
    let doc = document(&Config::demo());
    let text = doc.to_string();
    for name in doc["components"]["schemas"].as_object().unwrap().keys() {
        assert!(
            text.contains(&format!("\"#/components/schemas/{name}\"")),
            "{name} is in the document but nothing refers to it"
        );
    }
    // The shapes the generated client and the fuzzer rely on.
    let s = &doc["components"]["schemas"];
    assert_eq!(s["ApproveRequest"]["additionalProperties"], json!(false));
    assert_eq!(s["DeclineRequest"]["required"], json!(["reason"]));
    assert_eq!(
        s["CallCompleted"]["properties"]["status"]["enum"],
        json!(["completed"])
    );
    assert_eq!(s["Json"]["maximum"], json!(9007199254740991_i64));
    assert!(
        !text.contains("uint"),
        "no integer format OpenAPI does not define"
    );
}
