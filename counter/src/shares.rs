//! Each counters key's share of a scope's limit, assigned from what the
//! keys hold when an override is written, so that a lowering leaves no key
//! above its share while another fills its own (simulation seed
//! 1592593515). Written in rounds of transactions: shares first only
//! lowered, then assigned again from new reads; stored on each key's
//! `limit` item with the write's token. A key without a valid one admits
//! up to [`ScopeKeys::share`].

use crate::error::StoreError;
use crate::ids::Scope;
use crate::items::CounterSnapshot;
use crate::scope_keys::ScopeKeys;
use crate::store::RequestStore;

/// The shares of a scope limit of `limit` over keys holding `held` (each
/// key's larger of BE and EC; below 0 counts as 0). They add up to
/// `limit`. When the keys together hold at most `limit`, each key gets at
/// least what it holds, so the scope stays within its limit whichever key
/// admits; otherwise each gets at most what it holds, so no key admits
/// until the scope has drained to the limit on that key. The rest is
/// spread as evenly as integers allow, lower keys first: with nothing held
/// that is [`crate::scope_keys::ScopeKeys::share`].
pub fn shares_from(limit: u64, held: &[i64]) -> Vec<u64> {
    if held.is_empty() {
        return Vec::new();
    }
    let held: Vec<u64> = held.iter().map(|&h| clamp(h)).collect();
    let total = held.iter().fold(0u64, |sum, &h| sum.saturating_add(h));
    // Fill to a level `w`: up (each key at least what it holds) when the
    // keys fit under the limit, down (at most what it holds) otherwise.
    let up = total <= limit;
    let at = |h: u64, w: u64| if up { h.max(w) } else { h.min(w) };
    let filled = |w: u64| held.iter().fold(0u64, |sum, &h| sum.saturating_add(at(h, w)));
    // The highest level whose fill stays within the limit (`filled` grows
    // with `w`; at 0 it is `total` going up and 0 going down).
    let (mut lo, mut hi) = (0u64, limit);
    while lo < hi {
        let mid = lo + (hi - lo).div_ceil(2);
        if filled(mid) <= limit { lo = mid } else { hi = mid - 1 }
    }
    let mut shares: Vec<u64> = held.iter().map(|&h| at(h, lo)).collect();
    // One more for the first keys that would rise with the level, until
    // the shares add up: fewer than the keys that rise, since the next
    // level would pass the limit.
    let mut rest = limit - filled(lo);
    for (share, &h) in shares.iter_mut().zip(&held) {
        if rest == 0 {
            break;
        }
        if (up && h <= lo) || (!up && h > lo) {
            *share += 1;
            rest -= 1;
        }
    }
    shares
}

/// The first transaction's shares: each key's share now, lowered to its
/// `target` where that is lower and never raised, so no key admits more
/// than before while the others' shares are not yet raised; they add up
/// to at most the target's limit.
fn lowered(now: &[u64], target: &[u64]) -> Vec<u64> {
    now.iter().zip(target).map(|(&n, &t)| n.min(t)).collect()
}

/// The next transaction's shares, from the most each key was given by any
/// transaction of this write (`cap`: creates that read it may still land)
/// and what the keys hold (`held`). When every key fits under the limit at
/// the larger of its cap and what it holds, each key's at least both,
/// adding up to `limit`. Otherwise (a create that read an older share left
/// a key above it) each key's at most what [`shares_from`] gives it from
/// `held` alone and at most the larger of its cap and what it holds, so no
/// key gets room beyond what creates in flight or its items already reach
/// (reviews of the shares, findings 1, 1 and 1 again; when the keys hold
/// more than the limit that is [`shares_from`]'s); they may add up to
/// less, and a later round raises them once the keys fit.
fn raised(limit: u64, cap: &[u64], held: &[i64]) -> Vec<u64> {
    let want: Vec<u64> = cap.iter().zip(held).map(|(&c, &h)| c.max(clamp(h))).collect();
    let wanted = want.iter().fold(0u64, |sum, &w| sum.saturating_add(w));
    if wanted <= limit {
        shares_from(limit, &to_signed(&want))
    } else {
        want.iter()
            .zip(shares_from(limit, held))
            .map(|(&w, s)| w.min(s))
            .collect()
    }
}

