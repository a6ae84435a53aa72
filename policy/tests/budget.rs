//! The evaluation budget (DESIGN's hostile-args contract): work is counted, a rule that runs
//! out yields `on_error` and never allow, whatever absorbs its error, whatever the file order.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use airlock_policy::{evaluate, BuiltinClassifier, Decision, DecisionKind, Input, PolicySet};
use serde_json::{json, Value};

fn load(text: &str) -> PolicySet {
    PolicySet::from_sources(vec![(PathBuf::from("p.toml"), text.to_owned())]).unwrap()
}

fn decide(set: &PolicySet, tool: &str, args: &Value) -> Decision {
    let classifiers = BTreeMap::new();
    evaluate(
        set,
        &Input {
            tool,
            args,
            context: &json!({}),
            principal: &json!({"id": "agent-1", "role": "agent"}),
            fingerprint: "sha256:00",
            now: SystemTime::UNIX_EPOCH,
            classifiers: &classifiers,
            resume: None,
            definition: None,
            request: airlock_policy::Request::TOOL,
        },
    )
}

const QUADRATIC: &str = r#"version = 1
[defaults]
decision = "allow"
on_error = "require_approval"

[[rules]]
id = "sorted"
when = 'args.items.all(x, args.items.all(y, x <= y || x > y))'
decision = "allow"

[[rules]]
id = "many"
when = 'size(args.items) > 2'
decision = "allow"
"#;

fn items(n: usize) -> Value {
    json!({ "items": (0..n).collect::<Vec<_>>() })
}

#[test]
fn a_quadratic_rule_decides_small_lists_as_written_and_runs_out_on_large_ones() {
    let set = load(QUADRATIC);
    let small = decide(&set, "t", &items(10));
    assert_eq!(small.decision, DecisionKind::Allow);
    assert_eq!(small.rules, vec!["many", "sorted"]);
    assert!(small.errors.is_empty());
    // Binding 12 values (6 steps each), `size` and `>` (3 each), the outer loop 10 x 6, the
    // inner one 10 x (6 + `<=` + `>`) ten times: 1,338.
    assert!((1_338..1_370).contains(&small.steps), "{}", small.steps);

    let large = decide(&set, "t", &items(3_000));
    assert_eq!(large.decision, DecisionKind::RequireApproval);
    assert_eq!(large.errors.len(), 1, "{:?}", large.errors);
    assert_eq!(large.errors[0].rule, "sorted");
    assert_eq!(large.errors[0].reason, "evaluation budget exceeded");
    assert!(large.steps <= set.budget());
}

#[test]
fn an_error_absorbed_by_or_still_counts_as_running_out() {
    let set = load(&QUADRATIC.replace("x <= y || x > y))'", "x <= y || x > y)) || true'"));
    let large = decide(&set, "t", &items(3_000));
    assert_ne!(large.decision, DecisionKind::Allow);
    assert_eq!(large.errors[0].rule, "sorted");
}

#[test]
fn the_budget_is_the_sets_own_setting() {
    let set = load(QUADRATIC).with_budget(50);
    let d = decide(&set, "t", &items(10));
    assert_eq!(d.decision, DecisionKind::RequireApproval);
    assert!(d
        .errors
        .iter()
        .any(|e| e.reason == "evaluation budget exceeded"));
    let set = load(QUADRATIC).with_budget(20_000_000);
    assert_eq!(
        decide(&set, "t", &items(1_000)).decision,
        DecisionKind::Allow
    );
}

#[test]
fn file_order_never_changes_which_rule_a_spent_budget_stops() {
    let deny = "[[rules]]\nid = \"z-deny\"\nwhen = 'args.flag == true'\ndecision = \"deny\"\n";
    let burn = "[[rules]]\nid = \"a-burn\"\nwhen = 'args.items.all(x, args.items.all(y, x != y || x == y))'\ndecision = \"allow\"\n";
    let head = "version = 1\n[defaults]\ndecision = \"allow\"\n";
    let one = load(&format!("{head}{deny}{burn}"));
    let two = load(&format!("{head}{burn}{deny}"));
    let mut args = items(3_000);
    args["flag"] = json!(true);
    let (a, b) = (decide(&one, "t", &args), decide(&two, "t", &args));
    assert_eq!(a.decision, DecisionKind::Deny);
    assert_eq!(
        (&a.decision, &a.rules, &a.errors),
        (&b.decision, &b.rules, &b.errors)
    );
}

