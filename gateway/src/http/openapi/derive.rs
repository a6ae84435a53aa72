//! The derived half of the document: each body's schema from its type in `crate::api`, through
//! `schemars`. Answers are described as they serialise and requests as they deserialise (a
//! request's optional field is optional; an answer's `Option` is always written, as null), so
//! each has a generator of its own, and `components/schemas` is both generators' definitions.

use schemars::generate::SchemaSettings;
use schemars::{JsonSchema, SchemaGenerator};
use serde_json::{Map, Value};

use crate::http::routes::TypeOf;

/// What a success answer's body is.
pub(super) enum Shape {
    /// JSON, of the type the route table names for the status.
    Json,
    /// Text (Prometheus', server-sent events, NDJSON, a redirect's words).
    Text,
    /// No body.
    Empty,
}

/// A JSON success answer (its type is the route table's).
pub(super) fn json_ok(
    status: u16,
    description: &'static str,
) -> (u16, &'static str, Shape, &'static str) {
    (status, "application/json", Shape::Json, description)
}

/// The schemas one document refers to, gathered as its operations are written.
pub(super) struct Bodies {
    /// The error envelope (`api::ErrorBody`) written out in place, which each refusal narrows
    /// to its codes.
    pub envelope: Value,
    answers: SchemaGenerator,
    requests: SchemaGenerator,
}

fn settings() -> SchemaSettings {
    SchemaSettings::draft2020_12().with(|s| s.definitions_path = "/components/schemas/".into())
}

impl Bodies {
    pub(super) fn new() -> Bodies {
        Bodies {
            envelope: Bodies::inline::<crate::api::ErrorBody>(),
            answers: settings().for_serialize().into_generator(),
            requests: settings().for_deserialize().into_generator(),
        }
    }

    /// A `$ref` to an answer's schema (of type `t`, for JSON); none for an answer without a
    /// body.
    pub(super) fn answer(&mut self, shape: &Shape, t: Option<TypeOf>) -> Option<Value> {
        match shape {
            Shape::Json => t.map(|t| plain((t.0)(&mut self.answers).to_value())),
            Shape::Text => Some(serde_json::json!({"type": "string"})),
            Shape::Empty => None,
        }
    }

    /// A `$ref` to a request body's schema.
    pub(super) fn request(&mut self, t: TypeOf) -> Value {
        plain((t.0)(&mut self.requests).to_value())
    }

    /// `T`'s schema written out in place, with no `$ref`.
    fn inline<T: JsonSchema>() -> Value {
        let mut schema = settings()
            .for_serialize()
            .with(|s| s.inline_subschemas = true)
            .into_generator()
            .into_root_schema_for::<T>()
            .to_value();
        if let Value::Object(m) = &mut schema {
            m.remove("$schema");
            m.remove("title");
        }
        plain(schema)
    }

    /// `components/schemas`: every type referred to, by name. A name both generators define
    /// differently is listed by [`Bodies::clashes`] (a test keeps it empty).
    pub(super) fn components(self) -> Value {
        Value::Object(self.merged().0)
    }

    /// The names whose request and answer schemas differ.
    #[cfg(test)]
    pub(super) fn clashes(self) -> Vec<String> {
        self.merged().1
    }

    fn merged(mut self) -> (Map<String, Value>, Vec<String>) {
        let mut all: Map<String, Value> = Map::new();
        let mut clashes = Vec::new();
        let answers = std::mem::take(self.answers.definitions_mut());
        let requests = std::mem::take(self.requests.definitions_mut());
        for (name, schema) in answers.into_iter().chain(requests) {
            let schema = plain(schema);
            match all.get(&name) {
                Some(seen) if *seen != schema => clashes.push(name),
                Some(_) => {}
                None => {
                    all.insert(name, schema);
                }
            }
        }
        (all, clashes)
    }
}

/// A schema with its descriptions' lines joined, without serde's defaults, and without the integer formats OpenAPI does not define (`uint32`, `uint64`: their
/// `minimum: 0` says it), which client generators warn about.
fn plain(mut schema: Value) -> Value {
    match &mut schema {
        Value::Object(m) => {
            // Doc comments' line breaks are the source's, not the reader's.
            if let Some(Value::String(d)) = m.get_mut("description") {
                *d = d
                    .split("\n\n")
                    .map(|p| p.replace('\n', " "))
                    .collect::<Vec<_>>()
                    .join("\n\n");
            }
            if m.get("format")
                .and_then(Value::as_str)
                .is_some_and(|f| f.starts_with("uint"))
            {
                m.remove("format");
            }
            // serde's `default` is how a left-out field reads in Rust, not a value a client
            // should send (`uses: 0`, `ttl: ""` are refused); what leaving it out means is in
            // the field's description.
            m.remove("default");
            for v in m.values_mut() {
                *v = plain(std::mem::take(v));
            }
        }
        Value::Array(a) => {
            for v in a.iter_mut() {
                *v = plain(std::mem::take(v));
            }
        }
        _ => {}
    }
    schema
}
