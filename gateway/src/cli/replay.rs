//! `airlock policy replay`: the recorded calls of a stopped gateway's store, a PostgreSQL
//! store or an audit export, judged again under a policy set ([`crate::replay`]), and what
//! would change printed as a table and a list (or JSON). It reads, never writes.

use std::io::{BufRead, IsTerminal, Write};
use std::path::PathBuf;
use std::time::{Duration, UNIX_EPOCH};

use airlock_policy::{cases, parse_duration, PolicySet};
use clap::Args;
use serde_json::Value;

use super::bad_input;
use super::store::{open_store, StoreAt};
use crate::error::Code;
use crate::replay::{Replayer, Report};

#[derive(Args, Debug)]
pub struct ReplayArgs {
    /// The policy set to judge the recorded calls by: a .toml file or a folder.
    #[arg(long)]
    pub policy: PathBuf,
    #[command(flatten)]
    pub at: StoreAt,
    /// An audit export (`airlock audit export`, JSONL).
    #[arg(long, conflicts_with_all = ["data_dir", "database_url"])]
    pub file: Option<PathBuf>,
    /// Calls decided at or after this time: RFC 3339, or a duration before now (`7d`, `12h`).
    #[arg(long)]
    pub since: Option<String>,
    /// Calls decided before this time: RFC 3339, or a duration before now.
    #[arg(long)]
    pub until: Option<String>,
    /// The report as one JSON object on stdout.
    #[arg(long)]
    pub json: bool,
    /// Exit 1 when any call would be allowed further than it was (deny → allow, deny →
    /// require_approval, require_approval → allow).
    #[arg(long)]
    pub fail_on_widening: bool,
    /// Evaluation steps a decision may use, as `[server] policy_budget` sets them.
    #[arg(long, default_value_t = airlock_policy::DEFAULT_BUDGET)]
    pub budget: u64,
}

/// A time flag: RFC 3339, or a duration before now; ms since the epoch.
fn time_flag(value: Option<&str>, flag: &str) -> Result<Option<u64>, u8> {
    let Some(v) = value else { return Ok(None) };
    let at = match parse_duration(v) {
        Ok(d) => std::time::SystemTime::now()
            .checked_sub(d)
            .unwrap_or(UNIX_EPOCH),
        Err(_) => cases::parse_now(v).map_err(|e| {
            bad_input(
                Code::RequestInvalidTime.as_str(),
                format!("{flag}: not RFC 3339 nor a duration ({e})"),
            )
        })?,
    };
    Ok(Some(
        at.duration_since(UNIX_EPOCH)
            .unwrap_or(Duration::ZERO)
            .as_millis() as u64,
    ))
}

/// Says how far a long replay has come, on stderr when it is a terminal; nothing on a pipe.
struct Progress {
    on: bool,
    n: u64,
}

impl Progress {
    fn tick(&mut self) {
        self.n += 1;
        if self.on && self.n.is_multiple_of(100_000) {
            eprint!("\rreplay: {} records read", self.n);
        }
    }

    fn done(&self) {
        if self.on && self.n >= 100_000 {
            eprintln!("\rreplay: {} records read", self.n);
        }
    }
}

pub(super) fn policy_replay(args: &ReplayArgs) -> u8 {
    let policy = match PolicySet::load(&args.policy) {
        Ok(p) => p.with_budget(args.budget),
        Err(errors) => {
            for e in &errors.0 {
                eprintln!("error[{}]: {}", e.code, e);
            }
            return 2;
        }
    };
    let (since, until) = match (
        time_flag(args.since.as_deref(), "--since"),
        time_flag(args.until.as_deref(), "--until"),
    ) {
        (Ok(s), Ok(u)) => (s, u),
        (Err(code), _) | (_, Err(code)) => return code,
    };
    let mut replayer = Replayer::new(policy, since, until);
    let mut progress = Progress {
        on: std::io::stderr().is_terminal(),
        n: 0,
    };
    let read = match &args.file {
        Some(file) => read_export(file, &mut |r| {
            progress.tick();
            replayer.record(&r);
        }),
        None => match open_store(&args.at) {
            Ok(store) => store
                .read_audit(&mut |r| {
                    progress.tick();
                    replayer.record(&r);
                    true
                })
                .map(|_| ())
                .map_err(|e| bad_input(e.code(), e)),
            Err(code) => Err(code),
        },
    };
    progress.done();
    if let Err(code) = read {
        return code;
    }
    let report = replayer.finish();
    if args.json {
        say!("{}", report.to_json());
    } else {
        print_report(&report);
    }
    if args.fail_on_widening && report.widening() > 0 {
        1
    } else {
        0
    }
}

