//! Approval mail (DESIGN §22): when an approval is requested, a mail to the addresses of its
//! approver groups (`[email] to`), put in the durable outbox with the approval in the same
//! batch, then sent over SMTP (STARTTLS or TLS, through `lettre`) by the delivery worker, with
//! retries.
//!
//! A mail is plain text and HTML: the tool, the requester, the rules, the canonical args as
//! text (redacted as the audit log redacts them; never markup), the time left, and the link to
//! the approval's inbox page. It carries no credential and no link that acts: the page asks
//! the approver to sign in, and only a form posted from it decides (mail scanners open every
//! link they see).
//!
//! It does not decide who may approve (the groups are the approval's), nor lease or retry
//! deliveries (the worker does, [`crate::deliveries`]).

use std::time::Duration;

use airlock_storage::{Kind, NewDelivery};
use lettre::message::{header::ContentType, Mailbox, MultiPart, SinglePart};
use lettre::transport::smtp::authentication::Credentials;
use lettre::transport::smtp::client::{Certificate, Tls, TlsParameters};
use lettre::{AsyncSmtpTransport, AsyncTransport, Message, Tokio1Executor};
use maud::html;
use serde_json::{json, Value};

use crate::config::{EmailConfig, SmtpTls};

/// The outbox target of a mail to `address`.
pub const TARGET: &str = "email:";

/// When a failed mail is tried again: after 1 s, 5 s, 30 s, 2 min, 10 min and 1 h; then it is
/// dead-lettered.
pub const RETRIES: [Duration; 6] = [
    Duration::from_secs(1),
    Duration::from_secs(5),
    Duration::from_secs(30),
    Duration::from_secs(120),
    Duration::from_secs(600),
    Duration::from_secs(3600),
];

/// The mails an event sends: for `approval.requested`, one per address of the approval's
/// groups (`"*"` when any approver may decide). `data` is the approval as events carry it,
/// already redacted.
pub fn deliveries_for(email: &EmailConfig, kind: Kind, data: &Value) -> Vec<NewDelivery> {
    if !matches!(kind, Kind::ApprovalRequested | Kind::ApprovalSummary) {
        return Vec::new();
    }
    let groups: Vec<&str> = data["approvers"]
        .as_array()
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let mut to: Vec<&str> = if groups.is_empty() {
        email
            .to
            .get("*")
            .map(|v| v.iter().map(String::as_str).collect())
            .unwrap_or_default()
    } else {
        groups
            .iter()
            .filter_map(|g| email.to.get(*g))
            .flatten()
            .map(String::as_str)
            .collect()
    };
    to.sort_unstable();
    to.dedup();
    let (subject, text, html) = if kind == Kind::ApprovalSummary {
        compose_summary(data)
    } else {
        compose(data)
    };
    to.into_iter()
        .map(|addr| NewDelivery {
            webhook: format!("{TARGET}{addr}"),
            event: kind.as_str().to_owned(),
            payload: json!({"to": addr, "subject": subject, "text": text, "html": html})
                .to_string(),
        })
        .collect()
}

/// One line of text: no line breaks (a header must not be split), at most 200 characters.
fn line(s: &str) -> String {
    s.chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .take(200)
        .collect()
}

