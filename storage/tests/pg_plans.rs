//! The PostgreSQL store's statements stay index lookups whatever the table held when a
//! connection opened. Each connection plans its prepared statements once (a generic plan);
//! made on a new, empty database, a plan that scans the table and hashes it would be kept as
//! the table grows, and the cost of every group with it. So: EXPLAIN of every statement a
//! connection prepares, under the settings the store gives its connections, on an empty table
//! and on one of 200,000 rows, each on a new connection; no sequential scan of the table, no
//! hash or merge join over it. (PostgreSQL only: `AIRLOCK_TEST_STORE=postgres`, as the test
//! command's second pass runs the store's tests.)

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use airlock_storage::{postgres_plans, StoreOptions};
use support::*;

/// The plan of each statement, on a new connection with the store's settings.
fn plans(url: &str) -> Vec<(&'static str, String)> {
    let mut c = postgres::Client::connect(url, postgres::NoTls).unwrap();
    c.batch_execute(postgres_plans::SETTINGS).unwrap();
    let mut out = Vec::new();
    for (name, sql) in postgres_plans::STATEMENTS.iter().copied() {
        let params = (1..=20)
            .rev()
            .find(|n| sql.contains(&format!("${n}")))
            .unwrap_or(0);
        c.batch_execute(&format!("PREPARE {name} AS {sql}"))
            .unwrap();
        let args = vec!["NULL"; params].join(", ");
        let rows = c
            .query(&format!("EXPLAIN EXECUTE {name}({args})"), &[])
            .unwrap();
        let plan: Vec<String> = rows.iter().map(|r| r.get::<_, String>(0)).collect();
        out.push((name, plan.join("\n")));
        c.batch_execute(&format!("DEALLOCATE {name}")).unwrap();
    }
    out
}

fn assert_index_only(plans: &[(&str, String)], when: &str) {
    for (name, plan) in plans {
        for bad in [
            "Seq Scan on airlock_kv",
            "Hash Join",
            "Hash Anti Join",
            "Hash Semi Join",
            "Merge Join",
            "Merge Anti Join",
        ] {
            assert!(
                !plan.contains(bad),
                "{when}: `{name}` plans a {bad}:\n{plan}"
            );
        }
        assert!(
            plan.contains("airlock_kv_pkey") || !plan.contains("airlock_kv"),
            "{when}: `{name}` reads the table without its key:\n{plan}"
        );
    }
}

#[test]
fn every_statement_is_an_index_lookup_on_an_empty_table_and_on_a_large_one() {
    if !on_postgres() {
        eprintln!("skipped: the PostgreSQL backend's plans (AIRLOCK_TEST_STORE=postgres runs it)");
        return;
    }
    let place = Place::new();
    let url = place.url().unwrap().to_owned();
    // Opening the store makes its tables.
    drop(place.open(StoreOptions::default()).unwrap());
    let empty = plans(&url);
    assert_eq!(empty.len(), postgres_plans::STATEMENTS.len());
    assert_index_only(&empty, "an empty table");
    let mut c = postgres::Client::connect(&url, postgres::NoTls).unwrap();
    c.batch_execute(
        "INSERT INTO airlock_kv (ks, k, v) \
         SELECT (i % 12)::int2, convert_to('key-' || i, 'UTF8'), '\\x00'::bytea \
         FROM generate_series(1, 200000) AS i; \
         ANALYZE airlock_kv",
    )
    .unwrap();
    assert_index_only(&plans(&url), "a table of 200,000 rows");
}

#[test]
fn without_the_settings_a_new_database_would_plan_a_scan() {
    // The check above can fail: the write statement planned on an empty table without the
    // store's settings hashes a sequential scan of it.
    if !on_postgres() {
        eprintln!("skipped: the PostgreSQL backend's plans (AIRLOCK_TEST_STORE=postgres runs it)");
        return;
    }
    let place = Place::new();
    let url = place.url().unwrap().to_owned();
    drop(place.open(StoreOptions::default()).unwrap());
    let mut c = postgres::Client::connect(&url, postgres::NoTls).unwrap();
    c.batch_execute("SET plan_cache_mode = force_generic_plan")
        .unwrap();
    let (_, write) = postgres_plans::STATEMENTS
        .iter()
        .find(|(n, _)| *n == "airlock_write")
        .unwrap();
    c.batch_execute(&format!("PREPARE w AS {write}")).unwrap();
    let rows = c
        .query(
            &format!("EXPLAIN EXECUTE w({})", ["NULL"; 12].join(", ")),
            &[],
        )
        .unwrap();
    let plan: Vec<String> = rows.iter().map(|r| r.get::<_, String>(0)).collect();
    assert!(
        plan.join("\n").contains("Seq Scan on airlock_kv"),
        "{plan:?}"
    );
}
