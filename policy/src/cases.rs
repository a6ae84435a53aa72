//! Golden cases (`*.cases.toml`) and the evaluation request they share with `policy eval`.
//!
//! [`EvalRequest`] owns everything one evaluation needs and is built the same way from a cases
//! file, from the command line, and from `POST /v1/policy/evaluate`. [`run`] finds every cases
//! file under a path, runs each against the policy set of the folder it sits in, and reports
//! each case as passed or failed with the reason.
//!
//! It does not print: the command line does.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use serde::Deserialize;
use serde_json::{json, Value};
use toml::Spanned;

use crate::call::ToolCall;
use crate::classify::BuiltinClassifier;
use crate::error::{line_col, PolicyError, PolicyErrors, RequestError};
use crate::eval::evaluate;
use crate::load::PolicySet;
use crate::model::{ClassifierOutcome, ClassifierResult, Decision, DecisionKind, Input};

/// The principal a case or `policy eval` runs as when it names none.
pub fn default_principal() -> Value {
    with_identity(json!({"id": "test-agent", "role": "agent", "groups": []}))
}

/// A principal as the gateway hands it to policy: `issuer` and `actor` null and `claims`
/// empty unless given (a static token's), so a rule that reads them runs the same in a case.
pub fn with_identity(mut principal: Value) -> Value {
    if let Some(m) = principal.as_object_mut() {
        m.entry("groups").or_insert_with(|| json!([]));
        m.entry("issuer").or_insert(Value::Null);
        m.entry("actor").or_insert(Value::Null);
        m.entry("claims").or_insert_with(|| json!({}));
    }
    principal
}

/// The instant cases run at when they give no `now`: fixed, so cases are reproducible.
pub const DEFAULT_NOW: &str = "2026-01-01T12:00:00Z";

/// Everything one evaluation needs, owned.
#[derive(Debug, Clone)]
pub struct EvalRequest {
    pub call: ToolCall,
    pub principal: Value,
    pub classifiers: BTreeMap<String, ClassifierOutcome>,
    pub now: SystemTime,
    /// The resume data when evaluating a resume (DESIGN §11); `None` binds `resume` to null.
    pub resume: Option<Value>,
    /// The tool's pinned MCP definition (DESIGN §20); `None` binds `definition` to null.
    pub definition: Option<Value>,
    /// The request's kind and what it names ([`OwnedRequest::tool`] for a tool call).
    pub request: crate::OwnedRequest,
}

impl EvalRequest {
    pub fn input(&self) -> Input<'_> {
        Input {
            tool: &self.call.tool,
            args: &self.call.args,
            context: &self.call.context,
            principal: &self.principal,
            fingerprint: self.call.fingerprint.as_str(),
            now: self.now,
            classifiers: &self.classifiers,
            resume: self.resume.as_ref(),
            definition: self.definition.as_ref(),
            request: self.request.as_request(),
        }
    }
}

/// A fixed classifier result, as cases and `policy eval --classifier` give them: either a
/// result, or `{"error": "…", "on_error"?: "deny"|"require_approval"}` for a failed run.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FixedClassifier {
    score: Option<f64>,
    #[serde(default)]
    labels: Vec<String>,
    #[serde(default)]
    detail: Value,
    error: Option<String>,
    on_error: Option<DecisionKind>,
}

/// Parses `{"<name>": {"score","labels","detail"} | {"error","on_error"}}`.
pub fn fixed_classifiers(value: &Value) -> Result<BTreeMap<String, ClassifierOutcome>, String> {
    let Value::Object(map) = value else {
        return Err("classifier results must be an object keyed by classifier name".into());
    };
    let mut out = BTreeMap::new();
    for (name, v) in map {
        let fixed: FixedClassifier =
            serde_json::from_value(v.clone()).map_err(|e| format!("classifier `{name}`: {e}"))?;
        let outcome = match (fixed.error, fixed.score) {
            (Some(reason), _) => ClassifierOutcome::Failed {
                reason,
                on_error: fixed.on_error.unwrap_or(DecisionKind::RequireApproval),
            },
            (None, Some(score)) if (0.0..=1.0).contains(&score) => {
                ClassifierOutcome::Ok(ClassifierResult {
                    score,
                    labels: fixed.labels,
                    detail: fixed.detail,
                })
            }
            (None, _) => return Err(format!("classifier `{name}`: `score` in 0..1 is required")),
        };
        out.insert(name.clone(), outcome);
    }
    Ok(out)
}

