//! What the list methods answer (`tools/list`, `prompts/list`, `resources/list` and its
//! templates): the built-in demo tools beside the upstreams' tools, less those the policy denies
//! the principal outright; the upstreams' lists gathered on every path each serves; one page at
//! a time by a numeric cursor.

use serde_json::{json, Map, Value};

use airlock_policy::RequestKind;
use airlock_storage::Principal;

use crate::config::Upstream;
use crate::state::Gateway;

use super::PAGE;

/// The tools `principal` is shown: [`tools`] without those the live policy denies it outright
/// ([`crate::visible`]).
pub(super) fn visible_tools(gw: &Gateway, principal: &Principal, modern: bool) -> Vec<Value> {
    let all = tools(gw, modern);
    let items: Vec<(&str, &str)> = all
        .iter()
        .map(|t| ("", t.get("name").and_then(Value::as_str).unwrap_or("")))
        .collect();
    let hidden = gw.visible.hidden(
        &gw.policy.load(),
        &crate::pipeline::decide::principal_json(principal),
        RequestKind::Tool,
        &items,
    );
    if hidden.is_empty() {
        return all;
    }
    all.into_iter()
        .filter(|t| {
            let name = t.get("name").and_then(Value::as_str).unwrap_or("");
            !hidden.contains(name)
        })
        .collect()
}

/// Every tool a client may call here: the built-in demo tools and the upstreams' tools. A
/// 2025-11-25 client may call each as a task.
fn tools(gw: &Gateway, modern: bool) -> Vec<Value> {
    let mut out: Vec<Value> = gw
        .config
        .tools
        .iter()
        .filter_map(|t| match &t.upstream {
            Upstream::Builtin(name) => Some(builtin_tool(name)),
            Upstream::Http(_) => None,
        })
        .collect();
    out.extend(gw.backends.mcp.tools());
    if !modern {
        for t in &mut out {
            t["execution"] = json!({"taskSupport": "optional"});
        }
    }
    out
}

fn builtin_tool(name: &str) -> Value {
    match name {
        "demo.shell_preview" => json!({
            "name": name,
            "description": "Shows the shell command it would run (demo: runs nothing). Needs approval.",
            "inputSchema": {"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]},
        }),
        "demo.deploy" => json!({
            "name": name,
            "description": "Deploys a service (demo: deploys nothing). Asks which environment mid-call.",
            "inputSchema": {"type": "object", "properties": {"service": {"type": "string"}}, "required": ["service"]},
        }),
        _ => json!({
            "name": name,
            "description": "Echoes its arguments back (demo).",
            "inputSchema": {"type": "object", "properties": {"text": {"type": "string"}}},
        }),
    }
}

/// One page of a list, by a numeric cursor.
pub(super) fn paginate(items: Vec<Value>, field: &str, params: &Value) -> Value {
    let start: usize = params
        .get("cursor")
        .and_then(Value::as_str)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let page: Vec<Value> = items.iter().skip(start).take(PAGE).cloned().collect();
    let mut out = Map::new();
    out.insert(field.into(), Value::Array(page));
    if start + PAGE < items.len() {
        out.insert(
            "nextCursor".into(),
            Value::String((start + PAGE).to_string()),
        );
    }
    Value::Object(out)
}

/// A list gathered from every upstream, on every path each serves, each item once by `key`
/// (an upstream that fails is left out). Prompts' names are prefixed. Resources and prompts
/// the live policy denies `principal` outright are left out ([`crate::visible`]); templates
/// are not (a template is not the URI a read names).
pub(super) async fn aggregate(
    gw: &Gateway,
    principal: &Principal,
    method: &str,
    field: &str,
    key: &str,
    params: &Value,
) -> Value {
    let mut items = Vec::new();
    for s in &gw.backends.mcp.servers {
        let Ok(listed) = s.list_all(method, field, key).await else {
            continue;
        };
        for mut item in listed {
            if field == "prompts" {
                if let Some(n) = item.get("name").and_then(Value::as_str) {
                    item["name"] = Value::String(format!("{}{n}", s.config.prefix));
                }
            }
            items.push((s.config.name.as_str(), item));
        }
    }
    let kind = match field {
        "resources" => Some(RequestKind::Resource),
        "prompts" => Some(RequestKind::Prompt),
        _ => None,
    };
    let name_key = if field == "prompts" { "name" } else { key };
    let hidden = kind.map(|kind| {
        let named: Vec<(&str, &str)> = items
            .iter()
            .map(|(server, item)| {
                (
                    *server,
                    item.get(name_key).and_then(Value::as_str).unwrap_or(""),
                )
            })
            .collect();
        gw.visible.hidden(
            &gw.policy.load(),
            &crate::pipeline::decide::principal_json(principal),
            kind,
            &named,
        )
    });
    let shown: Vec<Value> = items
        .into_iter()
        .filter(|(_, item)| {
            let name = item.get(name_key).and_then(Value::as_str).unwrap_or("");
            !hidden.as_ref().is_some_and(|h| h.contains(name))
        })
        .map(|(_, item)| item)
        .collect();
    paginate(shown, field, params)
}
