//! The credentials airlock holds for its upstreams, attached to a request only after policy
//! allowed it or a person approved it: OAuth client credentials (RFC 6749 §4.4, through the
//! `oauth2` crate) and RFC 8693 token exchange (a form POST of our own: the crate has no such
//! grant), each token cached per (upstream, subject) until shortly before it expires, and
//! fetched once for all the calls that need it at the same moment.
//!
//! It does not decide anything, keep anything on disk (tokens live in memory, fetched again
//! after a restart), nor forward an agent's own token: the agent's JWT is read only as the
//! subject of an exchange ([`SUBJECT`]). Which upstream needs what is the config's
//! ([`crate::config::Credentials`]); the backends ask here before they send.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use hyper::header::HeaderValue;
use oauth2::{AuthType, ClientId, ClientSecret, Scope, TokenResponse, TokenUrl};
use prometheus::IntCounterVec;
use serde_json::Value;

use crate::config::{Endpoint, Grant, OAuthClient};
use crate::error::{ApiError, Code};

/// A token is fetched again this long before it expires (or at half its life, if shorter).
const EARLY: Duration = Duration::from_secs(30);

/// How long a caller is told to wait after the token endpoint failed.
const RETRY_AFTER_SECS: u64 = 5;

/// RFC 8693's token types.
const JWT_TYPE: &str = "urn:ietf:params:oauth:token-type:jwt";
const ACCESS_TOKEN_TYPE: &str = "urn:ietf:params:oauth:token-type:access_token";

/// The caller whose verified JWT is the subject of a token exchange: set by the front ends
/// around a request that a JWT authenticated; never stored, never sent on.
pub struct Subject {
    pub principal: String,
    pub jwt: String,
}

tokio::task_local! {
    /// The subject of the request being served, when a JWT authenticated it.
    pub static SUBJECT: Arc<Subject>;
}

/// The request's subject: `principal`, when the JWT in `headers` authenticated it (a static
/// token names none).
pub fn subject_of(
    principal: &airlock_storage::Principal,
    headers: &hyper::HeaderMap,
) -> Option<Arc<Subject>> {
    if !principal.auth.as_ref().is_some_and(|a| a["kind"] == "jwt") {
        return None;
    }
    let jwt = headers
        .get(hyper::header::AUTHORIZATION)?
        .to_str()
        .ok()?
        .strip_prefix("Bearer ")?
        .trim();
    Some(Arc::new(Subject {
        principal: principal.id.clone(),
        jwt: jwt.to_owned(),
    }))
}

/// Tokens by (upstream, subject), and the token endpoints discovered by issuer.
pub struct Vault {
    http: reqwest::Client,
    /// By upstream, then subject (`""` for client credentials): looked up without allocating.
    tokens: Mutex<HashMap<String, HashMap<String, Slot>>>,
    endpoints: tokio::sync::Mutex<HashMap<String, String>>,
    /// `airlock_credential_requests_total{upstream, kind, result}`.
    requests: IntCounterVec,
}

/// One (upstream, subject)'s token: whoever holds the lock fetches it, the rest wait and
/// find it. Its counters are resolved once, not by label on every call.
type Slot = Arc<SlotInner>;

struct SlotInner {
    cached: tokio::sync::Mutex<Cached>,
    /// `airlock_credential_requests_total` for `cached`, `fetched`, `failed`.
    counts: [prometheus::IntCounter; 3],
}

#[derive(Default)]
struct Cached {
    token: Option<(HeaderValue, Instant)>,
    /// The last failure and until when it answers for the endpoint: the calls that waited on
    /// a fetch that failed fail with it, not each with a fetch of its own.
    failed: Option<(Instant, ApiError, Option<String>)>,
}

/// How long a failed fetch answers for its token endpoint.
const FAILURE_HOLDS: Duration = Duration::from_secs(1);

/// Why no credential: said in words, with the provider's error code when it gave one.
#[derive(Debug)]
pub struct Refused {
    pub error: ApiError,
    /// The token endpoint's `error` (`invalid_client`, `invalid_grant`, …), for the audit.
    pub provider_error: Option<String>,
}

impl Refused {
    /// The refusal as the caller gets it, the provider's error code in `details`.
    pub fn into_api_error(self) -> ApiError {
        match self.provider_error {
            Some(p) => self
                .error
                .with_details(serde_json::json!({"provider_error": p})),
            None => self.error,
        }
    }
}

