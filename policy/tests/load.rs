//! Loading: every class of bad policy gets its code and place, folders merge, and classifier
//! results reach rules (or fail closed).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::SystemTime;

use airlock_policy::{
    evaluate, ClassifierOutcome, ClassifierResult, DecisionKind, Input, PolicyErrors, PolicySet,
    RequestKind,
};
use serde_json::json;

const DEFAULTS: &str = "version = 1\n[defaults]\ndecision = \"deny\"\n";

fn load(text: &str) -> Result<PolicySet, PolicyErrors> {
    PolicySet::from_sources(vec![(PathBuf::from("p.toml"), text.to_owned())])
}

fn first_error(text: &str) -> (String, usize, usize, Option<String>) {
    let errors = load(text).expect_err("the policy should be refused");
    let e = &errors.0[0];
    (e.code.to_owned(), e.line, e.col, e.rule.clone())
}

#[test]
fn each_bad_policy_class_has_its_code_and_place() {
    let rule = |body: &str| format!("{DEFAULTS}[[rules]]\nid = \"r1\"\n{body}\n");
    let cases: Vec<(String, &str, usize, Option<&str>)> = vec![
        ("version = 1\n[defaults]\ndecision = \"deny\"\nbogus = 1\n".into(), "policy.unknown_key", 4, None),
        ("version = 1\n[defaults\n".into(), "policy.syntax", 2, None),
        ("version = 2\n[defaults]\ndecision = \"deny\"\n".into(), "policy.unsupported_version", 1, None),
        ("version = 1\n".into(), "policy.missing_defaults", 0, None),
        ("version = 1\n[defaults]\ndecision = \"deny\"\non_error = \"allow\"\n".into(), "policy.on_error_allow", 4, None),
        ("version = 1\n[defaults]\ndecision = \"maybe\"\n".into(), "policy.syntax", 3, None),
        ("version = 1\n[defaults]\ndecision = \"deny\"\napproval_ttl = \"soon\"\n".into(), "policy.invalid_duration", 4, None),
        (rule("when = 'args.x.matches(args.y)'\ndecision = \"deny\""), "policy.dynamic_regex", 6, Some("r1")),
        (rule("when = 'args.x.matches(\"(\")'\ndecision = \"deny\""), "policy.invalid_regex", 6, Some("r1")),
        (rule("when = 'args.x.matches(\"\\\\w{5000}\")'\ndecision = \"deny\""), "policy.invalid_regex", 6, Some("r1")),
        (rule("when = 'argz.x == 1'\ndecision = \"deny\""), "policy.unknown_variable", 6, Some("r1")),
        (rule("when = 'args.x =='\ndecision = \"deny\""), "policy.cel_syntax", 6, Some("r1")),
        (rule("when = 'args.command.startswith(\"rm -rf\")'\ndecision = \"deny\""), "policy.unknown_function", 6, Some("r1")),
        (rule("when = 'size(args.x, 2) > 1'\ndecision = \"deny\""), "policy.wrong_arity", 6, Some("r1")),
        (rule("when = 'args.x.size(1) > 1'\ndecision = \"deny\""), "policy.wrong_arity", 6, Some("r1")),
        (rule("when = 'args.x.trim(\"a\") == \"\"'\ndecision = \"deny\""), "policy.wrong_arity", 6, Some("r1")),
        (rule("when = 'startsWith(args.x, \"a\")'\ndecision = \"deny\""), "policy.unknown_function", 6, Some("r1")),
        (rule("when = 'args.all(k)'\ndecision = \"deny\""), "policy.wrong_arity", 6, Some("r1")),
        (rule("when = 'args.all(k, v, v > 0)'\ndecision = \"deny\""), "policy.wrong_arity", 6, Some("r1")),
        (rule("when = 'args.items.transformList(i, v, v) == []'\ndecision = \"deny\""), "policy.unknown_function", 6, Some("r1")),
        (rule("when = 'classifier.risk.score > 1.0'\ndecision = \"deny\""), "policy.unknown_classifier", 6, Some("r1")),
        (rule("when = '__airlock_matches(\"a\", 0)'\ndecision = \"deny\""), "policy.reserved_name", 6, Some("r1")),
        (rule("decision = \"deny\"\nquorum = 2"), "policy.invalid", 4, Some("r1")),
        (rule("decision = \"require_approval\"\nquorum = 0"), "policy.invalid", 7, Some("r1")),
        (rule("decision = \"require_approval\"\ngrant = { uses = 0 }"), "policy.invalid", 7, Some("r1")),
        (rule("decision = \"deny\"\ntools = [\"bad tool\"]"), "policy.invalid_glob", 7, Some("r1")),
        (rule("decision = \"deny\"\nunknown = true"), "policy.unknown_key", 7, None),
        (format!("{DEFAULTS}[[rules]]\nid = \"bad id!\"\ndecision = \"deny\"\n"), "policy.invalid_rule_id", 5, Some("bad id!")),
        (format!("{DEFAULTS}[[rules]]\nid = \"a\"\ndecision = \"deny\"\n[[rules]]\nid = \"a\"\ndecision = \"allow\"\n"), "policy.duplicate_rule", 8, Some("a")),
    ];
    let mut mismatches = Vec::new();
    for (text, code, line, rule_id) in cases {
        let (got_code, got_line, _, got_rule) = first_error(&text);
        if (got_code.as_str(), got_line, got_rule.as_deref()) != (code, line, rule_id) {
            mismatches.push(format!(
                "{code}@{line}: got {got_code}@{got_line} {got_rule:?}\n{text}"
            ));
        }
    }
    assert!(mismatches.is_empty(), "{}", mismatches.join("\n---\n"));
}

