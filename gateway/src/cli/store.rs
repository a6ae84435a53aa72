//! `airlock store migrate`, and how the offline commands find a store: a stopped gateway's
//! folder or a PostgreSQL database.

use std::path::PathBuf;

use airlock_storage::{PgOptions, Store, StoreOptions};

use clap::{Args, Subcommand};

use super::bad_input;

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
pub(super) fn open_store(at: &StoreAt) -> Result<Store, u8> {
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
    opened.map_err(|e| match e {
        airlock_storage::StoreError::Locked(_) => bad_input(
            e.code(),
            format!(
                "{e}. Stop it first, or read its audit log through it: `airlock audit verify --url URL`, \
                 `airlock audit export --url URL --out FILE` (then `airlock policy replay --file FILE`); \
                 with PostgreSQL, give --database-url"
            ),
        ),
        e => bad_input(e.code(), e),
    })
}

/// Reads `--database-ca`, if given.
fn read_ca(path: Option<&std::path::Path>) -> Result<Option<Vec<u8>>, u8> {
    path.map(|p| {
        std::fs::read(p).map_err(|e| bad_input("store.usage", format!("{}: {e}", p.display())))
    })
    .transpose()
}

pub(super) fn store_migrate(url: &str, ca: Option<&std::path::Path>) -> u8 {
    let (url, ca_pem) = match (database_url(url), read_ca(ca)) {
        (Ok(u), Ok(ca)) => (u, ca),
        (Err(code), _) | (_, Err(code)) => return code,
    };
    match airlock_storage::migrate_database(&PgOptions { url, ca_pem }) {
        Ok((before, after)) if before == after => {
            say!("ok: the schema is at version {after}, this binary's");
            0
        }
        Ok((before, after)) => {
            say!("ok: migrated the schema from version {before} to {after}");
            0
        }
        Err(e) => bad_input(e.code(), e),
    }
}
