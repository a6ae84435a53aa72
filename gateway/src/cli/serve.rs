//! `airlock serve`: load the config (or the embedded demo), start the gateway and its
//! listeners, and stop cleanly on a signal. Starting is all it does; serving is `crate::serve`.

use std::path::PathBuf;

use crate::config::{Config, PolicySource};
use clap::Args;

use super::bad_input;

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

/// The config `serve` runs with: the file's or the demo's, with `--listen` and `--data-dir`,
/// and its policy checked to load; `Err` is the exit code, every problem printed.
fn configured(args: ServeArgs) -> Result<Config, u8> {
    let mut config = match &args.config {
        Some(path) => match Config::load(path) {
            Ok(c) => c,
            Err(e) => {
                eprintln!("error[config.invalid]: {e}");
                return Err(2);
            }
        },
        None => Config::demo(),
    };
    if let Some(listen) = &args.listen {
        match listen.parse() {
            Ok(addr) => {
                config.listen = addr;
                config.overridden.push("server.listen");
            }
            Err(_) => {
                return Err(bad_input(
                    "config.invalid",
                    format!("--listen: `{listen}` is not an address"),
                ))
            }
        }
    }
    if let Some(dir) = args.data_dir {
        config.data_dir = dir;
        config.overridden.push("server.data_dir");
    }
    // A policy that does not load is bad input like a bad config: every problem listed, exit
    // 2, before anything starts.
    if let PolicySource::Path(path) = &config.policy {
        if let Err(errors) = airlock_policy::PolicySet::load(path) {
            for e in &errors.0 {
                eprintln!("error[{}]: {}", e.code, e.located());
            }
            eprintln!("the policy does not load: {} error(s)", errors.0.len());
            return Err(2);
        }
    }
    Ok(config)
}

pub(super) fn serve(args: ServeArgs) -> u8 {
    let config = match configured(args) {
        Ok(c) => c,
        Err(code) => return code,
    };
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
        let prepared = match crate::serve::prepare(config).await {
            Ok(p) => p,
            Err(e) => {
                eprintln!("error[gateway.start]: {e}");
                return 1;
            }
        };
        if let Some(banner) = &banner {
            say!("{banner}");
        }
        say!("airlock listening on {scheme}://{addr} (data in {data_dir})");
        say!("approvers decide at {scheme}://{addr}/inbox/");
        let _ = std::io::Write::flush(&mut std::io::stdout());
        let shutdown = tokio_util::sync::CancellationToken::new();
        let signals = shutdown.clone();
        tokio::spawn(async move {
            wait_for_stop_signal().await;
            signals.cancel();
        });
        match crate::serve::serve(prepared, listener, shutdown).await {
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
