//! airlock's gateway: the front ends, the call pipeline, and the command line.
//!
//! Start at [`server::run`]: the accept loop and its connection guards ([`connections`])
//! send each request to one front end by path — [`http::handle`] (the JSON API),
//! [`mcp::handle`] (`/mcp`, both MCP revisions, with the upstream MCP clients in
//! [`mcp::upstream`]) or [`inbox::handle`] (the approvers' web pages). Every front end feeds
//! [`pipeline`] (parse → fingerprint → decide → grant or hold → forward → audit), whose
//! answer is a protocol-neutral [`pipeline::Outcome`] or an [`error::ApiError`] with a stable
//! code. [`state`] holds what requests share; [`config`] reads `airlock.toml`; [`cli`] is the
//! command line, including the client of a running gateway in [`client`].

pub mod approvals;
pub mod auth;
pub mod backends;
pub mod body;
pub mod classifiers;
pub mod cli;
pub mod client;
pub mod clock;
pub mod config;
pub mod connections;
pub mod error;
pub mod http;
pub mod inbox;
pub mod limits;
pub mod mcp;
pub mod metrics;
pub mod pipeline;
pub mod runs;
pub mod server;
mod serving;
pub mod signing;
pub mod state;
pub mod urlencoded;
pub mod webhooks;
