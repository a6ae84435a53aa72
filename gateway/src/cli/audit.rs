//! `airlock audit verify|prune|export`: the chain of a store or of an export, read offline.

use std::path::PathBuf;

use clap::Subcommand;

use super::bad_input;
use super::store::{open_store, StoreAt};

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

pub(super) fn audit_verify(at: StoreAt, file: Option<PathBuf>) -> u8 {
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
            say!("ok: 0 records");
            0
        }
        Ok(s) => {
            say!(
                "ok: {} records (seq {}..{}), last hash {}",
                s.records,
                s.first_seq,
                s.last_seq,
                s.last_hash
            );
            if s.first_seq > 1 {
                say!("(the chain starts after seq {}: a prune's checkpoint, or an export made with --after)", s.first_seq - 1);
            }
            0
        }
        Err(e) => {
            say!("FAILED: {e}");
            1
        }
    }
}

pub(super) fn audit_prune(at: &StoreAt, before: u64) -> u8 {
    let store = match open_store(at) {
        Ok(s) => s,
        Err(code) => return code,
    };
    match store.prune_audit(before, crate::clock::now_ms()) {
        Ok((dropped, checkpoint)) => {
            say!("pruned {dropped} records; verify now starts from the checkpoint at seq {checkpoint}");
            0
        }
        Err(e) => bad_input(e.code(), e),
    }
}

pub(super) fn audit_export(at: &StoreAt, after: u64, out: Option<PathBuf>) -> u8 {
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