/// `cap` raised to `shares` where they are higher: the most each key was
/// given so far.
fn widen(cap: &mut [u64], shares: &[u64]) {
    for (c, &s) in cap.iter_mut().zip(shares) {
        *c = (*c).max(s);
    }
}

/// What one counters key holds and admits against, read for a limit write.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyRead {
    /// The larger of EC and its best-effort items summed, each from 0 (a
    /// shard below 0 holds nothing for another shard's items).
    pub held: i64,
    /// The share it admits against now: its assigned share, else the even
    /// split of its override or `default_limit`.
    pub share: u64,
    /// Its `limit` copy's `version` and write token (`None`: no copy): a
    /// limit set's first transaction is conditioned on it, so a write since
    /// the read refuses it rather than raising a share another write
    /// lowered (review of the shares, finding 2).
    pub copy: Option<(i64, Option<String>)>,
}

impl KeyRead {
    pub fn of(snapshot: &CounterSnapshot, keys: ScopeKeys, index: u32, default_limit: u64) -> Self {
        let best_effort: i64 = snapshot.best_effort_items.values().map(|&c| c.max(0)).sum();
        Self {
            held: best_effort.max(snapshot.eventual),
            share: key_share(snapshot, keys, index, default_limit),
            copy: snapshot.limit_copy.clone(),
        }
    }
}

/// The share key `index` admits against (what admission compares): its
/// assigned share, else the even split of its override or `default_limit`.
pub fn key_share(snapshot: &CounterSnapshot, keys: ScopeKeys, index: u32, default_limit: u64) -> u64 {
    let limit = snapshot.limit_override.unwrap_or(default_limit);
    snapshot.limit_share.unwrap_or_else(|| keys.share(limit, index))
}

/// One strongly consistent read of each of `copies` (a scope's counters
/// keys over `keys`, in index order).
pub async fn read_keys<S: RequestStore>(
    store: &S,
    keys: ScopeKeys,
    copies: &[Scope],
    default_limit: u64,
) -> Result<Vec<KeyRead>, StoreError> {
    let reads = futures_util::future::try_join_all(copies.iter().map(|key| store.read_counters(key))).await?;
    Ok(reads
        .iter()
        .zip(0u32..)
        .map(|(read, index)| KeyRead::of(read, keys, index, default_limit))
        .collect())
}

/// The first transaction's shares of `limit` from `reads`.
fn first(limit: u64, reads: &[KeyRead]) -> Vec<u64> {
    let held: Vec<i64> = reads.iter().map(|r| r.held).collect();
    let now: Vec<u64> = reads.iter().map(|r| r.share).collect();
    lowered(&now, &shares_from(limit, &held))
}

/// A later transaction's shares of `limit` (`cap`: the most each key was
/// given by this write), from `reads`.
fn second(limit: u64, cap: &[u64], reads: &[KeyRead]) -> Vec<u64> {
    let held: Vec<i64> = reads.iter().map(|r| r.held).collect();
    raised(limit, cap, &held)
}

/// Transactions after a limit write's first that assign its keys' shares
/// again from a new read, at most, and the pause before each but the
/// first (creates that read a share of this write land meanwhile).
pub const ROUNDS: usize = 3;
pub const ROUND_PAUSE: std::time::Duration = std::time::Duration::from_millis(200);

/// How often a `limit set` is planned again when another write changed a
/// copy between its read and its first transaction (refused).
pub const SET_ATTEMPTS: usize = 4;

/// Runs `attempt` (one `limit set` of `scope` from a new read) until it is
/// not refused (`Ok(None)`), at most [`SET_ATTEMPTS`] times: the one
/// re-planning of `DynamoStore` and the in-memory store.
pub async fn replanned<T>(
    scope: &Scope,
    mut attempt: impl AsyncFnMut() -> Result<Option<T>, StoreError>,
) -> Result<T, StoreError> {
    for _ in 0..SET_ATTEMPTS {
        if let Some(done) = attempt().await? {
            return Ok(done);
        }
    }
    Err(StoreError::Rejected(format!(
        "{scope}: another write changed its limit copies between each of {SET_ATTEMPTS} reads and writes"
    )))
}

