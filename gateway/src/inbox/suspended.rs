//! The inbox's pages of suspended calls (DESIGN §11): the list of calls waiting for input,
//! and one call's page with the question its tool asked and the form generated from its
//! resume schema (a field per property the form can render; anything else falls back to a
//! JSON box), every value escaped by maud as on every inbox page.

use airlock_storage::CallRecord;
use maud::{html, Markup};
use serde_json::Value;

use crate::error::ApiError;

use super::pages::{in_words, layout, time_left, Who};

/// Suspended calls waiting for input (DESIGN §11).
pub fn suspended(who: &Who, calls: &[CallRecord], now: u64) -> Markup {
    layout(
        &format!("({}) Suspended · airlock inbox", calls.len()),
        Some(who),
        html! {
            h1 { "Suspended calls" }
            p.hint { "Tools that stopped mid-call to ask for input. Open one to answer its form." }
            @if calls.is_empty() { p.empty { "No call is waiting for input." } } @else {
                table {
                    thead { tr { th { "Tool" } th.wide { "Requester" } th.wide { "Run" } th { "Asks" } th { "Time left" } } }
                    tbody {
                        @for c in calls {
                            tr {
                                td { a href={ "/inbox/calls/" (c.call_id) } { (c.tool) } }
                                td.wide { (c.requester.id) }
                                td.wide { (c.context.get("run_id").and_then(Value::as_str).unwrap_or("")) }
                                td { (question(c)) }
                                td { (c.suspension.as_ref().map(|s| time_left(s.expires_at, now)).unwrap_or_default()) }
                            }
                        }
                    }
                }
            }
        },
    )
}

/// What a suspended call asks, in one line of text.
fn question(c: &CallRecord) -> String {
    let Some(s) = &c.suspension else {
        return String::new();
    };
    crate::pipeline::question_of(&s.payload)
        .map(str::to_owned)
        .unwrap_or_else(|| s.payload.to_string())
}

/// One field of a form generated from a flat resume schema.
pub struct FormField {
    pub name: String,
    /// `string`, `number`, `integer` or `boolean`.
    pub kind: String,
    pub required: bool,
    pub choices: Vec<String>,
    pub description: Option<String>,
}

/// The fields of a flat object schema (`None` when it is not flat: a JSON box instead).
pub fn form_fields(schema: &Value) -> Option<Vec<FormField>> {
    if !crate::pipeline::suspend::is_primitive_object(schema) {
        return None;
    }
    let required: Vec<&str> = schema
        .get("required")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect();
    let props = schema.get("properties")?.as_object()?;
    Some(
        props
            .iter()
            .map(|(name, p)| FormField {
                name: name.clone(),
                kind: p
                    .get("type")
                    .and_then(Value::as_str)
                    .unwrap_or("string")
                    .to_owned(),
                required: required.contains(&name.as_str()),
                choices: p
                    .get("enum")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                    .map(|v| {
                        v.as_str()
                            .map(str::to_owned)
                            .unwrap_or_else(|| v.to_string())
                    })
                    .collect(),
                description: p
                    .get("description")
                    .or_else(|| p.get("title"))
                    .and_then(Value::as_str)
                    .map(str::to_owned),
            })
            .collect(),
    )
}

/// A call: its state and, while it is suspended, the form generated from its resume schema.
pub fn call(who: &Who, c: &CallRecord, error: Option<&ApiError>, now: u64) -> Markup {
    let args = serde_json::to_string_pretty(&c.args).unwrap_or_default();
    let suspended = c.status.as_str() == "suspended";
    let s = c.suspension.as_ref();
    let schema = s.map(|s| s.resume_schema.clone()).unwrap_or(Value::Null);
    let outcome = c.outcome.as_ref().map(|o| {
        o.result
            .as_ref()
            .map(|r| serde_json::to_string_pretty(r).unwrap_or_default())
            .unwrap_or_else(|| {
                format!(
                    "{}: {}",
                    o.error.clone().unwrap_or_default(),
                    o.message.clone().unwrap_or_default()
                )
            })
    });
    layout(
        &format!("{} · call · airlock inbox", c.tool),
        Some(who),
        html! {
            h1 { code { (c.tool) } @if suspended { " asks for input" } }
            @if let Some(e) = error {
                // Shown in answer to a form: the address becomes the call's own, so a reload
                // shows the call again instead of sending the answer twice.
                p.error role="alert" data-canonical={ "/inbox/calls/" (c.call_id) } { (in_words(e)) }
            }
            p.status {
                span.badge { (c.status.as_str()) }
                @if let (true, Some(s)) = (suspended, s) { " · " span data-expires=(s.expires_at) { (time_left(s.expires_at, now)) } }
            }
            @if let Some(s) = s {
                h2 { "The question" }
                p.question { (question(c)) }
                details { summary { "What the tool sent" } pre.args { (serde_json::to_string_pretty(&s.payload).unwrap_or_default()) } }
            }
            h2 { "Arguments" }
            pre.args { (args) }
            dl {
                dt { "Fingerprint" } dd { code.fp { (c.fingerprint) } }
                dt { "Requester" } dd { (c.requester.id) }
                @for key in ["run_id", "tool_call_id"] {
                    @if let Some(v) = c.context.get(key).and_then(Value::as_str) { dt { (key) } dd { (v) } }
                }
                dt { "Call" } dd { code { (c.call_id) } }
            }
            @if suspended { (answer_form(who, c, &schema)) }
            @if let Some(o) = outcome {
                h2 { "Outcome" }
                pre.args { (o) }
            }
        },
    )
}

/// The form that answers a suspended call: a field per property the schema lets it render, or
/// a JSON box, with the schema shown beside it.
fn answer_form(who: &Who, c: &CallRecord, schema: &Value) -> Markup {
    let fields = form_fields(schema);
    html! {
        section.actions aria-label="Answer" {
            form #resume-form method="post" action={ "/inbox/calls/" (c.call_id) "/resume" } {
                input type="hidden" name="csrf" value=(who.csrf);
                @match &fields {
                    Some(fields) => {
                        @for f in fields {
                            @let id = format!("field-{}", f.name);
                            @let name = format!("f.{}", f.name);
                            label for=(id) { (f.name) @if f.required { " (required)" } @if let Some(d) = &f.description { " — " (d) } }
                            @if !f.choices.is_empty() {
                                select id=(id) name=(name) required[f.required] {
                                    @if !f.required { option value="" { "—" } }
                                    @for choice in &f.choices { option value=(choice) { (choice) } }
                                }
                            } @else if f.kind == "boolean" {
                                select id=(id) name=(name) required[f.required] {
                                    @if !f.required { option value="" { "—" } }
                                    option value="true" { "yes" }
                                    option value="false" { "no" }
                                }
                            } @else if f.kind == "number" || f.kind == "integer" {
                                input id=(id) name=(name) type="number" step=(if f.kind == "integer" { "1" } else { "any" }) required[f.required];
                            } @else {
                                input id=(id) name=(name) required[f.required];
                            }
                        }
                    }
                    None => {
                        label for="resume-json" { "Answer (JSON fitting the schema below)" }
                        textarea #resume-json name="resume_data" rows="8" spellcheck="false" {}
                    }
                }
                details { summary { "The resume schema" } pre.args { (serde_json::to_string_pretty(&schema).unwrap_or_default()) } }
                button.approve type="submit" { "Continue the call" }
            }
        }
    }
}
