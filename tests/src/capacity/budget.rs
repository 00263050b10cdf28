//! One budget of capacity counted per window (a second on DynamoDB): a
//! partition's, or a table-level limit's. It serves its cap in each window
//! and keeps nothing unused, so no burst lifts it above its cap; a request
//! charged after its answer (a read) or larger than a whole window may take
//! it past the cap, and the excess is carried as debt into the next windows.

use std::time::{Duration, Instant};

/// A window that ended: what it served, and whether it refused anything.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Finished {
    pub used: f64,
    pub throttled: bool,
    /// Whole windows passed since without a request.
    pub idle_after: u32,
    pub end: Instant,
}

#[derive(Debug, Clone)]
pub(crate) struct Budget {
    cap: f64,
    window: Duration,
    start: Instant,
    used: f64,
    throttled: bool,
}

impl Budget {
    /// `rate` units a second, counted per `window`.
    pub fn new(rate: f64, window: Duration, now: Instant) -> Self {
        Self {
            cap: rate * window.as_secs_f64(),
            window,
            start: now,
            used: 0.0,
            throttled: false,
        }
    }

    /// Units a window serves.
    pub fn cap(&self) -> f64 {
        self.cap
    }

    pub fn set_rate(&mut self, rate: f64) {
        self.cap = rate * self.window.as_secs_f64();
    }

    /// Moves to the window holding `now`; the one that ended, if any.
    pub fn roll(&mut self, now: Instant) -> Option<Finished> {
        let elapsed = now.saturating_duration_since(self.start);
        if elapsed < self.window {
            return None;
        }
        let windows = (elapsed.as_secs_f64() / self.window.as_secs_f64()).floor() as u32;
        let finished = Finished {
            used: self.used,
            throttled: self.throttled,
            idle_after: windows - 1,
            end: self.start + self.window,
        };
        self.used = (self.used - f64::from(windows) * self.cap).max(0.0);
        self.start += self.window * windows;
        self.throttled = false;
        Some(finished)
    }

    /// Whether `units` charged now fit this window (`0`: a read charged
    /// after its answer, which needs a window not yet spent). A request
    /// larger than a whole window passes into a window nothing has used.
    pub fn admits(&self, units: f64) -> bool {
        if units <= 0.0 {
            self.used < self.cap
        } else {
            self.used + units <= self.cap + 1e-9 || (units > self.cap && self.used <= 0.0)
        }
    }

    pub fn charge(&mut self, units: f64) {
        self.used += units;
    }

    /// Gives back `units` charged earlier.
    pub fn refund(&mut self, units: f64) {
        self.used = (self.used - units).max(0.0);
    }

    /// Marks the window as having refused a request.
    pub fn throttle(&mut self) {
        self.throttled = true;
    }

    /// Nothing more this window (a partition just split off).
    pub fn exhaust(&mut self) {
        self.used = self.used.max(self.cap);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_window_serves_its_cap_and_keeps_nothing_unused() {
        let start = Instant::now();
        let mut b = Budget::new(10.0, Duration::from_secs(1), start);
        // An hour idle: still ten units in the next second, no burst.
        let later = start + Duration::from_secs(3600);
        b.roll(later);
        let passed = (0..20)
            .filter(|_| {
                let ok = b.admits(1.0);
                if ok {
                    b.charge(1.0);
                }
                ok
            })
            .count();
        assert_eq!(passed, 10);
    }

    #[test]
    fn eleven_units_a_second_against_ten_throttle_one_in_eleven() {
        // Offered 10 % over the cap for ten seconds after a long idle: a
        // bucket holding a second would pass all of it; a window does not.
        let start = Instant::now();
        let mut b = Budget::new(10.0, Duration::from_secs(1), start);
        let (mut passed, mut refused) = (0, 0);
        for n in 0..110u64 {
            let at = start + Duration::from_secs(3600) + Duration::from_micros(n * 1_000_000 / 11);
            b.roll(at);
            if b.admits(1.0) {
                b.charge(1.0);
                passed += 1;
            } else {
                refused += 1;
            }
        }
        assert_eq!((passed, refused), (100, 10));
    }

    #[test]
    fn a_read_charged_after_its_answer_runs_into_debt_that_later_windows_repay() {
        let start = Instant::now();
        let mut b = Budget::new(10.0, Duration::from_secs(1), start);
        assert!(b.admits(0.0));
        b.charge(35.0);
        assert!(!b.admits(0.0));
        b.roll(start + Duration::from_secs(2));
        assert!(!b.admits(0.0), "15 left after two windows");
        let finished = b.roll(start + Duration::from_secs(4)).unwrap();
        assert_eq!(finished.idle_after, 1);
        assert!(b.admits(1.0), "repaid after four windows");
    }

    #[test]
    fn a_request_larger_than_a_window_passes_only_into_an_unused_one() {
        let start = Instant::now();
        let mut b = Budget::new(10.0, Duration::from_secs(1), start);
        b.charge(1.0);
        assert!(!b.admits(25.0));
        b.roll(start + Duration::from_secs(1));
        assert!(b.admits(25.0));
    }
}
