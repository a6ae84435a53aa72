//! The claim stage: a call that may run is claimed, at most once, before anything is sent
//! (`executing`, durable as DESIGN §13 says), and a claim is never left behind: a request
//! dropped after its claim records the call `call.interrupted` ([`Unfinished`]), as a crash
//! would be recorded at the next start. [`allowed`] records and claims an allowed call in one
//! write; [`execute`] claims an approved one.

use std::sync::Arc;

use airlock_storage::{Begin, CallOutcome, CallRecord, Durability};

use super::decide::Decided;
use super::forward;
use super::outcome::{record_outcome, respond};
use super::Outcome;
use crate::clock::now_ms;
use crate::error::{ApiError, Code};
use crate::state::Gateway;

/// Records an allowed call and its claim to run, in one write, before forwarding: `sync`
/// fsyncs it before the call runs; `batched` writes it now and fsyncs it within the flush
/// interval, not awaited.
pub(super) async fn allowed(
    gw: &Arc<Gateway>,
    d: &Decided,
) -> Result<(CallRecord, Unfinished), ApiError> {
    let durability = if gw.config.batched {
        Durability::Lazy
    } else {
        Durability::Durable
    };
    // Armed before the claim: the call id is new, so nobody else can own its claim.
    let guard = Unfinished::arm(gw, &d.call_id, "allow");
    let (record, expl) = (d.record(), d.explanation());
    match gw
        .store_async(
            gw.store
                .record_call_async(record, expl, true, durability, gw.alone()),
        )
        .await
    {
        Ok(record) => Ok((record, guard)),
        Err(e) => Err(guard.disarm(e)),
    }
}

/// Claims the call (at most once), forwards the canonical args, records the outcome.
pub(super) async fn execute(gw: &Arc<Gateway>, call: CallRecord) -> Result<Outcome, ApiError> {
    let id = call.call_id.clone();
    let now = now_ms();
    let begun = claim(
        gw,
        move |s| s.begin_execution(&id, now),
        |begun| match begun {
            Begin::Run(call) => Some(call),
            _ => None,
        },
    )
    .await?;
    let call = match begun {
        Begin::Run(call) => call,
        Begin::InProgress(_) => {
            return Err(ApiError::new(
                Code::CallInProgress,
                "the call is executing; ask again for its outcome",
            )
            .retry_after(1))
        }
        Begin::Pending(call) | Begin::Finished(call) => return Box::pin(respond(gw, call)).await,
    };
    let guard = Unfinished::arm(gw, &call.call_id, &call.decision);
    forward::run(gw, call, None, guard).await
}

/// A claimed call's outcome, written if the request is dropped before it is: the client went
/// away or cancelled (an MCP `notifications/cancelled`) while the backend was being called.
/// The request to the backend is dropped with it, so whether the call ran is unknown: it is
/// recorded `call.interrupted` at once, as a crash would be at the next start, and never
/// left `executing`. Disarmed once the outcome is written.
pub(crate) struct Unfinished {
    gw: Arc<Gateway>,
    /// The call, while its outcome is still to be written.
    call_id: Option<String>,
    decision: String,
}

impl Unfinished {
    pub(crate) fn arm(gw: &Arc<Gateway>, call_id: &str, decision: &str) -> Unfinished {
        Unfinished {
            gw: gw.clone(),
            call_id: Some(call_id.to_owned()),
            decision: decision.to_owned(),
        }
    }

    /// The outcome is written (or the call was never claimed): nothing to do when dropped.
    /// Returns `pass` so an error can go through it.
    pub(crate) fn disarm<T>(mut self, pass: T) -> T {
        self.call_id = None;
        pass
    }
}

impl Drop for Unfinished {
    fn drop(&mut self) {
        let Some(call_id) = self.call_id.take() else {
            return;
        };
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let (gw, decision) = (self.gw.clone(), std::mem::take(&mut self.decision));
        runtime.spawn(async move {
            let outcome = CallOutcome {
                upstream_status: None,
                result: None,
                error: Some("call.interrupted".into()),
                message: Some(
                    "the client went away or cancelled while the backend was being called; \
                     the request to it was dropped, so whether the call ran is unknown"
                        .into(),
                ),
            };
            match record_outcome(&gw, &call_id, None, &decision, outcome).await {
                Ok(_) => tracing::warn!(
                    call_id,
                    "the client left a running call: recorded call.interrupted"
                ),
                // Not claimed after all (the claim itself failed): nothing was left running.
                Err(e) => tracing::debug!(
                    call_id,
                    code = e.code.as_str(),
                    "no unfinished call to record"
                ),
            }
        });
    }
}

/// Runs a store operation that may claim a call (`claimed` finds it in the result), so that a
/// claim made after the request went away is not left executing: the operation finishes in a
/// task of its own, and a claim nobody is left to run is recorded `call.interrupted` at once,
/// as the request's [`Unfinished`] guard would have done.
pub(crate) async fn claim<T, F>(
    gw: &Arc<Gateway>,
    op: F,
    claimed: fn(&T) -> Option<&CallRecord>,
) -> Result<T, ApiError>
where
    T: Send + 'static,
    F: FnOnce(&airlock_storage::Store) -> Result<T, airlock_storage::StoreError> + Send + 'static,
{
    let (tx, rx) = tokio::sync::oneshot::channel();
    let owner = gw.clone();
    tokio::spawn(async move {
        let result = owner.store_op(op).await;
        if let Err(Ok(unheard)) = tx.send(result) {
            if let Some(call) = claimed(&unheard) {
                // Dropped at once: it records the outcome.
                drop(Unfinished::arm(&owner, &call.call_id, &call.decision));
            }
        }
    });
    rx.await
        .map_err(|_| ApiError::new(Code::Internal, "the store task ended without an answer"))?
}
