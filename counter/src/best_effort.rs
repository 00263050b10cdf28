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
//! hold. A reservation is `count < quota` on its shard.
//!
//! Strict admission's safety rests on one invariant, which every writer
//! keeps (DESIGN §5) and the admission model checks
//! (`counter/tests/admission_model/`): **every shard always covers the live
//! items recorded on it** (`count >= live items whose be_shard names it`). A
//! reservation lands before its put; a delete's `-1` lands on the item's own
//! shard after its soft delete; a repair lowers a shard never below the live
//! items recorded on it ([`Layout::correction`]). And **quotas are computed
//! from reads clamped at 0**: a shard read below 0 lends nothing to the
//! others, so a stale read can only lend less, never more. Then
//! `live <= BE <= limit` at every instant, as with one item. Anything that
//! leaves a shard under its items (a lowering off the wrong shard, a read
//! below 0 lent to the others) breaks the limit.
//!
//! A strict raise (`audit --repair` after best-effort admission left BE
//! under live) moves shards up with no new item, so it shrinks what a read
//! from before it would lend: every reservation is fenced ([`Fence`]) by
//! the raise's epoch, which the raise moves on every item at once.

use std::collections::BTreeMap;

use crate::items::CounterSnapshot;
use crate::keys;

/// Most best-effort shards a stack may configure (`BeShardCount`).
pub const MAX_SHARDS: u32 = 100;

/// Most items one raise writes: DynamoDB's 100 actions per transaction.
pub const MAX_RAISE_ITEMS: usize = 100;

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

/// What a strict reservation is conditioned on besides its quota. A raise
/// ([`Layout::raise`]) sets [`keys::EPOCH`] to one more than the highest it
/// read, on every best-effort item and every active shard (creating the
/// absent ones), in one transaction; a reservation holds only while its
/// shard is still as the read saw it, so none computed from a read before
/// the raise lands after it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fence {
    /// No raise has fenced the scope yet: the shard must carry no epoch.
    Unfenced,
    /// Read at this epoch: the shard must still be at it.
    At(u64),
    /// Absent from a read after raise `epoch`: the shard must still be
    /// absent; the reservation creates it at that epoch.
    Absent(u64),
}

/// What one strict reservation on a shard is conditioned on, all at once
/// in the store's `reserve_best_effort` (one conditional `ADD count 1`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reservation {
    /// `count < quota`; a quota of 0 takes nothing.
    pub quota: u64,
    pub fence: Fence,
}

impl Reservation {
    /// Whether a shard holding `count` at `epoch` (`None`: the attribute is
    /// absent) takes the reservation: the store's condition, which every
    /// store double and the admission model evaluate through this.
    pub fn admits(&self, count: Option<i64>, epoch: Option<u64>) -> bool {
        let room = |count: i64| i128::from(count) < i128::from(self.quota);
        self.quota > 0
            && match self.fence {
                Fence::Unfenced => epoch.is_none() && count.is_none_or(room),
                Fence::At(at) => epoch == Some(at) && count.is_some_and(room),
                Fence::Absent(_) => count.is_none(),
            }
    }
}

/// A strict raise: what it adds to each best-effort item it writes (0 on
/// most), and the epochs it moves them from and to ([`Fence`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Raise {
    pub adds: BTreeMap<String, i64>,
    /// The highest epoch read: every item written must be at most at it.
    pub from: u64,
}

impl Raise {
    /// The epoch every written item is left at.
    pub fn to(&self) -> u64 {
        self.from + 1
    }

    /// Whether it adds nothing: it only creates and fences the shards.
    pub fn fences_only(&self) -> bool {
        self.adds.values().all(|add| *add == 0)
    }
}

impl Quota {
    /// Whether the read left room on this shard (a quota of 0 never has).
    pub fn has_room(&self) -> bool {
        self.quota > 0 && i128::from(self.read) < i128::from(self.quota)
    }

