//! [`Store`] over `aws-sdk-dynamodb`: expression building and error
//! classification, nothing else. Every attribute is referenced through a
//! `#placeholder` (several names are reserved words).

use std::collections::HashMap;

use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::config::retry::RetryConfig;
use aws_sdk_dynamodb::error::{DisplayErrorContext, ProvideErrorMetadata, SdkError};
use aws_sdk_dynamodb::operation::transact_write_items::TransactWriteItemsError;
use aws_sdk_dynamodb::types::{
    AttributeValue, ConsumedCapacity, Delete, KeysAndAttributes, ReturnConsumedCapacity, TransactWriteItem, Update,
};
use serde::Deserialize;

use hybrid_counter::EpochMillis;
use hybrid_counter::config::{Admission, CounterConfig};
use hybrid_counter::error::{CancelReason, StoreError};
use hybrid_counter::ids::Scope;
use hybrid_counter::items::{CounterItem, CounterSnapshot, ItemRow, ResourceState};
use hybrid_counter::keys;
use hybrid_counter::retry::{Backoff, Retry};
use hybrid_counter::store::meter::{Meter, Operation, Written};
use hybrid_counter::store::{CounterDelta, ItemWrite, NewResource, ResourceKey, Store, Transaction};

/// The DynamoDB implementation of [`Store`].
#[derive(Debug, Clone)]
pub struct DynamoStore {
    client: Client,
    resources_table: String,
    counters_table: String,
    meter: Meter,
    /// How the scopes are admitted, so the audit reads BE against the live
    /// count by the right invariant ([`hybrid_counter::audit::findings_for`]).
    admission: Admission,
}

impl DynamoStore {
    pub fn new(client: Client, config: &CounterConfig) -> Self {
        Self {
            client,
            resources_table: config.resources_table.clone(),
            counters_table: config.counters_table.clone(),
            meter: Meter::default(),
            admission: config.admission,
        }
    }

    /// The admission mode [`hybrid_counter::audit::Auditor::audit_scope`] audits by (from the
    /// configuration by default).
    pub fn with_admission(mut self, admission: Admission) -> Self {
        self.admission = admission;
        self
    }

    pub fn admission(&self) -> Admission {
        self.admission
    }

    /// Counts this store's requests on `meter` (shared with other stores).
    pub fn with_meter(mut self, meter: Meter) -> Self {
        self.meter = meter;
        self
    }

    pub fn client(&self) -> &Client {
        &self.client
    }

    /// The counters table's name.
    pub fn counters_table(&self) -> &str {
        &self.counters_table
    }

    /// The cost accounting of the requests this store sent.
    pub fn meter(&self) -> &Meter {
        &self.meter
    }

    /// Records the capacity of one write's response (`TOTAL` mode reports
    /// `CapacityUnits`; a split, where given, is preferred).
    fn consumed<'a>(&self, capacity: impl IntoIterator<Item = &'a ConsumedCapacity>) {
        for cc in capacity {
            self.meter.consumed(
                cc.write_capacity_units().or(cc.capacity_units()),
                cc.read_capacity_units(),
            );
        }
    }

    /// Records the capacity of one read's response.
    fn consumed_read(&self, capacity: Option<&ConsumedCapacity>) {
        if let Some(cc) = capacity {
            self.meter.consumed(
                cc.write_capacity_units(),
                cc.read_capacity_units().or(cc.capacity_units()),
            );
        }
    }

    /// Records one plain write's outcome (`capacity` reads the consumed
    /// capacity of its answer) and returns it without the answer.
    fn plain<T>(
        &self,
        result: Result<T, StoreError>,
        written: Written,
        capacity: impl Fn(&T) -> Option<&ConsumedCapacity>,
    ) -> Result<(), StoreError> {
        match &result {
            Ok(out) => {
                self.meter.plain_write(written);
                self.consumed(capacity(out));
            }
            Err(_) => self.meter.failed(),
        }
        result.map(drop)
    }
}

/// Whether an error code is a failed condition on a plain write.
pub fn is_conditional_check_failed(code: Option<&str>) -> bool {
    code == Some("ConditionalCheckFailedException")
}

/// Whether an error code means "too fast or busy, retry later": throttling,
/// or the item is held by a concurrent transaction.
pub fn is_throttle(code: Option<&str>) -> bool {
    matches!(
        code,
        Some(
            "ProvisionedThroughputExceededException"
                | "ThrottlingException"
                | "RequestLimitExceeded"
                | "TransactionConflictException"
                | "TransactionInProgressException"
        )
    )
}

/// Whether an error code means the request itself is invalid.
pub fn is_validation(code: Option<&str>) -> bool {
    code == Some("ValidationException")
}

/// Classifies an SDK error by its error code (never by message text).
pub fn classify<E, R>(err: SdkError<E, R>) -> StoreError
where
    E: ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
    R: std::fmt::Debug,
{
    let code = err.code().map(str::to_owned);
    if is_conditional_check_failed(code.as_deref()) {
        StoreError::ConditionFailed
    } else if is_throttle(code.as_deref()) {
        StoreError::Transient(code.unwrap_or_default())
    } else if is_validation(code.as_deref()) {
        StoreError::Rejected(err.message().unwrap_or("ValidationException").to_owned())
    } else {
        StoreError::Unavailable(DisplayErrorContext(&err).to_string())
    }
}

