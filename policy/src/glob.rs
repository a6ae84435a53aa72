//! Globs: `*` matches any run of characters (dots and slashes included), `?` exactly one.
//!
//! Used for rule `tools` pre-filters and `[tools."…"]` flag keys, and for rule `prompts`
//! (prompt names, the characters of tool names) and `resources` (URIs: any visible ASCII, and
//! `?` is a URI's own character there, not a wildcard). Matching is linear in the name and
//! allocates nothing; there is no escaping.

/// A compiled glob pattern.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Glob {
    pattern: String,
    /// Whether `?` matches any one character (tool and prompt names) or only itself (URIs).
    question_wild: bool,
}

impl Glob {
    /// Compiles `pattern`, which may hold the characters of a tool name plus `*` and `?`.
    pub fn new(pattern: &str) -> Result<Glob, String> {
        let ok = !pattern.is_empty()
            && pattern.len() <= 256
            && pattern
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"_.:/-*?".contains(&b));
        if ok {
            Ok(Glob {
                pattern: pattern.to_owned(),
                question_wild: true,
            })
        } else {
            Err(format!(
                "invalid tool pattern `{pattern}`: use the characters of tool names, `*` and `?`"
            ))
        }
    }

    /// Compiles a resource URI `pattern`: visible ASCII, where only `*` is a wildcard.
    pub fn uri(pattern: &str) -> Result<Glob, String> {
        let ok = !pattern.is_empty()
            && pattern.len() <= 1024
            && pattern.bytes().all(|b| b.is_ascii_graphic());
        if ok {
            Ok(Glob {
                pattern: pattern.to_owned(),
                question_wild: false,
            })
        } else {
            Err(format!(
                "invalid resource pattern `{pattern}`: a URI (visible ASCII, percent-encoded) with `*` for any run of characters"
            ))
        }
    }

    pub fn as_str(&self) -> &str {
        &self.pattern
    }

    /// Whether `name` matches the whole pattern.
    pub fn matches(&self, name: &str) -> bool {
        // Both sides are ASCII (tool names are validated), so bytes are characters.
        let p = self.pattern.as_bytes();
        let n = name.as_bytes();
        // Classic greedy matcher with one backtrack point for the last `*`.
        let (mut pi, mut ni) = (0usize, 0usize);
        let mut star: Option<(usize, usize)> = None;
        while ni < n.len() {
            if pi < p.len() && ((self.question_wild && p[pi] == b'?') || p[pi] == n[ni]) {
                pi += 1;
                ni += 1;
            } else if pi < p.len() && p[pi] == b'*' {
                star = Some((pi, ni));
                pi += 1;
            } else if let Some((sp, sn)) = star {
                pi = sp + 1;
                ni = sn + 1;
                star = Some((sp, sn + 1));
            } else {
                return false;
            }
        }
        while pi < p.len() && p[pi] == b'*' {
            pi += 1;
        }
        pi == p.len()
    }
}

#[cfg(test)]
mod tests {
    use super::Glob;

    #[test]
    fn globs() {
        let cases = [
            ("db.*", "db.query", true),
            ("db.*", "db.admin.drop", true),
            ("db.*", "db", false),
            ("db.*", "dbx.query", false),
            ("*", "anything.at.all", true),
            ("shell.ex?c", "shell.exec", true),
            ("shell.ex?c", "shell.exc", false),
            ("*.delete", "k8s.pods.delete", true),
            ("a*b*c", "aXbYc", true),
            ("a*b*c", "aXbY", false),
            ("payments.refund", "payments.refund", true),
            ("payments.refund", "payments.refunds", false),
        ];
        for (pattern, name, expected) in cases {
            assert_eq!(
                Glob::new(pattern).unwrap().matches(name),
                expected,
                "{pattern} ~ {name}"
            );
        }
        assert!(Glob::new("a b").is_err());
        assert!(Glob::new("").is_err());
        // In a URI, `?` is the URI's own.
        let u = Glob::uri("file:///etc/*?x=1").unwrap();
        assert!(u.matches("file:///etc/shadow?x=1"));
        assert!(!u.matches("file:///etc/shadowAx=1"));
        assert!(Glob::uri("file:///a b").is_err());
    }
}
