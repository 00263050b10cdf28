//! Exponential backoff with full jitter: the delay before retry `n` is drawn
//! uniformly from `[0, min(cap, base * 2^n)]`, which spreads competing
//! writers of one hot item apart instead of re-colliding them in lockstep.

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

#[cfg(test)]
mod tests {
    use super::*;

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
