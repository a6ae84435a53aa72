//! The `airlock` command line: `serve`, the client commands (`call`, `approvals`), `policy
//! check|test|eval`, `fingerprint` and `audit verify|export`.
//!
//! Each command takes its flags and returns an exit code: 0 success, 1 a failed check or test,
//! 2 bad input (with the stable error code on stderr). Nothing here decides anything itself:
//! it calls `airlock_policy`.

use std::io::Read;
use std::path::PathBuf;
use std::time::SystemTime;

use airlock_policy::cases::{self, EvalRequest};
use airlock_policy::{evaluate, json, PolicySet, ToolCall, MAX_ARGS_DEPTH};
use airlock_storage::{PgOptions, Store, StoreOptions};

use crate::client;
use crate::config::Config;
use crate::signing;
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
    /// Run the gateway; without --config, a local demo on the embedded store.
    Serve(ServeArgs),
    /// Call a tool through a running gateway (or resume a held call).
    Call(CallArgs),
    /// List, show, approve and decline approvals on a running gateway.
    #[command(subcommand)]
    Approvals(ApprovalsCommand),
    /// Check, test and evaluate policy sets.
    #[command(subcommand)]
    Policy(PolicyCommand),
    /// Print the canonical args and fingerprint of a call.
    Fingerprint(FingerprintArgs),
    /// Verify or export the audit chain of a stopped gateway's store, of a PostgreSQL store,
    /// or of an export.
    #[command(subcommand)]
    Audit(AuditCommand),
    /// Manage a PostgreSQL store.
    #[command(subcommand)]
    Store(StoreCommand),
    /// Sign and verify Standard Webhooks messages; send a test event.
    #[command(subcommand)]
    Webhooks(WebhooksCommand),
    /// MCP helpers: a stdio server that forwards to a gateway's `/mcp`.
    #[command(subcommand)]
    Mcp(McpCommand),
}

#[derive(Subcommand, Debug)]
pub enum McpCommand {
    /// Serve MCP on stdin and stdout, forwarding every message to URL (a gateway's `/mcp`),
    /// for clients that can only spawn a process.
    Stdio {
        /// The gateway's MCP endpoint, e.g. http://127.0.0.1:8080/mcp.
        #[arg(long)]
        url: String,
        /// The bearer token; defaults to $AIRLOCK_TOKEN.
        #[arg(long)]
        token: Option<String>,
    },
}

#[derive(Subcommand, Debug)]
pub enum WebhooksCommand {
    /// Print the `webhook-signature` value for the body on stdin.
    Sign {
        /// `whsec_…`
        #[arg(long)]
        secret: String,
        #[arg(long)]
        id: String,
        /// Unix seconds.
        #[arg(long)]
        timestamp: i64,
    },
    /// Exit 0 when the signature of the body on stdin is valid; exit 1 naming why not.
    Verify {
        #[arg(long)]
        secret: String,
        #[arg(long)]
        id: String,
        #[arg(long)]
        timestamp: i64,
        /// The `webhook-signature` header value (several space-separated ones allowed).
        #[arg(long)]
        signature: String,
        /// Seconds the timestamp may be from now.
        #[arg(long, default_value_t = 300)]
        tolerance: i64,
    },
    /// Ask a running gateway to send a signed test event to webhook ID.
    Test {
        #[command(flatten)]
        remote: Remote,
        id: String,
    },
}

#[derive(Args, Debug)]
pub struct ServeArgs {
    /// `airlock.toml`; without it, the demo.
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// Overrides `server.listen` (use 127.0.0.1:0 for any free port).
    #[arg(long)]
    pub listen: Option<String>,
    /// Overrides `server.data_dir`.
    #[arg(long)]
    pub data_dir: Option<PathBuf>,
}