#[test]
fn a_shape_error_does_not_hide_the_cel_errors_of_the_same_file() {
    // A misspelt key in one rule, a misspelt function and an unknown variable in others: all
    // three are reported at once, each at its place.
    let text = format!(
        "{DEFAULTS}[[rules]]\nid = \"a\"\ntools = [\"*\"]\ndecison = \"deny\"\n\
         [[rules]]\nid = \"b\"\ntools = [\"*\"]\ndecision = \"deny\"\nwhen = 'args.cmd.startswith(\"rm\")'\n\
         [[rules]]\nid = \"c\"\ntools = [\"*\"]\ndecision = \"deny\"\nwhen = 'argz.x == 1'\n"
    );
    let errors = load(&text).expect_err("refused").0;
    let found: Vec<(&str, usize, Option<&str>)> = errors
        .iter()
        .map(|e| (e.code, e.line, e.rule.as_deref()))
        .collect();
    assert_eq!(found[0], ("policy.unknown_key", 7, None), "{errors:?}");
    assert!(
        found
            .iter()
            .any(|(c, l, r)| *c == "policy.unknown_function" && *l == 12 && *r == Some("b")),
        "the misspelt function of rule b: {errors:?}"
    );
    assert!(
        found
            .iter()
            .any(|(c, l, r)| *c == "policy.unknown_variable" && *l == 17 && *r == Some("c")),
        "the unknown variable of rule c: {errors:?}"
    );
    // A file that is not TOML at all reports only that.
    let errors = load(&format!("{DEFAULTS}[[rules]\n"))
        .expect_err("refused")
        .0;
    assert_eq!(errors.len(), 1, "{errors:?}");
}

#[test]
fn cel_errors_point_into_the_expression() {
    let text = format!("{DEFAULTS}[[rules]]\nid = \"r1\"\ndecision = \"deny\"\nwhen = '''\nargs.a == 1 &&\n    argz.b == 2'''\n");
    let (code, line, col, _) = first_error(&text);
    assert_eq!(
        (code.as_str(), line, col),
        ("policy.unknown_variable", 9, 5)
    );
}

#[test]
fn comprehension_variables_are_in_scope() {
    let one = format!("{DEFAULTS}[[rules]]\nid = \"r1\"\ndecision = \"deny\"\nwhen = 'args.items.exists(x, x > 1) && args.items.map(y, y * 2).size() > 0'\n");
    assert!(load(&one).is_ok());
}

