//! MCP tasks (DESIGN §15): the record of a task, kept beside the calls it follows, under its
//! principal, so that another principal's request cannot even name it.
//!
//! The store keeps a task as the MCP front end gives it (a JSON object with `expires_at`),
//! appends `mcp.task_created` with it, lists a principal's tasks in creation order and drops
//! them once expired ([`Store::sweep_settings`]). What a task's status is, is read from its
//! call at each request; nothing here decides or runs anything.

use serde_json::{Map, Value};

use crate::audit::Kind;
use crate::error::StoreError;
use crate::keys::Ks;
use crate::model::Millis;
use crate::Store;

use super::put;

/// The prefix of every task's key.
pub(crate) const TASK_PREFIX: &str = "task.";

/// The key of task `task_id` of the principal keyed `owner` (a hash of its id: principal ids
/// may hold any character).
fn task_key(owner: &str, task_id: &str) -> String {
    format!("{TASK_PREFIX}{owner}.{task_id}")
}

impl Store {
    /// Stores a new task of `owner`, durably, with its audit record: when this returns, the
    /// task can be read (a task is never answered before it exists).
    pub fn create_task(
        &self,
        owner: &str,
        task_id: &str,
        task: Value,
        audit: Map<String, Value>,
        now: Millis,
    ) -> Result<(), StoreError> {
        let key = task_key(owner, task_id);
        self.writer.submit(move |tx| {
            put(tx, Ks::Settings, key.as_bytes(), &task)?;
            tx.audit(now, Kind::McpTaskCreated, audit);
            Ok(())
        })
    }

    /// Task `task_id` of `owner`, if it exists and has not expired by `now`.
    pub fn task(
        &self,
        owner: &str,
        task_id: &str,
        now: Millis,
    ) -> Result<Option<Value>, StoreError> {
        let task: Option<Value> = self.read(Ks::Settings, task_key(owner, task_id).as_bytes())?;
        Ok(task.filter(|t| !expired(t, now)))
    }

    /// Up to `limit` unexpired tasks of `owner` created after task `after` (from the first
    /// without), oldest first (task ids sort by creation time).
    pub fn tasks(
        &self,
        owner: &str,
        after: Option<&str>,
        limit: usize,
        now: Millis,
    ) -> Result<Vec<Value>, StoreError> {
        self.shared.check()?;
        let prefix = task_key(owner, "");
        let mut out = Vec::new();
        for entry in self.shared.backend.prefix(Ks::Settings, prefix.as_bytes()) {
            let (key, bytes) = entry?;
            let id = &key[prefix.len()..];
            if after.is_some_and(|a| id <= a.as_bytes()) {
                continue;
            }
            let task: Value = crate::keys::decode(&bytes)?;
            if !expired(&task, now) {
                out.push(task);
            }
            if out.len() >= limit {
                break;
            }
        }
        Ok(out)
    }
}

fn expired(task: &Value, now: Millis) -> bool {
    task.get("expires_at")
        .and_then(Value::as_u64)
        .is_some_and(|t| t <= now)
}
