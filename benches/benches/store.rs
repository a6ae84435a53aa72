//! Store micro-benches: grant lookup (miss and hit) on a store holding 10k grants.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::hint::black_box;
use std::time::Duration;

use airlock_benches::{held, principal};
use airlock_storage::{Store, StoreOptions, Verdict};
use criterion::{criterion_group, criterion_main, Criterion};

fn bench_grants(c: &mut Criterion) {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), StoreOptions::default()).unwrap();
    let approver = principal("bob", "admin");
    for i in 0..10_000 {
        let (call, approval) = held(&format!("c{i}"), &format!("sha256:{i:064x}"), 1000);
        let a = store
            .create_approval(call, approval, Default::default())
            .unwrap();
        store
            .decide(
                &a.id,
                &approver,
                Verdict::Approve {
                    reason: None,
                    edit: None,
                },
                1100,
            )
            .unwrap();
    }
    let miss = format!("sha256:{:064x}", u64::MAX);
    c.bench_function("grant_lookup/miss", |b| {
        b.iter(|| {
            store
                .grant(black_box(&miss), black_box("call:c-none"))
                .unwrap()
        })
    });
    let hit = format!("sha256:{:064x}", 4242);
    c.bench_function("grant_lookup/hit", |b| {
        b.iter(|| {
            store
                .grant(black_box(&hit), black_box("call:c4242"))
                .unwrap()
        })
    });
}

criterion_group! {
    name = benches;
    config = Criterion::default().sample_size(30).warm_up_time(Duration::from_millis(500)).measurement_time(Duration::from_secs(2));
    targets = bench_grants
}
criterion_main!(benches);
