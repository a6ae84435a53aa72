//! The `[email]` table (DESIGN §22): where approval mail goes out (an SMTP server, with
//! STARTTLS for `smtp://` or TLS from the first byte for `smtps://`; never in the clear), who
//! it comes from, and the addresses of each approver group. Checked here; mail is built and
//! sent by [`crate::email`].

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::Deserialize;

use super::{err, secret, ConfigError};

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawEmail {
    smtp: String,
    username: Option<String>,
    password: Option<String>,
    ca: Option<PathBuf>,
    from: String,
    #[serde(default)]
    to: BTreeMap<String, Vec<String>>,
}

/// How the connection to the SMTP server is secured.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SmtpTls {
    /// `smtp://`: a plain connection upgraded with STARTTLS before anything is sent; a server
    /// that does not offer it gets nothing.
    StartTls,
    /// `smtps://`: TLS from the first byte.
    Implicit,
}

#[derive(Debug, Clone)]
pub struct EmailConfig {
    pub host: String,
    pub port: u16,
    pub tls: SmtpTls,
    /// Both or neither; from `env:` references.
    pub credentials: Option<(String, String)>,
    /// PEM authorities to trust besides the system's (a private mail server), read once when
    /// the config loads.
    pub ca: Option<Vec<u8>>,
    pub from: String,
    /// Addresses by approver group; `"*"` for approvals any approver may decide.
    pub to: BTreeMap<String, Vec<String>>,
}

fn address_ok(a: &str) -> bool {
    let a = a.trim();
    a.parse::<lettre::Address>().is_ok() || a.parse::<lettre::message::Mailbox>().is_ok()
}

pub(super) fn validate(
    raw: Option<RawEmail>,
    resolve: &dyn Fn(PathBuf) -> PathBuf,
) -> Result<Option<EmailConfig>, ConfigError> {
    let Some(r) = raw else { return Ok(None) };
    let (tls, host, port) = smtp_server(&r.smtp)?;
    let credentials = match (r.username, r.password) {
        (None, None) => None,
        (Some(u), Some(p)) => Some((secret("email.username", &u)?, secret("email.password", &p)?)),
        _ => {
            return Err(err(
                "email.password",
                "give both `username` and `password`, or neither",
            ))
        }
    };
    if !address_ok(&r.from) {
        return Err(err(
            "email.from",
            format!("`{}` is not an email address", r.from),
        ));
    }
    for (group, list) in &r.to {
        if let Some(bad) = list.iter().find(|a| !address_ok(a)) {
            return Err(err(
                format!("email.to.{group}"),
                format!("`{bad}` is not an email address"),
            ));
        }
    }
    if r.to.values().all(Vec::is_empty) {
        return Err(err(
            "email.to",
            "names no address: `to = { finance = [\"fin@corp.example\"], \"*\" = [\"approvers@corp.example\"] }`",
        ));
    }
    let ca = r.ca.map(resolve).map(|p| read_ca(p, &host)).transpose()?;
    Ok(Some(EmailConfig {
        host,
        port,
        tls,
        credentials,
        ca,
        from: r.from,
        to: r.to,
    }))
}

/// `smtp://HOST[:PORT]` (STARTTLS, port 587 by default) or `smtps://HOST[:PORT]` (TLS, 465).
fn smtp_server(smtp: &str) -> Result<(SmtpTls, String, u16), ConfigError> {
    let (tls, rest, default_port) = if let Some(rest) = smtp.strip_prefix("smtp://") {
        (SmtpTls::StartTls, rest, 587)
    } else if let Some(rest) = smtp.strip_prefix("smtps://") {
        (SmtpTls::Implicit, rest, 465)
    } else {
        return Err(err(
            "email.smtp",
            format!(
                "`{}` must be smtp://HOST[:PORT] (STARTTLS) or smtps://HOST[:PORT]",
                smtp
            ),
        ));
    };
    let rest = rest.trim_end_matches('/');
    if rest.contains('@') || rest.contains('/') {
        return Err(err(
            "email.smtp",
            "give the server only (smtp://host:port); credentials go in `username` and `password`",
        ));
    }
    let (host, port) = match rest.rsplit_once(':') {
        Some((h, p)) => (
            h.to_owned(),
            p.parse::<u16>()
                .map_err(|_| err("email.smtp", format!("`{p}` is not a port")))?,
        ),
        None => (rest.to_owned(), default_port),
    };
    if host.is_empty() {
        return Err(err("email.smtp", "names no host"));
    }
    Ok((tls, host, port))
}

/// The PEM authorities of `ca`, read once and checked to be certificates, and not the mail
/// server's own self-signed certificate: TLS refuses a certificate marked as an authority
/// when the server presents it as its own (each send would fail).
fn read_ca(path: PathBuf, host: &str) -> Result<Vec<u8>, ConfigError> {
    let pem =
        std::fs::read(&path).map_err(|e| err("email.ca", format!("{}: {e}", path.display())))?;
    lettre::transport::smtp::client::Certificate::from_pem(&pem).map_err(|e| {
        err(
            "email.ca",
            format!("{}: not a PEM certificate: {e}", path.display()),
        )
    })?;
    for block in x509_parser::pem::Pem::iter_from_buffer(&pem).flatten() {
        let Ok(cert) = block.parse_x509() else {
            continue;
        };
        let self_signed = cert.subject() == cert.issuer();
        if self_signed && cert.is_ca() && names_host(&cert, host) {
            return Err(err(
                "email.ca",
                format!(
                    "{} is a self-signed certificate for {host} that is also marked as an authority (CA:TRUE): the mail server cannot present it as its own, TLS refuses that. Name here the authority that signed the server's certificate, or give the server a certificate of its own (CA:FALSE) signed by the authority named here",
                    path.display()
                ),
            ));
        }
    }
    Ok(pem)
}

/// Whether `cert` is made out to `host`: a DNS name or IP address of its subject alternative
/// names, or, without those, its common name.
fn names_host(cert: &x509_parser::certificate::X509Certificate<'_>, host: &str) -> bool {
    use x509_parser::extensions::GeneralName;
    let ip: Option<std::net::IpAddr> = host.parse().ok();
    match cert.subject_alternative_name() {
        Ok(Some(san)) => san.value.general_names.iter().any(|n| match n {
            GeneralName::DNSName(d) => d.eq_ignore_ascii_case(host),
            GeneralName::IPAddress(b) => match (ip, b.len()) {
                (Some(std::net::IpAddr::V4(v4)), 4) => v4.octets() == **b,
                (Some(std::net::IpAddr::V6(v6)), 16) => v6.octets() == **b,
                _ => false,
            },
            _ => false,
        }),
        _ => cert
            .subject()
            .iter_common_name()
            .any(|cn| cn.as_str().is_ok_and(|c| c.eq_ignore_ascii_case(host))),
    }
}
