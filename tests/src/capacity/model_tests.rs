//! The model as the proxy drives it: requests in, verdicts and charges out.

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::*;

const RESOURCES: &str = "resources";
const COUNTERS: &str = "counters";

fn model(params: CapacityParams) -> CapacityModel {
    CapacityModel::new(
        params,
        &[
            TableKeys::new(RESOURCES, "scope", "id"),
            TableKeys::new(COUNTERS, "scope", "name"),
        ],
    )
}

/// 10 WU and 30 RU a second per partition; splits after two seconds of heat.
fn tight_params() -> CapacityParams {
    CapacityParams {
        split_after: Duration::from_secs(2),
        ..CapacityParams::dynamodb(0.01)
    }
}

fn tight() -> CapacityModel {
    model(tight_params())
}

/// Plenty of capacity: for unit arithmetic.
fn roomy() -> CapacityModel {
    model(CapacityParams::dynamodb(1.0))
}

fn s(v: &str) -> Value {
    json!({ "S": v })
}

fn put(scope: &str, id: &str, payload_bytes: usize) -> Vec<u8> {
    json!({ "TableName": RESOURCES, "Item": { "scope": s(scope), "id": s(id), "payload": s(&"x".repeat(payload_bytes)) } })
        .to_string()
        .into_bytes()
}

fn key(table: &str, scope: &str, sort: &str) -> Value {
    let sort_name = if table == RESOURCES { "id" } else { "name" };
    json!({ "scope": s(scope), sort_name: s(sort) })
}

fn flip(scope: &str, ids: &[&str]) -> Vec<u8> {
    let mut items = vec![
        json!({ "Update": { "TableName": COUNTERS, "Key": key(COUNTERS, scope, "eventual"),
        "ExpressionAttributeValues": { ":d": { "N": "1" } } } }),
    ];
    items.extend(ids.iter().map(|id| {
        json!({ "Update": { "TableName": RESOURCES, "Key": key(RESOURCES, scope, id),
            "ExpressionAttributeValues": { ":t": { "BOOL": true } } } })
    }));
    json!({ "TransactItems": items }).to_string().into_bytes()
}

fn admitted(model: &mut CapacityModel, operation: &str, body: &[u8], now: Instant) -> Ticket {
    match model.admit(operation, body, now) {
        Verdict::Forward(Some(ticket)) => ticket,
        other => panic!("{operation} not admitted: {other:?}"),
    }
}

fn refused(model: &mut CapacityModel, operation: &str, body: &[u8], now: Instant) -> Answer {
    match model.admit(operation, body, now) {
        Verdict::Refuse(answer) => answer,
        other => panic!("{operation} not refused: {other:?}"),
    }
}

/// Admits and answers at once with `answer`.
fn done(model: &mut CapacityModel, operation: &str, body: &[u8], answer: &Value, now: Instant) {
    let ticket = admitted(model, operation, body, now);
    model.finish(ticket, 200, answer.to_string().as_bytes(), now);
}

fn units(model: &CapacityModel, table: &str) -> (f64, f64) {
    let usage = model.usage().table(table);
    (usage.write_units, usage.read_units)
}

fn codes(answer: &Answer) -> Vec<String> {
    answer.body["CancellationReasons"]
        .as_array()
        .map(|a| a.iter().map(|r| r["Code"].as_str().unwrap().to_owned()).collect())
        .unwrap_or_default()
}

