//! Generators shared by the property tests.

use proptest::prelude::*;
use serde_json::{Number, Value};

/// Arbitrary JSON values within what the strict parser admits.
pub fn arb_json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        (-(1i64 << 53) + 1..(1i64 << 53)).prop_map(|i| Value::Number(i.into())),
        any::<f64>()
            .prop_filter("finite and admissible", |f| {
                f.is_finite() && !(9007199254740992.0..1e21).contains(&f.abs())
            })
            .prop_map(|f| Value::Number(Number::from_f64(f).unwrap())),
        "\\PC{0,12}".prop_map(Value::String),
        any::<String>().prop_map(Value::String),
    ];
    leaf.prop_recursive(4, 48, 8, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::btree_map("\\PC{0,6}", inner, 0..6)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}
