//! The TOML shape of a policy file, as serde reads it: every table refuses keys it does not
//! know, and every value keeps its span for `file:line:col` errors. Nothing is checked here
//! beyond its type; [`super::build`] does that.

use std::collections::BTreeMap;

use serde::Deserialize;
use toml::Spanned;

use crate::model::{DecisionKind, GrantScope};

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawFile {
    pub(super) version: Option<Spanned<i64>>,
    pub(super) defaults: Option<Spanned<RawDefaults>>,
    #[serde(default)]
    pub(super) agents: BTreeMap<String, Spanned<RawAgent>>,
    #[serde(default)]
    pub(super) tools: BTreeMap<String, Spanned<RawToolFlag>>,
    #[serde(default)]
    pub(super) rules: Vec<Spanned<RawRule>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawDefaults {
    pub(super) decision: DecisionKind,
    pub(super) resources: Option<Spanned<DecisionKind>>,
    pub(super) prompts: Option<Spanned<DecisionKind>>,
    pub(super) completions: Option<Spanned<DecisionKind>>,
    pub(super) on_error: Option<Spanned<DecisionKind>>,
    pub(super) approval_ttl: Option<Spanned<String>>,
    pub(super) grant: Option<Spanned<RawGrant>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawGrant {
    pub(super) uses: Option<u32>,
    pub(super) ttl: Option<String>,
    pub(super) scope: Option<GrantScope>,
    pub(super) max_uses: Option<u32>,
    pub(super) max_ttl: Option<String>,
    pub(super) max_scope: Option<GrantScope>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawAgent {
    pub(super) require_tool_approval: bool,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawToolFlag {
    pub(super) require_approval: bool,
}

#[derive(Deserialize)]
#[serde(untagged)]
pub(super) enum OneOrMany {
    One(String),
    Many(Vec<String>),
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawRule {
    pub(super) id: Spanned<String>,
    pub(super) tools: Option<Vec<Spanned<String>>>,
    pub(super) resources: Option<Vec<Spanned<String>>>,
    pub(super) prompts: Option<Vec<Spanned<String>>>,
    pub(super) when: Option<Spanned<String>>,
    pub(super) decision: DecisionKind,
    pub(super) message: Option<String>,
    pub(super) approvers: Option<Vec<String>>,
    pub(super) quorum: Option<Spanned<u32>>,
    pub(super) approval_ttl: Option<Spanned<String>>,
    pub(super) grant: Option<Spanned<RawGrant>>,
    pub(super) classifier: Option<Spanned<OneOrMany>>,
}

/// A file read leniently, for its rules' conditions alone: what a file whose shape was refused
/// still says (every other key ignored).
#[derive(Deserialize)]
pub(super) struct LenientFile {
    #[serde(default)]
    pub(super) rules: Vec<Spanned<LenientRule>>,
}

#[derive(Deserialize)]
pub(super) struct LenientRule {
    pub(super) id: Option<String>,
    pub(super) when: Option<Spanned<String>>,
    pub(super) classifier: Option<OneOrMany>,
}