impl Vault {
    pub fn new(requests: IntCounterVec) -> Result<Vault, String> {
        let tls = airlock_storage::tls_client_config(None)
            .map_err(|e| format!("cannot set up TLS to token endpoints: {e}"))?;
        let http = reqwest::Client::builder()
            .use_preconfigured_tls(tls)
            .redirect(reqwest::redirect::Policy::none())
            .timeout(Duration::from_secs(10))
            .build()
            .map_err(|e| format!("cannot build the token endpoints' client: {e}"))?;
        Ok(Vault {
            http,
            tokens: Mutex::new(HashMap::new()),
            endpoints: tokio::sync::Mutex::new(HashMap::new()),
            requests,
        })
    }

    /// The `Authorization` value for a request to `upstream` under `client`: cached, or
    /// fetched once for everyone waiting. A token exchange is for the request's [`SUBJECT`],
    /// who must be `principal` (the call's requester).
    pub async fn authorization(
        &self,
        upstream: &str,
        client: &OAuthClient,
        principal: &str,
    ) -> Result<HeaderValue, Refused> {
        let subject = match client.grant {
            Grant::ClientCredentials => None,
            Grant::TokenExchange => match SUBJECT.try_with(Arc::clone) {
                Ok(s) if s.principal == principal => Some(s),
                _ => {
                    self.count(upstream, client, "no_subject");
                    return Err(Refused {
                        error: ApiError::new(
                            Code::CredentialsNoSubject,
                            format!("`{upstream}` is called on behalf of the caller (token exchange), and this call was not made with `{principal}`'s own JWT: a static token names no subject"),
                        ),
                        provider_error: None,
                    });
                }
            },
        };
        let who = subject.as_ref().map_or("", |s| s.principal.as_str());
        let slot = self.slot(upstream, client, who);
        // One fetch per key at a time: whoever waits here finds the token the first one got.
        let mut cached = slot.cached.lock().await;
        let [counted_cached, counted_fetched, counted_failed] = &slot.counts;
        let now = Instant::now();
        if let Some((header, _)) = cached.token.as_ref().filter(|(_, at)| now < *at) {
            counted_cached.inc();
            return Ok(header.clone());
        }
        if let Some((_, error, provider_error)) =
            cached.failed.as_ref().filter(|(until, ..)| now < *until)
        {
            counted_failed.inc();
            return Err(Refused {
                error: error.clone(),
                provider_error: provider_error.clone(),
            });
        }
        let fetched = self.fetch(upstream, client, subject.as_deref()).await;
        if fetched.is_ok() {
            counted_fetched.inc()
        } else {
            counted_failed.inc()
        }
        let (token, lifetime) = match fetched {
            Ok(t) => t,
            Err(r) => {
                cached.failed = Some((
                    Instant::now() + FAILURE_HOLDS,
                    r.error.clone(),
                    r.provider_error.clone(),
                ));
                return Err(r);
            }
        };
        let mut header = HeaderValue::from_str(&format!("Bearer {token}")).map_err(|_| {
            unavailable(
                upstream,
                "the token endpoint gave a token that is not a header value",
                None,
            )
        })?;
        header.set_sensitive(true);
        let early = EARLY.min(lifetime / 2);
        *cached = Cached {
            token: Some((
                header.clone(),
                Instant::now() + lifetime.saturating_sub(early),
            )),
            failed: None,
        };
        Ok(header)
    }

    /// The slot of (`upstream`, `subject`), made on first use.
    fn slot(&self, upstream: &str, client: &OAuthClient, subject: &str) -> Slot {
        let mut tokens = self.tokens.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(slot) = tokens.get(upstream).and_then(|m| m.get(subject)) {
            return slot.clone();
        }
        let counter = |result| {
            self.requests
                .with_label_values(&[upstream, client.grant.as_str(), result])
        };
        let slot = Arc::new(SlotInner {
            cached: Default::default(),
            counts: [counter("cached"), counter("fetched"), counter("failed")],
        });
        tokens
            .entry(upstream.to_owned())
            .or_default()
            .insert(subject.to_owned(), slot.clone());
        slot
    }

    fn count(&self, upstream: &str, client: &OAuthClient, result: &str) {
        self.requests
            .with_label_values(&[upstream, client.grant.as_str(), result])
            .inc();
    }

