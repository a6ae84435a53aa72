//! airlock's decision core: strict JSON intake, RFC 8785 fingerprints, and CEL policy sets.
//!
//! The flow a front end follows:
//! 1. [`ToolCall::from_body`] parses a request strictly and fingerprints it;
//! 2. [`PolicySet::load`] (once, at start-up or reload) compiles a policy set;
//! 3. [`evaluate`] decides one call from an [`Input`], and explains itself in a [`Decision`].
//!
//! [`cases`] runs the `*.cases.toml` golden files of `airlock policy test`.
//!
//! This crate is pure and synchronous: no tokio, no storage, no clock (time is an input).

mod budget;
mod call;
mod canonical;
pub mod cases;
mod cel;
mod classify;
mod duration;
mod error;
mod eval;
mod expression;
mod functions;
mod glob;
pub mod json;
mod load;
mod model;
mod names;
mod near;

pub use budget::{BYTES_PER_STEP, DEFAULT_BUDGET, EXHAUSTED as BUDGET_EXCEEDED};
pub use call::{ToolCall, MAX_ARGS_DEPTH};
pub use canonical::{
    canonicalize, definition_fingerprint, fingerprint, fingerprint_canonical, hex,
    request_fingerprint, validate_tool_name, write_canonical, write_canonical_with, Fingerprint,
};
pub use cel::build_env;
pub use classify::{BuiltinClassifier, MAX_MATCHES};
pub use duration::{format_duration, parse_duration};
pub use error::{PolicyError, PolicyErrors, RequestError};
pub use eval::{denies_outright, denies_request_outright, evaluate};
pub use expression::{evaluate_expression, ExpressionError};
pub use glob::Glob;
pub use load::{Defaults, Location, PolicySet, Rule, Source};
pub use model::{
    subject, ApprovalSettings, Change, ClassifierOutcome, ClassifierResult, Decision, DecisionKind,
    GrantScope, GrantSettings, Input, OwnedRequest, Request, RequestKind, RuleError, RuleMessage,
};
pub use near::{edit_distance, nearest};
