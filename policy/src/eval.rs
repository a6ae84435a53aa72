//! `evaluate(&PolicySet, &Input) -> Decision`: the pure decision core.
//!
//! It binds only the variables the applicable rules read, runs only the rules whose tool
//! globs admit the call, and combines: deny > require_approval > allow, no match falls to the
//! default, agent and tool flags raise allow to require_approval, and a rule that fails (or
//! whose classifier failed) yields the stricter of its own decision and `on_error`, which is
//! never allow. Rule order cannot change
//! the result: matches are combined with `max`, and explanations are sorted.
//!
//! Every evaluation runs under the set's budget of steps (`crate::budget`), all rules
//! together; rules run deny first, then require_approval, then allow, so a budget spent by one
//! rule stops the same rules whatever order the files list them in. A rule that runs out is an
//! error like any other.
//!
//! It reads no clock, does no I/O, is not async and cannot fail.

use std::collections::BTreeMap;

use cel::common::types::{CelDouble, CelList, CelMap, CelMapKey, CelNull, CelString, CelTimestamp};
use cel::common::value::Val;
use cel::{Context, Value as CelValue};

use crate::budget::{bind_cost, Meter, EXHAUSTED};
use crate::cel::{json_fields_to_val, json_to_val, VARIABLES};
use crate::load::{PolicySet, Rule};
use crate::model::{ClassifierOutcome, Decision, DecisionKind, Input, RuleError, RuleMessage};

/// What one rule contributed.
enum Outcome {
    NoMatch,
    Match,
    /// The rule could not be evaluated; it yields this decision instead.
    Error(String, DecisionKind),
}

/// The bit of `args` in a rule's `uses` (its place in [`VARIABLES`]).
const ARGS: u16 = 1 << 1;

/// Decides `input` under `set`.
pub fn evaluate(set: &PolicySet, input: &Input<'_>) -> Decision {
    let applicable: Vec<&Rule> = set.rules.iter().filter(|r| r.applies(input)).collect();
    let uses = applicable.iter().fold(0u16, |acc, r| acc | r.uses);

    let meter = Meter::start(set.budget);
    let Binding {
        args_fields,
        unbound,
        whole_unbound,
    } = pay_for_binding(&meter, &applicable, uses, input);
    let mut ctx = Context::with_env(set.env.clone());
    bind(&mut ctx, uses & !unbound, input, args_fields.as_deref());

    let mut decision: Option<DecisionKind> = None;
    let mut approval = None;
    let mut rules = Vec::new();
    let mut errors = Vec::new();
    let mut messages = Vec::new();
    for rule in applicable {
        let reads_whole = rule.uses & ARGS != 0 && rule.args_fields.is_none();
        let outcome = if rule.uses & unbound != 0 || (whole_unbound && reads_whole) {
            Outcome::Error(EXHAUSTED.to_owned(), set.defaults.on_error)
        } else {
            run(rule, &ctx, input, set.defaults.on_error, &meter)
        };
        let yielded = match outcome {
            Outcome::NoMatch => continue,
            Outcome::Match => {
                rules.push(rule.id.clone());
                if let Some(message) = &rule.message {
                    messages.push((
                        rule.decision,
                        RuleMessage {
                            rule: rule.id.clone(),
                            message: message.clone(),
                        },
                    ));
                }
                rule.decision
            }
            Outcome::Error(reason, on_error) => {
                errors.push(RuleError {
                    rule: rule.id.clone(),
                    reason,
                });
                // INVARIANT: an error yields the stricter of the rule's own decision and
                // on_error, and never allow: a deny rule that errors (or runs out) denies, so
                // no args can turn a deny into an approval request.
                on_error
                    .max(rule.decision)
                    .max(DecisionKind::RequireApproval)
            }
        };
        decision = decision.max(Some(yielded));
        if yielded == DecisionKind::RequireApproval {
            approval = Some(match approval {
                None => rule.approval.clone(),
                Some(a) => rule.approval.strictest(&a),
            });
        }
    }

    let flagged = flags(set, input, &mut rules);

    let mut decision = decision.unwrap_or(set.defaults.for_kind(input.request.kind));
    if flagged && decision == DecisionKind::Allow {
        decision = DecisionKind::RequireApproval;
    }
    let approval = (decision == DecisionKind::RequireApproval)
        .then(|| approval.unwrap_or_else(|| set.defaults.approval.clone()));
    rules.sort();
    errors.sort_by(|a, b| a.rule.cmp(&b.rule));
    // The messages of the rules that decided: a deny says why it denies, not why another
    // matched rule would have asked for approval.
    let mut messages: Vec<RuleMessage> = messages
        .into_iter()
        .filter(|(d, _)| *d == decision)
        .map(|(_, m)| m)
        .collect();
    messages.sort_by(|a, b| a.rule.cmp(&b.rule));
    Decision {
        decision,
        rules,
        errors,
        messages,
        policy_version: set.version.clone(),
        approval,
        steps: meter.used(),
    }
}

