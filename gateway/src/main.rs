//! The `airlock` binary: parses the command line and hands off to [`airlock_gateway::cli`].
//! It also chooses the allocator, mimalloc, by measurement (docs/speed.md).

use std::process::ExitCode;

use clap::Parser;

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    let cli = airlock_gateway::cli::Cli::parse();
    ExitCode::from(airlock_gateway::cli::run(cli))
}
