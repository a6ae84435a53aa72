//! The command-line client of a running gateway: `airlock call` and
//! `airlock approvals list|show|approve|decline`. Tables for people, `--json` for scripts.
//!
//! It only speaks the HTTP API; it decides nothing itself.

use crate::error::Code;
use serde_json::{json, Value};

/// Where the gateway is and who is asking.
pub struct Client {
    url: String,
    token: String,
    http: reqwest::blocking::Client,
}

/// A failure: the gateway's error code, or a transport problem.
pub struct ClientError {
    pub code: String,
    pub message: String,
}

impl Client {
    /// `token`, else the first of `env_vars` that is set and not empty.
    pub fn new(url: &str, token: Option<String>, env_vars: &[&str]) -> Result<Client, ClientError> {
        let token = token
            .or_else(|| {
                env_vars
                    .iter()
                    .filter_map(|v| std::env::var(v).ok())
                    .find(|t| !t.is_empty())
            })
            .filter(|t| !t.is_empty())
            .ok_or_else(|| ClientError {
                code: Code::AuthUnauthenticated.as_str().into(),
                message: format!("give --token or set {}", env_vars.join(" or ")),
            })?;
        let http = reqwest::blocking::Client::builder()
            .timeout(std::time::Duration::from_secs(330))
            .build()
            .map_err(|e| ClientError {
                code: "client.error".into(),
                message: e.to_string(),
            })?;
        Ok(Client {
            url: url.trim_end_matches('/').to_owned(),
            token,
            http,
        })
    }

    /// Sends a request; returns the status and the JSON body.
    pub fn send(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<&Value>,
        prefer: Option<&str>,
    ) -> Result<(u16, Value), ClientError> {
        let mut req = self
            .http
            .request(method, format!("{}{path}", self.url))
            .bearer_auth(&self.token);
        if let Some(p) = prefer {
            req = req.header("prefer", p);
        }
        if let Some(b) = body {
            req = req
                .header("content-type", "application/json")
                .body(b.to_string());
        }
        let resp = req.send().map_err(|e| ClientError {
            code: "client.unreachable".into(),
            message: if e.is_connect() {
                format!(
                    "cannot reach {}: connection refused. Is the gateway running? Start one with \
                     `airlock serve`, or point --url (or $AIRLOCK_URL) at yours",
                    self.url
                )
            } else if e.is_timeout() {
                format!("cannot reach {}: no answer in time ({e})", self.url)
            } else {
                format!("cannot reach {}: {e}", self.url)
            },
        })?;
        let status = resp.status().as_u16();
        let text = resp.text().unwrap_or_default();
        let value = serde_json::from_str(&text).unwrap_or(Value::String(text));
        Ok((status, value))
    }
}

/// The error code of an error body, if it is one.
pub fn error_code(body: &Value) -> Option<&str> {
    body.pointer("/error/code").and_then(Value::as_str)
}

/// A refusal on one line, for people: `403 auth.forbidden: <message>`; `None` for an answer
/// that is not one.
pub fn refusal_line(status: u16, body: &Value) -> Option<String> {
    let code = error_code(body)?;
    let message = body
        .pointer("/error/message")
        .and_then(Value::as_str)
        .unwrap_or("");
    Some(format!("{status} {code}: {message}"))
}

/// A short, aligned table of approvals.
pub fn approvals_table(list: &[Value]) -> String {
    let mut rows = vec![[
        "ID".to_owned(),
        "CALL".into(),
        "STATUS".into(),
        "TOOL OR REQUEST".into(),
        "REQUESTER".into(),
        "QUORUM".into(),
        "EXPIRES".into(),
        "RULES".into(),
        "ARGS".into(),
    ]];
    for a in list {
        let s = |k: &str| a.get(k).and_then(Value::as_str).unwrap_or("").to_owned();
        let approvals = a
            .get("decisions")
            .and_then(Value::as_array)
            .map(|d| d.iter().filter(|x| x["decision"] == "approve").count())
            .unwrap_or(0);
        let call = match a.get("kind").and_then(Value::as_str) {
            Some("tool_definition") => "(tool definition)".to_owned(),
            _ => s("call_id"),
        };
        rows.push([
            s("id"),
            call,
            s("status"),
            crate::approvals::subject_of(a).1,
            a.pointer("/requester/principal")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_owned(),
            format!(
                "{approvals}/{}",
                a.get("quorum").and_then(Value::as_u64).unwrap_or(1)
            ),
            s("expires_at"),
            rules_or_errors(a, ","),
            args_text(a),
        ]);
    }
    columns(&rows)
}

