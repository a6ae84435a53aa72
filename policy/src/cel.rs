//! The CEL side of policy: the environment rules compile in, load-time checks, and binding
//! JSON to CEL values without copying strings.
//!
//! Three things here keep evaluation fast and predictable:
//! - `s.matches('re')` and `matches(s, 're')` are rewritten at compile time into a call that
//!   looks up a regex compiled once, when the policy loaded. A pattern that is not a string
//!   literal, or not a valid regex, is a load error: no regex is ever compiled per call.
//! - Free variables are checked against the declared ones at load time, with comprehension
//!   variables in scope, so a typo fails `airlock policy check`, not a production call.
//! - JSON values are bound as CEL values that borrow their strings from the request.
//!
//! It does not decide anything: [`crate::eval`] runs the programs compiled here.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, LazyLock, RwLock};

use cel::common::ast::{CallExpr, EntryExpr, Expr, IdedExpr, LiteralValue};
use cel::common::types::{
    self, CelBool, CelDouble, CelInt, CelList, CelMap, CelMapKey, CelNull, CelString, CelUInt,
};
use cel::common::value::{CowVal, Val};
use cel::parser::Macro;
use cel::{Env, ExecutionError, Program};
use serde_json::Value;

/// The variables a rule may use (DESIGN §4).
pub(crate) const VARIABLES: [&str; 13] = [
    "tool",
    "args",
    "context",
    "principal",
    "fingerprint",
    "now",
    "classifier",
    "resume",
    "definition",
    "kind",
    "server",
    "uri",
    "prompt",
];

/// The internal function `matches` is rewritten into.
const REGEX_FN: &str = "__airlock_matches";

/// Regexes compiled at load time, shared by every policy set this process loads.
///
/// INVARIANT: entries are only appended, never removed or reordered, so an index handed to a
/// compiled program stays valid for the life of the process. Patterns are deduplicated, so the
/// table grows only with distinct patterns, not with reloads.
struct RegexTable {
    regexes: Vec<regex::Regex>,
    index: HashMap<String, usize>,
}

static REGEXES: LazyLock<RwLock<RegexTable>> = LazyLock::new(|| {
    RwLock::new(RegexTable {
        regexes: Vec::new(),
        index: HashMap::new(),
    })
});

/// Compiles `pattern` once and returns its index in the table.
fn register_regex(pattern: &str) -> Result<usize, String> {
    if let Ok(table) = REGEXES.read() {
        if let Some(&i) = table.index.get(pattern) {
            return Ok(i);
        }
    }
    let compiled = regex::RegexBuilder::new(pattern)
        .size_limit(1 << 20)
        .build()
        .map_err(|e| format!("invalid regex `{pattern}`: {e}"))?;
    let mut table = REGEXES
        .write()
        .map_err(|_| "regex table is poisoned".to_owned())?;
    if let Some(&i) = table.index.get(pattern) {
        return Ok(i);
    }
    table.regexes.push(compiled);
    let i = table.regexes.len() - 1;
    table.index.insert(pattern.to_owned(), i);
    Ok(i)
}

/// `__airlock_matches(string, int)`: the regex at that index matches the string.
fn regex_matches<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let text = args
        .first()
        .and_then(|a| a.downcast_ref::<CelString>())
        .ok_or_else(|| ExecutionError::function_error("matches", "receiver must be a string"))?;
    let index = args
        .get(1)
        .and_then(|a| a.downcast_ref::<CelInt>())
        .map(|i| *i.inner())
        .ok_or_else(|| ExecutionError::function_error("matches", "bad regex index"))?;
    let table = REGEXES
        .read()
        .map_err(|_| ExecutionError::function_error("matches", "regex table is poisoned"))?;
    let re = usize::try_from(index)
        .ok()
        .and_then(|i| table.regexes.get(i))
        .ok_or_else(|| ExecutionError::function_error("matches", "unknown regex index"))?;
    crate::budget::charge_bytes(text.inner().len())?;
    Ok(CowVal::owned(CelBool::from(re.is_match(text.inner()))))
}

