//! Per-principal limits from `[[principals]]` and `[[issuers]]`: a request rate (a token
//! bucket with a burst), the most approvals a principal's calls may hold pending at once, and
//! its share of the requests held waiting for a decision (`server.max_held_per_principal`).
//! An issuer's limits hold for each of its principals (`<issuer>:<sub>`) on its own, made
//! when the principal is first seen.
//!
//! It counts and refuses; it does not audit or answer (the API does, once per burst), and it
//! does not limit connections (that is [`crate::serve::guards`]). Everything is in memory: the
//! pending counts are read from the store at start and kept in step by the pipeline, and a
//! restart refills every bucket.

use std::collections::HashMap;
use std::sync::{Mutex, RwLock};
use std::time::{Duration, Instant};

use crate::config::{IssuerConfig, PrincipalConfig, Rate};

struct Bucket {
    rate: Rate,
    tokens: f64,
    last: Instant,
    /// True from a refusal until the next admitted request: a burst of refusals is audited
    /// once, at its start.
    refusing: bool,
}

struct Pending {
    max: Option<usize>,
    open: usize,
    refusing: bool,
}

/// `("<issuer>:", rate, max_pending)`: an issuer's limits, for each of its principals.
type IssuerLimit = (String, Option<Rate>, Option<usize>);

/// What a limit refused: how long to wait, and whether this refusal starts a burst.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Refusal {
    pub retry_after: Duration,
    pub first_of_burst: bool,
}

pub struct PrincipalLimits {
    /// Requests of each principal held waiting for a decision (and whether it is being
    /// refused: a burst of refusals is audited once), and the most one may have
    /// (`server.max_held_per_principal`).
    held: Mutex<HashMap<String, (usize, bool)>>,
    max_held: usize,
    /// Swapped by a reload ([`PrincipalLimits::reconfigure`]); read on every request.
    buckets: RwLock<HashMap<String, Mutex<Bucket>>>,
    pending: Mutex<HashMap<String, Pending>>,
    /// `("<issuer>:", rate, max_pending)` of each issuer with a limit.
    issuers: RwLock<Vec<IssuerLimit>>,
    /// The buckets of issuers' principals, made as they are first seen.
    issued: Mutex<HashMap<String, Bucket>>,
}

impl Bucket {
    fn new(rate: Rate, now: Instant) -> Bucket {
        Bucket {
            rate,
            tokens: f64::from(rate.burst),
            last: now,
            refusing: false,
        }
    }

    fn take(&mut self, now: Instant) -> Result<(), Refusal> {
        let per_second = f64::from(self.rate.count) / self.rate.per.as_secs_f64();
        let elapsed = now.saturating_duration_since(self.last).as_secs_f64();
        self.tokens = (self.tokens + elapsed * per_second).min(f64::from(self.rate.burst));
        self.last = now;
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            self.refusing = false;
            return Ok(());
        }
        let wait = Duration::from_secs_f64((1.0 - self.tokens) / per_second);
        let first_of_burst = !self.refusing;
        self.refusing = true;
        Err(Refusal {
            retry_after: wait,
            first_of_burst,
        })
    }
}

impl PrincipalLimits {
    pub fn new(
        principals: &[PrincipalConfig],
        issuers: &[IssuerConfig],
        max_held: usize,
        now: Instant,
    ) -> PrincipalLimits {
        PrincipalLimits {
            held: Mutex::new(HashMap::new()),
            max_held,
            issuers: RwLock::new(issuer_limits(issuers)),
            issued: Mutex::new(HashMap::new()),
            buckets: RwLock::new(
                principals
                    .iter()
                    .filter_map(|p| {
                        let rate = p.rate?;
                        Some((p.id.clone(), Mutex::new(Bucket::new(rate, now))))
                    })
                    .collect(),
            ),
            pending: Mutex::new(
                principals
                    .iter()
                    .map(|p| {
                        (
                            p.id.clone(),
                            Pending {
                                max: p.max_pending,
                                open: 0,
                                refusing: false,
                            },
                        )
                    })
                    .collect(),
            ),
        }
    }

