//! Gapless sequence numbers on the emulator (issue 15): 16 concurrent
//! claimers through the fault proxy, whose claims (`TransactWriteItems`)
//! are applied then answered 500, or answered 500 before they are applied,
//! and whose reads fail now and then. The numbers handed out are exactly
//! 1..N, each number's item names the caller that holds it, and the
//! counters' readers (usage, the audit and its repair, the removal of a
//! scope's counters) neither see nor touch the sequence's items. Through
//! the API (issue 26), numbered creates that meet cancelled claims answer
//! a fixed code and message, never DynamoDB's words, and every answer
//! holds against the items after the drain (the history check).

use std::sync::Arc;
use std::time::Instant;

use e2e::Kit;
use e2e::faults::{Conflicting, Fault, FaultKind, FaultPlan, FaultProxy, Operation};
use e2e::history::{Call, History, Outcome, Refusal};
use hybrid_counter::audit::RepairMode;
use hybrid_counter::retry::Backoff;
use hybrid_counter::sequence::{DEFAULT_BACKOFF, Sequence};
use hybrid_counter::{AuditStore, RequestStore, SequenceStore, keys};
use hybrid_counter_aws::DynamoStore;
use serde_dynamo::Item;

use crate::{NOW, id, scope};

const WRITERS: u64 = 16;
const CLAIMS_PER_WRITER: u64 = 4;

fn transact() -> Operation {
    Operation::dynamodb("TransactWriteItems")
}

#[tokio::test]
async fn concurrent_claimers_through_ambiguous_faults_get_exactly_one_to_n_and_counters_ignore_the_sequence() {
    let started = Instant::now();
    let mut kit = Kit::start(100).await;
    let s = scope("numbered");
    // Counters in the same scope, counted by the stream, before the claims.
    for i in ["a", "b", "c"] {
        kit.counter.create(&s, &id(i), Item::default(), NOW).await.unwrap();
    }
    kit.drain().await;

    let plan = FaultPlan::from_env("sequence");
    let seed = plan.seed();
    let plan = plan
        .next(transact(), Fault::ApplyThenFail, 2)
        .next(transact(), Fault::FailBefore, 1)
        .random(transact(), Fault::ApplyThenFail, 0.15)
        .random(transact(), Fault::FailBefore, 0.1)
        .random(Operation::dynamodb("GetItem"), Fault::FailBefore, 0.05);
    let proxy = FaultProxy::start(&kit.emulator.endpoint, plan);
    let client = aws_sdk_dynamodb::Client::new(&proxy.sdk_config().await);
    let sequence = Arc::new(
        Sequence::new(DynamoStore::new(client, &kit.config))
            .with_seed(seed)
            .with_backoff(Backoff {
                max_attempts: 100,
                ..DEFAULT_BACKOFF
            }),
    );
    let mut tasks = tokio::task::JoinSet::new();
    for writer in 0..WRITERS {
        let (sequence, s) = (sequence.clone(), s.clone());
        tasks.spawn(async move {
            let mut got = Vec::new();
            for k in 0..CLAIMS_PER_WRITER {
                let owner = format!("w{writer}-{k}");
                let claimed = sequence
                    .next(&s, Some(&owner), NOW)
                    .await
                    .unwrap_or_else(|e| panic!("seed {seed}: {owner}: {e}"));
                got.push((claimed.number, owner));
            }
            got
        });
    }
    let mut got: Vec<(u64, String)> = tasks.join_all().await.into_iter().flatten().collect();
    got.sort();
    let stats = proxy.stats();
    eprintln!(
        "sequence: seed {seed}, {:.1} s, {} faults injected\n{stats}",
        started.elapsed().as_secs_f64(),
        stats.total_injected()
    );
    stats.assert_injected(&[FaultKind::ApplyThenFail, FaultKind::FailBefore]);

    let n = WRITERS * CLAIMS_PER_WRITER;
    let numbers: Vec<u64> = got.iter().map(|(number, _)| *number).collect();
    assert_eq!(
        numbers,
        (1..=n).collect::<Vec<_>>(),
        "seed {seed}: 1..N, no gap, no duplicate"
    );
    // Read without the proxy: the table agrees with what the callers hold.
    let direct = &kit.store;
    assert_eq!(direct.last_sequence(&s).await.unwrap(), n, "seed {seed}");
    for (number, owner) in &got {
        let entry = direct
            .sequence_entry(&s, *number)
            .await
            .unwrap()
            .expect("the numbered item");
        assert_eq!(
            entry.owner.as_deref(),
            Some(owner.as_str()),
            "seed {seed}: number {number}"
        );
    }
    assert_eq!(direct.sequence_entry(&s, n + 1).await.unwrap(), None);

    // The counters' readers see the counters only.
    let names: Vec<String> = direct
        .counter_items(&s)
        .await
        .unwrap()
        .into_iter()
        .map(|i| i.name)
        .collect();
    assert!(names.iter().all(|name| !keys::is_sequence_name(name)), "{names:?}");
    assert_eq!(direct.read_counters(&s).await.unwrap().eventual, 3);
    let audit = e2e::audit(direct, &s, RepairMode::Apply, 5, e2e::after_grace())
        .await
        .unwrap();
    assert!(!audit.has_defect() && audit.repair.is_none(), "{audit:?}");
    assert_eq!((audit.counts.live, audit.eventual), (3, 3), "{audit:?}");
    let only_numbers = scope("only-numbers");
    Sequence::new(direct.clone())
        .next(&only_numbers, None, NOW)
        .await
        .unwrap();
    let scanned = direct.scan_counters().await.unwrap();
    assert_eq!(scanned[s.as_str()].eventual, 3);
    assert!(
        !scanned.contains_key(only_numbers.as_str()),
        "a scope with numbers and no counters is no counted scope: {scanned:?}"
    );
    let removed = direct.remove_scope_counters(&s).await.unwrap();
    assert_eq!(removed, names.len(), "only the counters' items are removed");
    assert_eq!(direct.last_sequence(&s).await.unwrap(), n, "the sequence survives");
    assert_eq!(sequence.next(&s, None, NOW).await.unwrap().number, n + 1, "and goes on");
}