// No doc comment on purpose: clap would show a flattened struct's doc as the description of
// every subcommand that has none of its own.
#[derive(Args, Debug)]
pub struct Remote {
    /// The gateway's URL.
    #[arg(long, default_value = "http://127.0.0.1:8080", global = true)]
    pub url: String,
    /// The bearer token; defaults to $AIRLOCK_TOKEN (the approval commands first try
    /// $AIRLOCK_APPROVER_TOKEN, `webhooks test` $AIRLOCK_ADMIN_TOKEN).
    #[arg(long, global = true)]
    pub token: Option<String>,
    /// Print the gateway's JSON instead of a table.
    #[arg(long, global = true)]
    pub json: bool,
}

#[derive(Args, Debug)]
pub struct CallArgs {
    #[command(flatten)]
    pub remote: Remote,
    #[arg(long, required_unless_present = "resume")]
    pub tool: Option<String>,
    /// The args as a JSON object, or `-` for stdin.
    #[arg(long, default_value = "{}")]
    pub args: String,
    #[arg(long)]
    pub context: Option<String>,
    /// Seconds to wait for a decision once the call is held (default 30).
    #[arg(long)]
    pub wait: Option<u64>,
    /// Answer at once with the approval to wait for (Prefer: respond-async).
    #[arg(long = "async")]
    pub respond_async: bool,
    /// Resume a held call by id instead of making a new one.
    #[arg(long)]
    pub resume: Option<String>,
    /// With --resume: the answer a suspended call waits for (JSON fitting its resume schema).
    #[arg(long, requires = "resume")]
    pub data: Option<String>,
}

#[derive(Subcommand, Debug)]
pub enum ApprovalsCommand {
    /// List approvals (pending ones by default), newest first.
    List {
        #[command(flatten)]
        remote: Remote,
        #[arg(long, default_value = "pending", value_parser = ["pending", "approved", "declined", "expired", "cancelled", "all"])]
        status: String,
        #[arg(long)]
        tool: Option<String>,
        #[arg(long)]
        run_id: Option<String>,
    },
    /// Show one approval: the call, its args and fingerprint, the rules that held it.
    Show {
        #[command(flatten)]
        remote: Remote,
        id: String,
    },
    /// Approve; with --args, approve an edited call instead.
    Approve {
        #[command(flatten)]
        remote: Remote,
        id: String,
        #[arg(long)]
        reason: Option<String>,
        /// Edited args (a JSON object): the call runs with these instead.
        #[arg(long)]
        args: Option<String>,
    },
    /// Decline, with the reason the agent will read.
    Decline {
        #[command(flatten)]
        remote: Remote,
        id: String,
        #[arg(long)]
        reason: String,
    },
}

/// Which store a command reads: a stopped gateway's folder, or a PostgreSQL database (which
/// running gateways may share).
#[derive(Args, Debug)]
pub struct StoreAt {
    /// The embedded store of a stopped gateway (its `server.data_dir`).
    #[arg(long, conflicts_with = "database_url")]
    pub data_dir: Option<PathBuf>,
    /// A PostgreSQL store's connection string; `env:VAR` reads it from the variable VAR.
    #[arg(long)]
    pub database_url: Option<String>,
    /// PEM certificates to verify the database's TLS certificate with (else the system's).
    #[arg(long, requires = "database_url")]
    pub database_ca: Option<PathBuf>,
}

#[derive(Subcommand, Debug)]
pub enum AuditCommand {
    /// Exit 0 and print the record count when the chain is intact; exit 1 naming the first
    /// bad seq otherwise.
    Verify {
        #[command(flatten)]
        at: StoreAt,
        /// A JSONL export.
        #[arg(long, conflicts_with_all = ["data_dir", "database_url"])]
        file: Option<PathBuf>,
    },
    /// Drop the records before SEQ from a store, keeping a checkpoint so `verify` still proves
    /// the rest; refused for records not exported yet.
    Prune {
        #[command(flatten)]
        at: StoreAt,
        /// Records with a seq below this are dropped.
        #[arg(long)]
        before: u64,
    },
    /// Write the records after SEQ as JSONL, to stdout or --out.
    Export {
        #[command(flatten)]
        at: StoreAt,
        #[arg(long, default_value_t = 0)]
        after: u64,
        #[arg(long)]
        out: Option<PathBuf>,
    },
}

