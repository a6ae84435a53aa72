//! airlock's gateway: the HTTP front end, the call pipeline, and the command line.
//!
//! Start at [`server::run`]; a request goes through [`http::handle`] (routing and roles) into
//! [`pipeline`] (authenticate → parse → fingerprint → decide → grant or hold → forward → audit).
//! [`state`] holds what requests share; [`config`] reads `airlock.toml`; [`cli`] is the
//! command line, including the client of a running gateway in [`client`].

pub mod approvals;
pub mod auth;
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
pub mod server;
pub mod signing;
pub mod state;
pub mod upstream;
pub mod urlencoded;
pub mod webhooks;