fn s(value: impl Into<String>) -> AttributeValue {
    AttributeValue::S(value.into())
}

fn n(value: i64) -> AttributeValue {
    AttributeValue::N(value.to_string())
}

fn resource_key(key: &ResourceKey) -> HashMap<String, AttributeValue> {
    HashMap::from([
        (keys::SCOPE.to_owned(), s(key.scope.as_str())),
        (keys::ID.to_owned(), s(key.id.as_str())),
    ])
}

fn counter_key(scope: &Scope, name: &str) -> HashMap<String, AttributeValue> {
    HashMap::from([
        (keys::SCOPE.to_owned(), s(scope.as_str())),
        (keys::NAME.to_owned(), s(name)),
    ])
}

/// `ADD count :delta, version :one SET updated_at = :now` on a counter item.
const COUNTER_UPDATE: &str = "ADD #count :delta, #version :one SET #updated_at = :now";

fn counter_names() -> HashMap<String, String> {
    HashMap::from([
        ("#count".to_owned(), keys::COUNT.to_owned()),
        ("#version".to_owned(), keys::VERSION.to_owned()),
        ("#updated_at".to_owned(), keys::UPDATED_AT.to_owned()),
    ])
}

fn counter_values(delta: i64, now: EpochMillis) -> HashMap<String, AttributeValue> {
    HashMap::from([
        (":delta".to_owned(), n(delta)),
        (":one".to_owned(), n(1)),
        (":now".to_owned(), n(now)),
    ])
}

fn build_error(err: impl std::fmt::Display) -> StoreError {
    StoreError::Unavailable(format!("could not build request: {err}"))
}

impl DynamoStore {
    /// The update of best-effort item `name` (`ADD count, version; SET
    /// updated_at`), under `condition` if any, sent once: the SDK's retries
    /// are off, because after an ambiguous failure a retry could count
    /// twice.
    async fn update_best_effort(
        &self,
        scope: &Scope,
        name: &str,
        values: HashMap<String, AttributeValue>,
        condition: Option<&str>,
    ) -> Result<(), StoreError> {
        hybrid_counter::store::check_best_effort_name(name)?;
        self.meter.request(Operation::UpdateItem);
        let out = self
            .client
            .update_item()
            .table_name(&self.counters_table)
            .set_key(Some(counter_key(scope, name)))
            .update_expression(COUNTER_UPDATE)
            .set_condition_expression(condition.map(str::to_owned))
            .set_expression_attribute_names(Some(counter_names()))
            .set_expression_attribute_values(Some(values))
            .return_consumed_capacity(ReturnConsumedCapacity::Total)
            .customize()
            .config_override(aws_sdk_dynamodb::Config::builder().retry_config(RetryConfig::disabled()))
            .send()
            .await
            .map_err(classify);
        self.plain(out, Written::COUNTER, |o| o.consumed_capacity.as_ref())
    }

    fn counter_action(&self, delta: &CounterDelta, now: EpochMillis) -> Result<TransactWriteItem, StoreError> {
        let update = Update::builder()
            .table_name(&self.counters_table)
            .set_key(Some(counter_key(&delta.scope, &delta.name)))
            .update_expression(COUNTER_UPDATE)
            .set_expression_attribute_names(Some(counter_names()))
            .set_expression_attribute_values(Some(counter_values(delta.delta, now)))
            .build()
            .map_err(build_error)?;
        Ok(TransactWriteItem::builder().update(update).build())
    }

    fn item_action(&self, write: &ItemWrite) -> Result<TransactWriteItem, StoreError> {
        let names = HashMap::from([
            ("#cp".to_owned(), keys::COUNTER_PROCESSED.to_owned()),
            ("#inc".to_owned(), keys::INCARNATION.to_owned()),
        ]);
        match write {
            ItemWrite::MarkCounted { key, incarnation } => {
                let update = Update::builder()
                    .table_name(&self.resources_table)
                    .set_key(Some(resource_key(key)))
                    .update_expression("SET #cp = :true")
                    .condition_expression("#cp = :false AND #inc = :inc")
                    .set_expression_attribute_names(Some(names))
                    .expression_attribute_values(":true", AttributeValue::Bool(true))
                    .expression_attribute_values(":false", AttributeValue::Bool(false))
                    .expression_attribute_values(":inc", s(incarnation))
                    .build()
                    .map_err(build_error)?;
                Ok(TransactWriteItem::builder().update(update).build())
            }
            ItemWrite::DeleteCounted { key, incarnation } | ItemWrite::DeleteUncounted { key, incarnation } => {
                let counted = matches!(write, ItemWrite::DeleteCounted { .. });
                let mut names = names;
                names.insert("#del".to_owned(), keys::DELETED.to_owned());
                let delete = Delete::builder()
                    .table_name(&self.resources_table)
                    .set_key(Some(resource_key(key)))
                    .condition_expression("#del = :true AND #cp = :counted AND #inc = :inc")
                    .set_expression_attribute_names(Some(names))
                    .expression_attribute_values(":true", AttributeValue::Bool(true))
                    .expression_attribute_values(":counted", AttributeValue::Bool(counted))
                    .expression_attribute_values(":inc", s(incarnation))
                    .build()
                    .map_err(build_error)?;
                Ok(TransactWriteItem::builder().delete(delete).build())
            }
        }
    }
}

