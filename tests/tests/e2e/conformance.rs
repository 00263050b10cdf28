//! The AWS behaviours the kit's correctness rests on, one test each, run on
//! both emulators: fakecloud (the default) and ministack (the LocalStack
//! path without a token). Each test names the AWS documentation page it
//! follows and asserts what that page says, except where an emulator is
//! listed in [`KNOWN_DIFFERENCES`]: then it asserts what that emulator does
//! instead, so a test fails when an emulator changes either way, and a
//! difference is never skipped silently. `localstack/README.md` lists the
//! same table with what the kit does about each difference.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use aws_config::SdkConfig;
use aws_sdk_dynamodb::types::{
    AttributeValue, ConditionCheck, KeysAndAttributes, Put, ReturnValuesOnConditionCheckFailure, TransactWriteItem,
    Update,
};
use aws_sdk_dynamodbstreams::types::{OperationType, ShardIteratorType, StreamViewType};
use e2e::ministack::Ministack;
use e2e::{Emulator, create_tables};
use hybrid_counter::CounterConfig;

/// The emulators the suite runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Emu {
    Fakecloud,
    Ministack,
}

/// A behaviour of AWS the kit relies on (one test each).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Behaviour {
    ConditionalWriteReturnsItem,
    TransactionAllOrNothing,
    CancellationReasonsInOrder,
    ClientRequestTokenIdempotent,
    ClientRequestTokenMismatch,
    TransactionConflict,
    ConsistentQuery,
    BatchGetUnprocessedKeys,
    StreamImagesInOrder,
    StreamInsertAndRemove,
    FilterPatterns,
    OnFailureRecord,
    S3OnFailureObject,
    SqsRedrive,
    SqsVisibility,
}

/// A known difference of one or more emulators from the AWS documentation.
pub struct Difference {
    pub emulators: &'static [Emu],
    pub behaviour: Behaviour,
    /// What the emulator does instead (what its test asserts).
    pub observed: &'static str,
    /// What the kit does about it.
    pub kit: &'static str,
}

/// Every known difference, in one place (listed again in
/// `localstack/README.md`, "Known differences of the emulators").
pub const KNOWN_DIFFERENCES: &[Difference] = &[
    Difference {
        emulators: &[Emu::Fakecloud, Emu::Ministack],
        behaviour: Behaviour::TransactionConflict,
        observed: "serializes every write: a transaction racing single-item writes never answers TransactionConflict",
        kit: "the conflict path (retry with backoff, then a batch item failure) is tested with injected \
              conflicts (tests/src/faults.rs) and in the simulation",
    },
    Difference {
        emulators: &[Emu::Fakecloud],
        behaviour: Behaviour::ClientRequestTokenIdempotent,
        observed: "compares a token's requests byte for byte: the same transaction serialized anew (the Rust \
                   SDK writes a key's attributes in map order) is refused with IdempotentParameterMismatch; a \
                   byte-identical retry is replayed",
        kit: "the kit never reuses a token across send() calls: the SDK fills a fresh one per send(), and its \
              own retries resend the same bytes, which fakecloud replays",
    },
    Difference {
        emulators: &[Emu::Fakecloud, Emu::Ministack],
        behaviour: Behaviour::BatchGetUnprocessedKeys,
        observed: "answers every key of a read past 16 MB, with no UnprocessedKeys",
        kit: "the store's BatchGetItem loop over UnprocessedKeys is unit-tested with a mocked client",
    },
    Difference {
        emulators: &[Emu::Fakecloud],
        behaviour: Behaviour::OnFailureRecord,
        observed: "its mappings run no function code (no container engine): a failing batch leaves no record",
        kit: "the local runner plays the mappings and writes the record as documented (localstack/runner/src/batch.rs)",
    },
    Difference {
        emulators: &[Emu::Ministack],
        behaviour: Behaviour::OnFailureRecord,
        observed: "its own stream mapping ignores MaximumRetryAttempts: a failing batch is retried until \
                   MaximumRecordAgeInSeconds, so no record comes after the retries (and its record names a \
                   placeholder shard id)",
        kit: "the local runner disables ministack's mappings and plays them (`local run --target localstack`)",
    },
    Difference {
        emulators: &[Emu::Fakecloud],
        behaviour: Behaviour::S3OnFailureObject,
        observed: "its mappings run no function code: a failing batch leaves no object",
        kit: "the local runner writes the object, key and payload as documented (localstack/runner/src/batch.rs)",
    },
    Difference {
        emulators: &[Emu::Ministack],
        behaviour: Behaviour::S3OnFailureObject,
        observed: "its own stream mapping sends nothing to an S3 on-failure destination",
        kit: "the local runner disables ministack's mappings and plays them (`local run --target localstack`)",
    },
];

/// Whether `emulator` is known to differ from AWS on `behaviour`.
fn differs(emulator: Emu, behaviour: Behaviour) -> bool {
    KNOWN_DIFFERENCES
        .iter()
        .any(|d| d.emulators.contains(&emulator) && d.behaviour == behaviour)
}

/// One running emulator of either kind.
enum Running {
    Fakecloud(Emulator),
    Ministack(Ministack),
}