/// Runs the builtin classifier for every classifier that a rule applying to the call names and
/// that has no result yet: how `policy test` and `policy eval` classify "for real".
pub fn fill_with_builtin(
    set: &PolicySet,
    call: &ToolCall,
    classifiers: &mut BTreeMap<String, ClassifierOutcome>,
) {
    let missing: Vec<String> = set
        .classifiers_for(&call.tool)
        .into_iter()
        .filter(|name| !classifiers.contains_key(*name))
        .map(str::to_owned)
        .collect();
    if missing.is_empty() {
        return;
    }
    let result = BuiltinClassifier::default().classify(&call.args);
    for name in missing {
        classifiers.insert(name, ClassifierOutcome::Ok(result.clone()));
    }
}

/// Classifier results as the explanation shows them.
pub fn classifiers_json(classifiers: &BTreeMap<String, ClassifierOutcome>) -> Value {
    let map: serde_json::Map<String, Value> = classifiers
        .iter()
        .map(|(name, outcome)| {
            let v = match outcome {
                ClassifierOutcome::Ok(r) => {
                    json!({"score": r.score, "labels": r.labels, "detail": r.detail})
                }
                ClassifierOutcome::Failed { reason, on_error } => {
                    json!({"error": reason, "on_error": on_error})
                }
            };
            (name.clone(), v)
        })
        .collect();
    Value::Object(map)
}

/// Parses an RFC 3339 instant.
pub fn parse_now(text: &str) -> Result<SystemTime, String> {
    chrono::DateTime::parse_from_rfc3339(text)
        .map(SystemTime::from)
        .map_err(|e| format!("invalid RFC 3339 time `{text}`: {e}"))
}

/// The decision as `airlock policy eval` prints it: the [`Decision`] plus the fingerprint.
pub fn decision_json(decision: &Decision, call: &ToolCall) -> Value {
    let mut v = serde_json::to_value(decision).unwrap_or(Value::Null);
    if let Value::Object(map) = &mut v {
        map.insert(
            "fingerprint".into(),
            Value::String(call.fingerprint.to_string()),
        );
        map.insert("tool".into(), Value::String(call.tool.clone()));
    }
    v
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawCases {
    #[serde(default)]
    case: Vec<Spanned<RawCase>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawCase {
    name: String,
    /// A tool call's tool; for another `kind`, none.
    tool: Option<String>,
    /// `tool` (the default), `resource`, `prompt` or `completion`.
    kind: Option<String>,
    /// The MCP upstream the request goes to.
    server: Option<String>,
    /// A resource's URI (a read, or a completion of it).
    uri: Option<String>,
    /// A prompt's name (a `prompts/get`, or a completion of it).
    prompt: Option<String>,
    #[serde(default)]
    args: toml::Table,
    context: Option<toml::Table>,
    principal: Option<toml::Table>,
    classifier: Option<toml::Table>,
    now: Option<String>,
    /// Resume data: the case evaluates a resume of a suspended call.
    resume: Option<toml::Table>,
    /// The MCP tool's pinned definition (its `annotations`, `title`, …).
    definition: Option<toml::Table>,
    expect: DecisionKind,
    expect_rules: Option<Vec<String>>,
    expect_errors: Option<Vec<String>>,
    expect_quorum: Option<u32>,
    expect_approvers: Option<Vec<String>>,
    /// Grant settings the decision must have, any of `uses`, `ttl`, `scope`, `max_uses`,
    /// `max_ttl`, `max_scope` (compared as the decision's JSON writes them).
    expect_grant: Option<toml::Table>,
}

/// One case's result.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CaseResult {
    /// `file:line` of the case.
    pub location: String,
    pub name: String,
    /// Why it failed; `None` when it passed.
    pub failure: Option<String>,
}

/// Everything `airlock policy test` found and ran.
#[derive(Debug, Default)]
pub struct Report {
    pub results: Vec<CaseResult>,
}

impl Report {
    pub fn passed(&self) -> usize {
        self.results.iter().filter(|r| r.failure.is_none()).count()
    }

    pub fn failed(&self) -> usize {
        self.results.len() - self.passed()
    }
}

/// Every `*.cases.toml` under `path` (recursively), or `path` itself when it is one; sorted.
pub fn discover(path: &Path) -> Result<Vec<PathBuf>, PolicyError> {
    let mut found = Vec::new();
    if path.is_file() {
        found.push(path.to_path_buf());
    } else {
        walk(path, &mut found)?;
    }
    found.sort();
    Ok(found)
}

fn walk(dir: &Path, found: &mut Vec<PathBuf>) -> Result<(), PolicyError> {
    let io = |e: std::io::Error| PolicyError::new("policy.io", dir, format!("cannot read: {e}"));
    for entry in std::fs::read_dir(dir).map_err(io)? {
        let path = entry.map_err(io)?.path();
        if path.is_dir() {
            walk(&path, found)?;
        } else if path
            .file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| n.ends_with(".cases.toml"))
        {
            found.push(path);
        }
    }
    Ok(())
}