/// The kit attributes of a resource item, for [`Store::get_resource`].
#[derive(Deserialize)]
struct StateImage {
    #[serde(default)]
    counter_processed: bool,
    #[serde(default)]
    deleted: bool,
    incarnation: String,
    #[serde(default)]
    be_shard: Option<u32>,
}

impl From<StateImage> for ResourceState {
    fn from(image: StateImage) -> Self {
        ResourceState {
            counter_processed: image.counter_processed,
            deleted: image.deleted,
            incarnation: image.incarnation,
            be_shard: image.be_shard,
        }
    }
}

/// A [`StateImage`] with its key, for [`Store::get_resources`].
#[derive(Deserialize)]
struct KeyedStateImage {
    scope: String,
    id: String,
    #[serde(flatten)]
    state: StateImage,
}

/// The kit attributes [`StateImage`] reads, for a projection expression
/// (with [`state_names`]).
const STATE_PROJECTION: &str = "#cp, #del, #inc, #shard";

/// The placeholders of [`STATE_PROJECTION`].
fn state_names() -> HashMap<String, String> {
    HashMap::from([
        ("#cp".to_owned(), keys::COUNTER_PROCESSED.to_owned()),
        ("#del".to_owned(), keys::DELETED.to_owned()),
        ("#inc".to_owned(), keys::INCARNATION.to_owned()),
        ("#shard".to_owned(), keys::BE_SHARD.to_owned()),
    ])
}

/// Keys per `BatchGetItem` request (DynamoDB's limit).
const MAX_BATCH_GET: usize = 100;
/// Requests for one chunk of keys before unprocessed keys are an error,
/// and the waits between them (20 ms doubling, up to 1.28 s).
const UNPROCESSED_KEYS_BACKOFF: Backoff = Backoff {
    base: std::time::Duration::from_millis(20),
    cap: std::time::Duration::from_millis(1_280),
    max_attempts: 8,
};

impl Store for DynamoStore {
    fn cost_meter(&self) -> Option<&Meter> {
        Some(&self.meter)
    }

    async fn read_counters(&self, scope: &Scope) -> Result<CounterSnapshot, StoreError> {
        Ok(CounterSnapshot::from_items(self.counter_items(scope).await?))
    }

    async fn put_resource(&self, resource: &NewResource) -> Result<(), StoreError> {
        let mut item: HashMap<String, AttributeValue> = resource.payload.clone().into();
        let kit: HashMap<String, AttributeValue> =
            serde_dynamo::to_item(&resource.item).map_err(|e| StoreError::Malformed(e.to_string()))?;
        item.extend(kit);
        self.meter.request(Operation::PutItem);
        let out = self
            .client
            .put_item()
            .table_name(&self.resources_table)
            .set_item(Some(item))
            .condition_expression("attribute_not_exists(#scope)")
            .expression_attribute_names("#scope", keys::SCOPE)
            .return_consumed_capacity(ReturnConsumedCapacity::Total)
            .send()
            .await
            .map_err(classify);
        self.plain(out, Written::RESOURCE, |o| o.consumed_capacity.as_ref())
    }

    async fn add_best_effort(&self, scope: &Scope, name: &str, delta: i64, now: EpochMillis) -> Result<(), StoreError> {
        // One attempt only: a retry after an ambiguous 500 could count twice.
        self.update_best_effort(scope, name, counter_values(delta, now), None)
            .await
    }

    async fn reserve_best_effort(
        &self,
        scope: &Scope,
        name: &str,
        quota: u64,
        now: EpochMillis,
    ) -> Result<(), StoreError> {
        // `attribute_not_exists(count)` admits the first reservation of a
        // shard, which is only right when its quota leaves room for one.
        if quota == 0 {
            return Err(StoreError::ConditionFailed);
        }
        let mut values = counter_values(1, now);
        values.insert(":quota".to_owned(), n(i64::try_from(quota).unwrap_or(i64::MAX)));
        // One attempt only: after an ambiguous 500 the slot may be reserved
        // already, and a retry would reserve a second one.
        self.update_best_effort(
            scope,
            name,
            values,
            Some("attribute_not_exists(#count) OR #count < :quota"),
        )
        .await
    }

    async fn get_resource(&self, key: &ResourceKey) -> Result<Option<ResourceState>, StoreError> {
        self.meter.request(Operation::GetItem);
        let out = self
            .client
            .get_item()
            .table_name(&self.resources_table)
            .set_key(Some(resource_key(key)))
            .consistent_read(true)
            .projection_expression(STATE_PROJECTION)
            .set_expression_attribute_names(Some(state_names()))
            .return_consumed_capacity(ReturnConsumedCapacity::Total)
            .send()
            .await
            .map_err(classify)
            .inspect_err(|_| self.meter.failed())?;
        self.consumed_read(out.consumed_capacity.as_ref());
        let Some(item) = out.item else { return Ok(None) };
        let image: StateImage = serde_dynamo::from_item(item)
            .map_err(|e| StoreError::Malformed(format!("resource {}/{}: {e}", key.scope, key.id)))?;
        Ok(Some(image.into()))
    }

