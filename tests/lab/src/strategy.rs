//! The interface every approach implements, what a caller believes
//! ([`Truth`]), and what the approaches share: the retry budgets (the same
//! for all, so the comparison is fair), the error classification (the
//! kit's, by error code) and the capacity accounting (the kit's
//! [`Meter`], fed from `ReturnConsumedCapacity=TOTAL`).

use std::future::Future;
use std::pin::Pin;
use std::sync::Mutex;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::time::Duration;

use std::collections::HashMap;

use aws_sdk_dynamodb::types::{AttributeValue, ConsumedCapacity};
use hybrid_counter::error::StoreError;
use hybrid_counter::retry::{Backoff, Retry};
use hybrid_counter::store::meter::Meter;

pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// What a change came to, as its caller is told.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// The change happened (once, the caller believes).
    Applied,
    /// The threshold refused it: nothing happened.
    Refused,
}

/// A change that failed: its caller believes nothing happened.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LabError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("gave up after {attempts} attempts lost to concurrent writers")]
    Contended { attempts: u32 },
    #[error("nothing to take away: no change of this counter's callers is left to undo")]
    Empty,
    #[error("{0}")]
    Kit(String),
}

/// What the callers of one strategy believe happened: the sum of the
/// changes they were told were applied, and what else they were told.
#[derive(Debug, Default)]
pub struct Truth {
    value: AtomicI64,
    applied: AtomicU64,
    refused: AtomicU64,
    errors: AtomicU64,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TruthSnapshot {
    /// The value the callers believe the counter holds.
    pub value: i64,
    pub applied: u64,
    pub refused: u64,
    /// Errors surfaced to the callers.
    pub errors: u64,
}

impl Truth {
    /// Records one change's result. A -1 with nothing of the callers' left
    /// to undo ([`LabError::Empty`]) sent nothing: a refusal, not an error.
    pub fn record(&self, delta: i64, result: &Result<Outcome, LabError>) {
        let counter = match result {
            Ok(Outcome::Applied) => {
                self.value.fetch_add(delta, Ordering::Relaxed);
                &self.applied
            }
            Ok(Outcome::Refused) | Err(LabError::Empty) => &self.refused,
            Err(_) => &self.errors,
        };
        counter.fetch_add(1, Ordering::Relaxed);
    }

    pub fn snapshot(&self) -> TruthSnapshot {
        TruthSnapshot {
            value: self.value.load(Ordering::Relaxed),
            applied: self.applied.load(Ordering::Relaxed),
            refused: self.refused.load(Ordering::Relaxed),
            errors: self.errors.load(Ordering::Relaxed),
        }
    }
}

/// What every strategy keeps beside its counter: its callers' [`Truth`]
/// and the [`Meter`] of the capacity its requests consumed.
#[derive(Debug, Default)]
pub struct Books {
    pub truth: Truth,
    pub meter: Meter,
}

/// One way to keep a counter.
pub trait Strategy: Send + Sync {
    fn name(&self) -> &'static str;

    /// Whether [`Self::change`] honours a threshold (false: it is ignored).
    fn supports_threshold(&self) -> bool {
        true
    }

    /// Adds `delta` (+1 or -1); a +1 is refused when the value has reached
    /// `threshold`.
    fn change(&self, delta: i64, threshold: Option<i64>) -> BoxFuture<'_, Result<Outcome, LabError>>;

    /// The value as a caller reads it (strongly consistent).
    fn read(&self) -> BoxFuture<'_, Result<i64, LabError>>;

    /// What the counter stands for, counted at the source: the stored value
    /// for every approach but the hybrid, whose counters converge to its
    /// live items.
    fn actual(&self) -> BoxFuture<'_, Result<i64, LabError>> {
        self.read()
    }

    fn books(&self) -> &Books;

    fn truth(&self) -> &Truth {
        &self.books().truth
    }

    /// Capacity units DynamoDB reported for this strategy's requests.
    fn meter(&self) -> &Meter {
        &self.books().meter
    }

    /// [`Self::change`], recorded in [`Self::truth`].
    fn apply(&self, delta: i64, threshold: Option<i64>) -> BoxFuture<'_, Result<Outcome, LabError>> {
        Box::pin(async move {
            let result = self.change(delta, threshold).await;
            self.truth().record(delta, &result);
            result
        })
    }
}

/// Where a strategy keeps its counter: a table of the lab's layout
/// ([`crate::table`]) and the counter's partition key.
#[derive(Debug, Clone)]
pub struct Place {
    pub client: aws_sdk_dynamodb::Client,
    pub table: String,
    pub counter: String,
}

