//! `airlock call`: a tool call through a running gateway, waiting for its approval, or the
//! resume of a held or suspended call.

use airlock_policy::{json, MAX_ARGS_DEPTH};

use clap::Args;
use serde_json::{json, Value};

use super::remote::{print_answer_hinted, remote_client, Remote, AGENT_TOKEN};
use super::{bad_input, client, parse_json_flag, read_json_arg};

#[derive(Args, Debug)]
pub struct CallArgs {
    #[command(flatten)]
    pub remote: Remote,
    /// The tool to call, e.g. `demo.echo` (what `[[tools]]` routes).
    #[arg(long, required_unless_present = "resume")]
    pub tool: Option<String>,
    /// The args as a JSON object, or `-` for stdin.
    #[arg(long, default_value = "{}")]
    pub args: String,
    /// The call's context as a JSON object, e.g. `{"run_id":"r1","tool_call_id":"t1"}`.
    #[arg(long)]
    pub context: Option<String>,
    /// Seconds to wait for a decision once the call is held (default 30).
    #[arg(long)]
    pub wait: Option<u64>,
    /// Answer at once with the approval to wait for (Prefer: respond-async).
    #[arg(long = "async")]
    pub respond_async: bool,
    /// Resume a held call by id instead of making a new one.
    #[arg(long)]
    pub resume: Option<String>,
    /// With --resume: the answer a suspended call waits for (JSON fitting its resume schema).
    #[arg(long, requires = "resume")]
    pub data: Option<String>,
}

pub(super) fn call(args: CallArgs) -> u8 {
    let c = match remote_client(&args.remote, AGENT_TOKEN) {
        Ok(c) => c,
        Err(code) => return code,
    };
    let resume = |id: &str, wait: Option<u64>, data: Option<Value>| {
        let wait = wait.map(|w| format!("?wait={w}")).unwrap_or_default();
        let body = data.map(|d| json!({"resume_data": d}));
        c.send(
            reqwest::Method::POST,
            &format!("/v1/calls/{id}/resume{wait}"),
            body.as_ref(),
            None,
        )
    };
    let result = if let Some(id) = &args.resume {
        let data = match args
            .data
            .as_deref()
            .map(|d| parse_json_flag(d, "data"))
            .transpose()
        {
            Ok(d) => d,
            Err(code) => return code,
        };
        resume(id, args.wait, data)
    } else {
        let body = match call_body(&args) {
            Ok(b) => b,
            Err(code) => return code,
        };

        // Always ask for an answer at once: a call that needs approval comes back as 202 with
        // its ids, which are printed before waiting, so the user can find the approval.
        let first = c.send(
            reqwest::Method::POST,
            "/v1/calls",
            Some(&body),
            Some("respond-async"),
        );
        match first {
            Ok((202, body)) if body["status"] == "suspended" => {
                if args.remote.json {
                    // The summary on stdout says as much; with --json it is the hint.
                    suspended_hint(&body, &args.remote.url_flag());
                }
                Ok((202, body))
            }
            Ok((202, body)) if !args.respond_async => {
                let call_id = body["call_id"].as_str().unwrap_or("").to_owned();
                let approval = body
                    .pointer("/approval/id")
                    .and_then(Value::as_str)
                    .unwrap_or("");
                eprintln!(
                    "held for approval: call {call_id}, approval {approval}\n\
                     decide in the inbox: {}\n\
                     or approve with: airlock approvals approve {approval}{url} --token \"$AIRLOCK_APPROVER_TOKEN\"\n\
                     waiting up to {}s for a decision…",
                    body.pointer("/approval/link").and_then(Value::as_str).unwrap_or(""),
                    args.wait.unwrap_or(DEFAULT_WAIT),
                    url = args.remote.url_flag(),
                );
                resume(&call_id, Some(args.wait.unwrap_or(DEFAULT_WAIT)), None)
            }
            other => other,
        }
    };
    match result {
        Ok((status, body)) => print_answer_hinted(args.remote.json, status, &body, || {
            client::call_summary(status, &body, &args.remote.url_flag())
        }),
        Err(e) => bad_input(&e.code, e.message),
    }
}

/// Seconds `airlock call` waits for a decision without --wait.
const DEFAULT_WAIT: u64 = 30;

/// The `POST /v1/calls` body of `--tool`, `--args` (strict JSON, or `-` for stdin) and
/// `--context`; `Err` is the exit code of a flag that does not read.
fn call_body(args: &CallArgs) -> Result<Value, u8> {
    let raw = read_json_arg(&args.args, "--args")?;
    let call_args = match json::parse(&raw, MAX_ARGS_DEPTH) {
        Ok(v) => v,
        Err(e) => return Err(bad_input(e.code(), format!("--args: {e}"))),
    };
    let context = args
        .context
        .as_deref()
        .map(|c| parse_json_flag(c, "context"))
        .transpose()?;
    Ok(client::call_body(
        args.tool.as_deref().unwrap_or(""),
        call_args,
        context,
    ))
}

/// Says on stderr what a suspended call asks and how to answer it.
fn suspended_hint(body: &Value, url_flag: &str) {
    let call_id = body["call_id"].as_str().unwrap_or("");
    eprintln!(
        "suspended: the tool asks for input: {}\n\
         answer in the inbox: {}\n\
         or: airlock call --resume {call_id}{url_flag} --data '<JSON fitting the resume schema>'",
        body.pointer("/suspend/payload")
            .map(Value::to_string)
            .unwrap_or_default(),
        body["link"].as_str().unwrap_or(""),
    );
}
