//! The evaluation budget: how much work deciding one call may do, counted, never timed.
//!
//! A call's args are chosen by the agent, so a rule's cost is too: `args.items.all(x,
//! args.items.all(y, …))` is quadratic in a list the agent picks. Every evaluation of a policy
//! set runs under a budget of steps ([`DEFAULT_BUDGET`] unless the gateway's config says
//! otherwise), shared by all its rules. What counts:
//!
//! - **binding**: `args` (or the fields of it the rules read) and `resume` cost
//!   [`BIND_STEPS`] a value, paid before they are bound; what the budget cannot pay for is not
//!   bound, and every rule that reads it runs out (`args` too big to bind whole is bound as the
//!   fields the other rules read, when those fit: see `crate::eval`);
//! - **function calls**: [`CALL_STEPS`] for each call written in a rule (`size`, `contains`,
//!   `==`, `+`, `matches`…; the connectives `&&`, `||`, `!` and `?:` are control flow and free);
//! - **comprehension iterations**: a comprehension (`all`, `exists`, `exists_one`, `map`,
//!   `filter`) costs, before it starts, the size of its range times [`ELEMENT_STEPS`] plus the
//!   calls its body makes per element. Charging the whole range up front makes the outcome the
//!   same whatever order a map's keys come in, and an inner loop that cannot be paid for never
//!   starts;
//! - **bytes scanned**: one step per [`BYTES_PER_STEP`] bytes that a string function, a regular
//!   expression, a comparison of two computed values, `+` or `in` reads. Those operands are
//!   weighed as they are met (a list or map by its elements, all the way down).
//!
//! The counting is done by rewriting each compiled rule once, at load ([`meter`]): a
//! comprehension's range goes through `__airlock_range(range, per_element)`, and each operand
//! whose size is the agent's goes through `__airlock_scan(x)`. Both hand their argument back
//! untouched, so the stock interpreter of the `cel` crate keeps its semantics; they only
//! charge the meter of the evaluation running on this thread. A rule that runs out is a rule
//! error (it yields `on_error`, never allow), even if `||` or `&&` swallowed the error inside
//! it: [`Meter::refused`] is compared before and after the rule, not just its result read.
//!
//! It does not decide anything, and it reads no clock: the same call costs the same on every
//! machine.

use std::cell::Cell;

use cel::common::ast::{operators, CallExpr, EntryExpr, Expr, IdedExpr, LiteralValue};
use cel::common::types::{self, CelBytes, CelInt, CelList, CelMap, CelString};
use cel::common::value::{CowVal, Val};
use cel::{Env, ExecutionError};

/// Steps one call may use when nothing else is configured: `[server] policy_budget`.
pub const DEFAULT_BUDGET: u64 = 100_000;

/// Bytes scanned per step (cel-go's string traversal factor is the same, 0.1 a byte).
pub const BYTES_PER_STEP: u64 = 10;

/// Steps a function or operator call costs. A step is about 30–50 ns of this crate's work on
/// a 2-core machine of 2026 (the `hostile` bench): calls, elements and binding are weighed so
/// that the default budget decides within 5 ms whatever the args (3 ms measured).
pub const CALL_STEPS: u64 = 3;

/// Steps each element of a comprehension costs, besides the calls its body makes.
pub const ELEMENT_STEPS: u64 = 6;

/// Steps binding one JSON value (an object entry, a list element, a scalar) as a CEL value
/// costs: `args` and `resume` are bound only if the budget pays for them.
pub const BIND_STEPS: u64 = 6;

/// The reason a rule that ran out of budget gives.
pub const EXHAUSTED: &str = "evaluation budget exceeded";

const RANGE_FN: &str = "__airlock_range";
const SCAN_FN: &str = "__airlock_scan";

/// The meter of the evaluation running on this thread.
#[derive(Clone, Copy, Default)]
struct State {
    /// Whether an evaluation is running: outside one, charges are free.
    active: bool,
    budget: u64,
    /// Steps charged so far.
    used: u64,
    /// Bytes scanned that have not yet made a whole step.
    bytes: u64,
    /// Charges refused so far: a rule ran out if this grew while it ran.
    refused: u64,
}

thread_local! {
    static METER: Cell<State> = const { Cell::new(State { active: false, budget: 0, used: 0, bytes: 0, refused: 0 }) };
}

