//! Builders shared by the store tests, and where their stores live: a temporary folder (fjall),
//! or, when `AIRLOCK_TEST_STORE=postgres`, a fresh schema in the database that
//! `AIRLOCK_TEST_DATABASE_URL` names (key=value form). The same tests run against both: that is
//! the store's conformance suite.
#![allow(dead_code)]

use std::collections::BTreeSet;

use airlock_storage::{
    Approval, ApprovalStatus, CallRecord, CallStatus, GrantTerms, PgOptions, Principal, Store,
    StoreError, StoreOptions,
};
use serde_json::{json, Map, Value};

/// A fresh, empty place for a store; removed (the folder) or left behind (the schema, in a
/// throwaway cluster) when dropped.
pub struct Place {
    dir: tempfile::TempDir,
    /// The connection string with the fresh schema as its search path, for PostgreSQL.
    url: Option<String>,
}

/// Whether this run tests the PostgreSQL backend.
pub fn on_postgres() -> bool {
    std::env::var("AIRLOCK_TEST_STORE").as_deref() == Ok("postgres")
}

impl Place {
    pub fn new() -> Place {
        let dir = tempfile::tempdir().unwrap();
        if !on_postgres() {
            return Place { dir, url: None };
        }
        let base = std::env::var("AIRLOCK_TEST_DATABASE_URL")
            .expect("AIRLOCK_TEST_STORE=postgres needs AIRLOCK_TEST_DATABASE_URL");
        let schema = format!("t_{}", uuid_like());
        let mut client = postgres::Client::connect(&base, postgres::NoTls).unwrap();
        client
            .batch_execute(&format!("CREATE SCHEMA {schema}"))
            .unwrap();
        Place {
            dir,
            url: Some(format!("{base} options='-csearch_path={schema}'")),
        }
    }

    /// The connection string of the fresh schema (PostgreSQL only).
    pub fn url(&self) -> Option<&str> {
        self.url.as_deref()
    }

    /// What a child process needs to open the same store ([`Place::from_env_value`]).
    pub fn env_value(&self) -> String {
        match &self.url {
            Some(url) => format!("pg:{url}"),
            None => self.dir.path().display().to_string(),
        }
    }

    pub fn open(&self, options: StoreOptions) -> Result<Store, StoreError> {
        open_at(&self.env_value(), options)
    }
}

/// Opens the store an [`Place::env_value`] names.
pub fn open_at(value: &str, options: StoreOptions) -> Result<Store, StoreError> {
    match value.strip_prefix("pg:") {
        Some(url) => Store::open_postgres(
            &PgOptions {
                url: url.into(),
                ..PgOptions::default()
            },
            options,
        ),
        None => Store::open(std::path::Path::new(value), options),
    }
}

fn uuid_like() -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    format!(
        "{}_{}_{}",
        std::process::id(),
        nanos,
        N.fetch_add(1, Ordering::Relaxed)
    )
}

pub fn agent(id: &str) -> Principal {
    Principal {
        id: id.into(),
        role: "agent".into(),
        groups: vec![],
        ..Default::default()
    }
}

pub fn approver(id: &str, groups: &[&str]) -> Principal {
    Principal {
        id: id.into(),
        role: "approver".into(),
        groups: groups.iter().map(|g| g.to_string()).collect(),
        ..Default::default()
    }
}

pub fn admin(id: &str) -> Principal {
    Principal {
        id: id.into(),
        role: "admin".into(),
        groups: vec![],
        ..Default::default()
    }
}

pub fn call(
    call_id: &str,
    fingerprint: &str,
    requester: &Principal,
    decision: &str,
    now: u64,
) -> CallRecord {
    CallRecord {
        call_id: call_id.into(),
        tool: "payments.refund".into(),
        request: None,
        args: json!({"amount": 900, "password": "hunter2"}),
        fingerprint: fingerprint.into(),
        requester: requester.clone(),
        context: json!({"run_id": "run-1"}),
        decision: decision.into(),
        status: if decision == "allow" {
            CallStatus::Allowed
        } else if decision == "deny" {
            CallStatus::Denied
        } else {
            CallStatus::PendingApproval
        },
        approval_id: None,
        reason: None,
        code: None,
        edited: false,
        granted: false,
        run_by: None,
        outcome: None,
        suspension: None,
        created_at: now,
        updated_at: now,
    }
}

pub struct Held {
    pub call: CallRecord,
    pub approval: Approval,
}

/// A call held for approval by `groups` with `quorum`, expiring `ttl_ms` after `now`.
#[allow(clippy::too_many_arguments)]
pub fn held(
    call_id: &str,
    fingerprint: &str,
    requester: &Principal,
    groups: &[&str],
    quorum: u32,
    uses: u32,
    now: u64,
    ttl_ms: u64,
) -> Held {
    let c = call(call_id, fingerprint, requester, "require_approval", now);
    let approval = Approval {
        kind: airlock_storage::ApprovalKind::Call,
        id: airlock_storage::new_id("apr"),
        call_id: call_id.into(),
        tool: c.tool.clone(),
        request: None,
        args: c.args.clone(),
        fingerprint: fingerprint.into(),
        requester: requester.clone(),
        context: c.context.clone(),
        policy_version: "sha256:00".into(),
        explanation: json!({"rules": ["large-refund"]}),
        rules: vec!["large-refund".into()],
        approvers: groups
            .iter()
            .map(|g| g.to_string())
            .collect::<BTreeSet<_>>(),
        quorum,
        status: ApprovalStatus::Pending,
        decisions: vec![],
        created_at: now,
        expires_at: now + ttl_ms,
        grant: GrantTerms {
            uses,
            ttl_ms: 600_000,
            scope: "run".into(),
            scope_key: "run:run-1".into(),
            max: None,
        },
        edited_args: None,
        edited_fingerprint: None,
        decided_at: None,
    };
    Held { call: c, approval }
}

pub fn no_fields() -> Map<String, Value> {
    Map::new()
}
