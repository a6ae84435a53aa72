//! `airlock audit verify|prune|export`: the chain of a store or of an export, read offline, or
//! of a running gateway, read over its API and checked here.

use std::path::PathBuf;

use clap::Subcommand;
use serde_json::Value;

use super::remote::ADMIN_TOKEN;
use super::store::{open_store, StoreAt};
use super::{bad_input, client};

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
        /// A running gateway: its log is read over the API (an admin's token) and every hash is
        /// checked here, so neither the gateway's word nor a stop is needed.
        #[arg(long, conflicts_with_all = ["data_dir", "database_url", "file"])]
        url: Option<String>,
        /// With --url: the admin's token; defaults to $AIRLOCK_ADMIN_TOKEN, then $AIRLOCK_TOKEN.
        #[arg(long, requires = "url")]
        token: Option<String>,
    },
    /// Drop the records before SEQ from a chain of a store, keeping a checkpoint so `verify`
    /// still proves the rest; refused for records not exported yet.
    Prune {
        #[command(flatten)]
        at: StoreAt,
        /// Records with a seq below this are dropped.
        #[arg(long)]
        before: u64,
        /// The chain to prune (a gateway's `[store] instance`); needed when the log has
        /// several.
        #[arg(long)]
        chain: Option<String>,
    },
    /// Write the records after a position (a seq, or a cursor `GET /v1/audit` handed out) as
    /// JSONL, every chain by time, to stdout or --out: of a stopped gateway's store, or of a
    /// running gateway (`--url`).
    Export {
        #[command(flatten)]
        at: StoreAt,
        #[arg(long, default_value = "0")]
        after: airlock_storage::Cursor,
        #[arg(long)]
        out: Option<PathBuf>,
        /// A running gateway to read the log from (`GET /v1/audit`), instead of a store.
        #[arg(long, conflicts_with_all = ["data_dir", "database_url"])]
        url: Option<String>,
        /// With --url: the admin's token; defaults to $AIRLOCK_ADMIN_TOKEN, then $AIRLOCK_TOKEN.
        #[arg(long, requires = "url")]
        token: Option<String>,
    },
}

pub(super) fn audit_verify(
    at: StoreAt,
    file: Option<PathBuf>,
    url: Option<String>,
    token: Option<String>,
) -> u8 {
    if let Some(url) = url {
        let client = match client::Client::new(&url, token, ADMIN_TOKEN) {
            Ok(c) => c,
            Err(e) => return bad_input(&e.code, e.message),
        };
        let failed = std::rc::Rc::new(std::cell::RefCell::new(None));
        let result = airlock_storage::verify_chain(Pages::new(client, failed.clone()));
        // A page that could not be read is not a broken chain: say what stopped the reading.
        if let Some((code, message)) = failed.borrow_mut().take() {
            return bad_input(
                &code,
                format!("cannot read the audit log of {url}, so nothing was verified: {message}"),
            );
        }
        return report(result);
    }
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
    report(result)
}

/// What a verification found, for people; the exit code 0 when every chain and witness is
/// intact, else 1.
fn report(result: Result<airlock_storage::AuditSummary, airlock_storage::ChainError>) -> u8 {
    match result {
        Ok(s) if s.records() == 0 => {
            say!("ok: 0 records");
            0
        }
        Ok(s) if s.chains.len() == 1 => {
            let (_, c) = &s.chains[0];
            say!(
                "ok: {} records (seq {}..{}), last hash {}",
                c.records,
                c.first_seq,
                c.last_seq,
                c.last_hash
            );
            if c.first_seq > 1 {
                say!("(the chain starts after seq {}: a prune's checkpoint, or an export made with --after)", c.first_seq - 1);
            }
            0
        }
        Ok(s) => {
            say!(
                "ok: {} records in {} chains, {} witness records checked",
                s.records(),
                s.chains.len(),
                s.witnesses
            );
            for (name, c) in &s.chains {
                say!(
                    "  chain {name}: {} records (seq {}..{}), last hash {}",
                    c.records,
                    c.first_seq,
                    c.last_seq,
                    c.last_hash
                );
            }
            0
        }
        Err(e) => {
            say!("FAILED: {e}");
            1
        }
    }
}

pub(super) fn audit_prune(at: &StoreAt, before: u64, chain: Option<&str>) -> u8 {
    let store = match open_store(at) {
        Ok(s) => s,
        Err(code) => return code,
    };
    match store.prune_audit(chain, before, crate::clock::now_ms()) {
        Ok((dropped, checkpoint)) => {
            say!("pruned {dropped} records; verify now starts from the checkpoint at seq {checkpoint}");
            0
        }
        Err(e) => bad_input(e.code(), e),
    }
}

