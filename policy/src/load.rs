//! Loading a policy set: TOML files in, a compiled, checked [`PolicySet`] out.
//!
//! A set is one `.toml` file or a folder of them (not recursive, `*.cases.toml` skipped). Every
//! file is parsed with unknown keys refused; then the files merge (one `[defaults]`, no key or
//! rule id twice), every `when` compiles, and every name it uses is checked. A set with any
//! problem is refused whole, with every problem listed as `file:line:col`, rule id and code.
//!
//! It does not evaluate: [`crate::eval`] does.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use cel::{Env, Program};
use serde::Deserialize;
use sha2::{Digest, Sha256};
use toml::Spanned;

use crate::canonical::hex;
use crate::cel::{references, shared_env, References, VARIABLES};
use crate::duration::parse_duration;
use crate::error::{line_col, PolicyError, PolicyErrors};
use crate::glob::Glob;
use crate::model::{ApprovalSettings, DecisionKind, GrantScope, GrantSettings};

const DEFAULT_APPROVAL_TTL: Duration = Duration::from_secs(15 * 60);
const DEFAULT_GRANT: GrantSettings = GrantSettings {
    uses: 1,
    ttl: Duration::from_secs(10 * 60),
    scope: GrantScope::Run,
    max_uses: 1,
    max_ttl: Duration::from_secs(10 * 60),
    max_scope: GrantScope::Run,
};

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawFile {
    version: Option<Spanned<i64>>,
    defaults: Option<Spanned<RawDefaults>>,
    #[serde(default)]
    agents: BTreeMap<String, Spanned<RawAgent>>,
    #[serde(default)]
    tools: BTreeMap<String, Spanned<RawToolFlag>>,
    #[serde(default)]
    rules: Vec<Spanned<RawRule>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawDefaults {
    decision: DecisionKind,
    on_error: Option<Spanned<DecisionKind>>,
    approval_ttl: Option<Spanned<String>>,
    grant: Option<Spanned<RawGrant>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawGrant {
    uses: Option<u32>,
    ttl: Option<String>,
    scope: Option<GrantScope>,
    max_uses: Option<u32>,
    max_ttl: Option<String>,
    max_scope: Option<GrantScope>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawAgent {
    require_tool_approval: bool,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawToolFlag {
    require_approval: bool,
}

#[derive(Deserialize)]
#[serde(untagged)]
enum OneOrMany {
    One(String),
    Many(Vec<String>),
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRule {
    id: Spanned<String>,
    tools: Option<Vec<Spanned<String>>>,
    when: Option<Spanned<String>>,
    decision: DecisionKind,
    message: Option<String>,
    approvers: Option<Vec<String>>,
    quorum: Option<Spanned<u32>>,
    approval_ttl: Option<Spanned<String>>,
    grant: Option<Spanned<RawGrant>>,
    classifier: Option<Spanned<OneOrMany>>,
}

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
    pub decision: DecisionKind,
    /// What a rule that fails to evaluate yields; never `Allow`.
    pub on_error: DecisionKind,
    pub approval: ApprovalSettings,
}

/// One compiled rule.
#[derive(Debug)]
pub struct Rule {
    pub id: String,
    /// Tool-name pre-filter; empty means every tool.
    pub tools: Vec<Glob>,
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
    /// Whether the rule's tool pre-filter admits `tool`.
    pub fn applies_to(&self, tool: &str) -> bool {
        self.tools.is_empty() || self.tools.iter().any(|g| g.matches(tool))
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

/// A `grant` table as written: what it leaves out comes from the defaults.
#[derive(Clone, Copy, Default)]
struct PartialGrant {
    uses: Option<u32>,
    ttl: Option<Duration>,
    scope: Option<GrantScope>,
    max_uses: Option<u32>,
    max_ttl: Option<Duration>,
    max_scope: Option<GrantScope>,
}

impl PartialGrant {
    /// The grant, what it leaves out taken from `base`. A maximum is never below its value;
    /// left out, it is the value itself (nothing widens), unless `base` widened it (its
    /// maximum above its own value, as `[defaults].grant` may write one), which it inherits.
    fn over(self, base: GrantSettings) -> GrantSettings {
        fn max_of<T: Ord + Copy>(written: Option<T>, base_max: T, base_value: T, own: T) -> T {
            let inherited = if base_max > base_value { base_max } else { own };
            written.unwrap_or(inherited).max(own)
        }
        let uses = self.uses.unwrap_or(base.uses);
        let ttl = self.ttl.unwrap_or(base.ttl);
        let scope = self.scope.unwrap_or(base.scope);
        GrantSettings {
            uses,
            ttl,
            scope,
            max_uses: max_of(self.max_uses, base.max_uses, base.uses, uses),
            max_ttl: max_of(self.max_ttl, base.max_ttl, base.ttl, ttl),
            max_scope: max_of(self.max_scope, base.max_scope, base.scope, scope),
        }
    }
}

/// A compiled rule whose approval settings still wait for `[defaults]`, which may sit in a
/// file read later.
struct PendingRule {
    rule: Rule,
    approval_ttl: Option<Duration>,
    grant: PartialGrant,
}

/// Collects files, then checks and compiles them as one set.
#[derive(Default)]
struct Builder {
    errors: Vec<PolicyError>,
    /// Problems that do not stop the set loading (`policy check` prints them).
    warnings: Vec<PolicyError>,
    defaults: Option<(Defaults, PathBuf)>,
    agents: BTreeMap<String, (bool, PathBuf)>,
    tool_flags: BTreeMap<String, (bool, PathBuf)>,
    rules: Vec<PendingRule>,
}

/// One file being read: its path and text, to turn spans into `file:line:col` errors.
struct FileCtx<'a> {
    path: &'a Path,
    text: &'a str,
}

impl FileCtx<'_> {
    fn err(
        &self,
        code: &'static str,
        span: std::ops::Range<usize>,
        message: impl Into<String>,
    ) -> PolicyError {
        PolicyError::new(code, self.path, message).at(line_col(self.text, span.start))
    }

    fn duration(&self, raw: &Spanned<String>) -> Result<Duration, PolicyError> {
        parse_duration(raw.get_ref())
            .map_err(|m| self.err("policy.invalid_duration", raw.span(), m))
    }

    fn grant(&self, raw: &Spanned<RawGrant>) -> Result<PartialGrant, PolicyError> {
        let g = raw.get_ref();
        if g.uses == Some(0) {
            return Err(self.err(
                "policy.invalid",
                raw.span(),
                "grant `uses` must be at least 1",
            ));
        }
        if g.max_uses == Some(0) {
            return Err(self.err(
                "policy.invalid",
                raw.span(),
                "grant `max_uses` must be at least 1",
            ));
        }
        let duration = |t: &Option<String>| {
            t.as_deref()
                .map(|t| {
                    parse_duration(t)
                        .map_err(|m| self.err("policy.invalid_duration", raw.span(), m))
                })
                .transpose()
        };
        let (ttl, max_ttl) = (duration(&g.ttl)?, duration(&g.max_ttl)?);
        // A maximum below the value written beside it says two things at once.
        let below = [
            (
                "max_uses",
                "uses",
                matches!((g.max_uses, g.uses), (Some(m), Some(u)) if m < u),
            ),
            (
                "max_ttl",
                "ttl",
                matches!((max_ttl, ttl), (Some(m), Some(t)) if m < t),
            ),
            (
                "max_scope",
                "scope",
                matches!((g.max_scope, g.scope), (Some(m), Some(s)) if m < s),
            ),
        ];
        if let Some((max, value, _)) = below.iter().find(|b| b.2) {
            return Err(self.err(
                "policy.invalid",
                raw.span(),
                format!("grant `{max}` must not be below `{value}` (it is the most an approver may give)"),
            ));
        }
        Ok(PartialGrant {
            uses: g.uses,
            ttl,
            scope: g.scope,
            max_uses: g.max_uses,
            max_ttl,
            max_scope: g.max_scope,
        })
    }
}

/// Where a rule's `when` was written, to place a problem at an offset in the expression (or
/// at the rule, when it has none).
struct WhenAt<'a> {
    ctx: &'a FileCtx<'a>,
    when: Option<std::ops::Range<usize>>,
    rule_start: usize,
}

impl WhenAt<'_> {
    /// The line and column of `expr_offset` bytes into the expression.
    fn pos(&self, expr_offset: usize) -> (usize, usize) {
        let text = self.ctx.text;
        match &self.when {
            Some(s) => {
                let raw = &text[s.start..];
                let quote = if raw.starts_with("'''") || raw.starts_with("\"\"\"") {
                    // TOML drops a newline right after a multi-line string's opening quotes.
                    let after = &raw[3..];
                    3 + if after.starts_with("\r\n") {
                        2
                    } else {
                        usize::from(after.starts_with('\n'))
                    }
                } else {
                    1
                };
                line_col(text, s.start + quote + expr_offset)
            }
            None => line_col(text, self.rule_start),
        }
    }
}

impl Builder {
    fn add_file(&mut self, path: &Path, text: &str, env: &Env) {
        let ctx = FileCtx { path, text };
        let raw: RawFile = match toml::from_str(text) {
            Ok(raw) => raw,
            Err(e) => {
                let code = if e.message().contains("unknown field") {
                    "policy.unknown_key"
                } else {
                    "policy.syntax"
                };
                let span = e.span().unwrap_or(0..0);
                self.errors
                    .push(ctx.err(code, span, e.message().trim().to_owned()));
                return;
            }
        };
        if let Some(v) = &raw.version {
            if *v.get_ref() != 1 {
                self.errors.push(ctx.err(
                    "policy.unsupported_version",
                    v.span(),
                    format!(
                        "unsupported policy version {}; this airlock reads version 1",
                        v.get_ref()
                    ),
                ));
            }
        }
        if let Some(d) = &raw.defaults {
            match self.defaults(&ctx, d) {
                Ok(defaults) => {
                    if let Some((_, first)) = &self.defaults {
                        self.errors.push(ctx.err(
                            "policy.duplicate_defaults",
                            d.span(),
                            format!("`[defaults]` already appears in {}", first.display()),
                        ));
                    } else {
                        self.defaults = Some((defaults, path.to_path_buf()));
                    }
                }
                Err(e) => self.errors.push(e),
            }
        }
        for (name, agent) in &raw.agents {
            let on = agent.get_ref().require_tool_approval;
            merge_flag(
                &mut self.agents,
                &mut self.errors,
                &ctx,
                "agent",
                name,
                on,
                agent.span(),
            );
        }
        for (pattern, flag) in &raw.tools {
            match Glob::new(pattern) {
                Err(m) => self
                    .errors
                    .push(ctx.err("policy.invalid_glob", flag.span(), m)),
                Ok(_) => {
                    let on = flag.get_ref().require_approval;
                    merge_flag(
                        &mut self.tool_flags,
                        &mut self.errors,
                        &ctx,
                        "tool",
                        pattern,
                        on,
                        flag.span(),
                    );
                }
            }
        }
        for rule in raw.rules {
            self.rule(&ctx, rule, env);
        }
    }

    fn defaults(
        &self,
        ctx: &FileCtx<'_>,
        raw: &Spanned<RawDefaults>,
    ) -> Result<Defaults, PolicyError> {
        let d = raw.get_ref();
        let on_error = match &d.on_error {
            Some(on_error) if *on_error.get_ref() == DecisionKind::Allow => {
                return Err(ctx.err(
                    "policy.on_error_allow",
                    on_error.span(),
                    "`on_error` must be `deny` or `require_approval`: a failing rule never allows",
                ));
            }
            Some(on_error) => *on_error.get_ref(),
            None => DecisionKind::RequireApproval,
        };
        let approval_ttl = match &d.approval_ttl {
            Some(t) => ctx.duration(t)?,
            None => DEFAULT_APPROVAL_TTL,
        };
        let grant = match &d.grant {
            Some(g) => ctx.grant(g)?.over(DEFAULT_GRANT),
            None => DEFAULT_GRANT,
        };
        Ok(Defaults {
            decision: d.decision,
            on_error,
            approval: ApprovalSettings {
                approvers: BTreeSet::new(),
                quorum: 1,
                approval_ttl,
                grant,
            },
        })
    }

    /// One `[[rules]]` entry: its id, tools, approval settings and condition, each checked
    /// in turn; every problem is kept (naming the rule), and a rule with one is not added.
    fn rule(&mut self, ctx: &FileCtx<'_>, raw: Spanned<RawRule>, env: &Env) {
        let span = raw.span();
        let r = raw.into_inner();
        let id = r.id.get_ref().clone();
        if !self.rule_id(ctx, &r.id) {
            return;
        }
        let tools = self.rule_tools(ctx, &r, &span, &id);
        let Some((approvers, quorum, approval_ttl, grant)) =
            self.rule_approval(ctx, &r, &span, &id)
        else {
            return;
        };
        let classifiers: Vec<String> = match r.classifier.as_ref().map(Spanned::get_ref) {
            None => Vec::new(),
            Some(OneOrMany::One(c)) => vec![c.clone()],
            Some(OneOrMany::Many(cs)) => cs.clone(),
        };
        let at = WhenAt {
            ctx,
            when: r.when.as_ref().map(Spanned::span),
            rule_start: span.start,
        };
        let when = r
            .when
            .as_ref()
            .map_or_else(|| "true".to_owned(), |w| w.get_ref().clone());
        let Some((program, refs)) = self.rule_condition(&at, &when, env, &classifiers, &id) else {
            return;
        };
        let (line, col) = line_col(ctx.text, span.start);
        let rule = Rule {
            id,
            tools,
            when,
            decision: r.decision,
            message: r.message,
            approval: ApprovalSettings {
                approvers,
                quorum: quorum.max(1),
                approval_ttl: DEFAULT_APPROVAL_TTL,
                grant: DEFAULT_GRANT,
            },
            classifiers,
            location: Location {
                file: ctx.path.to_path_buf(),
                line,
                col,
            },
            args_fields: (!refs.args_whole).then(|| refs.args_fields.iter().cloned().collect()),
            metered: crate::budget::meter(program.expression()),
            uses: refs.uses,
        };
        self.rules.push(PendingRule {
            rule,
            approval_ttl,
            grant: grant.unwrap_or_default(),
        });
    }

    /// Whether a rule's id is well formed and not used before.
    fn rule_id(&mut self, ctx: &FileCtx<'_>, raw: &Spanned<String>) -> bool {
        let id = raw.get_ref();
        let valid = id.len() <= 128
            && id.starts_with(|c: char| c.is_ascii_alphanumeric())
            && id
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "_.-".contains(c));
        if !valid {
            self.errors.push(
                ctx.err(
                    "policy.invalid_rule_id",
                    raw.span(),
                    format!("invalid rule id `{id}`: use letters, digits, `_`, `.` and `-`"),
                )
                .in_rule(id),
            );
            return false;
        }
        if let Some(first) = self.rules.iter().map(|p| &p.rule).find(|x| &x.id == id) {
            let message = format!(
                "rule id `{id}` is already used at {}:{}",
                first.location.file.display(),
                first.location.line
            );
            self.errors.push(
                ctx.err("policy.duplicate_rule", raw.span(), message)
                    .in_rule(id),
            );
            return false;
        }
        true
    }

    /// A rule's tool patterns; an empty list is refused (it could never apply).
    fn rule_tools(
        &mut self,
        ctx: &FileCtx<'_>,
        r: &RawRule,
        span: &std::ops::Range<usize>,
        id: &str,
    ) -> Vec<Glob> {
        let mut tools = Vec::new();
        for t in r.tools.iter().flatten() {
            match Glob::new(t.get_ref()) {
                Ok(g) => tools.push(g),
                Err(m) => self
                    .errors
                    .push(ctx.err("policy.invalid_glob", t.span(), m).in_rule(id)),
            }
        }
        if r.tools.as_ref().is_some_and(Vec::is_empty) {
            self.errors.push(ctx.err(
                "policy.invalid_glob",
                span.clone(),
                "`tools` is empty, so the rule could never apply; omit it to apply to every tool",
            ).in_rule(id));
        }
        tools
    }

    /// A rule's approval settings, kept raw: they are resolved against the defaults in
    /// `finish`, once those are known. `None` when its ttl or grant does not parse.
    #[allow(clippy::type_complexity)]
    fn rule_approval(
        &mut self,
        ctx: &FileCtx<'_>,
        r: &RawRule,
        span: &std::ops::Range<usize>,
        id: &str,
    ) -> Option<(
        BTreeSet<String>,
        u32,
        Option<Duration>,
        Option<PartialGrant>,
    )> {
        let has_approval_settings = r.approvers.is_some()
            || r.quorum.is_some()
            || r.approval_ttl.is_some()
            || r.grant.is_some();
        if has_approval_settings && r.decision != DecisionKind::RequireApproval {
            self.errors.push(ctx.err("policy.invalid", span.clone(), "`approvers`, `quorum`, `approval_ttl` and `grant` only apply to `require_approval` rules").in_rule(id));
        }
        let quorum = r.quorum.as_ref().map(|q| *q.get_ref()).unwrap_or(1);
        if quorum == 0 {
            self.errors.push(
                ctx.err(
                    "policy.invalid",
                    r.quorum.as_ref().map(Spanned::span).unwrap_or(span.clone()),
                    "`quorum` must be at least 1",
                )
                .in_rule(id),
            );
        }
        let approvers: BTreeSet<String> = r
            .approvers
            .clone()
            .unwrap_or_default()
            .into_iter()
            .collect();
        if approvers.iter().any(String::is_empty) {
            self.errors.push(
                ctx.err(
                    "policy.invalid",
                    span.clone(),
                    "approver group names must not be empty",
                )
                .in_rule(id),
            );
        }
        let approval_ttl = r.approval_ttl.as_ref().map(|t| ctx.duration(t)).transpose();
        let grant = r.grant.as_ref().map(|g| ctx.grant(g)).transpose();
        match (approval_ttl, grant) {
            (Ok(t), Ok(g)) => Some((approvers, quorum, t, g)),
            (Err(e), _) | (_, Err(e)) => {
                self.errors.push(e.in_rule(id));
                None
            }
        }
    }

    /// A rule's `when`, compiled, with the names it reads checked: declared variables only,
    /// and `classifier.<name>` only for classifiers the rule names.
    fn rule_condition(
        &mut self,
        at: &WhenAt<'_>,
        when: &str,
        env: &Env,
        classifiers: &[String],
        id: &str,
    ) -> Option<(Program, References)> {
        let path = at.ctx.path;
        if when.contains("__airlock") {
            self.errors.push(
                PolicyError::new(
                    "policy.reserved_name",
                    path,
                    "names starting with `__airlock` are reserved",
                )
                .at(at.pos(when.find("__airlock").unwrap_or(0)))
                .in_rule(id),
            );
            return None;
        }
        let program = match env.compile(when) {
            Ok(p) => p,
            Err(errs) => {
                let mut syntax_told = false;
                for e in errs.errors {
                    let offset = expr_offset(when, e.pos.0, e.pos.1);
                    let (code, message) = if e.msg.starts_with("invalid regex") {
                        ("policy.invalid_regex", e.msg.clone())
                    } else if e.msg.starts_with("the pattern of `matches`") {
                        ("policy.dynamic_regex", e.msg.clone())
                    } else if syntax_told {
                        // The parser's later complaints follow from its first.
                        continue;
                    } else {
                        syntax_told = true;
                        ("policy.cel_syntax", syntax_message(&e.msg, when, offset))
                    };
                    self.errors.push(
                        PolicyError::new(code, path, message)
                            .at(at.pos(offset))
                            .in_rule(id),
                    );
                }
                return None;
            }
        };
        let refs = references(&program);
        let offset_of = |id: u64| {
            program
                .source_info()
                .offset_for(id)
                .map(|(s, _)| s as usize)
                .unwrap_or(0)
        };
        self.check_calls(at, when, &program, id);
        for (name, expr) in &refs.unknown {
            let hint = crate::near::nearest(name, &VARIABLES)
                .map(|n| format!("did you mean `{n}`? "))
                .unwrap_or_default();
            let known: Vec<&str> = VARIABLES
                .iter()
                .map(|v| {
                    if *v == "classifier" {
                        "classifier.<name>"
                    } else {
                        v
                    }
                })
                .collect();
            let message = format!(
                "undeclared variable `{name}`; {hint}rules may use {}",
                known.join(", ")
            );
            self.errors.push(
                PolicyError::new("policy.unknown_variable", path, message)
                    .at(at.pos(offset_of(*expr)))
                    .in_rule(id),
            );
        }
        if refs.classifier_whole {
            self.errors.push(
                PolicyError::new(
                    "policy.unknown_classifier",
                    path,
                    "use `classifier.<name>`, naming a classifier the rule lists in `classifier`",
                )
                .at(at.pos(0))
                .in_rule(id),
            );
        }
        for c in &refs.classifiers {
            if !classifiers.contains(c) {
                self.errors.push(PolicyError::new("policy.unknown_classifier", path, format!("`classifier.{c}` is used but the rule does not name `{c}` in `classifier`")).at(at.pos(0)).in_rule(id));
            }
        }
        Some((program, refs))
    }

    /// The calls a rule makes, checked against the functions CEL and airlock define, and its
    /// loops nested inside loops over `args` (a warning).
    fn check_calls(&mut self, at: &WhenAt<'_>, when: &str, program: &Program, id: &str) {
        let path = at.ctx.path;
        let offset_of = |id: u64| {
            program
                .source_info()
                .offset_for(id)
                .map(|(s, _)| s as usize)
                .unwrap_or(0)
        };
        for bad in crate::functions::check_calls(program.expression()) {
            // The parser places a call at its `(`: point at the name written before it.
            let mut offset = offset_of(bad.id);
            if when
                .get(..offset)
                .is_some_and(|before| before.ends_with(&bad.name))
            {
                offset -= bad.name.len();
            }
            self.errors.push(
                PolicyError::new(bad.code, path, bad.message)
                    .at(at.pos(offset))
                    .in_rule(id),
            );
        }
        for loop_id in crate::functions::nested_loops_over_args(program.expression()) {
            self.warnings.push(
                PolicyError::new(
                    "policy.nested_comprehension",
                    path,
                    "a loop inside a loop over `args` costs the square of what the agent sends; \
                     a call whose args make it exceed the evaluation budget gets `on_error`",
                )
                .at(at.pos(offset_of(loop_id)))
                .in_rule(id),
            );
        }
    }

    fn finish(
        mut self,
        version: String,
        sources: Vec<Source>,
        env: Arc<Env>,
    ) -> Result<PolicySet, PolicyErrors> {
        let defaults = match self.defaults.take() {
            Some((d, _)) => Some(d),
            None if self.errors.is_empty() => {
                let file = sources.first().map(|s| s.path.clone()).unwrap_or_default();
                self.errors.push(PolicyError::new(
                    "policy.missing_defaults",
                    file,
                    "the policy set has no `[defaults]` section with a `decision`",
                ));
                None
            }
            None => None,
        };
        match defaults {
            Some(defaults) if self.errors.is_empty() => {
                let mut rules: Vec<Rule> = self
                    .rules
                    .into_iter()
                    .map(|p| {
                        let mut rule = p.rule;
                        rule.approval.approval_ttl =
                            p.approval_ttl.unwrap_or(defaults.approval.approval_ttl);
                        rule.approval.grant = p.grant.over(defaults.approval.grant);
                        rule
                    })
                    .collect();
                rules.sort_by(|a, b| b.decision.cmp(&a.decision).then_with(|| a.id.cmp(&b.id)));
                Ok(PolicySet {
                    version,
                    sources,
                    defaults,
                    agents: self
                        .agents
                        .into_iter()
                        .filter(|(_, (on, _))| *on)
                        .map(|(k, _)| k)
                        .collect(),
                    tool_flags: self
                        .tool_flags
                        .into_iter()
                        .filter(|(_, (on, _))| *on)
                        .filter_map(|(k, _)| Glob::new(&k).ok())
                        .collect(),
                    rules,
                    env,
                    budget: crate::budget::DEFAULT_BUDGET,
                    warnings: self.warnings,
                })
            }
            _ => Err(PolicyErrors(self.errors)),
        }
    }
}

/// Records an `[agents]` or `[tools]` flag, refusing a key another file already set.
fn merge_flag(
    flags: &mut BTreeMap<String, (bool, PathBuf)>,
    errors: &mut Vec<PolicyError>,
    ctx: &FileCtx<'_>,
    kind: &str,
    key: &str,
    on: bool,
    span: std::ops::Range<usize>,
) {
    if let Some((_, first)) = flags.get(key) {
        let message = format!(
            "{kind} `{key}` is already configured in {}",
            first.display()
        );
        errors.push(ctx.err("policy.duplicate_key", span, message));
    } else {
        flags.insert(key.to_owned(), (on, ctx.path.to_path_buf()));
    }
}

/// The byte offset in `expr` of 1-based `(line, col)`, as the CEL parser reports positions.
/// A CEL parser complaint in plain words: what is wrong at `offset` in `expr` and, where it can
/// tell, how to write it. The parser speaks in grammar tokens (`mismatched input '<EOF>'
/// expecting {'[', '{', …}`); a policy author wants to know what to change.
fn syntax_message(raw: &str, expr: &str, offset: usize) -> String {
    let raw = raw.strip_prefix("Syntax error: ").unwrap_or(raw);
    // The token the parser quotes: `… input 'X' expecting …`, `… at: 'X'`.
    let quoted = |after: &str| {
        let rest = raw.split_once(after)?.1.strip_prefix('\'')?;
        let end = rest.find("' expecting").or_else(|| rest.rfind('\''))?;
        Some(rest[..end].trim().to_owned())
    };
    let at = expr.get(offset..).unwrap_or("");
    if raw.starts_with("token recognition error") && at.starts_with('=') && !at.starts_with("==") {
        return "`=` is not an operator in CEL: to compare, write `==`".to_owned();
    }
    if raw.contains("mismatched input '<EOF>'") {
        return "the condition ends too early: a value, a name or a closing bracket must follow"
            .to_owned();
    }
    if raw.starts_with("extraneous input") && raw.ends_with("expecting <EOF>") {
        if let Some(token) = quoted("extraneous input ") {
            return format!(
                "unexpected `{token}` after a complete condition: join conditions with `&&` or `||`"
            );
        }
    }
    if raw.starts_with("mismatched input") || raw.starts_with("extraneous input") {
        if let Some(token) = quoted("mismatched input ").or_else(|| quoted("extraneous input ")) {
            return format!(
                "unexpected `{token}` here: a value, a name or an operator was expected"
            );
        }
    }
    if raw.starts_with("token recognition error") {
        if let Some(token) = quoted("token recognition error at: ") {
            return format!("`{token}` is not valid CEL here");
        }
    }
    raw.to_owned()
}

fn expr_offset(expr: &str, line: isize, col: isize) -> usize {
    let line = line.max(1) as usize;
    let col = col.max(1) as usize;
    let line_start: usize = expr
        .split_inclusive('\n')
        .take(line - 1)
        .map(str::len)
        .sum();
    (line_start + col - 1).min(expr.len())
}
