//! What a rule may call, checked when the policy loads.
//!
//! The `cel` crate has no type checker: a call to a function it does not define compiles, and
//! fails only when a call arrives ("Undeclared reference to 'startswith'"), which turns a deny
//! rule into `on_error`. Here every call in a compiled rule is checked against [`FUNCTIONS`]:
//! the standard library and the strings extension that [`crate::cel::build_env`] installs,
//! each with how it is called (global or on a receiver) and how many arguments it takes. A
//! test runs every entry against the environment, so the table cannot name a function that
//! does not exist.
//!
//! It also finds loops nested inside loops over `args` (quadratic in what an agent sends), to
//! warn about. It does not evaluate anything.

use cel::common::ast::{EntryExpr, Expr, IdedExpr};

/// How a function is called.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Style {
    /// `f(x)`.
    Global,
    /// `x.f()`.
    Member,
}

/// `(name, style, argument counts)`, the receiver not counted. Operators (`_+_`, `@in`…)
/// come from the parser, not from names a rule writes, and are not listed.
pub(crate) const FUNCTIONS: &[(&str, Style, &[usize])] = &[
    ("bool", Style::Global, &[1]),
    ("bytes", Style::Global, &[1]),
    ("double", Style::Global, &[1]),
    ("duration", Style::Global, &[1]),
    ("dyn", Style::Global, &[1]),
    ("int", Style::Global, &[1]),
    ("matches", Style::Global, &[2]),
    ("size", Style::Global, &[1]),
    ("string", Style::Global, &[1]),
    ("timestamp", Style::Global, &[1]),
    ("type", Style::Global, &[1]),
    ("uint", Style::Global, &[1]),
    ("strings.quote", Style::Global, &[1]),
    ("charAt", Style::Member, &[1]),
    ("contains", Style::Member, &[1]),
    ("endsWith", Style::Member, &[1]),
    ("format", Style::Member, &[1]),
    ("getDate", Style::Member, &[0, 1]),
    ("getDayOfMonth", Style::Member, &[0, 1]),
    ("getDayOfWeek", Style::Member, &[0, 1]),
    ("getDayOfYear", Style::Member, &[0, 1]),
    ("getFullYear", Style::Member, &[0, 1]),
    ("getHours", Style::Member, &[0, 1]),
    ("getMilliseconds", Style::Member, &[0, 1]),
    ("getMinutes", Style::Member, &[0, 1]),
    ("getMonth", Style::Member, &[0, 1]),
    ("getSeconds", Style::Member, &[0, 1]),
    ("indexOf", Style::Member, &[1, 2]),
    ("join", Style::Member, &[0, 1]),
    ("lastIndexOf", Style::Member, &[1, 2]),
    ("lowerAscii", Style::Member, &[0]),
    ("matches", Style::Member, &[1]),
    ("replace", Style::Member, &[2, 3]),
    ("size", Style::Member, &[0]),
    ("split", Style::Member, &[1, 2]),
    ("startsWith", Style::Member, &[1]),
    ("substring", Style::Member, &[1, 2]),
    ("trim", Style::Member, &[0]),
    ("upperAscii", Style::Member, &[0]),
];

/// The macros a rule may write, with their argument counts (receiver not counted).
const MACROS: &[(&str, Style, &[usize])] = &[
    ("has", Style::Global, &[1]),
    ("all", Style::Member, &[2]),
    ("exists", Style::Member, &[2]),
    ("exists_one", Style::Member, &[2]),
    ("map", Style::Member, &[2, 3]),
    ("filter", Style::Member, &[2]),
];

/// A call a rule may not make.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct BadCall {
    /// `policy.unknown_function` or `policy.wrong_arity`.
    pub code: &'static str,
    pub message: String,
    /// The expression id of the call, for its place.
    pub id: u64,
    /// The function's name as written, to point at it rather than at its `(`.
    pub name: String,
}

/// Every call in `expr` that names no function, or passes the wrong number of arguments.
pub(crate) fn check_calls(expr: &IdedExpr) -> Vec<BadCall> {
    let mut bad = Vec::new();
    visit(expr, &mut |e| {
        let Expr::Call(call) = &e.expr else { return };
        let name = call.func_name.as_str();
        if name.starts_with('_') || name.starts_with('@') || name == "!_" || name == "-_" {
            return; // an operator, spelled by the parser
        }
        // `a.b.f(x)` may spell the qualified global `b.f`… only `strings.quote` is one here.
        let (name, style) = match &call.target {
            Some(t) if matches!(&t.expr, Expr::Ident(ns) if ns == "strings") && name == "quote" => {
                ("strings.quote", Style::Global)
            }
            Some(_) => (name, Style::Member),
            None => (name, Style::Global),
        };
        if let Some(problem) = check_one(name, style, call.args.len()) {
            bad.push(BadCall {
                code: problem.0,
                message: problem.1,
                id: e.id,
                name: call.func_name.clone(),
            });
        }
    });
    bad
}

