//! Loading a policy set: TOML files in, a compiled, checked [`PolicySet`] out.
//!
//! A set is one `.toml` file or a folder of them (not recursive, `*.cases.toml` skipped). Every
//! file is parsed with unknown keys refused; then the files merge (one `[defaults]`, no key or
//! rule id twice), every `when` compiles, and every name it uses is checked. A set with any
//! problem is refused whole, with every problem listed as `file:line:col`, rule id and code.
//!
//! It does not evaluate: [`crate::eval`] does.
//!
//! By stage: [`raw`] is the TOML shape serde reads (unknown keys refused), [`build`] merges the
//! files and checks each rule's parts, [`condition`] compiles a rule's `when` and checks the
//! names and calls in it; this file holds the set they make and its public API.

mod build;
mod condition;
mod raw;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use cel::Env;
use sha2::{Digest, Sha256};

use crate::canonical::hex;
use crate::cel::shared_env;
use crate::error::{PolicyError, PolicyErrors};
use crate::glob::Glob;
use crate::model::{ApprovalSettings, DecisionKind, GrantScope, GrantSettings};

use build::Builder;

const DEFAULT_APPROVAL_TTL: Duration = Duration::from_secs(15 * 60);
const DEFAULT_GRANT: GrantSettings = GrantSettings {
    uses: 1,
    ttl: Duration::from_secs(10 * 60),
    scope: GrantScope::Run,
    max_uses: 1,
    max_ttl: Duration::from_secs(10 * 60),
    max_scope: GrantScope::Run,
};
/// Where a policy element was written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Location {
    pub file: PathBuf,
    pub line: usize,
    pub col: usize,
}

/// The policy-wide settings of `[defaults]`.
#[derive(Debug, Clone, PartialEq)]
pub struct Defaults {
    /// A tool call's, when no rule matches.
    pub decision: DecisionKind,
    /// A resource read or subscription's, a prompt's and a completion's, when no rule
    /// matches (`allow` unless the file says otherwise: they passed unjudged before).
    pub resources: DecisionKind,
    pub prompts: DecisionKind,
    pub completions: DecisionKind,
    /// What a rule that fails to evaluate yields; never `Allow`.
    pub on_error: DecisionKind,
    pub approval: ApprovalSettings,
}

/// One compiled rule.
#[derive(Debug)]
pub struct Rule {
    pub id: String,
    /// Tool-name pre-filter; empty (with no `resources` or `prompts` either) means every tool.
    pub tools: Vec<Glob>,
    /// Resource URIs it is for (reads, subscriptions, completions of them); none when empty.
    pub resources: Vec<Glob>,
    /// Prompt names it is for (`prompts/get`, completions of them); none when empty.
    pub prompts: Vec<Glob>,
    /// The CEL source, as written.
    pub when: String,
    pub decision: DecisionKind,
    pub message: Option<String>,
    /// The rule's approval settings with the defaults filled in; for a rule that is not
    /// `require_approval` these are the defaults, used if it errors into `on_error`.
    pub approval: ApprovalSettings,
    /// Classifiers the rule names; their results are bound as `classifier.<name>`.
    pub classifiers: Vec<String>,
    pub location: Location,
    /// The compiled `when`, rewritten to charge the evaluation budget (`crate::budget`).
    pub(crate) metered: crate::budget::Metered,
    /// Bitmask over the declared variables the rule reads.
    pub(crate) uses: u16,
    /// The `args.<field>`s the rule reads; `None` when it reads `args` as a whole.
    pub(crate) args_fields: Option<Vec<String>>,
}

impl Rule {
    /// Whether the rule's tool pre-filter admits a call of `tool`: `tools` names it, or the
    /// rule names no tools, resources or prompts at all (then it is for every tool call).
    pub fn applies_to(&self, tool: &str) -> bool {
        if self.tools.is_empty() {
            self.resources.is_empty() && self.prompts.is_empty()
        } else {
            self.tools.iter().any(|g| g.matches(tool))
        }
    }

    /// Whether the rule is for `input`: a tool call by `tools` ([`Rule::applies_to`]), any
    /// other request by `resources` (its URI) or `prompts` (its prompt's name) alone.
    pub fn applies(&self, input: &crate::Input<'_>) -> bool {
        let r = &input.request;
        if r.kind == crate::RequestKind::Tool {
            return self.applies_to(input.tool);
        }
        r.uri
            .is_some_and(|u| self.resources.iter().any(|g| g.matches(u)))
            || r.prompt
                .is_some_and(|p| self.prompts.iter().any(|g| g.matches(p)))
    }
}

impl Defaults {
    /// What decides a request of `kind` that no rule matched.
    pub fn for_kind(&self, kind: crate::RequestKind) -> DecisionKind {
        match kind {
            crate::RequestKind::Tool => self.decision,
            crate::RequestKind::Resource => self.resources,
            crate::RequestKind::Prompt => self.prompts,
            crate::RequestKind::Completion => self.completions,
        }
    }
}

/// One source file of a set, for `GET /v1/policy`.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Source {
    pub path: PathBuf,
    pub sha256: String,
}

/// A compiled policy set. Immutable once loaded: reloading builds a new one.
pub struct PolicySet {
    pub(crate) version: String,
    pub(crate) sources: Vec<Source>,
    pub(crate) defaults: Defaults,
    /// Agents whose every call needs approval.
    pub(crate) agents: BTreeSet<String>,
    /// Tool patterns whose every call needs approval.
    pub(crate) tool_flags: Vec<Glob>,
    /// In the order they are evaluated: deny rules first, then require_approval, then allow,
    /// each by id, so that the file order never changes which rule a spent budget stops.
    pub(crate) rules: Vec<Rule>,
    pub(crate) env: Arc<Env>,
    /// Steps one evaluation may use, all rules together (`crate::budget`).
    pub(crate) budget: u64,
    /// What loaded but deserves a look (`policy.nested_comprehension`).
    pub(crate) warnings: Vec<PolicyError>,
}