    async fn get_resources(&self, keys: &[ResourceKey]) -> Result<Vec<Option<ResourceState>>, StoreError> {
        let mut found: HashMap<(String, String), ResourceState> = HashMap::new();
        for chunk in keys.chunks(MAX_BATCH_GET) {
            let mut request = Some(
                KeysAndAttributes::builder()
                    .set_keys(Some(chunk.iter().map(resource_key).collect()))
                    .consistent_read(true)
                    .projection_expression(format!("#scope, #id, {STATE_PROJECTION}"))
                    .set_expression_attribute_names(Some(state_names()))
                    .expression_attribute_names("#scope", keys::SCOPE)
                    .expression_attribute_names("#id", keys::ID)
                    .build()
                    .map_err(build_error)?,
            );
            // Keys DynamoDB left unprocessed (throttling, response size) are
            // asked again after a full-jitter backoff, a bounded number of
            // times.
            let mut retry = Retry::new(UNPROCESSED_KEYS_BACKOFF, None);
            while let Some(wanted) = request.take() {
                self.meter.request(Operation::BatchGetItem);
                let out = self
                    .client
                    .batch_get_item()
                    .request_items(&self.resources_table, wanted)
                    .return_consumed_capacity(ReturnConsumedCapacity::Total)
                    .send()
                    .await
                    .map_err(classify)
                    .inspect_err(|_| self.meter.failed())?;
                for cc in out.consumed_capacity() {
                    self.consumed_read(Some(cc));
                }
                for item in out
                    .responses
                    .unwrap_or_default()
                    .remove(&self.resources_table)
                    .unwrap_or_default()
                {
                    let image: KeyedStateImage = serde_dynamo::from_item(item)
                        .map_err(|e| StoreError::Malformed(format!("resource item: {e}")))?;
                    found.insert((image.scope, image.id), image.state.into());
                }
                request = out
                    .unprocessed_keys
                    .unwrap_or_default()
                    .remove(&self.resources_table)
                    .filter(|k| !k.keys().is_empty());
                if request.is_some() && !retry.pause().await {
                    return Err(StoreError::Transient(format!(
                        "BatchGetItem left keys unprocessed after {} attempts",
                        retry.max_attempts()
                    )));
                }
            }
        }
        Ok(keys
            .iter()
            .map(|k| found.remove(&(k.scope.as_str().to_owned(), k.id.as_str().to_owned())))
            .collect())
    }

    async fn mark_deleted(&self, key: &ResourceKey, incarnation: &str, now: EpochMillis) -> Result<(), StoreError> {
        self.meter.request(Operation::UpdateItem);
        let out = self
            .client
            .update_item()
            .table_name(&self.resources_table)
            .set_key(Some(resource_key(key)))
            .update_expression("SET #del = :true, #deleted_at = :now")
            .condition_expression(
                "attribute_exists(#scope) AND (attribute_not_exists(#del) OR #del = :false) AND #inc = :inc",
            )
            .expression_attribute_names("#scope", keys::SCOPE)
            .expression_attribute_names("#del", keys::DELETED)
            .expression_attribute_names("#inc", keys::INCARNATION)
            .expression_attribute_values(":inc", s(incarnation))
            .expression_attribute_names("#deleted_at", keys::DELETED_AT)
            .expression_attribute_values(":true", AttributeValue::Bool(true))
            .expression_attribute_values(":false", AttributeValue::Bool(false))
            .expression_attribute_values(":now", n(now))
            .return_consumed_capacity(ReturnConsumedCapacity::Total)
            .send()
            .await
            .map_err(classify);
        self.plain(out, Written::RESOURCE, |o| o.consumed_capacity.as_ref())
    }

    async fn transact(&self, tx: &Transaction) -> Result<(), StoreError> {
        let mut actions = Vec::with_capacity(tx.actions_len());
        if let Some(delta) = &tx.counter {
            actions.push(self.counter_action(delta, tx.now)?);
        }
        for write in &tx.items {
            actions.push(self.item_action(write)?);
        }
        self.meter.request(Operation::TransactWriteItems);
        let result = self
            .client
            .transact_write_items()
            .set_transact_items(Some(actions))
            .return_consumed_capacity(ReturnConsumedCapacity::Total)
            .send()
            .await;
        match result {
            Ok(out) => {
                self.meter.transaction(Written {
                    resource_items: tx.items.len() as u64,
                    counter_items: u64::from(tx.counter.is_some()),
                });
                if tx.counter.as_ref().is_some_and(|c| c.delta == 0) {
                    self.meter.version_only_counter_write();
                }
                self.consumed(out.consumed_capacity());
                Ok(())
            }
            Err(err) => {
                self.meter.failed();
                match err.as_service_error() {
                    Some(TransactWriteItemsError::TransactionCanceledException(cancelled)) => {
                        let reasons: Vec<CancelReason> = cancelled
                            .cancellation_reasons()
                            .iter()
                            .map(|r| CancelReason::from_code(r.code()))
                            .collect();
                        self.meter.cancelled(
                            reasons.contains(&CancelReason::TransactionConflict),
                            reasons.contains(&CancelReason::ConditionalCheckFailed),
                        );
                        Err(StoreError::Cancelled { reasons })
                    }
                    _ => Err(classify(err)),
                }
            }
        }
    }

