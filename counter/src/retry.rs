//! The one retry helper of the kit: exponential backoff with full jitter.
//! The delay before retry `n` is drawn uniformly from
//! `[0, min(cap, base * 2^n)]`, which spreads competing writers of one hot
//! item apart instead of re-colliding them in lockstep.
//!
//! [`Backoff`] is the policy; [`Retry`] is one run of it, with a seeded
//! random source and an injected [`Sleeper`] (the clock), so a test sees
//! every delay without waiting. Every retry loop of the kit — the stream
//! transactions, the request path's busy writes, the store's unprocessed
//! keys — asks a [`Retry`] whether to go on ([`Retry::pause`]) or runs its
//! operation through it ([`Retry::run`]).
//!
//! Not `backon`: its jitter adds up to one delay on top of the delay
//! (`[d, 2d)`), not full jitter, and several loops here resend part of
//! their work without spending an attempt, which a closure-retry API does
//! not express.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Backoff {
    pub base: Duration,
    pub cap: Duration,
    /// Attempts in all, the first included.
    pub max_attempts: u32,
}

impl Default for Backoff {
    fn default() -> Self {
        Self {
            base: Duration::from_millis(20),
            cap: Duration::from_secs(1),
            max_attempts: 8,
        }
    }
}

impl Backoff {
    /// The upper bound of the delay after failed attempt `attempt` (0-based).
    pub fn ceiling(&self, attempt: u32) -> Duration {
        let factor = 1u32.checked_shl(attempt.min(31)).unwrap_or(u32::MAX);
        self.base.saturating_mul(factor).min(self.cap)
    }

    /// A full-jitter delay after failed attempt `attempt`, drawn from `rng`.
    pub fn delay(&self, attempt: u32, rng: &mut fastrand::Rng) -> Duration {
        let ceiling = self.ceiling(attempt).as_micros() as u64;
        Duration::from_micros(rng.u64(0..=ceiling))
    }
}

/// How a [`Retry`] waits: `tokio::time::sleep` unless a test injects
/// another clock.
#[derive(Clone)]
pub struct Sleeper(Arc<SleepFn>);

type SleepFn = dyn Fn(Duration) -> Pin<Box<dyn Future<Output = ()> + Send>> + Send + Sync;

impl Sleeper {
    pub fn new<F, Fut>(sleep: F) -> Self
    where
        F: Fn(Duration) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = ()> + Send + 'static,
    {
        Self(Arc::new(move |d| Box::pin(sleep(d))))
    }

    /// `tokio::time::sleep` (paused and advanced by tokio's test clock).
    pub fn tokio() -> Self {
        Self::new(tokio::time::sleep)
    }

    pub async fn sleep(&self, delay: Duration) {
        (self.0)(delay).await
    }
}

impl Default for Sleeper {
    fn default() -> Self {
        Self::tokio()
    }
}

impl std::fmt::Debug for Sleeper {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("Sleeper").finish_non_exhaustive()
    }
}

/// One run of retries under a [`Backoff`]: counts the failed attempts,
/// draws each delay from its own seeded generator and sleeps it on its
/// [`Sleeper`].
#[derive(Debug)]
pub struct Retry {
    backoff: Backoff,
    rng: fastrand::Rng,
    sleeper: Sleeper,
    failures: u32,
}

impl Retry {
    /// A run seeded with `seed` (a fresh random seed for `None`), sleeping
    /// on tokio's clock.
    pub fn new(backoff: Backoff, seed: Option<u64>) -> Self {
        Self {
            backoff,
            rng: seed.map_or_else(fastrand::Rng::new, fastrand::Rng::with_seed),
            sleeper: Sleeper::tokio(),
            failures: 0,
        }
    }

    pub fn with_sleeper(mut self, sleeper: Sleeper) -> Self {
        self.sleeper = sleeper;
        self
    }

    /// Failed attempts so far.
    pub fn failures(&self) -> u32 {
        self.failures
    }

    /// Attempts in all that [`Backoff::max_attempts`] allows.
    pub fn max_attempts(&self) -> u32 {
        self.backoff.max_attempts
    }

    /// Called after a failed attempt: `false` when that was the last one the
    /// policy allows; otherwise sleeps the next full-jitter delay and
    /// returns `true` (go on).
    pub async fn pause(&mut self) -> bool {
        self.failures += 1;
        if self.failures >= self.backoff.max_attempts {
            return false;
        }
        let delay = self.backoff.delay(self.failures - 1, &mut self.rng);
        self.sleeper.sleep(delay).await;
        true
    }