/// Words of DynamoDB's own errors (codes, SDK wrappers, the cancellation
/// reasons' rendering) that an API answer must never carry (issue 26, N2).
const STORE_WORDS: [&str; 12] = [
    "Transaction",
    "Conflict",
    "ConditionalCheck",
    "Throttl",
    "ProvisionedThroughput",
    "cancelled",
    "canceled",
    "DynamoDB",
    "dynamodb",
    "service error",
    "dispatch failure",
    "[",
];

/// One `POST /scopes/<scope>/items/<id>?sequence=true` through the API
/// handler; the status and the body as text.
async fn numbered_create(
    counter: &hybrid_counter::Counter<DynamoStore>,
    scope: &str,
    id: &str,
) -> (api::http::StatusCode, String) {
    let request = api::http::Request::builder()
        .method("POST")
        .uri(format!("/scopes/{scope}/items/{id}?sequence=true"))
        .body(api::Body::Empty)
        .expect("valid request");
    let response = api::handle(counter, request, NOW).await;
    let body = match response.body() {
        api::Body::Empty => String::new(),
        body => String::from_utf8_lossy(body).into_owned(),
    };
    (response.status(), body)
}

/// The history's reading of an API create's answer: `201` names the
/// incarnation; a create answered `503` for its number was made all the same.
fn outcome_of_answer(status: api::http::StatusCode, body: &str) -> Outcome {
    let json: serde_json::Value = serde_json::from_str(body).unwrap_or_default();
    match (status.as_u16(), json["error"].as_str()) {
        (201, _) => Outcome::Created {
            incarnation: json["incarnation"]
                .as_str()
                .unwrap_or_else(|| panic!("no incarnation in {body}"))
                .to_owned(),
        },
        (503, Some("CreatedWithoutSequence" | "CreatedSequenceUnknown")) => Outcome::CreatedUnnamed,
        (409, Some("AlreadyExists")) => Outcome::Refused(Refusal::AlreadyExists),
        (409, Some("LimitExceeded")) => Outcome::Refused(Refusal::LimitExceeded),
        (400, _) => Outcome::Refused(Refusal::InvalidInput),
        _ => Outcome::Unknown(format!("{status} {body}")),
    }
}

/// 32 concurrent `?sequence=true` creates on one scope through `counter`,
/// ids `<prefix>00..31`, recorded in `history`; every answer's status and body.
async fn numbered_creates(
    counter: &Arc<hybrid_counter::Counter<DynamoStore>>,
    history: &History,
    scope: &str,
    prefix: &str,
) -> Vec<(api::http::StatusCode, String)> {
    let mut tasks = tokio::task::JoinSet::new();
    for n in 0..32 {
        let (counter, history, scope, i) = (
            counter.clone(),
            history.clone(),
            scope.to_owned(),
            format!("{prefix}{n:02}"),
        );
        tasks.spawn(async move {
            let invoked = history.invoke(Call::Create, &crate::scope(&scope), &id(&i));
            let (status, body) = numbered_create(&counter, &scope, &i).await;
            history.complete(invoked, outcome_of_answer(status, &body));
            (status, body)
        });
    }
    tasks.join_all().await
}