#[test]
fn writes_cost_one_unit_per_kilobyte_and_two_in_a_transaction() {
    let mut m = roomy();
    let now = Instant::now();
    done(&mut m, "PutItem", &put("a", "small", 100), &json!({}), now);
    assert_eq!(units(&m, RESOURCES).0, 1.0, "0.1 KB: 1 WU");
    done(&mut m, "PutItem", &put("a", "big", 1500), &json!({}), now);
    assert_eq!(units(&m, RESOURCES).0, 3.0, "1.5 KB rounds up to 2 WU");
    done(&mut m, "TransactWriteItems", &flip("a", &["big"]), &json!({}), now);
    assert_eq!(units(&m, RESOURCES).0, 3.0 + 4.0, "2 x 2 KB transactional");
    assert_eq!(
        units(&m, COUNTERS).0,
        2.0,
        "a small counter item: 2 WU in a transaction"
    );
    let delete = json!({ "TableName": RESOURCES, "Key": key(RESOURCES, "a", "big") });
    done(&mut m, "DeleteItem", delete.to_string().as_bytes(), &json!({}), now);
    assert_eq!(units(&m, RESOURCES).0, 9.0, "deleting costs the item's size");
    done(&mut m, "PutItem", &put("a", "small", 3000), &json!({}), now);
    assert_eq!(units(&m, RESOURCES).0, 12.0, "3 KB over 0.1 KB: 3 WU");
    // Charged at admission, whatever the condition does.
    let again = put("a", "small", 10);
    let ticket = admitted(&mut m, "PutItem", &again, now);
    m.finish(ticket, 400, br#"{"__type":"x#ConditionalCheckFailedException"}"#, now);
    assert_eq!(units(&m, RESOURCES).0, 15.0);
}

#[test]
fn reads_cost_by_four_kilobytes_consistency_and_a_query_by_its_total() {
    let mut m = roomy();
    let now = Instant::now();
    let item = |id: &str, bytes: usize| json!({ "scope": s("a"), "id": s(id), "p": s(&"y".repeat(bytes)) });
    let get = |consistent: bool| {
        json!({ "TableName": RESOURCES, "Key": key(RESOURCES, "a", "i"), "ConsistentRead": consistent }).to_string()
    };
    let answer = json!({ "Item": item("i", 5000) });
    done(&mut m, "GetItem", get(true).as_bytes(), &answer, now);
    assert_eq!(units(&m, RESOURCES).1, 2.0, "5 KB consistent: 2 RU");
    done(&mut m, "GetItem", get(false).as_bytes(), &answer, now);
    assert_eq!(units(&m, RESOURCES).1, 3.0, "eventually consistent: half");
    done(&mut m, "GetItem", get(true).as_bytes(), &json!({}), now);
    assert_eq!(units(&m, RESOURCES).1, 4.0, "an item not found still costs a unit");
    let query = json!({ "TableName": RESOURCES, "KeyConditionExpression": "#s = :s",
        "ExpressionAttributeNames": { "#s": "scope" }, "ExpressionAttributeValues": { ":s": s("a") },
        "ConsistentRead": true });
    let items: Vec<Value> = (0..10).map(|n| item(&format!("q{n}"), 1000)).collect();
    done(
        &mut m,
        "Query",
        query.to_string().as_bytes(),
        &json!({ "Items": items }),
        now,
    );
    assert!((units(&m, RESOURCES).1 - 7.0).abs() < 1e-9, "10 KB: 3 RU, not 10");
    let projected = json!({ "TableName": RESOURCES, "Key": key(RESOURCES, "a", "i"), "ConsistentRead": true,
        "ProjectionExpression": "id" });
    done(
        &mut m,
        "GetItem",
        projected.to_string().as_bytes(),
        &json!({ "Item": { "id": s("i") } }),
        now,
    );
    assert!(
        (units(&m, RESOURCES).1 - 9.0).abs() < 1e-9,
        "a projection is charged the whole item"
    );
}

#[test]
fn a_throttled_request_costs_nothing_and_names_its_limit() {
    let mut m = tight();
    let now = Instant::now();
    for n in 0..10 {
        done(&mut m, "PutItem", &put("a", &format!("i{n}"), 10), &json!({}), now);
    }
    let answer = refused(&mut m, "PutItem", &put("a", "one-too-many", 10), now);
    assert_eq!(answer.code, "ThrottlingException");
    assert_eq!(
        answer.refusal,
        Refusal::Throttle {
            table: RESOURCES.into(),
            access: Access::Write,
            limit: Limit::KeyRange
        }
    );
    let usage = m.usage().table(RESOURCES);
    assert_eq!((usage.write_units, usage.throttles.key_range.writes), (10.0, 1));
    // The next second serves ten more, and no more (nothing kept unused).
    let later = now + Duration::from_secs(30);
    let passed = (0..20)
        .filter(|n| {
            matches!(
                m.admit("PutItem", &put("a", &format!("l{n}"), 10), later),
                Verdict::Forward(_)
            )
        })
        .count();
    assert_eq!(passed, 10, "no burst after an idle half-minute");
}

#[test]
fn a_transaction_is_admitted_as_a_whole_against_each_partition() {
    // Old rule: items checked one by one, so 99 items of 2 WU passed a
    // partition with 2 WU left. Now the partition must take all 198.
    let mut m = model(CapacityParams::dynamodb(0.1));
    let now = Instant::now();
    for n in 0..98 {
        done(&mut m, "PutItem", &put("hot", &format!("p{n}"), 10), &json!({}), now);
    }
    let ids: Vec<String> = (0..99).map(|n| format!("p{n}")).collect();
    let ids: Vec<&str> = ids.iter().map(String::as_str).collect();
    let answer = refused(&mut m, "TransactWriteItems", &flip("hot", &ids), now);
    assert_eq!(answer.code, "TransactionCanceledException");
    let codes = codes(&answer);
    assert_eq!(codes.len(), 100, "one reason per action");
    assert_eq!(codes[0], "None", "the counters table had room");
    assert!(codes[1..].iter().all(|c| c == "ThrottlingError"), "{codes:?}");
    assert_eq!(
        m.usage().table(RESOURCES).write_units,
        98.0,
        "a refused transaction costs nothing"
    );
    // A whole window later it passes (into an unused window: 198 > 100).
    done(
        &mut m,
        "TransactWriteItems",
        &flip("hot", &ids),
        &json!({}),
        now + Duration::from_secs(2),
    );
}

#[test]
fn a_transaction_in_flight_conflicts_with_writes_and_transactions_on_its_items() {
    let mut m = roomy();
    let now = Instant::now();
    let first = admitted(&mut m, "TransactWriteItems", &flip("a", &["x"]), now);
    assert!(
        first
            .answer_after()
            .is_some_and(|at| at >= now + Duration::from_millis(10))
    );
    // Another lane's batch on the same counter item: cancelled, the
    // conflict named on its counter action.
    let second = refused(&mut m, "TransactWriteItems", &flip("a", &["y"]), now);
    assert_eq!(codes(&second), ["TransactionConflict", "None"]);
    // The request path's soft delete of the item being flipped.
    let soft_delete = json!({ "TableName": RESOURCES, "Key": key(RESOURCES, "a", "x"),
        "ExpressionAttributeValues": { ":t": { "BOOL": true } } });
    let answer = refused(&mut m, "UpdateItem", soft_delete.to_string().as_bytes(), now);
    assert_eq!(answer.code, "TransactionConflictException");
    // A plain read of it passes; another item passes.
    let get = json!({ "TableName": RESOURCES, "Key": key(RESOURCES, "a", "x") });
    admitted(&mut m, "GetItem", get.to_string().as_bytes(), now);
    done(&mut m, "PutItem", &put("a", "z", 10), &json!({}), now);
    let usage = m.usage();
    let conflicts = usage.table(COUNTERS).conflicts.transactions + usage.table(RESOURCES).conflicts.writes;
    assert_eq!(conflicts, 2);
    // The cancelled transaction paid nothing.
    assert_eq!(units(&m, COUNTERS).0, 2.0);
    m.finish(first, 200, b"{}", now);
    done(
        &mut m,
        "UpdateItem",
        soft_delete.to_string().as_bytes(),
        &json!({}),
        now,
    );
    done(&mut m, "TransactWriteItems", &flip("a", &["y"]), &json!({}), now);
}

#[test]
fn a_client_request_token_in_flight_is_a_transaction_in_progress() {
    let mut m = roomy();
    let now = Instant::now();
    let with_token = |id: &str| {
        let mut body: Value = serde_json::from_slice(&flip("a", &[id])).unwrap();
        body["ClientRequestToken"] = json!("tok-1");
        body.to_string().into_bytes()
    };
    let first = admitted(&mut m, "TransactWriteItems", &with_token("x"), now);
    assert_eq!(
        refused(&mut m, "TransactWriteItems", &with_token("x"), now).code,
        "TransactionInProgressException"
    );
    m.finish(first, 200, b"{}", now);
    admitted(&mut m, "TransactWriteItems", &with_token("x"), now);
}

#[test]
fn a_transaction_cancelled_by_its_condition_is_charged_nothing() {
    let mut m = roomy();
    let now = Instant::now();
    let ticket = admitted(&mut m, "TransactWriteItems", &flip("a", &["x"]), now);
    assert_eq!(units(&m, RESOURCES).0, 2.0);
    let cancelled = json!({ "__type": "com.amazonaws.dynamodb.v20120810#TransactionCanceledException",
        "CancellationReasons": [{ "Code": "None" }, { "Code": "ConditionalCheckFailed" }] });
    m.finish(ticket, 400, cancelled.to_string().as_bytes(), now);
    assert_eq!((units(&m, RESOURCES).0, units(&m, COUNTERS).0), (0.0, 0.0));
}

#[test]
fn partitions_are_shared_by_hash_and_tables_are_apart() {
    let mut m = tight();
    let now = Instant::now();
    for n in 0..10 {
        done(&mut m, "PutItem", &put("hot", &format!("i{n}"), 10), &json!({}), now);
    }
    // A scope on the hot scope's partition is throttled with it; one on
    // another partition is not.
    let (mut neighbour, mut other) = (None, None);
    for n in 0..64 {
        let scope = format!("s{n}");
        if m.partition_count(RESOURCES, &scope) == 1 {
            let same = m.tables[RESOURCES]
                .clone()
                .slots(&scope, Some("x"), &tight_params(), now)
                == m.tables[RESOURCES]
                    .clone()
                    .slots("hot", Some("x"), &tight_params(), now);
            if same {
                neighbour.get_or_insert(scope)
            } else {
                other.get_or_insert(scope)
            };
        }
    }
    let (neighbour, other) = (neighbour.expect("a neighbour"), other.expect("another partition"));
    assert!(matches!(
        m.admit("PutItem", &put(&neighbour, "x", 10), now),
        Verdict::Refuse(_)
    ));
    done(&mut m, "PutItem", &put(&other, "x", 10), &json!({}), now);
    let counter = json!({ "TableName": COUNTERS, "Key": key(COUNTERS, "hot", "best_effort"),
        "ExpressionAttributeValues": { ":d": { "N": "1" } } });
    done(&mut m, "UpdateItem", counter.to_string().as_bytes(), &json!({}), now);
    // A table the model does not know is never throttled.
    let unknown = json!({ "TableName": "other", "Item": { "scope": s("hot"), "id": s("x") } });
    assert_eq!(
        m.admit("PutItem", unknown.to_string().as_bytes(), now),
        Verdict::Forward(None)
    );
}

/// Offers 20 writes/s of new items for `seconds` to a partition of 10 WU/s
/// that splits after 2 s of heat; ids from `id`.
fn heat(params: CapacityParams, seconds: u64, mut id: impl FnMut(u64) -> String) -> CapacityModel {
    let mut m = model(params);
    let start = Instant::now();
    for n in 0..seconds * 20 {
        let _ = m.admit(
            "PutItem",
            &put("hot", &id(n), 10),
            start + Duration::from_millis(n * 50),
        );
    }
    m
}

#[test]
fn split_for_heat_waits_for_minutes_of_heat_by_default() {
    let mut rng = fastrand::Rng::with_seed(7);
    let m = heat(CapacityParams::dynamodb(0.01), 60, |_| format!("{:016x}", rng.u64(..)));
    assert_eq!(m.partition_count(RESOURCES, "hot"), 1, "a minute of heat is not enough");
    assert_eq!(m.usage().table(RESOURCES).splits, 0);
}

#[test]
fn a_partition_hot_with_random_keys_splits_once_per_heat_and_copies_no_budget() {
    let mut rng = fastrand::Rng::with_seed(7);
    let m = heat(tight_params(), 5, |_| format!("{:016x}", rng.u64(..)));
    let usage = m.usage().table(RESOURCES);
    // Hot from the first second: split at about 3 s; each half must be hot
    // 2 s more before it splits again, so at most one more by 5 s.
    assert!((1..=3).contains(&usage.splits), "{usage:?}");
    assert!(m.partition_count(RESOURCES, "hot") >= 2);
    // Of 100 writes offered at 20/s, about 10 a second pass before the
    // split and 20 after: never the 2x a copied budget would give at once.
    assert!(usage.write_units <= 80.0, "{usage:?}");

    // In the second of the first split the new half serves nothing: that
    // second passes at most the 10 the old partition had, where a copied
    // budget would pass the offered 20.
    let mut rng = fastrand::Rng::with_seed(7);
    let mut m = model(tight_params());
    let start = Instant::now();
    let mut per_second = [0u32; 5];
    let mut split_in = None;
    for n in 0..100u64 {
        let body = put("hot", &format!("{:016x}", rng.u64(..)), 10);
        if matches!(
            m.admit("PutItem", &body, start + Duration::from_millis(n * 50)),
            Verdict::Forward(_)
        ) {
            per_second[(n / 20) as usize] += 1;
        }
        if split_in.is_none() && m.usage().table(RESOURCES).splits > 0 {
            split_in = Some((n / 20) as usize);
        }
    }
    let split_in = split_in.expect("a split");
    assert!(per_second[split_in] <= 10, "{per_second:?}, split in second {split_in}");
}

#[test]
fn a_partition_hot_with_sequential_keys_or_one_item_never_splits() {
    let m = heat(tight_params(), 6, |n| format!("item-{n:06}"));
    let usage = m.usage().table(RESOURCES);
    assert_eq!((m.partition_count(RESOURCES, "hot"), usage.splits), (1, 0));
    assert!(usage.splits_refused_sequential >= 1, "considered: {usage:?}");
    let m = heat(tight_params(), 6, |_| "the-one".into());
    let usage = m.usage().table(RESOURCES);
    assert_eq!(
        (usage.splits, usage.splits_refused_one_item > 0),
        (0, true),
        "{usage:?}"
    );
}

#[test]
fn isolated_items_each_have_their_own_rate() {
    // 20 writes/s per item, counted per tenth of a second: two at once.
    let mut m = model(CapacityParams::per_item(20.0));
    let update = |table: &str, name: &str| {
        json!({ "TableName": table, "Key": { "scope": s("s"), "name": s(name) },
                "ExpressionAttributeValues": { ":d": { "N": "1" } } })
        .to_string()
        .into_bytes()
    };
    let start = Instant::now();
    let hot = update(COUNTERS, "best_effort");
    let passed = |m: &mut CapacityModel, body: &[u8], at: Instant| {
        matches!(m.admit("UpdateItem", body, at), Verdict::Forward(_))
    };
    let outcomes: Vec<bool> = (0..4).map(|_| passed(&mut m, &hot, start)).collect();
    assert_eq!(outcomes, [true, true, false, false]);
    assert!(
        passed(&mut m, &update(COUNTERS, "best_effort#1"), start),
        "another item"
    );
    assert!(
        passed(&mut m, &hot, start + Duration::from_millis(100)),
        "the next tenth"
    );
}

/// The real SDK, through the proxy, gets each modelled answer in the shape
/// it parses, and the kit classifies it as something to retry (the
/// upstream is never reached: the proxy answers before forwarding).
#[test]
fn the_sdk_and_the_kit_read_each_modelled_answer() {
    use aws_sdk_dynamodb::operation::put_item::PutItemError;
    use aws_sdk_dynamodb::types::AttributeValue;

    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        for mode in [CapacityMode::Provisioned, CapacityMode::OnDemand] {
            let mut m = model(CapacityParams { mode, ..tight_params() });
            let now = Instant::now();
            for n in 0..10 {
                done(&mut m, "PutItem", &put("hot", &format!("i{n}"), 10), &json!({}), now);
            }
            // A transaction in flight on another scope's counter (never answered).
            let held = admitted(&mut m, "TransactWriteItems", &flip("busy", &["x"]), now);
            let proxy = crate::faults::FaultProxy::start("http://127.0.0.1:9", crate::faults::FaultPlan::new(0));
            proxy.limit_capacity(Some(m));
            let config = aws_sdk_dynamodb::config::Builder::from(&proxy.sdk_config().await)
                .retry_config(aws_config::retry::RetryConfig::disabled())
                .build();
            let client = aws_sdk_dynamodb::Client::from_conf(config);
            let error = client
                .put_item()
                .table_name(RESOURCES)
                .item("scope", AttributeValue::S("hot".into()))
                .item("id", AttributeValue::S("new".into()))
                .send()
                .await
                .expect_err("throttled")
                .into_service_error();
            let reasons = match (&error, mode) {
                (PutItemError::ProvisionedThroughputExceededException(e), CapacityMode::Provisioned) => {
                    e.throttling_reasons().to_vec()
                }
                (PutItemError::ThrottlingException(e), CapacityMode::OnDemand) => e.throttling_reasons().to_vec(),
                _ => panic!("{mode:?}: {error:?}"),
            };
            assert_eq!(reasons[0].reason(), Some("TableWriteKeyRangeThroughputExceeded"));
            assert_eq!(
                reasons[0].resource(),
                Some("arn:aws:dynamodb:us-east-1:000000000000:table/resources")
            );
            // A plain write on the held counter item: the same update as
            // the transaction's below.
            let update = aws_sdk_dynamodb::types::Update::builder()
                .table_name(COUNTERS)
                .key("scope", AttributeValue::S("busy".into()))
                .key("name", AttributeValue::S("eventual".into()))
                .update_expression("ADD #c :d")
                .expression_attribute_names("#c", "count")
                .expression_attribute_values(":d", AttributeValue::N("1".into()))
                .build()
                .unwrap();
            let error = client
                .update_item()
                .table_name(update.table_name())
                .set_key(Some(update.key().clone()))
                .update_expression(update.update_expression())
                .set_expression_attribute_names(update.expression_attribute_names().cloned())
                .set_expression_attribute_values(update.expression_attribute_values().cloned())
                .send()
                .await
                .expect_err("conflict");
            let classified = hybrid_counter_aws::dynamo::classify(error);
            assert!(classified.is_transient(), "the kit retries it: {classified:?}");
            // A transaction on the held counter item.
            let error = client
                .transact_write_items()
                .transact_items(
                    aws_sdk_dynamodb::types::TransactWriteItem::builder()
                        .update(update)
                        .build(),
                )
                .send()
                .await
                .expect_err("cancelled");
            let reasons = hybrid_counter_aws::dynamo::cancel_reasons(&error).expect("a cancellation");
            assert_eq!(reasons, [hybrid_counter::error::CancelReason::TransactionConflict]);
            assert!(reasons[0].is_transient(), "the stream consumer retries it");
            assert_eq!(proxy.stats().of_kind(crate::faults::FaultKind::Throttle), 1);
            assert_eq!(proxy.stats().of_kind(crate::faults::FaultKind::TransactionConflict), 2);
            drop(held);
        }
    });
}

