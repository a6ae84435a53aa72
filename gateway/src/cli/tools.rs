//! `airlock tools list|show`: the MCP upstreams' tools of a running gateway and their pins
//! (DESIGN §20), from `GET /v1/tools`.

use clap::Subcommand;
use serde_json::Value;

use super::remote::{print_answer_hinted, remote_client, Remote, APPROVER_TOKEN};
use super::{bad_input, client};

#[derive(Subcommand, Debug)]
pub enum ToolsCommand {
    /// List the MCP upstreams' tools: upstream, pin state, the definition fingerprints.
    List {
        #[command(flatten)]
        remote: Remote,
    },
    /// Show one tool (by the name clients see): its pin, and the definition listed against
    /// the one pinned, line by line.
    Show {
        #[command(flatten)]
        remote: Remote,
        name: String,
    },
}

pub(super) fn tools(cmd: ToolsCommand) -> u8 {
    let (remote, path) = match &cmd {
        ToolsCommand::List { remote } => (remote, "/v1/tools".to_owned()),
        ToolsCommand::Show { remote, name } => (
            remote,
            format!("/v1/tools/{}", crate::urlencoded::encode_component(name)),
        ),
    };
    let c = match remote_client(remote, APPROVER_TOKEN) {
        Ok(c) => c,
        Err(code) => return code,
    };
    match c.send(reqwest::Method::GET, &path, None, None) {
        Ok((status, body)) => print_answer_hinted(remote.json, status, &body, || {
            if let Some(line) = client::refusal_line(status, &body) {
                return line;
            }
            match &cmd {
                ToolsCommand::List { .. } => {
                    table(body["tools"].as_array().map(Vec::as_slice).unwrap_or(&[]))
                }
                ToolsCommand::Show { .. } => details(&body),
            }
        }),
        Err(e) => bad_input(&e.code, e.message),
    }
}

/// A short fingerprint for a table: `sha256:` and the first 12 hex digits.
fn short(v: &Value) -> String {
    v.as_str()
        .map(|f| f.chars().take(19).collect())
        .unwrap_or_else(|| "-".into())
}

fn table(tools: &[Value]) -> String {
    let mut rows = vec![[
        "TOOL".to_owned(),
        "SERVER".into(),
        "PIN".into(),
        "STATE".into(),
        "LISTED".into(),
        "PINNED".into(),
        "REVIEW".into(),
    ]];
    for t in tools {
        let s = |k: &str| t[k].as_str().unwrap_or("-").to_owned();
        rows.push([
            s("name"),
            s("server"),
            s("pin"),
            s("state"),
            short(&t["fingerprint"]),
            short(&t["pinned_fingerprint"]),
            s("review"),
        ]);
    }
    client::columns(&rows)
}

fn details(t: &Value) -> String {
    let s = |k: &str| match &t[k] {
        Value::String(s) => s.clone(),
        Value::Null => "-".into(),
        other => other.to_string(),
    };
    let mut out = vec![
        format!("tool                {}", s("name")),
        format!("server              {} (as `{}`)", s("server"), s("tool")),
        format!("pin                 {}", s("pin")),
        format!("state               {}", s("state")),
        format!("listed              {}", s("fingerprint")),
        format!(
            "pinned              {} (by {})",
            s("pinned_fingerprint"),
            s("pinned_by")
        ),
        format!("review              {}", s("review")),
    ];
    if t["fingerprint"] != t["pinned_fingerprint"] {
        out.push(String::new());
        out.push("the pinned definition (-) against the one listed (+):".into());
        out.push(crate::diff::unified(
            &t["pinned_definition"],
            &t["definition"],
        ));
    } else {
        out.push(String::new());
        out.push(crate::diff::pretty(&t["definition"]));
    }
    out.join("\n")
}
