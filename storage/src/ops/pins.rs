//! Tool definition pins (DESIGN §20): what a gateway saw an MCP upstream list, checked against
//! what was trusted, and the review a change opens, in one transaction. Gateways that share a
//! store (PostgreSQL) see the same pins, and however many of them see a change, and however
//! often, one review opens for it.
//!
//! A review is an approval of kind `tool_definition`: it names no call, its requester is the
//! upstream (`mcp:<server>`), and its `args` are the old and the new definition. Deciding it
//! goes through [`Store::decide`] like any approval; what approving and declining do to the pin
//! is [`review_decided`] here, run in the decision's transaction. Nothing here decides whether
//! a call may run: the gateway compares what is listed with the pin it returns.

use std::collections::BTreeSet;

use serde_json::{json, Value};

use crate::audit::Kind;
use crate::error::StoreError;
use crate::keys::{self, Ks, EXPIRE_APPROVAL};
use crate::model::{
    Approval, ApprovalKind, ApprovalStatus, GrantTerms, Millis, PinReview, Principal, ToolPin,
    MAX_DECLINED,
};
use crate::writer::Tx;
use crate::Store;

use super::approval_rows::{put_new_approval, set_status_index};
use super::{fields, get, put};

/// Where pins live in [`Ks::Settings`]: `tool.pin.{server}\0{tool}`.
const PIN_PREFIX: &str = "tool.pin.";

fn pin_key(server: &str, tool: &str) -> Vec<u8> {
    let mut k = format!("{PIN_PREFIX}{server}").into_bytes();
    k.push(0);
    k.extend_from_slice(tool.as_bytes());
    k
}

/// A tool definition as one gateway saw its upstream list it.
#[derive(Debug, Clone, PartialEq)]
pub struct PinSeen {
    pub server: String,
    /// The tool's name at the upstream, and the name clients see (the review's `tool`).
    pub tool: String,
    pub visible: String,
    /// The tool object as listed, `_meta` left out, and its fingerprint.
    pub definition: Value,
    pub fingerprint: String,
    /// Pin the first definition seen of a tool (else it waits for review like a change).
    pub trust_first: bool,
    /// Who reviews a change: approver groups (admins always).
    pub reviewers: BTreeSet<String>,
    /// How long a review stays open before it expires (the tool stays refused).
    pub review_ttl_ms: u64,
}

/// What seeing a definition did.
#[derive(Debug, Clone, PartialEq)]
pub struct Seen {
    /// The pin as it stands after.
    pub pin: ToolPin,
    /// The review this sight opened, if it opened one.
    pub opened: Option<Approval>,
}

/// Whether a review is still open.
fn pending(tx: &Tx<'_>, review: &PinReview) -> Result<bool, StoreError> {
    let a: Option<Approval> = get(tx, Ks::Approvals, review.approval_id.as_bytes())?;
    Ok(a.is_some_and(|a| a.status == ApprovalStatus::Pending))
}

/// Whether seeing `seen` would change nothing about `pin`: it is the pinned definition with no
/// review open, or a change already under review, or one a reviewer declined.
fn unchanged(pin: &ToolPin, seen: &PinSeen, review_open: bool) -> bool {
    if pin.fingerprint.as_deref() == Some(seen.fingerprint.as_str()) {
        // The pinned definition served again forgets what was declined: served later, a
        // declined definition opens a new review.
        return pin.review.is_none() && pin.declined.is_empty();
    }
    let reviewing = pin
        .review
        .as_ref()
        .is_some_and(|r| r.fingerprint == seen.fingerprint && review_open);
    reviewing || (pin.declined.contains(&seen.fingerprint) && pin.review.is_none())
}

impl Store {
    /// The pin of one tool, if any.
    pub fn tool_pin(&self, server: &str, tool: &str) -> Result<Option<ToolPin>, StoreError> {
        self.read(Ks::Settings, &pin_key(server, tool))
    }

    /// Every pin, by server and tool.
    pub fn tool_pins(&self) -> Result<Vec<ToolPin>, StoreError> {
        self.shared.check()?;
        let mut out = Vec::new();
        for entry in self
            .shared
            .backend
            .prefix(Ks::Settings, PIN_PREFIX.as_bytes())
        {
            let (_, bytes) = entry?;
            out.push(keys::decode(&bytes)?);
        }
        Ok(out)
    }

    /// Records that a gateway saw `seen` listed: the first definition of a tool is pinned
    /// (`tool.pinned`), or waits for review without `trust_first`; a definition that is not
    /// the pinned one opens a review (`tool.definition_changed`, `approval.requested`), unless
    /// one is open for it or a reviewer declined it; the pinned definition seen again
    /// withdraws an open review. Writes nothing when nothing changes (the common case: a
    /// list refresh that finds what is pinned).
    pub fn see_tool(&self, seen: PinSeen, now: Millis) -> Result<Seen, StoreError> {
        if let Some(pin) = self.tool_pin(&seen.server, &seen.tool)? {
            let open = match &pin.review {
                Some(r) => self
                    .approval(&r.approval_id)?
                    .is_some_and(|a| a.status == ApprovalStatus::Pending),
                None => false,
            };
            if unchanged(&pin, &seen, open) {
                return Ok(Seen { pin, opened: None });
            }
        }
        self.writer.submit(move |tx| see(tx, seen, now))
    }
}

