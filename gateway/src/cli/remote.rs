//! What the commands that talk to a running gateway share: `--url` (or `$AIRLOCK_URL`),
//! `--token` and `--json`, the token variables each role reads, and printing an answer (with a
//! hint when the command line knows better than the code alone).

use clap::Args;
use serde_json::Value;

use super::{bad_input, client};
use crate::error::Code;

#[derive(Args, Debug)]
pub struct Remote {
    /// The gateway's URL; defaults to $AIRLOCK_URL, then http://127.0.0.1:8080.
    #[arg(long, env = "AIRLOCK_URL", default_value = DEFAULT_URL, global = true, hide_env = true)]
    pub url: String,
    /// The bearer token; defaults to $AIRLOCK_TOKEN (the approval commands first try
    /// $AIRLOCK_APPROVER_TOKEN, `webhooks test` $AIRLOCK_ADMIN_TOKEN).
    #[arg(long, global = true)]
    pub token: Option<String>,
    /// Print the gateway's JSON instead of a table.
    #[arg(long, global = true)]
    pub json: bool,
}

/// Where a client command looks for the gateway without `--url` or `$AIRLOCK_URL`.
pub const DEFAULT_URL: &str = "http://127.0.0.1:8080";

impl Remote {
    /// What a printed command line needs to reach the same gateway: ` --url …` unless it is
    /// the default or `$AIRLOCK_URL` (which the next command reads as well).
    pub(super) fn url_flag(&self) -> String {
        let from_env = std::env::var("AIRLOCK_URL").is_ok_and(|u| u == self.url);
        if self.url == DEFAULT_URL || from_env {
            String::new()
        } else {
            format!(" --url {}", self.url)
        }
    }
}

/// Prints a gateway answer: JSON as is, or the given human form; the exit code is 0 for 2xx,
/// 1 otherwise.
pub(super) fn print_answer(
    json_out: bool,
    status: u16,
    body: &Value,
    human: impl FnOnce() -> String,
) -> u8 {
    if json_out {
        say!("{}", serde_json::to_string_pretty(body).unwrap_or_default());
    } else {
        say!("{}", human());
    }
    u8::from(!(200..300).contains(&status))
}

/// The client for `remote`; without --token, the first of `env_vars` that is set.
pub(super) fn remote_client(remote: &Remote, env_vars: &[&str]) -> Result<client::Client, u8> {
    client::Client::new(&remote.url, remote.token.clone(), env_vars)
        .map_err(|e| bad_input(&e.code, e.message))
}

/// What to do about a refusal, when the command line knows better than the code alone.
pub(super) fn hint(status: u16, body: &Value) -> Option<&'static str> {
    match (status, client::error_code(body)?) {
        (401, _) => Some(
            "hint: the gateway does not know this token. A demo gateway makes new tokens at \
             every start: export the ones it printed last.",
        ),
        // Only a token whose role cannot decide at all: an approver outside the groups is
        // told so by the refusal itself.
        (403, code)
            if code == Code::ApprovalForbidden.as_str()
                && body
                    .pointer("/error/message")
                    .and_then(Value::as_str)
                    .is_some_and(|m| m.contains("role cannot decide")) =>
        {
            Some(
                "hint: deciding needs an approver's token: --token \"$AIRLOCK_APPROVER_TOKEN\" \
             (or export AIRLOCK_APPROVER_TOKEN).",
            )
        }
        _ => None,
    }
}

/// Prints an answer, and a hint on stderr when there is one.
pub(super) fn print_answer_hinted(
    json_out: bool,
    status: u16,
    body: &Value,
    human: impl FnOnce() -> String,
) -> u8 {
    let code = print_answer(json_out, status, body, human);
    if let Some(h) = hint(status, body) {
        eprintln!("{h}");
    }
    code
}

pub(super) const AGENT_TOKEN: &[&str] = &["AIRLOCK_TOKEN"];

pub(super) const APPROVER_TOKEN: &[&str] = &["AIRLOCK_APPROVER_TOKEN", "AIRLOCK_TOKEN"];

pub(super) const ADMIN_TOKEN: &[&str] = &["AIRLOCK_ADMIN_TOKEN", "AIRLOCK_TOKEN"];
