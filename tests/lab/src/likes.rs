//! Seed 004, "likes": the claim that two concurrent `ADD`s on one item can
//! drop one, and the fix it offers, a read-then-conditional-write loop.
//!
//! The loop as the seed writes it: `GetItem` without `ConsistentRead`, then
//! `ADD likes :one` on the condition `likes = :current` (the value just
//! read); on `ConditionalCheckFailedException` sleep a fixed 10 ms and go
//! again while `attempts <= tries` (tries = 10: 11 attempts), and when out
//! of tries return `False` without telling anyone ([`LikeLoop::as_written`]).
//! Two repairs only where it cannot run: the table comes from the [`Place`]
//! (for the seed's `self.table_name`), and a missing attribute
//! reads as 0 with the condition `attribute_not_exists(likes)` (the seed
//! indexes the attribute and fails on a fresh item). [`LikeLoop::repaired`]
//! is the same loop with a strongly consistent read and full-jitter backoff.
//!
//! Each attempt's failed conditional write is charged as DynamoDB charges
//! it: the write units of the item's size ([`charge_refused_write`]).

use std::collections::HashMap;
use std::time::Duration;

use aws_sdk_dynamodb::types::{AttributeValue, ReturnConsumedCapacity};
use hybrid_counter::error::StoreError;
use hybrid_counter::store::meter::Meter;
use hybrid_counter_aws::dynamo::classify;

use crate::strategy::{Place, charge_refused_write, charge_write, item_size, retries};
use crate::table::{self, COUNTER_SK, VALUE, key, n};

/// The seed's `tries`: its loop runs while `attempts <= tries`, from 0.
pub const TRIES: u32 = 10;

/// How the loop waits after a failed condition.
#[derive(Debug, Clone, Copy)]
pub enum Pause {
    /// The same sleep after every attempt (the seed: 10 ms).
    Fixed(Duration),
    /// Exponential backoff with full jitter (the kit's [`hybrid_counter::retry::Retry`]).
    FullJitter { base: Duration, cap: Duration },
}

/// What one call of the loop came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Like {
    /// The seed's return value: `false` when the tries ran out, the like
    /// silently dropped.
    pub liked: bool,
    /// Conditional writes sent (the SDK's own retries not counted).
    pub attempts: u32,
}

pub struct LikeLoop {
    place: Place,
    consistent_read: bool,
    pause: Pause,
    meter: Meter,
}

impl LikeLoop {
    pub fn new(place: Place, consistent_read: bool, pause: Pause) -> Self {
        Self {
            place,
            consistent_read,
            pause,
            meter: Meter::default(),
        }
    }

    /// The seed's loop: eventually consistent read, fixed 10 ms sleep.
    pub fn as_written(place: Place) -> Self {
        Self::new(place, false, Pause::Fixed(Duration::from_millis(10)))
    }

    /// The same loop with a consistent read and full jitter from 10 ms
    /// (capped at 1 s), the same 11 attempts.
    pub fn repaired(place: Place) -> Self {
        let pause = Pause::FullJitter {
            base: Duration::from_millis(10),
            cap: Duration::from_secs(1),
        };
        Self::new(place, true, pause)
    }

    /// Capacity this loop's requests consumed, failed conditional writes
    /// included.
    pub fn meter(&self) -> &Meter {
        &self.meter
    }

    /// One conditional `ADD` of 1 over the value `item` holds.
    async fn add_if_unchanged(&self, item: Option<&HashMap<String, AttributeValue>>) -> Result<(), StoreError> {
        let current = item.and_then(|item| item.get(VALUE));
        let mut values = HashMap::from([(":one".to_owned(), n(1))]);
        let condition = match current {
            Some(value) => {
                values.insert(":current".to_owned(), value.clone());
                "#n = :current"
            }
            None => "attribute_not_exists(#n)",
        };
        let out = self
            .place
            .client
            .update_item()
            .table_name(&self.place.table)
            .set_key(Some(key(&self.place.counter, COUNTER_SK)))
            .update_expression("ADD #n :one")
            .condition_expression(condition)
            .expression_attribute_names("#n", VALUE)
            .set_expression_attribute_values(Some(values))
            .return_consumed_capacity(ReturnConsumedCapacity::Total)
            .send()
            .await
            .map_err(classify)?;
        charge_write(&self.meter, out.consumed_capacity());
        Ok(())
    }