impl Store {
    /// Opens a review of `seen`, the tool's current definition, at an admin's request (`POST
    /// /v1/tools/{name}/review`): a definition a reviewer declined is reviewed again, and an
    /// open review of another definition is withdrawn. `None` when `seen` is the pinned
    /// definition (nothing to review); the review already open for it when there is one.
    pub fn reopen_tool_review(
        &self,
        seen: PinSeen,
        now: Millis,
    ) -> Result<Option<Approval>, StoreError> {
        self.writer.submit(move |tx| {
            let key = pin_key(&seen.server, &seen.tool);
            let Some(mut pin) = get::<ToolPin>(tx, Ks::Settings, &key)? else {
                return see(tx, seen, now).map(|s| s.opened);
            };
            if pin.fingerprint.as_deref() == Some(seen.fingerprint.as_str()) {
                return Ok(None);
            }
            if let Some(r) = &pin.review {
                if r.fingerprint == seen.fingerprint && pending(tx, r)? {
                    return get(tx, Ks::Approvals, r.approval_id.as_bytes());
                }
            }
            if let Some(r) = pin.review.take() {
                withdraw(tx, &r, &seen, now)?;
            }
            pin.declined.retain(|f| *f != seen.fingerprint);
            let opened = open_review(tx, &mut pin, &seen, now)?;
            put(tx, Ks::Settings, &key, &pin)?;
            Ok(Some(opened))
        })
    }
}

/// [`Store::see_tool`] within the writer's transaction (the pin read again, locked).
fn see(tx: &mut Tx<'_>, seen: PinSeen, now: Millis) -> Result<Seen, StoreError> {
    let key = pin_key(&seen.server, &seen.tool);
    let mut pin = match get::<ToolPin>(tx, Ks::Settings, &key)? {
        Some(pin) => pin,
        None if seen.trust_first => {
            let pin = ToolPin {
                server: seen.server.clone(),
                tool: seen.tool.clone(),
                fingerprint: Some(seen.fingerprint.clone()),
                definition: Some(seen.definition.clone()),
                pinned_at: now,
                pinned_by: "first_seen".into(),
                review: None,
                declined: Vec::new(),
            };
            tx.audit(
                now,
                Kind::ToolPinned,
                fields(json!({"server": seen.server, "tool": seen.visible,
                    "fingerprint": seen.fingerprint, "by": "first_seen"})),
            );
            put(tx, Ks::Settings, &key, &pin)?;
            return Ok(Seen { pin, opened: None });
        }
        None => ToolPin {
            server: seen.server.clone(),
            tool: seen.tool.clone(),
            fingerprint: None,
            definition: None,
            pinned_at: now,
            pinned_by: String::new(),
            review: None,
            declined: Vec::new(),
        },
    };
    let open = match &pin.review {
        Some(r) => pending(tx, r)?,
        None => false,
    };
    if unchanged(&pin, &seen, open) {
        return Ok(Seen { pin, opened: None });
    }
    // What is open is about another definition (or nothing is, any more): it is withdrawn.
    if let Some(r) = pin.review.take() {
        withdraw(tx, &r, &seen, now)?;
    }
    if pin.fingerprint.as_deref() == Some(seen.fingerprint.as_str()) {
        pin.declined.clear();
    }
    let opened = if pin.fingerprint.as_deref() == Some(seen.fingerprint.as_str())
        || pin.declined.contains(&seen.fingerprint)
    {
        None
    } else {
        Some(open_review(tx, &mut pin, &seen, now)?)
    };
    put(tx, Ks::Settings, &key, &pin)?;
    Ok(Seen { pin, opened })
}

/// The approval that reviews `seen` against `pin`: pending, for the server's reviewers.
fn review_of(pin: &ToolPin, seen: &PinSeen, now: Millis) -> Approval {
    Approval {
        id: crate::new_id("apr"),
        kind: ApprovalKind::ToolDefinition,
        call_id: String::new(),
        tool: seen.visible.clone(),
        request: None,
        args: json!({
            "server": seen.server,
            "tool": seen.tool,
            "old": pin.definition,
            "old_fingerprint": pin.fingerprint,
            "new": seen.definition,
            "new_fingerprint": seen.fingerprint,
        }),
        fingerprint: seen.fingerprint.clone(),
        requester: Principal {
            id: format!("mcp:{}", seen.server),
            role: "upstream".into(),
            ..Principal::default()
        },
        context: json!({}),
        policy_version: String::new(),
        explanation: json!({}),
        rules: Vec::new(),
        approvers: seen.reviewers.clone(),
        quorum: 1,
        status: ApprovalStatus::Pending,
        decisions: Vec::new(),
        created_at: now,
        expires_at: now.saturating_add(seen.review_ttl_ms),
        grant: GrantTerms {
            uses: 0,
            ttl_ms: 0,
            scope: "call".into(),
            scope_key: String::new(),
            max: None,
        },
        edited_args: None,
        edited_fingerprint: None,
        decided_at: None,
    }
}