    /// Puts a reloaded config's limits in force: a principal whose rate is unchanged keeps
    /// its bucket, a new or changed one starts full, a removed one has none; pending
    /// counts stay (those approvals are still open) under the new maxima.
    pub fn reconfigure(
        &self,
        principals: &[PrincipalConfig],
        issuers: &[IssuerConfig],
        now: Instant,
    ) {
        {
            let mut buckets = self.buckets.write().unwrap_or_else(|e| e.into_inner());
            let mut old = std::mem::take(&mut *buckets);
            for p in principals {
                let Some(rate) = p.rate else { continue };
                let bucket = match old.remove(&p.id) {
                    Some(b) if b.lock().unwrap_or_else(|e| e.into_inner()).rate == rate => b,
                    _ => Mutex::new(Bucket::new(rate, now)),
                };
                buckets.insert(p.id.clone(), bucket);
            }
        }
        *self.issuers.write().unwrap_or_else(|e| e.into_inner()) = issuer_limits(issuers);
        self.issued
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clear();
        let mut p = self.pending.lock().unwrap_or_else(|e| e.into_inner());
        for c in principals {
            p.entry(c.id.clone())
                .or_insert(Pending {
                    max: None,
                    open: 0,
                    refusing: false,
                })
                .max = c.max_pending;
        }
        let issuers = self.issuers.read().unwrap_or_else(|e| e.into_inner());
        for (id, entry) in p.iter_mut() {
            if let Some((_, _, max)) = issuers
                .iter()
                .find(|(pre, _, _)| id.starts_with(pre.as_str()))
            {
                entry.max = *max;
            } else if !principals.iter().any(|c| &c.id == id) {
                entry.max = None;
            }
        }
    }

    /// The limits of the issuer whose principal `principal` is.
    fn issuer_of(&self, principal: &str) -> Option<(Option<Rate>, Option<usize>)> {
        self.issuers
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .find(|(prefix, _, _)| principal.starts_with(prefix.as_str()))
            .map(|(_, rate, max)| (*rate, *max))
    }

    /// Takes one token from `principal`'s bucket, or says how long until there is one.
    pub fn take(&self, principal: &str, now: Instant) -> Result<(), Refusal> {
        if let Some(bucket) = self
            .buckets
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(principal)
        {
            return bucket.lock().unwrap_or_else(|e| e.into_inner()).take(now);
        }
        let Some((Some(rate), _)) = self.issuer_of(principal) else {
            return Ok(());
        };
        let mut issued = self.issued.lock().unwrap_or_else(|e| e.into_inner());
        issued
            .entry(principal.to_owned())
            .or_insert_with(|| Bucket::new(rate, now))
            .take(now)
    }

    /// `principal`'s pending count, made for an issuer's principal with a limit.
    fn pending_of<'a>(
        &self,
        p: &'a mut HashMap<String, Pending>,
        principal: &str,
    ) -> Option<&'a mut Pending> {
        if !p.contains_key(principal) {
            let (_, Some(max)) = self.issuer_of(principal)? else {
                return None;
            };
            p.insert(
                principal.to_owned(),
                Pending {
                    max: Some(max),
                    open: 0,
                    refusing: false,
                },
            );
        }
        p.get_mut(principal)
    }

    /// Sets the pending counts found in the store at start.
    pub fn set_pending(&self, counts: &HashMap<String, usize>) {
        let mut p = self.pending.lock().unwrap_or_else(|e| e.into_inner());
        for (id, n) in counts {
            if let Some(entry) = self.pending_of(&mut p, id) {
                entry.open = *n;
            }
        }
    }

    /// Reserves a pending approval for `principal`; the caller releases it with
    /// [`PrincipalLimits::release_pending`] when the approval is decided, expires or is
    /// cancelled, or at once when opening it failed. Check and count are one step, so
    /// concurrent calls cannot overshoot the limit.
    pub fn reserve_pending(&self, principal: &str) -> Result<usize, Refusal> {
        let mut p = self.pending.lock().unwrap_or_else(|e| e.into_inner());
        let Some(entry) = self.pending_of(&mut p, principal) else {
            return Ok(0);
        };
        if entry.max.is_some_and(|max| entry.open >= max) {
            let first_of_burst = !entry.refusing;
            entry.refusing = true;
            return Err(Refusal {
                // A pending approval ends by a decision or expiry, whose time nobody knows:
                // the client may look again in a while.
                retry_after: Duration::from_secs(30),
                first_of_burst,
            });
        }
        entry.open += 1;
        entry.refusing = false;
        Ok(entry.open)
    }

    /// Sets `principal`'s pending count to `open`, as the store has it (the refusal path reads
    /// it again: counts kept from other gateways' news may have missed a close).
    pub fn resync_pending(&self, principal: &str, open: usize) {
        let mut p = self.pending.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(entry) = self.pending_of(&mut p, principal) {
            entry.open = open;
        }
    }

    /// Counts one more pending approval of `principal` that is open already (another
    /// gateway's), whatever its limit.
    pub fn count_pending(&self, principal: &str) -> usize {
        let mut p = self.pending.lock().unwrap_or_else(|e| e.into_inner());
        match self.pending_of(&mut p, principal) {
            Some(entry) => {
                entry.open += 1;
                entry.open
            }
            None => 0,
        }
    }

    /// One of `principal`'s pending approvals was closed (or never opened).
    pub fn release_pending(&self, principal: &str) -> usize {
        let mut p = self.pending.lock().unwrap_or_else(|e| e.into_inner());
        match p.get_mut(principal) {
            Some(entry) => {
                entry.open = entry.open.saturating_sub(1);
                entry.open
            }
            None => 0,
        }
    }

    /// Takes one of `principal`'s held-request places, or refuses when its share is taken;
    /// the caller gives it back with [`PrincipalLimits::release_held`].
    pub fn hold(&self, principal: &str) -> Result<(), Refusal> {
        let mut held = self.held.lock().unwrap_or_else(|e| e.into_inner());
        let (n, refusing) = held.entry(principal.to_owned()).or_insert((0, false));
        if *n >= self.max_held {
            let first_of_burst = !*refusing;
            *refusing = true;
            return Err(Refusal {
                retry_after: Duration::from_secs(1),
                first_of_burst,
            });
        }
        *n += 1;
        *refusing = false;
        Ok(())
    }

    /// One of `principal`'s held requests ended.
    pub fn release_held(&self, principal: &str) {
        let mut held = self.held.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((n, _)) = held.get_mut(principal) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                held.remove(principal);
            }
        }
    }

    /// Whether `principal` has a pending limit (its gauge is exported).
    pub fn has_pending_limit(&self, principal: &str) -> bool {
        let p = self.pending.lock().unwrap_or_else(|e| e.into_inner());
        p.get(principal).is_some_and(|e| e.max.is_some())
    }
}

