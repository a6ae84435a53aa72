//! `airlock policy check|test|eval` and `airlock fingerprint`: the policy crate run from the
//! command line, with no gateway and no store.

use std::path::PathBuf;
use std::time::SystemTime;

use airlock_policy::cases::{self, EvalRequest};
use airlock_policy::{evaluate, json, PolicySet, ToolCall, MAX_ARGS_DEPTH};

use clap::{Args, Subcommand};
use serde_json::json;

use super::{bad_input, parse_json_flag, read_json_arg};
use crate::config::{Config, PolicySource};
use crate::error::Code;

#[derive(Subcommand, Debug)]
pub enum PolicyCommand {
    /// Compile a policy set (a .toml file or a folder); exit 1 listing every error.
    /// Warnings (a loop inside a loop over `args`) are printed and do not fail the check.
    Check {
        /// The policy set; defaults to the one `--config` names.
        path: Option<PathBuf>,
        /// Also check the set against this gateway config: the classifiers it names must be
        /// configured there.
        #[arg(long)]
        config: Option<PathBuf>,
    },
    /// Run every *.cases.toml under the paths against the policy set of its folder.
    Test {
        #[arg(required = true)]
        paths: Vec<PathBuf>,
    },
    /// Print the decision for one call, with its explanation, as JSON.
    Eval(EvalArgs),
    /// Judge the recorded calls of a store or an export again under a policy set, and list
    /// every call it would decide differently, widening ones first.
    Replay(super::replay::ReplayArgs),
}

#[derive(Args, Debug)]
pub struct EvalArgs {
    /// The policy set: a .toml file or a folder.
    #[arg(long)]
    pub policy: PathBuf,
    /// The tool of a tool call (the default kind).
    #[arg(long)]
    pub tool: Option<String>,
    /// The args as a JSON object (for another kind, the request's params), or `-` to read
    /// them from stdin.
    #[arg(long)]
    pub args: String,
    /// `tool` (the default), or an MCP request of another kind: `resource`, `prompt`,
    /// `completion`.
    #[arg(long, default_value = "tool", value_parser = ["tool", "resource", "prompt", "completion"])]
    pub kind: String,
    /// The MCP upstream the request goes to (`server` in CEL).
    #[arg(long)]
    pub server: Option<String>,
    /// A resource's URI (a resource read, or a completion of it).
    #[arg(long)]
    pub uri: Option<String>,
    /// A prompt's visible name (a prompt, or a completion of it).
    #[arg(long)]
    pub prompt: Option<String>,
    /// `{"agent_id","run_id","thread_id","tool_call_id","labels"}`.
    #[arg(long)]
    pub context: Option<String>,
    /// `{"id","role","groups","issuer","actor","claims"}`; defaults to an agent named test-agent.
    #[arg(long)]
    pub principal: Option<String>,
    /// Fixed classifier results: `{"<name>":{"score":0.9,"labels":["destructive"]}}`.
    #[arg(long)]
    pub classifier: Option<String>,
    /// The evaluation time (RFC 3339); defaults to now.
    #[arg(long)]
    pub now: Option<String>,
    /// Evaluate a resume of a suspended call with this JSON as `resume` (DESIGN §11).
    #[arg(long)]
    pub resume: Option<String>,
    /// The MCP tool definition policy reads as `definition` (the tool object, as its
    /// upstream lists it: `{"name","annotations":{"destructiveHint":true},…}`).
    #[arg(long)]
    pub definition: Option<String>,
    /// Evaluation steps the decision may use, as `[server] policy_budget` sets them.
    #[arg(long, default_value_t = airlock_policy::DEFAULT_BUDGET)]
    pub budget: u64,
}

#[derive(Args, Debug)]
pub struct FingerprintArgs {
    #[arg(long)]
    pub tool: String,
    /// The args as a JSON object, or `-` to read them from stdin.
    #[arg(long)]
    pub args: String,
}

pub(super) fn fingerprint(args: &FingerprintArgs) -> u8 {
    let raw = match read_json_arg(&args.args, "--args") {
        Ok(raw) => raw,
        Err(code) => return code,
    };
    match ToolCall::from_args_json(&args.tool, &raw) {
        Ok(call) => {
            say!(
                "{}",
                json!({"canonical": call.canonical_args, "fingerprint": call.fingerprint.as_str()})
            );
            0
        }
        Err(e) => bad_input(e.code(), e),
    }
}

