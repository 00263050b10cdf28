//! Cost accounting against the emulator: the store's meter counts the
//! requests the kit sends and the capacity the emulator reports
//! (`ReturnConsumedCapacity=TOTAL`), which is what `make bench` and the
//! handlers' log lines quote.

use e2e::Kit;
use hybrid_counter::stream::{Mode, Processor};
use serde_dynamo::Item;

use crate::{NOW, id, scope};

/// Creates `w00`, `w01`, ... in `s` through the request path.
async fn create_many(kit: &Kit, s: &hybrid_counter::Scope, n: usize) {
    for n in 0..n {
        kit.counter
            .create(s, &id(&format!("w{n:02}")), Item::default(), NOW)
            .await
            .unwrap();
    }
}

#[tokio::test]
async fn a_create_is_three_round_trips_and_one_plain_write_unit_each_for_item_and_counter() {
    let kit = Kit::start(1000).await;
    let s = scope("acct");
    let before = kit.store.meter().snapshot();
    create_many(&kit, &s, 10).await;
    let cost = kit.store.meter().snapshot().since(&before);
    assert_eq!(cost.requests.total(), 30, "{cost:?}");
    assert_eq!(
        (cost.requests.query, cost.requests.put_item, cost.requests.update_item),
        (10, 10, 10)
    );
    assert_eq!((cost.plain_resource_writes, cost.plain_counter_writes), (10, 10));
    assert_eq!(cost.transactions_committed, 0);
    assert_eq!(cost.write_units, 20.0, "one unit per small plain write: {cost:?}");
    assert!(
        cost.read_units > 0.0,
        "the consistent Query reports read capacity: {cost:?}"
    );
}

#[tokio::test]
async fn a_batch_of_99_creates_is_one_transaction_of_two_units_per_item_plus_the_counter() {
    let mut kit = Kit::start(1000).await;
    let s = scope("hot");
    create_many(&kit, &s, 99).await;
    let before = kit.store.meter().snapshot();
    // Delivers the 99 inserts, then the flag flips they caused (ignored).
    kit.drain().await;
    let cost = kit.store.meter().snapshot().since(&before);
    kit.assert_converged(&s).await;
    assert_eq!(cost.transactions_committed, 1, "{cost:?}");
    assert_eq!(cost.transactional_resource_writes, 99);
    assert_eq!(
        cost.counter_item_writes(),
        1,
        "the hot counter is written once per batch"
    );
    // Transactional writes cost twice: (99 flags + 1 counter) x 2.
    assert_eq!(cost.write_units, 200.0, "{cost:?}");
    assert!(cost.write_units / 99.0 <= 2.1);
}

#[tokio::test]
async fn the_per_record_design_costs_four_write_units_and_one_counter_write_per_create() {
    let mut kit = Kit::start(1000).await;
    kit.processor = Processor::new(kit.store.clone()).with_mode(Mode::PerRecord);
    let s = scope("acct");
    create_many(&kit, &s, 10).await;
    let before = kit.store.meter().snapshot();
    kit.drain().await;
    let cost = kit.store.meter().snapshot().since(&before);
    kit.assert_converged(&s).await;
    assert_eq!(cost.transactions_committed, 10, "{cost:?}");
    assert_eq!(cost.counter_item_writes(), 10);
    assert_eq!(cost.write_units, 40.0, "{cost:?}");
}

#[tokio::test]
async fn a_cancelled_transaction_is_counted_by_cause_and_costs_no_reported_units() {
    let mut kit = Kit::start(1000).await;
    let s = scope("acct");
    kit.counter.create(&s, &id("a"), Item::default(), NOW).await.unwrap();
    let records = kit.new_records().await;
    assert!(kit.deliver(&records).await.is_empty());
    let before = kit.store.meter().snapshot();
    // A duplicate delivery: the item is already counted, its condition fails.
    assert!(kit.deliver(&records).await.is_empty());
    let cost = kit.store.meter().snapshot().since(&before);
    kit.assert_converged(&s).await;
    assert_eq!(cost.transactions_cancelled.condition, 1, "{cost:?}");
    assert_eq!(cost.transactions_committed, 0);
    assert_eq!(cost.write_units, 0.0);
}

#[tokio::test]
async fn a_batch_of_deletes_reads_its_items_with_one_batch_get_and_writes_one_transaction() {
    let mut kit = Kit::start(1000).await;
    let s = scope("acct");
    create_many(&kit, &s, 20).await;
    kit.drain().await;
    for n in 0..20 {
        kit.counter.delete(&s, &id(&format!("w{n:02}")), NOW).await.unwrap();
    }
    let before = kit.store.meter().snapshot();
    kit.drain().await;
    let cost = kit.store.meter().snapshot().since(&before);
    kit.assert_converged(&s).await;
    assert_eq!(kit.counts(&s).await.live, 0);
    assert_eq!(
        (cost.requests.batch_get_item, cost.requests.get_item),
        (1, 0),
        "{cost:?}"
    );
    assert_eq!(cost.transactions_committed, 1, "{cost:?}");
    assert_eq!(cost.transactional_resource_writes, 20);
    assert!(cost.read_units > 0.0, "BatchGetItem reports read capacity: {cost:?}");
}

/// Two levels of scope keys (issue 38 item 5): a create costs what it costs
/// on one key (one consistent Query of its counters key, a put on its
/// resources key, the BE write: three round trips, 2 WU), and the stream
/// pays one counter write per counters key a batch touches instead of one
/// per batch.
#[tokio::test]
async fn over_two_levels_a_create_costs_what_it_costs_on_one_key_and_a_batch_one_counter_write_per_counters_key() {
    let mut kit = Kit::start(1000).await;
    let layout = hybrid_counter::scope_keys::ScopeKeys::new(8)
        .and_then(|k| k.with_spread(8))
        .unwrap();
    let mut costs = Vec::new();
    for (name, keys) in [("one", Default::default()), ("spread", layout)] {
        kit.config.scope_keys = keys;
        kit.counter = hybrid_counter::Counter::configured(kit.store.clone(), 1000, &kit.config);
        kit.processor = kit.config.processor(kit.store.clone());
        let s = scope(name);
        let before = kit.store.meter().snapshot();
        create_many(&kit, &s, 64).await;
        let request = kit.store.meter().snapshot().since(&before);
        let before = kit.store.meter().snapshot();
        kit.drain().await;
        let stream = kit.store.meter().snapshot().since(&before);
        let usage = kit.counter.usage(&s).await.unwrap();
        assert_eq!((usage.best_effort, usage.eventual), (64, 64), "{name}");
        eprintln!(
            "{name}: request path {} round trips, {} WU, {} RU; stream {} transactions, {} counter writes, {} WU",
            request.requests.total(),
            request.write_units,
            request.read_units,
            stream.transactions_committed,
            stream.counter_item_writes(),
            stream.write_units
        );
        costs.push((request, stream));
    }
    let ((one, one_stream), (spread, spread_stream)) = (&costs[0], &costs[1]);
    assert_eq!(
        spread.requests.total(),
        one.requests.total(),
        "3 round trips per create either way"
    );
    assert_eq!(spread.write_units, one.write_units);
    assert_eq!(spread.read_units, one.read_units, "one key's Query, 1 RU, either way");
    assert_eq!(one_stream.counter_item_writes(), 1, "one batch, one counters key");
    assert_eq!(
        spread_stream.counter_item_writes(),
        8,
        "one counter write per counters key the batch touched"
    );
    assert_eq!(
        spread_stream.write_units - one_stream.write_units,
        14.0,
        "7 more transactional counter writes"
    );
}
