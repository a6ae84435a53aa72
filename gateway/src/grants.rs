//! Grants the approver scopes (DESIGN §22): the maxima a rule's `grant` allows, as an approval
//! records them; an approver's choice as the API, the CLI and the inbox write it
//! (`{"scope", "ttl", "uses"}`), parsed strictly; and the live grants with their approvals
//! (the front ends show them in their own shape).
//!
//! It does not check a choice against the maxima (the store does, in the transaction that
//! decides, so a reload that tightened them in between is obeyed), nor spend grants; it
//! revokes one for the API and the inbox alike ([`revoke`]).

use std::sync::Arc;

use airlock_policy::{parse_duration, GrantScope, GrantSettings};
use airlock_storage::{Approval, Grant, GrantChoice, GrantMax, GrantScopeName, Principal};
use serde_json::Value;

use crate::error::{ApiError, Code};
use crate::state::Gateway;

/// The policy's scope as the store names it.
pub fn scope_name(scope: GrantScope) -> GrantScopeName {
    match scope {
        GrantScope::Call => GrantScopeName::Call,
        GrantScope::Run => GrantScopeName::Run,
        GrantScope::Principal => GrantScopeName::Principal,
    }
}

/// The most an approver may give under `grant`, as an approval records it.
pub fn maxima(grant: &GrantSettings) -> GrantMax {
    GrantMax {
        uses: grant.max_uses,
        ttl_ms: grant.max_ttl.as_millis() as u64,
        scope: scope_name(grant.max_scope),
    }
}

/// An approver's choice, `{"scope", "ttl", "uses"}` (each optional), refused
/// `request.invalid_field` when it is not that.
pub fn choice(v: &Value) -> Result<GrantChoice, ApiError> {
    let bad = |m: String| ApiError::new(Code::RequestInvalidField, format!("`grant`: {m}"));
    let Value::Object(m) = v else {
        return Err(bad(
            "must be an object: {\"scope\", \"ttl\", \"uses\"}".into()
        ));
    };
    if let Some(k) = m
        .keys()
        .find(|k| !["scope", "ttl", "uses"].contains(&k.as_str()))
    {
        return Err(bad(format!(
            "`{k}` is not a part of a grant: it has `scope`, `ttl` and `uses`"
        )));
    }
    let scope = match m.get("scope") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) => Some(
            GrantScopeName::parse(s)
                .ok_or_else(|| bad(format!("scope `{s}` is not call, run or principal")))?,
        ),
        Some(_) => return Err(bad("`scope` must be call, run or principal".into())),
    };
    let ttl_ms = match m.get("ttl") {
        None | Some(Value::Null) => None,
        Some(Value::String(t)) => Some(
            parse_duration(t)
                .map_err(|e| bad(format!("ttl: {e}")))?
                .as_millis() as u64,
        ),
        Some(_) => return Err(bad("`ttl` must be a duration such as \"1h\"".into())),
    };
    let uses = match m.get("uses") {
        None | Some(Value::Null) => None,
        Some(u) => Some(
            u.as_u64()
                .and_then(|u| u32::try_from(u).ok())
                .ok_or_else(|| bad("`uses` must be a whole number".into()))?,
        ),
    };
    Ok(GrantChoice {
        uses,
        ttl_ms,
        scope,
    })
}

/// The scopes an approver may choose for `a`, narrowest first.
pub fn scopes_allowed(a: &Approval) -> Vec<GrantScopeName> {
    let max = a.grant.maxima().scope;
    [
        GrantScopeName::Call,
        GrantScopeName::Run,
        GrantScopeName::Principal,
    ]
    .into_iter()
    .filter(|s| *s <= max)
    .collect()
}

/// The id a grant is known by: its approval's, `apr_…` made `grt_…`.
pub fn grant_id(approval_id: &str) -> String {
    format!(
        "grt_{}",
        approval_id.strip_prefix("apr_").unwrap_or(approval_id)
    )
}

/// The approval a grant id names.
pub fn approval_of(grant_id: &str) -> Option<String> {
    grant_id
        .strip_prefix("grt_")
        .map(|rest| format!("apr_{rest}"))
}

/// Revokes grant `id` as `by`: an approver in one of its rule's groups (any approver where it
/// names none) or an admin. Returns the grant as it was.
pub async fn revoke(
    gw: &Arc<Gateway>,
    by: &Principal,
    id: &str,
) -> Result<(Grant, Approval), ApiError> {
    let not_found = || ApiError::new(Code::GrantNotFound, format!("no live grant `{id}`"));
    let approval_id = approval_of(id).ok_or_else(not_found)?;
    let lookup = approval_id.clone();
    let a = gw
        .store_op(move |s| s.approval(&lookup))
        .await?
        .ok_or_else(not_found)?;
    let in_groups = a.approvers.is_empty() || by.groups.iter().any(|g| a.approvers.contains(g));
    let may = match by.role.as_str() {
        "admin" => true,
        "approver" => in_groups,
        _ => false,
    };
    if !may {
        return Err(ApiError::new(
            Code::ApprovalForbidden,
            format!(
                "`{}` may not revoke this grant: its rule's approver groups are {:?}",
                by.id, a.approvers
            ),
        ));
    }
    let (who, now) = (by.clone(), crate::clock::now_ms());
    let g = gw
        .store_op(move |s| s.revoke_grant(&approval_id, &who, now))
        .await?;
    tracing::info!(grant = %id, by = %by.id, "grant revoked");
    Ok((g, a))
}

/// The live grants, as `GET /v1/grants` and the inbox list them.
pub async fn live(gw: &Arc<Gateway>) -> Result<Vec<(Grant, Option<Approval>)>, ApiError> {
    gw.store_op(|s| {
        let grants = s.list_grants(crate::clock::now_ms())?;
        let mut out = Vec::with_capacity(grants.len());
        for g in grants {
            let a = s.approval(&g.approval_id)?;
            out.push((g, a));
        }
        Ok(out)
    })
    .await
}
