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
//! never overshoots (see [`hybrid_counter::request`]).

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
    use aws_sdk_dynamodb::operation::update_item::UpdateItemOutput;
    use aws_smithy_mocks::mock;

    use super::*;
    use crate::test_util::client;

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
        let rules = [
            mock!(Client::query).then_output(|| QueryOutput::builder().build()),
            mock!(Client::put_item).then_output(|| PutItemOutput::builder().build()),
            updates.clone(),
        ];
        let hybrid = Hybrid::new(
            client(&rules, true),
            &config(),
            Scope::new("hot").unwrap(),
            Admission::BestEffort,
            10,
        );
        assert_eq!(hybrid.apply(1, Some(10)).await, Ok(Outcome::Applied));
        assert_eq!(updates.num_calls(), 1, "the BE increment was sent once");
        assert_eq!(hybrid.truth().snapshot().value, 1);
    }
}
