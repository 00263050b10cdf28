//! The kit's hybrid counter as a lab strategy: the library's
//! [`Counter`] over [`DynamoStore`], unchanged. A +1 creates an item of the
//! scope (the limit is the threshold), a -1 deletes one the callers
//! created. The request path writes the best-effort counter (BE) inline;
//! the stream pipeline (the deployed event source mapping, run by the
//! local runner in `make compare`) makes the eventual counter (EC) exact.
//! [`Strategy::read`] is what admission reads (`max(BE, EC)`);
//! [`Strategy::actual`] is the scope's live items, what EC converges to.
//!
//! Best-effort admission may overshoot the limit under concurrency and its
//! BE undercounts on errors; strict admission reserves before it puts and
//! never overshoots (see [`hybrid_counter::request`]). How far best-effort
//! admission may go is [`overshoot_bound`], from what a run lost of BE
//! ([`lost_increments`]).

use hybrid_counter::config::{Admission, CounterConfig};
use hybrid_counter::error::Error;
use hybrid_counter::store::meter::Meter;
use hybrid_counter::{AuditStore as _, Counter, ResourceId, Scope, now_millis};
use hybrid_counter_aws::DynamoStore;
use serde_dynamo::Item;

use crate::strategy::{Books, BoxFuture, LabError, Outcome, Pool, Strategy};

pub struct Hybrid {
    counter: Counter<DynamoStore>,
    scope: Scope,
    /// Ids the callers believe created, for the -1s to delete.
    created: Pool,
    books: Books,
}

impl Hybrid {
    /// The counter of `scope` on `config`'s tables, admitting in
    /// `admission` mode up to `limit` items.
    pub fn new(
        client: aws_sdk_dynamodb::Client,
        config: &CounterConfig,
        scope: Scope,
        admission: Admission,
        limit: u64,
    ) -> Self {
        let meter = Meter::new();
        let config = CounterConfig {
            admission,
            ..config.clone()
        };
        let store = DynamoStore::new(client, &config).with_meter(meter.clone());
        Self {
            counter: Counter::configured(store, limit, &config),
            scope,
            created: Pool::default(),
            books: Books {
                truth: Default::default(),
                meter,
            },
        }
    }

    /// `(BE, EC)` of the scope.
    pub async fn counters(&self) -> Result<(i64, i64), LabError> {
        let usage = self.counter.usage(&self.scope).await.map_err(kit)?;
        Ok((usage.best_effort, usage.eventual))
    }

    async fn add(&self, delta: i64) -> Result<Outcome, LabError> {
        if delta > 0 {
            let id =
                ResourceId::new(uuid::Uuid::new_v4().simple().to_string()).map_err(|e| LabError::Kit(e.to_string()))?;
            return match self
                .counter
                .create(&self.scope, &id, Item::default(), now_millis())
                .await
            {
                Ok(_) => {
                    self.created.put(id.as_str().to_owned());
                    Ok(Outcome::Applied)
                }
                Err(err) if err.is_limit_exceeded() => Ok(Outcome::Refused),
                Err(err) => Err(kit(err)),
            };
        }
        let id = self.created.take().ok_or(LabError::Empty)?;
        let resource = ResourceId::new(id.clone()).map_err(|e| LabError::Kit(e.to_string()))?;
        match self.counter.delete(&self.scope, &resource, now_millis()).await {
            Ok(()) => Ok(Outcome::Applied),
            // Gone already: nothing to give back.
            Err(err @ Error::NotFound) => Err(kit(err)),
            Err(err) => {
                self.created.put(id);
                Err(kit(err))
            }
        }
    }
}

/// BE increments a run lost by the end of its creates (before any delete):
/// the live items then, minus BE then. BE never overcounts (DESIGN §1), so
/// every create it misses is one lost increment (failed, throttled, or its
/// create answered as an error after its put landed).
pub fn lost_increments(live: i64, best_effort: i64) -> i64 {
    (live - best_effort).max(0)
}

/// How far past its limit best-effort admission may take a scope's live
/// items with `callers` concurrent creators when BE lost `lost` increments,
/// by DESIGN §1 and §3: a create is admitted on `max(BE, EC) < limit` read
/// strongly consistent, then put, then BE is incremented once. Take the
/// last create admitted: it read BE ≤ limit - 1. Every create that landed
/// was admitted no later, so it is either counted in BE at that read, or
/// lost to BE (at most `lost`), or admitted but not yet incremented: one
/// in flight per caller at most, itself included. The live items are then
/// at most `limit - 1 + lost + callers`: the overshoot at most
/// `callers - 1 + lost`, tight when every caller reads `limit - 1` at once.
pub fn overshoot_bound(callers: usize, lost: i64) -> i64 {
    callers as i64 - 1 + lost.max(0)
}

fn kit(err: Error) -> LabError {
    LabError::Kit(err.to_string())
}

