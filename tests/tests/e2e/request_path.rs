//! The API's request path: limits, duplicates, deletes and bad input.

use e2e::Kit;
use hybrid_counter::Error;
use serde_dynamo::Item;

use crate::{NOW, id, scope};

#[tokio::test]
async fn creates_up_to_the_limit_then_reports_limit_exceeded() {
    let kit = Kit::start(3).await;
    let s = scope("acct-1");
    for n in 0..3 {
        let created = kit
            .counter
            .create(&s, &id(&format!("w{n}")), Item::default(), NOW)
            .await
            .unwrap();
        assert!(created.best_effort_counted);
    }
    let err = kit
        .counter
        .create(&s, &id("w3"), Item::default(), NOW)
        .await
        .unwrap_err();
    assert!(matches!(err, Error::LimitExceeded { usage: 3, limit: 3 }), "{err}");
    let usage = kit.counter.usage(&s).await.unwrap();
    assert_eq!(
        (usage.best_effort, usage.eventual, usage.effective, usage.limit),
        (3, 0, 3, 3)
    );
    assert_eq!(kit.counts(&s).await.live, 3, "the refused item must not be written");
    kit.assert_invariants(&s).await;
    // Other scopes have their own budget.
    kit.counter
        .create(&scope("acct-2"), &id("w0"), Item::default(), NOW)
        .await
        .unwrap();
}

#[tokio::test]
async fn eventual_counter_alone_also_enforces_the_limit() {
    // BE lost an increment (say, a swallowed failure); once the stream has
    // counted, max(BE, EC) still refuses the create over the limit.
    let mut kit = Kit::start(2).await;
    let s = scope("acct");
    kit.counter.create(&s, &id("a"), Item::default(), NOW).await.unwrap();
    kit.counter.create(&s, &id("b"), Item::default(), NOW).await.unwrap();
    hybrid_counter::RequestStore::add_best_effort(&kit.store, &s, "best_effort", -2, NOW)
        .await
        .unwrap();
    kit.drain().await;
    let err = kit
        .counter
        .create(&s, &id("c"), Item::default(), NOW)
        .await
        .unwrap_err();
    assert!(matches!(err, Error::LimitExceeded { usage: 2, limit: 2 }), "{err}");
}

#[tokio::test]
async fn per_scope_override_replaces_the_default_limit() {
    let kit = Kit::start(1).await;
    let s = scope("big-customer");
    kit.store.set_limit(&s, Some(2), NOW).await.unwrap();
    kit.counter.create(&s, &id("a"), Item::default(), NOW).await.unwrap();
    kit.counter.create(&s, &id("b"), Item::default(), NOW).await.unwrap();
    let err = kit
        .counter
        .create(&s, &id("c"), Item::default(), NOW)
        .await
        .unwrap_err();
    assert!(matches!(err, Error::LimitExceeded { usage: 2, limit: 2 }), "{err}");
    kit.store.set_limit(&s, None, NOW).await.unwrap();
    assert_eq!(kit.counter.usage(&s).await.unwrap().limit, 1);
}

#[tokio::test]
async fn duplicate_create_is_already_exists_and_leaves_best_effort_unchanged() {
    let kit = Kit::start(10).await;
    let s = scope("acct");
    let mut payload = Item::default();
    payload.insert("color".into(), serde_dynamo::AttributeValue::S("blue".into()));
    let first = kit.counter.create(&s, &id("w"), payload.clone(), NOW).await.unwrap();
    let err = kit.counter.create(&s, &id("w"), payload, NOW).await.unwrap_err();
    assert!(matches!(err, Error::AlreadyExists), "{err}");
    assert_eq!(kit.counter.usage(&s).await.unwrap().best_effort, 1);
    // The first item, payload and incarnation included, is untouched.
    let item = kit
        .dynamodb
        .get_item()
        .table_name(&kit.config.resources_table)
        .key("scope", aws_sdk_dynamodb::types::AttributeValue::S("acct".into()))
        .key("id", aws_sdk_dynamodb::types::AttributeValue::S("w".into()))
        .consistent_read(true)
        .send()
        .await
        .unwrap()
        .item
        .unwrap();
    assert_eq!(item["color"].as_s().unwrap(), "blue");
    assert_eq!(item["incarnation"].as_s().unwrap(), &first.incarnation);
    kit.assert_invariants(&s).await;
}

#[tokio::test]
async fn delete_decrements_once_and_repeated_deletes_are_not_found() {
    let kit = Kit::start(10).await;
    let s = scope("acct");
    kit.counter.create(&s, &id("a"), Item::default(), NOW).await.unwrap();
    kit.counter.create(&s, &id("b"), Item::default(), NOW).await.unwrap();
    kit.counter.delete(&s, &id("a"), NOW).await.unwrap();
    assert_eq!(kit.counter.usage(&s).await.unwrap().best_effort, 1);
    for _ in 0..3 {
        let err = kit.counter.delete(&s, &id("a"), NOW).await.unwrap_err();
        assert!(matches!(err, Error::NotFound), "{err}");
    }
    let err = kit.counter.delete(&s, &id("never-created"), NOW).await.unwrap_err();
    assert!(matches!(err, Error::NotFound), "{err}");
    assert_eq!(
        kit.counter.usage(&s).await.unwrap().best_effort,
        1,
        "repeated deletes must not drain BE"
    );
    let counts = kit.counts(&s).await;
    assert_eq!((counts.live, counts.pending_delete), (1, 1));
    kit.assert_invariants(&s).await;
}

#[tokio::test]
async fn bad_input_is_rejected_before_anything_is_written() {
    let kit = Kit::start(10).await;
    assert!(hybrid_counter::Scope::new("").is_err());
    assert!(hybrid_counter::ResourceId::new("a\u{7}b").is_err());
    assert!(hybrid_counter::ResourceId::new("x".repeat(300)).is_err());
    let s = scope("acct");
    let mut payload = Item::default();
    payload.insert("counter_processed".into(), serde_dynamo::AttributeValue::Bool(true));
    let err = kit.counter.create(&s, &id("w"), payload, NOW).await.unwrap_err();
    assert!(
        matches!(&err, Error::InvalidInput(m) if m.contains("counter_processed")),
        "{err}"
    );
    assert_eq!(kit.counts(&s).await, Default::default());
    assert_eq!(kit.counter.usage(&s).await.unwrap().best_effort, 0);
}
