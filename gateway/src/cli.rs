//! The `airlock` command line: `policy check|test|eval`, `fingerprint` and `audit verify|export`.
//!
//! Each command takes its flags and returns an exit code: 0 success, 1 a failed check or test,
//! 2 bad input (with the stable error code on stderr). Nothing here decides anything itself:
//! it calls `airlock_policy`.

use std::io::Read;
use std::path::PathBuf;
use std::time::SystemTime;

use airlock_policy::cases::{self, EvalRequest};
use airlock_policy::{evaluate, json, PolicySet, ToolCall, MAX_ARGS_DEPTH};
use airlock_storage::{Store, StoreOptions};
use clap::{Args, Parser, Subcommand};
use serde_json::{json, Value};

#[derive(Parser, Debug)]
#[command(
    name = "airlock",
    version,
    about = "Policy-driven approval gateway for AI agent tool calls"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Check, test and evaluate policy sets.
    #[command(subcommand)]
    Policy(PolicyCommand),
    /// Print the canonical args and fingerprint of a call.
    Fingerprint(FingerprintArgs),
    /// Verify or export the audit chain of a stopped gateway's store, or of an export.
    #[command(subcommand)]
    Audit(AuditCommand),
}

#[derive(Subcommand, Debug)]
pub enum AuditCommand {
    /// Exit 0 and print the record count when the chain is intact; exit 1 naming the first
    /// bad seq otherwise.
    Verify {
        /// The store of a stopped gateway.
        #[arg(long, conflicts_with = "file", required_unless_present = "file")]
        data_dir: Option<PathBuf>,
        /// A JSONL export.
        #[arg(long)]
        file: Option<PathBuf>,
    },
    /// Write the records after SEQ as JSONL, to stdout or --out.
    Export {
        #[arg(long)]
        data_dir: PathBuf,
        #[arg(long, default_value_t = 0)]
        after: u64,
        #[arg(long)]
        out: Option<PathBuf>,
    },
}

#[derive(Subcommand, Debug)]
pub enum PolicyCommand {
    /// Compile a policy set (a .toml file or a folder); exit 1 listing every error.
    Check { path: PathBuf },
    /// Run every *.cases.toml under the paths against the policy set of its folder.
    Test {
        #[arg(required = true)]
        paths: Vec<PathBuf>,
    },
    /// Print the decision for one call, with its explanation, as JSON.
    Eval(EvalArgs),
}

#[derive(Args, Debug)]
pub struct EvalArgs {
    /// The policy set: a .toml file or a folder.
    #[arg(long)]
    pub policy: PathBuf,
    #[arg(long)]
    pub tool: String,
    /// The args as a JSON object, or `-` to read them from stdin.
    #[arg(long)]
    pub args: String,
    /// `{"agent_id","run_id","thread_id","tool_call_id","labels"}`.
    #[arg(long)]
    pub context: Option<String>,
    /// `{"id","role","groups"}`; defaults to an agent named test-agent.
    #[arg(long)]
    pub principal: Option<String>,
    /// Fixed classifier results: `{"<name>":{"score":0.9,"labels":["destructive"]}}`.
    #[arg(long)]
    pub classifier: Option<String>,
    /// The evaluation time (RFC 3339); defaults to now.
    #[arg(long)]
    pub now: Option<String>,
}

#[derive(Args, Debug)]
pub struct FingerprintArgs {
    #[arg(long)]
    pub tool: String,
    /// The args as a JSON object, or `-` to read them from stdin.
    #[arg(long)]
    pub args: String,
}

/// Runs the command and returns the process exit code.
pub fn run(cli: Cli) -> u8 {
    match cli.command {
        Command::Policy(PolicyCommand::Check { path }) => policy_check(&path),
        Command::Policy(PolicyCommand::Test { paths }) => policy_test(&paths),
        Command::Policy(PolicyCommand::Eval(args)) => policy_eval(&args),
        Command::Fingerprint(args) => fingerprint(&args),
        Command::Audit(AuditCommand::Verify { data_dir, file }) => audit_verify(data_dir, file),
        Command::Audit(AuditCommand::Export {
            data_dir,
            after,
            out,
        }) => audit_export(&data_dir, after, out),
    }
}

/// A failure on bad input: prints `error[code]: message` and yields exit code 2.
fn bad_input(code: &str, message: impl std::fmt::Display) -> u8 {
    eprintln!("error[{code}]: {message}");
    2
}

fn read_json_arg(value: &str, what: &str) -> Result<Vec<u8>, u8> {
    if value == "-" {
        let mut buf = Vec::new();
        std::io::stdin().read_to_end(&mut buf).map_err(|e| {
            bad_input(
                "request.invalid_json",
                format!("cannot read {what} from stdin: {e}"),
            )
        })?;
        Ok(buf)
    } else {
        Ok(value.as_bytes().to_vec())
    }
}

fn parse_json_flag(value: &str, what: &str) -> Result<Value, u8> {
    json::parse(value.as_bytes(), MAX_ARGS_DEPTH)
        .map_err(|e| bad_input(e.code(), format!("--{what}: {e}")))
}