impl Strategy for Hybrid {
    fn name(&self) -> &'static str {
        match self.counter.admission() {
            Admission::Strict => "hybrid, strict admission",
            _ => "hybrid, best-effort admission",
        }
    }

    fn change(&self, delta: i64, _threshold: Option<i64>) -> BoxFuture<'_, Result<Outcome, LabError>> {
        Box::pin(self.add(delta))
    }

    fn read(&self) -> BoxFuture<'_, Result<i64, LabError>> {
        Box::pin(async move {
            let usage = self.counter.usage(&self.scope).await.map_err(kit)?;
            Ok(usage.effective)
        })
    }

    fn actual(&self) -> BoxFuture<'_, Result<i64, LabError>> {
        Box::pin(async move {
            let items = self.counter.store().scope_items(&self.scope).await?;
            Ok(items.iter().filter(|item| !item.deleted).count() as i64)
        })
    }

    fn books(&self) -> &Books {
        &self.books
    }
}

#[cfg(test)]
mod tests {
    use aws_sdk_dynamodb::Client;
    use aws_sdk_dynamodb::operation::put_item::PutItemOutput;
    use aws_sdk_dynamodb::operation::query::QueryOutput;
    use aws_sdk_dynamodb::operation::update_item::{UpdateItemError, UpdateItemOutput};
    use aws_smithy_mocks::{Rule, mock};

    use super::*;
    use crate::test_util::{client, meta};

    fn config() -> CounterConfig {
        CounterConfig {
            resources_table: "resources".into(),
            counters_table: "counters".into(),
            default_limit: Some(10),
            eventual_shards: 1,
            best_effort_shards: 1,
            admission: Admission::BestEffort,
            scope_keys: Default::default(),
        }
    }

    /// A best-effort counter of limit 10 on an empty scope whose BE
    /// increments `updates` answers.
    fn best_effort_over(updates: &Rule, sdk_retries: bool) -> Hybrid {
        let rules = [
            mock!(Client::query).then_output(|| QueryOutput::builder().build()),
            mock!(Client::put_item).then_output(|| PutItemOutput::builder().build()),
            updates.clone(),
        ];
        Hybrid::new(
            client(&rules, sdk_retries),
            &config(),
            Scope::new("hot").unwrap(),
            Admission::BestEffort,
            10,
        )
    }

    /// The kit's guarantee in best-effort admission: the best-effort
    /// increment is sent once, never retried after an ambiguous 500 (so BE
    /// never overcounts), and the create still succeeds: the caller's
    /// change is counted exactly by EC once the stream is drained.
    #[tokio::test]
    async fn an_ambiguous_best_effort_increment_is_not_retried_and_the_create_stands() {
        // A retry would be answered (and counted): the kit must not send one.
        let updates = mock!(Client::update_item)
            .sequence()
            .http_status(500, None)
            .output(|| UpdateItemOutput::builder().build())
            .build();
        let hybrid = best_effort_over(&updates, true);
        assert_eq!(hybrid.apply(1, Some(10)).await, Ok(Outcome::Applied));
        assert_eq!(updates.num_calls(), 1, "the BE increment was sent once");
        assert_eq!(hybrid.truth().snapshot().value, 1);
    }

    /// A throttle wrote nothing, so the kit sends the BE increment again
    /// (its busy attempts, 4); throttled on every one, the increment is
    /// given up and swallowed: the create stands and BE misses it, one lost
    /// increment of the bound.
    #[tokio::test]
    async fn a_best_effort_increment_throttled_past_the_kits_attempts_is_lost_and_the_create_stands() {
        let updates = mock!(Client::update_item)
            .sequence()
            .error(|| UpdateItemError::generic(meta("ThrottlingException")))
            .times(4)
            .build();
        let hybrid = best_effort_over(&updates, false);
        assert_eq!(hybrid.apply(1, Some(10)).await, Ok(Outcome::Applied));
        assert_eq!(updates.num_calls(), 4, "sent again while throttled, then given up");
        assert_eq!(hybrid.truth().snapshot().value, 1, "the create stands");
    }

    /// Concurrent admission over a lagging BE, played in rounds where every
    /// caller reads BE at once and then creates (the first `lost` BE
    /// increments lost): the overshoot never passes the bound, and reaches
    /// it when the last round reads `limit - 1`.
    #[test]
    fn the_bound_holds_and_is_reached_by_concurrent_admission_over_a_lagging_be() {
        let play = |callers: i64, lost: i64, limit: i64| {
            let (mut live, mut be) = (0i64, 0i64);
            while be < limit {
                for _ in 0..callers {
                    live += 1;
                    if live > lost {
                        be += 1;
                    }
                }
            }
            assert_eq!(lost_increments(live, be), lost.min(live));
            live - limit
        };
        for callers in 1..=8 {
            for lost in 0..=3 {
                for limit in 150..=170 {
                    let overshoot = play(callers, lost, limit);
                    assert!(
                        overshoot <= overshoot_bound(callers as usize, lost),
                        "{callers} callers, {lost} lost, limit {limit}: {overshoot}"
                    );
                }
                // Twenty rounds end at BE = limit - 1 before the last one.
                let limit = 20 * callers - lost + 1;
                assert_eq!(play(callers, lost, limit), overshoot_bound(callers as usize, lost));
            }
        }
        assert_eq!(overshoot_bound(8, 0), 7);
        assert_eq!(overshoot_bound(8, -3), 7, "BE never overcounts: nothing lost");
        assert_eq!(lost_increments(5, 7), 0);
    }
}