    /// A new token and how long it lives.
    async fn fetch(
        &self,
        upstream: &str,
        client: &OAuthClient,
        subject: Option<&Subject>,
    ) -> Result<(String, Duration), Refused> {
        let token_url = self.token_url(upstream, &client.endpoint).await?;
        match subject {
            None => self.client_credentials(upstream, client, &token_url).await,
            Some(s) => self.exchange(upstream, client, &token_url, s).await,
        }
    }

    /// RFC 6749 §4.4 through the `oauth2` crate, with RFC 8707's `resource`.
    async fn client_credentials(
        &self,
        upstream: &str,
        client: &OAuthClient,
        token_url: &str,
    ) -> Result<(String, Duration), Refused> {
        let url = TokenUrl::new(token_url.to_owned()).map_err(|e| {
            unavailable(
                upstream,
                &format!("the token endpoint `{token_url}` is not a URL: {e}"),
                None,
            )
        })?;
        let oauth = oauth2::basic::BasicClient::new(ClientId::new(client.client_id.clone()))
            .set_client_secret(ClientSecret::new(client.client_secret.clone()))
            .set_auth_type(AuthType::BasicAuth)
            .set_token_uri(url);
        let mut request = oauth.exchange_client_credentials();
        for s in &client.scopes {
            request = request.add_scope(Scope::new(s.clone()));
        }
        if let Some(r) = &client.resource {
            request = request.add_extra_param("resource", r.clone());
        }
        match request.request_async(&OAuthHttp(self.http.clone())).await {
            Ok(t) => Ok((
                t.access_token().secret().clone(),
                t.expires_in().unwrap_or(Duration::from_secs(300)),
            )),
            Err(oauth2::RequestTokenError::ServerResponse(e)) => {
                let code = e.error().to_string();
                let why = match e.error_description() {
                    Some(d) => format!("{code}: {d}"),
                    None => code.clone(),
                };
                Err(unavailable(
                    upstream,
                    &format!("the token endpoint refused: {why}"),
                    Some(code),
                ))
            }
            Err(e) => Err(unavailable(upstream, &words(&e), None)),
        }
    }

    /// RFC 8693: the caller's JWT as `subject_token`, airlock's client authenticating.
    async fn exchange(
        &self,
        upstream: &str,
        client: &OAuthClient,
        token_url: &str,
        subject: &Subject,
    ) -> Result<(String, Duration), Refused> {
        let mut form: Vec<(&str, &str)> = vec![
            (
                "grant_type",
                "urn:ietf:params:oauth:grant-type:token-exchange",
            ),
            ("subject_token", &subject.jwt),
            ("subject_token_type", JWT_TYPE),
            ("requested_token_type", ACCESS_TOKEN_TYPE),
        ];
        let scope = client.scopes.join(" ");
        if !scope.is_empty() {
            form.push(("scope", &scope));
        }
        if let Some(a) = &client.audience {
            form.push(("audience", a));
        }
        if let Some(r) = &client.resource {
            form.push(("resource", r));
        }
        let body = form_urlencoded::Serializer::new(String::new())
            .extend_pairs(&form)
            .finish();
        let sent = self
            .http
            .post(token_url)
            .basic_auth(
                form_encoded(&client.client_id),
                Some(form_encoded(&client.client_secret)),
            )
            .header(hyper::header::ACCEPT, "application/json")
            .header(
                hyper::header::CONTENT_TYPE,
                "application/x-www-form-urlencoded",
            )
            .body(body)
            .send()
            .await
            .map_err(|e| {
                unavailable(
                    upstream,
                    &format!("the token endpoint did not answer: {}", e.without_url()),
                    None,
                )
            })?;
        let status = sent.status();
        let body: Value = sent.json().await.map_err(|_| {
            unavailable(
                upstream,
                &format!("the token endpoint answered {status} without JSON"),
                None,
            )
        })?;
        let text = |k: &str| body.get(k).and_then(Value::as_str);
        if !status.is_success() {
            let code = text("error").unwrap_or("unknown").to_owned();
            let why = match text("error_description") {
                Some(d) => format!("{code}: {d}"),
                None => code.clone(),
            };
            return Err(unavailable(
                upstream,
                &format!("the token endpoint refused the exchange: {why}"),
                Some(code),
            ));
        }
        let token = text("access_token")
            .filter(|_| text("token_type").is_some_and(|t| t.eq_ignore_ascii_case("bearer")))
            .ok_or_else(|| {
                unavailable(
                    upstream,
                    "the token endpoint's answer has no bearer `access_token`",
                    None,
                )
            })?;
        let lifetime = body
            .get("expires_in")
            .and_then(Value::as_u64)
            .map_or(Duration::from_secs(300), Duration::from_secs);
        Ok((token.to_owned(), lifetime))
    }

