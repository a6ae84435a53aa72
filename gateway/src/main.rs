//! The `airlock` binary: parses the command line and hands off to [`airlock_gateway::cli`].

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    let cli = airlock_gateway::cli::Cli::parse();
    ExitCode::from(airlock_gateway::cli::run(cli))
}