impl Place {
    pub fn new(client: aws_sdk_dynamodb::Client, table: &str, counter: &str) -> Self {
        Self {
            client,
            table: table.to_owned(),
            counter: counter.to_owned(),
        }
    }
}

/// One run of full-jitter retries from `base` up to `cap`, `max_attempts`
/// attempts in all.
pub fn retries(base: Duration, cap: Duration, max_attempts: u32) -> Retry {
    Retry::new(
        Backoff {
            base,
            cap,
            max_attempts,
        },
        None,
    )
}

/// The caller's own retries of a failed request, for the approaches whose
/// usual code retries at all: as many attempts, and the same backoff, as
/// the SDK tuning every strategy gets (3 attempts, 5 to 50 ms).
pub fn caller_retries() -> Retry {
    retries(Duration::from_millis(5), Duration::from_millis(50), 3)
}

/// The budget of an optimistic loop that lost to concurrent writers.
pub fn conflict_retries() -> Retry {
    retries(Duration::from_millis(2), Duration::from_millis(50), 40)
}

/// Whether the request may have been applied although it failed (a 500, a
/// timeout, a broken connection): its outcome is unknown.
pub fn is_ambiguous(err: &StoreError) -> bool {
    matches!(err, StoreError::Unavailable(_))
}

/// Whether sending the request again may succeed: throttled, busy, or
/// failed with an unknown outcome.
pub fn is_retryable(err: &StoreError) -> bool {
    matches!(err, StoreError::Transient(_)) || is_ambiguous(err)
}

/// Records the write capacity of one response.
pub fn charge_write<'a>(meter: &Meter, capacity: impl IntoIterator<Item = &'a ConsumedCapacity>) {
    for cc in capacity {
        meter.consumed(
            cc.write_capacity_units().or(cc.capacity_units()),
            cc.read_capacity_units(),
        );
    }
}

/// An item's size as DynamoDB bills it, near enough for the lab's small
/// items: attribute names plus values (a number about one byte per two
/// digits plus one).
pub fn item_size(item: &HashMap<String, AttributeValue>) -> usize {
    fn value(v: &AttributeValue) -> usize {
        match v {
            AttributeValue::S(s) => s.len(),
            AttributeValue::N(n) => n.len().div_ceil(2) + 1,
            AttributeValue::Ss(set) => set.iter().map(String::len).sum(),
            AttributeValue::Ns(set) => set.iter().map(|n| n.len().div_ceil(2) + 1).sum(),
            AttributeValue::L(list) => 3 + list.iter().map(|v| 1 + value(v)).sum::<usize>(),
            AttributeValue::M(map) => 3 + map.iter().map(|(k, v)| 1 + k.len() + value(v)).sum::<usize>(),
            _ => 1,
        }
    }
    item.iter().map(|(name, v)| name.len() + value(v)).sum()
}

/// The write units DynamoDB charges a write of an item of `size` bytes,
/// applied or refused by its condition: 1 per KB, at least 1.
pub fn write_units(size: usize) -> f64 {
    size.div_ceil(1024).max(1) as f64
}

/// Records the write units of a write refused by its condition, which
/// DynamoDB charges as if it had written the item (of `item_bytes`), and
/// neither the emulator nor the error reports.
pub fn charge_refused_write(meter: &Meter, item_bytes: usize) {
    meter.consumed(Some(write_units(item_bytes)), None);
}

/// Records the read capacity of one response.
pub fn charge_read(meter: &Meter, capacity: Option<&ConsumedCapacity>) {
    if let Some(cc) = capacity {
        meter.consumed(
            cc.write_capacity_units(),
            cc.read_capacity_units().or(cc.capacity_units()),
        );
    }
}

/// Tokens of changes the callers believe applied, for approaches whose -1
/// undoes one particular +1 (the token set removes its token, the hybrid
/// deletes its item).
#[derive(Debug, Default)]
pub struct Pool(Mutex<Vec<String>>);

impl Pool {
    pub fn put(&self, token: String) {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).push(token);
    }

    pub fn take(&self) -> Option<String> {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).pop()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn truth_counts_only_what_callers_were_told_was_applied() {
        let truth = Truth::default();
        truth.record(1, &Ok(Outcome::Applied));
        truth.record(1, &Ok(Outcome::Applied));
        truth.record(-1, &Ok(Outcome::Applied));
        truth.record(1, &Ok(Outcome::Refused));
        truth.record(1, &Err(LabError::Contended { attempts: 40 }));
        truth.record(-1, &Err(LabError::Empty));
        assert_eq!(
            truth.snapshot(),
            TruthSnapshot {
                value: 1,
                applied: 3,
                refused: 2,
                errors: 1
            }
        );
    }
}