pub(super) fn policy_check(path: Option<&std::path::Path>, config: Option<&std::path::Path>) -> u8 {
    let config = match config.map(Config::load).transpose() {
        Ok(c) => c,
        Err(e) => return bad_input("config.invalid", e),
    };
    let path = match (path, &config) {
        (Some(p), _) => p.to_path_buf(),
        (None, Some(c)) => match &c.policy {
            PolicySource::Path(p) => p.clone(),
            PolicySource::Embedded(_) => {
                return bad_input("config.invalid", "the config names no policy")
            }
        },
        (None, None) => {
            return bad_input(
                Code::RequestInvalidArgs.as_str(),
                "give a policy PATH, or --config",
            )
        }
    };
    let loaded = PolicySet::load(&path).and_then(|set| {
        if let Some(c) = &config {
            let names = c.classifiers.iter().map(|k| k.name.clone()).collect();
            set.check_classifiers(&names)?;
        }
        Ok(set)
    });
    match loaded {
        Ok(set) => {
            for w in set.warnings() {
                eprintln!("warning: {w}");
            }
            say!(
                "ok: {} rule(s) in {} file(s), policy_version {}",
                set.rules().len(),
                set.sources().len(),
                set.version()
            );
            0
        }
        Err(errors) => {
            for e in &errors.0 {
                eprintln!("{e}");
            }
            eprintln!("{} error(s)", errors.0.len());
            // A path that cannot be read is bad input (2), like any other; a policy that
            // reads but does not load is a failed check (1).
            if errors.0.iter().all(|e| e.code == Code::PolicyIo.as_str()) {
                2
            } else {
                1
            }
        }
    }
}

pub(super) fn policy_test(paths: &[PathBuf]) -> u8 {
    let report = cases::run(paths);
    for r in &report.results {
        match &r.failure {
            None => say!("ok   {} {}", r.location, r.name),
            Some(why) => say!(
                "FAIL {} {}\n     {}",
                r.location,
                r.name,
                why.replace('\n', "\n     ")
            ),
        }
    }
    say!("{} passed, {} failed", report.passed(), report.failed());
    u8::from(report.failed() > 0 || report.results.is_empty())
}

pub(super) fn policy_eval(args: &EvalArgs) -> u8 {
    if args.budget == 0 {
        return bad_input(
            Code::RequestInvalidArgs.as_str(),
            "--budget: `0` must be a positive number of steps",
        );
    }
    let set = match PolicySet::load(&args.policy) {
        Ok(set) => set.with_budget(args.budget),
        Err(errors) => {
            eprintln!("{errors}");
            return 1;
        }
    };
    let request = match eval_request(args) {
        Ok(r) => r,
        Err(code) => return code,
    };
    let mut request = request;
    cases::fill_with_builtin(&set, &request.call, &mut request.classifiers);
    let decision = evaluate(&set, &request.input());
    // The budget goes to stderr, so stdout stays the decision JSON the API answers.
    eprintln!(
        "evaluation steps: {} of a budget of {}",
        decision.steps,
        set.budget()
    );
    let mut out = cases::decision_json(&decision, &request.call);
    out["classifiers"] = cases::classifiers_json(&request.classifiers);
    if request.request.kind != airlock_policy::RequestKind::Tool {
        let r = &request.request;
        out["kind"] = r.kind.as_str().into();
        out["server"] = r.server.clone().into();
        out["uri"] = r.uri.clone().into();
        out["prompt"] = r.prompt.clone().into();
    }
    say!("{}", serde_json::to_string_pretty(&out).unwrap_or_default());
    0
}

fn eval_request(args: &EvalArgs) -> Result<EvalRequest, u8> {
    let raw_args = read_json_arg(&args.args, "--args")?;
    let args_value = json::parse(&raw_args, MAX_ARGS_DEPTH)
        .map_err(|e| bad_input(e.code(), format!("--args: {e}")))?;
    let context = args
        .context
        .as_deref()
        .map(|c| parse_json_flag(c, "context"))
        .transpose()?;
    let kind =
        airlock_policy::RequestKind::parse(&args.kind).unwrap_or(airlock_policy::RequestKind::Tool);
    let request = airlock_policy::OwnedRequest::checked(
        kind,
        args.server.clone(),
        args.uri.clone(),
        args.prompt.clone(),
    )
    .map_err(|e| bad_input(Code::RequestInvalidField.as_str(), e))?;
    let call = match (kind, args.tool.as_deref()) {
        (airlock_policy::RequestKind::Tool, Some(tool)) => {
            ToolCall::new(tool, args_value, context).map_err(|e| bad_input(e.code(), e))?
        }
        _ => request
            .call(args.tool.as_deref(), args_value, context)
            .map_err(|e| bad_input(Code::RequestInvalidField.as_str(), e))?,
    };
    let principal = match &args.principal {
        Some(p) => cases::with_identity(parse_json_flag(p, "principal")?),
        None => cases::default_principal(),
    };
    let classifiers = match &args.classifier {
        Some(c) => cases::fixed_classifiers(&parse_json_flag(c, "classifier")?)
            .map_err(|e| bad_input(Code::RequestInvalidClassifier.as_str(), e))?,
        None => Default::default(),
    };
    let now = match &args.now {
        Some(n) => {
            cases::parse_now(n).map_err(|e| bad_input(Code::RequestInvalidTime.as_str(), e))?
        }
        None => SystemTime::now(),
    };
    let resume = args
        .resume
        .as_deref()
        .map(|r| parse_json_flag(r, "resume"))
        .transpose()?;
    let definition = args
        .definition
        .as_deref()
        .map(|d| parse_json_flag(d, "definition"))
        .transpose()?;
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