impl Running {
    fn start(emulator: Emu) -> Self {
        match emulator {
            Emu::Fakecloud => Running::Fakecloud(Emulator::start()),
            Emu::Ministack => Running::Ministack(Ministack::start()),
        }
    }

    fn endpoint(&self) -> &str {
        match self {
            Running::Fakecloud(e) => &e.endpoint,
            Running::Ministack(m) => &m.endpoint,
        }
    }
}

/// A fresh emulator with the kit's two tables (the resources table with
/// its `NEW_AND_OLD_IMAGES` stream), as the test's admin identity.
struct Fixture {
    _emulator: Running,
    sdk: SdkConfig,
    ddb: aws_sdk_dynamodb::Client,
    config: CounterConfig,
    stream_arn: String,
}

impl Fixture {
    async fn start(emulator: Emu) -> Self {
        let running = Running::start(emulator);
        let sdk = e2e::sdk_config_for(running.endpoint()).await;
        let ddb = aws_sdk_dynamodb::Client::new(&sdk);
        let config = CounterConfig {
            resources_table: "conf-resources".into(),
            counters_table: "conf-counters".into(),
            default_limit: Some(10),
            eventual_shards: 1,
            best_effort_shards: 1,
            admission: Default::default(),
            scope_keys: Default::default(),
        };
        let stream_arn = create_tables(&ddb, &config).await;
        Self {
            _emulator: running,
            sdk,
            ddb,
            config,
            stream_arn,
        }
    }

    fn table(&self) -> &str {
        &self.config.resources_table
    }
}

fn s(value: &str) -> AttributeValue {
    AttributeValue::S(value.to_owned())
}

fn n(value: i64) -> AttributeValue {
    AttributeValue::N(value.to_string())
}

fn key(scope: &str, id: &str) -> HashMap<String, AttributeValue> {
    HashMap::from([("scope".to_owned(), s(scope)), ("id".to_owned(), s(id))])
}

fn item(scope: &str, id: &str, extra: &[(&str, AttributeValue)]) -> HashMap<String, AttributeValue> {
    let mut item = key(scope, id);
    item.extend(extra.iter().map(|(k, v)| ((*k).to_owned(), v.clone())));
    item
}

async fn put(f: &Fixture, item: HashMap<String, AttributeValue>) {
    f.ddb
        .put_item()
        .table_name(f.table())
        .set_item(Some(item))
        .send()
        .await
        .expect("put item");
}

async fn get(f: &Fixture, scope: &str, id: &str) -> Option<HashMap<String, AttributeValue>> {
    f.ddb
        .get_item()
        .table_name(f.table())
        .set_key(Some(key(scope, id)))
        .consistent_read(true)
        .send()
        .await
        .expect("get item")
        .item
}

fn add_one(f: &Fixture, scope: &str, id: &str) -> TransactWriteItem {
    add_one_at(f, key(scope, id))
}

fn add_one_at(f: &Fixture, key: HashMap<String, AttributeValue>) -> TransactWriteItem {
    TransactWriteItem::builder()
        .update(
            Update::builder()
                .table_name(f.table())
                .set_key(Some(key))
                .update_expression("ADD #c :one")
                .expression_attribute_names("#c", "count")
                .expression_attribute_values(":one", n(1))
                .build()
                .unwrap(),
        )
        .build()
}

fn put_if_absent(f: &Fixture, scope: &str, id: &str) -> TransactWriteItem {
    TransactWriteItem::builder()
        .put(
            Put::builder()
                .table_name(f.table())
                .set_item(Some(key(scope, id)))
                .condition_expression("attribute_not_exists(#s)")
                .expression_attribute_names("#s", "scope")
                .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
                .build()
                .unwrap(),
        )
        .build()
}

fn count_of(item: Option<HashMap<String, AttributeValue>>) -> i64 {
    item.and_then(|i| i.get("count").and_then(|v| v.as_n().ok()).and_then(|c| c.parse().ok()))
        .unwrap_or(0)
}

/// The cancellation reason codes of a failed transaction, in action order.
fn reason_codes(
    err: &aws_sdk_dynamodb::error::SdkError<aws_sdk_dynamodb::operation::transact_write_items::TransactWriteItemsError>,
) -> Vec<String> {
    match err.as_service_error() {
        Some(
            aws_sdk_dynamodb::operation::transact_write_items::TransactWriteItemsError::TransactionCanceledException(e),
        ) => e
            .cancellation_reasons()
            .iter()
            .map(|r| r.code().unwrap_or_default().to_owned())
            .collect(),
        other => panic!("expected TransactionCanceledException, got {other:?}"),
    }
}