/// Runs every cases file under each of `paths`. Problems that stop a file from running (a
/// policy set or cases file that does not load) count as failed cases, so they cannot pass
/// unnoticed.
pub fn run(paths: &[PathBuf]) -> Report {
    let mut report = Report::default();
    let mut sets: BTreeMap<PathBuf, Result<PolicySet, PolicyErrors>> = BTreeMap::new();
    for path in paths {
        let files = match discover(path) {
            Ok(files) if files.is_empty() => {
                report.results.push(CaseResult {
                    location: path.display().to_string(),
                    name: "(discovery)".into(),
                    failure: Some("no `*.cases.toml` file found".into()),
                });
                continue;
            }
            Ok(files) => files,
            Err(e) => {
                report.results.push(CaseResult {
                    location: path.display().to_string(),
                    name: "(discovery)".into(),
                    failure: Some(e.to_string()),
                });
                continue;
            }
        };
        for file in files {
            let folder = file.parent().map(Path::to_path_buf).unwrap_or_default();
            let folder = if folder.as_os_str().is_empty() {
                PathBuf::from(".")
            } else {
                folder
            };
            let set = sets
                .entry(folder.clone())
                .or_insert_with(|| PolicySet::load(&folder));
            match set {
                Ok(set) => report.results.extend(run_file(&file, set)),
                Err(errors) => report.results.push(CaseResult {
                    location: file.display().to_string(),
                    name: "(policy set)".into(),
                    failure: Some(format!(
                        "the policy set of {} does not load:\n{errors}",
                        folder.display()
                    )),
                }),
            }
        }
    }
    report
}

/// Runs one cases file against `set`.
pub fn run_file(file: &Path, set: &PolicySet) -> Vec<CaseResult> {
    let text = match std::fs::read_to_string(file) {
        Ok(t) => t,
        Err(e) => {
            return vec![CaseResult {
                location: file.display().to_string(),
                name: "(cases file)".into(),
                failure: Some(format!("cannot read: {e}")),
            }]
        }
    };
    let raw: RawCases = match toml::from_str(&text) {
        Ok(r) => r,
        Err(e) => {
            let (line, col) = line_col(&text, e.span().map(|s| s.start).unwrap_or(0));
            return vec![CaseResult {
                location: format!("{}:{line}:{col}", file.display()),
                name: "(cases file)".into(),
                failure: Some(e.message().trim().to_owned()),
            }];
        }
    };
    if raw.case.is_empty() {
        return vec![CaseResult {
            location: file.display().to_string(),
            name: "(cases file)".into(),
            failure: Some("the file holds no `[[case]]`".into()),
        }];
    }
    raw.case
        .into_iter()
        .map(|spanned| {
            let (line, _) = line_col(&text, spanned.span().start);
            let case = spanned.into_inner();
            CaseResult {
                location: format!("{}:{line}", file.display()),
                name: case.name.clone(),
                failure: check_case(&case, set).err(),
            }
        })
        .collect()
}

