//! `airlock webhooks sign|verify|test`: Standard Webhooks signatures offline, and a test
//! event through a running gateway.

use crate::signing;
use clap::Subcommand;
use serde_json::json;

use super::remote::{print_answer_hinted, remote_client, Remote, ADMIN_TOKEN};
use super::{bad_input, client, read_stdin};

#[derive(Subcommand, Debug)]
pub enum WebhooksCommand {
    /// Print the `webhook-signature` value for the body on stdin.
    Sign {
        /// `whsec_…`
        #[arg(long)]
        secret: String,
        #[arg(long)]
        id: String,
        /// Unix seconds.
        #[arg(long)]
        timestamp: i64,
    },
    /// Exit 0 when the signature of the body on stdin is valid; exit 1 naming why not.
    Verify {
        #[arg(long)]
        secret: String,
        #[arg(long)]
        id: String,
        #[arg(long)]
        timestamp: i64,
        /// The `webhook-signature` header value (several space-separated ones allowed).
        #[arg(long)]
        signature: String,
        /// Seconds the timestamp may be from now.
        #[arg(long, default_value_t = 300)]
        tolerance: i64,
    },
    /// Ask a running gateway to send a signed test event to webhook ID.
    Test {
        #[command(flatten)]
        remote: Remote,
        id: String,
    },
}

pub(super) fn webhooks(cmd: WebhooksCommand) -> u8 {
    match cmd {
        WebhooksCommand::Sign {
            secret,
            id,
            timestamp,
        } => {
            let key = match signing::secret_key(&secret) {
                Ok(k) => k,
                Err(e) => return bad_input("webhook.invalid_secret", e),
            };
            let body = match read_stdin() {
                Ok(b) => b,
                Err(code) => return code,
            };
            match signing::sign(&key, &id, timestamp, &body) {
                Ok(sig) => {
                    say!("{sig}");
                    0
                }
                Err(e) => bad_input("webhook.invalid_secret", e),
            }
        }
        WebhooksCommand::Verify {
            secret,
            id,
            timestamp,
            signature,
            tolerance,
        } => {
            let key = match signing::secret_key(&secret) {
                Ok(k) => k,
                Err(e) => return bad_input("webhook.invalid_secret", e),
            };
            let body = match read_stdin() {
                Ok(b) => b,
                Err(code) => return code,
            };
            let now = (crate::clock::now_ms() / 1000) as i64;
            match signing::verify(&key, &id, timestamp, &body, &signature, now, tolerance) {
                Ok(()) => {
                    say!("valid");
                    0
                }
                Err(e) => {
                    say!("invalid: {e}");
                    1
                }
            }
        }
        WebhooksCommand::Test { remote, id } => {
            let c = match remote_client(&remote, ADMIN_TOKEN) {
                Ok(c) => c,
                Err(code) => return code,
            };
            match c.send(
                reqwest::Method::POST,
                &format!("/v1/webhooks/{id}/test"),
                Some(&json!({})),
                None,
            ) {
                Ok((status, body)) => print_answer_hinted(remote.json, status, &body, || {
                    match client::refusal_line(status, &body) {
                        Some(line) => line,
                        None => format!(
                            "queued test delivery {}",
                            body["delivery_id"].as_str().unwrap_or("")
                        ),
                    }
                }),
                Err(e) => bad_input(&e.code, e.message),
            }
        }
    }
}