/// The budget of one evaluation, running on this thread until dropped.
///
/// INVARIANT: evaluation is synchronous and never leaves its thread, so the thread-local meter
/// is the evaluation's own for as long as this guard lives. Guards do not nest: a second one
/// on the same thread would share the first's count (evaluate never nests).
pub(crate) struct Meter {
    saved: State,
}

impl Meter {
    pub(crate) fn start(budget: u64) -> Meter {
        let saved = METER.with(|m| {
            m.replace(State {
                active: true,
                budget,
                ..State::default()
            })
        });
        Meter { saved }
    }

    /// Charges `steps`; false (and the meter marked exhausted) if they do not fit.
    pub(crate) fn charge(&self, steps: u64) -> bool {
        charge(steps).is_ok()
    }

    pub(crate) fn used(&self) -> u64 {
        METER.with(|m| m.get().used)
    }

    /// Steps left.
    pub(crate) fn remaining(&self) -> u64 {
        remaining()
    }

    /// How many charges were refused so far; compare before and after a rule.
    pub(crate) fn refused(&self) -> u64 {
        METER.with(|m| m.get().refused)
    }
}

impl Drop for Meter {
    fn drop(&mut self) {
        METER.with(|m| m.set(self.saved));
    }
}

fn missing_argument() -> ExecutionError {
    ExecutionError::function_error("budget", "a metering call lacks its argument")
}

fn exhausted_error() -> ExecutionError {
    ExecutionError::function_error("budget", EXHAUSTED)
}

/// Charges `steps` to the running evaluation, if any.
fn charge(steps: u64) -> Result<(), ExecutionError> {
    METER.with(|m| {
        let mut s = m.get();
        if !s.active {
            return Ok(());
        }
        let over = s.used.saturating_add(steps) > s.budget;
        // A refused charge does no work, so it spends nothing: later, cheaper rules still run.
        if over {
            s.refused += 1;
        } else {
            s.used += steps;
        }
        m.set(s);
        if over {
            Err(exhausted_error())
        } else {
            Ok(())
        }
    })
}

/// Charges `n` bytes scanned: a step for every [`BYTES_PER_STEP`] of them, carried over.
pub(crate) fn charge_bytes(n: usize) -> Result<(), ExecutionError> {
    let steps = METER.with(|m| {
        let mut s = m.get();
        let total = s.bytes.saturating_add(n as u64);
        s.bytes = total % BYTES_PER_STEP;
        m.set(s);
        total / BYTES_PER_STEP
    });
    if steps == 0 {
        Ok(())
    } else {
        charge(steps)
    }
}

/// The steps left in the running evaluation (`u64::MAX` outside one).
fn remaining() -> u64 {
    METER.with(|m| {
        let s = m.get();
        if s.active {
            s.budget.saturating_sub(s.used)
        } else {
            u64::MAX
        }
    })
}

/// The work of reading `v` whole, in steps: its bytes over [`BYTES_PER_STEP`], plus a step per
/// element or entry. Weighing stops once it passes `cap`, so weighing is itself bounded.
fn weigh(v: &dyn Val, cap: u64) -> u64 {
    if let Some(s) = v.downcast_ref::<CelString>() {
        return s.inner().len() as u64 / BYTES_PER_STEP;
    }
    if let Some(b) = v.downcast_ref::<CelBytes>() {
        return b.inner().len() as u64 / BYTES_PER_STEP;
    }
    let mut total = 0u64;
    if let Some(list) = v.downcast_ref::<CelList>() {
        for item in list.inner() {
            total = total.saturating_add(1 + weigh(item.as_ref(), cap));
            if total > cap {
                break;
            }
        }
    } else if let Some(map) = v.downcast_ref::<CelMap>() {
        for (key, value) in map.inner() {
            total = total.saturating_add(1 + weigh(key.inner(), cap) + weigh(value.as_ref(), cap));
            if total > cap {
                break;
            }
        }
    }
    total
}