#[derive(Subcommand, Debug)]
pub enum StoreCommand {
    /// Bring a PostgreSQL store's schema up to date (gateways also do this when they start);
    /// refused for a schema newer than this binary.
    Migrate {
        /// The database's connection string; `env:VAR` reads it from the variable VAR.
        #[arg(long)]
        database_url: String,
        /// PEM certificates to verify the database's TLS certificate with (else the system's).
        #[arg(long)]
        database_ca: Option<PathBuf>,
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
    /// Evaluate a resume of a suspended call with this JSON as `resume` (DESIGN §11).
    #[arg(long)]
    pub resume: Option<String>,
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
        Command::Serve(args) => serve(args),
        Command::Call(args) => call(args),
        Command::Approvals(cmd) => approvals(cmd),
        Command::Policy(PolicyCommand::Check { path }) => policy_check(&path),
        Command::Policy(PolicyCommand::Test { paths }) => policy_test(&paths),
        Command::Policy(PolicyCommand::Eval(args)) => policy_eval(&args),
        Command::Fingerprint(args) => fingerprint(&args),
        Command::Webhooks(cmd) => webhooks(cmd),
        Command::Mcp(McpCommand::Stdio { url, token }) => mcp_stdio(url, token),
        Command::Audit(AuditCommand::Verify { at, file }) => audit_verify(at, file),
        Command::Audit(AuditCommand::Prune { at, before }) => audit_prune(&at, before),
        Command::Audit(AuditCommand::Export { at, after, out }) => audit_export(&at, after, out),
        Command::Store(StoreCommand::Migrate {
            database_url,
            database_ca,
        }) => store_migrate(&database_url, database_ca.as_deref()),
    }
}

fn mcp_stdio(url: String, token: Option<String>) -> u8 {
    let Some(token) = token
        .or_else(|| std::env::var("AIRLOCK_TOKEN").ok())
        .filter(|t| !t.is_empty())
    else {
        return bad_input("auth.unauthenticated", "give --token or set AIRLOCK_TOKEN");
    };
    let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
    match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt.block_on(crate::mcp::bridge::run(url, token)),
        Err(e) => {
            eprintln!("error[internal]: cannot start the runtime: {e}");
            1
        }
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
    let mut request = request;
    cases::fill_with_builtin(&set, &request.call, &mut request.classifiers);
    let decision = evaluate(&set, &request.input());
    let mut out = cases::decision_json(&decision, &request.call);
    out["classifiers"] = cases::classifiers_json(&request.classifiers);
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
    let resume = args
        .resume
        .as_deref()
        .map(|r| parse_json_flag(r, "resume"))
        .transpose()?;
    Ok(EvalRequest {
        call,
        principal,
        classifiers,
        now,
        resume,
    })
}

/// Reads `env:VAR` from the environment, or takes the value as it is.
fn database_url(value: &str) -> Result<String, u8> {
    match value.strip_prefix("env:") {
        Some(var) => std::env::var(var).map_err(|_| {
            bad_input(
                "store.usage",
                format!("environment variable `{var}` is not set"),
            )
        }),
        None => Ok(value.to_owned()),
    }
}

/// Opens the store a command names: a stopped gateway's folder (one that holds none is an
/// error, never created), or a PostgreSQL database. The command takes over no gateway's calls:
/// its instance name is its own.
fn open_store(at: &StoreAt) -> Result<Store, u8> {
    let opened = match (&at.data_dir, &at.database_url) {
        (Some(dir), _) => Store::open_existing(dir, StoreOptions::default()),
        (None, Some(url)) => Store::open_postgres(
            &PgOptions {
                url: database_url(url)?,
                ca_pem: read_ca(at.database_ca.as_deref())?,
            },
            StoreOptions {
                instance: format!("airlock-cli-{}", std::process::id()),
                ..StoreOptions::default()
            },
        ),
        (None, None) => {
            return Err(bad_input(
                "audit.usage",
                "give --data-dir or --database-url",
            ))
        }
    };
    opened.map_err(|e| bad_input(e.code(), e))
}