/// The bits of the variables a list knows of an item, in a rule's `uses` (their places in
/// [`VARIABLES`]): `tool`, `principal`, `kind`, `uri`, `prompt`; and `server`.
const TOOL: u16 = 1 << 0;
const PRINCIPAL: u16 = 1 << 3;
const KIND: u16 = 1 << 9;
const SERVER: u16 = 1 << 10;
const URI: u16 = 1 << 11;
const PROMPT: u16 = 1 << 12;

/// Whether `set` denies `tool` to `principal` whatever else a call of it carries (args,
/// context, time, classifier results): [`denies_request_outright`] for a tool call.
pub fn denies_outright(set: &PolicySet, tool: &str, principal: &serde_json::Value) -> bool {
    denies_request_outright(set, tool, crate::Request::TOOL, principal)
}

/// Whether `set` denies a request (a call of `tool`, or a resource, prompt or completion as
/// `request` names it) to `principal` whatever else it carries: a deny rule for it whose
/// condition reads nothing but what a list knows of the item (`tool`, `principal`, `kind`,
/// `uri`, `prompt`, and `server` when `request` names one) holds, or fails (a failing deny
/// rule denies); or no rule but deny rules is for it and its kind's default is deny. A rule
/// that reads anything else cannot settle it, so it hides nothing. For lists: what an agent
/// can never use, it need not see.
pub fn denies_request_outright(
    set: &PolicySet,
    tool: &str,
    request: crate::Request<'_>,
    principal: &serde_json::Value,
) -> bool {
    let empty = serde_json::Value::Object(serde_json::Map::new());
    let none = BTreeMap::new();
    let input = Input {
        tool,
        args: &empty,
        context: &empty,
        principal,
        fingerprint: "",
        now: std::time::SystemTime::UNIX_EPOCH,
        classifiers: &none,
        resume: None,
        definition: None,
        request,
    };
    let applicable: Vec<&Rule> = set.rules.iter().filter(|r| r.applies(&input)).collect();
    if set.defaults.for_kind(request.kind) == DecisionKind::Deny
        && applicable.iter().all(|r| r.decision == DecisionKind::Deny)
    {
        return true;
    }
    let known =
        TOOL | PRINCIPAL | KIND | URI | PROMPT | if request.server.is_empty() { 0 } else { SERVER };
    applicable
        .into_iter()
        .filter(|r| {
            r.decision == DecisionKind::Deny && r.uses & !known == 0 && r.classifiers.is_empty()
        })
        .any(|rule| {
            let meter = Meter::start(set.budget);
            let mut ctx = Context::with_env(set.env.clone());
            bind(&mut ctx, rule.uses, &input, None);
            !matches!(
                run(rule, &ctx, &input, set.defaults.on_error, &meter),
                Outcome::NoMatch
            )
        })
}