/// The subject, text and HTML of a summary (`approval.summary`): a principal's approvals
/// beyond ten a minute, each named with its inbox page.
fn compose_summary(s: &Value) -> (String, String, String) {
    let principal = line(s["principal"].as_str().unwrap_or(""));
    let count = s["count"].as_u64().unwrap_or(0);
    let since = line(s["since"].as_str().unwrap_or(""));
    let links: Vec<(String, String)> = s["approval_ids"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .zip(
            s["links"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(Value::as_str),
        )
        .map(|(id, link)| (line(id), line(link)))
        .collect();
    let subject = format!("[airlock] {count} more approvals requested by {principal}");
    let what = format!(
        "{principal} asked for {count} more approvals since {since}: more than ten a minute, so they are sent as one summary."
    );
    let text = format!(
        "{what}\n\n{}\nEach waits in the inbox; to decide, open it and sign in. An admin can decline every pending call of {principal} at once.\n\nThis mail decides nothing by itself.\n",
        links
            .iter()
            .map(|(id, link)| format!("{id}: {link}\n"))
            .collect::<String>()
    );
    let html = html! {
        p { (what) }
        ul { @for (id, link) in &links { li { a href=(link) { (id) } } } }
        p { "Each waits in the inbox; to decide, open it and sign in. An admin can decline every pending call of " (principal) " at once." }
        p { small { "This mail decides nothing by itself." } }
    }
    .into_string();
    (subject, text, html)
}

/// The subject, text and HTML of an approval's mail.
fn compose(a: &Value) -> (String, String, String) {
    let s = |k: &str| a.get(k).and_then(Value::as_str).unwrap_or("");
    let (kind, subject) = crate::approvals::subject_of(a);
    let tool = line(&subject);
    let requester = line(a["requester"]["principal"].as_str().unwrap_or(""));
    let review = s("kind") == "tool_definition";
    let subject = if review {
        format!("[airlock] Review the changed definition of {tool}")
    } else {
        format!("[airlock] Approval needed: {tool} for {requester}")
    };
    let args = serde_json::to_string_pretty(&a["args"]).unwrap_or_default();
    let rules: Vec<&str> = a["rules"]
        .as_array()
        .map(|r| r.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let rules = crate::approvals::rules_line(&rules, &a["explanation"]);
    let messages: Vec<&str> = a["explanation"]["messages"]
        .as_array()
        .map(|m| m.iter().filter_map(|m| m["message"].as_str()).collect())
        .unwrap_or_default();
    let link = a["links"]["inbox"].as_str().unwrap_or("");
    let expires = s("expires_at");
    let quorum = a["quorum"].as_u64().unwrap_or(1);
    let what = if review {
        "An MCP tool's definition changed and waits for a reviewer.".to_owned()
    } else {
        format!("A {} is held until an approver decides.", kind.noun())
    };
    let label = kind.label();
    let text = format!(
        "{what}\n\n{label}: {tool}\nRequested by: {requester}\nRules: {rules}\n{}Approvals needed: {quorum}\nExpires: {expires}\n\nArguments (canonical JSON):\n{args}\n\nTo decide, open the approval in the inbox and sign in:\n{link}\n\nThis mail decides nothing by itself: only a person signed in to the inbox can approve or decline.\n",
        messages
            .iter()
            .map(|m| format!("Why: {}\n", line(m)))
            .collect::<String>(),
    );
    let html = html! {
        p { (what) }
        table {
            tr { th align="left" { (label) } td { code { (tool) } } }
            tr { th align="left" { "Requested by" } td { (requester) } }
            tr { th align="left" { "Rules" } td { (rules) } }
            @for m in &messages { tr { th align="left" { "Why" } td { (m) } } }
            tr { th align="left" { "Approvals needed" } td { (quorum) } }
            tr { th align="left" { "Expires" } td { (expires) } }
        }
        p { "Arguments (canonical JSON):" }
        pre { (args) }
        p { a href=(link) { "Open the approval in the inbox" } " and sign in to decide." }
        p { small { "This mail decides nothing by itself: only a person signed in to the inbox can approve or decline." } }
    }
    .into_string();
    (subject, text, html)
}

/// Sends one mail of the outbox (delivery `id`, stable across retries: the mail's
/// `Message-ID`, so a mail sent twice reads as one); the error says why it did not go.
pub async fn send(email: &EmailConfig, id: &str, payload: &str) -> Result<(), String> {
    let p: Value =
        serde_json::from_str(payload).map_err(|e| format!("a mail that does not read: {e}"))?;
    let field = |k: &str| p.get(k).and_then(Value::as_str).unwrap_or("").to_owned();
    let from: Mailbox = email.from.parse().map_err(|e| format!("from: {e}"))?;
    let to: Mailbox = field("to").parse().map_err(|e| format!("to: {e}"))?;
    let message = Message::builder()
        .message_id(Some(message_id(id, &from)))
        .from(from)
        .to(to)
        .subject(field("subject"))
        .multipart(
            MultiPart::alternative()
                .singlepart(
                    SinglePart::builder()
                        .header(ContentType::TEXT_PLAIN)
                        .body(field("text")),
                )
                .singlepart(
                    SinglePart::builder()
                        .header(ContentType::TEXT_HTML)
                        .body(field("html")),
                ),
        )
        .map_err(|e| format!("cannot build the mail: {e}"))?;
    transport(email)?
        .send(message)
        .await
        .map(|_| ())
        .map_err(|e| format!("SMTP {}:{}: {}", email.host, email.port, in_words(&e)))
}

/// `<{id}@{the sender's domain}>`, with only the characters RFC 5322 allows in a message id.
fn message_id(id: &str, from: &Mailbox) -> String {
    let id: String = id
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        .collect();
    format!("<{}.airlock@{}>", id.trim_matches('.'), from.email.domain())
}

/// A send's error, with what TLS's certificate checks mean said in words (the TLS library
/// names them as Rust values, such as `CaUsedAsEndEntity`).
fn in_words(e: &lettre::transport::smtp::Error) -> String {
    let mut text = e.to_string();
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        let more = s.to_string();
        if !text.contains(&more) {
            text = format!("{text}: {more}");
        }
        source = s.source();
    }
    const WORDS: [(&str, &str); 6] = [
        ("CaUsedAsEndEntity", "the server presents a certificate marked as an authority (CA:TRUE) as its own, which TLS refuses: give the server a certificate of its own signed by the authority in `[email] ca`"),
        ("UnknownIssuer", "the server's certificate is not signed by an authority airlock trusts: name its authority in `[email] ca`"),
        ("NotValidForName", "the server's certificate is not made out to the host in `[email] smtp`"),
        ("Expired", "the server's certificate has expired"),
        ("NotValidYet", "the server's certificate is not valid yet (is this machine's clock right?)"),
        ("BadSignature", "the server's certificate does not verify against its authority"),
    ];
    match WORDS.iter().find(|(name, _)| text.contains(name)) {
        Some((_, words)) => format!("{words} ({text})"),
        None => text,
    }
}

/// The SMTP transport `[email]` describes: TLS required, with the extra authorities of `ca`.
fn transport(email: &EmailConfig) -> Result<AsyncSmtpTransport<Tokio1Executor>, String> {
    let mut params = TlsParameters::builder(email.host.clone());
    if let Some(pem) = &email.ca {
        let cert = Certificate::from_pem(pem).map_err(|e| format!("[email] ca: {e}"))?;
        params = params.add_root_certificate(cert);
    }
    let params = params
        .build_rustls()
        .map_err(|e| format!("TLS settings: {e}"))?;
    let tls = match email.tls {
        SmtpTls::StartTls => Tls::Required(params),
        SmtpTls::Implicit => Tls::Wrapper(params),
    };
    let mut builder = AsyncSmtpTransport::<Tokio1Executor>::builder_dangerous(email.host.clone())
        .port(email.port)
        .tls(tls)
        .timeout(Some(Duration::from_secs(30)));
    if let Some((user, pass)) = &email.credentials {
        builder = builder.credentials(Credentials::new(user.clone(), pass.clone()));
    }
    Ok(builder.build())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hostile_args_are_text_and_the_subject_is_one_line() {
        let a = json!({
            "tool": "db.query", "kind": "call", "requester": {"principal": "agent\r\nBcc: x@evil"},
            "args": {"sql": "<script>alert(1)</script><a href=\"https://evil\">click</a>"},
            "rules": ["approve-db"], "quorum": 1, "expires_at": "2026-12-05T00:00:00Z",
            "explanation": {"messages": [{"message": "needs a <b>DBA</b>"}]},
            "links": {"inbox": "https://airlock.example/inbox/approvals/apr_1"},
        });
        let (subject, text, html) = compose(&a);
        assert!(
            !subject.contains('\n') && !subject.contains('\r'),
            "{subject}"
        );
        assert!(
            text.contains("<script>alert(1)</script>"),
            "the text is the args as they are"
        );
        assert!(
            !html.contains("<script>") && html.contains("&lt;script&gt;"),
            "{html}"
        );
        assert!(
            !html.contains("href=\\\"https://evil") && !html.contains("<a href=\"https://evil"),
            "{html}"
        );
        assert!(html.contains("needs a &lt;b&gt;DBA&lt;/b&gt;"), "{html}");
        assert!(html.contains("href=\"https://airlock.example/inbox/approvals/apr_1\""));
        // The only link is the inbox page.
        assert_eq!(html.matches("<a ").count(), 1);
    }

    #[test]
    fn a_held_mcp_request_is_named_as_what_it_is() {
        let a = json!({
            "tool": "", "kind": "call", "requester": {"principal": "agent1"},
            "request": {"kind": "resource", "server": "fs", "uri": "file:///etc/shadow", "prompt": null},
            "args": {"uri": "file:///etc/shadow"}, "rules": ["hold-secret-resources"], "quorum": 1,
            "links": {"inbox": "https://airlock.example/inbox/approvals/apr_1"},
        });
        let (subject, text, html) = compose(&a);
        assert_eq!(
            subject,
            "[airlock] Approval needed: resource file:///etc/shadow (fs) for agent1"
        );
        assert!(text.starts_with("A resource read is held until an approver decides.\n\nResource: resource file:///etc/shadow (fs)\n"), "{text}");
        assert!(html.contains("<th align=\"left\">Resource</th>"), "{html}");
    }
}