    /// One like: the seed's loop. Errors other than a failed condition end
    /// it, as they raise in the seed.
    pub async fn like(&self) -> Result<Like, StoreError> {
        // The fixed pause, or the jitter's run with its random source.
        let (fixed, mut jitter) = match self.pause {
            Pause::Fixed(pause) => (pause, None),
            Pause::FullJitter { base, cap } => (Duration::ZERO, Some(retries(base, cap, u32::MAX))),
        };
        let mut attempts = 0;
        loop {
            attempts += 1;
            let item = table::read_counter_item(&self.place, &self.meter, self.consistent_read).await?;
            match self.add_if_unchanged(item.as_ref()).await {
                Ok(()) => return Ok(Like { liked: true, attempts }),
                Err(StoreError::ConditionFailed) => {
                    // Charged on the item as stored, about the size of the one read.
                    charge_refused_write(&self.meter, item.as_ref().map_or(0, item_size));
                }
                Err(err) => return Err(err),
            }
            if attempts > TRIES {
                return Ok(Like { liked: false, attempts });
            }
            match &mut jitter {
                Some(retry) => {
                    retry.pause().await;
                }
                None => tokio::time::sleep(fixed).await,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use aws_sdk_dynamodb::Client;
    use aws_sdk_dynamodb::operation::get_item::{GetItemInput, GetItemOutput};
    use aws_sdk_dynamodb::operation::update_item::{UpdateItemError, UpdateItemInput, UpdateItemOutput};
    use aws_sdk_dynamodb::types::error::ConditionalCheckFailedException;
    use aws_smithy_mocks::{Rule, RuleMode, mock};

    use super::*;
    use crate::table::s;
    use crate::test_util::{client_in_mode, log, logged, logging, meta};

    fn item(likes: i64) -> HashMap<String, AttributeValue> {
        HashMap::from([
            (table::PK.to_owned(), s("hot")),
            (table::SK.to_owned(), s(COUNTER_SK)),
            (VALUE.to_owned(), n(likes)),
        ])
    }

    fn condition_failed() -> UpdateItemError {
        UpdateItemError::ConditionalCheckFailedException(
            ConditionalCheckFailedException::builder()
                .meta(meta("ConditionalCheckFailedException"))
                .build(),
        )
    }

    /// A table whose value is 6 while an eventually consistent read may
    /// still answer 5 (a replica the last `ADD` has not reached): reads
    /// with `ConsistentRead` see 6, the others 5; a write conditioned on 6
    /// succeeds, any other fails its condition.
    fn stale_replica() -> Vec<Rule> {
        let consistent = |input: &GetItemInput| input.consistent_read() == Some(true);
        let on_six = |input: &UpdateItemInput| input.expression_attribute_values().unwrap()[":current"] == n(6);
        vec![
            mock!(Client::get_item)
                .match_requests(consistent)
                .then_output(|| GetItemOutput::builder().set_item(Some(item(6))).build()),
            mock!(Client::get_item)
                .match_requests(move |input| !consistent(input))
                .then_output(|| GetItemOutput::builder().set_item(Some(item(5))).build()),
            mock!(Client::update_item)
                .match_requests(on_six)
                .then_output(|| UpdateItemOutput::builder().build()),
            mock!(Client::update_item)
                .match_requests(move |input| !on_six(input))
                .then_error(condition_failed),
        ]
    }

    fn place_of(rules: &[Rule]) -> Place {
        Place::new(client_in_mode(rules, true, RuleMode::MatchAny), "lab", "hot")
    }

    /// Known failure mode of the seed's loop: after 11 failed conditions it
    /// returns `false` and nothing was applied; the caller is not told why,
    /// and each failed conditional write was charged 1 WU; the pauses are
    /// its fixed 10 ms.
    #[tokio::test(start_paused = true)]
    async fn the_blogs_loop_gives_up_silently_after_eleven_conflicts_without_applying() {
        let reads = log();
        let writes = log();
        let read = mock!(Client::get_item)
            .match_requests(logging(&reads))
            .then_output(|| GetItemOutput::builder().set_item(Some(item(5))).build());
        let write = mock!(Client::update_item)
            .match_requests(logging(&writes))
            .then_error(condition_failed);
        let likes = LikeLoop::as_written(place_of(&[read, write]));
        let started = tokio::time::Instant::now();
        assert_eq!(
            likes.like().await,
            Ok(Like {
                liked: false,
                attempts: 11
            })
        );
        assert_eq!(started.elapsed(), Duration::from_millis(100), "ten fixed 10 ms sleeps");
        let (reads, writes) = (logged(&reads), logged(&writes));
        assert_eq!((reads.len(), writes.len()), (11, 11));
        assert!(reads.iter().all(|r| r.consistent_read() != Some(true)));
        for w in &writes {
            assert_eq!(w.update_expression(), Some("ADD #n :one"));
            assert_eq!(w.condition_expression(), Some("#n = :current"));
            assert_eq!(w.expression_attribute_values().unwrap()[":current"], n(5));
        }
        let used = likes.meter().snapshot();
        assert_eq!(used.write_units, 11.0, "every failed conditional write is charged");
    }

    /// Against a replica one `ADD` behind, the seed's eventually consistent
    /// read is what makes it retry (and, while the replica lags, lose the
    /// like); the same loop with only the read made consistent applies on
    /// its first attempt.
    #[tokio::test(start_paused = true)]
    async fn its_eventually_consistent_read_is_what_makes_it_retry() {
        let fixed = Pause::Fixed(Duration::from_millis(10));
        let written = LikeLoop::new(place_of(&stale_replica()), false, fixed);
        assert_eq!(
            written.like().await,
            Ok(Like {
                liked: false,
                attempts: 11
            })
        );
        let consistent = LikeLoop::new(place_of(&stale_replica()), true, fixed);
        assert_eq!(
            consistent.like().await,
            Ok(Like {
                liked: true,
                attempts: 1
            })
        );
    }

    /// The repair the seed needs to run at all: a fresh item has no
    /// attribute, read as 0 and conditioned on its absence.
    #[tokio::test]
    async fn a_fresh_item_is_liked_on_the_condition_that_the_attribute_is_absent() {
        let writes = log();
        let read = mock!(Client::get_item).then_output(|| GetItemOutput::builder().build());
        let write = mock!(Client::update_item)
            .match_requests(logging(&writes))
            .then_output(|| UpdateItemOutput::builder().build());
        let likes = LikeLoop::repaired(place_of(&[read, write]));
        assert_eq!(
            likes.like().await,
            Ok(Like {
                liked: true,
                attempts: 1
            })
        );
        let writes = logged(&writes);
        assert_eq!(writes[0].condition_expression(), Some("attribute_not_exists(#n)"));
    }
}
