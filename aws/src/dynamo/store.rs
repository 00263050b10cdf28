//! [`DynamoStore`] itself and the core's store roles on it: the client, the
//! two tables' names, the meter its requests are counted on and the
//! admission mode the audit reads by; each role method's requests. The
//! fields are `pub(super)`: each sibling file adds the shared request
//! helpers of one concern (reads, transactions, the audit's repairs,
//! metering), which this file calls as methods and never imports.

use std::collections::HashMap;

use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::types::{
    AttributeValue, KeysAndAttributes, Put, ReturnConsumedCapacity, TransactWriteItem, Update,
};
use serde::Deserialize;

use hybrid_counter::EpochMillis;
use hybrid_counter::best_effort::{Fence, Raise, Reservation};
use hybrid_counter::config::{Admission, CounterConfig};
use hybrid_counter::error::StoreError;
use hybrid_counter::ids::Scope;
use hybrid_counter::items::{CounterItem, CounterSnapshot, ItemRow, ResourceState};
use hybrid_counter::keys;
use hybrid_counter::retry::Retry;
use hybrid_counter::store::meter::{Meter, Operation, Written};
use hybrid_counter::store::{
    AuditStore, NewResource, RequestStore, ResourceKey, ResourceRead, SequenceClaim, SequenceEntry, SequenceStore,
    StoreBase, StreamStore, Transaction, sends,
};

use super::attributes::{
    KeyedStateImage, STATE_PROJECTION, build_error, counter_key, counter_values, n, resource_key, s, state_names,
};
use super::retry::{UNPROCESSED_KEYS_BACKOFF, sent};

/// The DynamoDB implementation of the store roles ([`hybrid_counter::store`]).
#[derive(Debug, Clone)]
pub struct DynamoStore {
    pub(super) client: Client,
    pub(super) resources_table: String,
    pub(super) counters_table: String,
    pub(super) meter: Meter,
    /// How the scopes are admitted, so the audit reads BE against the live
    /// count by the right invariant ([`hybrid_counter::audit::findings_for`]).
    pub(super) admission: Admission,
    /// The limit of a scope without an override, for the even split a
    /// limit write starts from (0 when not configured: every share is
    /// first lowered to none, then raised).
    pub(super) default_limit: u64,
}

impl DynamoStore {
    pub fn new(client: Client, config: &CounterConfig) -> Self {
        Self {
            client,
            resources_table: config.resources_table.clone(),
            counters_table: config.counters_table.clone(),
            meter: Meter::default(),
            admission: config.admission,
            default_limit: config.default_limit.unwrap_or(0),
        }
    }

    pub(crate) fn default_limit(&self) -> u64 {
        self.default_limit
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
}

/// Actions per `TransactWriteItems` (DynamoDB's limit).
const MAX_TRANSACTION_ACTIONS: usize = 100;
/// Keys per `BatchGetItem` request (DynamoDB's limit).
const MAX_BATCH_GET: usize = 100;

impl StoreBase for DynamoStore {
    fn cost_meter(&self) -> Option<&Meter> {
        Some(&self.meter)
    }
}

impl ResourceRead for DynamoStore {
    async fn get_resource(&self, key: &ResourceKey) -> Result<Option<ResourceState>, StoreError> {
        self.get_consistent(
            &self.resources_table,
            resource_key(key),
            STATE_PROJECTION,
            state_names(),
            || format!("resource {}/{}", key.scope, key.id),
        )
        .await
    }
}

impl RequestStore for DynamoStore {
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
                values.insert(":epoch".to_owned(), n(epoch));
                "#count < :quota AND #epoch = :epoch"
            }
            // Read absent after a raise: still absent, or a raise created
            // it since (then its count is not what the quotas assumed).
            Fence::Absent(epoch) => {
                values.remove(":quota");
                values.insert(":epoch".to_owned(), n(epoch));
                "attribute_not_exists(#count)"
            }
        };
        // One attempt only: after an ambiguous 500 the slot may be reserved
        // already, and a retry would reserve a second one.
        self.update_best_effort(scope, name, values, Some(condition), Some(reservation.fence))
            .await
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
}

impl StreamStore for DynamoStore {
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
                    found.insert((image.scope, image.id), image.state);
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
}

impl AuditStore for DynamoStore {
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
                .expression_attribute_values(":to", n(raise.to()))
                .expression_attribute_values(":from", n(raise.from))
                .build()
                .map_err(build_error)?;
            actions.push(TransactWriteItem::builder().update(update).build());
        }
        // The SDK's retries keep the token it filled for this send, so a
        // re-sent raise is answered without a second apply (and the epoch
        // condition refuses one after the token's 10 minutes).
        self.send_repair(actions).await
    }
}

impl SequenceStore for DynamoStore {
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
                    (":number".to_owned(), n(claim.number)),
                    (":now".to_owned(), n(claim.now)),
                ]
                .into_iter()
                .chain(previous.map(|p| (":previous".to_owned(), n(p))))
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
}