    /// The reservation this quota allows under `fence`.
    pub fn reservation(&self, fence: Fence) -> Reservation {
        Reservation {
            quota: self.quota,
            fence,
        }
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
    ///
    /// What items hold is read clamped at 0: an item below 0 (which only a
    /// broken invariant leaves: every shard covers the live items recorded
    /// on it, or a strict `-1` in flight across a raise) lends nothing to
    /// the others, and an active shard below 0 has its own quota lowered by
    /// as much, so it takes no more than its share; it is never frozen, so
    /// its share is not lent either, even when nothing of it is left.
    /// Without the clamp a stale read of a shard that has gone below 0
    /// since would lend the others slots its items still hold; without the
    /// last rule a read of a shard below 0 lends its share to the others
    /// and a later read, the shard back at 0, gives it the share again
    /// (issue 34 review: live 6 against a limit of 4 over 3 shards with one
    /// `-1` in flight).
    pub fn quotas(&self, items: &BTreeMap<String, i64>, limit: u64) -> Vec<Quota> {
        let held_by = |count: i64| i128::from(count.max(0));
        let retired: i128 = items
            .iter()
            .filter(|(name, _)| !self.is_active(name))
            .map(|(_, count)| held_by(*count))
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
            // What the limit cannot lend: what the retired and frozen items
            // hold above 0.
            let held: i128 = retired
                + quotas
                    .iter()
                    .zip(&frozen)
                    .filter(|(_, f)| **f)
                    .map(|(q, _)| held_by(q.read))
                    .sum::<i128>();
            let rest = u64::try_from((i128::from(limit) - held).max(0)).unwrap_or(u64::MAX);
            let free: Vec<usize> = (0..quotas.len()).filter(|&i| !frozen[i]).collect();
            let n = free.len() as u64;
            let mut full = Vec::new();
            for (j, &i) in free.iter().enumerate() {
                let share = rest / n + u64::from((j as u64) < rest % n);
                // A shard at -2 takes its share from -2: its quota lands 2
                // lower, so it grows by its share and no more.
                let below = u64::try_from(-quotas[i].read.min(0)).unwrap_or(u64::MAX);
                quotas[i].quota = share.saturating_sub(below);
                // At its share: frozen, holding what it holds. A shard below
                // 0 never is, whatever is left of its quota: it keeps its
                // share, which a later read (once it is back at 0) gives it
                // in full, so lending it to the others now would count it
                // twice.
                if i128::from(quotas[i].read) >= i128::from(share) {
                    full.push(i);
                }
            }
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

    /// The fence of each active shard a reservation from one read may be
    /// made on, or `None` when the read is torn across a raise: an active
    /// shard at another epoch than the highest one read (a raise landed
    /// between two of the Query's items, so the quotas could lend what it
    /// took). Then the create reads again. A shard left out takes no
    /// reservation from this read.
    pub fn fences(&self, snapshot: &CounterSnapshot) -> Option<BTreeMap<String, Fence>> {
        let names: Vec<String> = self.active().map(keys::best_effort_name).collect();
        let present = |name: &str| snapshot.best_effort_items.contains_key(name);
        let epoch_of = |name: &str| snapshot.best_effort_epochs.get(name).copied().unwrap_or(0);
        let top = names
            .iter()
            .filter(|n| present(n))
            .map(|n| epoch_of(n))
            .max()
            .unwrap_or(0);
        if names.iter().any(|n| present(n) && epoch_of(n) != top) {
            return None;
        }
        // A raise creates every configured shard (adds of 0) before it adds
        // to any ([`Layout::raise`]). After a raise, a shard read absent was
        // read before one landed (then a present shard's count may be one a
        // raise moved since the absent one was passed), or the shard count
        // grew since: only a reservation on an absent shard, conditioned on
        // its still being absent, is safe from such a read; it creates the
        // shard at the read's epoch, and the next read is whole.
        if top > 0 && names.iter().any(|n| !present(n)) {
            return Some(
                names
                    .into_iter()
                    .filter(|n| !present(n))
                    .map(|name| (name, Fence::Absent(top)))
                    .collect(),
            );
        }
        Some(
            names
                .into_iter()
                .map(|name| {
                    let fence = match (top, present(&name)) {
                        (0, _) => Fence::Unfenced,
                        (epoch, true) => Fence::At(epoch),
                        (epoch, false) => Fence::Absent(epoch),
                    };
                    (name, fence)
                })
                .collect(),
        )
    }

    /// Whether a raise has fenced the scope and an active shard is absent
    /// from `snapshot` (`BeShardCount` grew since): a read may then reserve
    /// only on the absent shards ([`Layout::fences`]), whose quotas can be
    /// 0 while the others have room, so creates are refused below the
    /// limit until a raise of 0 creates them fenced. A raise counts as
    /// [`Layout::fences`] counts it: on a present active shard, not on a
    /// retired item alone.
    pub fn absent_since_a_raise(&self, snapshot: &CounterSnapshot) -> bool {
        self.fences(snapshot)
            .is_some_and(|fences| fences.values().any(|fence| matches!(fence, Fence::Absent(_))))
    }

    /// How far the active shards of `items` fall short of the live items
    /// recorded on them (`live`), added up: 0 when every shard covers its
    /// items. After best-effort admission (whose writes may land off their
    /// item's shard) the sum can be right and a shard still short.
    pub fn shortfall(&self, items: &BTreeMap<String, i64>, live: &BTreeMap<String, u64>) -> i64 {
        self.active()
            .map(keys::best_effort_name)
            .map(|name| {
                let recorded = i64::try_from(live.get(&name).copied().unwrap_or(0)).unwrap_or(i64::MAX);
                (recorded - items.get(&name).copied().unwrap_or(0)).max(0)
            })
            .sum()
    }

    /// What the retired items of `items` (those no active shard names) are
    /// below 0, added up. Such an item (a best-effort `+1` rotated off it,
    /// or a strict `-1` across a raise, before it retired) holds nothing
    /// the quotas count, yet hides from the sum a slot an active shard
    /// holds: with BE equal to live a strict scope can then be refused
    /// below its limit for good (issue 34's third review).
    pub fn retired_below_zero(&self, items: &BTreeMap<String, i64>) -> i64 {
        items
            .iter()
            .filter(|(name, _)| !self.is_active(name))
            .map(|(_, count)| -(*count).min(0))
            .sum()
    }

    /// Strict admission's raise of BE by `delta >= 0` from `snapshot`: an
    /// add for every active shard, so that the one transaction moves the
    /// epoch of all of them. Retired items are not raised, but for one
    /// below 0, filled back to 0 first ([`Layout::retired_below_zero`]):
    /// the quotas hold what they read of a retired item clamped at 0, so
    /// that changes no quota; the rest of `delta` goes to the active
    /// shards. While
    /// an active shard is absent the raise only creates the shards (adds of
    /// 0, [`Raise::fences_only`]): a read that saw a shard absent then
    /// assumed it held 0, which stays true; the next raise adds, spread as
    /// [`Layout::correction`] does (`live`: the live items recorded on each
    /// item). A `delta` of 0 only fences.
    pub fn raise(&self, snapshot: &CounterSnapshot, live: &BTreeMap<String, u64>, delta: i64) -> Raise {
        let read = &snapshot.best_effort_items;
        let active: Vec<String> = self.active().map(keys::best_effort_name).collect();
        let mut adds: BTreeMap<String, i64> = active.iter().map(|name| (name.clone(), 0)).collect();
        if active.iter().all(|name| read.contains_key(name)) {
            let mut left = delta.max(0);
            for (name, count) in read.iter().filter(|(name, count)| !self.is_active(name) && **count < 0) {
                let fill = (-count).min(left);
                // Within one transaction: at the most shards a retired item
                // below 0 stays (its part of `delta` goes to no shard).
                if fill > 0 && adds.len() < MAX_RAISE_ITEMS {
                    adds.insert(name.clone(), fill);
                }
                left -= fill;
            }
            for (name, count) in self.correction(read, live, left) {
                if self.is_active(&name) {
                    adds.insert(name.clone(), (count - read.get(&name).copied().unwrap_or(0)).max(0));
                }
            }
        }
        Raise {
            from: adds
                .keys()
                .filter_map(|name| snapshot.best_effort_epochs.get(name))
                .copied()
                .max()
                .unwrap_or(0),
            adds,
        }
    }

    /// The counts a repair writes to the best-effort items to move their
    /// sum by `delta`: every item of `items` (each best-effort item read and
    /// its count), most unchanged, so the repair holds only if none of them
    /// moved. `live` holds, per item name, the live items recorded on it
    /// (their `be_shard`).
    ///
    /// A lowering takes from each item only what it holds above its live
    /// items, the largest excess first (retired items first on a tie, so
    /// they drain): no item goes below the live items recorded on it, the
    /// invariant strict admission rests on. (The excesses add up to at
    /// least what a lowering to the live count takes; were they short, it
    /// lowers less, the safe direction.) A raise first fills the active
    /// shards below their live items, the largest gap first, then goes to
    /// the active shard with the lowest count; never to a retired item
    /// (retired items only go down, which the quotas rely on).
    pub fn correction(
        &self,
        items: &BTreeMap<String, i64>,
        live: &BTreeMap<String, u64>,
        delta: i64,
    ) -> BTreeMap<String, i64> {
        let mut counts = items.clone();
        let live_on = |name: &str| i64::try_from(live.get(name).copied().unwrap_or(0)).unwrap_or(i64::MAX);
        if delta < 0 {
            let mut excess: Vec<(i64, bool, String)> = counts
                .iter()
                .map(|(name, count)| (count.saturating_sub(live_on(name)), !self.is_active(name), name.clone()))
                .filter(|(over, _, _)| *over > 0)
                .collect();
            excess.sort_by(|a, b| (b.0, b.1).cmp(&(a.0, a.1)).then_with(|| a.2.cmp(&b.2)));
            let mut left = delta.unsigned_abs();
            for (over, _, name) in excess {
                let take = over.unsigned_abs().min(left);
                *counts.get_mut(&name).expect("read") -= i64::try_from(take).unwrap_or(i64::MAX);
                left -= take;
            }
            return counts;
        }
        let mut left = delta;
        let active: Vec<String> = self.active().map(keys::best_effort_name).collect();
        let mut gaps: Vec<(i64, String)> = active
            .iter()
            .map(|name| (live_on(name) - counts.get(name).copied().unwrap_or(0), name.clone()))
            .filter(|(gap, _)| *gap > 0)
            .collect();
        gaps.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.cmp(&b.1)));
        for (gap, name) in gaps {
            let give = gap.min(left);
            *counts.entry(name).or_default() += give;
            left -= give;
        }
        if left > 0 {
            let emptiest = active
                .into_iter()
                .min_by_key(|name| counts.get(name).copied().unwrap_or(0))
                .expect("at least one active shard");
            *counts.entry(emptiest).or_default() += left;
        }
        counts
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

    fn live(pairs: &[(&str, u64)]) -> BTreeMap<String, u64> {
        pairs.iter().map(|(n, c)| ((*n).to_owned(), *c)).collect()
    }

    #[test]
    fn a_raise_fills_shards_below_their_items_then_the_emptiest_and_never_a_retired_item() {
        let layout = Layout::new(3);
        let read = items(&[("best_effort", 4), ("best_effort#0", 4), ("best_effort#1", 1)]);
        let none = BTreeMap::new();
        let raised = layout.correction(&read, &none, 2);
        assert_eq!(raised["best_effort#2"], 2, "absent counts as 0");
        assert_eq!(
            (raised["best_effort"], raised["best_effort#0"], raised["best_effort#1"]),
            (4, 4, 1)
        );
        // #1 holds 1 for its 3 live items: it gets 2 first, the rest goes
        // to the emptiest; the retired item under its items is not raised.
        let raised = layout.correction(&read, &live(&[("best_effort#1", 3), ("best_effort", 6)]), 3);
        assert_eq!(
            raised,
            items(&[
                ("best_effort", 4),
                ("best_effort#0", 4),
                ("best_effort#1", 3),
                ("best_effort#2", 1)
            ])
        );
        assert_eq!(
            Layout::new(1).correction(&BTreeMap::new(), &none, 5),
            items(&[("best_effort", 5)])
        );
    }

    #[test]
    fn a_lowering_never_takes_a_shard_below_the_live_items_recorded_on_it() {
        // The trace: #1 holds w1's reservation and w1 is live on it;
        // #0 holds a slot kept by an ambiguous put. Lowering by 1 takes it
        // off #0 (the fullest-shard rule took it off #1, on the tie).
        let layout = Layout::new(2);
        let read = items(&[("best_effort#0", 1), ("best_effort#1", 1)]);
        let lowered = layout.correction(&read, &live(&[("best_effort#1", 1)]), -1);
        assert_eq!(lowered, items(&[("best_effort#0", 0), ("best_effort#1", 1)]));
        // The excess per item, largest first, retired items first on a tie.
        let layout = Layout::new(3);
        let read = items(&[("best_effort", 4), ("best_effort#0", 6), ("best_effort#1", 3)]);
        let on = live(&[("best_effort", 1), ("best_effort#0", 3), ("best_effort#1", 3)]);
        let lowered = layout.correction(&read, &on, -5);
        assert_eq!(
            lowered,
            items(&[("best_effort", 1), ("best_effort#0", 4), ("best_effort#1", 3)])
        );
        // Whatever is asked, no item goes below its live items.
        let lowered = layout.correction(&read, &on, -100);
        assert_eq!(
            lowered,
            items(&[("best_effort", 1), ("best_effort#0", 3), ("best_effort#1", 3)])
        );
    }

    #[test]
    fn a_shard_read_below_zero_lends_nothing_to_the_others() {
        // The trace: B reads (1, -1) under a limit of 2. Lending the
        // -1 gave #0 a quota of 3; clamped, #0 (at its share) is frozen and
        // #1 may grow by its share, 1, to 0.
        let layout = Layout::new(2);
        let q = layout.quotas(&items(&[("best_effort#0", 1), ("best_effort#1", -1)]), 2);
        assert_eq!(q.iter().map(|q| q.quota).collect::<Vec<_>>(), vec![0, 0]);
        assert!(q.iter().all(|q| !q.has_room()));
        // Limit 10, (1, -1): the shares are 5 and 5, #1's quota 4 (5 from -1).
        let q = layout.quotas(&items(&[("best_effort#0", 1), ("best_effort#1", -1)]), 10);
        assert_eq!(q.iter().map(|q| q.quota).collect::<Vec<_>>(), vec![5, 4]);
        // A retired item below 0 lends nothing either.
        let q = layout.quotas(&items(&[("best_effort", -3)]), 4);
        assert_eq!(q.iter().map(|q| q.quota).sum::<u64>(), 4);
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
        /// Whatever the items hold and however many shards: the slots one
        /// read grants (each shard with room grown to its quota) never pass
        /// the limit less what the items hold above 0 (an item below 0
        /// lends nothing), and use all of it when no item is below 0 and
        /// they hold no more than the limit; a shard with a quota has room
        /// under it.
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
            let above: i128 = read.values().map(|c| i128::from((*c).max(0))).sum();
            let below_zero = read.values().any(|c| *c < 0);
            let quotas = layout.quotas(&read, limit);
            prop_assert_eq!(quotas.len(), shards as usize);
            let granted: i128 = quotas
                .iter()
                .filter(|q| q.has_room())
                .map(|q| i128::from(q.quota) - i128::from(q.read))
                .sum();
            prop_assert!(quotas.iter().all(|q| q.quota == 0 || q.has_room()));
            prop_assert!(granted <= (i128::from(limit) - above).max(0), "granted {}", granted);
            if above <= i128::from(limit) && !below_zero {
                prop_assert_eq!(granted, i128::from(limit) - above);
            } else if above > i128::from(limit) {
                prop_assert!(quotas.iter().all(|q| !q.has_room()));
            }
        }

        /// A repair's correction moves the sum by exactly what was asked
        /// when it can, and a lowering never takes an item below the live
        /// items recorded on it nor below what it held less its excess.
        #[test]
        fn a_correction_lands_on_its_target_and_never_uncovers_an_item(
            shards in 1u32..=6,
            counts in proptest::collection::vec((0u32..8, 0i64..8, 0u64..8), 0..8),
            raise in 0i64..10,
        ) {
            let layout = Layout::new(shards);
            let (mut read, mut on) = (BTreeMap::new(), BTreeMap::new());
            for (k, count, live) in counts {
                let name = keys::best_effort_name((k < 7).then_some(k));
                *read.entry(name.clone()).or_insert(0) += count + i64::try_from(live).unwrap();
                *on.entry(name).or_insert(0) += live;
            }
            let sum: i64 = read.values().sum();
            let live: i64 = on.values().map(|c| i64::try_from(*c).unwrap()).sum();
            // Lowering to the live count: exact, and every item still covers its items.
            let lowered = layout.correction(&read, &on, live - sum);
            prop_assert_eq!(lowered.values().sum::<i64>(), live);
            for (name, count) in &lowered {
                prop_assert!(*count >= i64::try_from(on.get(name).copied().unwrap_or(0)).unwrap());
            }
            // A raise: exact, only active shards move, and only up.
            let raised = layout.correction(&read, &on, raise);
            prop_assert_eq!(raised.values().sum::<i64>(), sum + raise);
            for (name, count) in &raised {
                let before = read.get(name).copied().unwrap_or(0);
                prop_assert!(*count >= before);
                prop_assert!(*count == before || layout.is_active(name));
            }
        }
    }