#[test]
fn a_folder_merges_and_refuses_conflicts() {
    let dir = std::env::temp_dir().join(format!("airlock-load-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("a.toml"), format!("{DEFAULTS}[tools.\"x.*\"]\nrequire_approval = true\n[[rules]]\nid = \"r1\"\ndecision = \"allow\"\n")).unwrap();
    std::fs::write(
        dir.join("b.toml"),
        "[[rules]]\nid = \"r2\"\ntools = [\"y.*\"]\ndecision = \"deny\"\n",
    )
    .unwrap();
    std::fs::write(dir.join("ignored.cases.toml"), "this is not a policy").unwrap();
    let set = PolicySet::load(&dir).unwrap();
    assert_eq!(set.rules().len(), 2);
    assert_eq!(set.sources().len(), 2);

    std::fs::write(dir.join("c.toml"), "[defaults]\ndecision = \"allow\"\n[tools.\"x.*\"]\nrequire_approval = false\n[[rules]]\nid = \"r1\"\ndecision = \"deny\"\n").unwrap();
    let errors = PolicySet::load(&dir).unwrap_err();
    let codes: Vec<&str> = errors.0.iter().map(|e| e.code).collect();
    assert!(codes.contains(&"policy.duplicate_defaults"), "{codes:?}");
    assert!(codes.contains(&"policy.duplicate_key"), "{codes:?}");
    assert!(codes.contains(&"policy.duplicate_rule"), "{codes:?}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn policy_version_covers_every_byte_of_the_sources() {
    let a = load(DEFAULTS).unwrap();
    let b = load(&format!("{DEFAULTS}# a comment\n")).unwrap();
    assert_ne!(a.version(), b.version());
    assert_eq!(a.version(), load(DEFAULTS).unwrap().version());
    assert!(a.version().starts_with("sha256:") && a.version().len() == 71);
}

fn decide(
    set: &PolicySet,
    classifiers: &BTreeMap<String, ClassifierOutcome>,
) -> airlock_policy::Decision {
    let args = json!({"command": "rm -rf /"});
    let ctx = json!({});
    let principal = json!({"id": "a", "role": "agent", "groups": []});
    evaluate(
        set,
        &Input {
            tool: "shell.exec",
            args: &args,
            context: &ctx,
            principal: &principal,
            fingerprint: "sha256:00",
            now: SystemTime::UNIX_EPOCH,
            classifiers,
            resume: None,
            definition: None,
            request: airlock_policy::Request::TOOL,
        },
    )
}

#[test]
fn classifier_results_are_bound_and_failures_fail_closed() {
    let set = load(
        "version = 1\n[defaults]\ndecision = \"allow\"\non_error = \"deny\"\n[[rules]]\nid = \"risky\"\nclassifier = \"risk\"\nwhen = 'classifier.risk.score >= 0.7 || \"destructive\" in classifier.risk.labels'\ndecision = \"require_approval\"\n",
    )
    .unwrap();
    assert_eq!(
        set.classifiers_for("shell.exec")
            .into_iter()
            .collect::<Vec<_>>(),
        vec!["risk"]
    );

    let result = |score: f64, labels: &[&str]| {
        BTreeMap::from([(
            "risk".to_owned(),
            ClassifierOutcome::Ok(ClassifierResult {
                score,
                labels: labels.iter().map(|s| s.to_string()).collect(),
                detail: json!({}),
            }),
        )])
    };
    assert_eq!(
        decide(&set, &result(0.9, &[])).decision,
        DecisionKind::RequireApproval
    );
    assert_eq!(
        decide(&set, &result(0.1, &["destructive"])).decision,
        DecisionKind::RequireApproval
    );
    assert_eq!(
        decide(&set, &result(0.1, &[])).decision,
        DecisionKind::Allow
    );

    // A missing result takes the policy's on_error; a failed classifier takes its own.
    let missing = decide(&set, &BTreeMap::new());
    assert_eq!(missing.decision, DecisionKind::Deny);
    assert_eq!(missing.errors[0].rule, "risky");
    let failed = BTreeMap::from([(
        "risk".to_owned(),
        ClassifierOutcome::Failed {
            reason: "timed out".into(),
            on_error: DecisionKind::RequireApproval,
        },
    )]);
    let d = decide(&set, &failed);
    assert_eq!(d.decision, DecisionKind::RequireApproval);
    assert!(d.errors[0].reason.contains("timed out"));
    // Even a caller that asks for allow on error does not get it.
    let lenient = BTreeMap::from([(
        "risk".to_owned(),
        ClassifierOutcome::Failed {
            reason: "down".into(),
            on_error: DecisionKind::Allow,
        },
    )]);
    assert_ne!(decide(&set, &lenient).decision, DecisionKind::Allow);
}

#[test]
fn unknown_classifiers_are_refused_against_the_configured_ones() {
    let set = load(&format!(
        "{DEFAULTS}[[rules]]\nid = \"r\"\nclassifier = [\"risk\", \"pii\"]\ndecision = \"deny\"\n"
    ))
    .unwrap();
    let known = ["risk".to_owned()].into_iter().collect();
    let e = set.check_classifiers(&known).unwrap_err();
    assert_eq!(e.code(), "policy.unknown_classifier");
    assert_eq!(e.0[0].rule.as_deref(), Some("r"));
}

#[test]
fn resume_is_null_on_a_call_and_bound_on_a_resume() {
    let set = load(&format!(
        "{DEFAULTS}[[rules]]\nid = \"big-resume\"\ntools = [\"pay\"]\nwhen = 'resume != null && resume.amount > 1000'\ndecision = \"deny\"\n\n[[rules]]\nid = \"pay\"\ntools = [\"pay\"]\nwhen = 'true'\ndecision = \"allow\"\n"
    ))
    .unwrap();
    let args = json!({"to": "acme"});
    let ctx = json!({});
    let principal = json!({"id": "a", "role": "agent", "groups": []});
    let none = BTreeMap::new();
    let eval = |resume: Option<&serde_json::Value>| {
        evaluate(
            &set,
            &Input {
                tool: "pay",
                args: &args,
                context: &ctx,
                principal: &principal,
                fingerprint: "sha256:00",
                now: SystemTime::UNIX_EPOCH,
                classifiers: &none,
                resume,
                definition: None,
                request: airlock_policy::Request::TOOL,
            },
        )
    };
    assert_eq!(eval(None).decision, DecisionKind::Allow);
    assert_eq!(
        eval(Some(&json!({"amount": 10}))).decision,
        DecisionKind::Allow
    );
    let big = eval(Some(&json!({"amount": 5000})));
    assert_eq!(big.decision, DecisionKind::Deny);
    assert!(big.rules.contains(&"big-resume".to_owned()));
}

#[test]
fn a_misspelt_function_or_variable_names_its_place_and_the_one_meant() {
    let text = format!(
        "{DEFAULTS}[[rules]]\nid = \"rm\"\nwhen = 'tool == \"shell.exec\" && args.command.startswith(\"rm -rf\")'\ndecision = \"deny\"\n"
    );
    let errors = load(&text).expect_err("refused");
    assert_eq!(errors.0.len(), 1, "{errors}");
    let e = &errors.0[0];
    assert_eq!(
        (e.code, e.line, e.rule.as_deref()),
        ("policy.unknown_function", 6, Some("rm"))
    );
    // The column is the call's, inside the expression: after `tool == "shell.exec" && `.
    assert!(e.col > 30, "{e}");
    assert!(e.message.contains("did you mean `.startsWith()`"), "{e}");

    let text = format!("{DEFAULTS}[[rules]]\nid = \"v\"\nwhen = 'principle.role == \"admin\"'\ndecision = \"deny\"\n");
    let errors = load(&text).expect_err("refused");
    assert_eq!(errors.0[0].code, "policy.unknown_variable");
    assert!(
        errors.0[0].message.contains("did you mean `principal`"),
        "{errors}"
    );
}

#[test]
fn a_loop_inside_a_loop_over_args_loads_with_a_warning_naming_the_rule() {
    let text = format!(
        "{DEFAULTS}[[rules]]\nid = \"sorted\"\nwhen = 'args.items.all(x, args.items.all(y, x <= y))'\ndecision = \"deny\"\n[[rules]]\nid = \"flat\"\nwhen = 'args.items.all(x, x > 0) && args.tags.exists(t, t == \"a\")'\ndecision = \"deny\"\n"
    );
    let set = load(&text).unwrap();
    let warnings = set.warnings();
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert_eq!(warnings[0].code, "policy.nested_comprehension");
    assert_eq!(warnings[0].rule.as_deref(), Some("sorted"));
    assert_eq!(warnings[0].line, 6);
}

#[test]
fn the_shipped_sets_load_without_warnings() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../policies");
    for entry in std::fs::read_dir(root).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            let set = PolicySet::load(&path).unwrap();
            assert!(
                set.warnings().is_empty(),
                "{}: {:?}",
                path.display(),
                set.warnings()
            );
        }
    }
}