/// Rewrites `target.matches(lit)` / `matches(target, lit)` into `__airlock_matches(target, i)`.
fn expand_matches(
    helper: &mut cel::parser::MacroExprHelper<'_>,
    target: Option<IdedExpr>,
    pattern: &IdedExpr,
) -> Result<Option<IdedExpr>, cel::ParseError> {
    let Expr::Literal(LiteralValue::String(p)) = &pattern.expr else {
        return Err(helper.new_error(
            pattern.id,
            "the pattern of `matches` must be a string literal, so it compiles once at load",
        ));
    };
    let index = register_regex(p.inner()).map_err(|e| helper.new_error(pattern.id, e))?;
    let Some(target) = target else {
        return Err(helper.new_error(pattern.id, "`matches` needs a string to match"));
    };
    let index_expr = helper.next_expr(Expr::Literal(LiteralValue::Int(CelInt::from(index as i64))));
    Ok(Some(helper.next_expr(Expr::Call(CallExpr {
        func_name: REGEX_FN.to_owned(),
        target: None,
        args: vec![target, index_expr],
    }))))
}

/// The environment every rule compiles in: the standard library, the strings extension, and
/// the regex rewrite. With `cached_regex = false` it is the stock environment, which the
/// benches use as the naive baseline.
pub fn build_env(cached_regex: bool) -> Result<Env, String> {
    let mut env = Env::stdlib();
    env.add_extension(cel::extensions::strings)
        .map_err(|e| e.to_string())?;
    crate::budget::add_to(&mut env)?;
    if cached_regex {
        env.add_macro(Macro::receiver("matches", 1, |helper, target, args| {
            let pattern = args.pop().unwrap_or_default();
            expand_matches(helper, target.take(), &pattern)
        }))
        .map_err(|e| e.to_string())?;
        env.add_macro(Macro::global("matches", 2, |helper, _target, args| {
            let pattern = args.pop().unwrap_or_default();
            let text = args.pop();
            expand_matches(helper, text, &pattern)
        }))
        .map_err(|e| e.to_string())?;
        env.add_overload(
            REGEX_FN,
            "airlock_matches_string_int",
            vec![types::STRING_TYPE, types::INT_TYPE],
            regex_matches,
        )
        .map_err(|e| e.to_string())?;
    }
    Ok(env)
}

/// What a compiled `when` refers to, found by walking its AST.
#[derive(Debug, Default)]
pub(crate) struct References {
    /// Declared variables it uses, as a bitmask over [`VARIABLES`].
    pub uses: u16,
    /// Free identifiers that are not declared: `(name, expression id)`.
    pub unknown: Vec<(String, u64)>,
    /// Names in `classifier.<name>`.
    pub classifiers: BTreeSet<String>,
    /// `classifier` used other than as `classifier.<name>`.
    pub classifier_whole: bool,
    /// Top-level fields read as `args.<field>` or `has(args.<field>)`.
    pub args_fields: BTreeSet<String>,
    /// `args` used other than through a field (iterated, sized, indexed): bind it whole.
    pub args_whole: bool,
}

pub(crate) fn references(program: &Program) -> References {
    let mut refs = References::default();
    let mut scope = Vec::new();
    walk(program.expression(), &mut scope, &mut refs);
    refs
}

