//! Classifiers from config: the [`Classifier`] trait, its `builtin` and `http` kinds, a cache of
//! results by (classifier, fingerprint), and the step of the pipeline that runs the classifiers
//! named by the rules that may apply to a call.
//!
//! A classifier that errors, times out or answers garbage yields its `on_error` (never allow);
//! that is counted in `airlock_classifier_errors_total` and shown in the decision. It decides
//! nothing itself: policy reads the results.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::future::Future;
use std::pin::Pin;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use airlock_policy::{
    BuiltinClassifier, ClassifierOutcome, ClassifierResult, DecisionKind, ToolCall,
};
use serde_json::{json, Value};

use crate::config::{ClassifierConfig, ClassifierKind};
use crate::metrics::Metrics;

/// What a classifier looks at.
pub struct ClassifyRequest<'a> {
    pub call: &'a ToolCall,
}

type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// A source of classifier results.
pub trait Classifier: Send + Sync {
    fn classify<'a>(
        &'a self,
        req: &'a ClassifyRequest<'a>,
    ) -> BoxFuture<'a, Result<ClassifierResult, String>>;
}

impl Classifier for BuiltinClassifier {
    fn classify<'a>(
        &'a self,
        req: &'a ClassifyRequest<'a>,
    ) -> BoxFuture<'a, Result<ClassifierResult, String>> {
        let result = BuiltinClassifier::classify(self, &req.call.args);
        Box::pin(async move { Ok(result) })
    }
}

/// POSTs `{"tool","args","context","fingerprint"}` and expects `{"score","labels","detail"}`.
pub struct HttpClassifier {
    client: reqwest::Client,
    url: String,
    timeout: Duration,
}

impl Classifier for HttpClassifier {
    fn classify<'a>(
        &'a self,
        req: &'a ClassifyRequest<'a>,
    ) -> BoxFuture<'a, Result<ClassifierResult, String>> {
        Box::pin(async move {
            let body = json!({
                "tool": req.call.tool,
                "args": req.call.args,
                "context": req.call.context,
                "fingerprint": req.call.fingerprint.as_str(),
            });
            let resp = self
                .client
                .post(&self.url)
                .timeout(self.timeout)
                .header("content-type", "application/json")
                .body(body.to_string())
                .send()
                .await
                .map_err(|e| {
                    if e.is_timeout() {
                        format!("timed out after {:?}", self.timeout)
                    } else {
                        format!("unreachable: {e}")
                    }
                })?;
            if !resp.status().is_success() {
                return Err(format!("answered HTTP {}", resp.status().as_u16()));
            }
            let bytes = resp
                .bytes()
                .await
                .map_err(|e| format!("unreadable answer: {e}"))?;
            parse_answer(&bytes)
        })
    }
}

/// A classifier's answer, checked: a score in 0..1 and a list of string labels.
fn parse_answer(bytes: &[u8]) -> Result<ClassifierResult, String> {
    let v: Value = serde_json::from_slice(bytes)
        .map_err(|_| "answered something that is not JSON".to_owned())?;
    let score = v
        .get("score")
        .and_then(Value::as_f64)
        .filter(|s| (0.0..=1.0).contains(s))
        .ok_or("the answer has no `score` in 0..1")?;
    let labels = match v.get("labels") {
        None => Vec::new(),
        Some(Value::Array(items)) => items
            .iter()
            .map(|l| {
                l.as_str()
                    .map(str::to_owned)
                    .ok_or("`labels` must be strings")
            })
            .collect::<Result<_, _>>()?,
        Some(_) => return Err("`labels` must be a list".into()),
    };
    Ok(ClassifierResult {
        score,
        labels,
        detail: v.get("detail").cloned().unwrap_or(Value::Null),
    })
}

struct Entry {
    classifier: Box<dyn Classifier>,
    on_error: DecisionKind,
}

/// The configured classifiers and their result cache.
pub struct Classifiers {
    by_name: HashMap<String, Entry>,
    /// (classifier, fingerprint) → result and when it was computed.
    cache: Mutex<HashMap<(String, String), (Instant, ClassifierResult)>>,
    ttl: Duration,
}

/// Cached results kept at most; past it, expired ones go, then the oldest half.
const CACHE_MAX: usize = 50_000;