/// Reads `--database-ca`, if given.
fn read_ca(path: Option<&std::path::Path>) -> Result<Option<Vec<u8>>, u8> {
    path.map(|p| {
        std::fs::read(p).map_err(|e| bad_input("store.usage", format!("{}: {e}", p.display())))
    })
    .transpose()
}

fn store_migrate(url: &str, ca: Option<&std::path::Path>) -> u8 {
    let (url, ca_pem) = match (database_url(url), read_ca(ca)) {
        (Ok(u), Ok(ca)) => (u, ca),
        (Err(code), _) | (_, Err(code)) => return code,
    };
    match airlock_storage::migrate_database(&PgOptions { url, ca_pem }) {
        Ok((before, after)) if before == after => {
            println!("ok: the schema is at version {after}, this binary's");
            0
        }
        Ok((before, after)) => {
            println!("ok: migrated the schema from version {before} to {after}");
            0
        }
        Err(e) => bad_input(e.code(), e),
    }
}

fn audit_verify(at: StoreAt, file: Option<PathBuf>) -> u8 {
    let result = match file {
        None => {
            let store = match open_store(&at) {
                Ok(s) => s,
                Err(code) => return code,
            };
            match store.verify_audit() {
                Ok(r) => r,
                Err(e) => return bad_input(e.code(), e),
            }
        }
        Some(file) => {
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
            if s.first_seq > 1 {
                println!("(the chain starts after seq {}: a prune's checkpoint, or an export made with --after)", s.first_seq - 1);
            }
            0
        }
        Err(e) => {
            println!("FAILED: {e}");
            1
        }
    }
}

fn audit_prune(at: &StoreAt, before: u64) -> u8 {
    let store = match open_store(at) {
        Ok(s) => s,
        Err(code) => return code,
    };
    match store.prune_audit(before, crate::clock::now_ms()) {
        Ok((dropped, checkpoint)) => {
            println!("pruned {dropped} records; verify now starts from the checkpoint at seq {checkpoint}");
            0
        }
        Err(e) => bad_input(e.code(), e),
    }
}

fn audit_export(at: &StoreAt, after: u64, out: Option<PathBuf>) -> u8 {
    let store = match open_store(at) {
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

fn serve(args: ServeArgs) -> u8 {
    let mut config = match &args.config {
        Some(path) => match Config::load(path) {
            Ok(c) => c,
            Err(e) => {
                eprintln!("error[config.invalid]: {e}");
                return 2;
            }
        },
        None => Config::demo(),
    };
    if let Some(listen) = &args.listen {
        match listen.parse() {
            Ok(addr) => config.listen = addr,
            Err(_) => {
                return bad_input(
                    "config.invalid",
                    format!("--listen: `{listen}` is not an address"),
                )
            }
        }
    }
    if let Some(dir) = args.data_dir {
        config.data_dir = dir;
    }
    init_logging(config.json_logs);
    let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error[internal]: cannot start the runtime: {e}");
            return 1;
        }
    };
    runtime.block_on(async move {
        let mut config = config;
        let listener = match tokio::net::TcpListener::bind(config.listen).await {
            Ok(l) => l,
            Err(e) => return listen_failed(config.listen, &e),
        };
        let addr = listener
            .local_addr()
            .map(|a| a.to_string())
            .unwrap_or_default();
        let scheme = if config.tls.is_some() {
            "https"
        } else {
            "http"
        };
        if config.public_url.is_none() {
            config.public_url = Some(format!("{scheme}://{addr}"));
        }
        let data_dir = config.data_dir.display().to_string();
        let banner = config.banner.clone();
        // The store is opened (and locked) and the policy loaded before anything is printed
        // that claims the gateway runs: a second gateway on the same data dir prints only
        // its error.
        let prepared = match crate::server::prepare(config).await {
            Ok(p) => p,
            Err(e) => {
                eprintln!("error[gateway.start]: {e}");
                return 1;
            }
        };
        if let Some(banner) = &banner {
            println!("{banner}");
        }
        println!("airlock listening on {scheme}://{addr} (data in {data_dir})");
        let _ = std::io::Write::flush(&mut std::io::stdout());
        let shutdown = tokio_util::sync::CancellationToken::new();
        let signals = shutdown.clone();
        tokio::spawn(async move {
            wait_for_stop_signal().await;
            signals.cancel();
        });
        match crate::server::serve(prepared, listener, shutdown).await {
            Ok(()) => 0,
            Err(e) => {
                eprintln!("error[gateway.start]: {e}");
                1
            }
        }
    })
}

