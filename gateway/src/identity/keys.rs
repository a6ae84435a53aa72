//! An issuer's endpoints and signing keys (DESIGN §16): its discovery document (or the
//! configured `jwks_uri`), and its JWKS, cached for `jwks_ttl`, refetched on an unknown `kid`
//! at most once per 30 s, and kept while the issuer cannot be reached.
//!
//! It fetches and caches; it does not judge tokens (that is [`super::verify`]). Redirects are
//! never followed, and only `https://` (or `http://` on loopback) is fetched.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use jsonwebtoken::jwk::{AlgorithmParameters, JwkSet, PublicKeyUse};
use jsonwebtoken::DecodingKey;
use serde_json::Value;

use crate::config::{fetchable, IssuerConfig};

/// How soon after one fetch another may be tried for an unknown `kid` (or an issuer down).
pub const REFETCH_AFTER: Duration = Duration::from_secs(30);

/// The largest discovery document or JWKS read.
const MAX_DOCUMENT_BYTES: usize = 1 << 20;

/// One verification key.
pub struct Key {
    pub kid: String,
    /// The JWK's own `alg`, when it names one: the token's must be the same.
    pub alg: Option<String>,
    pub key: DecodingKey,
}

/// The endpoints of an issuer, from its discovery document.
#[derive(Debug, Clone, Default)]
pub struct Endpoints {
    pub jwks_uri: String,
    pub authorization_endpoint: Option<String>,
    pub token_endpoint: Option<String>,
    pub userinfo_endpoint: Option<String>,
}

#[derive(Default)]
struct Cache {
    keys: Option<Arc<Vec<Key>>>,
    endpoints: Option<Endpoints>,
    fetched: Option<Instant>,
    tried: Option<Instant>,
}

/// What a key lookup found.
pub enum Lookup {
    Found(Arc<Vec<Key>>, usize),
    /// The keys are there, and none has this `kid` (after a refetch, or too soon for one).
    UnknownKid,
    /// No keys were ever fetched; retry in this many seconds.
    Unavailable(u64, String),
}

pub struct IssuerKeys {
    /// Counts the key sets fetched: a token verified under an older set is checked again.
    pub generation: std::sync::atomic::AtomicU64,
    config: IssuerConfig,
    client: reqwest::Client,
    cache: Mutex<Cache>,
    /// One fetch at a time; the others wait for its result.
    fetching: tokio::sync::Mutex<()>,
}

impl IssuerKeys {
    pub fn new(config: IssuerConfig) -> Result<IssuerKeys, String> {
        let ca = match &config.ca {
            Some(p) => Some(std::fs::read(p).map_err(|e| {
                format!(
                    "issuers `{}`: cannot read ca {}: {e}",
                    config.id,
                    p.display()
                )
            })?),
            None => None,
        };
        let tls = airlock_storage::tls_client_config(ca.as_deref())
            .map_err(|e| format!("issuers `{}`: {e}", config.id))?;
        let client = reqwest::Client::builder()
            .use_preconfigured_tls(tls)
            .redirect(reqwest::redirect::Policy::none())
            .timeout(Duration::from_secs(5))
            .build()
            .map_err(|e| format!("issuers `{}`: cannot build a client: {e}", config.id))?;
        Ok(IssuerKeys {
            generation: std::sync::atomic::AtomicU64::new(0),
            config,
            client,
            cache: Mutex::new(Cache::default()),
            fetching: tokio::sync::Mutex::new(()),
        })
    }

    pub fn client(&self) -> &reqwest::Client {
        &self.client
    }

    fn cache(&self) -> std::sync::MutexGuard<'_, Cache> {
        self.cache.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The issuer's endpoints, fetching them first if they never were.
    pub async fn endpoints(&self) -> Result<Endpoints, String> {
        if let Some(e) = self.cache().endpoints.clone() {
            return Ok(e);
        }
        self.refresh(true).await?;
        self.cache()
            .endpoints
            .clone()
            .ok_or_else(|| "no endpoints".to_owned())
    }