    /// Runs `op` until it succeeds, fails with an error `retryable` refuses,
    /// or the attempts are spent (the last error is returned).
    pub async fn run<T, E, F, Fut>(&mut self, mut op: F, retryable: impl Fn(&E) -> bool) -> Result<T, E>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T, E>>,
    {
        loop {
            match op().await {
                Err(err) if retryable(&err) => {
                    if !self.pause().await {
                        return Err(err);
                    }
                }
                other => return other,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    /// A sleeper that records the delays and returns at once.
    fn recording() -> (Sleeper, Arc<Mutex<Vec<Duration>>>) {
        let slept = Arc::new(Mutex::new(Vec::new()));
        let log = slept.clone();
        let sleeper = Sleeper::new(move |d| {
            log.lock().unwrap().push(d);
            async {}
        });
        (sleeper, slept)
    }

    fn policy() -> Backoff {
        Backoff {
            base: Duration::from_millis(10),
            cap: Duration::from_millis(75),
            max_attempts: 4,
        }
    }

    #[tokio::test]
    async fn run_retries_what_is_retryable_within_the_budget_and_returns_the_last_error() {
        let (sleeper, slept) = recording();
        let mut retry = Retry::new(policy(), Some(1)).with_sleeper(sleeper);
        let mut calls = 0;
        let out: Result<(), u32> = retry
            .run(
                || {
                    calls += 1;
                    let n = calls;
                    async move { Err(n) }
                },
                |_| true,
            )
            .await;
        assert_eq!(out, Err(4), "four attempts in all, the last error returned");
        let slept = slept.lock().unwrap().clone();
        assert_eq!(slept.len(), 3, "a sleep between attempts, none after the last");
        for (n, d) in slept.iter().enumerate() {
            assert!(*d <= policy().ceiling(n as u32), "delay {n} {d:?} over its ceiling");
        }
    }

    #[tokio::test]
    async fn run_stops_at_success_and_at_an_error_that_is_not_retryable() {
        let (sleeper, slept) = recording();
        let mut retry = Retry::new(policy(), Some(2)).with_sleeper(sleeper.clone());
        let mut calls = 0;
        let out = retry
            .run(
                || {
                    calls += 1;
                    let n = calls;
                    async move { if n < 3 { Err("busy") } else { Ok(n) } }
                },
                |e| *e == "busy",
            )
            .await;
        assert_eq!(out, Ok(3));
        assert_eq!(retry.failures(), 2);
        let mut fatal = Retry::new(policy(), Some(2)).with_sleeper(sleeper);
        let out: Result<(), &str> = fatal.run(|| async { Err("refused") }, |e| *e == "busy").await;
        assert_eq!(out, Err("refused"));
        assert_eq!(
            slept.lock().unwrap().len(),
            2,
            "no sleep after an error that is not retried"
        );
    }

    #[tokio::test]
    async fn the_same_seed_draws_the_same_delays() {
        let delays = |seed| async move {
            let (sleeper, slept) = recording();
            let mut retry = Retry::new(policy(), Some(seed)).with_sleeper(sleeper);
            while retry.pause().await {}
            slept.lock().unwrap().clone()
        };
        assert_eq!(delays(9).await, delays(9).await);
        assert_ne!(delays(9).await, delays(10).await);
    }

    #[test]
    fn ceiling_doubles_then_caps() {
        let b = Backoff {
            base: Duration::from_millis(10),
            cap: Duration::from_millis(75),
            max_attempts: 5,
        };
        let ceilings: Vec<u128> = (0..6).map(|n| b.ceiling(n).as_millis()).collect();
        assert_eq!(ceilings, vec![10, 20, 40, 75, 75, 75]);
        assert_eq!(b.ceiling(200), Duration::from_millis(75));
    }

    #[test]
    fn delays_stay_within_ceiling_and_are_spread() {
        let b = Backoff::default();
        let mut rng = fastrand::Rng::with_seed(7);
        let delays: Vec<Duration> = (0..200).map(|_| b.delay(3, &mut rng)).collect();
        assert!(delays.iter().all(|d| *d <= b.ceiling(3)));
        let distinct: std::collections::HashSet<_> = delays.iter().collect();
        assert!(distinct.len() > 150, "full jitter should not repeat delays");
        assert!(delays.iter().any(|d| *d < b.ceiling(3) / 4));
    }
}