    fn snapshot(items_read: &[(&str, i64, Option<u64>)]) -> CounterSnapshot {
        CounterSnapshot::from_items(items_read.iter().map(|(name, count, epoch)| crate::items::CounterItem {
            scope: "acct".into(),
            name: (*name).into(),
            count: *count,
            version: 1,
            updated_at: 0,
            epoch: *epoch,
            limit: None,
            share: None,
            rev: None,
            share_rev: None,
        }))
    }

    #[test]
    fn a_read_before_any_raise_is_unfenced_and_one_after_is_fenced_at_its_epoch() {
        let layout = Layout::new(2);
        let before = layout.fences(&snapshot(&[("best_effort#0", 3, None)])).unwrap();
        assert!(before.values().all(|f| *f == Fence::Unfenced), "{before:?}");
        let after = layout
            .fences(&snapshot(&[
                ("best_effort#0", 3, Some(2)),
                ("best_effort#1", 0, Some(2)),
            ]))
            .unwrap();
        assert!(after.values().all(|f| *f == Fence::At(2)), "{after:?}");
    }

    /// Issue 34's third review: a raise seen only on a retired item (the
    /// single `best_effort`, raised, then `BeShardCount` 8) fences nothing,
    /// so no shard is absent *since a raise*; one seen on a present active
    /// shard leaves the others absent since it.
    #[test]
    fn shards_are_absent_since_a_raise_only_after_one_on_an_active_shard() {
        let raised_unsharded = snapshot(&[("best_effort", 3, Some(1))]);
        assert!(!Layout::new(8).absent_since_a_raise(&raised_unsharded));
        assert!(!Layout::new(1).absent_since_a_raise(&raised_unsharded));
        let grown = snapshot(&[("best_effort#0", 3, Some(1)), ("best_effort#1", 0, Some(1))]);
        assert!(Layout::new(3).absent_since_a_raise(&grown));
        assert!(!Layout::new(2).absent_since_a_raise(&grown));
    }

