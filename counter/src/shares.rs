//! Each counters key's share of a scope's limit, assigned from what the
//! keys hold when an override is written, so that a lowering leaves no key
//! above its share while another fills its own (simulation seed
//! 1592593515). Stored on each key's `limit` item beside the limit it is
//! for; a key without one admits up to [`ScopeKeys::share`].

use crate::error::StoreError;
use crate::ids::Scope;
use crate::items::CounterSnapshot;
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
    let held: Vec<u64> = held.iter().map(|&h| u64::try_from(h).unwrap_or(0)).collect();
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

/// What a key holds for [`shares_from`]: the larger of its BE and EC.
pub fn held(snapshot: &CounterSnapshot) -> i64 {
    snapshot.best_effort.max(snapshot.eventual)
}

/// The share each of `keys` (a scope's counters keys, in index order) gets
/// of `limit`, from one strongly consistent read of each key's counters.
/// Creates in flight while it is read and written are the window a limit
/// change has with creates in flight (docs/design.md, strict admission).
pub async fn read_shares<S: RequestStore>(store: &S, keys: &[Scope], limit: u64) -> Result<Vec<u64>, StoreError> {
    let reads = futures_util::future::try_join_all(keys.iter().map(|key| store.read_counters(key))).await?;
    let held: Vec<i64> = reads.iter().map(held).collect();
    Ok(shares_from(limit, &held))
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::scope_keys::ScopeKeys;

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

    proptest! {
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