fn walk(e: &IdedExpr, scope: &mut Vec<String>, refs: &mut References) {
    match &e.expr {
        Expr::Ident(name) => {
            if !scope.iter().any(|s| s == name) {
                match name.as_str() {
                    "classifier" => refs.classifier_whole = true,
                    "args" => refs.args_whole = true,
                    _ => {}
                }
            }
            ident(name, e.id, scope, refs)
        }
        Expr::Select(select) => {
            if let Expr::Ident(root) = &select.operand.expr {
                if !scope.iter().any(|s| s == root) {
                    let field = select.field.clone();
                    match root.as_str() {
                        "classifier" => refs.classifiers.insert(field),
                        "args" => refs.args_fields.insert(field),
                        _ => false,
                    };
                    if root == "classifier" || root == "args" {
                        ident(root, select.operand.id, scope, refs);
                        return;
                    }
                }
            }
            walk(&select.operand, scope, refs);
        }
        Expr::Call(CallExpr { target, args, .. }) => {
            if let Some(t) = target {
                walk(t, scope, refs);
            }
            for a in args {
                walk(a, scope, refs);
            }
        }
        Expr::List(list) => list.elements.iter().for_each(|x| walk(x, scope, refs)),
        Expr::Map(map) => {
            for entry in &map.entries {
                if let EntryExpr::MapEntry(m) = &entry.expr {
                    walk(&m.key, scope, refs);
                    walk(&m.value, scope, refs);
                }
            }
        }
        Expr::Struct(s) => {
            for entry in &s.entries {
                if let EntryExpr::StructField(f) = &entry.expr {
                    walk(&f.value, scope, refs);
                }
            }
        }
        Expr::Comprehension(c) => {
            walk(&c.iter_range, scope, refs);
            walk(&c.accu_init, scope, refs);
            let depth = scope.len();
            scope.push(c.iter_var.clone());
            if let Some(v2) = &c.iter_var2 {
                scope.push(v2.clone());
            }
            scope.push(c.accu_var.clone());
            walk(&c.loop_cond, scope, refs);
            walk(&c.loop_step, scope, refs);
            walk(&c.result, scope, refs);
            scope.truncate(depth);
        }
        Expr::Literal(_) | Expr::Unspecified => {}
    }
}

fn ident(name: &str, id: u64, scope: &[String], refs: &mut References) {
    if scope.iter().any(|s| s == name) {
        return;
    }
    match VARIABLES.iter().position(|v| *v == name) {
        Some(i) => refs.uses |= 1 << i,
        None => refs.unknown.push((name.to_owned(), id)),
    }
}

/// Binds a JSON value as a CEL value, borrowing every string from `value`.
pub(crate) fn json_to_val<'v>(value: &'v Value) -> Box<dyn Val + 'v> {
    match value {
        Value::Null => Box::new(CelNull),
        Value::Bool(b) => Box::new(CelBool::from(*b)),
        Value::Number(n) => {
            if let Some(i) = n.as_i64() {
                Box::new(CelInt::from(i))
            } else if let Some(u) = n.as_u64() {
                Box::new(CelUInt::from(u))
            } else {
                Box::new(CelDouble::from(n.as_f64().unwrap_or(f64::NAN)))
            }
        }
        Value::String(s) => Box::new(CelString::from(s.as_str())),
        Value::Array(items) => {
            let list: Vec<Box<dyn Val + 'v>> = items.iter().map(json_to_val).collect();
            Box::new(CelList::from(list))
        }
        Value::Object(map) => {
            let entries: HashMap<CelMapKey<'v>, Box<dyn Val + 'v>> = map
                .iter()
                .map(|(k, v)| (CelMapKey::from(k.as_str()), json_to_val(v)))
                .collect();
            Box::new(CelMap::from(entries))
        }
    }
}

/// Binds only `fields` of the JSON object `args`: what the applicable rules can read. A field
/// the call lacks stays absent, so `has(args.x)` and missing-key errors behave as with the
/// whole object.
pub(crate) fn json_fields_to_val<'v>(args: &'v Value, fields: &[&str]) -> Box<dyn Val + 'v> {
    let Value::Object(map) = args else {
        return json_to_val(args);
    };
    let entries: HashMap<CelMapKey<'v>, Box<dyn Val + 'v>> = fields
        .iter()
        .filter_map(|f| map.get_key_value(*f))
        .map(|(k, v)| (CelMapKey::from(k.as_str()), json_to_val(v)))
        .collect();
    Box::new(CelMap::from(entries))
}

/// The shared environment, built once per policy set.
pub(crate) fn shared_env() -> Result<Arc<Env>, String> {
    build_env(true).map(Arc::new)
}