fn fingerprint(args: &FingerprintArgs) -> u8 {
    let raw = match read_json_arg(&args.args, "--args") {
        Ok(raw) => raw,
        Err(code) => return code,
    };
    match ToolCall::from_args_json(&args.tool, &raw) {
        Ok(call) => {
            println!(
                "{}",
                json!({"canonical": call.canonical_args, "fingerprint": call.fingerprint.as_str()})
            );
            0
        }
        Err(e) => bad_input(e.code(), e),
    }
}

fn policy_check(path: &std::path::Path) -> u8 {
    match PolicySet::load(path) {
        Ok(set) => {
            println!(
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
            1
        }
    }
}

fn policy_test(paths: &[PathBuf]) -> u8 {
    let report = cases::run(paths);
    for r in &report.results {
        match &r.failure {
            None => println!("ok   {} {}", r.location, r.name),
            Some(why) => println!(
                "FAIL {} {}\n     {}",
                r.location,
                r.name,
                why.replace('\n', "\n     ")
            ),
        }
    }
    println!("{} passed, {} failed", report.passed(), report.failed());
    u8::from(report.failed() > 0 || report.results.is_empty())
}

fn policy_eval(args: &EvalArgs) -> u8 {
    let set = match PolicySet::load(&args.policy) {
        Ok(set) => set,
        Err(errors) => {
            eprintln!("{errors}");
            return 1;
        }
    };
    let request = match eval_request(args) {
        Ok(r) => r,
        Err(code) => return code,
    };
    let decision = evaluate(&set, &request.input());
    let out = cases::decision_json(&decision, &request.call);
    println!("{}", serde_json::to_string_pretty(&out).unwrap_or_default());
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
    let call =
        ToolCall::new(&args.tool, args_value, context).map_err(|e| bad_input(e.code(), e))?;
    let principal = match &args.principal {
        Some(p) => parse_json_flag(p, "principal")?,
        None => cases::default_principal(),
    };
    let classifiers = match &args.classifier {
        Some(c) => cases::fixed_classifiers(&parse_json_flag(c, "classifier")?)
            .map_err(|e| bad_input("request.invalid_classifier", e))?,
        None => Default::default(),
    };
    let now = match &args.now {
        Some(n) => cases::parse_now(n).map_err(|e| bad_input("request.invalid_time", e))?,
        None => SystemTime::now(),
    };
    Ok(EvalRequest {
        call,
        principal,
        classifiers,
        now,
    })
}

fn open_store(dir: &std::path::Path) -> Result<Store, u8> {
    Store::open(dir, StoreOptions::default()).map_err(|e| bad_input(e.code(), e))
}

fn audit_verify(data_dir: Option<PathBuf>, file: Option<PathBuf>) -> u8 {
    let result = match (data_dir, file) {
        (Some(dir), _) => {
            let store = match open_store(&dir) {
                Ok(s) => s,
                Err(code) => return code,
            };
            match store.verify_audit() {
                Ok(r) => r,
                Err(e) => return bad_input(e.code(), e),
            }
        }
        (None, Some(file)) => {
            let reader = match std::fs::File::open(&file) {
                Ok(f) => std::io::BufReader::new(f),
                Err(e) => return bad_input("audit.io", format!("{}: {e}", file.display())),
            };
            let lines = std::io::BufRead::split(reader, b'\n')
                .map(|l| {
                    l.map(|mut l| {
                        if l.last() == Some(&b'\r') {
                            l.pop();
                        }
                        l
                    })
                })
                .filter(|l| !matches!(l, Ok(l) if l.is_empty()));
            airlock_storage::verify_chain(lines)
        }
        (None, None) => return bad_input("audit.usage", "give --data-dir or --file"),
    };
    match result {
        Ok(s) if s.records == 0 => {
            println!("ok: 0 records");
            0
        }
        Ok(s) => {
            println!(
                "ok: {} records (seq {}..{}), last hash {}",
                s.records, s.first_seq, s.last_seq, s.last_hash
            );
            0
        }
        Err(e) => {
            println!("FAILED: {e}");
            1
        }
    }
}

fn audit_export(data_dir: &std::path::Path, after: u64, out: Option<PathBuf>) -> u8 {
    let store = match open_store(data_dir) {
        Ok(s) => s,
        Err(code) => return code,
    };
    let result = match &out {
        Some(path) => std::fs::File::create(path)
            .map_err(|e| bad_input("audit.io", format!("{}: {e}", path.display())))
            .and_then(|f| {
                let mut w = std::io::BufWriter::new(f);
                let n = store
                    .export_audit(after, &mut w)
                    .map_err(|e| bad_input(e.code(), e))?;
                std::io::Write::flush(&mut w).map_err(|e| bad_input("audit.io", e))?;
                Ok(n)
            }),
        None => {
            let mut w = std::io::BufWriter::new(std::io::stdout().lock());
            store
                .export_audit(after, &mut w)
                .map_err(|e| bad_input(e.code(), e))
        }
    };
    match result {
        Ok(n) => {
            eprintln!("exported {n} records");
            0
        }
        Err(code) => code,
    }
}
