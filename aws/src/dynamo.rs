//! [`Store`] over `aws-sdk-dynamodb`: expression building and error
//! classification, nothing else. Every attribute is referenced through a
//! `#placeholder` (several names are reserved words).

use std::collections::HashMap;

use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::config::retry::RetryConfig;
use aws_sdk_dynamodb::error::{DisplayErrorContext, ProvideErrorMetadata, SdkError};
use aws_sdk_dynamodb::operation::transact_write_items::TransactWriteItemsError;
use aws_sdk_dynamodb::types::{
    AttributeValue, ConsumedCapacity, Delete, KeysAndAttributes, Put, ReturnConsumedCapacity, ThrottlingReason,
    TransactWriteItem, Update,
};
use serde::Deserialize;

use hybrid_counter::EpochMillis;
use hybrid_counter::audit::ScopeTally;
use hybrid_counter::best_effort::{Fence, Raise, Reservation};
use hybrid_counter::config::{Admission, CounterConfig};
use hybrid_counter::error::{CancelReason, StoreError};
use hybrid_counter::ids::Scope;
use hybrid_counter::items::{CounterItem, CounterSnapshot, ItemRow, ResourceState};
use hybrid_counter::keys;
use hybrid_counter::retry::{Backoff, Retry};
use hybrid_counter::store::meter::{Meter, Operation, Written};
use hybrid_counter::store::{
    CounterDelta, ItemWrite, NewResource, Resend, ResourceKey, SequenceClaim, SequenceEntry, Store, Transaction, sends,
};
use hybrid_counter::throttle::ThrottleReason;

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

    /// [`classify`], and a throttle counted on the meter with its reasons.
    pub(crate) fn classify<E, R>(&self, err: SdkError<E, R>) -> StoreError
    where
        E: ThrottleDetail + ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
        R: std::fmt::Debug,
    {
        match throttle_reasons(&err) {
            Some(reasons) => self.meter.throttled(&reasons),
            // A throttle the SDK did not model (an emulator's): no reason.
            None if is_capacity_throttle(err.code()) => self.meter.throttled(&[]),
            None => {}
        }
        classify(err)
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

/// Whether an error code means DynamoDB throttled the request: a capacity
/// limit of a partition, the table, its maximum or the account.
pub fn is_capacity_throttle(code: Option<&str>) -> bool {
    matches!(
        code,
        Some("ProvisionedThroughputExceededException" | "ThrottlingException" | "RequestLimitExceeded")
    )
}

/// Whether an error code means "too fast or busy, retry later": throttling,
/// or the item is held by a concurrent transaction.
pub fn is_throttle(code: Option<&str>) -> bool {
    is_capacity_throttle(code)
        || matches!(
            code,
            Some("TransactionConflictException" | "TransactionInProgressException")
        )
}

/// Whether an error code means the request itself is invalid.
pub fn is_validation(code: Option<&str>) -> bool {
    code == Some("ValidationException")
}

/// The typed `ThrottlingReasons` of an operation's throttling errors
/// (`ProvisionedThroughputExceededException`, `ThrottlingException`,
/// `RequestLimitExceeded`); `None` for any other error.
pub trait ThrottleDetail {
    fn throttling_reasons(&self) -> Option<&[ThrottlingReason]>;
}

macro_rules! throttle_detail {
    ($($error:ty),* $(,)?) => {
        $(
            impl ThrottleDetail for $error {
                fn throttling_reasons(&self) -> Option<&[ThrottlingReason]> {
                    match self {
                        Self::ProvisionedThroughputExceededException(e) => Some(e.throttling_reasons()),
                        Self::ThrottlingException(e) => Some(e.throttling_reasons()),
                        Self::RequestLimitExceeded(e) => Some(e.throttling_reasons()),
                        _ => None,
                    }
                }
            }
        )*
    };
}

throttle_detail!(
    aws_sdk_dynamodb::operation::update_item::UpdateItemError,
    aws_sdk_dynamodb::operation::transact_write_items::TransactWriteItemsError,
    aws_sdk_dynamodb::operation::get_item::GetItemError,
    aws_sdk_dynamodb::operation::query::QueryError,
    aws_sdk_dynamodb::operation::batch_get_item::BatchGetItemError,
    aws_sdk_dynamodb::operation::put_item::PutItemError,
    aws_sdk_dynamodb::operation::delete_item::DeleteItemError,
    aws_sdk_dynamodb::operation::scan::ScanError,
);

/// Why DynamoDB throttled the request `err` answered, when it was
/// throttled: the reasons it named ([`ThrottleReason::UNSPECIFIED`] for
/// one this kit does not know), or none. `None` when not a throttle.
pub fn throttle_reasons<E: ThrottleDetail, R>(err: &SdkError<E, R>) -> Option<Vec<ThrottleReason>> {
    let reasons = err.as_service_error()?.throttling_reasons()?;
    Some(
        reasons
            .iter()
            .map(|r| r.reason().map_or(ThrottleReason::UNSPECIFIED, ThrottleReason::parse))
            .collect(),
    )
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

/// The reasons a `TransactWriteItems` was cancelled, in the order of its
/// actions; `None` when the error is not a cancellation.
pub fn cancel_reasons<R>(err: &SdkError<TransactWriteItemsError, R>) -> Option<Vec<CancelReason>> {
    match err.as_service_error() {
        Some(TransactWriteItemsError::TransactionCanceledException(cancelled)) => Some(
            cancelled
                .cancellation_reasons()
                .iter()
                .map(|r| CancelReason::from_code(r.code()))
                .collect(),
        ),
        _ => None,
    }
}

pub(crate) fn s(value: impl Into<String>) -> AttributeValue {
    AttributeValue::S(value.into())
}

pub(crate) fn n(value: i64) -> AttributeValue {
    AttributeValue::N(value.to_string())
}

/// A sequence number as an attribute value.
fn number(value: u64) -> AttributeValue {
    AttributeValue::N(value.to_string())
}

fn resource_key(key: &ResourceKey) -> HashMap<String, AttributeValue> {
    HashMap::from([
        (keys::SCOPE.to_owned(), s(key.scope.as_str())),
        (keys::ID.to_owned(), s(key.id.as_str())),
    ])
}

pub(crate) fn counter_key(scope: &Scope, name: &str) -> HashMap<String, AttributeValue> {
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

/// The retry configuration of a write sent as `resend` says: the SDK's
/// standard retries, or none (one attempt).
fn sent(resend: Resend) -> aws_sdk_dynamodb::config::Builder {
    let builder = aws_sdk_dynamodb::Config::builder();
    match resend {
        Resend::Never => builder.retry_config(RetryConfig::disabled()),
        Resend::BySdk => builder,
    }
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
        fence: Option<Fence>,
    ) -> Result<(), StoreError> {
        hybrid_counter::store::check_best_effort_name(name)?;
        self.meter.request(Operation::UpdateItem);
        let mut names = counter_names();
        let mut update = COUNTER_UPDATE.to_owned();
        if fence.is_some() {
            names.insert("#epoch".to_owned(), keys::EPOCH.to_owned());
        }
        if let Some(Fence::Absent(_)) = fence {
            update.push_str(", #epoch = :epoch");
        }
        let out = self
            .client
            .update_item()
            .table_name(&self.counters_table)
            .set_key(Some(counter_key(scope, name)))
            .update_expression(update)
            .set_condition_expression(condition.map(str::to_owned))
            .set_expression_attribute_names(Some(names))
            .set_expression_attribute_values(Some(values))
            .return_consumed_capacity(ReturnConsumedCapacity::Total)
            .customize()
            .config_override(sent(sends::BEST_EFFORT))
            .send()
            .await
            .map_err(|e| self.classify(e));
        self.plain(out, Written::COUNTER, |o| o.consumed_capacity.as_ref())
    }

    /// Sends one `TransactWriteItems` of `actions` and accounts for it
    /// (`written` when it commits; the cancellation reasons, in request
    /// order, when it is cancelled). `once`: without the SDK's retries.
    async fn send_transaction(
        &self,
        actions: Vec<TransactWriteItem>,
        written: Written,
        once: bool,
    ) -> Result<(), StoreError> {
        self.meter.request(Operation::TransactWriteItems);
        let mut request = self
            .client
            .transact_write_items()
            .set_transact_items(Some(actions))
            .return_consumed_capacity(ReturnConsumedCapacity::Total)
            .customize();
        if once {
            request =
                request.config_override(aws_sdk_dynamodb::Config::builder().retry_config(RetryConfig::disabled()));
        }
        let result = request.send().await;
        match result {
            Ok(out) => {
                self.meter.transaction(written);
                self.consumed(out.consumed_capacity());
                Ok(())
            }
            Err(err) => {
                self.meter.failed();
                match cancel_reasons(&err) {
                    Some(reasons) => {
                        // A cancellation names no throttling reason.
                        if reasons.contains(&CancelReason::Throttled) {
                            self.meter.throttled(&[]);
                        }
                        self.meter.cancelled(
                            reasons.contains(&CancelReason::TransactionConflict),
                            reasons.contains(&CancelReason::ConditionalCheckFailed),
                        );
                        Err(StoreError::Cancelled { reasons })
                    }
                    None => Err(self.classify(err)),
                }
            }
        }
    }

    /// Strongly consistent `GetItem` of `key` in `table`, projected to
    /// `projection` (placeholders bound by `names`), deserialized as `T`;
    /// `what` names the item in a malformed-item error.
    async fn get_consistent<T: serde::de::DeserializeOwned>(
        &self,
        table: &str,
        key: HashMap<String, AttributeValue>,
        projection: &str,
        names: HashMap<String, String>,
        what: impl FnOnce() -> String,
    ) -> Result<Option<T>, StoreError> {
        self.meter.request(Operation::GetItem);
        let out = self
            .client
            .get_item()
            .table_name(table)
            .set_key(Some(key))
            .consistent_read(true)
            .projection_expression(projection)
            .set_expression_attribute_names(Some(names))
            .return_consumed_capacity(ReturnConsumedCapacity::Total)
            .send()
            .await
            .map_err(|e| self.classify(e))
            .inspect_err(|_| self.meter.failed())?;
        self.consumed_read(out.consumed_capacity.as_ref());
        out.item
            .map(|item| serde_dynamo::from_item(item).map_err(|e| StoreError::Malformed(format!("{}: {e}", what()))))
            .transpose()
    }

    /// [`Self::get_consistent`] of counters-table item `name` of `scope`.
    pub(crate) async fn get_counters_item<T: serde::de::DeserializeOwned>(
        &self,
        scope: &Scope,
        name: &str,
        projection: &str,
        names: &[(&str, &str)],
    ) -> Result<Option<T>, StoreError> {
        let names = names.iter().map(|(p, n)| ((*p).to_owned(), (*n).to_owned())).collect();
        self.get_consistent(
            &self.counters_table,
            counter_key(scope, name),
            projection,
            names,
            || format!("counters item {scope}/{name}"),
        )
        .await
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

impl DynamoStore {
    /// Takes back the stream's count of `items` (each with its
    /// incarnation) of one scope, in one transaction: `counter` of `scope`
    /// goes down by their number and each item's `counter_processed` back
    /// to false, only if it is counted and not deleted. The inverse of
    /// the INSERT write ([`hybrid_counter::stream::plan::count_insert`]),
    /// so `EC == processed items` holds before and after: the state of a
    /// batch whose processing failed. The flag flip is a MODIFY that the
    /// mapping's filter and the consumer ignore, so only a replay of the
    /// items' INSERT records counts them again. For `counterctl verify
    /// --failure-path`, on its own scope only; at most 99 items.
    pub async fn uncount(
        &self,
        scope: &Scope,
        counter: &str,
        items: &[(hybrid_counter::ResourceId, String)],
        now: EpochMillis,
    ) -> Result<(), StoreError> {
        let delta = CounterDelta {
            scope: scope.clone(),
            name: counter.to_owned(),
            delta: -i64::try_from(items.len()).unwrap_or(i64::MAX),
        };
        let mut actions = vec![self.counter_action(&delta, now)?];
        for (id, incarnation) in items {
            let key = ResourceKey {
                scope: scope.clone(),
                id: id.clone(),
            };
            let update = Update::builder()
                .table_name(&self.resources_table)
                .set_key(Some(resource_key(&key)))
                .update_expression("SET #cp = :false")
                .condition_expression("#cp = :true AND #del = :false AND #inc = :inc")
                .expression_attribute_names("#cp", keys::COUNTER_PROCESSED)
                .expression_attribute_names("#del", keys::DELETED)
                .expression_attribute_names("#inc", keys::INCARNATION)
                .expression_attribute_values(":true", AttributeValue::Bool(true))
                .expression_attribute_values(":false", AttributeValue::Bool(false))
                .expression_attribute_values(":inc", s(incarnation))
                .build()
                .map_err(build_error)?;
            actions.push(TransactWriteItem::builder().update(update).build());
        }
        self.meter.request(Operation::TransactWriteItems);
        self.client
            .transact_write_items()
            .set_transact_items(Some(actions))
            .send()
            .await
            .map(|_| ())
            .map_err(|e| self.classify(e))
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
/// Actions per `TransactWriteItems` (DynamoDB's limit).
const MAX_TRANSACTION_ACTIONS: usize = 100;
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
            .customize()
            .config_override(sent(sends::PUT_RESOURCE))
            .send()
            .await
            .map_err(|e| self.classify(e));
        self.plain(out, Written::RESOURCE, |o| o.consumed_capacity.as_ref())
    }

    async fn add_best_effort(&self, scope: &Scope, name: &str, delta: i64, now: EpochMillis) -> Result<(), StoreError> {
        // One attempt only: a retry after an ambiguous 500 could count twice.
        self.update_best_effort(scope, name, counter_values(delta, now), None, None)
            .await
    }

    async fn reserve_best_effort(
        &self,
        scope: &Scope,
        name: &str,
        reservation: Reservation,
        now: EpochMillis,
    ) -> Result<(), StoreError> {
        // `attribute_not_exists(count)` admits the first reservation of a
        // shard, which is only right when its quota leaves room for one.
        if reservation.quota == 0 {
            return Err(StoreError::ConditionFailed);
        }
        let mut values = counter_values(1, now);
        values.insert(
            ":quota".to_owned(),
            n(i64::try_from(reservation.quota).unwrap_or(i64::MAX)),
        );
        // The condition `Reservation::admits` evaluates for the doubles.
        let condition = match reservation.fence {
            Fence::Unfenced => "(attribute_not_exists(#count) OR #count < :quota) AND attribute_not_exists(#epoch)",
            Fence::At(epoch) => {
                values.insert(":epoch".to_owned(), number(epoch));
                "#count < :quota AND #epoch = :epoch"
            }
            // Read absent after a raise: still absent, or a raise created
            // it since (then its count is not what the quotas assumed).
            Fence::Absent(epoch) => {
                values.remove(":quota");
                values.insert(":epoch".to_owned(), number(epoch));
                "attribute_not_exists(#count)"
            }
        };
        // One attempt only: after an ambiguous 500 the slot may be reserved
        // already, and a retry would reserve a second one.
        self.update_best_effort(scope, name, values, Some(condition), Some(reservation.fence))
            .await
    }

    async fn get_resource(&self, key: &ResourceKey) -> Result<Option<ResourceState>, StoreError> {
        let image: Option<StateImage> = self
            .get_consistent(
                &self.resources_table,
                resource_key(key),
                STATE_PROJECTION,
                state_names(),
                || format!("resource {}/{}", key.scope, key.id),
            )
            .await?;
        Ok(image.map(Into::into))
    }

    async fn get_resources(&self, keys: &[ResourceKey]) -> Result<Vec<Option<ResourceState>>, StoreError> {
        let mut found: HashMap<(String, String), ResourceState> = HashMap::new();
        // Every request, the ones for unprocessed keys too, is built here:
        // consistent, with the projection, whatever an answer echoes back.
        let request_for = |keys: Vec<HashMap<String, AttributeValue>>| {
            KeysAndAttributes::builder()
                .set_keys(Some(keys))
                .consistent_read(true)
                .projection_expression(format!("#scope, #id, {STATE_PROJECTION}"))
                .set_expression_attribute_names(Some(state_names()))
                .expression_attribute_names("#scope", keys::SCOPE)
                .expression_attribute_names("#id", keys::ID)
                .build()
                .map_err(build_error)
        };
        for chunk in keys.chunks(MAX_BATCH_GET) {
            let mut request = Some(request_for(chunk.iter().map(resource_key).collect())?);
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
                    .map_err(|e| self.classify(e))
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
                request = match out.unprocessed_keys.unwrap_or_default().remove(&self.resources_table) {
                    Some(left) if !left.keys().is_empty() => Some(request_for(left.keys)?),
                    _ => None,
                };
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
            .customize()
            .config_override(sent(sends::MARK_DELETED))
            .send()
            .await
            .map_err(|e| self.classify(e));
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
        let written = Written {
            resource_items: tx.items.len() as u64,
            counter_items: u64::from(tx.counter.is_some()),
        };
        self.send_transaction(actions, written, false).await?;
        if tx.counter.as_ref().is_some_and(|c| c.delta == 0) {
            self.meter.version_only_counter_write();
        }
        Ok(())
    }

    async fn last_sequence(&self, scope: &Scope) -> Result<u64, StoreError> {
        #[derive(Deserialize)]
        struct Last {
            #[serde(default)]
            last_id: u64,
        }
        let last: Option<Last> = self
            .get_counters_item(scope, keys::SEQUENCE_NAME, "#last", &[("#last", keys::LAST_ID)])
            .await?;
        Ok(last.map_or(0, |l| l.last_id))
    }

    async fn claim_sequence(&self, claim: &SequenceClaim) -> Result<(), StoreError> {
        let (condition, previous) = match claim.previous() {
            Some(previous) => ("#last = :previous", Some(previous)),
            None => ("attribute_not_exists(#last)", None),
        };
        let update = Update::builder()
            .table_name(&self.counters_table)
            .set_key(Some(counter_key(&claim.scope, keys::SEQUENCE_NAME)))
            .update_expression("SET #last = :number, #updated_at = :now")
            .condition_expression(condition)
            .expression_attribute_names("#last", keys::LAST_ID)
            .expression_attribute_names("#updated_at", keys::UPDATED_AT)
            .set_expression_attribute_values(Some(
                [
                    (":number".to_owned(), number(claim.number)),
                    (":now".to_owned(), n(claim.now)),
                ]
                .into_iter()
                .chain(previous.map(|p| (":previous".to_owned(), number(p))))
                .collect(),
            ))
            .build()
            .map_err(build_error)?;
        let mut item = counter_key(&claim.scope, &keys::sequence_item_name(claim.number));
        item.insert(keys::SEQUENCE_TOKEN.to_owned(), s(&claim.token));
        item.insert(keys::CLAIMED_AT.to_owned(), n(claim.now));
        if let Some(owner) = &claim.owner {
            item.insert(keys::SEQUENCE_OWNER.to_owned(), s(owner));
        }
        let put = Put::builder()
            .table_name(&self.counters_table)
            .set_item(Some(item))
            .condition_expression("attribute_not_exists(#name)")
            .expression_attribute_names("#name", keys::NAME)
            .build()
            .map_err(build_error)?;
        // Sent once, without the SDK's retries: the caller's loop retries
        // and resolves an ambiguous answer by reading the item back, which
        // does not depend on the ClientRequestToken's idempotency (10
        // minutes, and not honoured by every emulator).
        let actions = vec![
            TransactWriteItem::builder().update(update).build(),
            TransactWriteItem::builder().put(put).build(),
        ];
        self.send_transaction(
            actions,
            Written {
                resource_items: 0,
                counter_items: 2,
            },
            true,
        )
        .await
    }

    async fn sequence_entry(&self, scope: &Scope, number: u64) -> Result<Option<SequenceEntry>, StoreError> {
        #[derive(Deserialize)]
        struct Entry {
            token: String,
            #[serde(default)]
            owner: Option<String>,
            #[serde(default)]
            claimed_at: EpochMillis,
        }
        let entry: Option<Entry> = self
            .get_counters_item(
                scope,
                &keys::sequence_item_name(number),
                "#token, #owner, #at",
                &[
                    ("#token", keys::SEQUENCE_TOKEN),
                    ("#owner", keys::SEQUENCE_OWNER),
                    ("#at", keys::CLAIMED_AT),
                ],
            )
            .await?;
        Ok(entry.map(|e| SequenceEntry {
            number,
            token: e.token,
            owner: e.owner,
            claimed_at: e.claimed_at,
        }))
    }

    async fn counter_items(&self, scope: &Scope) -> Result<Vec<CounterItem>, StoreError> {
        // A scope has a handful of counter items: one page, almost always.
        // Plain requests, not the paginator: each is metered before it is
        // sent, as DynamoDB charges a Query whose answer never arrives (one
        // the drift check's timeout cancels), without relying on when the
        // paginator's stream sends its next request.
        let mut items = Vec::new();
        let mut start = None;
        loop {
            self.meter.request(Operation::Query);
            let page = self
                .client
                .query()
                .table_name(&self.counters_table)
                // Every counter name sorts below `sequence`: the numbered
                // items of a sequence are never read here, however many.
                .key_condition_expression("#scope = :scope AND #name < :sequence")
                .expression_attribute_names("#scope", keys::SCOPE)
                .expression_attribute_names("#name", keys::NAME)
                .expression_attribute_values(":scope", s(scope.as_str()))
                .expression_attribute_values(":sequence", s(keys::SEQUENCE_NAME))
                .consistent_read(true)
                .return_consumed_capacity(ReturnConsumedCapacity::Total)
                .set_exclusive_start_key(start.clone())
                .send()
                .await
                .map_err(|e| self.classify(e))
                .inspect_err(|_| self.meter.failed())?;
            self.consumed_read(page.consumed_capacity.as_ref());
            items.extend(page.items.unwrap_or_default());
            // An empty key, or the one just sent (an emulator's answer),
            // would page for ever: either ends the read.
            match page.last_evaluated_key.filter(|k| !k.is_empty()) {
                Some(next) if start.as_ref() != Some(&next) => start = Some(next),
                _ => break,
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
                keys::BE_SHARD,
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
        self.send_repair(actions).await
    }

    async fn raise_best_effort(&self, scope: &Scope, raise: &Raise, now: EpochMillis) -> Result<bool, StoreError> {
        self.raise(scope, raise, now).await
    }
}

impl DynamoStore {
    /// [`Store::raise_best_effort`]: one `TransactWriteItems` of an update
    /// per item of the raise (at most 100 actions, DynamoDB's limit).
    async fn raise(&self, scope: &Scope, raise: &Raise, now: EpochMillis) -> Result<bool, StoreError> {
        if raise.adds.len() > MAX_TRANSACTION_ACTIONS {
            return Err(StoreError::Rejected(format!(
                "a raise over {} best-effort items does not fit one transaction (at most {MAX_TRANSACTION_ACTIONS})",
                raise.adds.len()
            )));
        }
        let mut actions = Vec::with_capacity(raise.adds.len());
        for (name, add) in &raise.adds {
            let update = Update::builder()
                .table_name(&self.counters_table)
                .set_key(Some(counter_key(scope, name)))
                .update_expression("ADD #count :add, #version :one SET #updated_at = :now, #epoch = :to")
                .condition_expression("attribute_not_exists(#epoch) OR #epoch <= :from")
                .expression_attribute_names("#count", keys::COUNT)
                .expression_attribute_names("#version", keys::VERSION)
                .expression_attribute_names("#updated_at", keys::UPDATED_AT)
                .expression_attribute_names("#epoch", keys::EPOCH)
                .expression_attribute_values(":add", n(*add))
                .expression_attribute_values(":one", n(1))
                .expression_attribute_values(":now", n(now))
                .expression_attribute_values(":to", number(raise.to()))
                .expression_attribute_values(":from", number(raise.from))
                .build()
                .map_err(build_error)?;
            actions.push(TransactWriteItem::builder().update(update).build());
        }
        // The SDK's retries keep the token it filled for this send, so a
        // re-sent raise is answered without a second apply (and the epoch
        // condition refuses one after the token's 10 minutes).
        self.send_repair(actions).await
    }

    /// Sends an operator's repair transaction: `Ok(false)` when it was
    /// cancelled (a condition, or a transaction holding an item) or
    /// throttled, nothing written. Not metered: the meter accounts for the
    /// counting pipeline's cost.
    async fn send_repair(&self, actions: Vec<TransactWriteItem>) -> Result<bool, StoreError> {
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
                _ => match self.classify(err) {
                    StoreError::Transient(_) => Ok(false),
                    other => Err(other),
                },
            },
        }
    }
}

/// An operator's one-off write (a limit override, a verify's clean-up):
/// retried on throttling and on 5xx answers after the SDK's own retries,
/// up to six attempts with full-jitter waits of up to 2 s. Only writes that
/// are safe to send twice go through it.
pub(crate) const ONE_OFF_WRITE_BACKOFF: Backoff = Backoff {
    base: std::time::Duration::from_millis(100),
    cap: std::time::Duration::from_secs(2),
    max_attempts: 6,
};

/// Whether a one-off write's failure may go away on its own: throttling,
/// a transaction holding the item, or a 5xx / transport failure.
fn one_off_retryable(err: &StoreError) -> bool {
    err.is_transient() || matches!(err, StoreError::Unavailable(_))
}

impl DynamoStore {
    /// Runs a one-off operator write through the kit's retry helper
    /// ([`ONE_OFF_WRITE_BACKOFF`]).
    pub(crate) async fn one_off_write<T, F, Fut>(&self, op: F) -> Result<T, StoreError>
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = Result<T, StoreError>>,
    {
        Retry::new(ONE_OFF_WRITE_BACKOFF, None).run(op, one_off_retryable).await
    }

    /// Deletes every counters-table item of `scope` (both counters' items
    /// and the limit override; never a sequence's items, which
    /// [`Store::counter_items`] does not read: a sequence that restarted at
    /// 1 would give its numbers twice), each only if it still has the `version` it
    /// had when read, so a write landing meanwhile keeps its item. For a
    /// scope nobody writes any more (what `counterctl verify` leaves
    /// behind); returns the items deleted. A delete answered with a 5xx is
    /// sent again: if the first one landed, the item is gone and the
    /// condition holds on the missing item, so the repeat is a no-op.
    pub async fn remove_scope_counters(&self, scope: &Scope) -> Result<usize, StoreError> {
        let items = self.counter_items(scope).await?;
        for item in &items {
            self.one_off_write(|| async {
                self.client
                    .delete_item()
                    .table_name(&self.counters_table)
                    .set_key(Some(counter_key(scope, &item.name)))
                    .condition_expression("attribute_not_exists(#version) OR #version = :version")
                    .expression_attribute_names("#version", keys::VERSION)
                    .expression_attribute_values(":version", n(item.version))
                    .send()
                    .await
                    .map_err(|e| self.classify(e))
            })
            .await?;
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
                serde_dynamo::from_item(item.map_err(|e| self.classify(e))?)
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
    ) -> Result<std::collections::BTreeMap<String, ScopeTally>, StoreError> {
        #[derive(Deserialize)]
        struct Row {
            scope: String,
            #[serde(flatten)]
            item: ItemRow,
        }
        let segments = segments.clamp(1, 1_000_000);
        let mut tasks = tokio::task::JoinSet::new();
        for segment in 0..segments {
            let store = self.clone();
            let client = self.client.clone();
            let table = self.resources_table.clone();
            let on_page = on_page.clone();
            tasks.spawn(async move {
                let mut counts = std::collections::BTreeMap::<String, ScopeTally>::new();
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
                    let items = page.map_err(|e| store.classify(e))?.items.unwrap_or_default();
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
        let mut total = std::collections::BTreeMap::<String, ScopeTally>::new();
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
            // A sequence's items are no counters (they still cost their
            // read units: a filter applies after the read).
            .filter_expression("NOT begins_with(#name, :sequence)")
            .expression_attribute_names("#name", keys::NAME)
            .expression_attribute_values(":sequence", s(keys::SEQUENCE_NAME))
            .into_paginator()
            .items()
            .send()
            .try_collect()
            .await
            .map_err(|e| self.classify(e))?;
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

    /// A store whose client keeps the SDK's standard retries (3 attempts),
    /// as a deployed function's does: what each write overrides is what
    /// reaches DynamoDB.
    fn retrying_store(rules: &[&Rule]) -> DynamoStore {
        let client =
            aws_smithy_mocks::mock_client!(aws_sdk_dynamodb, aws_smithy_mocks::RuleMode::MatchAny, rules, |c| {
                c.region(aws_sdk_dynamodb::config::Region::new("us-east-1"))
                    .retry_config(RetryConfig::standard().with_max_attempts(3))
            });
        DynamoStore::new(client, &crate::test_util::config())
    }

    /// Issue 34 D1: a put or soft delete answered 500 may have been applied;
    /// the SDK's retry would send it again, after its item may have been
    /// deleted and hard-deleted (the put's `attribute_not_exists` holds
    /// again). Each is sent once; a read keeps the SDK's retries (the
    /// control: this client does retry).
    #[tokio::test(start_paused = true)]
    async fn a_put_or_soft_delete_answered_500_is_never_sent_again() {
        let put = mock!(Client::put_item)
            .sequence()
            .http_status(500, None)
            .output(|| aws_sdk_dynamodb::operation::put_item::PutItemOutput::builder().build())
            .build();
        let soft_delete = mock!(Client::update_item)
            .sequence()
            .http_status(500, None)
            .output(|| UpdateItemOutput::builder().build())
            .build();
        let read = mock!(Client::get_item)
            .sequence()
            .http_status(500, None)
            .output(|| GetItemOutput::builder().build())
            .build();
        let s = retrying_store(&[&put, &soft_delete, &read]);
        let resource = NewResource {
            item: hybrid_counter::items::ResourceItem {
                scope: scope(),
                id: ResourceId::new("w").unwrap(),
                counter_processed: false,
                deleted: false,
                incarnation: "inc".into(),
                created_at: 1,
                be_shard: None,
            },
            payload: Default::default(),
        };
        let err = s.put_resource(&resource).await.unwrap_err();
        assert!(matches!(err, StoreError::Unavailable(_)), "{err:?}");
        assert_eq!(put.num_calls(), 1, "the put is sent once");
        let err = s.mark_deleted(&key(), "inc", 2).await.unwrap_err();
        assert!(matches!(err, StoreError::Unavailable(_)), "{err:?}");
        assert_eq!(soft_delete.num_calls(), 1, "the soft delete is sent once");
        assert_eq!(s.get_resource(&key()).await, Ok(None));
        assert_eq!(read.num_calls(), 2, "a read is retried by the SDK");
    }

    /// A `BatchGetItem` answer for the resources table: `found` as items
    /// (live, incarnation `inc-<id>`), `left` as unprocessed keys.
    fn batch_answer(found: &[&str], left: &[&str]) -> aws_sdk_dynamodb::operation::batch_get_item::BatchGetItemOutput {
        use aws_sdk_dynamodb::operation::batch_get_item::BatchGetItemOutput;
        let key_of = |id: &str| ResourceKey {
            scope: scope(),
            id: ResourceId::new(id).unwrap(),
        };
        let items = found
            .iter()
            .map(|id| {
                let mut item = resource_key(&key_of(id));
                item.insert(keys::INCARNATION.to_owned(), s(format!("inc-{id}")));
                item
            })
            .collect();
        let mut out = BatchGetItemOutput::builder().responses("resources", items);
        if !left.is_empty() {
            let keys = KeysAndAttributes::builder()
                .set_keys(Some(left.iter().map(|id| resource_key(&key_of(id))).collect()))
                .build()
                .unwrap();
            out = out.unprocessed_keys("resources", keys);
        }
        out.build()
    }

    fn resource_keys(ids: &[&str]) -> Vec<ResourceKey> {
        ids.iter()
            .map(|id| ResourceKey {
                scope: scope(),
                id: ResourceId::new(*id).unwrap(),
            })
            .collect()
    }

    /// DynamoDB may answer part of a `BatchGetItem` and return the rest as
    /// `UnprocessedKeys` (throttling, the 16 MB answer limit: "If you
    /// request more than 100 items, or the response exceeds 16 MB, or
    /// there is not enough provisioned throughput, BatchGetItem returns a
    /// partial result", BatchGetItem, DynamoDB API Reference). The store
    /// asks again for exactly those keys and answers in the order asked;
    /// a key left unprocessed is never reported as an absent item.
    #[tokio::test(start_paused = true)]
    async fn get_resources_asks_again_for_unprocessed_keys_and_keeps_the_order() {
        let first = mock!(Client::batch_get_item)
            .match_requests(|r| {
                r.request_items()
                    .and_then(|i| i.get("resources"))
                    .map(|k| k.keys().len())
                    == Some(3)
            })
            .then_output(|| batch_answer(&["c"], &["a", "b"]));
        // DynamoDB's `UnprocessedKeys` echo the request's parameters; the
        // mock returns the keys only, and the retry is still consistent.
        let second = mock!(Client::batch_get_item)
            .match_requests(|r| {
                r.request_items()
                    .and_then(|i| i.get("resources"))
                    .is_some_and(|k| k.keys().len() == 2 && k.consistent_read() == Some(true))
            })
            .then_output(|| batch_answer(&["b"], &["a"]));
        let third = mock!(Client::batch_get_item)
            .match_requests(|r| {
                r.request_items()
                    .and_then(|i| i.get("resources"))
                    .map(|k| k.keys().len())
                    == Some(1)
            })
            .then_output(|| batch_answer(&[], &[]));
        let st = store(&[first.clone(), second.clone(), third.clone()]);
        let states = st.get_resources(&resource_keys(&["a", "b", "c"])).await.unwrap();
        let incarnations: Vec<Option<String>> = states.into_iter().map(|s| s.map(|s| s.incarnation)).collect();
        assert_eq!(incarnations, vec![None, Some("inc-b".into()), Some("inc-c".into())]);
        assert_eq!((first.num_calls(), second.num_calls(), third.num_calls()), (1, 1, 1));
    }

    /// Keys DynamoDB keeps leaving unprocessed past the store's budget are
    /// a transient error (the stream handler retries the batch), never
    /// "absent": a delete decided on an absent item would be dropped as
    /// already done and the eventual counter would stay one high.
    #[tokio::test(start_paused = true)]
    async fn keys_left_unprocessed_past_the_budget_are_an_error_not_absent_items() {
        let rules: Vec<Rule> = (0..UNPROCESSED_KEYS_BACKOFF.max_attempts)
            .map(|_| mock!(Client::batch_get_item).then_output(|| batch_answer(&["b"], &["a"])))
            .collect();
        let err = store(&rules)
            .get_resources(&resource_keys(&["a", "b"]))
            .await
            .unwrap_err();
        assert!(matches!(err, StoreError::Transient(_)), "{err:?}");
        assert!(rules.iter().all(|r| r.num_calls() == 1), "every attempt was made");
    }

    #[tokio::test(start_paused = true)]
    async fn a_limit_override_is_retried_through_throttles_and_server_errors() {
        let rules = [
            update_error("ThrottlingException"),
            update_error("InternalServerError"),
            update_error("ProvisionedThroughputExceededException"),
            mock!(Client::update_item)
                .match_requests(|r| {
                    r.expression_attribute_values()
                        .and_then(|v| v.get(":limit"))
                        .and_then(|v| v.as_n().ok())
                        .map(String::as_str)
                        == Some("7")
                })
                .then_output(|| UpdateItemOutput::builder().build()),
        ];
        store(&rules).set_limit(&scope(), Some(7), 1).await.unwrap();
        assert!(rules.iter().all(|r| r.num_calls() == 1));
    }

    #[tokio::test(start_paused = true)]
    async fn a_throttle_is_counted_on_the_meter_by_the_reasons_dynamodb_gave() {
        use aws_sdk_dynamodb::types::error::ProvisionedThroughputExceededException;
        let reason = |r: &str| {
            ThrottlingReason::builder()
                .reason(r)
                .resource("arn:aws:dynamodb:us-east-1:123456789012:table/counters")
                .build()
        };
        let rules = [
            mock!(Client::update_item).then_error(move || {
                UpdateItemError::ProvisionedThroughputExceededException(
                    ProvisionedThroughputExceededException::builder()
                        .message("throttled")
                        .throttling_reasons(reason("TableWriteKeyRangeThroughputExceeded"))
                        .throttling_reasons(reason("TableWriteSomethingNew"))
                        .meta(
                            ErrorMetadata::builder()
                                .code("ProvisionedThroughputExceededException")
                                .build(),
                        )
                        .build(),
                )
            }),
            update_error("ThrottlingException"),
            update_error("InternalServerError"),
            mock!(Client::update_item).then_output(|| UpdateItemOutput::builder().build()),
        ];
        let s = store(&rules);
        s.set_limit(&scope(), Some(7), 1).await.unwrap();
        let throttles = s.meter().snapshot().throttles;
        let hot = ThrottleReason::parse("TableWriteKeyRangeThroughputExceeded");
        assert_eq!(throttles.get(hot), 1, "{throttles:?}");
        assert_eq!(
            throttles.get(ThrottleReason::UNSPECIFIED),
            2,
            "an unknown reason and a throttle without reasons: {throttles:?}"
        );
        assert_eq!(throttles.total(), 3, "a server error is no throttle");
    }

    #[tokio::test(start_paused = true)]
    async fn a_limit_override_gives_up_after_its_budget_and_never_retries_a_refusal() {
        let budget = ONE_OFF_WRITE_BACKOFF.max_attempts as usize;
        let throttles: Vec<Rule> = (0..=budget).map(|_| update_error("ThrottlingException")).collect();
        let err = store(&throttles).set_limit(&scope(), Some(7), 1).await.unwrap_err();
        assert!(err.is_transient(), "{err}");
        let sent: usize = throttles.iter().map(Rule::num_calls).sum();
        assert_eq!(sent, budget, "the budget's attempts, then the error");
        let refusal = [update_error("ValidationException"), update_error("ThrottlingException")];
        assert!(matches!(
            store(&refusal).set_limit(&scope(), Some(7), 1).await,
            Err(StoreError::Rejected(_))
        ));
        assert_eq!(refusal[1].num_calls(), 0, "a refusal is not sent again");
    }

    #[tokio::test(start_paused = true)]
    async fn removing_a_limit_override_is_retried_through_a_throttle() {
        use aws_sdk_dynamodb::operation::delete_item::{DeleteItemError, DeleteItemOutput};
        let rules = [
            mock!(Client::delete_item)
                .then_error(|| DeleteItemError::generic(ErrorMetadata::builder().code("ThrottlingException").build())),
            mock!(Client::delete_item).then_output(|| DeleteItemOutput::builder().build()),
        ];
        store(&rules).set_limit(&scope(), None, 1).await.unwrap();
        assert_eq!(rules[1].num_calls(), 1);
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

    /// A reservation of `best_effort#3` whose condition, update and epoch
    /// value are exactly these.
    fn reservation(condition: &'static str, update: &'static str, epoch: Option<&'static str>) -> Rule {
        mock!(Client::update_item)
            .match_requests(move |r| {
                let values = r.expression_attribute_values();
                r.key().and_then(|k| k.get("name")) == Some(&AttributeValue::S("best_effort#3".into()))
                    && r.condition_expression() == Some(condition)
                    && r.update_expression() == Some(update)
                    && values.and_then(|v| v.get(":epoch")) == epoch.map(|e| AttributeValue::N(e.into())).as_ref()
                    && r.expression_attribute_names()
                        .and_then(|n| n.get("#epoch"))
                        .map(String::as_str)
                        == Some("epoch")
            })
            .then_output(|| UpdateItemOutput::builder().build())
    }

    fn slot(quota: u64, fence: Fence) -> Reservation {
        Reservation { quota, fence }
    }

    #[tokio::test]
    async fn a_reservation_is_conditioned_on_its_shards_quota_and_fence_and_writes_that_shard_only() {
        let rules = [
            reservation(
                "(attribute_not_exists(#count) OR #count < :quota) AND attribute_not_exists(#epoch)",
                COUNTER_UPDATE,
                None,
            ),
            reservation("#count < :quota AND #epoch = :epoch", COUNTER_UPDATE, Some("2")),
            reservation(
                "attribute_not_exists(#count)",
                "ADD #count :delta, #version :one SET #updated_at = :now, #epoch = :epoch",
                Some("2"),
            ),
        ];
        let s = store(&rules);
        for fence in [Fence::Unfenced, Fence::At(2), Fence::Absent(2)] {
            s.reserve_best_effort(&scope(), "best_effort#3", slot(4, fence), 1)
                .await
                .unwrap();
        }
        assert!(rules.iter().all(|r| r.num_calls() == 1));
        // A full quota and a name that is not a best-effort item send nothing.
        assert_eq!(
            s.reserve_best_effort(&scope(), "best_effort#3", slot(0, Fence::Unfenced), 1)
                .await,
            Err(StoreError::ConditionFailed)
        );
        assert!(matches!(
            s.add_best_effort(&scope(), "eventual", 1, 1).await,
            Err(StoreError::Rejected(_))
        ));
    }

    #[tokio::test]
    async fn a_raise_moves_every_item_to_the_next_epoch_in_one_transaction_and_a_later_raise_is_refused() {
        let raise = Raise {
            adds: [
                ("best_effort".to_owned(), 0),
                ("best_effort#0".to_owned(), 3),
                ("best_effort#1".to_owned(), 0),
            ]
            .into_iter()
            .collect(),
            from: 4,
        };
        let sent = mock!(Client::transact_write_items)
            .match_requests(|r| {
                r.transact_items().len() == 3
                    && r.transact_items().iter().all(|a| {
                        let u = a.update().expect("an update");
                        let v = u.expression_attribute_values().cloned().unwrap_or_default();
                        u.condition_expression() == Some("attribute_not_exists(#epoch) OR #epoch <= :from")
                            && v.get(":from") == Some(&AttributeValue::N("4".into()))
                            && v.get(":to") == Some(&AttributeValue::N("5".into()))
                    })
                    && r.transact_items()[1]
                        .update()
                        .and_then(|u| u.expression_attribute_values())
                        .and_then(|v| v.get(":add"))
                        == Some(&AttributeValue::N("3".into()))
            })
            .then_output(|| TransactWriteItemsOutput::builder().build());
        let refused = mock!(Client::transact_write_items).then_error(|| {
            TransactWriteItemsError::TransactionCanceledException(
                TransactionCanceledException::builder()
                    .cancellation_reasons(CancellationReason::builder().code("ConditionalCheckFailed").build())
                    .build(),
            )
        });
        let s = store(&[sent.clone(), refused]);
        assert_eq!(s.raise_best_effort(&scope(), &raise, 1).await, Ok(true));
        assert_eq!(sent.num_calls(), 1);
        assert_eq!(s.raise_best_effort(&scope(), &raise, 1).await, Ok(false));
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
            epoch: None,
            limit: None,
        }
    }

    #[tokio::test]
    async fn uncount_takes_the_count_back_only_from_counted_live_items_of_that_incarnation() {
        let rule = mock!(Client::transact_write_items)
            .match_requests(|r| {
                let updates: Vec<_> = r.transact_items().iter().filter_map(|i| i.update()).collect();
                let counter = updates.iter().find(|u| {
                    u.table_name() == "counters" && u.key().get("name") == Some(&AttributeValue::S("eventual".into()))
                });
                let items: Vec<_> = updates.iter().filter(|u| u.table_name() == "resources").collect();
                updates.len() == 3
                    && counter.is_some_and(|u| {
                        u.expression_attribute_values().and_then(|v| v.get(":delta"))
                            == Some(&AttributeValue::N("-2".into()))
                    })
                    && items.len() == 2
                    && items.iter().all(|u| {
                        let values = u.expression_attribute_values();
                        u.update_expression() == "SET #cp = :false"
                            && u.condition_expression() == Some("#cp = :true AND #del = :false AND #inc = :inc")
                            && values.and_then(|v| v.get(":false")) == Some(&AttributeValue::Bool(false))
                            && values.and_then(|v| v.get(":true")) == Some(&AttributeValue::Bool(true))
                    })
                    && items[1].expression_attribute_values().and_then(|v| v.get(":inc"))
                        == Some(&AttributeValue::S("inc-b".into()))
            })
            .then_output(|| TransactWriteItemsOutput::builder().build());
        let items = [
            (ResourceId::new("a").unwrap(), "inc-a".to_owned()),
            (ResourceId::new("b").unwrap(), "inc-b".to_owned()),
        ];
        store(&[rule]).uncount(&scope(), "eventual", &items, 5).await.unwrap();
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

    mod sequence {
        //! `Sequence::next` over DynamoStore: what is sent, and what a 500
        //! after or before the claim was applied leads to.

        use std::sync::{Arc, Mutex};

        use aws_sdk_dynamodb::operation::get_item::GetItemOutput;
        use aws_sdk_dynamodb::operation::query::QueryOutput;
        use aws_sdk_dynamodb::operation::transact_write_items::TransactWriteItemsInput;
        use hybrid_counter::retry::{Backoff, Sleeper};
        use hybrid_counter::sequence::{DEFAULT_BACKOFF, Sequence};

        use super::*;

        fn sequence(rules: &[Rule], attempts: u32) -> Sequence<DynamoStore> {
            Sequence::new(store(rules))
                .with_seed(1)
                .with_sleeper(Sleeper::new(|_| async {}))
                .with_backoff(Backoff {
                    max_attempts: attempts,
                    ..DEFAULT_BACKOFF
                })
        }

        /// `GetItem` of `sequence` answering `last_id = last` (absent for 0).
        fn last(last: u64) -> Rule {
            mock!(Client::get_item)
                .match_requests(|r| {
                    r.consistent_read() == Some(true) && r.key().and_then(|k| k.get("name")) == Some(&s("sequence"))
                })
                .then_output(move || {
                    let item = (last > 0).then(|| HashMap::from([("last_id".to_owned(), number(last))]));
                    GetItemOutput::builder().set_item(item).build()
                })
        }

        /// The claims sent, in order.
        type Sent = Arc<Mutex<Vec<TransactWriteItemsInput>>>;

        fn recording(sent: &Sent) -> impl Fn(&TransactWriteItemsInput) -> bool + Send + Sync + 'static {
            let sent = sent.clone();
            move |r| {
                sent.lock().unwrap().push(r.clone());
                true
            }
        }

        /// The token the `i`-th recorded claim put on its numbered item.
        fn token_of(sent: &Sent, i: usize) -> String {
            let sent = sent.lock().unwrap();
            let put = sent[i].transact_items()[1].put().expect("the second action is the put");
            match put.item().get("token") {
                Some(AttributeValue::S(token)) => token.clone(),
                other => panic!("no token: {other:?}"),
            }
        }

        /// The read-back of `sequence#<n>`: the item with the token of the
        /// `claim`-th recorded claim, or nothing.
        fn read_back(sent: &Sent, num: u64, claim: Option<usize>) -> Rule {
            let sent = sent.clone();
            mock!(Client::get_item)
                .match_requests(move |r| {
                    r.consistent_read() == Some(true)
                        && r.key().and_then(|k| k.get("name")) == Some(&s(format!("sequence#{num}")))
                })
                .then_compute_output(move |_| {
                    let item = claim.map(|i| {
                        HashMap::from([
                            ("token".to_owned(), s(token_of(&sent, i))),
                            ("claimed_at".to_owned(), n(1)),
                        ])
                    });
                    GetItemOutput::builder().set_item(item).build()
                })
        }

        fn answered_500(sent: &Sent) -> Rule {
            mock!(Client::transact_write_items)
                .match_requests(recording(sent))
                .sequence()
                .http_status(500, None)
                .build()
        }

        fn cancelled(sent: &Sent, codes: &'static [&'static str]) -> Rule {
            mock!(Client::transact_write_items)
                .match_requests(recording(sent))
                .then_error(move || {
                    TransactWriteItemsError::TransactionCanceledException(
                        TransactionCanceledException::builder()
                            .set_cancellation_reasons(Some(
                                codes
                                    .iter()
                                    .map(|c| CancellationReason::builder().code(*c).build())
                                    .collect(),
                            ))
                            .build(),
                    )
                })
        }

        fn committed(sent: &Sent) -> Rule {
            mock!(Client::transact_write_items)
                .match_requests(recording(sent))
                .then_output(|| TransactWriteItemsOutput::builder().build())
        }

        #[tokio::test]
        async fn a_claim_is_one_transaction_conditioned_on_the_last_number_and_on_the_items_absence() {
            let sent = Sent::default();
            let seq = sequence(&[last(4), committed(&sent)], 1);
            let claimed = seq.next(&scope(), Some("w1"), 9).await.unwrap();
            assert_eq!((claimed.number, claimed.attempts), (5, 1));
            let sent = sent.lock().unwrap();
            let actions = sent[0].transact_items();
            assert_eq!(actions.len(), 2);
            let update = actions[0].update().expect("first the update of last_id");
            assert_eq!(update.key().get("name"), Some(&s("sequence")));
            assert_eq!(update.condition_expression(), Some("#last = :previous"));
            let values = update.expression_attribute_values().unwrap();
            assert_eq!(
                (values.get(":previous"), values.get(":number")),
                (Some(&number(4)), Some(&number(5)))
            );
            let put = actions[1].put().expect("then the put of the numbered item");
            assert_eq!(put.condition_expression(), Some("attribute_not_exists(#name)"));
            assert_eq!(put.item().get("name"), Some(&s("sequence#5")));
            assert_eq!(put.item().get("owner"), Some(&s("w1")));
            assert!(put.table_name() == "counters" && update.table_name() == "counters");
        }

        #[tokio::test]
        async fn the_first_number_is_conditioned_on_no_last_number() {
            let sent = Sent::default();
            let seq = sequence(&[last(0), committed(&sent)], 1);
            assert_eq!(seq.next(&scope(), None, 9).await.unwrap().number, 1);
            let sent = sent.lock().unwrap();
            let update = sent[0].transact_items()[0].update().unwrap();
            assert_eq!(update.condition_expression(), Some("attribute_not_exists(#last)"));
            assert!(update.expression_attribute_values().unwrap().get(":previous").is_none());
        }

        #[tokio::test]
        async fn a_500_after_the_claim_applied_is_ours_by_the_token_read_back() {
            let sent = Sent::default();
            let seq = sequence(&[last(4), answered_500(&sent), read_back(&sent, 5, Some(0))], 1);
            let claimed = seq.next(&scope(), None, 9).await.unwrap();
            assert_eq!((claimed.number, claimed.attempts), (5, 1), "no second claim");
            assert_eq!(sent.lock().unwrap().len(), 1);
        }

        #[tokio::test]
        async fn a_500_before_the_claim_applied_reads_back_nothing_and_claims_the_same_number_again() {
            let sent = Sent::default();
            let seq = sequence(
                &[
                    last(4),
                    answered_500(&sent),
                    read_back(&sent, 5, None),
                    last(4),
                    committed(&sent),
                ],
                2,
            );
            let claimed = seq.next(&scope(), None, 9).await.unwrap();
            assert_eq!((claimed.number, claimed.attempts), (5, 2));
            let sent_count = sent.lock().unwrap().len();
            assert_eq!(sent_count, 2);
            assert_eq!(
                token_of(&sent, 0),
                token_of(&sent, 1),
                "one token for every attempt of a call"
            );
        }

        #[tokio::test]
        async fn a_lost_race_and_a_conflict_spend_the_budget_and_the_error_says_so() {
            let sent = Sent::default();
            let seq = sequence(
                &[
                    last(4),
                    cancelled(&sent, &["ConditionalCheckFailed", "None"]),
                    last(5),
                    cancelled(&sent, &["TransactionConflict", "None"]),
                ],
                2,
            );
            let err = seq.next(&scope(), None, 9).await.unwrap_err();
            assert!(
                matches!(&err, hybrid_counter::Error::SequenceContended { attempts: 2, .. }),
                "{err:?}"
            );
            assert!(err.to_string().contains("after 2 attempts"), "{err}");
            let sent = sent.lock().unwrap();
            let previous = |i: usize| {
                sent[i].transact_items()[0]
                    .update()
                    .and_then(|u| u.expression_attribute_values())
                    .and_then(|v| v.get(":previous").cloned())
            };
            assert_eq!(
                (previous(0), previous(1)),
                (Some(number(4)), Some(number(5))),
                "re-read after the lost race"
            );
        }

        #[tokio::test]
        async fn the_counters_query_stops_below_the_sequence_items() {
            let query = mock!(Client::query)
                .match_requests(|r| {
                    r.key_condition_expression() == Some("#scope = :scope AND #name < :sequence")
                        && r.expression_attribute_values().and_then(|v| v.get(":sequence")) == Some(&s("sequence"))
                })
                .then_output(|| QueryOutput::builder().build());
            let st = store(std::slice::from_ref(&query));
            assert_eq!(st.counter_items(&scope()).await, Ok(vec![]));
            assert_eq!(query.num_calls(), 1, "the Query carried the bound");
        }

        #[tokio::test]
        async fn the_counters_query_reads_every_page_and_meters_each() {
            let item = |name: &str| -> HashMap<String, AttributeValue> {
                serde_dynamo::to_item(super::counter_item(name, 1)).unwrap()
            };
            let (first, second) = (item("eventual"), item("best_effort"));
            let next = HashMap::from([("scope".to_owned(), s("acct")), ("name".to_owned(), s("eventual"))]);
            let pages = [
                mock!(Client::query)
                    .match_requests(|r| r.exclusive_start_key().is_none())
                    .then_output(move || {
                        QueryOutput::builder()
                            .items(first.clone())
                            .set_last_evaluated_key(Some(next.clone()))
                            .build()
                    }),
                mock!(Client::query)
                    .match_requests(|r| r.exclusive_start_key().is_some())
                    .then_output(move || QueryOutput::builder().items(second.clone()).build()),
            ];
            let st = store(&pages);
            let names: Vec<String> = st
                .counter_items(&scope())
                .await
                .unwrap()
                .into_iter()
                .map(|c| c.name)
                .collect();
            assert_eq!(names, ["eventual", "best_effort"]);
            assert_eq!(st.meter().snapshot().requests.query, 2, "one request per page");
        }

        /// Each page's request is on the meter before DynamoDB answers it
        /// (a Query cancelled in flight is charged), and no more are.
        #[tokio::test]
        async fn the_counters_query_meters_each_page_before_it_is_sent() {
            let meter = Meter::default();
            let seen = Arc::new(Mutex::new(Vec::new()));
            let answered = |meter: &Meter, seen: &Arc<Mutex<Vec<u64>>>| {
                let (meter, seen) = (meter.clone(), seen.clone());
                move || seen.lock().unwrap().push(meter.snapshot().requests.query)
            };
            let key = HashMap::from([("scope".to_owned(), s("acct")), ("name".to_owned(), s("eventual"))]);
            let (first_seen, second_seen) = (answered(&meter, &seen), answered(&meter, &seen));
            let repeated = key.clone();
            let pages = [
                mock!(Client::query)
                    .match_requests(|r| r.exclusive_start_key().is_none())
                    .then_output(move || {
                        first_seen();
                        QueryOutput::builder().set_last_evaluated_key(Some(key.clone())).build()
                    }),
                // The same key again: the paginator stops there, and so
                // does the meter.
                mock!(Client::query)
                    .match_requests(|r| r.exclusive_start_key().is_some())
                    .then_output(move || {
                        second_seen();
                        QueryOutput::builder()
                            .set_last_evaluated_key(Some(repeated.clone()))
                            .build()
                    }),
            ];
            let st = store(&pages).with_meter(meter.clone());
            assert_eq!(st.counter_items(&scope()).await, Ok(vec![]));
            assert_eq!(*seen.lock().unwrap(), [1, 2], "each request counted before its answer");
            assert_eq!(
                meter.snapshot().requests.query,
                2,
                "no request counted that was not sent"
            );
        }
    }
}