/// The rules that decided, or that it was the policy's defaults (no rule matched).
pub fn rules_text(rules: Option<&Value>, sep: &str) -> String {
    let names: Vec<&str> = rules
        .and_then(Value::as_array)
        .map(|r| r.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    if names.is_empty() {
        "(no rule: the defaults)".to_owned()
    } else {
        names.join(sep)
    }
}

/// The rules of an approval, or, when none matched and rules failed to evaluate, those rules
/// named as failed (a failed rule is why the call waits, not the defaults).
fn rules_or_errors(a: &Value, sep: &str) -> String {
    // A changed tool definition is held by its upstream's pin, not by a rule.
    if a.get("kind").and_then(Value::as_str) == Some("tool_definition") {
        return "(definition review)".to_owned();
    }
    let failed = rule_errors(a);
    let matched = a.get("rules").and_then(Value::as_array);
    if matched.is_none_or(|m| m.is_empty()) && !failed.is_empty() {
        let names: Vec<&str> = failed.iter().map(|(r, _)| r.as_str()).collect();
        return format!("(failed: {})", names.join(sep));
    }
    rules_text(a.get("rules"), sep)
}

/// The rules that failed to evaluate for an approval, with their reasons.
fn rule_errors(a: &Value) -> Vec<(String, String)> {
    a.pointer("/explanation/errors")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .map(|e| {
            let text = |k: &str| e.get(k).and_then(Value::as_str).unwrap_or("").to_owned();
            (text("rule"), text("reason"))
        })
        .collect()
}

/// An approval's args on one line, as canonical JSON cut to 60 characters (a review's: the
/// tool whose definition changed), so an approver sees what a call would do in the list.
fn args_text(a: &Value) -> String {
    if a.get("kind").and_then(Value::as_str) == Some("tool_definition") {
        return "(a changed definition)".to_owned();
    }
    let args = a.get("args").map(Value::to_string).unwrap_or_default();
    let mut cut: String = args.chars().take(60).collect();
    if cut.len() < args.len() {
        cut.push('…');
    }
    cut
}

/// Rows as aligned columns, the first row the header.
pub fn columns<const N: usize>(rows: &[[String; N]]) -> String {
    let widths: Vec<usize> = (0..N)
        .map(|c| rows.iter().map(|r| r[c].chars().count()).max().unwrap_or(0))
        .collect();
    rows.iter()
        .map(|r| {
            r.iter()
                .zip(&widths)
                .map(|(cell, w)| format!("{cell:<w$}"))
                .collect::<Vec<_>>()
                .join("  ")
                .trim_end()
                .to_owned()
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// One approval, for people.
pub fn approval_details(a: &Value) -> String {
    let s = |p: &str| {
        a.pointer(p)
            .map(|v| match v {
                Value::String(s) => s.clone(),
                other => other.to_string(),
            })
            .unwrap_or_default()
    };
    let mut rows: Vec<(&str, String)> = vec![
        ("approval", s("/id")),
        ("call", s("/call_id")),
        ("status", s("/status")),
        ("tool", s("/tool")),
        ("args", s("/args")),
        ("fingerprint", s("/fingerprint")),
        ("requester", s("/requester/principal")),
        ("rules", rules_or_errors(a, ", ")),
        (
            "approvers",
            format!(
                "{} (quorum {})",
                approvers_text(a.get("approvers")),
                s("/quorum")
            ),
        ),
        ("created", s("/created_at")),
        ("expires", s("/expires_at")),
    ];
    if a.get("kind").and_then(Value::as_str) == Some("tool_definition") {
        return review_details(a);
    }
    // A held MCP request says what it is where a tool call names its tool, and its params.
    if let Ok(r) = serde_json::from_value::<airlock_policy::OwnedRequest>(a["request"].clone()) {
        rows[3] = ("request", r.subject());
        rows[4].0 = "params";
    }
    for (rule, reason) in rule_errors(a) {
        rows.push(("error", format!("{rule} failed to evaluate: {reason}")));
    }
    if let Some(messages) = a.pointer("/explanation/messages").and_then(Value::as_array) {
        for m in messages {
            rows.push((
                "message",
                format!(
                    "{}: {}",
                    m["rule"].as_str().unwrap_or(""),
                    m["message"].as_str().unwrap_or("")
                ),
            ));
        }
    }
    for d in a
        .get("decisions")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        rows.push((
            "decision",
            format!(
                "{} by {} at {}{}",
                d["decision"].as_str().unwrap_or(""),
                d["by"].as_str().unwrap_or(""),
                d["at"].as_str().unwrap_or(""),
                d["reason"]
                    .as_str()
                    .map(|r| format!(": {r}"))
                    .unwrap_or_default()
            ),
        ));
    }
    let width = rows.iter().map(|(k, _)| k.len()).max().unwrap_or(0);
    rows.iter()
        .map(|(k, v)| format!("{k:<width$}  {v}"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// A tool definition's review, for people: the upstream, the fingerprints, and the old
/// definition against the new, line by line.
fn review_details(a: &Value) -> String {
    let s = |p: &str| match a.pointer(p) {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Null) | None => "-".into(),
        Some(other) => other.to_string(),
    };
    let mut out = vec![
        format!("approval     {} (a tool definition's review)", s("/id")),
        format!("status       {}", s("/status")),
        format!(
            "tool         {} (`{}` of MCP server `{}`)",
            s("/tool"),
            s("/args/tool"),
            s("/args/server")
        ),
        format!("pinned       {}", s("/args/old_fingerprint")),
        format!("listed       {}", s("/args/new_fingerprint")),
        format!("reviewers    {}", approvers_text(a.get("approvers"))),
        format!("expires      {}", s("/expires_at")),
    ];
    for d in a
        .get("decisions")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        out.push(format!(
            "decision     {} by {} at {}{}",
            d["decision"].as_str().unwrap_or(""),
            d["by"].as_str().unwrap_or(""),
            d["at"].as_str().unwrap_or(""),
            d["reason"]
                .as_str()
                .map(|r| format!(": {r}"))
                .unwrap_or_default()
        ));
    }
    out.push(String::new());
    out.push("the pinned definition (-) against the one listed (+):".into());
    out.push(crate::diff::unified(&a["args"]["old"], &a["args"]["new"]));
    out.join("\n")
}

/// A tool call's answer, for people; `url_flag` is what the printed follow-up command needs to
/// reach the same gateway (see `Remote::url_flag`).
pub fn call_summary(status: u16, body: &Value, url_flag: &str) -> String {
    if let Some(line) = refusal_line(status, body) {
        return line;
    }
    match status {
        202 if body["status"] == "suspended" => format!(
            "202 suspended: the tool asks for input\ncall      {}\nasks      {}\nschema    {}\ninbox     {}\nexpires   {}\nanswer with: airlock call --resume {}{url_flag} --data '<JSON>'",
            body["call_id"].as_str().unwrap_or(""),
            body.pointer("/suspend/payload").map(|v| v.to_string()).unwrap_or_default(),
            body.pointer("/suspend/resume_schema").map(|v| v.to_string()).unwrap_or_default(),
            body["link"].as_str().unwrap_or(""),
            body["expires_at"].as_str().unwrap_or(""),
            body["call_id"].as_str().unwrap_or(""),
        ),
        202 => format!(
            "202 held for approval\ncall      {}\napproval  {}\ninbox     {}\napprovers {} (quorum {})\nexpires   {}\nresume with: airlock call --resume {}{url_flag}",
            body["call_id"].as_str().unwrap_or(""),
            body.pointer("/approval/id").and_then(Value::as_str).unwrap_or(""),
            body.pointer("/approval/link").and_then(Value::as_str).unwrap_or(""),
            approvers_text(body.pointer("/approval/approvers")),
            body.pointer("/approval/quorum").map(|v| v.to_string()).unwrap_or_default(),
            body.pointer("/approval/expires_at").and_then(Value::as_str).unwrap_or(""),
            body["call_id"].as_str().unwrap_or(""),
        ),
        _ => format!(
            "{status} {}\ncall      {}\nupstream  {}\nresult    {}",
            body["status"].as_str().unwrap_or(""),
            body["call_id"].as_str().unwrap_or(""),
            body["upstream_status"],
            body["result"]
        ),
    }
}

/// The body of `POST /v1/calls`.
pub fn call_body(tool: &str, args: Value, context: Option<Value>) -> Value {
    let mut b = json!({"tool": tool, "args": args});
    if let Some(c) = context {
        b["context"] = c;
    }
    b
}

/// Who may decide, as the inbox says it: the groups named, or "any approver" when none is.
fn approvers_text(approvers: Option<&Value>) -> String {
    let names: Vec<&str> = approvers
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect();
    if names.is_empty() {
        "any approver".to_owned()
    } else {
        format!("the groups {}", names.join(", "))
    }
}