    /// The key named `kid`, refetching the set once when it is stale or does not have it.
    pub async fn find(&self, kid: &str) -> Lookup {
        let (found, stale, may_try) = {
            let c = self.cache();
            let found = c
                .keys
                .as_ref()
                .and_then(|k| k.iter().position(|x| x.kid == kid).map(|i| (k.clone(), i)));
            let stale = c
                .fetched
                .is_none_or(|t| t.elapsed() >= self.config.jwks_ttl);
            let may_try = c.tried.is_none_or(|t| t.elapsed() >= REFETCH_AFTER);
            (found, stale, may_try)
        };
        match found {
            Some((keys, i)) if !stale || !may_try => return Lookup::Found(keys, i),
            Some((keys, i)) => {
                // Stale: refresh, and keep the cached key if the issuer cannot be reached.
                if self.refresh(false).await.is_err() {
                    return Lookup::Found(keys, i);
                }
            }
            // Too soon for a fetch of our own; one may be under way (the start-up fetch, or
            // another request's): its result is what this token is checked against.
            None if !may_try => drop(self.fetching.lock().await),
            None => {
                if let Err(e) = self.refresh(false).await {
                    return Lookup::Unavailable(REFETCH_AFTER.as_secs(), e);
                }
            }
        }
        let c = self.cache();
        match &c.keys {
            Some(k) => match k.iter().position(|x| x.kid == kid) {
                Some(i) => Lookup::Found(k.clone(), i),
                None => Lookup::UnknownKid,
            },
            None => {
                let wait = c
                    .tried
                    .map_or(1, |t| REFETCH_AFTER.saturating_sub(t.elapsed()).as_secs())
                    .max(1);
                Lookup::Unavailable(wait, "its keys could not be fetched".into())
            }
        }
    }

    /// Fetches the discovery document (when configured so) and the JWKS. `force` ignores the
    /// 30 s spacing (the start-up fetch). Only one fetch runs at a time; one that finds another
    /// just finished uses its result.
    pub async fn refresh(&self, force: bool) -> Result<(), String> {
        let before = self.cache().tried;
        let _one = self.fetching.lock().await;
        {
            let c = self.cache();
            if c.tried != before {
                return if c.keys.is_some() {
                    Ok(())
                } else {
                    Err("its keys could not be fetched".into())
                };
            }
            if !force && c.tried.is_some_and(|t| t.elapsed() < REFETCH_AFTER) {
                return Err("fetched less than 30 s ago".into());
            }
        }
        self.cache().tried = Some(Instant::now());
        let result = self.fetch().await;
        let mut c = self.cache();
        match result {
            Ok((endpoints, keys)) => {
                tracing::info!(issuer = %self.config.id, keys = keys.len(), "issuer keys fetched");
                c.endpoints = Some(endpoints);
                c.keys = Some(Arc::new(keys));
                self.generation
                    .fetch_add(1, std::sync::atomic::Ordering::Release);
                c.fetched = Some(Instant::now());
                Ok(())
            }
            Err(e) => {
                tracing::warn!(issuer = %self.config.id, "cannot fetch the issuer's keys: {e}");
                Err(e)
            }
        }
    }