/// <https://docs.aws.amazon.com/amazondynamodb/latest/APIReference/API_PutItem.html>
/// (`ReturnValuesOnConditionCheckFailure`): a failed condition answers
/// `ConditionalCheckFailedException` carrying the item as it was.
async fn conditional_write_returns_the_item_that_failed_it(emulator: Emu) {
    assert!(!differs(emulator, Behaviour::ConditionalWriteReturnsItem));
    let f = Fixture::start(emulator).await;
    let existing = item("acct", "a", &[("counter_processed", AttributeValue::Bool(true))]);
    put(&f, existing.clone()).await;
    let err = f
        .ddb
        .put_item()
        .table_name(f.table())
        .set_item(Some(item(
            "acct",
            "a",
            &[("counter_processed", AttributeValue::Bool(false))],
        )))
        .condition_expression("attribute_not_exists(#s)")
        .expression_attribute_names("#s", "scope")
        .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
        .send()
        .await
        .unwrap_err();
    let failed = err.as_service_error().expect("a service error");
    assert!(failed.is_conditional_check_failed_exception(), "{failed:?}");
    let aws_sdk_dynamodb::operation::put_item::PutItemError::ConditionalCheckFailedException(e) = failed else {
        unreachable!()
    };
    assert_eq!(e.item(), Some(&existing));
    assert_eq!(
        get(&f, "acct", "a").await,
        Some(existing),
        "the refused put changed nothing"
    );
}

/// <https://docs.aws.amazon.com/amazondynamodb/latest/APIReference/API_TransactWriteItems.html>:
/// a cancelled transaction applies none of its actions.
async fn a_cancelled_transaction_applies_none_of_its_actions(emulator: Emu) {
    assert!(!differs(emulator, Behaviour::TransactionAllOrNothing));
    let f = Fixture::start(emulator).await;
    put(&f, key("acct", "taken")).await;
    let err = f
        .ddb
        .transact_write_items()
        .transact_items(add_one(&f, "acct", "counter"))
        .transact_items(put_if_absent(&f, "acct", "new"))
        .transact_items(put_if_absent(&f, "acct", "taken"))
        .send()
        .await
        .unwrap_err();
    assert_eq!(reason_codes(&err).len(), 3);
    assert_eq!(get(&f, "acct", "counter").await, None, "the counter must not move");
    assert_eq!(get(&f, "acct", "new").await, None, "the put must not land");
}

/// <https://docs.aws.amazon.com/amazondynamodb/latest/APIReference/API_TransactWriteItems.html>
/// (`CancellationReasons`): one reason per action, in request order, `None`
/// for the actions that did not fail, the failed item with `ALL_OLD`.
async fn cancellation_reasons_come_in_action_order(emulator: Emu) {
    assert!(!differs(emulator, Behaviour::CancellationReasonsInOrder));
    let f = Fixture::start(emulator).await;
    put(
        &f,
        item("acct", "flag", &[("counter_processed", AttributeValue::Bool(true))]),
    )
    .await;
    let check = TransactWriteItem::builder()
        .condition_check(
            ConditionCheck::builder()
                .table_name(f.table())
                .set_key(Some(key("acct", "flag")))
                .condition_expression("counter_processed = :f")
                .expression_attribute_values(":f", AttributeValue::Bool(false))
                .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
                .build()
                .unwrap(),
        )
        .build();
    let err = f
        .ddb
        .transact_write_items()
        .transact_items(add_one(&f, "acct", "counter"))
        .transact_items(check)
        .transact_items(put_if_absent(&f, "acct", "other"))
        .send()
        .await
        .unwrap_err();
    assert_eq!(reason_codes(&err), ["None", "ConditionalCheckFailed", "None"]);
    let Some(aws_sdk_dynamodb::operation::transact_write_items::TransactWriteItemsError::TransactionCanceledException(
        e,
    )) = err.as_service_error()
    else {
        unreachable!()
    };
    assert_eq!(
        e.cancellation_reasons()[1]
            .item()
            .and_then(|i| i.get("counter_processed")),
        Some(&AttributeValue::Bool(true))
    );
}

/// <https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/transaction-apis.html>
/// (idempotency): a transaction repeated with its `ClientRequestToken`
/// within 10 minutes succeeds and applies once; the same parameters
/// serialized anew are the same request.
async fn a_repeated_client_request_token_applies_once(emulator: Emu) {
    let f = Fixture::start(emulator).await;
    let first = key("acct", "counter");
    let repeat = f
        .ddb
        .transact_write_items()
        .transact_items(add_one_at(&f, first.clone()))
        .client_request_token("token-1");
    // Byte for byte, as the SDK's own retry sends it.
    for _ in 0..3 {
        repeat
            .clone()
            .send()
            .await
            .expect("a repeat with the same token succeeds");
    }
    assert_eq!(count_of(get(&f, "acct", "counter").await), 1);
    // The same key with its attributes in the other order: the SDK writes a
    // map in its iteration order, so this is the same request serialized
    // anew (what an application's own retry sends).
    let reordered = std::iter::repeat_with(|| key("acct", "counter"))
        .take(1_000)
        .find(|k| k.keys().next() != first.keys().next())
        .expect("a key map iterated in the other order");
    let again = f
        .ddb
        .transact_write_items()
        .transact_items(add_one_at(&f, reordered))
        .client_request_token("token-1")
        .send()
        .await;
    if differs(emulator, Behaviour::ClientRequestTokenIdempotent) {
        let err = again.expect_err("known to compare the request's bytes");
        assert!(
            err.as_service_error()
                .is_some_and(|e| e.is_idempotent_parameter_mismatch_exception()),
            "{err:?}"
        );
    } else {
        again.expect("the same parameters with the same token succeed");
    }
    assert_eq!(count_of(get(&f, "acct", "counter").await), 1);
    f.ddb
        .transact_write_items()
        .transact_items(add_one(&f, "acct", "counter"))
        .client_request_token("token-2")
        .send()
        .await
        .unwrap();
    assert_eq!(
        count_of(get(&f, "acct", "counter").await),
        2,
        "a new token is a new transaction"
    );
}

