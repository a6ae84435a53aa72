//! airlock's CEL against the specification's own conformance tests (cel-spec, as npm's
//! `@bufbuild/cel-spec` ships them), in the files that apply to JSON-shaped data.
//!
//! Every test is evaluated as a rule's condition would be (`evaluate_expression`: the same
//! environment, load-time checks and budget). A test passes when the value is the expected
//! one, or when an error was expected and the expression failed or was refused. Tests that
//! need protobuf messages, containers or type values are not airlock's to run and are
//! counted apart. The tests that fail are listed, each with the reason, in
//! `cel_conformance_known.txt`: this test fails when any other test fails (a regression) and
//! when a listed one passes (the list is stale). `docs/policy.md` gives the differences.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

use airlock_policy::{evaluate_expression, ExpressionError, DEFAULT_BUDGET};
use serde_json::Value;

const FILES: [&str; 12] = [
    "basic",
    "comparisons",
    "conversions",
    "fields",
    "integer_math",
    "fp_math",
    "lists",
    "logic",
    "macros",
    "string",
    "string_ext",
    "timestamps",
];

fn suite_path() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(
        "../target/peers/node/node_modules/@bufbuild/cel-spec/dist/cjs/testdata/conformance.js",
    )
}

/// The conformance suites, by file name, read through node (the package is JavaScript).
fn suites() -> BTreeMap<String, Value> {
    let path = suite_path();
    assert!(
        path.exists(),
        "{} is missing: the test command (scripts/test.sh) installs @bufbuild/cel-spec",
        path.display()
    );
    let script = format!(
        "const m = require({:?}); const out = {{}}; for (const s of m.tests.suites) out[s.name] = s; process.stdout.write(JSON.stringify(out));",
        path.display().to_string()
    );
    let out = Command::new("node").args(["-e", &script]).output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

enum Verdict {
    Pass,
    Fail(String),
    NotApplicable,
}

fn mentions_protobuf(v: &Value) -> bool {
    match v {
        Value::Object(o) => {
            o.get("objectValue").is_some_and(|ov| {
                let t = ov["@type"].as_str().unwrap_or("");
                !t.ends_with("google.protobuf.Timestamp")
                    && !t.ends_with("google.protobuf.Duration")
            }) || o.contains_key("typeValue")
                || o.contains_key("enumValue")
                || o.values().any(mentions_protobuf)
        }
        Value::Array(a) => a.iter().any(mentions_protobuf),
        _ => false,
    }
}

fn run(test: &Value) -> Verdict {
    let t = &test["original"];
    let expr = t["expr"].as_str().unwrap_or_default();
    let proto_words = [
        "TestAllTypes",
        "google.protobuf",
        "proto2",
        "proto3",
        "NestedTestAllTypes",
        "cel.expr",
    ];
    if t.get("container").is_some()
        || t.get("typeEnv")
            .is_some_and(|e| e.to_string().contains("messageType"))
        || t.get("checkOnly").is_some_and(|c| c == true)
        || t.get("unknown").is_some()
        || mentions_protobuf(t)
        || proto_words.iter().any(|w| expr.contains(w))
    {
        return Verdict::NotApplicable;
    }
    let bindings: Vec<(String, Value)> = t["bindings"]
        .as_object()
        .map(|b| {
            b.iter()
                .map(|(k, v)| (k.clone(), v["value"].clone()))
                .collect()
        })
        .unwrap_or_default();
    let got = evaluate_expression(expr, &bindings, DEFAULT_BUDGET);
    let want_error = t.get("evalError").is_some() || t.get("anyEvalErrors").is_some();
    match (got, want_error) {
        (Err(ExpressionError::Unsupported(_)), _) => Verdict::NotApplicable,
        (Err(_), true) => Verdict::Pass,
        (Err(e), false) => Verdict::Fail(format!("error {e:?}, expected {}", t["value"])),
        (Ok(v), true) => Verdict::Fail(format!("{v}, expected an error")),
        (Ok(v), false) => {
            // A test that names no result expects `true`, as the suite's runners read it.
            let want = t
                .get("value")
                .cloned()
                .unwrap_or_else(|| serde_json::json!({"boolValue": true}));
            if same(&v, &want) {
                Verdict::Pass
            } else {
                Verdict::Fail(format!("{v}, expected {want}"))
            }
        }
    }
}

/// Typed values equal as CEL means them: numbers by value, map entries in any order, an
/// absent list or map body empty.
fn same(a: &Value, b: &Value) -> bool {
    let (Some((ka, va)), Some((kb, vb))) = (
        a.as_object().and_then(|o| o.iter().next()),
        b.as_object().and_then(|o| o.iter().next()),
    ) else {
        return a == b;
    };
    if ka != kb {
        return false;
    }
    match ka.as_str() {
        "doubleValue" => {
            let f = |v: &Value| match v {
                Value::Number(n) => n.as_f64(),
                Value::String(s) if s == "NaN" => Some(f64::NAN),
                Value::String(s) if s == "Infinity" => Some(f64::INFINITY),
                Value::String(s) if s == "-Infinity" => Some(f64::NEG_INFINITY),
                _ => None,
            };
            match (f(va), f(vb)) {
                (Some(x), Some(y)) => x == y || (x.is_nan() && y.is_nan()),
                _ => false,
            }
        }
        "int64Value" | "uint64Value" => {
            let s = |v: &Value| {
                v.as_str()
                    .map(str::to_owned)
                    .unwrap_or_else(|| v.to_string())
            };
            s(va) == s(vb)
        }
        "listValue" => {
            let items = |v: &Value| v["values"].as_array().cloned().unwrap_or_default();
            let (x, y) = (items(va), items(vb));
            x.len() == y.len() && x.iter().zip(&y).all(|(p, q)| same(p, q))
        }
        "mapValue" => {
            let entries = |v: &Value| v["entries"].as_array().cloned().unwrap_or_default();
            let (x, y) = (entries(va), entries(vb));
            x.len() == y.len()
                && x.iter().all(|e| {
                    y.iter()
                        .any(|f| same(&e["key"], &f["key"]) && same(&e["value"], &f["value"]))
                })
        }
        "objectValue" => va["@type"] == vb["@type"] && va["value"].as_str() == vb["value"].as_str(),
        _ => va == vb,
    }
}

fn known_failures() -> BTreeMap<String, String> {
    let text = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/cel_conformance_known.txt"),
    )
    .unwrap();
    text.lines()
        .filter(|l| !l.trim().is_empty() && !l.starts_with('#'))
        .map(|l| match l.split_once(' ') {
            Some((name, why)) => (name.to_owned(), why.trim().to_owned()),
            None => (l.to_owned(), String::new()),
        })
        .collect()
}