/// Issue 26 (N2): 32 concurrent `?sequence=true` creates on one scope
/// through the API handler, first while every claim is cancelled by a
/// `TransactionConflict`, creates' puts fail now and then and the counter
/// reads are throttled, then without faults. Every answer is JSON with a
/// documented code, none carries DynamoDB's words (they go to the log),
/// and the creates that were answered `201` hold the numbers 1..N. Every
/// answer is recorded and, after the drain, held against the items (a
/// create answered `503` for its number was made, and is kept).
#[tokio::test]
async fn concurrent_numbered_creates_through_the_api_never_answer_with_dynamodbs_words() {
    let mut kit = Kit::start(1_000).await;
    let s = "numbered-api";
    let plan = FaultPlan::from_env("sequence_bodies");
    let seed = plan.seed();
    let plan = plan
        .random(transact(), Fault::TransactionConflict(Conflicting::One), 1.0)
        // One applied-then-500 on a put for sure (the history must meet
        // one), then at random.
        .next(Operation::dynamodb("PutItem"), Fault::ApplyThenFail, 1)
        .random(Operation::dynamodb("PutItem"), Fault::FailBefore, 0.2)
        .random(Operation::dynamodb("PutItem"), Fault::ApplyThenFail, 0.15)
        .random(Operation::dynamodb("Query"), Fault::Throttle, 0.1);
    let proxy = FaultProxy::start(&kit.emulator.endpoint, plan);
    let counter = Arc::new(hybrid_counter::Counter::new(
        DynamoStore::new(aws_sdk_dynamodb::Client::new(&proxy.sdk_config().await), &kit.config),
        1_000,
    ));

    let history = History::new();
    let contended = numbered_creates(&counter, &history, s, "c").await;
    let mut codes = std::collections::BTreeMap::<String, usize>::new();
    for (status, body) in &contended {
        let json: serde_json::Value =
            serde_json::from_str(body).unwrap_or_else(|_| panic!("seed {seed}: not JSON: {status} {body}"));
        for word in STORE_WORDS {
            assert!(!body.contains(word), "seed {seed}: {word:?} in {status} {body}");
        }
        assert_eq!(
            *status,
            api::http::StatusCode::SERVICE_UNAVAILABLE,
            "seed {seed}: {body}"
        );
        let code = json["error"]
            .as_str()
            .unwrap_or_else(|| panic!("seed {seed}: no code: {body}"));
        assert!(
            ["CreatedWithoutSequence", "Unavailable"].contains(&code),
            "seed {seed}: {code}: {body}"
        );
        *codes.entry(code.to_owned()).or_default() += 1;
    }
    let stats = proxy.stats();
    eprintln!("numbered creates under faults: seed {seed}, answers {codes:?}\n{stats}");
    assert!(
        stats.injected(&Operation::dynamodb("PutItem"), FaultKind::ApplyThenFail) > 0,
        "seed {seed}: no applied-then-500 on PutItem\n{stats}"
    );
    assert!(
        codes.contains_key("CreatedWithoutSequence"),
        "seed {seed}: every claim was cancelled, yet no create said so: {codes:?}"
    );

    proxy.set_enabled(false);
    let answered = numbered_creates(&counter, &history, s, "n").await;
    let mut numbers = Vec::new();
    for (status, body) in &answered {
        assert_eq!(*status, api::http::StatusCode::CREATED, "seed {seed}: {body}");
        let json: serde_json::Value = serde_json::from_str(body).expect("JSON");
        numbers.push(json["sequence"].as_u64().unwrap_or_else(|| panic!("no number: {body}")));
    }
    numbers.sort_unstable();
    assert_eq!(
        numbers,
        (1..=32).collect::<Vec<_>>(),
        "seed {seed}: 1..N, no gap, no duplicate"
    );
    kit.drain().await;
    let s = &scope(s);
    let direct = (&kit.store, &kit.dynamodb, kit.config.resources_table.as_str());
    let checked = history.assert_kept(direct, s, None, &format!("seed {seed}")).await;
    eprintln!("numbered creates: seed {seed}, history: {checked}");
}
