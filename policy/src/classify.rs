//! The builtin classifier: a fast local look at a call's args for what makes a call risky.
//!
//! It takes args (JSON) and gives a [`ClassifierResult`]: a score in 0..1, labels, and a detail
//! naming each match's label, rule and JSON pointer. Labels:
//! - `destructive`: `rm -rf`, `mkfs`, `dd` to devices, `DROP`/`TRUNCATE`, `DELETE`/`UPDATE`
//!   without `WHERE`, force pushes, `kubectl delete`, `terraform destroy`, ...;
//! - `secret`: cloud access keys, private key blocks, common API token formats, JWTs;
//! - `pii`: e-mail addresses, payment card numbers that pass Luhn, IBANs that pass mod 97;
//! - `exfiltration`: URLs whose host is outside the allowlist, `curl … | sh`, raw `nc`/`scp`;
//! - `privilege`: `sudo`, `chmod 777` and setuid, `chown root`, IAM policy changes.
//!
//! Command-like rules see a normalized copy of each string (lower case, quotes and backslashes
//! removed, `$IFS` and runs of white space folded to one space), so `R""m  -R -F`, `'rm' -rf`
//! and `r\m -fr` all read `rm -rf`. Secret and PII rules see the original text, since case is
//! part of those formats. Pure: no I/O, no clock.

use std::sync::LazyLock;

use regex::{Regex, RegexSet};
use serde_json::{json, Value};

use crate::model::ClassifierResult;

/// How much each label weighs; the score is the largest weight among the labels found.
const WEIGHTS: [(&str, f64); 5] = [
    ("secret", 0.95),
    ("destructive", 0.9),
    ("privilege", 0.8),
    ("exfiltration", 0.75),
    ("pii", 0.6),
];

/// Rules over normalized text: (label, rule, pattern).
const NORMALIZED_RULES: &[(&str, &str, &str)] = &[
    ("destructive", "mkfs", r"\bmkfs(\.[a-z0-9]+)?\b"),
    ("destructive", "dd-to-device", r"\bdd\b[^;|&]*\bof=/dev/"),
    ("destructive", "shred", r"\b(shred|wipefs)\b"),
    ("destructive", "rm-no-preserve-root", r"--no-preserve-root"),
    (
        "destructive",
        "sql-drop",
        r"\bdrop\s+(table|database|schema|index|view)\b",
    ),
    (
        "destructive",
        "sql-truncate",
        r"(^|;|\bthen\b)\s*truncate\s+(table\s+)?[a-z_]",
    ),
    (
        "destructive",
        "git-force-push",
        r"\bgit\s+push\b[^;|&]*(\s--force(-with-lease)?\b|\s-[a-z]*f[a-z]*\b|\s\+[a-z0-9_./-]+)",
    ),
    (
        "destructive",
        "kubectl-delete",
        r"\bkubectl\b[^;|&]*\s(delete|drain)\b",
    ),
    (
        "destructive",
        "helm-uninstall",
        r"\bhelm\s+(delete|uninstall)\b",
    ),
    (
        "destructive",
        "terraform-destroy",
        r"\bterraform\s+(destroy|apply\s+-destroy)\b",
    ),
    (
        "destructive",
        "cloud-delete",
        r"\b(aws\s+s3\s+rb|aws\s+s3\s+rm\s[^;|&]*--recursive|gcloud\s[^;|&]*\sdelete|az\s[^;|&]*\sdelete)\b",
    ),
    (
        "exfiltration",
        "pipe-to-shell",
        r"\b(curl|wget|fetch)\b[^;&]*\|\s*(sudo\s+)?(ba|z|da|k|fi)?sh\b",
    ),
    (
        "exfiltration",
        "pipe-to-interpreter",
        r"\b(curl|wget)\b[^;&]*\|\s*(sudo\s+)?(python3?|perl|ruby|node)\b",
    ),
    (
        "exfiltration",
        "shell-from-download",
        r"\b(ba|z)?sh\s+(-c\s+)?<\(\s*(curl|wget)\b",
    ),
    (
        "exfiltration",
        "netcat",
        r"\b(nc|ncat|netcat)\s+(-[a-z]+\s+)*[a-z0-9.-]+\s+\d{1,5}\b",
    ),
    (
        "exfiltration",
        "scp-remote",
        r"\bscp\b[^;|&]*\s[a-z0-9_.-]+@[a-z0-9.-]+:",
    ),
    ("privilege", "sudo", r"(^|[\s;&|(`])(sudo|doas)\b"),
    (
        "privilege",
        "su-root",
        r"(^|[\s;&|(])su\s+(-\s*$|-\s|root\b|-c\b|-l\b)",
    ),
    (
        "privilege",
        "chmod-wide",
        r"\bchmod\s+(-[a-z]+\s+)*(0?777|a\+rwx|ugo\+rwx|[ugoa]*\+[rwx]*s[rwx]*|[0-7]?[2467][0-7]{3})\b",
    ),
    ("privilege", "chown-root", r"\bchown\s+(-[a-z]+\s+)*root\b"),
    (
        "privilege",
        "capabilities",
        r"\bsetcap\b|/etc/sudoers\b|\bvisudo\b",
    ),
    (
        "privilege",
        "group-escalation",
        r"\busermod\s[^;|&]*-a?g\s*(sudo|wheel|admin|root|docker)\b",
    ),
    (
        "privilege",
        "iam-policy-change",
        r"\b(attach|put|create|update)[-_](user|role|group)?[-_]?policy\b|\badd-iam-policy-binding\b|\bset-iam-policy\b",
    ),
    (
        "privilege",
        "iam-admin",
        r"administratoraccess|roles/owner|\baction:\s*\*(\s|,|\}|$)|\biam:\*",
    ),
];