    /// The token endpoint: given, or from the issuer's metadata (RFC 8414, then OpenID
    /// discovery), read once.
    async fn token_url(&self, upstream: &str, endpoint: &Endpoint) -> Result<String, Refused> {
        let issuer = match endpoint {
            Endpoint::TokenUrl(u) => return Ok(u.clone()),
            Endpoint::Issuer(i) => i,
        };
        let mut known = self.endpoints.lock().await;
        if let Some(u) = known.get(issuer) {
            return Ok(u.clone());
        }
        for path in [
            "/.well-known/oauth-authorization-server",
            "/.well-known/openid-configuration",
        ] {
            let Ok(r) = self.http.get(format!("{issuer}{path}")).send().await else {
                continue;
            };
            if !r.status().is_success() {
                continue;
            }
            let Ok(meta) = r.json::<Value>().await else {
                continue;
            };
            // RFC 8414 §3.3: the metadata's issuer is the one asked for, exactly.
            if meta["issuer"].as_str().map(|i| i.trim_end_matches('/')) != Some(issuer.as_str()) {
                continue;
            }
            if let Some(u) = meta["token_endpoint"].as_str() {
                known.insert(issuer.clone(), u.to_owned());
                return Ok(u.to_owned());
            }
        }
        Err(unavailable(
            upstream,
            &format!("`{issuer}` publishes no authorization server metadata with a token endpoint"),
            None,
        ))
    }
}

/// The token endpoints' client as the `oauth2` crate takes one.
struct OAuthHttp(reqwest::Client);

impl<'c> oauth2::AsyncHttpClient<'c> for OAuthHttp {
    type Error = Unreachable;
    type Future = std::pin::Pin<
        Box<
            dyn std::future::Future<Output = Result<oauth2::HttpResponse, Unreachable>> + Send + 'c,
        >,
    >;

    fn call(&'c self, req: oauth2::HttpRequest) -> Self::Future {
        Box::pin(send(self.0.clone(), req))
    }
}

/// One request to a token endpoint, for the `oauth2` crate.
async fn send(
    http: reqwest::Client,
    req: oauth2::HttpRequest,
) -> Result<oauth2::HttpResponse, Unreachable> {
    let (parts, body) = req.into_parts();
    let sent = http
        .request(parts.method, parts.uri.to_string())
        .headers(parts.headers)
        .body(body)
        .send()
        .await
        .map_err(|e| Unreachable(e.without_url().to_string()))?;
    let mut resp = oauth2::HttpResponse::new(Vec::new());
    *resp.status_mut() = sent.status();
    *resp.headers_mut() = sent.headers().clone();
    *resp.body_mut() = sent
        .bytes()
        .await
        .map_err(|e| Unreachable(e.without_url().to_string()))?
        .to_vec();
    Ok(resp)
}

/// A token endpoint that could not be reached.
#[derive(Debug)]
struct Unreachable(String);

impl std::fmt::Display for Unreachable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Unreachable {}

/// RFC 6749 §2.3.1: the client id and secret are form-encoded before Basic authentication.
fn form_encoded(s: &str) -> String {
    form_urlencoded::byte_serialize(s.as_bytes()).collect()
}

/// A failed token request in words (never the secret, never the URL's query).
fn words<E: std::error::Error>(
    e: &oauth2::RequestTokenError<E, oauth2::basic::BasicErrorResponse>,
) -> String {
    match e {
        oauth2::RequestTokenError::Request(e) => format!("the token endpoint did not answer: {e}"),
        oauth2::RequestTokenError::Parse(_, _) => {
            "the token endpoint's answer is not a token response".into()
        }
        other => format!("the token request failed: {other}"),
    }
}

fn unavailable(upstream: &str, why: &str, provider_error: Option<String>) -> Refused {
    Refused {
        error: ApiError::new(
            Code::UpstreamCredentialsUnavailable,
            format!("no credential for `{upstream}`: {why}; nothing was sent"),
        )
        .retry_after(RETRY_AFTER_SECS),
        provider_error,
    }
}