/// <https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/transaction-apis.html>
/// (idempotency): the same token with another payload within 10 minutes is
/// `IdempotentParameterMismatch`, and nothing of it is applied.
async fn a_token_reused_for_another_payload_is_refused(emulator: Emu) {
    assert!(!differs(emulator, Behaviour::ClientRequestTokenMismatch));
    let f = Fixture::start(emulator).await;
    f.ddb
        .transact_write_items()
        .transact_items(add_one(&f, "acct", "counter"))
        .client_request_token("token-1")
        .send()
        .await
        .unwrap();
    let err = f
        .ddb
        .transact_write_items()
        .transact_items(add_one(&f, "acct", "other"))
        .client_request_token("token-1")
        .send()
        .await
        .unwrap_err();
    assert!(
        err.as_service_error()
            .is_some_and(|e| e.is_idempotent_parameter_mismatch_exception()),
        "{err:?}"
    );
    assert_eq!(get(&f, "acct", "other").await, None);
}

/// <https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/transaction-apis.html>
/// (transaction conflict handling): a transaction and single-item writes on
/// the same item at once: each either applies whole or is refused with
/// `TransactionConflict`; no write is lost or half applied.
async fn a_transaction_racing_single_item_writes_is_all_or_nothing(emulator: Emu) {
    let f = Fixture::start(emulator).await;
    let rounds = 12;
    let mut tasks = tokio::task::JoinSet::new();
    for round in 0..rounds {
        let (ddb, tx) = (f.ddb.clone(), f.ddb.transact_write_items());
        let tx = tx
            .transact_items(add_one(&f, "acct", "counter"))
            .transact_items(put_if_absent(&f, "acct", &format!("marker-{round}")));
        tasks.spawn(async move { (true, round, tx.send().await.map(|_| ()).map_err(|e| reason_codes(&e))) });
        let single = ddb
            .update_item()
            .table_name(f.table())
            .set_key(Some(key("acct", "counter")))
            .update_expression("ADD #c :one")
            .expression_attribute_names("#c", "count")
            .expression_attribute_values(":one", n(1));
        tasks.spawn(async move {
            let result = single.send().await.map(|_| ()).map_err(|e| {
                let conflict = e
                    .as_service_error()
                    .is_some_and(|e| e.is_transaction_conflict_exception());
                vec![if conflict { "TransactionConflict" } else { "unexpected" }.to_owned()]
            });
            (false, round, result)
        });
    }
    let (mut applied, mut conflicts) = (0, 0);
    let mut markers = Vec::new();
    while let Some(joined) = tasks.join_next().await {
        let (transaction, round, result) = joined.unwrap();
        match result {
            Ok(()) => {
                applied += 1;
                if transaction {
                    markers.push(round);
                }
            }
            Err(codes) => {
                assert!(codes.iter().any(|c| c == "TransactionConflict"), "{codes:?}");
                assert!(
                    codes.iter().all(|c| c == "TransactionConflict" || c == "None"),
                    "{codes:?}"
                );
                conflicts += 1;
            }
        }
    }
    assert_eq!(count_of(get(&f, "acct", "counter").await), applied, "no write lost");
    for round in 0..rounds {
        let marker = get(&f, "acct", &format!("marker-{round}")).await;
        assert_eq!(
            marker.is_some(),
            markers.contains(&round),
            "marker-{round}: all or nothing"
        );
    }
    if differs(emulator, Behaviour::TransactionConflict) {
        assert_eq!(conflicts, 0, "{emulator:?} was known to serialize every write");
    }
}

/// <https://docs.aws.amazon.com/amazondynamodb/latest/APIReference/API_Query.html>
/// (`ConsistentRead`): a strongly consistent Query reflects every write
/// acknowledged before it, in sort key order.
async fn a_consistent_query_sees_every_acknowledged_write(emulator: Emu) {
    assert!(!differs(emulator, Behaviour::ConsistentQuery));
    let f = Fixture::start(emulator).await;
    let ids: Vec<String> = (0..25).map(|i| format!("id-{i:02}")).collect();
    for id in ids.iter().rev() {
        put(&f, key("acct", id)).await;
    }
    put(&f, key("other", "id-00")).await;
    let out = f
        .ddb
        .query()
        .table_name(f.table())
        .key_condition_expression("#s = :s")
        .expression_attribute_names("#s", "scope")
        .expression_attribute_values(":s", s("acct"))
        .consistent_read(true)
        .send()
        .await
        .unwrap();
    let found: Vec<&str> = out
        .items()
        .iter()
        .filter_map(|i| i.get("id").and_then(|v| v.as_s().ok()).map(String::as_str))
        .collect();
    assert_eq!(found, ids.iter().map(String::as_str).collect::<Vec<_>>());
}

