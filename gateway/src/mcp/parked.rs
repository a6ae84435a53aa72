//! A 2025 upstream's requests to its client during a 2026-07-28 client's call (DESIGN §15):
//! sampling, roots, a URL elicitation. The 2026 client is stateless, so it is asked by an
//! `input_required` result and answers in a retry of its call. Meanwhile the call runs on
//! here, the upstream's request open; the retry's answer goes to that request, and the
//! call continues to its end or to its next request.
//!
//! Takes the call's future (run with [`CLIENT_ASKS`] set) and gives [`Step`]s. A request the
//! client did not declare it takes is answered "not relayed" at once. Parked calls are
//! memory: one whose client does not come back within `max_hold` has its request answered
//! with an error and runs on without it; a restart loses them (the call is then interrupted,
//! as any call in flight). A form elicitation is not parked: it suspends the call (§11).

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{json, Value};
use tokio::sync::{mpsc, oneshot};

use crate::auth::random_hex;
use crate::backends::mcp::{not_relayed, Ask, InFlight, CLIENT_ASKS};
use crate::error::{ApiError, Code};
use crate::pipeline::Outcome;

/// A call running while its client is asked something.
pub struct Running {
    /// Polled by whoever waits for the next step; in a task of its own once parked.
    task: InFlight<Result<Outcome, ApiError>>,
    asks: mpsc::UnboundedReceiver<Ask>,
    /// What the client declared it answers.
    takes: Vec<&'static str>,
}

/// What the running call did next.
pub enum Step {
    Done(Result<Outcome, ApiError>),
    /// The upstream asked the client `method` with `params`; its answer is awaited under
    /// `key`.
    Ask {
        key: String,
        method: String,
        params: Value,
    },
}

type Waiting = HashMap<String, (oneshot::Sender<Value>, Running)>;

/// The requests waiting for a 2026 client's retry, by key.
#[derive(Default, Clone)]
pub struct Parking {
    waiting: Arc<Mutex<Waiting>>,
}