/// A listen address that cannot be bound: its own code, and what to do about it.
fn listen_failed(addr: std::net::SocketAddr, e: &std::io::Error) -> u8 {
    if e.kind() == std::io::ErrorKind::AddrInUse {
        bad_input(
            "server.address_in_use",
            format!(
                "{addr} is already in use (another gateway?); choose another address with \
                 --listen, for example --listen 127.0.0.1:0 for any free port"
            ),
        )
    } else {
        bad_input(
            "server.listen_failed",
            format!("cannot listen on {addr}: {e}; choose another address with --listen"),
        )
    }
}

async fn wait_for_stop_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        if let (Ok(mut term), Ok(mut int)) = (
            signal(SignalKind::terminate()),
            signal(SignalKind::interrupt()),
        ) {
            tokio::select! {
                _ = term.recv() => {}
                _ = int.recv() => {}
            }
            return;
        }
    }
    let _ = tokio::signal::ctrl_c().await;
}

fn init_logging(json: bool) {
    let filter = tracing_subscriber::EnvFilter::try_from_env("AIRLOCK_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info,fjall=warn,lsm_tree=warn"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()));
    if json {
        let _ = builder.json().try_init();
    } else {
        let _ = builder.try_init();
    }
}

/// Prints a gateway answer: JSON as is, or the given human form; the exit code is 0 for 2xx,
/// 1 otherwise.
fn print_answer(json_out: bool, status: u16, body: &Value, human: impl FnOnce() -> String) -> u8 {
    if json_out {
        println!("{}", serde_json::to_string_pretty(body).unwrap_or_default());
    } else {
        println!("{}", human());
    }
    u8::from(!(200..300).contains(&status))
}

/// The client for `remote`; without --token, the first of `env_vars` that is set.
fn remote_client(remote: &Remote, env_vars: &[&str]) -> Result<client::Client, u8> {
    client::Client::new(&remote.url, remote.token.clone(), env_vars)
        .map_err(|e| bad_input(&e.code, e.message))
}

/// What to do about a refusal, when the command line knows better than the code alone.
fn hint(status: u16, body: &Value) -> Option<&'static str> {
    match (status, client::error_code(body)?) {
        (401, _) => Some(
            "hint: the gateway does not know this token. A demo gateway makes new tokens at \
             every start: export the ones it printed last.",
        ),
        (403, "approval.forbidden") => Some(
            "hint: deciding needs an approver's token: --token \"$AIRLOCK_APPROVER_TOKEN\" \
             (or export AIRLOCK_APPROVER_TOKEN).",
        ),
        _ => None,
    }
}

/// Prints an answer, and a hint on stderr when there is one.
fn print_answer_hinted(
    json_out: bool,
    status: u16,
    body: &Value,
    human: impl FnOnce() -> String,
) -> u8 {
    let code = print_answer(json_out, status, body, human);
    if let Some(h) = hint(status, body) {
        eprintln!("{h}");
    }
    code
}

const AGENT_TOKEN: &[&str] = &["AIRLOCK_TOKEN"];
const APPROVER_TOKEN: &[&str] = &["AIRLOCK_APPROVER_TOKEN", "AIRLOCK_TOKEN"];
const ADMIN_TOKEN: &[&str] = &["AIRLOCK_ADMIN_TOKEN", "AIRLOCK_TOKEN"];

