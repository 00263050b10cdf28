//! The best-effort counter spread over shards (DESIGN §5): which item a
//! create counts on, strict admission's per-shard quotas, and the order in
//! which shards are tried. Pure: the request path ([`crate::request`]) and
//! the audit ([`crate::audit`]) do the I/O.
//!
//! One DynamoDB item takes about 1,000 write units per second, so one
//! `best_effort` item caps a scope's creates plus deletes there. With
//! `BeShardCount = n > 1` a create counts on one of `best_effort#0..n-1`,
//! chosen at random, and records the shard on its item
//! ([`crate::keys::BE_SHARD`]); its delete takes from that shard. Readers
//! sum every best-effort item they find (`best_effort` and any
//! `best_effort#k`, also those of an earlier shard count) from the one
//! Query they already make.
//!
//! Strict admission splits the limit into quotas, one per configured
//! ("active") shard, that add up to the limit less what the other
//! best-effort items ("retired": left by an earlier shard count) still
//! hold. A reservation is `count < quota` on its shard. Retired items only
//! ever go down (deletes and give-backs take from the shard an item
//! recorded; a repair raises an active shard), so a quota computed from an
//! older read is never larger than one computed now, and the sum of all
//! best-effort items never passes the limit: `live <= BE <= limit` at every
//! instant, as with one item.

use std::collections::BTreeMap;

use crate::keys;

/// Most best-effort shards a stack may configure (`BeShardCount`).
pub const MAX_SHARDS: u32 = 100;

/// The configured best-effort shards of a stack.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Layout {
    shards: u32,
}

impl Default for Layout {
    fn default() -> Self {
        Self { shards: 1 }
    }
}

/// One active shard's part of strict admission's limit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Quota {
    /// The shard as its item records it (`None`: unsharded `best_effort`).
    pub shard: Option<u32>,
    /// Its counters-table name.
    pub name: String,
    /// What a reservation on it is conditioned on: `count < quota`.
    pub quota: u64,
    /// Its count in the read the quota was computed from.
    pub read: i64,
}

impl Quota {
    /// Whether the read left room on this shard (a quota of 0 never has).
    pub fn has_room(&self) -> bool {
        self.quota > 0 && i128::from(self.read) < i128::from(self.quota)
    }
}

impl Layout {
    /// `shards` best-effort items (1 to [`MAX_SHARDS`]; out-of-range
    /// values are clamped).
    pub fn new(shards: u32) -> Self {
        Self {
            shards: shards.clamp(1, MAX_SHARDS),
        }
    }

    pub fn shards(&self) -> u32 {
        self.shards
    }

    /// What an item counted on active shard `index` records: `None` when
    /// the counter is not sharded.
    pub fn shard(&self, index: u32) -> Option<u32> {
        (self.shards > 1).then_some(index % self.shards)
    }