#[test]
fn airlock_cel_passes_the_conformance_tests_that_apply_to_json_data() {
    let suites = suites();
    let known = known_failures();
    let mut failed = BTreeMap::new();
    let mut totals = (0, 0, 0);
    for file in FILES {
        let suite = &suites[file];
        let (mut pass, mut fail, mut na) = (0, 0, 0);
        for section in suite["suites"].as_array().unwrap() {
            for test in section["tests"].as_array().unwrap() {
                let name = format!(
                    "{file}/{}/{}",
                    section["name"].as_str().unwrap_or(""),
                    test["original"]["name"].as_str().unwrap_or("")
                );
                match run(test) {
                    Verdict::Pass => pass += 1,
                    Verdict::NotApplicable => na += 1,
                    Verdict::Fail(why) => {
                        fail += 1;
                        failed.insert(name, format!("{} => {why}", test["original"]["expr"]));
                    }
                }
            }
        }
        eprintln!("{file}: {pass} passed, {fail} failed, {na} not applicable");
        totals = (totals.0 + pass, totals.1 + fail, totals.2 + na);
    }
    eprintln!(
        "conformance: {} passed, {} failed, {} not applicable",
        totals.0, totals.1, totals.2
    );
    let new: Vec<String> = failed
        .iter()
        .filter(|(n, _)| !known.contains_key(*n))
        .map(|(n, why)| format!("{n} {why}"))
        .collect();
    let fixed: BTreeSet<&String> = known.keys().filter(|n| !failed.contains_key(*n)).collect();
    assert!(
        new.is_empty() && fixed.is_empty(),
        "failing and not listed in cel_conformance_known.txt:\n{}\n\nlisted but passing now:\n{fixed:?}",
        new.join("\n")
    );
}
