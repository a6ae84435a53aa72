//! The `airlock` command line: `serve`, the client commands (`call`, `approvals`, `grants`,
//! `tools`), `policy check|test|eval|replay`, `fingerprint`, `audit verify|prune|export`,
//! `store`, `webhooks` and `mcp stdio`.
//!
//! Each command takes its flags and returns an exit code: 0 success, 1 a failed check or test,
//! 2 bad input (with the stable error code on stderr). Nothing here decides anything itself:
//! it calls `airlock_policy`.
//!
//! One file per subcommand (`serve`, `call`, `approvals`, `grants`, `tools`, `policy` with
//! `fingerprint`, `replay`, `audit`, `store`, `webhooks`, `mcp`); `remote` and `client` are what the commands that talk
//! to a running gateway share. This file parses the command line and hands it to them, with
//! the few input helpers every command uses.

use std::io::Read;

use airlock_policy::{json, MAX_ARGS_DEPTH};

use crate::error::Code;
use clap::{Parser, Subcommand};
use serde_json::Value;

/// `println!` for a command's output, through [`say`]: `airlock approvals list | head -1`
/// must not panic when `head` has read its line and gone.
macro_rules! say {
    ($($arg:tt)*) => {
        $crate::cli::say(format_args!($($arg)*))
    };
}

mod approvals;
mod audit;
mod bridge;
mod call;
mod client;
mod grants;
mod mcp;
mod policy;
mod remote;
mod replay;
mod serve;
mod store;
mod tools;
mod webhooks;

pub use approvals::ApprovalsCommand;
pub use audit::AuditCommand;
pub use call::CallArgs;
pub use grants::GrantsCommand;
pub use mcp::McpCommand;
pub use policy::{EvalArgs, FingerprintArgs, PolicyCommand};
pub use remote::Remote;
pub use serve::ServeArgs;
pub use store::{StoreAt, StoreCommand};
pub use tools::ToolsCommand;
pub use webhooks::WebhooksCommand;

#[derive(Parser, Debug)]
#[command(
    name = "airlock",
    version,
    about = "Policy-driven approval gateway for AI agent tool calls"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Run the gateway; without --config, a local demo on the embedded store.
    Serve(ServeArgs),
    /// Call a tool through a running gateway (or resume a held call).
    Call(CallArgs),
    /// List, show, approve and decline approvals on a running gateway.
    #[command(subcommand)]
    Approvals(ApprovalsCommand),
    /// List a running gateway's live grants, or revoke one.
    #[command(subcommand)]
    Grants(GrantsCommand),
    /// Check, test and evaluate policy sets.
    #[command(subcommand)]
    Policy(PolicyCommand),
    /// Print the canonical args and fingerprint of a call.
    Fingerprint(FingerprintArgs),
    /// Verify, prune or export the audit chain: of a stopped gateway's store, a PostgreSQL
    /// store, an export, or a running gateway (`verify --url`).
    #[command(subcommand)]
    Audit(AuditCommand),
    /// Manage a PostgreSQL store.
    #[command(subcommand)]
    Store(StoreCommand),
    /// Sign and verify Standard Webhooks messages; send a test event.
    #[command(subcommand)]
    Webhooks(WebhooksCommand),
    /// MCP helpers: a stdio server that forwards to a gateway's `/mcp`.
    #[command(subcommand)]
    Mcp(McpCommand),
    /// List and show a running gateway's MCP upstream tools and their pins.
    #[command(subcommand)]
    Tools(ToolsCommand),
}

/// Runs the command and returns the process exit code.
pub fn run(cli: Cli) -> u8 {
    match cli.command {
        Command::Serve(args) => serve::serve(args),
        Command::Call(args) => call::call(args),
        Command::Approvals(cmd) => approvals::approvals(cmd),
        Command::Grants(cmd) => grants::grants(cmd),
        Command::Policy(PolicyCommand::Check { path, config }) => {
            policy::policy_check(path.as_deref(), config.as_deref())
        }
        Command::Policy(PolicyCommand::Test { paths }) => policy::policy_test(&paths),
        Command::Policy(PolicyCommand::Eval(args)) => policy::policy_eval(&args),
        Command::Policy(PolicyCommand::Replay(args)) => replay::policy_replay(&args),
        Command::Fingerprint(args) => policy::fingerprint(&args),
        Command::Webhooks(cmd) => webhooks::webhooks(cmd),
        Command::Mcp(McpCommand::Stdio { url, token }) => mcp::mcp_stdio(url, token),
        Command::Tools(cmd) => tools::tools(cmd),
        Command::Audit(AuditCommand::Verify {
            at,
            file,
            url,
            token,
        }) => audit::audit_verify(at, file, url, token),
        Command::Audit(AuditCommand::Prune { at, before, chain }) => {
            audit::audit_prune(&at, before, chain.as_deref())
        }
        Command::Audit(AuditCommand::Export {
            at,
            after,
            out,
            url,
            token,
        }) => {
            let from = match url {
                Some(url) => audit::ExportFrom::Gateway { url, token },
                None => audit::ExportFrom::Store(at),
            };
            audit::audit_export(from, &after, out)
        }
        Command::Store(StoreCommand::Migrate {
            database_url,
            database_ca,
        }) => store::store_migrate(&database_url, database_ca.as_deref()),
    }
}

/// A failure on bad input: prints `error[code]: message` and yields exit code 2.
fn bad_input(code: &str, message: impl std::fmt::Display) -> u8 {
    eprintln!("error[{code}]: {message}");
    2
}

fn read_json_arg(value: &str, what: &str) -> Result<Vec<u8>, u8> {
    if value == "-" {
        let mut buf = Vec::new();
        std::io::stdin().read_to_end(&mut buf).map_err(|e| {
            bad_input(
                Code::RequestInvalidJson.as_str(),
                format!("cannot read {what} from stdin: {e}"),
            )
        })?;
        Ok(buf)
    } else {
        Ok(value.as_bytes().to_vec())
    }
}

fn parse_json_flag(value: &str, what: &str) -> Result<Value, u8> {
    json::parse(value.as_bytes(), MAX_ARGS_DEPTH)
        .map_err(|e| bad_input(e.code(), format!("--{what}: {e}")))
}

fn read_stdin() -> Result<Vec<u8>, u8> {
    let mut buf = Vec::new();
    std::io::stdin().read_to_end(&mut buf).map_err(|e| {
        bad_input(
            "webhook.io",
            format!("cannot read the body from stdin: {e}"),
        )
    })?;
    Ok(buf)
}

/// Prints one line on stdout. A reader that went away (`| head`) is no error of the command:
/// what it did stands, its exit code says how it went, and the rest of its output is dropped.
/// Any other failure to write is reported on stderr.
pub(crate) fn say(line: std::fmt::Arguments<'_>) {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    if let Err(e) = writeln!(out, "{line}").and_then(|()| out.flush()) {
        if e.kind() != std::io::ErrorKind::BrokenPipe {
            eprintln!("error[client.io]: cannot write the output: {e}");
        }
    }
}
