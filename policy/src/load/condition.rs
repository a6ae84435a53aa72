//! A rule's `when`: compiled once, at load, with every name it reads checked against the
//! declared variables (and `classifier.<name>` against the classifiers the rule names) and
//! every call against the functions a rule may call; a parser complaint turned into plain
//! words at its line and column in the file.

use cel::{Env, Program};

use crate::cel::{references, References, VARIABLES};
use crate::error::PolicyError;

use super::build::{Builder, WhenAt};

impl Builder {
    /// A rule's `when`, compiled, with the names it reads checked: declared variables only,
    /// and `classifier.<name>` only for classifiers the rule names.
    pub(super) fn rule_condition(
        &mut self,
        at: &WhenAt<'_>,
        when: &str,
        env: &Env,
        classifiers: &[String],
        id: &str,
    ) -> Option<(Program, References)> {
        let path = at.ctx.path;
        if when.contains("__airlock") {
            self.errors.push(
                PolicyError::new(
                    "policy.reserved_name",
                    path,
                    "names starting with `__airlock` are reserved",
                )
                .at(at.pos(when.find("__airlock").unwrap_or(0)))
                .in_rule(id),
            );
            return None;
        }
        let program = match env.compile(when) {
            Ok(p) => p,
            Err(errs) => {
                self.compile_errors(at, when, errs, id);
                return None;
            }
        };
        let refs = references(&program);
        let offset_of = |id: u64| {
            program
                .source_info()
                .offset_for(id)
                .map(|(s, _)| s as usize)
                .unwrap_or(0)
        };
        self.check_calls(at, when, &program, id);
        for (name, expr) in &refs.unknown {
            let hint = crate::near::nearest(name, &VARIABLES)
                .map(|n| format!("did you mean `{n}`? "))
                .unwrap_or_default();
            let known: Vec<&str> = VARIABLES
                .iter()
                .map(|v| {
                    if *v == "classifier" {
                        "classifier.<name>"
                    } else {
                        v
                    }
                })
                .collect();
            let message = format!(
                "undeclared variable `{name}`; {hint}rules may use {}",
                known.join(", ")
            );
            self.errors.push(
                PolicyError::new("policy.unknown_variable", path, message)
                    .at(at.pos(offset_of(*expr)))
                    .in_rule(id),
            );
        }
        if refs.classifier_whole {
            self.errors.push(
                PolicyError::new(
                    "policy.unknown_classifier",
                    path,
                    "use `classifier.<name>`, naming a classifier the rule lists in `classifier`",
                )
                .at(at.pos(0))
                .in_rule(id),
            );
        }
        for c in &refs.classifiers {
            if !classifiers.contains(c) {
                self.errors.push(PolicyError::new("policy.unknown_classifier", path, format!("`classifier.{c}` is used but the rule does not name `{c}` in `classifier`")).at(at.pos(0)).in_rule(id));
            }
        }
        Some((program, refs))
    }

    /// What the CEL compiler refused in a `when`, each at its place: a bad regex, a pattern
    /// that is not a literal, and the parser's first complaint in plain words (its later ones
    /// follow from the first).
    fn compile_errors(&mut self, at: &WhenAt<'_>, when: &str, errs: cel::ParseErrors, id: &str) {
        let mut syntax_told = false;
        for e in errs.errors {
            let offset = expr_offset(when, e.pos.0, e.pos.1);
            let (code, message) = if e.msg.starts_with("invalid regex") {
                ("policy.invalid_regex", e.msg.clone())
            } else if e.msg.starts_with("the pattern of `matches`") {
                ("policy.dynamic_regex", e.msg.clone())
            } else if syntax_told {
                // The parser's later complaints follow from its first.
                continue;
            } else {
                syntax_told = true;
                ("policy.cel_syntax", syntax_message(&e.msg, when, offset))
            };
            self.errors.push(
                PolicyError::new(code, at.ctx.path, message)
                    .at(at.pos(offset))
                    .in_rule(id),
            );
        }
    }

    /// The calls a rule makes, checked against the functions CEL and airlock define, and its
    /// loops nested inside loops over `args` (a warning).
    fn check_calls(&mut self, at: &WhenAt<'_>, when: &str, program: &Program, id: &str) {
        let path = at.ctx.path;
        let offset_of = |id: u64| {
            program
                .source_info()
                .offset_for(id)
                .map(|(s, _)| s as usize)
                .unwrap_or(0)
        };
        for bad in crate::functions::check_calls(program.expression()) {
            // The parser places a call at its `(`: point at the name written before it.
            let mut offset = offset_of(bad.id);
            if when
                .get(..offset)
                .is_some_and(|before| before.ends_with(&bad.name))
            {
                offset -= bad.name.len();
            }
            self.errors.push(
                PolicyError::new(bad.code, path, bad.message)
                    .at(at.pos(offset))
                    .in_rule(id),
            );
        }
        for loop_id in crate::functions::nested_loops_over_args(program.expression()) {
            self.warnings.push(
                PolicyError::new(
                    "policy.nested_comprehension",
                    path,
                    "a loop inside a loop over `args` costs the square of what the agent sends; \
                     a call whose args make it exceed the evaluation budget gets `on_error`",
                )
                .at(at.pos(offset_of(loop_id)))
                .in_rule(id),
            );
        }
    }
}

/// A CEL parser complaint in plain words: what is wrong at `offset` in `expr` and, where it can
/// tell, how to write it. The parser speaks in grammar tokens (`mismatched input '<EOF>'
/// expecting {'[', '{', …}`); a policy author wants to know what to change.
fn syntax_message(raw: &str, expr: &str, offset: usize) -> String {
    let raw = raw.strip_prefix("Syntax error: ").unwrap_or(raw);
    // The token the parser quotes: `… input 'X' expecting …`, `… at: 'X'`.
    let quoted = |after: &str| {
        let rest = raw.split_once(after)?.1.strip_prefix('\'')?;
        let end = rest.find("' expecting").or_else(|| rest.rfind('\''))?;
        Some(rest[..end].trim().to_owned())
    };
    let at = expr.get(offset..).unwrap_or("");
    if raw.starts_with("token recognition error") && at.starts_with('=') && !at.starts_with("==") {
        return "`=` is not an operator in CEL: to compare, write `==`".to_owned();
    }
    if raw.contains("mismatched input '<EOF>'") {
        return "the condition ends too early: a value, a name or a closing bracket must follow"
            .to_owned();
    }
    if raw.starts_with("extraneous input") && raw.ends_with("expecting <EOF>") {
        if let Some(token) = quoted("extraneous input ") {
            return format!(
                "unexpected `{token}` after a complete condition: join conditions with `&&` or `||`"
            );
        }
    }
    if raw.starts_with("mismatched input") || raw.starts_with("extraneous input") {
        if let Some(token) = quoted("mismatched input ").or_else(|| quoted("extraneous input ")) {
            return format!(
                "unexpected `{token}` here: a value, a name or an operator was expected"
            );
        }
    }
    if raw.starts_with("token recognition error") {
        if let Some(token) = quoted("token recognition error at: ") {
            return format!("`{token}` is not valid CEL here");
        }
    }
    raw.to_owned()
}

/// The byte offset in `expr` of 1-based `(line, col)`, as the CEL parser reports positions.
fn expr_offset(expr: &str, line: isize, col: isize) -> usize {
    let line = line.max(1) as usize;
    let col = col.max(1) as usize;
    let line_start: usize = expr
        .split_inclusive('\n')
        .take(line - 1)
        .map(str::len)
        .sum();
    (line_start + col - 1).min(expr.len())
}
