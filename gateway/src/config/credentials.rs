//! `credentials = { kind = … }` on a `[[tools]]` route or an `[[mcp_servers]]` entry: what
//! airlock attaches to the requests it sends that upstream, so that the agent never holds the
//! upstream's secret. Read and checked here; fetched and cached by [`crate::credentials`].
//!
//! - `static`: headers (values may be `env:` references), as `headers` always were;
//! - `client_credentials`: OAuth 2.0 client credentials (RFC 6749 §4.4), the token endpoint
//!   given (`token_url`) or discovered from `issuer` (RFC 8414), `resource` per RFC 8707;
//! - `token_exchange`: RFC 8693, the calling agent's verified JWT as the subject token, so the
//!   upstream learns whose call it runs (HTTP tools only).

use std::collections::BTreeMap;

use serde::Deserialize;

use super::{err, secret, ConfigError};

/// The credential an upstream gets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Credentials {
    /// Fixed headers, the same for every call.
    Static { headers: Vec<(String, String)> },
    /// A token from an OAuth authorization server.
    OAuth(OAuthClient),
}

/// Which grant airlock uses at the token endpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Grant {
    ClientCredentials,
    TokenExchange,
}

impl Grant {
    pub fn as_str(self) -> &'static str {
        match self {
            Grant::ClientCredentials => "client_credentials",
            Grant::TokenExchange => "token_exchange",
        }
    }
}

/// airlock as an OAuth client of one upstream's authorization server.
#[derive(Clone, PartialEq, Eq)]
pub struct OAuthClient {
    pub grant: Grant,
    /// The token endpoint, or the issuer whose metadata names it.
    pub endpoint: Endpoint,
    pub client_id: String,
    /// Never printed (`Debug` leaves it out).
    pub client_secret: String,
    pub scopes: Vec<String>,
    /// RFC 8707 `resource`.
    pub resource: Option<String>,
    /// RFC 8693 `audience` (token exchange).
    pub audience: Option<String>,
}

impl std::fmt::Debug for OAuthClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OAuthClient")
            .field("grant", &self.grant)
            .field("endpoint", &self.endpoint)
            .field("client_id", &self.client_id)
            .field("scopes", &self.scopes)
            .field("resource", &self.resource)
            .field("audience", &self.audience)
            .finish_non_exhaustive()
    }
}

/// Where the token endpoint is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Endpoint {
    TokenUrl(String),
    /// Discovered from `<issuer>/.well-known/oauth-authorization-server` (RFC 8414), else
    /// `<issuer>/.well-known/openid-configuration`.
    Issuer(String),
}

#[derive(Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub(super) enum RawCredentials {
    Static(RawStatic),
    ClientCredentials(RawOAuth),
    TokenExchange(RawOAuth),
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawStatic {
    headers: BTreeMap<String, String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawOAuth {
    token_url: Option<String>,
    issuer: Option<String>,
    client_id: String,
    client_secret: String,
    #[serde(default)]
    scopes: Vec<String>,
    resource: Option<String>,
    audience: Option<String>,
}

/// Checks `raw` under the config key `key` (`tools[0].credentials`).
pub(super) fn validate(key: &str, raw: RawCredentials) -> Result<Credentials, ConfigError> {
    let (grant, o) = match raw {
        RawCredentials::Static(s) => {
            let mut headers = Vec::new();
            for (h, v) in s.headers {
                if hyper::header::HeaderName::from_bytes(h.as_bytes()).is_err() {
                    return Err(err(
                        format!("{key}.headers"),
                        format!("`{h}` is not a header name"),
                    ));
                }
                let value = secret(&format!("{key}.headers.{h}"), &v)?;
                // Checked here, so a call never goes out without a header that did not parse.
                if hyper::header::HeaderValue::from_str(&value).is_err() {
                    return Err(err(
                        format!("{key}.headers.{h}"),
                        "is not a valid header value",
                    ));
                }
                headers.push((h.clone(), value));
            }
            return Ok(Credentials::Static { headers });
        }
        RawCredentials::ClientCredentials(o) => (Grant::ClientCredentials, o),
        RawCredentials::TokenExchange(o) => (Grant::TokenExchange, o),
    };
    let url = |k: &str, v: String| -> Result<String, ConfigError> {
        let ok = v.starts_with("https://") || v.starts_with("http://");
        if !ok || reqwest::Url::parse(&v).is_err() {
            return Err(err(format!("{key}.{k}"), "must be an http(s) URL"));
        }
        Ok(v.trim_end_matches('/').to_owned())
    };
    let endpoint = match (o.token_url, o.issuer) {
        (Some(t), None) => Endpoint::TokenUrl(url("token_url", t)?),
        (None, Some(i)) => Endpoint::Issuer(url("issuer", i)?),
        _ => {
            return Err(err(
                key,
                "give the token endpoint as exactly one of `token_url` and `issuer`",
            ))
        }
    };
    if grant == Grant::ClientCredentials && o.audience.is_some() {
        return Err(err(
            format!("{key}.audience"),
            "`audience` is for `token_exchange`; client credentials name the upstream by `resource`",
        ));
    }
    Ok(Credentials::OAuth(OAuthClient {
        grant,
        endpoint,
        client_id: o.client_id,
        client_secret: secret(&format!("{key}.client_secret"), &o.client_secret)?,
        scopes: o.scopes,
        resource: o.resource,
        audience: o.audience,
    }))
}
