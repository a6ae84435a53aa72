//! Merging a set's files and checking each rule's parts: one `[defaults]` across the files, no
//! key or rule id twice, tool globs, approvers, quorum, durations and grants; a rule's `when`
//! is [`super::condition`]'s. What a problem is, and where, is collected, not returned at the
//! first: a set is refused whole with every problem listed.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use cel::Env;
use toml::Spanned;

use crate::duration::parse_duration;
use crate::error::{line_col, PolicyError, PolicyErrors};
use crate::glob::Glob;
use crate::model::{ApprovalSettings, DecisionKind, GrantScope, GrantSettings};

use super::raw::{LenientFile, OneOrMany, RawDefaults, RawFile, RawGrant, RawRule};
use super::{Defaults, Location, PolicySet, Rule, Source, DEFAULT_APPROVAL_TTL, DEFAULT_GRANT};

/// A `grant` table as written: what it leaves out comes from the defaults.
#[derive(Clone, Copy, Default)]
pub(super) struct PartialGrant {
    pub(super) uses: Option<u32>,
    pub(super) ttl: Option<Duration>,
    pub(super) scope: Option<GrantScope>,
    pub(super) max_uses: Option<u32>,
    pub(super) max_ttl: Option<Duration>,
    pub(super) max_scope: Option<GrantScope>,
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
pub(super) struct PendingRule {
    pub(super) rule: Rule,
    pub(super) approval_ttl: Option<Duration>,
    pub(super) grant: PartialGrant,
}

/// Collects files, then checks and compiles them as one set.
#[derive(Default)]
pub(super) struct Builder {
    pub(super) errors: Vec<PolicyError>,
    /// Problems that do not stop the set loading (`policy check` prints them).
    pub(super) warnings: Vec<PolicyError>,
    pub(super) defaults: Option<(Defaults, PathBuf)>,
    pub(super) agents: BTreeMap<String, (bool, PathBuf)>,
    pub(super) tool_flags: BTreeMap<String, (bool, PathBuf)>,
    pub(super) rules: Vec<PendingRule>,
}

/// One file being read: its path and text, to turn spans into `file:line:col` errors.
pub(super) struct FileCtx<'a> {
    pub(super) path: &'a Path,
    pub(super) text: &'a str,
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
pub(super) struct WhenAt<'a> {
    pub(super) ctx: &'a FileCtx<'a>,
    pub(super) when: Option<std::ops::Range<usize>>,
    pub(super) rule_start: usize,
}

impl WhenAt<'_> {
    /// The line and column of `expr_offset` bytes into the expression.
    pub(super) fn pos(&self, expr_offset: usize) -> (usize, usize) {
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
    pub(super) fn add_file(&mut self, path: &Path, text: &str, env: &Env) {
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
                // The file's shape is wrong, but its rules' conditions may be read all the
                // same: their CEL errors are reported now, not after the next edit.
                if code == "policy.unknown_key" {
                    self.conditions_only(&ctx, env);
                }
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
        self.flags(&ctx, &raw);
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
        let per_kind = [&d.resources, &d.prompts, &d.completions]
            .map(|given| given.as_ref().map_or(DecisionKind::Allow, |g| *g.get_ref()));
        Ok(Defaults {
            decision: d.decision,
            resources: per_kind[0],
            prompts: per_kind[1],
            completions: per_kind[2],
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
    /// A file's `[agents]` and `[tools]` flags, merged with the other files' (a key set twice
    /// is refused).
    fn flags(&mut self, ctx: &FileCtx<'_>, raw: &RawFile) {
        for (name, agent) in &raw.agents {
            let on = agent.get_ref().require_tool_approval;
            merge_flag(
                &mut self.agents,
                &mut self.errors,
                ctx,
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
                        ctx,
                        "tool",
                        pattern,
                        on,
                        flag.span(),
                    );
                }
            }
        }
    }

    /// Every rule's `when` of a file whose shape was refused, read leniently (other keys
    /// ignored) and compiled, so that its CEL errors are reported beside the shape error.
    fn conditions_only(&mut self, ctx: &FileCtx<'_>, env: &Env) {
        let Ok(file) = toml::from_str::<LenientFile>(ctx.text) else {
            return;
        };
        for raw in file.rules {
            let span = raw.span();
            let r = raw.into_inner();
            let Some(when) = &r.when else { continue };
            let id = r.id.unwrap_or_else(|| "(no id)".to_owned());
            let classifiers = match r.classifier {
                None => Vec::new(),
                Some(OneOrMany::One(c)) => vec![c],
                Some(OneOrMany::Many(cs)) => cs,
            };
            let at = WhenAt {
                ctx,
                when: Some(when.span()),
                rule_start: span.start,
            };
            let _ = self.rule_condition(&at, when.get_ref(), env, &classifiers, &id);
        }
    }

    fn rule(&mut self, ctx: &FileCtx<'_>, raw: Spanned<RawRule>, env: &Env) {
        let span = raw.span();
        let r = raw.into_inner();
        let id = r.id.get_ref().clone();
        if !self.rule_id(ctx, &r.id) {
            return;
        }
        let tools = self.rule_tools(ctx, &r, &span, &id);
        let (resources, prompts) = self.rule_requests(ctx, &r, &span, &id);
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
            resources,
            prompts,
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

    /// A rule's `resources` (URI globs) and `prompts` (name globs): what requests other than
    /// tool calls it is for. Such a rule allows or denies; it does not hold for approval.
    fn rule_requests(
        &mut self,
        ctx: &FileCtx<'_>,
        r: &RawRule,
        span: &std::ops::Range<usize>,
        id: &str,
    ) -> (Vec<Glob>, Vec<Glob>) {
        let mut out = (Vec::new(), Vec::new());
        for (key, given, make, into) in [
            (
                "resources",
                &r.resources,
                Glob::uri as fn(&str) -> Result<Glob, String>,
                0,
            ),
            (
                "prompts",
                &r.prompts,
                Glob::new as fn(&str) -> Result<Glob, String>,
                1,
            ),
        ] {
            if given.as_ref().is_some_and(Vec::is_empty) {
                self.errors.push(
                    ctx.err(
                        "policy.invalid_glob",
                        span.clone(),
                        format!("`{key}` is empty, so the rule could never apply to one; omit it"),
                    )
                    .in_rule(id),
                );
            }
            for g in given.iter().flatten() {
                match make(g.get_ref()) {
                    Ok(glob) if into == 0 => out.0.push(glob),
                    Ok(glob) => out.1.push(glob),
                    Err(m) => self
                        .errors
                        .push(ctx.err("policy.invalid_glob", g.span(), m).in_rule(id)),
                }
            }
        }
        out
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

    pub(super) fn finish(
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
