//! An approval's rows: the record with its listing index entries and expiry entry, written
//! new, and its move in the status index. Shared by calls held for approval
//! ([`super::approvals`]), tool-definition reviews ([`super::pins`]) and whatever ends an
//! approval (expiry, cancel, a new policy); nothing here decides.

use crate::error::StoreError;
use crate::keys::{self, Ks, EXPIRE_APPROVAL};
use crate::model::{Approval, ApprovalStatus};
use crate::writer::Tx;

use super::{put, run_id, IDX_ALL, IDX_PRINCIPAL, IDX_RUN, IDX_STATUS, IDX_TOOL};

/// Writes a new pending approval with its listing index entries and its expiry.
pub(super) fn put_new_approval(tx: &mut Tx<'_>, approval: &Approval) -> Result<(), StoreError> {
    put(tx, Ks::Approvals, approval.id.as_bytes(), approval)?;
    for (field, value) in index_entries(approval) {
        tx.put(
            Ks::ApprovalIndex,
            keys::index_key(field, &value, &approval.id),
            Vec::new(),
        );
    }
    tx.put(
        Ks::Expiry,
        keys::expiry_key(approval.expires_at, EXPIRE_APPROVAL, approval.id.as_bytes()),
        Vec::new(),
    );
    Ok(())
}

/// The listing index entries of an approval.
pub(super) fn index_entries(a: &Approval) -> Vec<(u8, String)> {
    let mut entries = vec![
        (IDX_ALL, String::new()),
        (IDX_STATUS, a.status.as_str().to_owned()),
        (IDX_TOOL, a.tool.clone()),
        (IDX_PRINCIPAL, a.requester.id.clone()),
    ];
    if let Some(r) = run_id(&a.context) {
        entries.push((IDX_RUN, r.to_owned()));
    }
    entries
}

/// Moves `a` in the status index; refuses any transition but `pending` → final.
pub(super) fn set_status_index(
    tx: &mut Tx<'_>,
    a: &Approval,
    old: ApprovalStatus,
) -> Result<(), StoreError> {
    if !old.can_become(a.status) {
        return Err(StoreError::NotPending(old.as_str()));
    }
    tx.delete(
        Ks::ApprovalIndex,
        keys::index_key(IDX_STATUS, old.as_str(), &a.id),
    );
    tx.put(
        Ks::ApprovalIndex,
        keys::index_key(IDX_STATUS, a.status.as_str(), &a.id),
        Vec::new(),
    );
    Ok(())
}