    async fn counter_items(&self, scope: &Scope) -> Result<Vec<CounterItem>, StoreError> {
        // A scope has a handful of counter items: one page, almost always.
        // Plain requests rather than the paginator's stream keep the
        // request path's read as cheap as a bare Query.
        let mut items = Vec::new();
        let mut start = None;
        loop {
            self.meter.request(Operation::Query);
            let page = self
                .client
                .query()
                .table_name(&self.counters_table)
                .key_condition_expression("#scope = :scope")
                .expression_attribute_names("#scope", keys::SCOPE)
                .expression_attribute_values(":scope", s(scope.as_str()))
                .consistent_read(true)
                .return_consumed_capacity(ReturnConsumedCapacity::Total)
                .set_exclusive_start_key(start)
                .send()
                .await
                .map_err(classify)
                .inspect_err(|_| self.meter.failed())?;
            self.consumed_read(page.consumed_capacity.as_ref());
            items.extend(page.items.unwrap_or_default());
            start = page.last_evaluated_key.filter(|k| !k.is_empty());
            if start.is_none() {
                break;
            }
        }
        serde_dynamo::from_items(items).map_err(|e| StoreError::Malformed(format!("counter item of {scope}: {e}")))
    }

    async fn scope_items(&self, scope: &Scope) -> Result<Vec<ItemRow>, StoreError> {
        self.scope_rows(
            scope,
            &[
                keys::ID,
                keys::COUNTER_PROCESSED,
                keys::DELETED,
                keys::INCARNATION,
                keys::CREATED_AT,
                keys::DELETED_AT,
            ],
        )
        .await
    }

    async fn set_counters(
        &self,
        scope: &Scope,
        read: &[CounterItem],
        targets: &[(String, i64)],
        now: EpochMillis,
    ) -> Result<bool, StoreError> {
        let version_of = |name: &str| read.iter().find(|i| i.name == name).map(|i| i.version);
        let mut actions = Vec::with_capacity(targets.len());
        for (name, count) in targets {
            let (condition, version) = match version_of(name) {
                Some(v) => ("#version = :expected", v),
                None => ("attribute_not_exists(#version)", 0),
            };
            let mut update = Update::builder()
                .table_name(&self.counters_table)
                .set_key(Some(counter_key(scope, name)))
                .update_expression("SET #count = :count, #version = :next, #updated_at = :now")
                .condition_expression(condition)
                .expression_attribute_names("#count", keys::COUNT)
                .expression_attribute_names("#version", keys::VERSION)
                .expression_attribute_names("#updated_at", keys::UPDATED_AT)
                .expression_attribute_values(":count", n(*count))
                .expression_attribute_values(":next", n(version + 1))
                .expression_attribute_values(":now", n(now));
            if version_of(name).is_some() {
                update = update.expression_attribute_values(":expected", n(version));
            }
            actions.push(
                TransactWriteItem::builder()
                    .update(update.build().map_err(build_error)?)
                    .build(),
            );
        }
        // Not metered: the meter accounts for the counting pipeline's cost.
        match self
            .client
            .transact_write_items()
            .set_transact_items(Some(actions))
            .send()
            .await
        {
            Ok(_) => Ok(true),
            Err(err) => match err.as_service_error() {
                Some(TransactWriteItemsError::TransactionCanceledException(_)) => Ok(false),
                _ => match classify(err) {
                    StoreError::Transient(_) => Ok(false),
                    other => Err(other),
                },
            },
        }
    }
}

impl DynamoStore {
    /// Sets the per-scope limit override (the `limit` item of the counters
    /// table); `None` removes it so the default applies again.
    pub async fn set_limit(&self, scope: &Scope, limit: Option<u64>, now: EpochMillis) -> Result<(), StoreError> {
        let key = counter_key(scope, keys::LIMIT_NAME);
        match limit {
            Some(limit) => {
                self.client
                    .update_item()
                    .table_name(&self.counters_table)
                    .set_key(Some(key))
                    .update_expression("SET #limit = :limit, #updated_at = :now ADD #version :one")
                    .expression_attribute_names("#limit", keys::LIMIT)
                    .expression_attribute_names("#updated_at", keys::UPDATED_AT)
                    .expression_attribute_names("#version", keys::VERSION)
                    .expression_attribute_values(":limit", AttributeValue::N(limit.to_string()))
                    .expression_attribute_values(":now", n(now))
                    .expression_attribute_values(":one", n(1))
                    .send()
                    .await
                    .map_err(classify)?;
            }
            None => {
                self.client
                    .delete_item()
                    .table_name(&self.counters_table)
                    .set_key(Some(key))
                    .send()
                    .await
                    .map_err(classify)?;
            }
        }
        Ok(())
    }