/// The `[agents]` and `[tools]` flags that apply to a tool call (`agent:<id>`, `tool:<pattern>`,
/// added to `rules`); whether any did. They are about tool calls only.
fn flags(set: &PolicySet, input: &Input<'_>, rules: &mut Vec<String>) -> bool {
    if input.request.kind != crate::RequestKind::Tool {
        return false;
    }
    let mut flagged = false;
    if let Some(agent) = input.context.get("agent_id").and_then(|a| a.as_str()) {
        if set.agents.contains(agent) {
            rules.push(format!("agent:{agent}"));
            flagged = true;
        }
    }
    for glob in &set.tool_flags {
        if glob.matches(input.tool) {
            rules.push(format!("tool:{}", glob.as_str()));
            flagged = true;
        }
    }
    flagged
}

fn run(
    rule: &Rule,
    ctx: &Context<'_, '_>,
    input: &Input<'_>,
    on_error: DecisionKind,
    meter: &Meter,
) -> Outcome {
    for name in &rule.classifiers {
        match input.classifiers.get(name) {
            Some(ClassifierOutcome::Ok(_)) => {}
            Some(ClassifierOutcome::Failed { reason, on_error }) => {
                return Outcome::Error(format!("classifier `{name}` failed: {reason}"), *on_error)
            }
            None => return Outcome::Error(format!("classifier `{name}` has no result"), on_error),
        }
    }
    let refused = meter.refused();
    if !meter.charge(rule.metered.once) {
        return Outcome::Error(EXHAUSTED.to_owned(), on_error);
    }
    let result = CelValue::resolve(&rule.metered.expr, ctx);
    // INVARIANT: a rule that ran out is an error even if `||` or `&&` absorbed the error.
    if meter.refused() != refused {
        return Outcome::Error(EXHAUSTED.to_owned(), on_error);
    }
    match result {
        Ok(CelValue::Bool(true)) => Outcome::Match,
        Ok(CelValue::Bool(false)) => Outcome::NoMatch,
        Ok(other) => Outcome::Error(format!("`when` gave {other:?}, not a bool"), on_error),
        Err(e) => Outcome::Error(e.to_string(), on_error),
    }
}

/// What the budget paid to bind.
struct Binding<'r> {
    /// `args` as just these fields, or whole (`None`).
    args_fields: Option<Vec<&'r str>>,
    /// The variables left unbound (a bitmask over [`VARIABLES`]): their rules run out.
    unbound: u16,
    /// `args` was too big to bind whole and is bound as fields: the rules reading it whole
    /// run out.
    whole_unbound: bool,
}

/// Pays for binding `args` and `resume`. `args` is bound whole only if some rule reads it
/// whole, otherwise as just the fields read; too big to bind whole, it is bound as the fields
/// the other rules read, if those fit, so a deny rule on one field keeps its turn.
fn pay_for_binding<'r>(
    meter: &Meter,
    applicable: &[&'r Rule],
    uses: u16,
    input: &Input<'_>,
) -> Binding<'r> {
    let fields: Vec<&str> = applicable
        .iter()
        .filter_map(|r| r.args_fields.as_ref())
        .flatten()
        .map(String::as_str)
        .fold(Vec::new(), |mut acc, f| {
            if !acc.contains(&f) {
                acc.push(f);
            }
            acc
        });
    if applicable.iter().all(|r| r.args_fields.is_some()) {
        let unbound = unaffordable(meter, uses, input, Some(&fields));
        return Binding {
            args_fields: Some(fields),
            unbound,
            whole_unbound: false,
        };
    }
    let mut unbound = unaffordable(meter, uses, input, None);
    if unbound & ARGS != 0 && !fields.is_empty() {
        let cap = meter.remaining().saturating_add(1);
        if meter.charge(args_cost(input.args, Some(&fields), cap)) {
            unbound &= !ARGS;
            return Binding {
                args_fields: Some(fields),
                unbound,
                whole_unbound: true,
            };
        }
    }
    Binding {
        args_fields: None,
        unbound,
        whole_unbound: false,
    }
}

