//! Randomized test of [`super::Sequence::next`] under AWS semantics:
//! concurrent claimers of one scope against claims answered 500 after they
//! applied, answered 500 before they applied and then landing late, read-back
//! failures and conflicts, with a small retry budget so calls do stop
//! without a number. Seeded and on tokio's paused clock: each seed replays.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use super::in_flight::InFlight;
use super::*;
use crate::memory::{Chaos, Fault, MemoryStore, Op};

const WRITERS: usize = 12;
const CALLS_PER_WRITER: usize = 4;

/// What one call answered, by its token.
type Answers = BTreeMap<String, Result<Claimed, Error>>;

async fn run(seed: u64) -> (Answers, BTreeMap<u64, SequenceEntry>, u64, usize) {
    let memory = MemoryStore::new();
    memory.set_chaos(Chaos {
        seed,
        faults: vec![
            (Op::ClaimSequence, Fault::AppliedThenUnavailable, 150),
            (Op::ClaimSequence, Fault::Unavailable, 50),
            (Op::SequenceEntry, Fault::Unavailable, 100),
            (Op::LastSequence, Fault::Throttled, 50),
        ],
        transaction_latency: Duration::from_millis(3),
        ..Chaos::default()
    });
    let store = InFlight::new(memory, seed, 200, Duration::from_millis(60));
    let seq = Arc::new(Sequence::new(store).with_seed(seed).with_backoff(Backoff {
        max_attempts: 5,
        ..DEFAULT_BACKOFF
    }));
    let mut tasks = tokio::task::JoinSet::new();
    for writer in 0..WRITERS {
        let seq = seq.clone();
        tasks.spawn(async move {
            let mut answers = Vec::new();
            for k in 0..CALLS_PER_WRITER {
                let token = format!("t{writer}-{k}");
                let scope = Scope::new("acct").unwrap();
                let answer = seq.next_with_token(&scope, Some(&token), &token, 1).await;
                answers.push((token, answer));
            }
            answers
        });
    }
    let answers: Answers = tasks.join_all().await.into_iter().flatten().collect();
    seq.store().land_all().await;
    let tables = seq.store().memory().tables();
    let items = tables
        .sequence_items
        .into_iter()
        .map(|((_, number), entry)| (number, entry))
        .collect();
    let last = tables.sequences.get("acct").copied().unwrap_or(0);
    (answers, items, last, seq.store().late_claims())
}

/// Numbers gapless and none given twice; a call that said "nothing held"
/// holds no number; a call that got `n` holds `n`; a number that carries
/// a call's token is one that call got, or one its "outcome unknown"
/// named.
#[tokio::test(start_paused = true)]
async fn concurrent_claimers_under_late_and_lost_answers_never_hold_a_number_they_deny() {
    let (mut claimed, mut contended, mut unknown, mut late) = (0, 0, 0, 0);
    for seed in 0..12 {
        let (answers, items, last, late_claims) = run(seed).await;
        late += late_claims;
        assert_eq!(
            items.keys().copied().collect::<Vec<_>>(),
            (1..=last).collect::<Vec<_>>(),
            "seed {seed}: numbers 1..=last, no gap"
        );
        let mut holder: BTreeMap<&str, u64> = BTreeMap::new();
        for (number, entry) in &items {
            assert!(
                answers.contains_key(&entry.token),
                "seed {seed}: {number} has a caller's token"
            );
            assert_eq!(entry.owner.as_deref(), Some(entry.token.as_str()), "seed {seed}");
            let twice = holder.insert(&entry.token, *number);
            assert_eq!(twice, None, "seed {seed}: {} holds two numbers", entry.token);
        }
        for (token, answer) in &answers {
            let held = holder.get(token.as_str()).copied();
            match answer {
                Ok(got) => {
                    claimed += 1;
                    assert_eq!(held, Some(got.number), "seed {seed}: {token} got its number");
                }
                Err(Error::SequenceContended { .. }) => {
                    contended += 1;
                    assert_eq!(held, None, "seed {seed}: {token} was told nothing is held");
                }
                Err(Error::SequenceOutcomeUnknown { numbers, .. }) => {
                    unknown += 1;
                    assert!(
                        held.is_none_or(|n| numbers.contains(&n)),
                        "seed {seed}: {token} holds {held:?}, outside {numbers:?}"
                    );
                }
                Err(other) => panic!("seed {seed}: {token}: unexpected {other:?}"),
            }
        }
    }
    assert!(
        late > 0 && claimed > 0 && contended > 0 && unknown > 0,
        "cases exercised: {late} late, {claimed} claimed, {contended} contended, {unknown} unknown"
    );
}