    /// Deletes every counters-table item of `scope` (both counters' items
    /// and the limit override), each only if it still has the `version` it
    /// had when read, so a write landing meanwhile keeps its item. For a
    /// scope nobody writes any more (what `counterctl verify` leaves
    /// behind); returns the items deleted.
    pub async fn remove_scope_counters(&self, scope: &Scope) -> Result<usize, StoreError> {
        let items = self.counter_items(scope).await?;
        for item in &items {
            self.client
                .delete_item()
                .table_name(&self.counters_table)
                .set_key(Some(counter_key(scope, &item.name)))
                .condition_expression("attribute_not_exists(#version) OR #version = :version")
                .expression_attribute_names("#version", keys::VERSION)
                .expression_attribute_values(":version", n(item.version))
                .send()
                .await
                .map_err(classify)?;
        }
        Ok(items.len())
    }

    /// Every resource item of `scope` (strongly consistent Query, across
    /// pages), projected to `attributes` and deserialized as `T`.
    async fn scope_rows<T: serde::de::DeserializeOwned>(
        &self,
        scope: &Scope,
        attributes: &[&str],
    ) -> Result<Vec<T>, StoreError> {
        let placeholders: Vec<String> = (0..attributes.len()).map(|n| format!("#a{n}")).collect();
        let mut query = self
            .client
            .query()
            .table_name(&self.resources_table)
            .key_condition_expression("#scope = :scope")
            .projection_expression(placeholders.join(", "))
            .expression_attribute_names("#scope", keys::SCOPE)
            .expression_attribute_values(":scope", s(scope.as_str()))
            .consistent_read(true);
        for (placeholder, attribute) in placeholders.iter().zip(attributes) {
            query = query.expression_attribute_names(placeholder, *attribute);
        }
        let mut pages = query.into_paginator().items().send();
        let mut rows = Vec::new();
        while let Some(item) = pages.next().await {
            rows.push(
                serde_dynamo::from_item(item.map_err(classify)?)
                    .map_err(|e| StoreError::Malformed(format!("resource of {scope}: {e}")))?,
            );
        }
        Ok(rows)
    }
}

impl DynamoStore {
    /// Counts items by state for every scope with a parallel segmented Scan
    /// (`segments` workers). Not a consistent snapshot: use
    /// [`hybrid_counter::audit::Auditor::audit_scope`] to confirm a scope's findings.
    pub async fn scan_scope_counts(
        &self,
        segments: u32,
        on_page: impl Fn(usize) + Send + Sync + Clone + 'static,
    ) -> Result<std::collections::BTreeMap<String, hybrid_counter::audit::ScopeCounts>, StoreError> {
        #[derive(Deserialize)]
        struct Row {
            scope: String,
            #[serde(flatten)]
            item: ItemRow,
        }
        let segments = segments.clamp(1, 1_000_000);
        let mut tasks = tokio::task::JoinSet::new();
        for segment in 0..segments {
            let client = self.client.clone();
            let table = self.resources_table.clone();
            let on_page = on_page.clone();
            tasks.spawn(async move {
                let mut counts = std::collections::BTreeMap::<String, hybrid_counter::audit::ScopeCounts>::new();
                let mut pages = client
                    .scan()
                    .table_name(table)
                    .segment(segment as i32)
                    .total_segments(segments as i32)
                    .projection_expression(format!("#scope, #id, {STATE_PROJECTION}"))
                    .set_expression_attribute_names(Some(state_names()))
                    .expression_attribute_names("#scope", keys::SCOPE)
                    .expression_attribute_names("#id", keys::ID)
                    .into_paginator()
                    .send();
                while let Some(page) = pages.next().await {
                    let items = page.map_err(classify)?.items.unwrap_or_default();
                    on_page(items.len());
                    for item in items {
                        let row: Row = serde_dynamo::from_item(item)
                            .map_err(|e| StoreError::Malformed(format!("resource item: {e}")))?;
                        counts.entry(row.scope).or_default().add_row(&row.item);
                    }
                }
                Ok::<_, StoreError>(counts)
            });
        }
        let mut total = std::collections::BTreeMap::<String, hybrid_counter::audit::ScopeCounts>::new();
        while let Some(joined) = tasks.join_next().await {
            let part = joined.map_err(|e| StoreError::Unavailable(format!("scan worker failed: {e}")))??;
            for (scope, c) in part {
                total.entry(scope).or_default().merge(&c);
            }
        }
        Ok(total)
    }