/// Pays for binding what the agent sent (`args`, or the fields of it the rules read, and
/// `resume`); returns the bitmask of those the budget could not pay for, left unbound.
fn unaffordable(meter: &Meter, uses: u16, input: &Input<'_>, args_fields: Option<&[&str]>) -> u16 {
    let mut unbound = 0;
    for (i, name) in VARIABLES.iter().enumerate() {
        if uses & (1 << i) == 0 {
            continue;
        }
        let cap = meter.remaining().saturating_add(1);
        let cost = match *name {
            "args" => args_cost(input.args, args_fields, cap),
            "resume" => input.resume.map_or(0, |r| bind_cost(r, cap)),
            _ => continue,
        };
        if !meter.charge(cost) {
            unbound |= 1 << i;
        }
    }
    unbound
}

/// What binding `args` costs: whole, or just `fields`.
fn args_cost(args: &serde_json::Value, fields: Option<&[&str]>, cap: u64) -> u64 {
    match fields {
        None => bind_cost(args, cap),
        Some(fields) => fields
            .iter()
            .filter_map(|f| args.get(*f))
            .map(|v| bind_cost(v, cap))
            .sum(),
    }
}

/// Binds the variables in the `uses` bitmask (bit i is `VARIABLES[i]`); `args` is bound as
/// just `args_fields` when given.
fn bind<'v>(ctx: &mut Context<'_, 'v>, uses: u16, input: &Input<'v>, args_fields: Option<&[&str]>) {
    for (i, name) in VARIABLES.iter().enumerate() {
        if uses & (1 << i) == 0 {
            continue;
        }
        let value: Box<dyn Val + 'v> = match *name {
            "tool" => Box::new(CelString::from(input.tool)),
            "args" => match args_fields {
                Some(fields) => json_fields_to_val(input.args, fields),
                None => json_to_val(input.args),
            },
            "context" => json_to_val(input.context),
            "principal" => json_to_val(input.principal),
            "fingerprint" => Box::new(CelString::from(input.fingerprint)),
            "now" => {
                let now: chrono::DateTime<chrono::Utc> = input.now.into();
                Box::new(CelTimestamp::from(now.fixed_offset()))
            }
            "resume" => match input.resume {
                Some(data) => json_to_val(data),
                None => Box::new(CelNull),
            },
            "definition" => match input.definition {
                Some(tool) => json_to_val(tool),
                None => Box::new(CelNull),
            },
            "kind" => Box::new(CelString::from(input.request.kind.as_str())),
            "server" => Box::new(CelString::from(input.request.server)),
            "uri" => match input.request.uri {
                Some(u) => Box::new(CelString::from(u)),
                None => Box::new(CelNull),
            },
            "prompt" => match input.request.prompt {
                Some(p) => Box::new(CelString::from(p)),
                None => Box::new(CelNull),
            },
            _ => classifier_val(input.classifiers),
        };
        ctx.add_variable_as_val(*name, value);
    }
}

/// `classifier`: a map from classifier name to `{score, labels, detail}`, for those that ran.
fn classifier_val<'v>(results: &'v BTreeMap<String, ClassifierOutcome>) -> Box<dyn Val + 'v> {
    let mut map = std::collections::HashMap::new();
    for (name, outcome) in results {
        let ClassifierOutcome::Ok(result) = outcome else {
            continue;
        };
        let labels: Vec<Box<dyn Val + 'v>> = result
            .labels
            .iter()
            .map(|l| Box::new(CelString::from(l.as_str())) as Box<dyn Val + 'v>)
            .collect();
        let mut fields: std::collections::HashMap<CelMapKey<'v>, Box<dyn Val + 'v>> =
            std::collections::HashMap::new();
        fields.insert(
            CelMapKey::from("score"),
            Box::new(CelDouble::from(result.score)),
        );
        fields.insert(CelMapKey::from("labels"), Box::new(CelList::from(labels)));
        fields.insert(CelMapKey::from("detail"), json_to_val(&result.detail));
        map.insert(
            CelMapKey::from(name.as_str()),
            Box::new(CelMap::from(fields)) as Box<dyn Val + 'v>,
        );
    }
    Box::new(CelMap::from(map))
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_args_bit_is_the_place_of_args_among_the_variables() {
        let place = super::VARIABLES.iter().position(|v| *v == "args");
        assert_eq!(place.map(|i| 1u16 << i), Some(super::ARGS));
    }
}