/// Which transaction of a limit write is sent: the first, conditioned on
/// each copy as these reads found it (unless the caller planned its own
/// conditions), or a later one, conditioned on the last one's token.
#[derive(Debug, Clone, Copy)]
pub enum Round<'a> {
    First(&'a [KeyRead]),
    Next(&'a str),
}

/// How one transaction of a limit write ended.
#[derive(Debug)]
pub enum Sent<T> {
    /// Written with this token.
    Written(String),
    /// Not written, as the store answered (the first: refused or as
    /// planned; a later one: another write since ours, which stands).
    Ended(T),
    /// Outcome unknown (a later transaction: the shares are the last
    /// written or this one's; a first one's is `Err(Unavailable)`, so a
    /// caller that may have written the limit answers it as `Ended`).
    Failed(String),
}

/// How a limit write's transactions ended.
#[derive(Debug, PartialEq, Eq)]
pub enum Assigned<T> {
    /// Every share assigned: they add up to the limit.
    Written,
    /// A later transaction was refused: another write since ours stands.
    Superseded,
    /// The first transaction was not written: the store's answer.
    Ended(T),
    /// The limit is written but the shares may not be assigned (only
    /// lowered, or a round's outcome unknown): they may add up to less than
    /// it until `limit set` of the same limit.
    Unraised(String),
}

/// Writes `limit` over a scope's counters keys (`copies`, in index order)
/// through `send`, one transaction over every copy each: the first only
/// lowers shares ([`first`]), then up to [`ROUNDS`] more, [`ROUND_PAUSE`]
/// apart, each after a new read of every key, assign them again
/// ([`second`]) until they add up to the limit. The one protocol of
/// `DynamoStore` and the in-memory store (which the simulation runs).
pub async fn assign<S: RequestStore, T>(
    store: &S,
    keys: ScopeKeys,
    copies: &[Scope],
    limit: u64,
    default_limit: u64,
    mut send: impl AsyncFnMut(Round<'_>, &[u64]) -> Result<Sent<T>, StoreError>,
) -> Result<Assigned<T>, StoreError> {
    let read = || read_keys(store, keys, copies, default_limit);
    let reads = read().await?;
    let floor = first(limit, &reads);
    let mut token = match send(Round::First(&reads), &floor).await? {
        Sent::Written(token) => token,
        Sent::Ended(answer) => return Ok(Assigned::Ended(answer)),
        Sent::Failed(error) => return Err(StoreError::Unavailable(error)),
    };
    let (mut shares_now, mut cap) = (floor.clone(), floor);
    for round in 0..ROUNDS {
        if round > 0 {
            tokio::time::sleep(ROUND_PAUSE).await;
        }
        let next = match read().await {
            Ok(reads) => second(limit, &cap, &reads),
            Err(e) => return Ok(Assigned::Unraised(e.to_string())),
        };
        if next == shares_now {
            if next.iter().sum::<u64>() == limit {
                break;
            }
            continue;
        }
        match send(Round::Next(&token), &next).await {
            Ok(Sent::Written(sent)) => {
                widen(&mut cap, &next);
                (shares_now, token) = (next, sent);
            }
            Ok(Sent::Ended(_)) => return Ok(Assigned::Superseded),
            Ok(Sent::Failed(error)) => return Ok(Assigned::Unraised(error)),
            Err(e) => return Ok(Assigned::Unraised(e.to_string())),
        }
    }
    let sum = shares_now.iter().sum::<u64>();
    Ok(if sum < limit {
        Assigned::Unraised(format!("the keys' shares add up to {sum}"))
    } else {
        Assigned::Written
    })
}

fn clamp(held: i64) -> u64 {
    u64::try_from(held).unwrap_or(0)
}

fn to_signed(values: &[u64]) -> Vec<i64> {
    values.iter().map(|&v| i64::try_from(v).unwrap_or(i64::MAX)).collect()
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::scope_keys::ScopeKeys;

    /// A key holding `held` that admits against `share`, with no copy.
    fn key(held: i64, share: u64) -> KeyRead {
        KeyRead {
            held,
            share,
            copy: None,
        }
    }

    #[test]
    fn a_lowering_gives_each_key_what_it_holds_and_the_rest_to_the_others() {
        // Two keys, one item on key 1, the limit lowered to 1: key 1 keeps
        // its item as its share, key 0 gets nothing (the formula's 1 and 0
        // let key 0 admit one more: 2 live against a limit of 1).
        assert_eq!(shares_from(1, &[0, 1]), vec![0, 1]);
        assert_eq!(shares_from(5, &[0, 3, 0]), vec![1, 3, 1]);
        assert_eq!(shares_from(6, &[0, 3, 0]), vec![2, 3, 1]);
    }

    #[test]
    fn below_what_the_keys_hold_every_key_is_at_or_under_what_it_holds() {
        assert_eq!(shares_from(2, &[5, 1, 0]), vec![1, 1, 0]);
        assert_eq!(shares_from(4, &[5, 1, 0]), vec![3, 1, 0]);
        assert_eq!(shares_from(0, &[5, 1]), vec![0, 0]);
    }

    #[test]
    fn negative_holdings_count_as_none() {
        assert_eq!(shares_from(3, &[-2, 0]), vec![2, 1]);
    }

    /// Review 1 of the shares (finding 1): a raise computed from a read
    /// lowered key 0's share from 8 to 6 while 8 creates that started after
    /// the read and read share 8 landed on it, and key 1's share rose to 6:
    /// 14 live against 12. The first transaction only lowers (key 1 stays
    /// at 2); the second, from a read after it, raises from there.
    #[test]
    fn a_share_is_only_lowered_first_and_raised_from_a_read_after() {
        let before = [key(0, 8), key(2, 2)];
        let floor = first(12, &before);
        assert_eq!(floor, vec![6, 2]);
        // Key 0's creates landed before the first transaction: it holds 8.
        let after = [key(8, 6), key(2, 2)];
        assert_eq!(second(12, &floor, &after), vec![8, 4]);
        // They landed after the second read: the creates in flight at the
        // change, the window every limit change has.
        let after = [key(0, 6), key(2, 2)];
        assert_eq!(second(12, &floor, &after), vec![6, 6]);
    }

    /// Review of the shares (finding 1): a lowering to 10 read [9, 0] and
    /// wrote [9, 1]; a create that read share 10 landed on key 0 before
    /// the first transaction. Raising only would keep [9, 1] and let key 1
    /// fill: 11 against 10. From the second read, key 1 gets nothing.
    #[test]
    fn a_key_above_its_floor_after_the_first_transaction_is_assigned_from_the_second_read() {
        let floor = first(10, &[key(9, 10), key(0, 10)]);
        assert_eq!(floor, vec![9, 1]);
        let after = [key(10, 9), key(0, 1)];
        // Key 0 keeps the 10 it holds (it admits no more), key 1 gets none
        // (a create that read its 1 may still land: 11, that one create).
        assert_eq!(second(10, &floor, &after), vec![10, 0]);
    }

    /// Third read of the shares (trace B): key 1's ten items were deleted
    /// and key 0 got one before the first transaction ([0, 10]); creates
    /// on key 1 that read 10 are in flight. Assigning [5, 5] from the
    /// second read let them fill key 1 to 10 while key 0 filled to 5: 15
    /// against 10. No key goes above its floor: 11, the one create that
    /// read the older share.
    #[test]
    fn no_key_goes_above_its_floor_while_the_keys_do_not_fit() {
        let floor = first(10, &[key(0, 10), key(10, 10)]);
        assert_eq!(floor, vec![0, 10]);
        let after = [key(1, 0), key(0, 10)];
        let round = second(10, &floor, &after);
        assert_eq!(round, vec![1, 5], "key 0 holds 1, key 1 no more than 5");
        // Fourth read (trace B one round later): the ten creates on key 1
        // that read 10 are still in flight at the next read; raising key 0
        // to 5 then would give 15 again. Key 1 may still reach the 10 this
        // write gave it, so the keys do not fit and nothing rises.
        let mut cap = floor.clone();
        widen(&mut cap, &round);
        assert_eq!(second(10, &cap, &after), vec![1, 5]);
        // The next round, once the keys fit (key 0's item deleted), raises
        // them to the limit.
        let again = [key(0, 0), key(10, 5)];
        assert_eq!(second(10, &cap, &again), vec![0, 10]);
    }

    #[test]
    fn a_shard_below_zero_holds_nothing_for_the_others() {
        let snapshot = CounterSnapshot {
            best_effort: 2,
            best_effort_items: [("best_effort#0".to_owned(), 3), ("best_effort#1".to_owned(), -1)]
                .into_iter()
                .collect(),
            ..CounterSnapshot::default()
        };
        let read = KeyRead::of(&snapshot, ScopeKeys::new(2).unwrap(), 0, 10);
        assert_eq!(read, key(3, 5));
    }

    proptest! {
        #[test]
        fn the_two_transactions_never_raise_then_never_lower_and_add_up(
            limit in 0u64..5_000,
            now in proptest::collection::vec(0u64..2_000, 1..=8),
            held in proptest::collection::vec(-3i64..2_000, 8),
            later in proptest::collection::vec(-500i64..500, 8),
        ) {
            let reads: Vec<KeyRead> = now.iter().zip(&held).map(|(&share, &held)| key(held, share)).collect();
            let floor = first(limit, &reads);
            prop_assert!(floor.iter().zip(&now).all(|(f, n)| f <= n));
            prop_assert!(floor.iter().sum::<u64>() <= limit);
            // Rounds after the first, each with what the keys hold then;
            // creates that read any share this write gave may still land.
            let mut cap = floor.clone();
            for round in 0..3 {
                let after: Vec<KeyRead> = reads
                    .iter()
                    .zip(&later)
                    .map(|(r, &more)| key((r.held.max(0) + more * round).max(0), 0))
                    .collect();
                let next = second(limit, &cap, &after);
                prop_assert!(next.iter().sum::<u64>() <= limit);
                // What the keys may come to hold: each the largest of its
                // new share, the most this write gave it, and what it holds;
                // never above the limit or what that already comes to.
                let held: Vec<u64> = after.iter().map(|r| r.held as u64).collect();
                let fits: u64 = cap.iter().zip(&held).map(|(c, h)| *c.max(h)).sum();
                let reach: u64 = next.iter().zip(&cap).zip(&held).map(|((n, c), h)| *n.max(c).max(h)).sum();
                prop_assert!(reach <= limit.max(fits), "{next:?} (cap {cap:?}) over {held:?} at {limit}");
                if fits <= limit {
                    prop_assert_eq!(next.iter().sum::<u64>(), limit);
                    prop_assert!(next.iter().zip(&cap).all(|(n, c)| n >= c));
                } else {
                    prop_assert!(next.iter().zip(&cap).zip(&held).all(|((n, c), h)| n <= c.max(h)));
                }
                widen(&mut cap, &next);
            }
        }

        #[test]
        fn shares_add_up_to_the_limit_and_cover_or_stay_under_what_is_held(
            limit in 0u64..10_000,
            held in proptest::collection::vec(-3i64..3_000, 1..=12),
        ) {
            let shares = shares_from(limit, &held);
            prop_assert_eq!(shares.len(), held.len());
            prop_assert_eq!(shares.iter().sum::<u64>(), limit);
            let held: Vec<u64> = held.iter().map(|&h| h.max(0) as u64).collect();
            let total: u64 = held.iter().sum();
            for (share, h) in shares.iter().zip(&held) {
                if total <= limit {
                    prop_assert!(share >= h, "{shares:?} under {held:?} at {limit}");
                } else {
                    prop_assert!(share <= h, "{shares:?} over {held:?} at {limit}");
                }
            }
        }

        #[test]
        fn with_nothing_held_the_shares_are_the_even_split(limit in 0u64..1_000_000, count in 1u32..=100) {
            let keys = ScopeKeys::new(count).unwrap();
            let even: Vec<u64> = (0..count).map(|k| keys.share(limit, k)).collect();
            prop_assert_eq!(shares_from(limit, &vec![0; count as usize]), even);
        }
    }
}
