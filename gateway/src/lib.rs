//! airlock's gateway: the front ends, the call pipeline, the backends, and the command line.
//!
//! Follow a call from [`server::run`]: the accept loop and its connection guards
//! ([`connections`]) send each request to one front end by path — [`http::handle`] (the JSON
//! API), [`mcp::handle`] (`/mcp`, both MCP revisions) or [`inbox::handle`] (the approvers' web
//! pages). Every front end feeds [`pipeline`], whose [`pipeline::run_call`] names the stages in
//! order (admit → parse and fingerprint → decide → grant or hold → claim → forward → record),
//! a module each; its answer is a protocol-neutral [`pipeline::Outcome`] or an
//! [`error::ApiError`] with a stable [`error::Code`]. Decided calls go to [`backends`] (HTTP
//! tools and MCP upstreams, behind one interface). [`state`] holds what requests share;
//! [`config`] reads `airlock.toml`; [`cli`] is the command line, including the client of a
//! running gateway in [`client`].

pub mod approvals;
pub mod auth;
pub mod backends;
pub mod body;
pub mod classifiers;
pub mod cli;
pub mod clock;
pub mod config;
pub mod connections;
pub mod error;
pub mod events;
pub mod http;
pub mod inbox;
pub mod limits;
pub mod mcp;
pub mod metrics;
pub mod pipeline;
pub mod runs;
pub mod schemas;
pub mod server;
mod serving;
pub mod signing;
pub mod state;
pub mod urlencoded;
pub mod webhooks;