    async fn fetch(&self) -> Result<(Endpoints, Vec<Key>), String> {
        let url = format!(
            "{}/.well-known/openid-configuration",
            self.config.issuer.trim_end_matches('/')
        );
        let discovered = self.get_json(&url).await;
        let endpoints = match self.config.jwks_uri.clone() {
            // Keys from the given jwks_uri; the other endpoints (for sign-in) when discovery
            // answers.
            Some(uri) => discovered
                .ok()
                .and_then(|doc| self.endpoints_of(&doc, Some(&uri)).ok())
                .unwrap_or(Endpoints {
                    jwks_uri: uri,
                    ..Endpoints::default()
                }),
            None => self.endpoints_of(&discovered?, None)?,
        };
        let set = self.get_json(&endpoints.jwks_uri).await?;
        let set: JwkSet = serde_json::from_value(keep_known(set))
            .map_err(|e| format!("{}: not a JWKS: {e}", endpoints.jwks_uri))?;
        let keys = set
            .keys
            .iter()
            .filter_map(|jwk| {
                // Never an HMAC key, an encryption key, or one without a `kid`.
                if matches!(jwk.algorithm, AlgorithmParameters::OctetKey(_))
                    || matches!(jwk.common.public_key_use, Some(PublicKeyUse::Encryption))
                {
                    return None;
                }
                let kid = jwk.common.key_id.clone()?;
                let alg = jwk
                    .common
                    .key_algorithm
                    .and_then(|a| serde_json::to_value(a).ok())
                    .and_then(|v| v.as_str().map(str::to_owned));
                let key = DecodingKey::from_jwk(jwk).ok()?;
                Some(Key { kid, alg, key })
            })
            .collect();
        Ok((endpoints, keys))
    }

    fn endpoints_of(&self, doc: &Value, given: Option<&str>) -> Result<Endpoints, String> {
        if doc["issuer"].as_str() != Some(self.config.issuer.as_str()) {
            return Err(format!(
                "its discovery document names issuer {} instead of `{}`",
                doc["issuer"], self.config.issuer
            ));
        }
        let url = |k: &str| -> Result<Option<String>, String> {
            match doc[k].as_str() {
                Some(u) if fetchable(u) => Ok(Some(u.to_owned())),
                Some(u) => Err(format!("its `{k}` `{u}` is not https://")),
                None => Ok(None),
            }
        };
        let jwks_uri = match given {
            Some(g) => g.to_owned(),
            None => url("jwks_uri")?.ok_or("its discovery document has no `jwks_uri`")?,
        };
        Ok(Endpoints {
            jwks_uri,
            authorization_endpoint: url("authorization_endpoint")?,
            token_endpoint: url("token_endpoint")?,
            userinfo_endpoint: url("userinfo_endpoint")?,
        })
    }

    /// GETs a JSON document of at most 1 MiB.
    pub async fn get_json(&self, url: &str) -> Result<Value, String> {
        let r = self
            .client
            .get(url)
            .header("accept", "application/json")
            .send()
            .await
            .map_err(|e| format!("{url}: {}", without_url(&e)))?;
        read_json(url, r).await
    }
}

/// An answer's JSON body, refused when it is not a 2xx or is larger than 1 MiB.
pub async fn read_json(url: &str, mut r: reqwest::Response) -> Result<Value, String> {
    let status = r.status();
    let mut body = Vec::new();
    while let Some(chunk) = r
        .chunk()
        .await
        .map_err(|e| format!("{url}: {}", without_url(&e)))?
    {
        body.extend_from_slice(&chunk);
        if body.len() > MAX_DOCUMENT_BYTES {
            return Err(format!("{url}: the answer is larger than 1 MiB"));
        }
    }
    let value: Value =
        serde_json::from_slice(&body).map_err(|_| format!("{url}: answered {status}, not JSON"))?;
    if !status.is_success() {
        return Err(format!("{url}: answered {status}: {value}"));
    }
    Ok(value)
}

fn without_url(e: &reqwest::Error) -> String {
    let mut s = e.to_string();
    if let Some(u) = e.url() {
        s = s.replace(&format!(" for url ({u})"), "");
    }
    s
}

/// A JWKS with the keys this crate cannot read (another `kty`, an unknown `alg`) left out,
/// so one such key does not hide the others.
fn keep_known(mut set: Value) -> Value {
    if let Some(keys) = set.get_mut("keys").and_then(Value::as_array_mut) {
        keys.retain(|k| serde_json::from_value::<jsonwebtoken::jwk::Jwk>(k.clone()).is_ok());
    }
    set
}
