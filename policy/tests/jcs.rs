//! RFC 8785 conformance: the test vectors as fixtures, the Appendix B number table, and a
//! differential test against `serde_json_canonicalizer` on generated values.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use airlock_policy::{canonicalize, json};
use proptest::prelude::*;
use serde_json::{Number, Value};

mod support;
use support::arb_json;

const FIXTURES: [&str; 6] = [
    "arrays",
    "french",
    "structures",
    "unicode",
    "values",
    "weird",
];

fn fixture(dir: &str, name: &str) -> Vec<u8> {
    let path = format!("{}/tests/jcs/{dir}/{name}.json", env!("CARGO_MANIFEST_DIR"));
    std::fs::read(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

#[test]
fn rfc8785_vectors_byte_for_byte() {
    for name in FIXTURES {
        let input = json::parse(&fixture("input", name), 64).unwrap();
        let expected = fixture("output", name);
        assert_eq!(
            canonicalize(&input).as_bytes(),
            expected.as_slice(),
            "vector {name}"
        );
        // The oracle agrees on the same vector, so the fixture itself is right.
        let oracle = serde_json_canonicalizer::to_vec(&input).unwrap();
        assert_eq!(oracle, expected, "oracle on vector {name}");
    }
}

#[test]
fn rfc8785_appendix_b_numbers() {
    let table: [(u64, &str); 24] = [
        (0x0000000000000000, "0"),
        (0x8000000000000000, "0"),
        (0x0000000000000001, "5e-324"),
        (0x8000000000000001, "-5e-324"),
        (0x7fefffffffffffff, "1.7976931348623157e+308"),
        (0xffefffffffffffff, "-1.7976931348623157e+308"),
        (0x4340000000000000, "9007199254740992"),
        (0xc340000000000000, "-9007199254740992"),
        (0x4430000000000000, "295147905179352830000"),
        (0x44b52d02c7e14af5, "9.999999999999997e+22"),
        (0x44b52d02c7e14af6, "1e+23"),
        (0x44b52d02c7e14af7, "1.0000000000000001e+23"),
        (0x444b1ae4d6e2ef4e, "999999999999999700000"),
        (0x444b1ae4d6e2ef4f, "999999999999999900000"),
        (0x444b1ae4d6e2ef50, "1e+21"),
        (0x3eb0c6f7a0b5ed8c, "9.999999999999997e-7"),
        (0x3eb0c6f7a0b5ed8d, "0.000001"),
        (0x41b3de4355555553, "333333333.3333332"),
        (0x41b3de4355555554, "333333333.33333325"),
        (0x41b3de4355555555, "333333333.3333333"),
        (0x41b3de4355555556, "333333333.3333334"),
        (0x41b3de4355555557, "333333333.33333343"),
        (0xbecbf647612f3696, "-0.0000033333333333333333"),
        (0x43143ff3c1cb0959, "1424953923781206.2"),
    ];
    for (bits, expected) in table {
        let n = Number::from_f64(f64::from_bits(bits)).unwrap();
        assert_eq!(canonicalize(&Value::Number(n)), expected, "{bits:016x}");
    }
    // NaN and the infinities have no JSON form at all.
    for bits in [0x7fffffffffffffffu64, 0x7ff0000000000000] {
        assert!(Number::from_f64(f64::from_bits(bits)).is_none());
    }
}

#[test]
fn awkward_literals_through_the_strict_parser() {
    let cases = [
        ("1e21", "1e+21"),
        ("1e-7", "1e-7"),
        ("-0", "0"),
        ("-0.0", "0"),
        ("-0e5", "0"),
        ("5e-324", "5e-324"),
        ("0.1e1", "1"),
        ("100e-2", "1"),
        ("\"\\u00e9\"", "\"é\""),
        ("\"\\ud83d\\ude00\"", "\"😀\""),
        ("\"\\u001F\"", "\"\\u001f\""),
        ("\"\\/\"", "\"/\""),
    ];
    for (input, expected) in cases {
        let v = json::parse(input.as_bytes(), 64).unwrap();
        assert_eq!(canonicalize(&v), expected, "{input}");
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn agrees_with_the_oracle(value in arb_json()) {
        let ours = canonicalize(&value);
        let oracle = serde_json_canonicalizer::to_string(&value).unwrap();
        prop_assert_eq!(ours, oracle);
    }
}

/// An MCP tool's definition fingerprint (DESIGN §20): the tool object's RFC 8785 form without
/// `_meta`, so key order and `_meta` change nothing and any other byte does.
#[test]
fn a_tool_definition_fingerprint_ignores_order_and_meta_only() {
    use airlock_policy::definition_fingerprint;
    use sha2::{Digest, Sha256};
    let a = serde_json::json!({"name": "deploy", "description": "Deploys", "annotations": {"destructiveHint": false}});
    let b = serde_json::json!({"annotations": {"destructiveHint": false}, "_meta": {"x": 1}, "description": "Deploys", "name": "deploy"});
    assert_eq!(definition_fingerprint(&a), definition_fingerprint(&b));
    let expected = format!(
        "sha256:{}",
        airlock_policy::hex(&Sha256::digest(
            br#"{"annotations":{"destructiveHint":false},"description":"Deploys","name":"deploy"}"#
        ))
    );
    assert_eq!(definition_fingerprint(&a), expected);
    let c = serde_json::json!({"name": "deploy", "description": "Deploys ", "annotations": {"destructiveHint": false}});
    assert_ne!(definition_fingerprint(&a), definition_fingerprint(&c));
    let d = serde_json::json!({"name": "deploy", "description": "Deploys", "annotations": {"destructiveHint": true}});
    assert_ne!(definition_fingerprint(&a), definition_fingerprint(&d));
}