/// Rules over the original text.
const RAW_RULES: &[(&str, &str, &str)] = &[
    (
        "secret",
        "aws-access-key",
        r"\b(AKIA|ASIA|AGPA|AIDA|AROA)[0-9A-Z]{16}\b",
    ),
    (
        "secret",
        "aws-secret-key",
        r"(?i)aws_secret_access_key\s*[=:]\s*['\x22]?[A-Za-z0-9/+=]{40}",
    ),
    (
        "secret",
        "private-key",
        r"-----BEGIN ([A-Z]+ )*PRIVATE KEY( BLOCK)?-----",
    ),
    (
        "secret",
        "github-token",
        r"\b(gh[pousr]_[A-Za-z0-9]{36,}|github_pat_[A-Za-z0-9_]{22,})\b",
    ),
    ("secret", "slack-token", r"\bxox[abposr]-[A-Za-z0-9-]{10,}"),
    (
        "secret",
        "stripe-key",
        r"\b[rs]k_(live|test)_[A-Za-z0-9]{16,}\b",
    ),
    ("secret", "google-api-key", r"\bAIza[0-9A-Za-z_-]{35}\b"),
    ("secret", "openai-key", r"\bsk-(proj-)?[A-Za-z0-9_-]{32,}\b"),
    (
        "secret",
        "jwt",
        r"\beyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}",
    ),
    (
        "secret",
        "credential-assignment",
        r"(?i)\b(password|passwd|api[_-]?key|secret[_-]?key|access[_-]?token|client[_-]?secret)\s*[:=]\s*['\x22]?[^\s'\x22,;]{8,}",
    ),
    (
        "pii",
        "email",
        r"\b[A-Za-z0-9._%+-]+@[A-Za-z0-9-]+(\.[A-Za-z0-9-]+)*\.[A-Za-z]{2,}\b",
    ),
];

struct Compiled {
    normalized: RegexSet,
    raw: RegexSet,
    card: Regex,
    iban: Regex,
    url: Regex,
    separators: Regex,
}

static COMPILED: LazyLock<Option<Compiled>> = LazyLock::new(|| {
    Some(Compiled {
        normalized: RegexSet::new(NORMALIZED_RULES.iter().map(|r| r.2)).ok()?,
        raw: RegexSet::new(RAW_RULES.iter().map(|r| r.2)).ok()?,
        card: Regex::new(r"\b\d(?:[ -]?\d){12,18}\b").ok()?,
        iban: Regex::new(r"\b[A-Z]{2}\d{2}(?: ?[A-Z0-9]{4}){2,7}(?: ?[A-Z0-9]{1,4})?\b").ok()?,
        url: Regex::new(r"\b(?:https?|ftp|wss?)://(?:[^/\s@]+@)?([a-z0-9.-]+)").ok()?,
        separators: Regex::new(r"\s*(?:;|&&|\|\||\||&|\n)\s*").ok()?,
    })
});

/// The builtin classifier, with its host allowlist for `exfiltration`.
#[derive(Debug, Clone, Default)]
pub struct BuiltinClassifier {
    /// Hosts URLs may point at: `example.com` allows it exactly, `.example.com` any subdomain.
    allow_hosts: Vec<String>,
}

/// One match, for the detail map.
struct Hit {
    label: &'static str,
    rule: &'static str,
    pointer: String,
}

/// Matches named in `detail` at most: every label found is still reported, but an agent that
/// repeats a risky word a hundred thousand times does not get a detail, and a copy of its
/// path, for each one.
pub const MAX_MATCHES: usize = 64;

/// The longest JSON pointer a match names; a longer one is cut, with `…`.
const MAX_POINTER: usize = 512;