/// <https://docs.aws.amazon.com/amazondynamodb/latest/APIReference/API_BatchGetItem.html>:
/// a batch whose items exceed 16 MB answers part of them and the rest as
/// `UnprocessedKeys`.
async fn batch_get_item_answers_past_16_mb_as_unprocessed_keys(emulator: Emu) {
    let f = Fixture::start(emulator).await;
    let payload = "x".repeat(380_000);
    let count = 50; // 50 x 380 KB: about 19 MB
    let mut keys = Vec::new();
    for i in 0..count {
        let id = format!("big-{i:02}");
        put(&f, item("acct", &id, &[("payload", s(&payload))])).await;
        keys.push(key("acct", &id));
    }
    let out = f
        .ddb
        .batch_get_item()
        .request_items(
            f.table(),
            KeysAndAttributes::builder().set_keys(Some(keys)).build().unwrap(),
        )
        .send()
        .await
        .unwrap();
    let answered = out.responses().and_then(|r| r.get(f.table())).map_or(0, Vec::len);
    let unprocessed = out
        .unprocessed_keys()
        .and_then(|u| u.get(f.table()))
        .map_or(0, |k| k.keys().len());
    assert_eq!(answered + unprocessed, count, "every key is answered or returned");
    if differs(emulator, Behaviour::BatchGetUnprocessedKeys) {
        assert_eq!(unprocessed, 0, "{emulator:?} was known to answer everything");
    } else {
        assert!(
            unprocessed > 0 && answered * 380_000 <= 16 * 1024 * 1024,
            "{answered} answered"
        );
    }
}

/// Every record of the fixture's stream, from the trim horizon, shard by shard.
async fn stream_records(f: &Fixture) -> Vec<aws_sdk_dynamodbstreams::types::Record> {
    let streams = aws_sdk_dynamodbstreams::Client::new(&f.sdk);
    let description = streams
        .describe_stream()
        .stream_arn(&f.stream_arn)
        .send()
        .await
        .unwrap()
        .stream_description
        .unwrap();
    assert_eq!(description.stream_view_type(), Some(&StreamViewType::NewAndOldImages));
    let mut records = Vec::new();
    for shard in description.shards() {
        let mut iterator = streams
            .get_shard_iterator()
            .stream_arn(&f.stream_arn)
            .shard_id(shard.shard_id().unwrap())
            .shard_iterator_type(ShardIteratorType::TrimHorizon)
            .send()
            .await
            .unwrap()
            .shard_iterator;
        while let Some(current) = iterator {
            let page = streams.get_records().shard_iterator(current).send().await.unwrap();
            if page.records().is_empty() {
                break;
            }
            records.extend(page.records().iter().cloned());
            iterator = page.next_shard_iterator;
        }
    }
    records
}

fn record_id(record: &aws_sdk_dynamodbstreams::types::Record) -> String {
    record
        .dynamodb()
        .and_then(|d| d.keys())
        .and_then(|k| k.get("id"))
        .and_then(|v| v.as_s().ok())
        .cloned()
        .unwrap_or_default()
}

/// <https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/Streams.html>:
/// each item change appears exactly once, in the order of the changes to
/// that item, with both images (`NEW_AND_OLD_IMAGES`).
async fn each_item_change_is_one_record_in_order_with_both_images(emulator: Emu) {
    assert!(!differs(emulator, Behaviour::StreamImagesInOrder));
    let f = Fixture::start(emulator).await;
    for step in 0..4 {
        put(&f, item("acct", "a", &[("step", n(step))])).await;
        put(&f, item("acct", "b", &[("step", n(step))])).await;
    }
    let records = stream_records(&f).await;
    for id in ["a", "b"] {
        let of_item: Vec<_> = records.iter().filter(|r| record_id(r) == id).collect();
        let steps: Vec<(Option<String>, Option<String>)> = of_item
            .iter()
            .map(|r| {
                let step = |image: Option<&HashMap<String, aws_sdk_dynamodbstreams::types::AttributeValue>>| {
                    image.and_then(|i| i.get("step")).and_then(|v| v.as_n().ok()).cloned()
                };
                let d = r.dynamodb().unwrap();
                (step(d.old_image()), step(d.new_image()))
            })
            .collect();
        let expected: Vec<(Option<String>, Option<String>)> = (0..4)
            .map(|i: i32| ((i > 0).then(|| (i - 1).to_string()), Some(i.to_string())))
            .collect();
        assert_eq!(
            steps, expected,
            "item {id}: one record per change, in order, both images"
        );
        let sequence: Vec<u128> = of_item
            .iter()
            .map(|r| r.dynamodb().unwrap().sequence_number().unwrap().parse().unwrap())
            .collect();
        assert!(sequence.windows(2).all(|w| w[0] < w[1]), "{sequence:?}");
    }
}