/// `("<issuer>:", rate, max_pending)` of each issuer with a limit.
fn issuer_limits(issuers: &[IssuerConfig]) -> Vec<IssuerLimit> {
    issuers
        .iter()
        .filter(|i| i.rate.is_some() || i.max_pending.is_some())
        .map(|i| (format!("{}:", i.id), i.rate, i.max_pending))
        .collect()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn principal(id: &str, rate: Option<&str>, max_pending: Option<usize>) -> PrincipalConfig {
        PrincipalConfig {
            id: id.into(),
            role: "agent".into(),
            token_sha256: String::new(),
            groups: vec![],
            rate: rate.map(|r| Rate::parse(r, None).unwrap()),
            max_pending,
            agents: vec![],
        }
    }

    #[test]
    fn a_bucket_admits_its_burst_then_refills_at_its_rate() {
        let t0 = Instant::now();
        let l = PrincipalLimits::new(&[principal("a", Some("10/s"), None)], &[], 10, t0);
        for _ in 0..10 {
            l.take("a", t0).unwrap();
        }
        let r = l.take("a", t0).unwrap_err();
        assert!(r.first_of_burst);
        assert!(r.retry_after <= Duration::from_millis(100), "{r:?}");
        assert!(!l.take("a", t0).unwrap_err().first_of_burst);
        // 100 ms later one token is back, and only one.
        let t1 = t0 + Duration::from_millis(100);
        l.take("a", t1).unwrap();
        assert!(l.take("a", t1).is_err());
        // After a refusal burst ends, the next refusal starts a new burst.
        let t2 = t1 + Duration::from_secs(5);
        for _ in 0..10 {
            l.take("a", t2).unwrap();
        }
        assert!(l.take("a", t2).unwrap_err().first_of_burst);
        // Principals without a rate are never limited.
        for _ in 0..1000 {
            l.take("b", t0).unwrap();
        }
    }

    #[test]
    fn pending_reservations_stop_at_the_limit_and_come_back_on_release() {
        let l = PrincipalLimits::new(&[principal("a", None, Some(2))], &[], 10, Instant::now());
        assert_eq!(l.reserve_pending("a"), Ok(1));
        assert_eq!(l.reserve_pending("a"), Ok(2));
        assert!(l.reserve_pending("a").unwrap_err().first_of_burst);
        assert!(!l.reserve_pending("a").unwrap_err().first_of_burst);
        assert_eq!(l.release_pending("a"), 1);
        assert_eq!(l.reserve_pending("a"), Ok(2));
        let mut counts = HashMap::new();
        counts.insert("a".to_owned(), 2);
        l.set_pending(&counts);
        assert!(l.reserve_pending("a").is_err());
        assert!(l.has_pending_limit("a") && !l.has_pending_limit("zz"));
    }

    #[test]
    fn rates_parse_with_units_and_bursts() {
        assert_eq!(
            Rate::parse("50/s", None).unwrap(),
            Rate {
                count: 50,
                per: Duration::from_secs(1),
                burst: 50
            }
        );
        assert_eq!(Rate::parse("600/m", Some(5)).unwrap().burst, 5);
        assert_eq!(
            Rate::parse("1000/h", None).unwrap().per,
            Duration::from_secs(3600)
        );
        for bad in ["50", "0/s", "x/s", "5/d", "5/", "/s"] {
            assert!(Rate::parse(bad, None).is_err(), "{bad}");
        }
        assert!(Rate::parse("5/s", Some(0)).is_err());
    }
}