/// Converts a TOML table into JSON through the strict parser, so cases obey the same number
/// and depth rules as requests.
fn toml_to_json(table: &toml::Table) -> Result<Value, RequestError> {
    let text = serde_json::to_string(table).map_err(|_| RequestError::InvalidJson {
        offset: 0,
        reason: "value cannot be written as JSON",
    })?;
    crate::json::parse(text.as_bytes(), crate::call::MAX_ARGS_DEPTH)
}

fn check_case(case: &RawCase, set: &PolicySet) -> Result<(), String> {
    let request = case_request(case, set)?;
    let decision = evaluate(set, &request.input());
    let problems = mismatches(case, &decision);
    if problems.is_empty() {
        Ok(())
    } else {
        Err(problems.join("; "))
    }
}

/// The evaluation a case describes: its call, principal, classifier results (the built-in
/// ones filled in), time, resume data and definition.
fn case_request(case: &RawCase, set: &PolicySet) -> Result<EvalRequest, String> {
    let bad = |what: &str, e: String| format!("invalid `{what}`: {e}");
    let args = toml_to_json(&case.args).map_err(|e| bad("args", format!("{e} ({})", e.code())))?;
    let context = case
        .context
        .as_ref()
        .map(toml_to_json)
        .transpose()
        .map_err(|e| bad("context", e.to_string()))?;
    let request = case_kind(case)?;
    let call = match (&request.kind, &case.tool) {
        (crate::RequestKind::Tool, Some(tool)) => ToolCall::new(tool, args, context),
        (crate::RequestKind::Tool, None) => {
            return Err("a tool call's case names its `tool`".into())
        }
        (_, Some(_)) => return Err(format!("a {} case names no `tool`", request.kind.as_str())),
        (_, None) => ToolCall::request(request.clone(), args, context),
    }
    .map_err(|e| format!("{e} ({})", e.code()))?;
    let principal = match &case.principal {
        Some(p) => with_identity(toml_to_json(p).map_err(|e| bad("principal", e.to_string()))?),
        None => default_principal(),
    };
    let mut classifiers = match &case.classifier {
        Some(c) => {
            fixed_classifiers(&toml_to_json(c).map_err(|e| bad("classifier", e.to_string()))?)
                .map_err(|e| bad("classifier", e))?
        }
        None => BTreeMap::new(),
    };
    fill_with_builtin(set, &call, &mut classifiers);
    let now = parse_now(case.now.as_deref().unwrap_or(DEFAULT_NOW)).map_err(|e| bad("now", e))?;
    let resume = case
        .resume
        .as_ref()
        .map(toml_to_json)
        .transpose()
        .map_err(|e| bad("resume", e.to_string()))?;
    let definition = case
        .definition
        .as_ref()
        .map(toml_to_json)
        .transpose()
        .map_err(|e| bad("definition", e.to_string()))?;
    Ok(EvalRequest {
        call,
        principal,
        classifiers,
        now,
        resume,
        definition,
        request,
    })
}

/// A case's `kind`, `server`, `uri` and `prompt`, checked ([`crate::OwnedRequest::checked`]).
fn case_kind(case: &RawCase) -> Result<crate::OwnedRequest, String> {
    let kind = match case.kind.as_deref() {
        None => crate::RequestKind::Tool,
        Some(k) => crate::RequestKind::parse(k).ok_or_else(|| {
            format!("invalid `kind` `{k}`: one of `tool`, `resource`, `prompt`, `completion`")
        })?,
    };
    crate::OwnedRequest::checked(
        kind,
        case.server.clone(),
        case.uri.clone(),
        case.prompt.clone(),
    )
}