    /// Every scope's counter snapshot, from a Scan of the counters table
    /// (without the kit's state partition, [`keys::KIT_STATE_SCOPE`]).
    pub async fn scan_counters(&self) -> Result<std::collections::BTreeMap<String, CounterSnapshot>, StoreError> {
        let items: Vec<HashMap<String, AttributeValue>> = self
            .client
            .scan()
            .table_name(&self.counters_table)
            .into_paginator()
            .items()
            .send()
            .try_collect()
            .await
            .map_err(classify)?;
        let items: Vec<CounterItem> =
            serde_dynamo::from_items(items).map_err(|e| StoreError::Malformed(format!("counter item: {e}")))?;
        let mut by_scope = std::collections::BTreeMap::<String, Vec<CounterItem>>::new();
        // The kit's own state item is no scope's counter.
        for item in items.into_iter().filter(|i| !keys::is_kit_state_scope(&i.scope)) {
            by_scope.entry(item.scope.clone()).or_default().push(item);
        }
        Ok(by_scope
            .into_iter()
            .map(|(scope, items)| (scope, CounterSnapshot::from_items(items)))
            .collect())
    }
}

#[cfg(test)]
mod tests {
    //! The store's error classification and its repair write, through an
    //! intercepted client (no network): what DynamoDB answers, and what the
    //! kit makes of it.

    use aws_sdk_dynamodb::operation::get_item::GetItemOutput;
    use aws_sdk_dynamodb::operation::transact_write_items::TransactWriteItemsOutput;
    use aws_sdk_dynamodb::operation::update_item::{UpdateItemError, UpdateItemOutput};
    use aws_sdk_dynamodb::types::CancellationReason;
    use aws_sdk_dynamodb::types::error::{ConditionalCheckFailedException, TransactionCanceledException};
    use aws_smithy_mocks::{Rule, mock};
    use aws_smithy_types::error::ErrorMetadata;

    use super::*;
    use hybrid_counter::ids::ResourceId;

    /// A store whose client answers `rules` in order, with the SDK's own
    /// retries off (each rule answers one request).
    fn store(rules: &[Rule]) -> DynamoStore {
        crate::test_util::mock_store(rules)
    }

    fn scope() -> Scope {
        Scope::new("acct").unwrap()
    }

    fn key() -> ResourceKey {
        ResourceKey {
            scope: scope(),
            id: ResourceId::new("w").unwrap(),
        }
    }

    fn update_error(code: &'static str) -> Rule {
        mock!(Client::update_item)
            .then_error(move || UpdateItemError::generic(ErrorMetadata::builder().code(code).build()))
    }

    #[tokio::test]
    async fn plain_write_errors_are_classified_by_their_code() {
        let s = store(&[
            mock!(Client::update_item).then_error(|| {
                // As the SDK parses it: the modeled error with its code.
                UpdateItemError::ConditionalCheckFailedException(
                    ConditionalCheckFailedException::builder()
                        .meta(ErrorMetadata::builder().code("ConditionalCheckFailedException").build())
                        .build(),
                )
            }),
            update_error("ThrottlingException"),
            update_error("TransactionConflictException"),
            update_error("ValidationException"),
            update_error("InternalServerError"),
        ]);
        assert_eq!(s.mark_deleted(&key(), "inc", 1).await, Err(StoreError::ConditionFailed));
        // Refused before it was applied: safe to send again.
        assert!(
            s.add_best_effort(&scope(), "best_effort", 1, 1)
                .await
                .unwrap_err()
                .is_transient()
        );
        assert!(
            s.add_best_effort(&scope(), "best_effort", 1, 1)
                .await
                .unwrap_err()
                .is_transient()
        );
        assert!(matches!(
            s.add_best_effort(&scope(), "best_effort", 1, 1).await,
            Err(StoreError::Rejected(_))
        ));
        // Outcome unknown: neither transient nor a refusal.
        let err = s.add_best_effort(&scope(), "best_effort", 1, 1).await.unwrap_err();
        assert!(
            matches!(err, StoreError::Unavailable(_)) && !err.is_transient(),
            "{err}"
        );
        assert_eq!(s.meter().snapshot().failed_requests, 5);
    }

    #[tokio::test]
    async fn a_reservation_is_conditioned_on_its_shards_quota_and_writes_that_shard_only() {
        let rule = mock!(Client::update_item)
            .match_requests(|r| {
                r.key().and_then(|k| k.get("name")) == Some(&AttributeValue::S("best_effort#3".into()))
                    && r.condition_expression() == Some("attribute_not_exists(#count) OR #count < :quota")
                    && r.expression_attribute_values().and_then(|v| v.get(":quota"))
                        == Some(&AttributeValue::N("4".into()))
            })
            .then_output(|| UpdateItemOutput::builder().build());
        let s = store(std::slice::from_ref(&rule));
        s.reserve_best_effort(&scope(), "best_effort#3", 4, 1).await.unwrap();
        assert_eq!(rule.num_calls(), 1);
        // A full quota and a name that is not a best-effort item send nothing.
        assert_eq!(
            s.reserve_best_effort(&scope(), "best_effort#3", 0, 1).await,
            Err(StoreError::ConditionFailed)
        );
        assert!(matches!(
            s.add_best_effort(&scope(), "eventual", 1, 1).await,
            Err(StoreError::Rejected(_))
        ));
        assert_eq!(rule.num_calls(), 1);
    }