/// <https://docs.aws.amazon.com/amazondynamodb/latest/APIReference/API_streams_StreamRecord.html>
/// and <https://docs.aws.amazon.com/amazondynamodb/latest/APIReference/API_streams_Record.html>:
/// an `INSERT` has no `OldImage`; a deleted item's record is a `REMOVE`
/// with the `OldImage` and no `NewImage`.
async fn an_insert_has_no_old_image_and_a_delete_is_a_remove(emulator: Emu) {
    assert!(!differs(emulator, Behaviour::StreamInsertAndRemove));
    let f = Fixture::start(emulator).await;
    put(&f, item("acct", "a", &[("deleted", AttributeValue::Bool(true))])).await;
    f.ddb
        .delete_item()
        .table_name(f.table())
        .set_key(Some(key("acct", "a")))
        .send()
        .await
        .unwrap();
    let records = stream_records(&f).await;
    let kinds: Vec<_> = records.iter().map(|r| r.event_name().cloned()).collect();
    assert_eq!(kinds, [Some(OperationType::Insert), Some(OperationType::Remove)]);
    let insert = records[0].dynamodb().unwrap();
    assert!(insert.old_image().is_none() && insert.new_image().is_some());
    let remove = records[1].dynamodb().unwrap();
    assert!(remove.new_image().is_none());
    assert_eq!(
        remove.old_image().and_then(|i| i.get("deleted")),
        Some(&aws_sdk_dynamodbstreams::types::AttributeValue::Bool(true))
    );
}

/// <https://docs.aws.amazon.com/lambda/latest/dg/invocation-eventfiltering.html>
/// (filtering DynamoDB events): the template's two patterns, applied to
/// the records of the kit's own writes as the stream delivers them, pass
/// the uncounted INSERT and the soft delete only.
async fn the_templates_filter_patterns_pass_the_uncounted_insert_and_the_soft_delete(emulator: Emu) {
    assert!(!differs(emulator, Behaviour::FilterPatterns));
    let f = Fixture::start(emulator).await;
    let flags = |processed: bool, deleted: bool| {
        item(
            "acct",
            "a",
            &[
                ("counter_processed", AttributeValue::Bool(processed)),
                ("deleted", AttributeValue::Bool(deleted)),
            ],
        )
    };
    put(&f, flags(false, false)).await; // create
    put(&f, flags(true, false)).await; // the stream counter's flag flip
    put(&f, flags(true, true)).await; // soft delete
    f.ddb
        .delete_item()
        .table_name(f.table())
        .set_key(Some(key("acct", "a")))
        .send()
        .await
        .unwrap(); // hard delete
    let reader =
        hybrid_counter_aws::streams::ShardReader::new(aws_sdk_dynamodbstreams::Client::new(&f.sdk), &f.stream_arn);
    let mut records = Vec::new();
    for shard in reader.shards().await.unwrap() {
        records.extend(
            reader
                .read(
                    &shard.shard_id,
                    &hybrid_counter_aws::streams::Position::TrimHorizon,
                    usize::MAX,
                )
                .await
                .unwrap(),
        );
    }
    assert_eq!(records.len(), 4);
    let patterns = hybrid_counter::stream::filter::patterns();
    let passed: Vec<bool> = records
        .iter()
        .map(|r| {
            let event = serde_json::to_value(r).unwrap();
            patterns
                .iter()
                .any(|p| hybrid_counter::stream::filter::matches(p, &event))
        })
        .collect();
    assert_eq!(passed, [true, false, true, false]);
}

/// A function whose every invocation fails (a `provided.al2023` bootstrap
/// that reports an error to the runtime API), with a role Lambda trusts.
async fn failing_function(sdk: &SdkConfig, name: &str) -> String {
    let iam = aws_sdk_iam::Client::new(sdk);
    let role = iam
        .create_role()
        .role_name(format!("{name}-role"))
        .assume_role_policy_document(
            serde_json::json!({"Version": "2012-10-17", "Statement": [{"Effect": "Allow",
                "Principal": {"Service": "lambda.amazonaws.com"}, "Action": "sts:AssumeRole"}]})
            .to_string(),
        )
        .send()
        .await
        .expect("create role")
        .role
        .expect("a role");
    let bootstrap = "#!/bin/sh\nset -eu\napi=\"http://$AWS_LAMBDA_RUNTIME_API/2018-06-01/runtime/invocation\"\n\
        while true; do\n  headers=$(mktemp)\n  curl -sS -D \"$headers\" -o /dev/null \"$api/next\"\n  \
        id=$(grep -i '^lambda-runtime-aws-request-id:' \"$headers\" | tr -d '\\r' | cut -d' ' -f2)\n  \
        curl -sS -X POST -d '{\"errorMessage\":\"poison\",\"errorType\":\"Poison\"}' \"$api/$id/error\" >/dev/null\n\
        done\n";
    let lambda = aws_sdk_lambda::Client::new(sdk);
    lambda
        .create_function()
        .function_name(name)
        .runtime(aws_sdk_lambda::types::Runtime::Providedal2023)
        .handler("bootstrap")
        .role(role.arn())
        .code(
            aws_sdk_lambda::types::FunctionCode::builder()
                .zip_file(aws_smithy_types::Blob::new(e2e::counterctl::stored_zip(
                    "bootstrap",
                    bootstrap.as_bytes(),
                )))
                .build(),
        )
        .send()
        .await
        .expect("create function")
        .function_arn
        .expect("function arn")
}

