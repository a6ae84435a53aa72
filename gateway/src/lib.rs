//! airlock's gateway: the front ends, the call pipeline, the backends, and the command line.
//!
//! Follow a call from [`serve::run`]: the accept loop, its serving threads and its connection
//! guards ([`serve`]) send each request to one front end by path — [`http::handle`] (the JSON
//! API), [`mcp::handle`] (`/mcp`, both MCP revisions) or [`inbox::handle`] (the approvers' web
//! pages). Every front end feeds [`pipeline`], whose [`pipeline::run_call`] names the stages in
//! order (admit → parse and fingerprint → decide → grant or hold → claim → forward → record),
//! a module each; its answer is a protocol-neutral [`pipeline::Outcome`] or an
//! [`error::ApiError`] with a stable [`error::Code`]. Decided calls go to [`backends`] (HTTP
//! tools and MCP upstreams, behind one interface). [`state`] holds what requests share;
//! [`config`] reads `airlock.toml`; [`cli`] is the command line, a file per subcommand,
//! including the client of a running gateway.

pub mod approvals;
pub mod auth;
pub mod backends;
pub mod body;
pub mod classifiers;
pub mod cli;
pub mod clock;
pub mod config;
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
pub mod serve;
pub mod signing;
pub mod state;
pub mod urlencoded;
pub mod webhooks;