fn call(args: CallArgs) -> u8 {
    let c = match remote_client(&args.remote, AGENT_TOKEN) {
        Ok(c) => c,
        Err(code) => return code,
    };
    let resume = |id: &str, wait: Option<u64>, data: Option<Value>| {
        let wait = wait.map(|w| format!("?wait={w}")).unwrap_or_default();
        let body = data.map(|d| json!({"resume_data": d}));
        c.send(
            reqwest::Method::POST,
            &format!("/v1/calls/{id}/resume{wait}"),
            body.as_ref(),
            None,
        )
    };
    let result = if let Some(id) = &args.resume {
        let data = match args
            .data
            .as_deref()
            .map(|d| parse_json_flag(d, "data"))
            .transpose()
        {
            Ok(d) => d,
            Err(code) => return code,
        };
        resume(id, args.wait, data)
    } else {
        let raw = match read_json_arg(&args.args, "--args") {
            Ok(r) => r,
            Err(code) => return code,
        };
        let call_args = match json::parse(&raw, MAX_ARGS_DEPTH) {
            Ok(v) => v,
            Err(e) => return bad_input(e.code(), format!("--args: {e}")),
        };
        let context = match args
            .context
            .as_deref()
            .map(|c| parse_json_flag(c, "context"))
            .transpose()
        {
            Ok(c) => c,
            Err(code) => return code,
        };
        let body = client::call_body(args.tool.as_deref().unwrap_or(""), call_args, context);
        // Always ask for an answer at once: a call that needs approval comes back as 202 with
        // its ids, which are printed before waiting, so the user can find the approval.
        let first = c.send(
            reqwest::Method::POST,
            "/v1/calls",
            Some(&body),
            Some("respond-async"),
        );
        match first {
            Ok((202, body)) if body["status"] == "suspended" => {
                let call_id = body["call_id"].as_str().unwrap_or("");
                // The summary on stdout says as much; with --json it is the hint.
                if args.remote.json {
                    eprintln!(
                        "suspended: the tool asks for input: {}\n\
                     answer in the inbox: {}\n\
                     or: airlock call --resume {call_id} --data '<JSON fitting the resume schema>'",
                        body.pointer("/suspend/payload")
                            .map(Value::to_string)
                            .unwrap_or_default(),
                        body["link"].as_str().unwrap_or(""),
                    );
                }
                Ok((202, body))
            }
            Ok((202, body)) if !args.respond_async => {
                let call_id = body["call_id"].as_str().unwrap_or("").to_owned();
                let approval = body
                    .pointer("/approval/id")
                    .and_then(Value::as_str)
                    .unwrap_or("");
                eprintln!(
                    "held for approval: call {call_id}, approval {approval}\n\
                     decide in the inbox: {}\n\
                     or approve with: airlock approvals approve {approval} --token \"$AIRLOCK_APPROVER_TOKEN\"\n\
                     waiting up to {}s for a decision…",
                    body.pointer("/approval/link").and_then(Value::as_str).unwrap_or(""),
                    args.wait.unwrap_or(DEFAULT_WAIT),
                );
                resume(&call_id, Some(args.wait.unwrap_or(DEFAULT_WAIT)), None)
            }
            other => other,
        }
    };
    match result {
        Ok((status, body)) => print_answer_hinted(args.remote.json, status, &body, || {
            client::call_summary(status, &body)
        }),
        Err(e) => bad_input(&e.code, e.message),
    }
}

/// Seconds `airlock call` waits for a decision without --wait.
const DEFAULT_WAIT: u64 = 30;