/// Takes the call; it runs while [`Parking::next`] waits for its next step, and its
/// upstream's requests to the client come there.
pub fn start<F>(call: F, takes: Vec<&'static str>) -> Running
where
    F: Future<Output = Result<Outcome, ApiError>> + Send + 'static,
{
    let (tx, asks) = mpsc::unbounded_channel();
    Running {
        task: InFlight::new(CLIENT_ASKS.scope(tx, call)),
        asks,
        takes,
    }
}

impl Parking {
    /// Waits for the call's end or its next request the client takes; such a request is
    /// parked for `max_wait`. Dropping this future (the client went away) ends the call, as
    /// it would any held request.
    pub async fn next(&self, mut running: Running, max_wait: Duration) -> Step {
        loop {
            tokio::select! {
                joined = std::future::poll_fn(|cx| running.task.poll_done(cx)) => {
                    return Step::Done(joined.unwrap_or_else(|e| {
                        Err(ApiError::new(Code::Internal, format!("the call's task ended: {e}")))
                    }));
                }
                Some(ask) = running.asks.recv() => {
                    if !running.takes.contains(&ask.method.as_str()) {
                        let _ = ask.reply.send(not_relayed(&ask.method));
                        continue;
                    }
                    let key = match random_hex(8) {
                        Ok(r) => format!("upstream_{r}"),
                        Err(_) => {
                            let _ = ask.reply.send(not_relayed(&ask.method));
                            continue;
                        }
                    };
                    self.park(&key, ask.reply, running, max_wait);
                    return Step::Ask { key, method: ask.method, params: ask.params };
                }
            }
        }
    }

    /// The client's answer to the request parked under `key` (a `result` object), and what
    /// the call did next; `None` when nothing waits under `key` (answered, expired, or lost
    /// in a restart).
    pub async fn answer(&self, key: &str, answer: Value, max_wait: Duration) -> Option<Step> {
        let (reply, running) = self.take(key)?;
        let _ = reply.send(json!({"result": answer}));
        Some(self.next(running, max_wait).await)
    }

    fn take(&self, key: &str) -> Option<(oneshot::Sender<Value>, Running)> {
        self.waiting
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(key)
    }

    fn park(&self, key: &str, reply: oneshot::Sender<Value>, mut running: Running, wait: Duration) {
        // The call runs on while nobody waits for it.
        running.task = InFlight::Own(running.task.keep());
        self.waiting
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(key.to_owned(), (reply, running));
        let (parking, key) = (self.clone(), key.to_owned());
        tokio::spawn(async move {
            tokio::time::sleep(wait).await;
            // Not answered in time: the upstream hears so, and the call runs on to its end
            // (recorded, as every call is) with nobody waiting for it.
            let Some((reply, running)) = parking.take(&key) else {
                return;
            };
            let _ = reply
                .send(json!({"error": {"code": -32603, "message": "the client did not answer"}}));
            let Running {
                mut task, mut asks, ..
            } = running;
            loop {
                tokio::select! {
                    _ = std::future::poll_fn(|cx| task.poll_done(cx)) => return,
                    Some(ask) = asks.recv() => {
                        let _ = ask.reply.send(not_relayed(&ask.method));
                    }
                }
            }
        });
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::panic)]
    use super::*;

    /// A call that asks its client `method` (as an upstream's request reaches the front end),
    /// and ends with the answer it got, as the error's message.
    async fn asking(method: &'static str) -> Result<Outcome, ApiError> {
        let (reply, answer) = oneshot::channel();
        let ask = Ask {
            method: method.into(),
            params: json!({"q": 1}),
            reply,
        };
        CLIENT_ASKS
            .with(|tx| tx.send(ask))
            .map_err(|_| ApiError::new(Code::Internal, "no one takes the call's requests"))?;
        let got = answer.await.unwrap_or(Value::Null);
        Err(ApiError::new(Code::Internal, got.to_string()))
    }

    fn ended_with(step: Step) -> Value {
        match step {
            Step::Done(Err(e)) => serde_json::from_str(&e.message).unwrap(),
            Step::Done(Ok(_)) => panic!("an outcome"),
            Step::Ask { method, .. } => panic!("asked {method}"),
        }
    }

    #[tokio::test]
    async fn an_ask_the_client_takes_is_parked_and_its_answer_reaches_the_call() {
        let parking = Parking::default();
        let running = start(
            asking("sampling/createMessage"),
            vec!["sampling/createMessage"],
        );
        let Step::Ask {
            key,
            method,
            params,
        } = parking.next(running, Duration::from_secs(60)).await
        else {
            panic!("not asked");
        };
        assert_eq!(
            (method.as_str(), &params),
            ("sampling/createMessage", &json!({"q": 1}))
        );
        assert!(key.starts_with("upstream_"));
        // A made-up key finds nothing; the real one reaches the call, which ends with it.
        assert!(parking
            .answer("upstream_nope", json!({}), Duration::from_secs(1))
            .await
            .is_none());
        let step = parking
            .answer(&key, json!({"text": "42"}), Duration::from_secs(60))
            .await;
        assert_eq!(ended_with(step.unwrap()), json!({"result": {"text": "42"}}));
        // Answered once: the key is spent.
        assert!(parking
            .answer(&key, json!({}), Duration::from_secs(1))
            .await
            .is_none());
    }

    #[tokio::test]
    async fn an_ask_the_client_did_not_declare_is_refused_at_once_and_the_call_goes_on() {
        let parking = Parking::default();
        let running = start(asking("roots/list"), vec!["sampling/createMessage"]);
        let answer = ended_with(parking.next(running, Duration::from_secs(60)).await);
        assert_eq!(answer["error"]["code"], -32601, "{answer}");
    }

    #[tokio::test(start_paused = true)]
    async fn a_parked_ask_nobody_answers_in_time_tells_the_upstream_and_the_call_runs_on() {
        let parking = Parking::default();
        let (done_tx, done_rx) = oneshot::channel();
        let call = async move {
            let r = asking("roots/list").await;
            let _ = done_tx.send(r.as_ref().err().map(|e| e.message.clone()));
            r
        };
        let running = start(call, vec!["roots/list"]);
        let Step::Ask { key, .. } = parking.next(running, Duration::from_secs(5)).await else {
            panic!("not asked");
        };
        tokio::time::sleep(Duration::from_secs(6)).await;
        let told: Value = serde_json::from_str(&done_rx.await.unwrap().unwrap()).unwrap();
        assert_eq!(
            told["error"]["message"], "the client did not answer",
            "{told}"
        );
        assert!(parking
            .answer(&key, json!({}), Duration::from_secs(1))
            .await
            .is_none());
    }
}
