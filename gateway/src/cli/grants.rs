//! `airlock grants list|revoke`: the live grants of a running gateway (`GET /v1/grants`) and
//! revoking one (`DELETE /v1/grants/{id}`), as the inbox's grants page does.

use clap::Subcommand;
use serde_json::Value;

use super::remote::{print_answer_hinted, remote_client, Remote, APPROVER_TOKEN};
use super::{bad_input, client};

#[derive(Subcommand, Debug)]
pub enum GrantsCommand {
    /// List the live grants: the tool, whose calls they let run, the uses left, until when.
    List {
        #[command(flatten)]
        remote: Remote,
    },
    /// Revoke a grant (its id, `g-…`): its uses left are gone at once, and a call it approved
    /// that has not run yet is cancelled.
    Revoke {
        #[command(flatten)]
        remote: Remote,
        id: String,
    },
}

pub(super) fn grants(cmd: GrantsCommand) -> u8 {
    let (remote, method, path) = match &cmd {
        GrantsCommand::List { remote } => (remote, reqwest::Method::GET, "/v1/grants".to_owned()),
        GrantsCommand::Revoke { remote, id } => (
            remote,
            reqwest::Method::DELETE,
            format!("/v1/grants/{}", crate::urlencoded::encode_component(id)),
        ),
    };
    let c = match remote_client(remote, APPROVER_TOKEN) {
        Ok(c) => c,
        Err(code) => return code,
    };
    match c.send(method, &path, None, None) {
        Ok((status, body)) => print_answer_hinted(remote.json, status, &body, || {
            if let Some(line) = client::refusal_line(status, &body) {
                return line;
            }
            match &cmd {
                GrantsCommand::List { .. } => {
                    table(body["grants"].as_array().map(Vec::as_slice).unwrap_or(&[]))
                }
                GrantsCommand::Revoke { .. } => {
                    let g = &body["revoked"];
                    format!(
                        "revoked {} ({} for {}); {} uses were left",
                        g["id"].as_str().unwrap_or(""),
                        g["tool"].as_str().unwrap_or("-"),
                        g["scope"].as_str().unwrap_or("-"),
                        g["uses_left"]
                    )
                }
            }
        }),
        Err(e) => bad_input(&e.code, e.message),
    }
}

fn table(grants: &[Value]) -> String {
    if grants.is_empty() {
        return "no live grants".into();
    }
    let mut rows = vec![[
        "ID".to_owned(),
        "TOOL".into(),
        "SCOPE".into(),
        "REQUESTER".into(),
        "USES LEFT".into(),
        "EXPIRES".into(),
        "APPROVAL".into(),
    ]];
    for g in grants {
        let s = |k: &str| g[k].as_str().unwrap_or("-").to_owned();
        rows.push([
            s("id"),
            s("tool"),
            s("scope"),
            s("requester"),
            g["uses_left"].to_string(),
            s("expires_at"),
            s("approval_id"),
        ]);
    }
    client::columns(&rows)
}