/// Feeds each record of a JSONL export to `each`.
fn read_export(file: &std::path::Path, each: &mut dyn FnMut(Value)) -> Result<(), u8> {
    let f = std::fs::File::open(file)
        .map_err(|e| bad_input("audit.io", format!("{}: {e}", file.display())))?;
    for (i, line) in std::io::BufReader::new(f).lines().enumerate() {
        let line = line.map_err(|e| bad_input("audit.io", format!("{}: {e}", file.display())))?;
        if line.trim().is_empty() {
            continue;
        }
        let record = serde_json::from_str(&line).map_err(|e| {
            bad_input(
                "audit.invalid",
                format!("{}:{}: not a JSON record: {e}", file.display(), i + 1),
            )
        })?;
        each(record);
    }
    Ok(())
}

/// The report for people: what was read, the table, then each changed call.
fn print_report(r: &Report) {
    let window = match (r.first, r.last) {
        (Some(a), Some(b)) => format!(
            " decided {} to {}",
            crate::clock::rfc3339(a),
            crate::clock::rfc3339(b)
        ),
        _ => String::new(),
    };
    say!(
        "replayed {} calls{window} under {} ({} audit records read)",
        r.replayed(),
        r.policy_version,
        r.records
    );
    if r.pruned > 0 {
        say!(
            "pruned: {} audit records were pruned from this log; the calls among them are not replayed (replay the export taken before the prune)",
            r.pruned
        );
    }
    for (why, n) in &r.not_replayable {
        say!("not replayable: {n} ({})", why.words());
    }
    say!("");
    say!("{:<18} {:<28} {:>8}", "recorded", "replayed", "calls");
    for t in r.transitions() {
        let tag = if t.widening() {
            "  widening"
        } else if t.changed() {
            "  narrowing"
        } else {
            ""
        };
        let replayed = match t.settings {
            Some(s) => format!("{} ({s})", t.replayed.as_str()),
            None => t.replayed.as_str().to_owned(),
        };
        say!(
            "{:<18} {:<28} {:>8}{tag}",
            t.recorded.as_str(),
            replayed,
            t.count
        );
    }
    if r.changed.is_empty() {
        say!("");
        say!("no call would be decided differently");
        return;
    }
    say!("");
    say!("calls decided differently, widening first:");
    for c in &r.changed {
        let gone: Vec<&str> = c
            .recorded_rules
            .iter()
            .filter(|x| !c.replayed_rules.contains(x))
            .map(String::as_str)
            .collect();
        let new: Vec<&str> = c
            .replayed_rules
            .iter()
            .filter(|x| !c.recorded_rules.contains(x))
            .map(String::as_str)
            .collect();
        let mut rules = gone.iter().map(|g| format!("-{g}")).collect::<Vec<_>>();
        rules.extend(new.iter().map(|n| format!("+{n}")));
        let settings = if c.settings.is_empty() {
            String::new()
        } else {
            format!(
                "  {} settings: {}",
                if c.widening() { "looser" } else { "stricter" },
                c.settings.join(", ")
            )
        };
        say!(
            "  {} {} {}{} {} → {}  rules: {}{settings}",
            c.call_id,
            crate::clock::rfc3339(c.at),
            c.tool,
            if c.what == "call" {
                String::new()
            } else {
                format!(" ({})", c.what)
            },
            c.recorded.as_str(),
            c.replayed.as_str(),
            if rules.is_empty() {
                "(the same rules)".to_owned()
            } else {
                rules.join(" ")
            }
        );
    }
    let _ = std::io::stdout().flush();
}