/// The emulator's own mapping of the fixture's stream to a failing
/// function, no retries, failed batches to `destination`; then one write.
/// Returns the mapping's UUID.
async fn failing_mapping(f: &Fixture, destination: &str) -> String {
    let function = failing_function(&f.sdk, "conf-poison").await;
    let mapping = aws_sdk_lambda::Client::new(&f.sdk)
        .create_event_source_mapping()
        .function_name(&function)
        .event_source_arn(&f.stream_arn)
        .starting_position(aws_sdk_lambda::types::EventSourcePosition::TrimHorizon)
        .batch_size(10)
        .maximum_retry_attempts(0)
        .destination_config(
            aws_sdk_lambda::types::DestinationConfig::builder()
                .on_failure(
                    aws_sdk_lambda::types::OnFailure::builder()
                        .destination(destination)
                        .build(),
                )
                .build(),
        )
        .send()
        .await
        .expect("create event source mapping");
    put(f, key("acct", "poison")).await;
    mapping.uuid.expect("mapping uuid")
}

/// How long a test waits for the emulator's own mapping to give up on a batch.
const MAPPING_PATIENCE: Duration = Duration::from_secs(10);

/// <https://docs.aws.amazon.com/lambda/latest/dg/services-dynamodb-errors.html>:
/// once its retries are spent, a failed batch's record reaches the SQS
/// on-failure destination: `DDBStreamBatchInfo` with the shard, the
/// sequence range and the stream, no records.
async fn a_failed_batch_leaves_its_on_failure_record_in_sqs(emulator: Emu) {
    let f = Fixture::start(emulator).await;
    let sqs = aws_sdk_sqs::Client::new(&f.sdk);
    let url = sqs
        .create_queue()
        .queue_name("conf-dlq1")
        .send()
        .await
        .unwrap()
        .queue_url
        .unwrap();
    let arn = queue_arn(&sqs, &url).await;
    failing_mapping(&f, &arn).await;
    let deadline = Instant::now() + MAPPING_PATIENCE;
    let mut bodies = Vec::new();
    while bodies.is_empty() && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(500)).await;
        bodies = e2e::receive_all(&sqs, &url)
            .await
            .into_iter()
            .filter_map(|m| m.body)
            .collect();
    }
    if differs(emulator, Behaviour::OnFailureRecord) {
        assert!(
            bodies.is_empty(),
            "{emulator:?} was known to leave no record: {bodies:?}"
        );
        return;
    }
    let record: serde_json::Value = serde_json::from_str(&bodies[0]).unwrap();
    let info = &record["DDBStreamBatchInfo"];
    assert_eq!(info["streamArn"], f.stream_arn.as_str());
    assert_eq!(info["batchSize"], 1);
    assert!(info["shardId"].as_str().is_some_and(|s| s.starts_with("shardId-")));
    assert!(record.get("Records").is_none() && record["requestContext"]["condition"].is_string());
}

/// <https://docs.aws.amazon.com/lambda/latest/dg/services-dynamodb-errors.html>
/// (Amazon S3 destinations): a failed batch goes whole to the S3
/// destination, under `aws/lambda/<mapping UUID>/<shard ID>/YYYY/MM/DD/...`,
/// its `payload` holding the records.
async fn a_failed_batch_is_kept_whole_in_the_s3_destination(emulator: Emu) {
    let f = Fixture::start(emulator).await;
    let s3 = hybrid_counter_aws::s3::client(&f.sdk);
    s3.create_bucket().bucket("conf-failed-batches").send().await.unwrap();
    let uuid = failing_mapping(&f, "arn:aws:s3:::conf-failed-batches").await;
    let deadline = Instant::now() + MAPPING_PATIENCE;
    let mut keys = Vec::new();
    while keys.is_empty() && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(500)).await;
        keys = s3
            .list_objects_v2()
            .bucket("conf-failed-batches")
            .send()
            .await
            .unwrap()
            .contents()
            .iter()
            .filter_map(|o| o.key().map(str::to_owned))
            .collect();
    }
    if differs(emulator, Behaviour::S3OnFailureObject) {
        assert!(keys.is_empty(), "{emulator:?} was known to write no object: {keys:?}");
        return;
    }
    let prefix = format!("aws/lambda/{uuid}/shardId-");
    assert!(keys[0].starts_with(&prefix), "{keys:?}");
    let object = s3
        .get_object()
        .bucket("conf-failed-batches")
        .key(&keys[0])
        .send()
        .await
        .unwrap();
    let body: serde_json::Value = serde_json::from_slice(&object.body.collect().await.unwrap().into_bytes()).unwrap();
    assert_eq!(body["payload"]["Records"].as_array().map(Vec::len), Some(1));
}

/// A queue with `visibility` seconds of visibility timeout whose messages
/// move to a dead-letter queue after `max_receive_count` receives, holding
/// one message `body`; returns both URLs.
async fn queue_with_redrive(
    sqs: &aws_sdk_sqs::Client,
    visibility: u32,
    max_receive_count: u32,
    body: &str,
) -> (String, String) {
    let dlq = sqs
        .create_queue()
        .queue_name("conf-dlq2")
        .send()
        .await
        .unwrap()
        .queue_url
        .unwrap();
    let dlq_arn = queue_arn(sqs, &dlq).await;
    let source = sqs
        .create_queue()
        .queue_name("conf-dlq1")
        .attributes(
            aws_sdk_sqs::types::QueueAttributeName::VisibilityTimeout,
            visibility.to_string(),
        )
        .attributes(
            aws_sdk_sqs::types::QueueAttributeName::RedrivePolicy,
            serde_json::json!({"deadLetterTargetArn": dlq_arn, "maxReceiveCount": max_receive_count}).to_string(),
        )
        .send()
        .await
        .unwrap()
        .queue_url
        .unwrap();
    sqs.send_message()
        .queue_url(&source)
        .message_body(body)
        .send()
        .await
        .unwrap();
    (source, dlq)
}