/// The steps binding `v` costs: [`BIND_STEPS`] for it and every value inside it. Counting
/// stops once it passes `cap`, so counting is itself bounded.
pub(crate) fn bind_cost(v: &serde_json::Value, cap: u64) -> u64 {
    fn count(v: &serde_json::Value, total: &mut u64, cap: u64) {
        *total += BIND_STEPS;
        if *total > cap {
            return;
        }
        match v {
            serde_json::Value::Array(items) => {
                for x in items {
                    count(x, total, cap);
                    if *total > cap {
                        return;
                    }
                }
            }
            serde_json::Value::Object(map) => {
                for x in map.values() {
                    count(x, total, cap);
                    if *total > cap {
                        return;
                    }
                }
            }
            _ => {}
        }
    }
    let mut total = 0;
    count(v, &mut total, cap);
    total
}

/// `__airlock_scan(x)`: charges reading `x` whole and hands `x` back.
fn scan<'b, 'v>(mut args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let value = args.pop().ok_or_else(missing_argument)?;
    let cap = remaining();
    if cap != u64::MAX {
        charge(weigh(value.as_ref(), cap.saturating_add(1)))?;
    }
    Ok(value)
}

/// `__airlock_range(range, per_element)`: charges a comprehension over `range` before it
/// starts, and hands `range` back.
fn range<'b, 'v>(mut args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let per_element = args
        .pop()
        .and_then(|a| a.downcast_ref::<CelInt>().map(|i| *i.inner()))
        .ok_or_else(|| ExecutionError::function_error("budget", "bad comprehension cost"))?;
    let range = args.pop().ok_or_else(missing_argument)?;
    let elements = if let Some(list) = range.downcast_ref::<CelList>() {
        list.inner().len() as u64
    } else if let Some(map) = range.downcast_ref::<CelMap>() {
        map.inner().len() as u64
    } else {
        0
    };
    charge(elements.saturating_mul(per_element.max(1) as u64))?;
    Ok(range)
}

/// Adds the two metering functions (and nothing a rule can name: `__airlock` is reserved).
pub(crate) fn add_to(env: &mut Env) -> Result<(), String> {
    env.add_overload(
        RANGE_FN,
        "airlock_range_dyn_int",
        vec![types::DYN_TYPE, types::INT_TYPE],
        range,
    )
    .map_err(|e| e.to_string())?;
    env.add_overload(SCAN_FN, "airlock_scan_dyn", vec![types::DYN_TYPE], scan)
        .map_err(|e| e.to_string())
}

/// A rule's condition, rewritten to charge the meter.
#[derive(Debug, Clone)]
pub(crate) struct Metered {
    pub expr: IdedExpr,
    /// Steps charged before the rule runs: the calls made once, outside any loop body.
    pub once: u64,
}

/// Rewrites `expr` so that evaluating it charges the meter (see the module doc).
pub(crate) fn meter(expr: &IdedExpr) -> Metered {
    let mut ids = max_id(expr) + 1;
    let (expr, once) = rewrite(expr, &mut ids);
    Metered { expr, once }
}

fn max_id(e: &IdedExpr) -> u64 {
    let mut max = e.id;
    crate::functions::visit(e, &mut |x| max = max.max(x.id));
    max
}

/// Calls that are control flow, or the macros' own bookkeeping, and cost nothing.
fn free(name: &str) -> bool {
    matches!(
        name,
        operators::LOGICAL_AND
            | operators::LOGICAL_OR
            | operators::LOGICAL_NOT
            | operators::CONDITIONAL
            | operators::NOT_STRICTLY_FALSE
    )
}

/// Functions that read their receiver (or first argument) and string arguments whole.
fn scans(name: &str) -> bool {
    matches!(
        name,
        "contains"
            | "startsWith"
            | "endsWith"
            | "size"
            | "lowerAscii"
            | "upperAscii"
            | "split"
            | "replace"
            | "indexOf"
            | "lastIndexOf"
            | "substring"
            | "trim"
            | "charAt"
            | "join"
            | "reverse"
            | "format"
            | "strings.quote"
            | "string"
            | "int"
            | "uint"
            | "double"
            | "bytes"
            | "timestamp"
            | "duration"
    )
}

fn is_literal(e: &IdedExpr) -> bool {
    matches!(e.expr, Expr::Literal(_))
}

fn wrap(e: IdedExpr, ids: &mut u64) -> IdedExpr {
    if is_literal(&e) {
        return e;
    }
    *ids += 1;
    IdedExpr {
        id: *ids,
        expr: Expr::Call(CallExpr {
            func_name: SCAN_FN.to_owned(),
            target: None,
            args: vec![e],
        }),
    }
}

