//! One agent cannot drown its approvers (DESIGN §23): the notifications of a principal's new
//! approvals (mail, Slack, webhooks) go out one by one up to [`PER_MINUTE`] a minute; beyond
//! that they are held back, and once the minute is over they go out as one summary per
//! channel: the event `approval.summary`, `{principal, count, approval_ids, since}`, to the
//! webhooks that hear of approvals, one mail to the addresses of their approver groups, one
//! Slack message to their groups' channels. Every approval is still listed in the inbox and
//! the API, and on the approvers' event stream, at once.
//!
//! It counts and holds back in memory, on each gateway for the approvals it opened; it does
//! not send (the outbox does) and does not open approvals.

use std::collections::{BTreeSet, HashMap};
use std::sync::Mutex;

use serde_json::{json, Value};

use crate::clock::rfc3339;

/// Approvals of one principal notified one by one in a minute.
pub const PER_MINUTE: u32 = 10;

/// A minute, in ms.
const MINUTE_MS: u64 = 60_000;

/// One principal's minute.
struct Window {
    /// When the minute started (ms).
    start: u64,
    /// Notifications sent one by one in it.
    sent: u32,
    /// The approvals held back for the summary, and their approver groups.
    held: Vec<String>,
    groups: BTreeSet<String>,
    /// When the first of them was opened.
    since: u64,
}

/// The windows of every principal that had an approval opened lately.
#[derive(Default)]
pub struct Notices {
    windows: Mutex<HashMap<String, Window>>,
}

/// A summary due: what `approval.summary` carries, and the approver groups it is for.
pub struct Summary {
    pub data: Value,
    pub groups: Vec<String>,
}

impl Notices {
    /// Whether an approval of `principal` opened at `now` is notified on its own (true), or
    /// held back for its minute's summary (false; [`Notices::held_back`] says which).
    pub fn admit(&self, principal: &str, now: u64) -> bool {
        let mut windows = self.windows.lock().unwrap_or_else(|e| e.into_inner());
        let w = windows.entry(principal.to_owned()).or_insert(Window {
            start: now,
            sent: 0,
            held: Vec::new(),
            groups: BTreeSet::new(),
            since: now,
        });
        if now >= w.start.saturating_add(MINUTE_MS) && w.held.is_empty() {
            w.start = now;
            w.sent = 0;
        }
        if w.sent < PER_MINUTE && now < w.start.saturating_add(MINUTE_MS) {
            w.sent += 1;
            return true;
        }
        false
    }

    /// Approval `approval_id` of `principal`, for approver `groups`, was held back.
    pub fn held_back(&self, principal: &str, approval_id: &str, groups: &[String], now: u64) {
        let mut windows = self.windows.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(w) = windows.get_mut(principal) {
            if w.held.is_empty() {
                w.since = now;
            }
            w.held.push(approval_id.to_owned());
            w.groups.extend(groups.iter().cloned());
        }
    }

    /// The summaries whose minute is over at `now`: each principal's held-back approvals,
    /// taken (its next minute starts now); windows with nothing left are forgotten.
    pub fn due(&self, now: u64) -> Vec<Summary> {
        let mut windows = self.windows.lock().unwrap_or_else(|e| e.into_inner());
        let mut out = Vec::new();
        for (principal, w) in windows.iter_mut() {
            if now < w.start.saturating_add(MINUTE_MS) || w.held.is_empty() {
                continue;
            }
            let ids = std::mem::take(&mut w.held);
            let groups: Vec<String> = std::mem::take(&mut w.groups).into_iter().collect();
            out.push(Summary {
                data: json!({
                    "principal": principal,
                    "count": ids.len(),
                    "approval_ids": ids,
                    "since": rfc3339(w.since),
                    "approvers": groups,
                }),
                groups,
            });
            w.start = now;
            w.sent = 0;
        }
        windows.retain(|_, w| !w.held.is_empty() || now < w.start.saturating_add(MINUTE_MS));
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ten_a_minute_go_out_and_the_rest_are_one_summary_when_the_minute_ends() {
        let n = Notices::default();
        let admitted = (0..30).filter(|i| n.admit("bot", 1_000 + i)).count();
        assert_eq!(admitted, 10);
        for i in 0..20 {
            n.held_back("bot", &format!("apr_{i}"), &["ops".to_owned()], 1_000 + i);
        }
        // Another principal is counted on its own.
        assert!(n.admit("other", 1_500));
        assert!(n.due(30_000).is_empty(), "not before the minute is over");
        let due = n.due(61_000);
        assert_eq!(due.len(), 1);
        assert_eq!(due[0].data["count"], 20);
        assert_eq!(due[0].data["principal"], "bot");
        assert_eq!(due[0].groups, vec!["ops".to_owned()]);
        assert!(n.due(62_000).is_empty(), "sent once");
        // The next minute starts again with ten.
        assert!(n.admit("bot", 61_500));
    }
}