async fn queue_arn(sqs: &aws_sdk_sqs::Client, url: &str) -> String {
    let name = aws_sdk_sqs::types::QueueAttributeName::QueueArn;
    sqs.get_queue_attributes()
        .queue_url(url)
        .attribute_names(name.clone())
        .send()
        .await
        .unwrap()
        .attributes
        .and_then(|mut a| a.remove(&name))
        .expect("the queue's ARN")
}

async fn receive_one(sqs: &aws_sdk_sqs::Client, url: &str) -> Option<aws_sdk_sqs::types::Message> {
    sqs.receive_message()
        .queue_url(url)
        .max_number_of_messages(1)
        .send()
        .await
        .unwrap()
        .messages
        .unwrap_or_default()
        .into_iter()
        .next()
}

/// <https://docs.aws.amazon.com/AWSSimpleQueueService/latest/SQSDeveloperGuide/sqs-visibility-timeout.html>:
/// a received message is hidden from other receives for the visibility
/// timeout, then comes back with the same body.
async fn a_received_message_stays_hidden_for_its_visibility_timeout(emulator: Emu) {
    assert!(!differs(emulator, Behaviour::SqsVisibility));
    let f = Fixture::start(emulator).await;
    let sqs = aws_sdk_sqs::Client::new(&f.sdk);
    let (source, _) = queue_with_redrive(&sqs, 2, 5, "m").await;
    let first = receive_one(&sqs, &source).await.expect("the message");
    assert!(receive_one(&sqs, &source).await.is_none(), "hidden while in flight");
    tokio::time::sleep(Duration::from_millis(2_500)).await;
    let again = receive_one(&sqs, &source).await.expect("visible again");
    assert_eq!((again.body, again.message_id), (first.body, first.message_id));
}

/// <https://docs.aws.amazon.com/AWSSimpleQueueService/latest/SQSDeveloperGuide/sqs-dead-letter-queues.html>:
/// after `maxReceiveCount` receives without a delete, the message moves to
/// the dead-letter queue.
async fn a_message_moves_to_the_dead_letter_queue_after_max_receive_count(emulator: Emu) {
    assert!(!differs(emulator, Behaviour::SqsRedrive));
    let f = Fixture::start(emulator).await;
    let sqs = aws_sdk_sqs::Client::new(&f.sdk);
    let (source, dlq) = queue_with_redrive(&sqs, 1, 2, "poison").await;
    for receive in 1..=2 {
        let message = receive_one(&sqs, &source).await;
        assert!(message.is_some(), "receive {receive} of 2 gets it");
        tokio::time::sleep(Duration::from_millis(1_300)).await;
    }
    assert!(receive_one(&sqs, &source).await.is_none(), "gone after maxReceiveCount");
    let moved = receive_one(&sqs, &dlq).await.expect("in the dead-letter queue");
    assert_eq!(moved.body.as_deref(), Some("poison"));
}

/// One module per behaviour, one test per emulator in it.
macro_rules! on_both_emulators {
    ($($behaviour:ident),* $(,)?) => {$(
        mod $behaviour {
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn fakecloud() {
                super::$behaviour(super::Emu::Fakecloud).await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn ministack() {
                super::$behaviour(super::Emu::Ministack).await;
            }
        }
    )*};
}

on_both_emulators!(
    conditional_write_returns_the_item_that_failed_it,
    a_cancelled_transaction_applies_none_of_its_actions,
    cancellation_reasons_come_in_action_order,
    a_repeated_client_request_token_applies_once,
    a_token_reused_for_another_payload_is_refused,
    a_transaction_racing_single_item_writes_is_all_or_nothing,
    a_consistent_query_sees_every_acknowledged_write,
    batch_get_item_answers_past_16_mb_as_unprocessed_keys,
    each_item_change_is_one_record_in_order_with_both_images,
    an_insert_has_no_old_image_and_a_delete_is_a_remove,
    the_templates_filter_patterns_pass_the_uncounted_insert_and_the_soft_delete,
    a_failed_batch_leaves_its_on_failure_record_in_sqs,
    a_failed_batch_is_kept_whole_in_the_s3_destination,
    a_received_message_stays_hidden_for_its_visibility_timeout,
    a_message_moves_to_the_dead_letter_queue_after_max_receive_count,
);

#[test]
fn every_known_difference_says_what_the_kit_does_and_is_listed_once() {
    for (i, d) in KNOWN_DIFFERENCES.iter().enumerate() {
        assert!(!d.observed.is_empty() && !d.kit.is_empty() && !d.emulators.is_empty());
        for emulator in d.emulators {
            assert!(
                !KNOWN_DIFFERENCES[..i]
                    .iter()
                    .any(|o| o.emulators.contains(emulator) && o.behaviour == d.behaviour),
                "{emulator:?} {:?} listed twice",
                d.behaviour
            );
        }
    }
}