/// Returns the rewritten expression and the steps it costs each time it is evaluated, not
/// counting the loops inside it (they charge for themselves when they start).
fn rewrite(e: &IdedExpr, ids: &mut u64) -> (IdedExpr, u64) {
    let mut cost = 0u64;
    let sub = |x: &IdedExpr, ids: &mut u64, cost: &mut u64| {
        let (x, c) = rewrite(x, ids);
        *cost += c;
        x
    };
    let expr = match &e.expr {
        Expr::Call(call) => {
            let target = call.target.as_ref().map(|t| sub(t, ids, &mut cost));
            let mut args: Vec<IdedExpr> =
                call.args.iter().map(|a| sub(a, ids, &mut cost)).collect();
            let name = call.func_name.as_str();
            if !free(name) {
                cost += CALL_STEPS;
            }
            let target = if scans(name) {
                args = args.into_iter().map(|a| wrap(a, ids)).collect();
                target.map(|t| wrap(t, ids))
            } else {
                match name {
                    operators::ADD => args = args.into_iter().map(|a| wrap(a, ids)).collect(),
                    operators::IN => {
                        if let Some(last) = args.pop() {
                            args.push(wrap(last, ids));
                        }
                    }
                    operators::EQUALS
                    | operators::NOT_EQUALS
                    | operators::LESS
                    | operators::LESS_EQUALS
                    | operators::GREATER
                    | operators::GREATER_EQUALS
                        if args.iter().all(|a| !is_literal(a)) && !args.is_empty() =>
                    {
                        let first = args.remove(0);
                        args.insert(0, wrap(first, ids));
                    }
                    _ => {}
                }
                target
            };
            Expr::Call(CallExpr {
                func_name: call.func_name.clone(),
                target: target.map(Box::new),
                args,
            })
        }
        Expr::Comprehension(c) => {
            let mut c = (**c).clone();
            let (iter_range, range_cost) = rewrite(&c.iter_range, ids);
            let (accu_init, init_cost) = rewrite(&c.accu_init, ids);
            let (loop_cond, cond_cost) = rewrite(&c.loop_cond, ids);
            let (loop_step, step_cost) = rewrite(&c.loop_step, ids);
            let (result, result_cost) = rewrite(&c.result, ids);
            cost += range_cost + init_cost + result_cost;
            let per_element = ELEMENT_STEPS + cond_cost + step_cost;
            *ids += 1;
            let per_element_lit = IdedExpr {
                id: *ids,
                expr: Expr::Literal(LiteralValue::Int(CelInt::from(
                    i64::try_from(per_element).unwrap_or(i64::MAX),
                ))),
            };
            *ids += 1;
            c.iter_range = IdedExpr {
                id: *ids,
                expr: Expr::Call(CallExpr {
                    func_name: RANGE_FN.to_owned(),
                    target: None,
                    args: vec![iter_range, per_element_lit],
                }),
            };
            c.accu_init = accu_init;
            c.loop_cond = loop_cond;
            c.loop_step = loop_step;
            c.result = result;
            Expr::Comprehension(Box::new(c))
        }
        _ => {
            let mut e = e.clone();
            rewrite_children(&mut e, ids, &mut cost);
            e.expr
        }
    };
    (IdedExpr { id: e.id, expr }, cost)
}

/// Rewrites the children of a node that is neither a call nor a comprehension.
fn rewrite_children(e: &mut IdedExpr, ids: &mut u64, cost: &mut u64) {
    let mut one = |x: &mut IdedExpr| {
        let (y, c) = rewrite(x, ids);
        *x = y;
        *cost += c;
    };
    match &mut e.expr {
        // `has(a.b)` and `a.b.c` resolve names from the operand: keep a plain name plain.
        Expr::Select(s) if !matches!(s.operand.expr, Expr::Ident(_)) => one(&mut s.operand),
        Expr::List(l) => l.elements.iter_mut().for_each(&mut one),
        Expr::Map(m) => {
            for entry in &mut m.entries {
                if let EntryExpr::MapEntry(me) = &mut entry.expr {
                    one(&mut me.key);
                    one(&mut me.value);
                }
            }
        }
        Expr::Struct(s) => {
            for entry in &mut s.entries {
                if let EntryExpr::StructField(sf) = &mut entry.expr {
                    one(&mut sf.value);
                }
            }
        }
        _ => {}
    }
}
