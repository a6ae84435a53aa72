//! `airlock approvals list|show|approve|decline` against a running gateway.

use clap::Subcommand;
use serde_json::{json, Value};

use super::remote::{print_answer_hinted, remote_client, Remote, APPROVER_TOKEN};
use super::{bad_input, client, parse_json_flag};

#[derive(Subcommand, Debug)]
pub enum ApprovalsCommand {
    /// List approvals (pending ones by default), newest first.
    List {
        #[command(flatten)]
        remote: Remote,
        #[arg(long, default_value = "pending", value_parser = ["pending", "approved", "declined", "expired", "cancelled", "all"])]
        status: String,
        #[arg(long)]
        tool: Option<String>,
        #[arg(long)]
        run_id: Option<String>,
    },
    /// Show one approval: the call, its args and fingerprint, the rules that held it.
    Show {
        #[command(flatten)]
        remote: Remote,
        id: String,
    },
    /// Approve; with --args, approve an edited call instead.
    Approve {
        #[command(flatten)]
        remote: Remote,
        id: String,
        #[arg(long)]
        reason: Option<String>,
        /// Edited args (a JSON object): the call runs with these instead.
        #[arg(long)]
        args: Option<String>,
        /// Whose identical calls the approval also lets run (`call`, `run`, `principal`),
        /// within the rule's `max_scope`; always only these exact args.
        #[arg(long = "for", value_name = "SCOPE")]
        scope: Option<String>,
        /// How long the grant lasts (`30m`, `1h`), within the rule's `max_ttl`.
        #[arg(long)]
        ttl: Option<String>,
        /// How many calls it lets run, the approved one included, within `max_uses`.
        #[arg(long)]
        uses: Option<u32>,
    },
    /// Decline, with the reason the agent will read.
    Decline {
        #[command(flatten)]
        remote: Remote,
        id: String,
        #[arg(long)]
        reason: String,
    },
}

pub(super) fn approvals(cmd: ApprovalsCommand) -> u8 {
    let (remote, method, path, body) = match &cmd {
        ApprovalsCommand::List {
            remote,
            status,
            tool,
            run_id,
        } => (
            remote,
            reqwest::Method::GET,
            list_path(status, tool.as_deref(), run_id.as_deref()),
            None,
        ),
        ApprovalsCommand::Show { remote, id } => (
            remote,
            reqwest::Method::GET,
            format!("/v1/approvals/{id}"),
            None,
        ),
        ApprovalsCommand::Approve {
            remote,
            id,
            reason,
            args,
            scope,
            ttl,
            uses,
        } => match approve_body(
            reason.as_deref(),
            args.as_deref(),
            scope.as_deref(),
            ttl.as_deref(),
            *uses,
        ) {
            Ok(b) => (
                remote,
                reqwest::Method::POST,
                format!("/v1/approvals/{id}/approve"),
                Some(b),
            ),
            Err(code) => return code,
        },
        ApprovalsCommand::Decline { remote, id, reason } => (
            remote,
            reqwest::Method::POST,
            format!("/v1/approvals/{id}/decline"),
            Some(json!({"reason": reason})),
        ),
    };
    let c = match remote_client(remote, APPROVER_TOKEN) {
        Ok(c) => c,
        Err(code) => return code,
    };
    match c.send(method, &path, body.as_ref(), None) {
        Ok((status, body)) => print_answer_hinted(remote.json, status, &body, || {
            if let Some(line) = client::refusal_line(status, &body) {
                return line;
            }
            match &cmd {
                ApprovalsCommand::List { .. } => client::approvals_table(
                    body["approvals"]
                        .as_array()
                        .map(Vec::as_slice)
                        .unwrap_or(&[]),
                ),
                _ => client::approval_details(&body),
            }
        }),
        Err(e) => bad_input(&e.code, e.message),
    }
}

/// `GET /v1/approvals` with the filters given (`--status all` is no filter).
fn list_path(status: &str, tool: Option<&str>, run_id: Option<&str>) -> String {
    let mut q = vec![];
    if status != "all" {
        q.push(format!("status={status}"));
    }
    if let Some(t) = tool {
        q.push(format!("tool={t}"));
    }
    if let Some(r) = run_id {
        q.push(format!("run_id={r}"));
    }
    format!("/v1/approvals?{}", q.join("&"))
}

/// The approve body: the reason, the grant chosen (`--for`, `--ttl`, `--uses`) and edited
/// args; `Err` is the exit code of args that do not read.
fn approve_body(
    reason: Option<&str>,
    args: Option<&str>,
    scope: Option<&str>,
    ttl: Option<&str>,
    uses: Option<u32>,
) -> Result<Value, u8> {
    let mut b = json!({});
    if let Some(r) = reason {
        b["reason"] = json!(r);
    }
    if scope.is_some() || ttl.is_some() || uses.is_some() {
        let mut g = serde_json::Map::new();
        if let Some(s) = scope {
            g.insert("scope".into(), json!(s));
        }
        if let Some(t) = ttl {
            g.insert("ttl".into(), json!(t));
        }
        if let Some(u) = uses {
            g.insert("uses".into(), json!(u));
        }
        b["grant"] = Value::Object(g);
    }
    if let Some(a) = args {
        b["args"] = parse_json_flag(a, "args")?;
    }
    Ok(b)
}