/// Steady writes of 1 WU every 20 ms (50 WU/s, half a partition's 100 at
/// scale 0.1) to the hot scope from `from` to `to` ms; how many passed.
fn steady(m: &mut CapacityModel, start: Instant, from: u64, to: u64) -> (u64, u64) {
    let (mut passed, mut offered) = (0, 0);
    for at in (from..to).step_by(20) {
        let now = start + Duration::from_millis(at);
        offered += 1;
        if let Verdict::Forward(Some(ticket)) = m.admit("PutItem", &put("hot", &format!("w{at}"), 10), now) {
            m.finish(ticket, 200, b"{}", now);
            passed += 1;
        }
    }
    (passed, offered)
}

#[test]
fn dilated_time_admits_a_transaction_larger_than_a_scaled_second_among_steady_writes() {
    // A 198-WU transaction (98 items and a counter) at scale 0.1 among
    // steady writes at half a partition's scaled rate: on DynamoDB, 198 of
    // a partition's 1,000 WU in a second beside 500 of steady writes. A
    // window of 1 s (100 WU) never has room for it: it would pass only
    // into a window nothing used, and then carry debt that refuses the
    // steady writes; a window of 10 s (1,000 WU) takes both.
    let ids: Vec<String> = (0..98).map(|n| format!("t{n}")).collect();
    let ids: Vec<&str> = ids.iter().map(String::as_str).collect();
    let body = flip("hot", &ids);
    let mut m = model(CapacityParams::dynamodb(0.1).dilated());
    let start = Instant::now();
    assert_eq!(steady(&mut m, start, 0, 2_510), (126, 126));
    let at = start + Duration::from_millis(2_515);
    let ticket = admitted(&mut m, "TransactWriteItems", &body, at);
    assert_eq!(units(&m, RESOURCES).0, 126.0 + 196.0);
    m.finish(ticket, 200, b"{}", at + m.params().transaction_hold());
    let (passed, offered) = steady(&mut m, start, 2_520, 12_000);
    assert_eq!(passed, offered, "the steady load still served after it");

    let mut undilated = model(CapacityParams::dynamodb(0.1));
    steady(&mut undilated, start, 0, 2_510);
    assert!(matches!(
        undilated.admit("TransactWriteItems", &body, at),
        Verdict::Refuse(_)
    ));
}