    /// Review of issue 34 D2: the retired `best_effort` read before a raise,
    /// `#0` passed while still absent, the raise (which created `#0` and put
    /// 6 on it) landing, then `#1` read after it. Taken for whole, the read
    /// gives `#1` a quota of 4 where its true quota is 2.
    #[test]
    fn a_read_torn_across_a_raise_is_read_again_also_when_a_shard_was_absent() {
        let layout = Layout::new(2);
        assert_eq!(
            layout.fences(&snapshot(&[("best_effort", 2, None), ("best_effort#1", 0, Some(1))])),
            Some(BTreeMap::from([("best_effort#0".to_owned(), Fence::Absent(1))])),
            "only the absent shard, and only while it is still absent"
        );
        assert_eq!(
            layout.fences(&snapshot(&[("best_effort#0", 1, None), ("best_effort#1", 0, Some(1))])),
            None,
            "one shard read before the raise, one after"
        );
    }

    #[test]
    fn a_raise_creates_the_absent_shards_first_then_adds_and_leaves_retired_items_alone() {
        let layout = Layout::new(2);
        let live = BTreeMap::from([("best_effort".to_owned(), 8)]);
        let first = layout.raise(&snapshot(&[("best_effort", 2, None)]), &live, 6);
        assert!(first.fences_only(), "{first:?}");
        assert_eq!(
            first.adds.keys().collect::<Vec<_>>(),
            ["best_effort#0", "best_effort#1"]
        );
        assert_eq!((first.from, first.to()), (0, 1));
        let second = layout.raise(
            &snapshot(&[
                ("best_effort", 2, None),
                ("best_effort#0", 0, Some(1)),
                ("best_effort#1", 0, Some(1)),
            ]),
            &live,
            6,
        );
        assert_eq!(second.adds.values().sum::<i64>(), 6, "{second:?}");
        assert!(
            !second.adds.contains_key("best_effort"),
            "a retired item is never raised nor fenced"
        );
        assert_eq!(second.to(), 2);
        // At most one action per configured shard, and retired items below
        // 0 only within a transaction's 100 actions, even at the most
        // shards, whatever retired items remain.
        let most = Layout::new(MAX_SHARDS);
        for retired in [5, -1] {
            assert_eq!(
                most.raise(&snapshot(&[("best_effort", retired, None)]), &live, 1)
                    .adds
                    .len(),
                MAX_RAISE_ITEMS
            );
        }
        let names: Vec<String> = (0..MAX_SHARDS).map(|i| keys::best_effort_name(Some(i))).collect();
        let mut items: Vec<(&str, i64, Option<u64>)> = names.iter().map(|n| (n.as_str(), 0, None)).collect();
        items.push(("best_effort", -1, None));
        let full = most.raise(&snapshot(&items), &live, 2);
        assert_eq!((full.adds.len(), full.adds.get("best_effort")), (MAX_RAISE_ITEMS, None));
        items.remove(MAX_SHARDS as usize - 1);
        let fewer = Layout::new(MAX_SHARDS - 1);
        let filled = fewer.raise(&snapshot(&items), &live, 2);
        assert_eq!(
            (filled.adds.len(), filled.adds.get("best_effort")),
            (MAX_RAISE_ITEMS, Some(&1))
        );
    }
}