/// What the walk has found so far: every label, and the first [`MAX_MATCHES`] matches.
#[derive(Default)]
struct Hits {
    labels: Vec<&'static str>,
    first: Vec<Hit>,
}

impl Hits {
    fn add(&mut self, label: &'static str, rule: &'static str, pointer: &str) {
        if !self.labels.contains(&label) {
            self.labels.push(label);
        }
        if self.first.len() < MAX_MATCHES {
            let cut = pointer.len() > MAX_POINTER;
            let mut end = pointer.len().min(MAX_POINTER);
            while !pointer.is_char_boundary(end) {
                end -= 1;
            }
            let mut pointer = pointer[..end].to_owned();
            if cut {
                pointer.push('…');
            }
            self.first.push(Hit {
                label,
                rule,
                pointer,
            });
        }
    }
}

impl BuiltinClassifier {
    pub fn new(allow_hosts: Vec<String>) -> BuiltinClassifier {
        BuiltinClassifier {
            allow_hosts: allow_hosts
                .into_iter()
                .map(|h| h.to_ascii_lowercase())
                .collect(),
        }
    }

    /// Classifies every string in `args`.
    pub fn classify(&self, args: &Value) -> ClassifierResult {
        let mut hits = Hits::default();
        if let Some(c) = COMPILED.as_ref() {
            let mut pointer = String::new();
            self.walk(c, args, &mut pointer, &mut hits);
        }
        let mut labels: Vec<String> = hits.labels.iter().map(|l| (*l).to_owned()).collect();
        labels.sort();
        let score = WEIGHTS
            .iter()
            .filter(|(l, _)| labels.iter().any(|x| x == l))
            .map(|(_, w)| *w)
            .fold(0.0, f64::max);
        let matches: Vec<Value> = hits
            .first
            .iter()
            .map(|h| json!({"label": h.label, "rule": h.rule, "pointer": h.pointer}))
            .collect();
        ClassifierResult {
            score,
            labels,
            detail: json!({ "matches": matches }),
        }
    }

    fn walk(&self, c: &Compiled, v: &Value, pointer: &mut String, hits: &mut Hits) {
        match v {
            Value::String(s) => self.scan(c, s, pointer, hits),
            Value::Array(items) => {
                for (i, item) in items.iter().enumerate() {
                    let len = pointer.len();
                    pointer.push('/');
                    pointer.push_str(&i.to_string());
                    self.walk(c, item, pointer, hits);
                    pointer.truncate(len);
                }
            }
            Value::Object(map) => {
                for (k, item) in map {
                    let len = pointer.len();
                    pointer.push('/');
                    pointer.push_str(&k.replace('~', "~0").replace('/', "~1"));
                    self.walk(c, item, pointer, hits);
                    pointer.truncate(len);
                }
            }
            _ => {}
        }
    }

    fn scan(&self, c: &Compiled, text: &str, pointer: &str, hits: &mut Hits) {
        let mut hit = |label: &'static str, rule: &'static str| hits.add(label, rule, pointer);
        let n = normalize(text);
        for i in c.normalized.matches(&n).iter() {
            hit(NORMALIZED_RULES[i].0, NORMALIZED_RULES[i].1);
        }
        for i in c.raw.matches(text).iter() {
            hit(RAW_RULES[i].0, RAW_RULES[i].1);
        }
        for command in c.separators.split(&n) {
            if is_rm_recursive_force(command) {
                hit("destructive", "rm-recursive-force");
            }
        }
        for statement in n.split(';') {
            if unscoped_write(statement) {
                hit("destructive", "sql-write-without-where");
            }
        }
        if c.card.find_iter(text).any(|m| luhn(m.as_str())) {
            hit("pii", "payment-card");
        }
        if c.iban
            .find_iter(&text.to_ascii_uppercase())
            .any(|m| iban_valid(m.as_str()))
        {
            hit("pii", "iban");
        }
        let lower = text.to_ascii_lowercase();
        if c.url
            .captures_iter(&lower)
            .any(|cap| cap.get(1).is_some_and(|h| !self.allowed(h.as_str())))
        {
            hit("exfiltration", "url-outside-allowlist");
        }
    }

    fn allowed(&self, host: &str) -> bool {
        let host = host.trim_end_matches('.');
        self.allow_hosts.iter().any(|a| match a.strip_prefix('.') {
            Some(suffix) => host == suffix || host.ends_with(&format!(".{suffix}")),
            None => host == a,
        })
    }
}