impl std::fmt::Debug for PolicySet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PolicySet")
            .field("version", &self.version)
            .field("rules", &self.rules.len())
            .finish_non_exhaustive()
    }
}

impl PolicySet {
    /// Whether any rule reads the variable `name` (the caller can skip finding its value).
    pub fn reads(&self, name: &str) -> bool {
        match crate::cel::VARIABLES.iter().position(|v| *v == name) {
            Some(i) => self.rules.iter().any(|r| r.uses & (1 << i) != 0),
            None => false,
        }
    }

    /// Loads the set at `path`: one `.toml` file, or a folder of them.
    pub fn load(path: &Path) -> Result<PolicySet, PolicyErrors> {
        let files = if path.is_dir() {
            policy_files(path)?
        } else {
            vec![path.to_path_buf()]
        };
        let mut sources = Vec::new();
        for file in files {
            let text = std::fs::read_to_string(&file).map_err(|e| {
                PolicyError::new("policy.io", &file, format!("cannot read the file: {e}"))
            })?;
            sources.push((file, text));
        }
        PolicySet::from_sources(sources)
    }

    /// Builds a set from `(path, text)` pairs, as if read from those files.
    pub fn from_sources(mut sources: Vec<(PathBuf, String)>) -> Result<PolicySet, PolicyErrors> {
        sources.sort_by(|a, b| a.0.cmp(&b.0));
        let env = shared_env().map_err(|e| PolicyError::new("policy.internal", "", e))?;
        let mut builder = Builder::default();
        for (path, text) in &sources {
            builder.add_file(path, text, &env);
        }
        let version = policy_version(&sources);
        let source_list = sources
            .iter()
            .map(|(path, text)| Source {
                path: path.clone(),
                sha256: hex(&Sha256::digest(text.as_bytes())),
            })
            .collect();
        builder.finish(version, source_list, env)
    }

    /// `sha256:` + hex of the hash over every source, in path order.
    pub fn version(&self) -> &str {
        &self.version
    }

    pub fn sources(&self) -> &[Source] {
        &self.sources
    }

    pub fn defaults(&self) -> &Defaults {
        &self.defaults
    }

    pub fn rules(&self) -> &[Rule] {
        &self.rules
    }

    /// The same set, evaluated under a budget of `steps` per call (default
    /// [`crate::DEFAULT_BUDGET`]; the gateway's `[server] policy_budget`).
    pub fn with_budget(mut self, steps: u64) -> PolicySet {
        self.budget = steps;
        self
    }

    /// Steps one evaluation may use.
    pub fn budget(&self) -> u64 {
        self.budget
    }

    /// What loaded but deserves a look, each with its place, rule and code.
    pub fn warnings(&self) -> &[PolicyError] {
        &self.warnings
    }

    /// The classifiers that rules which may apply to `tool` name: the gateway runs these, and
    /// only these, before evaluating.
    pub fn classifiers_for(&self, tool: &str) -> BTreeSet<&str> {
        self.rules
            .iter()
            .filter(|r| r.applies_to(tool))
            .flat_map(|r| r.classifiers.iter().map(String::as_str))
            .collect()
    }

    /// Every classifier any rule names, to check against the configured ones.
    pub fn classifier_names(&self) -> BTreeSet<&str> {
        self.rules
            .iter()
            .flat_map(|r| r.classifiers.iter().map(String::as_str))
            .collect()
    }

    /// Refuses a set that names a classifier outside `known` (the configured ones).
    pub fn check_classifiers(&self, known: &BTreeSet<String>) -> Result<(), PolicyErrors> {
        let errors: Vec<PolicyError> = self
            .rules
            .iter()
            .flat_map(|r| r.classifiers.iter().map(move |c| (r, c)))
            .filter(|(_, c)| !known.contains(*c))
            .map(|(r, c)| {
                PolicyError::new(
                    "policy.unknown_classifier",
                    &r.location.file,
                    format!("classifier `{c}` is not configured"),
                )
                .at((r.location.line, r.location.col))
                .in_rule(&r.id)
            })
            .collect();
        if errors.is_empty() {
            Ok(())
        } else {
            Err(PolicyErrors(errors))
        }
    }
}

/// The policy files of a folder: `*.toml` but not `*.cases.toml`, sorted, not recursive.
fn policy_files(dir: &Path) -> Result<Vec<PathBuf>, PolicyErrors> {
    let io = |e: std::io::Error| {
        PolicyError::new("policy.io", dir, format!("cannot read the folder: {e}"))
    };
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(io)? {
        let path = entry.map_err(io)?.path();
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
        if path.is_file() && name.ends_with(".toml") && !name.ends_with(".cases.toml") {
            files.push(path);
        }
    }
    files.sort();
    if files.is_empty() {
        return Err(PolicyError::new(
            "policy.empty",
            dir,
            "the folder holds no policy `.toml` file",
        )
        .into());
    }
    Ok(files)
}

fn policy_version(sources: &[(PathBuf, String)]) -> String {
    let mut h = Sha256::new();
    h.update(b"airlock.policy.v1\n");
    for (path, text) in sources {
        let name = path
            .file_name()
            .map(|n| n.to_string_lossy())
            .unwrap_or_default();
        h.update(name.as_bytes());
        h.update(b"\n");
        h.update(text.len().to_string().as_bytes());
        h.update(b"\n");
        h.update(text.as_bytes());
    }
    format!("sha256:{}", hex(&h.finalize()))
}