fn check_one(name: &str, style: Style, argc: usize) -> Option<(&'static str, String)> {
    let shown = |style: Style, n: &str| match style {
        Style::Global => format!("`{n}()`"),
        Style::Member => format!("`.{n}()`"),
    };
    let same_name: Vec<&(&str, Style, &[usize])> = FUNCTIONS
        .iter()
        .chain(MACROS)
        .filter(|(n, _, _)| *n == name)
        .collect();
    if let Some((_, _, counts)) = same_name.iter().find(|(_, s, _)| *s == style) {
        if counts.contains(&argc) {
            return None;
        }
        let wanted: Vec<String> = counts.iter().map(usize::to_string).collect();
        return Some((
            "policy.wrong_arity",
            format!(
                "{} takes {} argument(s), not {argc}",
                shown(style, name),
                wanted.join(" or ")
            ),
        ));
    }
    if let Some((_, other, _)) = same_name.first() {
        return Some((
            "policy.unknown_function",
            format!(
                "{} is not defined; it is called as {}",
                shown(style, name),
                shown(*other, name)
            ),
        ));
    }
    let names: Vec<&str> = FUNCTIONS
        .iter()
        .chain(MACROS)
        .filter(|(_, s, _)| *s == style)
        .map(|(n, _, _)| *n)
        .collect();
    let hint = crate::near::nearest(name, &names)
        .map(|n| format!("; did you mean {}?", shown(style, n)))
        .unwrap_or_default();
    Some((
        "policy.unknown_function",
        format!(
            "{} is not a function CEL or airlock define{hint}",
            shown(style, name)
        ),
    ))
}

/// The comprehensions whose body holds another comprehension while their own range reads
/// `args`: their cost grows with the square of what an agent sends. Returns their ids.
pub(crate) fn nested_loops_over_args(expr: &IdedExpr) -> Vec<u64> {
    let mut found = Vec::new();
    visit(expr, &mut |e| {
        let Expr::Comprehension(c) = &e.expr else {
            return;
        };
        if !mentions(&c.iter_range, "args") {
            return;
        }
        let mut inner = false;
        for body in [&c.loop_cond, &c.loop_step] {
            visit(body, &mut |b| {
                inner |= matches!(b.expr, Expr::Comprehension(_))
            });
        }
        if inner {
            found.push(e.id);
        }
    });
    found
}

fn mentions(expr: &IdedExpr, name: &str) -> bool {
    let mut seen = false;
    visit(expr, &mut |e| {
        seen |= matches!(&e.expr, Expr::Ident(n) if n == name)
    });
    seen
}

/// Calls `f` on `e` and every expression inside it.
pub(crate) fn visit(e: &IdedExpr, f: &mut dyn FnMut(&IdedExpr)) {
    f(e);
    match &e.expr {
        Expr::Call(c) => {
            if let Some(t) = &c.target {
                visit(t, f);
            }
            c.args.iter().for_each(|a| visit(a, f));
        }
        Expr::Select(s) => visit(&s.operand, f),
        Expr::List(l) => l.elements.iter().for_each(|x| visit(x, f)),
        Expr::Map(m) => {
            for entry in &m.entries {
                if let EntryExpr::MapEntry(me) = &entry.expr {
                    visit(&me.key, f);
                    visit(&me.value, f);
                }
            }
        }
        Expr::Struct(s) => {
            for entry in &s.entries {
                if let EntryExpr::StructField(sf) = &entry.expr {
                    visit(&sf.value, f);
                }
            }
        }
        Expr::Comprehension(c) => {
            for x in [
                &c.iter_range,
                &c.accu_init,
                &c.loop_cond,
                &c.loop_step,
                &c.result,
            ] {
                visit(x, f);
            }
        }
        Expr::Ident(_) | Expr::Literal(_) | Expr::Unspecified => {}
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use cel::{Context, ExecutionError};

    use super::*;

    /// Every listed function exists in the environment rules run in, called as listed: a
    /// call with placeholder arguments fails, if at all, for its argument types, never as an
    /// undeclared reference.
    #[test]
    fn every_listed_function_exists_as_listed() {
        let env = Arc::new(crate::cel::build_env(false).unwrap());
        for (name, style, counts) in FUNCTIONS {
            for argc in *counts {
                let args = vec!["1"; *argc].join(", ");
                let src = match style {
                    Style::Global => format!("{name}({args})"),
                    Style::Member => format!("'x'.{name}({args})"),
                };
                let program = env.compile(&src).unwrap();
                let ctx = Context::with_env(env.clone());
                if let Err(ExecutionError::UndeclaredReference(r)) = program.execute(&ctx) {
                    panic!("`{src}`: undeclared `{r}`");
                }
            }
        }
    }

    #[test]
    fn a_misspelt_function_is_named_with_the_one_meant() {
        let env = crate::cel::build_env(true).unwrap();
        let program = env.compile("args.command.startswith('rm -rf')").unwrap();
        let bad = check_calls(program.expression());
        assert_eq!(bad.len(), 1);
        assert_eq!(bad[0].code, "policy.unknown_function");
        assert!(
            bad[0].message.contains("did you mean `.startsWith()`"),
            "{}",
            bad[0].message
        );
    }
}
