//! The builtin classifier against its corpus: precision and recall per label, which must be at
//! least 0.95 each. The corpus has positive and negative examples for every label, near misses
//! included; its URL examples assume the allowlist `github.com`, `.example.com`, `.internal.corp`.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::BTreeMap;

use airlock_policy::BuiltinClassifier;
use serde_json::Value;

const LABELS: [&str; 5] = ["destructive", "secret", "pii", "exfiltration", "privilege"];

#[test]
fn precision_and_recall_per_label_on_the_corpus() {
    let text = include_str!("classifier_corpus.jsonl");
    let classifier = BuiltinClassifier::new(vec![
        "github.com".into(),
        ".example.com".into(),
        ".internal.corp".into(),
    ]);
    let mut counts: BTreeMap<&str, (u32, u32, u32)> = BTreeMap::new(); // (tp, fp, fn)
    let mut mistakes = Vec::new();
    let mut positives: BTreeMap<&str, u32> = BTreeMap::new();
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let example: Value = serde_json::from_str(line).unwrap();
        let expected: Vec<&str> = example["labels"]
            .as_array()
            .unwrap()
            .iter()
            .map(|l| l.as_str().unwrap())
            .collect();
        let got = classifier.classify(&example["args"]);
        for label in LABELS {
            let (want, have) = (
                expected.contains(&label),
                got.labels.iter().any(|l| l == label),
            );
            let c = counts.entry(label).or_default();
            match (want, have) {
                (true, true) => c.0 += 1,
                (false, true) => c.1 += 1,
                (true, false) => c.2 += 1,
                (false, false) => {}
            }
            if want {
                *positives.entry(label).or_default() += 1;
            }
            if want != have {
                mistakes.push(format!(
                    "{label}: expected {want}, got {have} for {}",
                    example["args"]
                ));
            }
        }
        if !expected.is_empty() {
            assert!(got.score > 0.0);
        }
    }
    let mut report = String::new();
    let mut failing = false;
    for label in LABELS {
        let (tp, fp, fneg) = counts[label];
        let precision = f64::from(tp) / f64::from((tp + fp).max(1));
        let recall = f64::from(tp) / f64::from((tp + fneg).max(1));
        report.push_str(&format!("{label:<13} precision {precision:.3} recall {recall:.3} (tp {tp}, fp {fp}, fn {fneg})\n"));
        failing |= precision < 0.95 || recall < 0.95;
        assert!(
            positives[label] >= 8,
            "{label} needs more positive examples"
        );
    }
    println!("{report}");
    assert!(!failing, "{report}\n{}", mistakes.join("\n"));
}
