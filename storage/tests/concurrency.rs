//! 32 threads race to spend one one-use grant: exactly one wins, every time. Lazy writes from
//! async callers (which may run on the caller's thread) race the writer thread's groups, and
//! the chain stays one chain.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use std::sync::{Arc, Barrier};

use airlock_storage::{CallOutcome, CallStatus, Durability, StoreOptions, Verdict};
use support::*;

#[test]
fn one_use_is_spent_once_under_contention() {
    let place = Place::new();
    let store = place.open(StoreOptions::default()).unwrap();
    for round in 0..40 {
        let fp = format!("sha256:round-{round}");
        let h = held(
            &format!("orig-{round}"),
            &fp,
            &agent("bot"),
            &[],
            1,
            2,
            1000,
            60_000,
        );
        let a = store
            .create_approval(h.call, h.approval, no_fields())
            .unwrap();
        store
            .decide(
                &a.id,
                &approver("bob", &[]),
                Verdict::Approve {
                    reason: None,
                    edit: None,
                },
                1100,
            )
            .unwrap();
        // Uses: 2. The approved call is the first (reserved for it), leaving one for the racers.
        store
            .begin_execution(&format!("orig-{round}"), 1200)
            .unwrap();

        let barrier = Arc::new(Barrier::new(32));
        let winners: usize = std::thread::scope(|s| {
            let handles: Vec<_> = (0..32)
                .map(|t| {
                    let store = store.clone();
                    let barrier = barrier.clone();
                    let fp = fp.clone();
                    s.spawn(move || {
                        let c = call(
                            &format!("race-{round}-{t}"),
                            &fp,
                            &agent("bot"),
                            "require_approval",
                            1300,
                        );
                        barrier.wait();
                        usize::from(
                            store
                                .call_with_grant(c, "run:run-1", no_fields(), false)
                                .unwrap()
                                .is_some(),
                        )
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).sum()
        });
        assert_eq!(winners, 1, "round {round}");
        assert!(store.grant(&fp, "run:run-1").unwrap().is_none());
    }
    let consumed = store
        .audit_after(0, 100_000)
        .unwrap()
        .iter()
        .filter(|r| r["kind"] == "grant.consumed")
        .count();
    assert_eq!(consumed, 40);
    assert!(store.verify_audit().unwrap().is_ok());
}

#[test]
fn lazy_async_writes_and_the_writer_thread_keep_one_chain() {
    let place = Place::new();
    let store = place.open(StoreOptions::default()).unwrap();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(4)
        .build()
        .unwrap();
    std::thread::scope(|s| {
        for t in 0..6 {
            let (store, rt) = (&store, &rt);
            s.spawn(move || {
                for i in 0..60 {
                    let id = format!("c-{t}-{i}");
                    // Durable: through the writer thread.
                    store
                        .record_call(
                            call(&id, &format!("sha256:{id}"), &agent("bot"), "allow", 1000),
                            no_fields(),
                            true,
                        )
                        .unwrap();
                    // Lazy and async: at once on this thread when the writer is idle.
                    let done = rt
                        .block_on(store.complete_call_async(
                            &id,
                            CallOutcome {
                                upstream_status: Some(200),
                                result: None,
                                error: None,
                                message: None,
                            },
                            1001,
                            Durability::Lazy,
                        ))
                        .unwrap();
                    assert_eq!(done.status, CallStatus::Completed);
                }
            });
        }
    });
    let summary = store.verify_audit().unwrap().unwrap();
    // Each call: its decision, and its completion.
    assert_eq!(summary.records(), 6 * 60 * 2);
    assert_eq!(summary.chains[0].1.last_seq, 6 * 60 * 2);
    for t in 0..6 {
        for i in 0..60 {
            let c = store.call(&format!("c-{t}-{i}")).unwrap().unwrap();
            assert_eq!(c.status, CallStatus::Completed);
        }
    }
    drop(store);
    // Reopened, everything is there.
    let store = place.open(StoreOptions::default()).unwrap();
    assert_eq!(store.verify_audit().unwrap().unwrap().records(), 6 * 60 * 2);
}