/// Lower case; quotes and backslashes removed; `$IFS` and white space folded to one space.
fn normalize(text: &str) -> String {
    let lower = text
        .to_lowercase()
        .replace("${ifs}", " ")
        .replace("$ifs", " ");
    let mut out = String::with_capacity(lower.len());
    let mut space = false;
    for ch in lower.chars() {
        match ch {
            '\'' | '"' | '`' | '\\' => {}
            c if c.is_whitespace() => space = true,
            c => {
                if space && !out.is_empty() {
                    out.push(' ');
                }
                space = false;
                out.push(c);
            }
        }
    }
    out
}

/// `rm` with both a recursive and a force flag, in any spelling or order.
fn is_rm_recursive_force(command: &str) -> bool {
    let mut tokens = command.split(' ');
    let Some(at) = tokens.position(|t| t == "rm" || t.ends_with("/rm")) else {
        return false;
    };
    let (mut recursive, mut force) = (false, false);
    for t in command.split(' ').skip(at + 1) {
        if t == "--recursive" {
            recursive = true;
        } else if t == "--force" {
            force = true;
        } else if let Some(flags) = t.strip_prefix('-').filter(|f| !f.starts_with('-')) {
            recursive |= flags.contains('r');
            force |= flags.contains('f');
        }
    }
    recursive && force
}

static DELETE_FROM: LazyLock<Option<Regex>> =
    LazyLock::new(|| Regex::new(r"\bdelete\s+from\s+[a-z_][\w.]*").ok());
static UPDATE_SET: LazyLock<Option<Regex>> =
    LazyLock::new(|| Regex::new(r"\bupdate\s+[a-z_][\w.]*\s+set\b").ok());
static WHERE: LazyLock<Option<Regex>> = LazyLock::new(|| Regex::new(r"\bwhere\b").ok());

/// A `DELETE FROM` or `UPDATE … SET` statement with no `WHERE`.
fn unscoped_write(statement: &str) -> bool {
    let (Some(delete), Some(update), Some(r#where)) = (&*DELETE_FROM, &*UPDATE_SET, &*WHERE) else {
        return false;
    };
    (delete.is_match(statement) || update.is_match(statement)) && !r#where.is_match(statement)
}

/// The Luhn check over the digits of `s` (13 to 19 of them).
fn luhn(s: &str) -> bool {
    let digits: Vec<u32> = s.chars().filter_map(|c| c.to_digit(10)).collect();
    if !(13..=19).contains(&digits.len()) || digits.iter().all(|d| *d == digits[0]) {
        return false;
    }
    let sum: u32 = digits
        .iter()
        .rev()
        .enumerate()
        .map(|(i, &d)| {
            if i % 2 == 1 {
                let x = d * 2;
                if x > 9 {
                    x - 9
                } else {
                    x
                }
            } else {
                d
            }
        })
        .sum();
    sum.is_multiple_of(10)
}

/// The ISO 13616 mod-97 check.
fn iban_valid(s: &str) -> bool {
    let compact: String = s.chars().filter(|c| !c.is_whitespace()).collect();
    if !(15..=34).contains(&compact.len()) {
        return false;
    }
    let rearranged = format!("{}{}", &compact[4..], &compact[..4]);
    let mut rem: u32 = 0;
    for c in rearranged.chars() {
        let v = match c.to_digit(36) {
            Some(v) => v,
            None => return false,
        };
        for d in if v >= 10 {
            vec![v / 10, v % 10]
        } else {
            vec![v]
        } {
            rem = (rem * 10 + d) % 97;
        }
    }
    rem == 1
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trivial_spelling_does_not_hide_a_destructive_command() {
        let c = BuiltinClassifier::default();
        for cmd in [
            "rm -rf /",
            "RM  -Rf /",
            "'rm' -fr ~",
            "r\"\"m -r -f build",
            "r\\m --recursive --force x",
            "ls && /bin/rm -r\t-f .",
            "rm${IFS}-rf${IFS}/",
        ] {
            let r = c.classify(&json!({"command": cmd}));
            assert!(r.labels.contains(&"destructive".to_owned()), "{cmd}: {r:?}");
            assert_eq!(r.detail["matches"][0]["pointer"], "/command");
        }
        for cmd in [
            "rm file.txt",
            "rm -r build",
            "rm -f x",
            "echo rm -rf is bad",
        ] {
            let r = c.classify(&json!({"command": cmd}));
            let expected = cmd.starts_with("echo");
            assert_eq!(
                r.labels.contains(&"destructive".to_owned()),
                expected,
                "{cmd}"
            );
        }
    }

    #[test]
    fn checksums() {
        assert!(luhn("4111 1111 1111 1111"));
        assert!(!luhn("4111 1111 1111 1112"));
        assert!(iban_valid("DE89 3704 0044 0532 0130 00"));
        assert!(!iban_valid("DE89 3704 0044 0532 0130 01"));
    }
}