/// The grant a call of `tool` gets under `text`, as the decision's JSON writes it.
fn grant_of(text: &str, tool: &str) -> serde_json::Value {
    let set = load(text).unwrap();
    let call = airlock_policy::ToolCall::new(tool, json!({}), None).unwrap();
    let principal = json!({"id": "a", "role": "agent", "groups": []});
    let d = evaluate(
        &set,
        &Input {
            tool: &call.tool,
            args: &call.args,
            context: &call.context,
            principal: &principal,
            fingerprint: call.fingerprint.as_str(),
            now: SystemTime::now(),
            classifiers: &BTreeMap::new(),
            resume: None,
            definition: None,
            request: airlock_policy::Request::TOOL,
        },
    );
    serde_json::to_value(d.approval.unwrap().grant).unwrap()
}

#[test]
fn grant_maxima_default_to_the_grant_and_widen_only_where_written() {
    let base = "version = 1\n[defaults]\ndecision = \"require_approval\"\n";
    // Nothing written: the most an approver may give is the grant itself.
    assert_eq!(
        grant_of(base, "t.x"),
        json!({"uses": 1, "ttl": "10m", "scope": "run", "max_uses": 1, "max_ttl": "10m", "max_scope": "run"})
    );
    // A rule's maxima; a rule's own larger value raises an inherited maximum.
    let text = format!(
        "{base}grant = {{ max_uses = 5 }}\n[[rules]]\nid = \"r\"\ntools = [\"t.*\"]\ndecision = \"require_approval\"\n\
         grant = {{ uses = 8, max_ttl = \"1h\", max_scope = \"principal\" }}\n"
    );
    assert_eq!(
        grant_of(&text, "t.x"),
        json!({"uses": 8, "ttl": "10m", "scope": "run", "max_uses": 8, "max_ttl": "1h", "max_scope": "principal"})
    );
    // A rule that narrows the scope widens nothing it did not write: its maximum is its own.
    let narrow = format!("{base}[[rules]]\nid = \"r\"\ndecision = \"require_approval\"\ngrant = {{ scope = \"call\", ttl = \"5m\" }}\n");
    let g = grant_of(&narrow, "t.x");
    assert_eq!(
        (g["max_scope"].clone(), g["max_ttl"].clone()),
        (json!("call"), json!("5m"))
    );
    // A maximum below the value beside it, or of no uses, is refused.
    for bad in [
        "grant = { uses = 3, max_uses = 2 }",
        "grant = { ttl = \"1h\", max_ttl = \"10m\" }",
        "grant = { scope = \"principal\", max_scope = \"run\" }",
        "grant = { max_uses = 0 }",
    ] {
        let text = format!("{base}[[rules]]\nid = \"r\"\ndecision = \"require_approval\"\n{bad}\n");
        let (code, _, _, rule) = first_error(&text);
        assert_eq!(
            (code.as_str(), rule.as_deref()),
            ("policy.invalid", Some("r")),
            "{bad}"
        );
    }
    // Two rules: the smallest of each maximum.
    let two = format!(
        "{base}[[rules]]\nid = \"a\"\ndecision = \"require_approval\"\ngrant = {{ max_uses = 10, max_scope = \"principal\" }}\n\
         [[rules]]\nid = \"b\"\ndecision = \"require_approval\"\ngrant = {{ max_uses = 4, max_ttl = \"2h\" }}\n"
    );
    let g = grant_of(&two, "t.x");
    assert_eq!(
        (
            g["max_uses"].clone(),
            g["max_scope"].clone(),
            g["max_ttl"].clone()
        ),
        (json!(4), json!("run"), json!("10m"))
    );
}

