//! Time as the kit passes it around: milliseconds since the Unix epoch,
//! handed in by the edges, and a [`Clock`] they inject where a write must
//! carry the time it is sent. Nothing else in the core reads a clock.

/// Milliseconds since the Unix epoch. Time is passed in, never read inside
/// the library, so logic is testable without a clock.
pub type EpochMillis = i64;

/// A clock the edges inject where a write must carry the time it is sent
/// (a stream transaction retried for seconds, a long replay): the library
/// never reads one itself.
#[derive(Clone)]
pub struct Clock(std::sync::Arc<dyn Fn() -> EpochMillis + Send + Sync>);

impl Clock {
    pub fn new(now: impl Fn() -> EpochMillis + Send + Sync + 'static) -> Self {
        Self(std::sync::Arc::new(now))
    }

    /// The system's wall clock ([`now_millis`]).
    pub fn system() -> Self {
        Self::new(now_millis)
    }

    pub fn now(&self) -> EpochMillis {
        (self.0)()
    }
}

impl std::fmt::Debug for Clock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("Clock").finish_non_exhaustive()
    }
}

/// The current wall-clock time, for binaries to pass in.
pub fn now_millis() -> EpochMillis {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}
