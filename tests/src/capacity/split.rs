//! Split for heat ("Burst and adaptive capacity", and AWS's "Scaling
//! DynamoDB: How partitions, hot keys, and split for heat impact
//! performance"): a partition that has been hot (near its budget, or
//! refusing) for [`super::CapacityParams::split_after`] without a cool
//! window splits in two at the median of the keys it recently served, so
//! each half takes about half the traffic with the full rate. Never below
//! one item (the median must leave traffic on both sides), and never when
//! new items arrive with increasing keys (`item-000001, item-000002, ...`):
//! every new item lands in the last range, which a split cannot relieve.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use super::budget::Finished;

/// A position in a table's key order: the partition key's hash, then the
/// sort key. A partition holds the keys from its low key to the next one's.
pub(crate) type Key = (u64, String);

/// Keys a partition remembers for its split decision.
const RECENT_KEYS: usize = 256;
/// Share of consecutive new items whose keys must increase for the traffic
/// to count as sequential (a few concurrent writers reorder some).
const SEQUENTIAL_SHARE: f64 = 0.8;
/// Share of its budget a window must serve to count as hot.
const HOT_SHARE: f64 = 0.8;

/// A partition's recent traffic and how long it has been hot.
#[derive(Debug, Clone, Default)]
pub(crate) struct Heat {
    hot_since: Option<Instant>,
    /// Keys of the requests it recently served, in arrival order.
    recent: VecDeque<Key>,
    /// Keys of the new items it recently got, in arrival order.
    recent_new: VecDeque<Key>,
}

/// What a split for heat that is due comes to.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Split {
    At(Key),
    Sequential,
    OneItem,
}

fn push_bounded(keys: &mut VecDeque<Key>, key: &Key) {
    if keys.len() == RECENT_KEYS {
        keys.pop_front();
    }
    keys.push_back(key.clone());
}

impl Heat {
    pub fn remember(&mut self, key: &Key, new_item: bool) {
        push_bounded(&mut self.recent, key);
        if new_item {
            push_bounded(&mut self.recent_new, key);
        }
    }

    /// A window ended with `finished` out of `cap`: hot when it served
    /// most of its budget or refused a request; an idle window cools it.
    pub fn observe(&mut self, finished: &Finished, cap: f64) {
        let hot = finished.throttled || finished.used >= HOT_SHARE * cap;
        if hot && finished.idle_after == 0 {
            self.hot_since.get_or_insert(finished.end);
        } else {
            self.hot_since = None;
        }
    }

    pub fn due(&self, now: Instant, after: Duration) -> bool {
        self.hot_since
            .is_some_and(|since| now.saturating_duration_since(since) >= after)
    }

    /// Heat counted again from `now` (a split refused is reconsidered after
    /// another full heat).
    pub fn restart(&mut self, now: Instant) {
        self.hot_since = Some(now);
    }

    /// Where a partition starting at `low` would split.
    pub fn split_point(&self, low: &Key) -> Split {
        if is_sequential(&self.recent_new) {
            return Split::Sequential;
        }
        let mut keys: Vec<&Key> = self.recent.iter().collect();
        keys.sort();
        match keys.get(keys.len() / 2) {
            Some(median) if keys[0] < *median && *median > low => Split::At((*median).clone()),
            _ => Split::OneItem,
        }
    }

    /// Splits the heat at `at`: this keeps the keys below it, the upper
    /// half's is returned; both start cool.
    pub fn divide(&mut self, at: &Key) -> Heat {
        let (low, high): (VecDeque<Key>, VecDeque<Key>) = self.recent.drain(..).partition(|k| k < at);
        self.recent = low;
        self.recent_new.clear();
        self.hot_since = None;
        Heat {
            hot_since: None,
            recent: high,
            recent_new: VecDeque::new(),
        }
    }
}

/// Whether `keys`, in arrival order, mostly increase.
fn is_sequential(keys: &VecDeque<Key>) -> bool {
    let pairs = keys.len().saturating_sub(1);
    if pairs < 8 {
        return false;
    }
    let rising = keys.iter().zip(keys.iter().skip(1)).filter(|(a, b)| b > a).count();
    rising as f64 >= SEQUENTIAL_SHARE * pairs as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    fn finished(used: f64, throttled: bool, end: Instant) -> Finished {
        Finished {
            used,
            throttled,
            idle_after: 0,
            end,
        }
    }

    #[test]
    fn heat_is_sustained_load_and_an_idle_or_light_window_cools_it() {
        let start = Instant::now();
        let mut heat = Heat::default();
        heat.observe(&finished(9.0, false, start), 10.0);
        assert!(heat.due(start + Duration::from_secs(60), Duration::from_secs(60)));
        assert!(!heat.due(start + Duration::from_secs(59), Duration::from_secs(60)));
        heat.observe(&finished(5.0, false, start + Duration::from_secs(1)), 10.0);
        assert!(
            !heat.due(start + Duration::from_secs(600), Duration::from_secs(60)),
            "cooled"
        );
        heat.observe(&finished(1.0, true, start), 10.0);
        assert!(
            heat.due(start + Duration::from_secs(60), Duration::from_secs(60)),
            "refusing is hot"
        );
    }

    #[test]
    fn the_split_point_divides_traffic_and_never_one_item_or_sequential_keys() {
        let key = |s: &str| (7u64, s.to_owned());
        let mut random = Heat::default();
        for k in ["d", "a", "c", "b", "e", "a", "d"] {
            random.remember(&key(k), false);
        }
        assert_eq!(random.split_point(&key("")), Split::At(key("c")));
        let upper = random.divide(&key("c"));
        assert!(upper.recent.iter().all(|k| k >= &key("c")) && random.recent.iter().all(|k| k < &key("c")));

        let mut one = Heat::default();
        (0..20).for_each(|_| one.remember(&key("counter"), false));
        assert_eq!(one.split_point(&key("")), Split::OneItem);

        let mut sequential = Heat::default();
        (0..20).for_each(|n| sequential.remember(&key(&format!("item-{n:04}")), true));
        assert_eq!(sequential.split_point(&key("")), Split::Sequential);
    }
}