/// Opens the review of `seen` against `pin`, and records it on the pin.
fn open_review(
    tx: &mut Tx<'_>,
    pin: &mut ToolPin,
    seen: &PinSeen,
    now: Millis,
) -> Result<Approval, StoreError> {
    let approval = review_of(pin, seen, now);
    tx.audit(
        now,
        Kind::ToolDefinitionChanged,
        fields(json!({"server": seen.server, "tool": seen.visible,
            "old_fingerprint": pin.fingerprint, "new_fingerprint": seen.fingerprint,
            "approval_id": approval.id})),
    );
    tx.audit(
        now,
        Kind::ApprovalRequested,
        fields(
            json!({"approval_id": approval.id, "kind": approval.kind.as_str(),
            "tool": approval.tool, "fingerprint": approval.fingerprint,
            "principal": approval.requester.id, "approvers": approval.approvers,
            "quorum": approval.quorum, "expires_at": approval.expires_at}),
        ),
    );
    put_new_approval(tx, &approval)?;
    pin.review = Some(PinReview {
        approval_id: approval.id.clone(),
        fingerprint: seen.fingerprint.clone(),
    });
    Ok(approval)
}

/// Ends an open review that no longer fits what the upstream lists (it went back to the
/// pinned definition, or changed again): the approval is cancelled, audited.
fn withdraw(
    tx: &mut Tx<'_>,
    review: &PinReview,
    seen: &PinSeen,
    now: Millis,
) -> Result<(), StoreError> {
    let Some(mut a) = get::<Approval>(tx, Ks::Approvals, review.approval_id.as_bytes())? else {
        return Ok(());
    };
    if a.status != ApprovalStatus::Pending {
        return Ok(());
    }
    a.status = ApprovalStatus::Cancelled;
    a.decided_at = Some(now);
    set_status_index(tx, &a, ApprovalStatus::Pending)?;
    tx.delete(
        Ks::Expiry,
        keys::expiry_key(a.expires_at, EXPIRE_APPROVAL, a.id.as_bytes()),
    );
    put(tx, Ks::Approvals, a.id.as_bytes(), &a)?;
    tx.audit(
        now,
        Kind::ToolReviewWithdrawn,
        fields(
            json!({"server": seen.server, "tool": seen.visible, "approval_id": a.id,
            "fingerprint": review.fingerprint, "now_listed": seen.fingerprint}),
        ),
    );
    Ok(())
}

/// What a decided or expired review does to its pin, in the same transaction: approved, the
/// reviewed definition is pinned (`tool.repinned`); declined, its fingerprint is remembered
/// and the tool stays refused; expired, the review is gone (the tool stays refused, and the
/// next sight of the change opens another).
pub(super) fn review_decided(
    tx: &mut Tx<'_>,
    a: &Approval,
    by: &str,
    now: Millis,
) -> Result<(), StoreError> {
    let server = a.args["server"].as_str().unwrap_or_default();
    let tool = a.args["tool"].as_str().unwrap_or_default();
    let key = pin_key(server, tool);
    let Some(mut pin) = get::<ToolPin>(tx, Ks::Settings, &key)? else {
        return Err(StoreError::Corrupt(format!(
            "the review {} names a tool with no pin",
            a.id
        )));
    };
    if pin.review.as_ref().map(|r| r.approval_id.as_str()) == Some(a.id.as_str()) {
        pin.review = None;
    }
    match a.status {
        ApprovalStatus::Approved => {
            tx.audit(
                now,
                Kind::ToolRepinned,
                fields(
                    json!({"server": server, "tool": a.tool, "approval_id": a.id,
                    "old_fingerprint": pin.fingerprint, "new_fingerprint": a.fingerprint,
                    "by": by}),
                ),
            );
            pin.fingerprint = Some(a.fingerprint.clone());
            pin.definition = Some(a.args["new"].clone());
            pin.pinned_at = now;
            pin.pinned_by = by.to_owned();
            pin.declined.retain(|f| *f != a.fingerprint);
        }
        ApprovalStatus::Declined => {
            pin.declined.retain(|f| *f != a.fingerprint);
            pin.declined.push(a.fingerprint.clone());
            if pin.declined.len() > MAX_DECLINED {
                pin.declined.remove(0);
            }
        }
        _ => {}
    }
    put(tx, Ks::Settings, &key, &pin)
}