#[test]
fn bytes_scanned_by_string_functions_and_regexes_count() {
    let set = load(
        "version = 1\n[defaults]\ndecision = \"allow\"\n[[rules]]\nid = \"r\"\nwhen = 'args.s.contains(\"zz\") || args.s.matches(\"^a+$\")'\ndecision = \"deny\"\n",
    );
    let d = decide(&set, "t", &json!({"s": "a".repeat(100_000)}));
    // Two scans of 100,000 bytes at a step per 10 bytes, two calls at 3 steps, and binding
    // the one field read (6 steps).
    assert_eq!(d.steps, 20_012);
    assert_eq!(d.decision, DecisionKind::Deny);
    // Out of budget, a deny rule denies (the stricter of its decision and on_error).
    let d = decide(&set, "t", &json!({"s": "a".repeat(600_000)}));
    assert_eq!(d.decision, DecisionKind::Deny);
    assert_eq!(d.errors[0].reason, "evaluation budget exceeded");
}

#[test]
fn loops_over_computed_strings_pay_for_what_they_read() {
    // Each element compares two big computed values: the comparison is weighed, so the
    // loop cannot read 100 KB ten thousand times on one budget.
    let set = load(
        "version = 1\n[defaults]\ndecision = \"allow\"\n[[rules]]\nid = \"r\"\nwhen = 'args.items.exists(x, args.a + \"\" == args.b)'\ndecision = \"deny\"\n",
    );
    let mut args = items(10_000);
    args["a"] = json!("x".repeat(100_000));
    args["b"] = json!("y".repeat(100_000));
    let d = decide(&set, "t", &args);
    assert_eq!(d.decision, DecisionKind::Deny);
    assert_eq!(d.errors[0].reason, "evaluation budget exceeded");
}

fn shipped(name: &str) -> PolicySet {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../policies")
        .join(name);
    PolicySet::load(&root).unwrap()
}

#[test]
fn a_secret_key_at_the_end_of_a_large_object_is_still_denied() {
    let set = shipped("default");
    let mut args = serde_json::Map::new();
    for i in 0..5_000 {
        args.insert(format!("k{i:05}"), json!(i));
    }
    args.insert("zz_password".into(), json!("hunter2"));
    let d = decide(&set, "crm.customer.get", &Value::Object(args.clone()));
    assert_eq!(d.decision, DecisionKind::Deny, "{:?}", d.errors);
    assert!(d.rules.contains(&"deny-credentials-in-args".to_owned()));
    assert!(d.steps <= set.budget());

    // Beyond what the budget pays for, the deny rule still denies: padding never turns it
    // into an approval request.
    for i in 5_000..150_000 {
        args.insert(format!("k{i:06}"), json!(i));
    }
    let d = decide(&set, "crm.customer.get", &Value::Object(args));
    assert_eq!(d.decision, DecisionKind::Deny);
    // `args` is too big to bind whole: the rule that reads it whole runs out; the one that
    // reads only `args.items` is bound just that field, and decides.
    let errors: Vec<&str> = d.errors.iter().map(|e| e.rule.as_str()).collect();
    assert_eq!(errors, vec!["deny-credentials-in-args"]);
    assert_eq!(d.errors[0].reason, "evaluation budget exceeded");
}

#[test]
fn a_deny_on_one_field_keeps_its_turn_when_args_is_too_big_to_bind_whole() {
    let set = load(
        "version = 1\n[defaults]\ndecision = \"allow\"\n\
         [[rules]]\nid = \"keys\"\nwhen = 'args.exists(k, k == \"x\")'\ndecision = \"require_approval\"\n\
         [[rules]]\nid = \"etc\"\nwhen = 'args.path.startsWith(\"/etc\")'\ndecision = \"deny\"\n",
    );
    let mut args = serde_json::Map::new();
    for i in 0..50_000 {
        args.insert(format!("k{i:05}"), json!(i));
    }
    args.insert("path".into(), json!("/etc/shadow"));
    let d = decide(&set, "t", &Value::Object(args));
    assert_eq!(d.decision, DecisionKind::Deny, "{:?}", d.errors);
    assert_eq!(d.rules, vec!["etc"]);
    assert_eq!(d.errors.len(), 1);
    assert_eq!(d.errors[0].rule, "keys");
}

