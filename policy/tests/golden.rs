//! The shipped policy sets: each has a README and at least 10 cases, and its cases name every
//! rule and flag of the set and every decision.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::BTreeSet;
use std::path::Path;

use airlock_policy::PolicySet;

#[test]
fn every_rule_flag_and_decision_is_covered_by_a_case() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../policies");
    for name in ["default", "shell", "database", "payments", "devops", "mcp"] {
        let dir = root.join(name);
        assert!(dir.join("README.md").is_file(), "{name} has no README");
        let set = PolicySet::load(&dir).unwrap_or_else(|e| panic!("{name}: {e}"));
        let policy: toml::Table =
            toml::from_str(&std::fs::read_to_string(dir.join("policy.toml")).unwrap()).unwrap();
        let mut wanted: BTreeSet<String> = set.rules().iter().map(|r| r.id.clone()).collect();
        for (section, flag, prefix) in [
            ("tools", "require_approval", "tool:"),
            ("agents", "require_tool_approval", "agent:"),
        ] {
            for (key, v) in policy
                .get(section)
                .and_then(|t| t.as_table())
                .into_iter()
                .flatten()
            {
                if v.get(flag).and_then(|f| f.as_bool()) == Some(true) {
                    wanted.insert(format!("{prefix}{key}"));
                }
            }
        }
        let cases: toml::Table = toml::from_str(
            &std::fs::read_to_string(dir.join(format!("{name}.cases.toml"))).unwrap(),
        )
        .unwrap();
        let cases = cases["case"].as_array().unwrap();
        assert!(cases.len() >= 10, "{name}: {} cases", cases.len());
        let mut seen = BTreeSet::new();
        let mut decisions = BTreeSet::new();
        for case in cases {
            decisions.insert(case["expect"].as_str().unwrap().to_owned());
            for r in case
                .get("expect_rules")
                .and_then(|r| r.as_array())
                .into_iter()
                .flatten()
            {
                seen.insert(r.as_str().unwrap().to_owned());
            }
        }
        let uncovered: Vec<_> = wanted.difference(&seen).collect();
        assert!(
            uncovered.is_empty(),
            "{name}: no case expects {uncovered:?}"
        );
        assert_eq!(decisions.len(), 3, "{name} covers only {decisions:?}");
    }
}
