//! airlock's gateway: the front ends, the call pipeline, the backends, and the command line.
//!
//! Follow a call from [`serve::serve`]: the accept loop, its serving threads and its connection
//! guards ([`serve`]) send each request to one front end by path: [`http::handle`] (the JSON
//! API, whose bodies are the types of [`api`]), [`mcp::handle`] (`/mcp`, both MCP revisions)
//! or [`inbox::handle`] (the approvers' web pages). Every front end feeds [`pipeline`], whose
//! [`pipeline::run_call`] names the stages in order (admit → parse and fingerprint → decide →
//! grant or hold → claim → forward → record), a module each; its answer is a
//! protocol-neutral [`pipeline::Outcome`] or an [`error::ApiError`] with a stable
//! [`error::Code`]. Decided calls go to [`backends`] (HTTP tools and MCP upstreams, behind
//! one interface). A call with a big body runs on [`lanes`], a thread of its own. [`state`]
//! holds what requests share, and [`background`] the work that keeps it current; [`config`]
//! reads `airlock.toml`; [`cli`] is the command line, a file per subcommand, including the
//! client of a running gateway.
//!
//! # The map
//!
//! Each row imports only from rows below it; nothing imports upward, and no two modules (nor
//! two files anywhere in the workspace) import each other, directly or round about
//! (`gateway/tests/layers.rs` holds this). The wire stays at the door: only the front ends
//! (and the door that opens them) name [`api`], which converts from the domain's types, never
//! the other way.
//!
//! ```text
//! the command line    cli
//! the door            serve
//! front ends, workers http · inbox · background · deliveries
//!                     api · mcp · slack · runs · repolicy
//! the one flow        pipeline
//!                     grants · pins · reconfigure
//! shared state        state
//!                     outbox
//!                     auth · email
//! the domain's parts  approvals · backends · classifiers · identity · limits · webhooks
//!                     credentials
//!                     config
//!                     body · lanes · notices · replay · schemas
//! leaves              clock · diff · error · events · metrics · shadow · signing · tls
//!                     · urlencoded · visible
//! other crates        airlock-storage (the store), airlock-policy (rules, CEL, canonical JSON)
//! ```
//!
//! Before this map was kept, eleven imports ran back up to `api` from the domain's modules
//! that built its views, and `api, approvals, auth, body, grants, identity, pins,
//! pipeline, shadow, slack, state` were one circle. Approval events now take their face from
//! the door ([`events::ApprovalFace`]), which events an outbox delivery follows is
//! [`outbox`]'s, and the views (`GET /v1/tools`, the shadow summary, RFC 9728 metadata, the
//! error envelope) are built in [`api`] from what the domain returns.

pub(crate) mod api;
pub(crate) mod approvals;
pub(crate) mod auth;
pub(crate) mod backends;
pub(crate) mod background;
pub(crate) mod body;
pub(crate) mod classifiers;
pub mod cli;
pub(crate) mod clock;
pub(crate) mod config;
pub(crate) mod credentials;
pub(crate) mod deliveries;
pub(crate) mod diff;
pub(crate) mod email;
pub(crate) mod error;
pub(crate) mod events;
pub(crate) mod grants;
pub(crate) mod http;
pub(crate) mod identity;
pub(crate) mod inbox;
pub(crate) mod lanes;
pub(crate) mod limits;
pub(crate) mod mcp;
pub(crate) mod metrics;
pub(crate) mod notices;
pub(crate) mod outbox;
pub(crate) mod pins;
pub(crate) mod pipeline;
pub(crate) mod reconfigure;
pub(crate) mod replay;
pub(crate) mod repolicy;
pub(crate) mod runs;
pub(crate) mod schemas;
pub(crate) mod serve;
pub(crate) mod shadow;
pub mod signing;
pub(crate) mod slack;
pub(crate) mod state;
pub(crate) mod tls;
pub(crate) mod urlencoded;
pub(crate) mod visible;
pub(crate) mod webhooks;