/// Where `audit export` reads: a store, or a running gateway.
pub(super) enum ExportFrom {
    Store(StoreAt),
    Gateway { url: String, token: Option<String> },
}

pub(super) fn audit_export(
    from: ExportFrom,
    after: &airlock_storage::Cursor,
    out: Option<PathBuf>,
) -> u8 {
    let at = match from {
        ExportFrom::Store(at) => at,
        ExportFrom::Gateway { url, token } => return export_remote(&url, token, after, out),
    };
    let store = match open_store(&at) {
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

/// `audit export --url`: a running gateway's records, page by page, as JSONL.
fn export_remote(
    url: &str,
    token: Option<String>,
    after: &airlock_storage::Cursor,
    out: Option<PathBuf>,
) -> u8 {
    let client = match client::Client::new(url, token, ADMIN_TOKEN) {
        Ok(c) => c,
        Err(e) => return bad_input(&e.code, e.message),
    };
    let failed = std::rc::Rc::new(std::cell::RefCell::new(None));
    let mut pages = Pages::new(client, failed.clone());
    pages.after = after.to_string();
    let mut w: Box<dyn std::io::Write> = match &out {
        Some(path) => match std::fs::File::create(path) {
            Ok(f) => Box::new(std::io::BufWriter::new(f)),
            Err(e) => return bad_input("audit.io", format!("{}: {e}", path.display())),
        },
        None => Box::new(std::io::BufWriter::new(std::io::stdout().lock())),
    };
    let mut n = 0u64;
    for record in pages {
        let Ok(bytes) = record else { break };
        let written = w.write_all(&bytes).and_then(|()| w.write_all(b"\n"));
        if let Err(e) = written {
            return bad_input("audit.io", e);
        }
        n += 1;
    }
    if let Err(e) = w.flush() {
        return bad_input("audit.io", e);
    }
    if let Some((code, message)) = failed.borrow_mut().take() {
        return bad_input(
            &code,
            format!("cannot read the audit log of {url} (after {n} records): {message}"),
        );
    }
    eprintln!("exported {n} records");
    0
}

/// A running gateway's audit log, page by page (`GET /v1/audit`), as the records' bytes: what
/// `verify` reads from a file, fetched as it goes. A page that cannot be read ends it with
/// an error, which verification reports.
struct Pages {
    client: client::Client,
    /// Where the next page starts: the last page's `next_after`.
    after: String,
    page: std::vec::IntoIter<Value>,
    done: bool,
    /// Why a page could not be read (its code and message), for the caller to tell apart
    /// from a chain that does not verify.
    failed: std::rc::Rc<std::cell::RefCell<Option<(String, String)>>>,
}

impl Pages {
    fn new(
        client: client::Client,
        failed: std::rc::Rc<std::cell::RefCell<Option<(String, String)>>>,
    ) -> Pages {
        Pages {
            client,
            after: "0".into(),
            page: Vec::new().into_iter(),
            done: false,
            failed,
        }
    }

    fn next_page(&mut self) -> Result<Vec<Value>, (String, String)> {
        let path = format!("/v1/audit?after={}&limit=1000", self.after);
        let (status, body) = self
            .client
            .send(reqwest::Method::GET, &path, None, None)
            .map_err(|e| (e.code, e.message))?;
        if status != 200 {
            let code = client::error_code(&body)
                .unwrap_or("client.error")
                .to_owned();
            let mut message = format!(
                "GET {path}: {status} {code}: {}",
                body["error"]["message"].as_str().unwrap_or("")
            );
            if status == 401 || status == 403 {
                message.push_str(
                    ". Reading the audit log needs an admin's token: --token, or $AIRLOCK_ADMIN_TOKEN",
                );
            }
            return Err((code, message));
        }
        match &body["next_after"] {
            Value::Number(n) => self.after = n.to_string(),
            Value::String(c) => self.after = c.clone(),
            _ => {}
        }
        match body["records"].as_array() {
            Some(records) => Ok(records.clone()),
            None => Err((
                "client.error".into(),
                format!("GET {path}: the answer has no `records`"),
            )),
        }
    }
}

impl Iterator for Pages {
    type Item = Result<Vec<u8>, String>;

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            if let Some(record) = self.page.next() {
                return Some(serde_json::to_vec(&record).map_err(|e| e.to_string()));
            }
            if self.done {
                return None;
            }
            match self.next_page() {
                Ok(records) if records.is_empty() => self.done = true,
                Ok(records) => self.page = records.into_iter(),
                Err((code, message)) => {
                    self.done = true;
                    *self.failed.borrow_mut() = Some((code, message.clone()));
                    return Some(Err(message));
                }
            }
        }
    }
}
