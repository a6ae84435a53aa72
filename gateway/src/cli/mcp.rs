//! `airlock mcp stdio`: an MCP server on stdin and stdout that forwards to a gateway's `/mcp`.

use clap::Subcommand;

use super::bad_input;
use crate::error::Code;

#[derive(Subcommand, Debug)]
pub enum McpCommand {
    /// Serve MCP on stdin and stdout, forwarding every message to URL (a gateway's `/mcp`),
    /// for clients that can only spawn a process.
    Stdio {
        /// The gateway's MCP endpoint, e.g. http://127.0.0.1:8080/mcp; defaults to
        /// $AIRLOCK_URL's `/mcp`, then http://127.0.0.1:8080/mcp.
        #[arg(long)]
        url: Option<String>,
        /// The bearer token; defaults to $AIRLOCK_TOKEN.
        #[arg(long)]
        token: Option<String>,
    },
}

pub(super) fn mcp_stdio(url: Option<String>, token: Option<String>) -> u8 {
    let url = url.unwrap_or_else(|| {
        let base =
            std::env::var("AIRLOCK_URL").unwrap_or_else(|_| super::remote::DEFAULT_URL.to_owned());
        format!("{}/mcp", base.trim_end_matches('/'))
    });
    let Some(token) = token
        .or_else(|| std::env::var("AIRLOCK_TOKEN").ok())
        .filter(|t| !t.is_empty())
    else {
        return bad_input(
            Code::AuthUnauthenticated.as_str(),
            "give --token or set AIRLOCK_TOKEN",
        );
    };
    let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
    match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt.block_on(super::bridge::run(url, token)),
        Err(e) => {
            eprintln!("error[internal]: cannot start the runtime: {e}");
            1
        }
    }
}