#[test]
fn a_failing_case_says_which_rules_matched_or_that_the_defaults_decided() {
    let set = load("version = 1\n[defaults]\ndecision = \"allow\"\n[[rules]]\nid = \"no-rm\"\ntools = [\"shell.*\"]\nwhen = 'args.cmd.startsWith(\"rm\")'\ndecision = \"deny\"\n").unwrap();
    let dir = std::env::temp_dir().join(format!("airlock-cases-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("t.cases.toml");
    std::fs::write(
        &file,
        "[[case]]\nname = \"rm\"\ntool = \"shell.exec\"\nargs = { cmd = \"rm -rf /\" }\nexpect = \"allow\"\n\
         [[case]]\nname = \"ls\"\ntool = \"shell.exec\"\nargs = { cmd = \"ls\" }\nexpect = \"deny\"\n",
    )
    .unwrap();
    let results = airlock_policy::cases::run_file(&file, &set);
    std::fs::remove_dir_all(&dir).unwrap();
    let failures: Vec<String> = results.iter().filter_map(|r| r.failure.clone()).collect();
    assert_eq!(
        failures,
        [
            "expected allow, got deny (matched rules `no-rm`)",
            "expected deny, got allow (no rule matched: the defaults decided)"
        ]
    );
}

#[test]
fn a_verdict_carries_the_messages_of_the_rules_that_decided_it() {
    let approve = "[[rules]]\nid = \"ask\"\ntools = [\"shell.*\"]\ndecision = \"require_approval\"\nmessage = \"an operator looks at shell commands\"\n";
    let deny = "[[rules]]\nid = \"no-rm\"\ntools = [\"shell.*\"]\nwhen = 'args.command.contains(\"rm \")'\ndecision = \"deny\"\nmessage = \"rm is never run\"\n";
    let both = load(&format!("{DEFAULTS}{approve}{deny}")).unwrap();
    let d = decide(&both, &BTreeMap::new());
    assert_eq!(d.decision, DecisionKind::Deny);
    assert_eq!(d.rules, ["ask", "no-rm"], "both matched");
    let said: Vec<&str> = d.messages.iter().map(|m| m.message.as_str()).collect();
    assert_eq!(said, ["rm is never run"], "a deny says why it denies, only");

    let approval_only = load(&format!("{DEFAULTS}{approve}")).unwrap();
    let d = decide(&approval_only, &BTreeMap::new());
    assert_eq!(d.decision, DecisionKind::RequireApproval);
    let said: Vec<&str> = d.messages.iter().map(|m| m.message.as_str()).collect();
    assert_eq!(said, ["an operator looks at shell commands"]);
}

#[test]
fn a_tool_is_denied_outright_only_by_rules_that_read_no_call() {
    let agent = json!({"id": "a", "role": "agent", "groups": ["support"]});
    let ops = json!({"id": "o", "role": "agent", "groups": ["ops"]});
    let set = load(
        "version = 1\n[defaults]\ndecision = \"allow\"\n\
         [[rules]]\nid = \"ops-only\"\ntools = [\"deploy.*\"]\nwhen = '!(\"ops\" in principal.groups)'\ndecision = \"deny\"\n\
         [[rules]]\nid = \"never\"\ntools = [\"shell.root\"]\ndecision = \"deny\"\n\
         [[rules]]\nid = \"no-rm\"\ntools = [\"shell.*\"]\nwhen = 'args.command.contains(\"rm\")'\ndecision = \"deny\"\n\
         [[rules]]\nid = \"weekends\"\ntools = [\"pay.*\"]\nwhen = 'now.getDayOfWeek() == 0'\ndecision = \"deny\"\n\
         [[rules]]\nid = \"broken\"\ntools = [\"db.*\"]\nwhen = 'principal.nope == 1'\ndecision = \"deny\"\n",
    )
    .unwrap();
    let outright =
        |tool: &str, p: &serde_json::Value| airlock_policy::denies_outright(&set, tool, p);
    // By principal alone: denied to one, not the other.
    assert!(outright("deploy.web", &agent));
    assert!(!outright("deploy.web", &ops));
    // A rule with no condition denies everyone.
    assert!(outright("shell.root", &ops));
    // Rules that read args, or the time, settle nothing: the tool stays visible.
    assert!(!outright("shell.exec", &agent));
    assert!(!outright("pay.refund", &agent));
    // A deny rule on the principal that fails denies at call time too.
    assert!(outright("db.query", &agent));
    // Nothing applies: the default allows.
    assert!(!outright("echo.hi", &agent));

    // A default deny with no other rule for the tool denies it outright; an approval rule
    // for it makes it callable.
    let strict = load(
        "version = 1\n[defaults]\ndecision = \"deny\"\n\
         [[rules]]\nid = \"ask\"\ntools = [\"pay.*\"]\nwhen = 'args.amount > 10'\ndecision = \"require_approval\"\n",
    )
    .unwrap();
    assert!(airlock_policy::denies_outright(&strict, "echo.hi", &agent));
    assert!(!airlock_policy::denies_outright(
        &strict,
        "pay.refund",
        &agent
    ));
}

#[test]
fn resources_prompts_and_completions_are_judged_by_their_own_rules_and_defaults() {
    let set = load(
        "version = 1\n[defaults]\ndecision = \"deny\"\ncompletions = \"deny\"\n\
         [[rules]]\nid = \"everything\"\ndecision = \"allow\"\n\
         [[rules]]\nid = \"no-keys\"\nresources = [\"file:///home/*/.ssh/*\"]\ndecision = \"deny\"\nmessage = \"keys stay\"\n\
         [[rules]]\nid = \"gh-prompts\"\nprompts = [\"github.*\"]\nwhen = 'kind == \"prompt\" && server == \"github\" && prompt == \"github.triage\"'\ndecision = \"deny\"\n\
         [[rules]]\nid = \"odd-uri\"\nresources = [\"db://*\"]\nwhen = 'uri.endsWith(\"?x=1\") && tool == \"\" && args.uri == uri'\ndecision = \"deny\"\n",
    )
    .unwrap();
    let agent = json!({"id": "a", "role": "agent", "groups": []});
    let ctx = json!({});
    let none = BTreeMap::new();
    let decide = |kind: RequestKind, uri: Option<&str>, prompt: Option<&str>| {
        let params = match (uri, prompt) {
            (Some(u), _) => json!({"uri": u}),
            (_, Some(p)) => json!({"name": p}),
            _ => json!({}),
        };
        airlock_policy::evaluate(
            &set,
            &Input {
                tool: "",
                args: &params,
                context: &ctx,
                principal: &agent,
                fingerprint: "sha256:00",
                now: SystemTime::UNIX_EPOCH,
                classifiers: &none,
                resume: None,
                definition: None,
                request: airlock_policy::Request {
                    kind,
                    server: "github",
                    uri,
                    prompt,
                },
            },
        )
    };
    // A rule with no `tools`, `resources` or `prompts` is for tool calls only, as before: a
    // resource no rule names falls to `[defaults] resources` (allow unless written).
    let d = decide(RequestKind::Resource, Some("file:///tmp/a"), None);
    assert_eq!(
        (d.decision, d.rules.len()),
        (DecisionKind::Allow, 0),
        "{d:?}"
    );
    let d = decide(
        RequestKind::Resource,
        Some("file:///home/ann/.ssh/id_ed25519"),
        None,
    );
    assert_eq!(d.decision, DecisionKind::Deny);
    assert_eq!(d.messages[0].message, "keys stay");
    // `kind`, `server`, `prompt`, `uri` and `tool` (empty) are bound.
    let d = decide(RequestKind::Prompt, None, Some("github.triage"));
    assert_eq!(
        (d.decision, d.rules.clone()),
        (DecisionKind::Deny, vec!["gh-prompts".to_owned()])
    );
    assert_eq!(
        decide(RequestKind::Prompt, None, Some("github.other")).decision,
        DecisionKind::Allow
    );
    let d = decide(RequestKind::Resource, Some("db://t?x=1"), None);
    assert_eq!(d.decision, DecisionKind::Deny, "{d:?}");
    // A completion is judged by what it completes, and by its own default.
    assert_eq!(
        decide(RequestKind::Completion, None, Some("github.x")).decision,
        DecisionKind::Deny
    );
    // `resources` rules are not for tool calls.
    let call = json!({"uri": "file:///home/ann/.ssh/id"});
    let d = airlock_policy::evaluate(
        &set,
        &Input {
            tool: "fs.read",
            args: &call,
            context: &ctx,
            principal: &agent,
            fingerprint: "sha256:00",
            now: SystemTime::UNIX_EPOCH,
            classifiers: &none,
            resume: None,
            definition: None,
            request: airlock_policy::Request::TOOL,
        },
    );
    assert_eq!(
        (d.decision, d.rules.clone()),
        (DecisionKind::Allow, vec!["everything".to_owned()])
    );

    // Such a request may be held, by a rule or by its kind's default, with the rule's
    // approval settings.
    let held = load(&format!(
        "{DEFAULTS}[[rules]]\nid = \"h\"\nresources = [\"x://*\"]\ndecision = \"require_approval\"\napprovers = [\"security\"]\n"
    ))
    .unwrap();
    let params = json!({"uri": "x://a"});
    let input = |request| Input {
        tool: "",
        args: &params,
        context: &ctx,
        principal: &agent,
        fingerprint: "sha256:00",
        now: SystemTime::UNIX_EPOCH,
        classifiers: &none,
        resume: None,
        definition: None,
        request,
    };
    let x = airlock_policy::Request {
        kind: RequestKind::Resource,
        server: "s",
        uri: Some("x://a"),
        prompt: None,
    };
    let d = airlock_policy::evaluate(&held, &input(x));
    assert_eq!(d.decision, DecisionKind::RequireApproval, "{d:?}");
    assert_eq!(
        d.approval
            .map(|a| a.approvers.into_iter().collect::<Vec<_>>()),
        Some(vec!["security".to_owned()])
    );
    let by_default =
        load("version = 1\n[defaults]\ndecision = \"deny\"\nprompts = \"require_approval\"\n")
            .unwrap();
    let p = airlock_policy::Request {
        kind: RequestKind::Prompt,
        server: "s",
        uri: None,
        prompt: Some("p"),
    };
    assert_eq!(
        airlock_policy::evaluate(&by_default, &input(p)).decision,
        DecisionKind::RequireApproval
    );
    for (text, code) in [
        (
            "[[rules]]\nid = \"h\"\nprompts = []\ndecision = \"deny\"\n",
            "policy.invalid_glob",
        ),
        (
            "[[rules]]\nid = \"h\"\nresources = [\"a b\"]\ndecision = \"deny\"\n",
            "policy.invalid_glob",
        ),
    ] {
        let e = load(&format!("{DEFAULTS}{text}")).err().unwrap();
        assert_eq!(e.0[0].code, code, "{text}: {e}");
    }
}