    #[tokio::test]
    async fn a_read_item_gives_the_shard_its_create_counted_on() {
        let rule = mock!(Client::get_item)
            .match_requests(|r| r.projection_expression().is_some_and(|p| p.contains("#shard")))
            .then_output(|| {
                GetItemOutput::builder()
                    .item("incarnation", AttributeValue::S("inc".into()))
                    .item("counter_processed", AttributeValue::Bool(false))
                    .item("be_shard", AttributeValue::N("5".into()))
                    .build()
            });
        let s = store(std::slice::from_ref(&rule));
        let state = s.get_resource(&key()).await.unwrap().unwrap();
        assert_eq!(state.be_shard, Some(5));
    }

    #[tokio::test]
    async fn the_soft_delete_is_conditioned_on_the_incarnation_it_read() {
        let rule = mock!(Client::update_item)
            .match_requests(|r| {
                r.condition_expression().is_some_and(|c| c.contains("#inc = :inc"))
                    && r.expression_attribute_values()
                        .and_then(|v| v.get(":inc"))
                        .is_some_and(|v| v == &AttributeValue::S("inc-7".into()))
            })
            .then_output(|| UpdateItemOutput::builder().build());
        let s = store(std::slice::from_ref(&rule));
        s.mark_deleted(&key(), "inc-7", 1).await.unwrap();
        assert_eq!(rule.num_calls(), 1);
    }

    #[tokio::test]
    async fn a_cancelled_transaction_carries_its_reasons_in_request_order() {
        let s = store(&[mock!(Client::transact_write_items).then_error(|| {
            TransactWriteItemsError::TransactionCanceledException(
                TransactionCanceledException::builder()
                    .cancellation_reasons(CancellationReason::builder().code("None").build())
                    .cancellation_reasons(CancellationReason::builder().code("ConditionalCheckFailed").build())
                    .build(),
            )
        })]);
        let tx = hybrid_counter::stream::plan::count_insert(
            &key(),
            "inc",
            hybrid_counter::stream::plan::ShardChoice::SINGLE,
            1,
        );
        assert_eq!(
            s.transact(&tx).await,
            Err(StoreError::Cancelled {
                reasons: vec![CancelReason::None, CancelReason::ConditionalCheckFailed]
            })
        );
        let cost = s.meter().snapshot();
        assert_eq!(
            (cost.transactions_cancelled.condition, cost.transactions_committed),
            (1, 0)
        );
    }

    fn counter_item(name: &str, version: i64) -> CounterItem {
        CounterItem {
            scope: "acct".into(),
            name: name.into(),
            count: 3,
            version,
            updated_at: 0,
            limit: None,
        }
    }

    #[tokio::test]
    async fn a_repair_is_conditioned_on_the_versions_it_read_and_a_moved_counter_writes_nothing() {
        let read = [counter_item("best_effort", 7)];
        let targets = [("best_effort".to_owned(), 5), ("eventual".to_owned(), 4)];
        let conditioned = mock!(Client::transact_write_items)
            .match_requests(|r| {
                let updates: Vec<_> = r.transact_items().iter().filter_map(|i| i.update()).collect();
                let be = updates
                    .iter()
                    .find(|u| u.key().get("name") == Some(&AttributeValue::S("best_effort".into())));
                let ec = updates
                    .iter()
                    .find(|u| u.key().get("name") == Some(&AttributeValue::S("eventual".into())));
                updates.len() == 2
                    && be.is_some_and(|u| {
                        u.condition_expression() == Some("#version = :expected")
                            && u.expression_attribute_values().and_then(|v| v.get(":expected")) == Some(&AttributeValue::N("7".into()))
                            && u.expression_attribute_values().and_then(|v| v.get(":next")) == Some(&AttributeValue::N("8".into()))
                    })
                    // Absent when read: it must still be absent.
                    && ec.is_some_and(|u| u.condition_expression() == Some("attribute_not_exists(#version)"))
            })
            .then_output(|| TransactWriteItemsOutput::builder().build());
        let moved = mock!(Client::transact_write_items).then_error(|| {
            TransactWriteItemsError::TransactionCanceledException(
                TransactionCanceledException::builder()
                    .cancellation_reasons(CancellationReason::builder().code("ConditionalCheckFailed").build())
                    .build(),
            )
        });
        let throttled = mock!(Client::transact_write_items).then_error(|| {
            TransactWriteItemsError::generic(ErrorMetadata::builder().code("ThrottlingException").build())
        });
        let invalid = mock!(Client::transact_write_items).then_error(|| {
            TransactWriteItemsError::generic(ErrorMetadata::builder().code("ValidationException").build())
        });
        let s = store(&[conditioned.clone(), moved, throttled, invalid]);
        assert_eq!(s.set_counters(&scope(), &read, &targets, 1).await, Ok(true));
        assert_eq!(conditioned.num_calls(), 1);
        assert_eq!(s.set_counters(&scope(), &read, &targets, 1).await, Ok(false));
        assert_eq!(s.set_counters(&scope(), &read, &targets, 1).await, Ok(false));
        assert!(matches!(
            s.set_counters(&scope(), &read, &targets, 1).await,
            Err(StoreError::Rejected(_))
        ));
    }
}