    /// Every active shard, as items record them.
    pub fn active(&self) -> impl Iterator<Item = Option<u32>> + '_ {
        (0..self.shards).map(|i| self.shard(i))
    }

    /// Whether the counters-table item `name` is an active shard.
    pub fn is_active(&self, name: &str) -> bool {
        self.active().any(|shard| keys::best_effort_name(shard) == name)
    }

    /// A random active shard for a new item.
    pub fn pick(&self, rng: &mut fastrand::Rng) -> Option<u32> {
        self.shard(rng.u32(0..self.shards))
    }

    /// The shards a best-effort write of an item recorded on `first` is
    /// sent to, in order: `first`, then every other active shard from a
    /// random starting point (a refusal for heat is retried elsewhere).
    pub fn rotation(&self, first: Option<u32>, rng: &mut fastrand::Rng) -> Vec<Option<u32>> {
        let start = rng.u32(0..self.shards);
        let mut order = vec![first];
        order.extend(
            (0..self.shards)
                .map(|i| self.shard(start + i))
                .filter(|shard| *shard != first),
        );
        order
    }

    /// Strict admission's quotas over `items` (each best-effort item read
    /// and its count) for `limit`, such that no shard can grow past its
    /// quota and, reservations allowed by this read all landing, the items
    /// add up to the limit at most.
    ///
    /// The retired items keep what they hold (they only go down). So does
    /// an active shard already at or above its even share of what is left,
    /// for example after `BeShardCount` grew (`best_effort#0` filled to a
    /// quarter of the limit under 4 shards is over its eighth under 8), or
    /// after a repair raised it: it is *frozen* (quota 0) until it drains.
    /// The rest of the limit is split evenly over the other active shards
    /// (the first take one more), again until none of them is at its share.
    /// A frozen shard only goes down, and a shard leaves the frozen set only
    /// by going down, so a quota computed from an older read is never
    /// larger than one computed now.
    pub fn quotas(&self, items: &BTreeMap<String, i64>, limit: u64) -> Vec<Quota> {
        let retired: i128 = items
            .iter()
            .filter(|(name, _)| !self.is_active(name))
            .map(|(_, count)| i128::from(*count))
            .sum();
        let mut quotas: Vec<Quota> = self
            .active()
            .map(|shard| {
                let name = keys::best_effort_name(shard);
                Quota {
                    read: items.get(&name).copied().unwrap_or(0),
                    quota: 0,
                    shard,
                    name,
                }
            })
            .collect();
        let mut frozen = vec![false; quotas.len()];
        loop {
            // What the limit cannot lend: the retired and frozen items, and
            // what free shards hold below 0 (a shard at -2 takes its share
            // from -2, so its share lands 2 lower).
            let held: i128 = retired
                + quotas
                    .iter()
                    .zip(&frozen)
                    .map(|(q, f)| {
                        if *f {
                            i128::from(q.read)
                        } else {
                            i128::from(q.read.min(0))
                        }
                    })
                    .sum::<i128>();
            let rest = u64::try_from((i128::from(limit) - held).max(0)).unwrap_or(u64::MAX);
            let free: Vec<usize> = (0..quotas.len()).filter(|&i| !frozen[i]).collect();
            let n = free.len() as u64;
            for (j, &i) in free.iter().enumerate() {
                let share = rest / n + u64::from((j as u64) < rest % n);
                let below = u64::try_from(-quotas[i].read.min(0)).unwrap_or(u64::MAX);
                quotas[i].quota = share.saturating_sub(below);
            }
            let full: Vec<usize> = free.into_iter().filter(|&i| !quotas[i].has_room()).collect();
            if full.is_empty() {
                break;
            }
            for i in full {
                frozen[i] = true;
                quotas[i].quota = 0;
            }
            if frozen.iter().all(|f| *f) {
                break;
            }
        }
        quotas
    }

    /// The item a repair writes its correction `delta` to (the other
    /// best-effort items are written unchanged, so the repair holds only if
    /// none of them moved). A raise goes to the active shard with the
    /// lowest count, never to a retired item (retired items only go down,
    /// which strict admission's quotas rely on); a lowering comes off the
    /// item with the highest count, retired ones first on a tie, so they
    /// drain.
    pub fn correction_shard(&self, items: &BTreeMap<String, i64>, delta: i64) -> String {
        let count = |name: &String| items.get(name).copied().unwrap_or(0);
        let active = self.active().map(keys::best_effort_name);
        if delta >= 0 {
            return active
                .min_by_key(|name| count(name))
                .expect("at least one active shard");
        }
        items
            .iter()
            .max_by_key(|(name, c)| (**c, !self.is_active(name)))
            .map(|(name, _)| name.clone())
            .unwrap_or_else(|| keys::best_effort_name(self.shard(0)))
    }

    /// The order strict admission tries the quotas in: those the read left
    /// room on, in a random order, then the full ones (a delete may have
    /// freed a slot since), in a random order. Below the limit the first
    /// try succeeds unless a concurrent create took the slot; a refusal
    /// costs at most one try per shard.
    pub fn reservation_order(quotas: &[Quota], rng: &mut fastrand::Rng) -> Vec<usize> {
        let (mut room, mut full): (Vec<usize>, Vec<usize>) = (0..quotas.len()).partition(|&i| quotas[i].has_room());
        rng.shuffle(&mut room);
        rng.shuffle(&mut full);
        room.extend(full);
        room
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn items(pairs: &[(&str, i64)]) -> BTreeMap<String, i64> {
        pairs.iter().map(|(n, c)| ((*n).to_owned(), *c)).collect()
    }

    #[test]
    fn one_shard_is_the_unsharded_item() {
        let layout = Layout::new(1);
        assert_eq!(layout.active().collect::<Vec<_>>(), vec![None]);
        assert!(layout.is_active("best_effort"));
        assert!(!layout.is_active("best_effort#0"));
        let q = layout.quotas(&items(&[("best_effort", 3)]), 10);
        assert_eq!(q.len(), 1);
        assert_eq!((q[0].name.as_str(), q[0].quota, q[0].read), ("best_effort", 10, 3));
    }

    #[test]
    fn quotas_split_the_limit_and_leave_out_what_retired_shards_hold() {
        let layout = Layout::new(4);
        let q = layout.quotas(&items(&[("best_effort#1", 2)]), 10);
        assert_eq!(q.iter().map(|q| q.quota).collect::<Vec<_>>(), vec![3, 3, 2, 2]);
        assert_eq!(q[1].read, 2);
        // `best_effort` left by the unsharded layout holds 6: 4 remain.
        let q = layout.quotas(&items(&[("best_effort", 6), ("best_effort#9", 1)]), 10);
        assert_eq!(q.iter().map(|q| q.quota).sum::<u64>(), 3);
        // Retired items above the limit leave nothing.
        let q = layout.quotas(&items(&[("best_effort", 12)]), 10);
        assert!(q.iter().all(|q| q.quota == 0 && !q.has_room()));
    }

    #[test]
    fn a_rotation_starts_on_the_items_shard_and_visits_every_active_shard_once() {
        let layout = Layout::new(5);
        let mut rng = fastrand::Rng::with_seed(3);
        let order = layout.rotation(Some(2), &mut rng);
        assert_eq!(order[0], Some(2));
        let mut sorted = order.clone();
        sorted.sort();
        assert_eq!(sorted, (0..5).map(Some).collect::<Vec<_>>());
        // An item of a retired shard starts there, then the active ones.
        let order = layout.rotation(None, &mut rng);
        assert_eq!(order.len(), 6);
        assert_eq!(order[0], None);
        assert_eq!(Layout::new(1).rotation(None, &mut rng), vec![None]);
    }

    #[test]
    fn shards_with_room_are_tried_first() {
        let layout = Layout::new(4);
        let q = layout.quotas(&items(&[("best_effort#0", 3), ("best_effort#2", 2)]), 10);
        for seed in 0..20 {
            let order = Layout::reservation_order(&q, &mut fastrand::Rng::with_seed(seed));
            let (first, last) = order.split_at(2);
            let mut first = first.to_vec();
            first.sort();
            assert_eq!(first, vec![1, 3], "shards 1 and 3 have room (seed {seed})");
            let mut last = last.to_vec();
            last.sort();
            assert_eq!(last, vec![0, 2]);
        }
    }

    #[test]
    fn a_raise_goes_to_the_emptiest_active_shard_and_a_lowering_drains_retired_items_first() {
        let layout = Layout::new(3);
        let read = items(&[("best_effort", 4), ("best_effort#0", 4), ("best_effort#1", 1)]);
        assert_eq!(layout.correction_shard(&read, 2), "best_effort#2", "absent counts as 0");
        assert_eq!(layout.correction_shard(&read, -3), "best_effort", "retired, on a tie");
        let read = items(&[("best_effort#0", 1), ("best_effort#1", 6)]);
        assert_eq!(layout.correction_shard(&read, -1), "best_effort#1");
        assert_eq!(Layout::new(1).correction_shard(&BTreeMap::new(), 5), "best_effort");
    }

    #[test]
    fn a_shard_above_its_share_after_the_count_grew_is_frozen_and_the_rest_shares_what_is_left() {
        // Two shards filled to 5 + 5 under a limit of 12, then 8 shards:
        // the even share is 1 or 2, so both are frozen and 2 slots remain.
        let layout = Layout::new(8);
        let q = layout.quotas(&items(&[("best_effort#0", 5), ("best_effort#1", 5)]), 12);
        assert_eq!((q[0].quota, q[1].quota), (0, 0));
        assert_eq!(q.iter().map(|q| q.quota).sum::<u64>(), 2);
        // A shard at its share after the others were frozen is frozen too.
        let layout = Layout::new(3);
        let q = layout.quotas(&items(&[("best_effort#0", 10), ("best_effort#1", 6)]), 21);
        assert_eq!(q.iter().map(|q| q.quota).collect::<Vec<_>>(), vec![0, 0, 5]);
    }

    proptest! {
        /// Whatever the items hold and however many shards: if every
        /// reservation this read allows lands, the items add up to the
        /// limit at most, and to the limit exactly when they held no more
        /// than it; a shard with a quota has room under it.
        #[test]
        fn what_one_read_allows_never_passes_the_limit_and_uses_all_of_it(
            shards in 1u32..=16,
            limit in 0u64..1_000,
            counts in proptest::collection::vec((0u32..40, -5i64..80), 0..10),
        ) {
            let layout = Layout::new(shards);
            let mut read = BTreeMap::new();
            for (k, count) in counts {
                let name = keys::best_effort_name((k < 39).then_some(k));
                *read.entry(name).or_insert(0) += count;
            }
            let held: i128 = read.values().map(|c| i128::from(*c)).sum();
            let quotas = layout.quotas(&read, limit);
            prop_assert_eq!(quotas.len(), shards as usize);
            let active: i128 = quotas.iter().map(|q| i128::from(q.read)).sum();
            // A shard with room grows to its quota; one without stays.
            let reachable = held - active
                + quotas
                    .iter()
                    .map(|q| if q.has_room() { i128::from(q.quota) } else { i128::from(q.read) })
                    .sum::<i128>();
            prop_assert!(quotas.iter().all(|q| q.quota == 0 || q.has_room()));
            if held <= i128::from(limit) {
                prop_assert_eq!(reachable, i128::from(limit));
            } else {
                prop_assert!(quotas.iter().all(|q| !q.has_room()));
            }
        }
    }
}