#[test]
fn the_builtin_classifier_stays_linear_in_what_it_is_sent() {
    // Thirty objects nested under 15 KB keys, holding 30,000 risky strings: about 1 MB. A
    // detail per match, each with a copy of its 450 KB path, would be 13 GB.
    let leaves: Vec<Value> = (0..30_000).map(|_| json!("sudo rm -rf /")).collect();
    let mut v = json!(leaves);
    for i in 0..30 {
        v = json!({ format!("{}{i}", "k".repeat(15_000)): v });
    }
    let r = BuiltinClassifier::new(vec![]).classify(&v);
    assert!(
        r.labels.contains(&"destructive".to_owned()),
        "{:?}",
        r.labels
    );
    assert!(r.labels.contains(&"privilege".to_owned()), "{:?}", r.labels);
    let matches = r.detail["matches"].as_array().unwrap();
    assert_eq!(matches.len(), airlock_policy::MAX_MATCHES);
    for m in matches {
        let p = m["pointer"].as_str().unwrap();
        assert!(p.len() <= 516 && p.ends_with('…'), "{}", p.len());
    }
}

/// Args an attacker would send each shipped set, within a 1 MiB body.
fn hostile_shapes(fields: &[&str]) -> Vec<(&'static str, Value)> {
    let keys: serde_json::Map<String, Value> = (0..80_000)
        .map(|i| (format!("k{i:06}"), json!(1)))
        .collect();
    let item = json!({"id": 1, "name": "item", "tags": ["a", "b"]});
    let mut objects: serde_json::Map<String, Value> =
        fields.iter().map(|f| (f.to_string(), json!("x"))).collect();
    objects.insert("items".into(), Value::Array(vec![item; 25_000]));
    let unit = "rm -r sudo curl | drop delete from update set select ; ";
    let text = unit.repeat(1_000_000 / unit.len() / fields.len().max(1));
    let long: serde_json::Map<String, Value> = fields
        .iter()
        .map(|f| (f.to_string(), json!(text)))
        .collect();
    let mut deep = json!("deep");
    for i in 0..63 {
        deep = if i % 2 == 0 {
            json!([deep])
        } else {
            json!({ "n": deep })
        };
    }
    let nested: serde_json::Map<String, Value> = fields
        .iter()
        .map(|f| (f.to_string(), deep.clone()))
        .collect();
    vec![
        ("tens of thousands of keys", Value::Object(keys)),
        ("a long list of objects", Value::Object(objects)),
        ("a string near the limit", Value::Object(long)),
        ("the deepest nesting allowed", Value::Object(nested)),
    ]
}

#[test]
fn every_shipped_set_decides_the_worst_args_within_its_budget_and_fails_closed() {
    let sets: [(&str, &str, &[&str]); 6] = [
        ("default", "crm.customer.get", &["items"]),
        ("shell", "shell.exec", &["command", "cwd"]),
        ("database", "db.exec", &["sql", "database"]),
        ("payments", "payments.charge", &["amount", "currency"]),
        (
            "devops",
            "iam.attach",
            &["policy", "verb", "namespace", "environment"],
        ),
        ("mcp", "cloud.purge", &["target"]),
    ];
    for (name, tool, fields) in sets {
        let set = shipped(name);
        for (shape, args) in hostile_shapes(fields) {
            let body = serde_json::to_vec(&json!({"tool": tool, "args": args})).unwrap();
            assert!(
                body.len() <= 1 << 20,
                "{name}: {shape} is {} bytes",
                body.len()
            );
            let d = decide(&set, tool, &args);
            // The bound is the budget: work counted, the same on every machine.
            assert!(
                d.steps <= set.budget(),
                "{name}: {shape}: {} steps",
                d.steps
            );
            if !d.errors.is_empty() {
                assert_ne!(
                    d.decision,
                    DecisionKind::Allow,
                    "{name}: {shape}: {:?}",
                    d.errors
                );
            }
        }
    }
}

/// The attack of padding: a path followed by a million `/` makes a deny rule run out of its
/// budget; it must still deny, whatever `on_error` says.
#[test]
fn a_deny_rule_that_runs_out_denies_whatever_on_error_says() {
    let set = load(
        r#"version = 1
[defaults]
decision = "allow"
on_error = "require_approval"

[[rules]]
id = "no-shadow"
when = 'args.path.replace("//", "/").startsWith("/etc/shadow") || args.path.split("/").exists(p, p == "shadow")'
decision = "deny"

[[rules]]
id = "big"
when = 'args.path.split("/").size() > 1000'
decision = "require_approval"
"#,
    );
    let padded = json!({ "path": format!("/etc/shadow{}", "/".repeat(1_000_000)) });
    let d = decide(&set, "fs.read", &padded);
    assert!(
        d.errors.iter().any(|e| e.rule == "no-shadow"),
        "the deny rule must have run out: {:?}",
        d.errors
    );
    assert_eq!(d.decision, DecisionKind::Deny);
    // An erroring require_approval rule still asks for approval (on_error), never allows.
    let small = decide(&set, "fs.read", &json!({ "path": "/tmp/x" }));
    assert_eq!(small.decision, DecisionKind::Allow);
}