fn approvals(cmd: ApprovalsCommand) -> u8 {
    let (remote, method, path, body) = match &cmd {
        ApprovalsCommand::List {
            remote,
            status,
            tool,
            run_id,
        } => {
            let mut q = vec![];
            if status != "all" {
                q.push(format!("status={status}"));
            }
            if let Some(t) = tool {
                q.push(format!("tool={t}"));
            }
            if let Some(r) = run_id {
                q.push(format!("run_id={r}"));
            }
            (
                remote,
                reqwest::Method::GET,
                format!("/v1/approvals?{}", q.join("&")),
                None,
            )
        }
        ApprovalsCommand::Show { remote, id } => (
            remote,
            reqwest::Method::GET,
            format!("/v1/approvals/{id}"),
            None,
        ),
        ApprovalsCommand::Approve {
            remote,
            id,
            reason,
            args,
        } => {
            let mut b = json!({});
            if let Some(r) = reason {
                b["reason"] = json!(r);
            }
            if let Some(a) = args {
                match parse_json_flag(a, "args") {
                    Ok(v) => b["args"] = v,
                    Err(code) => return code,
                }
            }
            (
                remote,
                reqwest::Method::POST,
                format!("/v1/approvals/{id}/approve"),
                Some(b),
            )
        }
        ApprovalsCommand::Decline { remote, id, reason } => (
            remote,
            reqwest::Method::POST,
            format!("/v1/approvals/{id}/decline"),
            Some(json!({"reason": reason})),
        ),
    };
    let c = match remote_client(remote, APPROVER_TOKEN) {
        Ok(c) => c,
        Err(code) => return code,
    };
    match c.send(method, &path, body.as_ref(), None) {
        Ok((status, body)) => print_answer_hinted(remote.json, status, &body, || {
            if let Some(code) = client::error_code(&body) {
                return format!(
                    "{status} {code}: {}",
                    body.pointer("/error/message")
                        .and_then(Value::as_str)
                        .unwrap_or("")
                );
            }
            match &cmd {
                ApprovalsCommand::List { .. } => client::approvals_table(
                    body["approvals"]
                        .as_array()
                        .map(Vec::as_slice)
                        .unwrap_or(&[]),
                ),
                _ => client::approval_details(&body),
            }
        }),
        Err(e) => bad_input(&e.code, e.message),
    }
}

fn read_stdin() -> Result<Vec<u8>, u8> {
    let mut buf = Vec::new();
    std::io::stdin().read_to_end(&mut buf).map_err(|e| {
        bad_input(
            "webhook.io",
            format!("cannot read the body from stdin: {e}"),
        )
    })?;
    Ok(buf)
}

fn webhooks(cmd: WebhooksCommand) -> u8 {
    match cmd {
        WebhooksCommand::Sign {
            secret,
            id,
            timestamp,
        } => {
            let key = match signing::secret_key(&secret) {
                Ok(k) => k,
                Err(e) => return bad_input("webhook.invalid_secret", e),
            };
            let body = match read_stdin() {
                Ok(b) => b,
                Err(code) => return code,
            };
            match signing::sign(&key, &id, timestamp, &body) {
                Ok(sig) => {
                    println!("{sig}");
                    0
                }
                Err(e) => bad_input("webhook.invalid_secret", e),
            }
        }
        WebhooksCommand::Verify {
            secret,
            id,
            timestamp,
            signature,
            tolerance,
        } => {
            let key = match signing::secret_key(&secret) {
                Ok(k) => k,
                Err(e) => return bad_input("webhook.invalid_secret", e),
            };
            let body = match read_stdin() {
                Ok(b) => b,
                Err(code) => return code,
            };
            let now = (crate::clock::now_ms() / 1000) as i64;
            match signing::verify(&key, &id, timestamp, &body, &signature, now, tolerance) {
                Ok(()) => {
                    println!("valid");
                    0
                }
                Err(e) => {
                    println!("invalid: {e}");
                    1
                }
            }
        }
        WebhooksCommand::Test { remote, id } => {
            let c = match remote_client(&remote, ADMIN_TOKEN) {
                Ok(c) => c,
                Err(code) => return code,
            };
            match c.send(
                reqwest::Method::POST,
                &format!("/v1/webhooks/{id}/test"),
                Some(&json!({})),
                None,
            ) {
                Ok((status, body)) => print_answer_hinted(remote.json, status, &body, || {
                    match client::error_code(&body) {
                        Some(code) => format!(
                            "{status} {code}: {}",
                            body.pointer("/error/message")
                                .and_then(Value::as_str)
                                .unwrap_or("")
                        ),
                        None => format!(
                            "queued test delivery {}",
                            body["delivery_id"].as_str().unwrap_or("")
                        ),
                    }
                }),
                Err(e) => bad_input(&e.code, e.message),
            }
        }
    }
}