impl Classifiers {
    pub fn new(configs: &[ClassifierConfig], ttl: Duration) -> Result<Classifiers, String> {
        let client = reqwest::Client::builder()
            .tcp_nodelay(true)
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .map_err(|e| format!("cannot build the classifier client: {e}"))?;
        let by_name = configs
            .iter()
            .map(|c| {
                let classifier: Box<dyn Classifier> = match &c.kind {
                    ClassifierKind::Builtin { allow_hosts } => {
                        Box::new(BuiltinClassifier::new(allow_hosts.clone()))
                    }
                    ClassifierKind::Http { url, timeout } => Box::new(HttpClassifier {
                        client: client.clone(),
                        url: url.clone(),
                        timeout: *timeout,
                    }),
                };
                (
                    c.name.clone(),
                    Entry {
                        classifier,
                        on_error: c.on_error,
                    },
                )
            })
            .collect();
        Ok(Classifiers {
            by_name,
            cache: Mutex::new(HashMap::new()),
            ttl,
        })
    }

    pub fn names(&self) -> BTreeSet<String> {
        self.by_name.keys().cloned().collect()
    }

    /// Runs the classifiers `names` on `call`, from the cache when fresh.
    pub async fn run(
        &self,
        names: &BTreeSet<&str>,
        call: &ToolCall,
        metrics: &Metrics,
    ) -> BTreeMap<String, ClassifierOutcome> {
        let mut out = BTreeMap::new();
        for &name in names {
            let Some(entry) = self.by_name.get(name) else {
                // Policy loading refuses unknown classifiers; this is only a guard.
                out.insert(
                    name.to_owned(),
                    ClassifierOutcome::Failed {
                        reason: "not configured".into(),
                        on_error: DecisionKind::RequireApproval,
                    },
                );
                continue;
            };
            let key = (name.to_owned(), call.fingerprint.to_string());
            if let Some(hit) = self.cached(&key) {
                out.insert(name.to_owned(), ClassifierOutcome::Ok(hit));
                continue;
            }
            let start = Instant::now();
            let result = entry.classifier.classify(&ClassifyRequest { call }).await;
            metrics
                .classifier_seconds
                .with_label_values(&[name])
                .observe(start.elapsed().as_secs_f64());
            let outcome = match result {
                Ok(r) => {
                    self.remember(key, r.clone());
                    ClassifierOutcome::Ok(r)
                }
                Err(reason) => {
                    metrics.classifier_errors.with_label_values(&[name]).inc();
                    tracing::warn!(classifier = name, "classifier failed: {reason}");
                    ClassifierOutcome::Failed {
                        reason,
                        on_error: entry.on_error,
                    }
                }
            };
            out.insert(name.to_owned(), outcome);
        }
        out
    }

    fn cached(&self, key: &(String, String)) -> Option<ClassifierResult> {
        let cache = self.cache.lock().unwrap_or_else(|e| e.into_inner());
        cache
            .get(key)
            .filter(|(at, _)| at.elapsed() < self.ttl)
            .map(|(_, r)| r.clone())
    }

    fn remember(&self, key: (String, String), result: ClassifierResult) {
        let mut cache = self.cache.lock().unwrap_or_else(|e| e.into_inner());
        if cache.len() >= CACHE_MAX {
            let ttl = self.ttl;
            cache.retain(|_, (at, _)| at.elapsed() < ttl);
            if cache.len() >= CACHE_MAX {
                let mut ages: Vec<Instant> = cache.values().map(|(at, _)| *at).collect();
                ages.sort();
                let cutoff = ages[ages.len() / 2];
                cache.retain(|_, (at, _)| *at > cutoff);
            }
        }
        cache.insert(key, (Instant::now(), result));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_are_checked() {
        assert!(parse_answer(br#"{"score":0.4,"labels":["pii"],"detail":{"x":1}}"#).is_ok());
        for bad in [
            &b"not json"[..],
            br#"{"labels":[]}"#,
            br#"{"score":1.5}"#,
            br#"{"score":"high"}"#,
            br#"{"score":0.1,"labels":[1]}"#,
            br#"{"score":0.1,"labels":"pii"}"#,
        ] {
            assert!(
                parse_answer(bad).is_err(),
                "{}",
                String::from_utf8_lossy(bad)
            );
        }
    }
}