/// Names as a reader writes them: `a, b`, or `none`.
fn names<S: AsRef<str>>(items: impl Iterator<Item = S>) -> String {
    let v: Vec<String> = items.map(|s| format!("`{}`", s.as_ref())).collect();
    if v.is_empty() {
        "none".to_owned()
    } else {
        v.join(", ")
    }
}

/// Failed rules as a reader writes them: `rule` (reason), ….
fn failures(errors: &[crate::RuleError]) -> String {
    if errors.is_empty() {
        return "none".to_owned();
    }
    let v: Vec<String> = errors
        .iter()
        .map(|e| format!("`{}` ({})", e.rule, e.reason))
        .collect();
    v.join(", ")
}

/// Each way `decision` differs from what `case` expects, in words.
fn mismatches(case: &RawCase, decision: &Decision) -> Vec<String> {
    let mut problems = Vec::new();
    if decision.decision != case.expect {
        let why = if decision.rules.is_empty() {
            "no rule matched: the defaults decided".to_owned()
        } else {
            format!("matched rules {}", names(decision.rules.iter()))
        };
        problems.push(format!(
            "expected {}, got {} ({why})",
            case.expect.as_str(),
            decision.decision.as_str()
        ));
    }
    if let Some(expected) = &case.expect_rules {
        let want: BTreeSet<&str> = expected.iter().map(String::as_str).collect();
        let got: BTreeSet<&str> = decision.rules.iter().map(String::as_str).collect();
        if want != got {
            problems.push(format!(
                "expected rules {}, got {}",
                names(want.iter()),
                names(got.iter())
            ));
        }
    }
    if let Some(expected) = &case.expect_errors {
        let want: BTreeSet<&str> = expected.iter().map(String::as_str).collect();
        let got: BTreeSet<&str> = decision.errors.iter().map(|e| e.rule.as_str()).collect();
        if want != got {
            problems.push(format!(
                "expected errors in {}, got {}",
                names(want.iter()),
                failures(&decision.errors)
            ));
        }
    } else if !decision.errors.is_empty() {
        let ids: Vec<&str> = decision.errors.iter().map(|e| e.rule.as_str()).collect();
        problems.push(format!(
            "rules failed to evaluate: {}. If the case means them to fail, add expect_errors = {}",
            failures(&decision.errors),
            serde_json::to_string(&ids).unwrap_or_default()
        ));
    }
    if let Some(q) = case.expect_quorum {
        let got = decision.approval.as_ref().map(|a| a.quorum);
        if got != Some(q) {
            let got = got.map_or("no approval".to_owned(), |g| g.to_string());
            problems.push(format!("expected quorum {q}, got {got}"));
        }
    }
    if let Some(expected) = &case.expect_approvers {
        let want: BTreeSet<String> = expected.iter().cloned().collect();
        let got = decision.approval.as_ref().map(|a| a.approvers.clone());
        if got.as_ref() != Some(&want) {
            let got = got.map_or("no approval".to_owned(), |g| names(g.iter()));
            problems.push(format!(
                "expected approvers {}, got {got}",
                names(want.iter())
            ));
        }
    }
    if let Some(expected) = &case.expect_grant {
        let got = decision
            .approval
            .as_ref()
            .and_then(|a| serde_json::to_value(a.grant).ok())
            .unwrap_or(Value::Null);
        for (k, want) in expected {
            let want = serde_json::to_value(want).unwrap_or(Value::Null);
            if got.get(k) != Some(&want) {
                problems.push(format!(
                    "expected grant {k} {want}, got {}",
                    got.get(k).unwrap_or(&Value::Null)
                ));
            }
        }
    }
    problems
}
