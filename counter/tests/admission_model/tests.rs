//! The admission model's runs: each checks every state of one
//! configuration and asserts what it finds (or, on legacy rules, that it
//! finds the defect), printing states explored and the traces.

use super::*;
use crate::check::{Run, check, check_until};

fn model(admission: Admission, rules: Rules, shards: u32, limit: u64, change: Change) -> AdmissionModel {
    AdmissionModel {
        admission,
        rules,
        shards,
        limit,
        change,
        switch: false,
        rollout: false,
        bound_at_change: false,
        torn_reads: false,
        best_effort_sends: hybrid_counter::store::sends::BEST_EFFORT,
        memo: Arc::default(),
    }
}

fn strict(rules: Rules, limit: u64, change: Change) -> AdmissionModel {
    model(Admission::Strict, rules, 3, limit, change)
}

fn torn(model: AdmissionModel) -> AdmissionModel {
    AdmissionModel {
        torn_reads: true,
        ..model
    }
}

fn assert_safe(run: &Run, change: bool) {
    assert!(run.failures.is_empty(), "{}: {:?}", run.what, run.found);
    run.assert_found(FULL);
    run.assert_found(LOWERED);
    if change {
        // The documented window is real, and bounded (an `always`).
        run.assert_found(WINDOW_USED);
    }
}

/// Every interleaving of 3 clients over 3 shards: reads gone stale (and
/// torn: one item at a time, others writing in between), reservations,
/// ambiguous and refused puts, deletes with lost `-1`s, audits
/// repairing at any moment, and one change of the shard count (3 to 2,
/// 2 to 3) or of the limit (4 to 3), those with snapshot reads. Never
/// more live items than the limit outside the window, never a shard
/// under its items.
#[test]
fn strict_admission_never_overshoots_and_every_shard_covers_its_items() {
    let mut states = 0;
    for limit in 1..=4 {
        let run = check(
            &format!("strict, limit {limit}, torn reads"),
            torn(strict(Rules::CURRENT, limit, Change::None)),
            false,
        );
        assert_safe(&run, false);
        states += run.states;
    }
    for (what, model) in [
        ("shard count 3 to 2", strict(Rules::CURRENT, 4, Change::Shards(2))),
        (
            "shard count 2 to 3",
            model(Admission::Strict, Rules::CURRENT, 2, 4, Change::Shards(3)),
        ),
        ("limit 4 to 3", strict(Rules::CURRENT, 4, Change::Limit(3))),
    ] {
        let run = check(&format!("strict, limit 4, {what}"), model, false);
        assert_safe(&run, true);
        states += run.states;
    }
    eprintln!("admission model, strict: {states} states in all");
}

/// The unsharded default (`BeShardCount = 1`): strict admission on the
/// single `best_effort` item through the same request-path decisions
/// ([`Layout::fences`], [`Layout::quotas`]: one quota, the limit less
/// what retired items hold), and the audit's raise at once. Then the
/// `1 -> N` reshard: `best_effort` stays as a retired item (it only goes
/// down) and the new shards `best_effort#0..` appear, reads made under
/// one shard count reserving after the change. The same properties: the
/// limit outside the window, every item covering its live items.
#[test]
fn unsharded_strict_admission_and_the_reshard_to_shards_never_overshoot() {
    let mut states = 0;
    for limit in 1..=3 {
        let run = check(
            &format!("strict, unsharded, limit {limit}, torn reads"),
            torn(model(Admission::Strict, Rules::CURRENT, 1, limit, Change::None)),
            false,
        );
        assert_safe(&run, false);
        states += run.states;
    }
    for (what, model) in [
        (
            "shard count 1 to 2",
            model(Admission::Strict, Rules::CURRENT, 1, 3, Change::Shards(2)),
        ),
        (
            "shard count 2 to 1",
            model(Admission::Strict, Rules::CURRENT, 2, 3, Change::Shards(1)),
        ),
        (
            "shard count 1 to 3",
            model(Admission::Strict, Rules::CURRENT, 1, 3, Change::Shards(3)),
        ),
    ] {
        let run = check(&format!("strict, limit 3, {what}"), model, false);
        assert_safe(&run, true);
        states += run.states;
    }
    let run = check(
        "best-effort, unsharded, limit 2, shard count 1 to 2",
        model(Admission::BestEffort, Rules::CURRENT, 1, 2, Change::Shards(2)),
        false,
    );
    assert!(run.failures.is_empty(), "{}: {:?}", run.what, run.found);
    run.assert_found(UNDERCOUNT);
    run.assert_found(RAISED);
    states += run.states;
    // The switch to strict on the single item: the audit plans the raise
    // in every state. The limit breaks as in the sharded runs (the
    // documented exception: a reservation in flight during the raise is
    // taken for a live item); the trace is printed. Unsharded, a scope
    // whose `+1`s were all lost has no `best_effort` item, and the first
    // raise only creates it ([`Raise::fences_only`]); a reservation that
    // lands first creates it too and the raise adds nothing.
    let run = check_until(
        "switch to strict, unsharded, limit 2",
        switched(Rules::CURRENT, 1, 2),
        HasDiscoveries::AnyOf([RAISE_PLANNED].into()),
    );
    assert_holds(&run);
    run.assert_found(STRICT_HOLDS);
    states += run.states;
    eprintln!("admission model, unsharded: {states} states in all");
}

fn rollout(model: AdmissionModel) -> AdmissionModel {
    AdmissionModel { rollout: true, ..model }
}

/// A rollout window instead of an atomic change (issue 34): from the
/// change until the window closes (an action), each request runs the old
/// or the new configuration (shard count or limit), side by side. Strict
/// admission stays within the limit plus the documented bound: the most
/// creates in flight at any instant of the window. Here the reshard from
/// unsharded (129,996 states); the ignored test below runs the others.
#[test]
fn in_a_rollout_window_strict_admission_passes_the_limit_by_at_most_the_creates_in_flight() {
    let run = check(
        "strict, limit 3, rollout of shard count 1 to 2",
        rollout(model(Admission::Strict, Rules::CURRENT, 1, 3, Change::Shards(2))),
        false,
    );
    assert_safe(&run, true);
}

/// Issue 34 D3 on the bound before it: the creates in flight at the
/// change do not bound what a rollout window passes the limit by. The
/// trace (limit 3, `BeShardCount` 1 to 2, 98,800 states): two creates
/// fill `best_effort` to 2 and put; the change starts with no create in
/// flight (bound 0). A create under the new configuration reads
/// `best_effort` 2 as retired: quota 1 on `best_effort#0`; one under the
/// old reads quota 3 on `best_effort`. Both reserve and put: live 4.
/// (The simulation's seed 1592600407 finds the same, 2 to 8 shards.)
#[test]
fn the_bound_of_the_creates_in_flight_at_the_change_is_broken_by_a_rollout() {
    let run = check(
        "strict, limit 3, rollout of shard count 1 to 2, the bound at the change (before D3)",
        AdmissionModel {
            bound_at_change: true,
            ..rollout(model(Admission::Strict, Rules::CURRENT, 1, 3, Change::Shards(2)))
        },
        true,
    );
    assert!(run.failures.contains(&OVERSHOOT), "{:?}", run.failures);
    print(&run, OVERSHOOT);
}

/// The other rollouts (3 to 2 shards, 2 to 1, limit 3 to 2: 128,470,
/// 129,411 and 159,910 states, about 16 s): within the bound. And the
/// switch to strict rolled out (a request runs best-effort or strict
/// admission until the window closes; the limit is checked once a raise
/// lands after it closed; 1,783,058 states, 78 s): the audit plans the
/// raise in every state, and the limit breaks only as with the atomic
/// switch, the documented exception (docs/design.md: requests in flight
/// during the raise leave it short by their number). The trace found:
/// best-effort admission leaves live 3, BE 0; after the switch and the
/// window, two reservations are in flight (BE -1 + 2 = 1 for live 2)
/// when the audit raises by 1 (BE 2); both puts are refused and give
/// their slots back (BE 0 for live 2), and strict admits two more.
#[test]
#[ignore = "about 2 minutes"]
fn the_other_rollout_windows() {
    for (what, model) in [
        ("shard count 3 to 2", strict(Rules::CURRENT, 3, Change::Shards(2))),
        (
            "shard count 2 to 1",
            model(Admission::Strict, Rules::CURRENT, 2, 3, Change::Shards(1)),
        ),
        ("limit 3 to 2", strict(Rules::CURRENT, 3, Change::Limit(2))),
    ] {
        let run = check(&format!("strict, limit 3, rollout of {what}"), rollout(model), false);
        assert_safe(&run, true);
    }
    let run = check_until(
        "switch to strict rolled out, unsharded, limit 2",
        rollout(switched(Rules::CURRENT, 1, 2)),
        HasDiscoveries::AnyOf([RAISE_PLANNED].into()),
    );
    for failure in &run.failures {
        print(&run, failure);
    }
    assert!(run.failures.is_empty(), "{}: {:?}", run.what, run.found);
    run.assert_found(STRICT_HOLDS);
}

/// The runs too long for every `cargo test` (702 s on 2 shared
/// cores, before the reshard from unsharded was added: about 75 s more):
/// the configuration changes with torn reads (also `1 -> 2` shards), the shard count
/// growing from 3 to 4, the limit raised from 3 to 4, best-effort
/// admission under a limit of 3 (`cargo test -p hybrid-counter --test
/// admission_model -- --ignored the_longer_runs`).
#[test]
#[ignore = "about 12 minutes"]
fn the_longer_runs_pass_too() {
    for (what, model, change) in [
        (
            "strict, limit 4, shard count 3 to 2, torn reads",
            torn(strict(Rules::CURRENT, 4, Change::Shards(2))),
            true,
        ),
        (
            "strict, limit 4, shard count 2 to 3, torn reads",
            torn(model(Admission::Strict, Rules::CURRENT, 2, 4, Change::Shards(3))),
            true,
        ),
        (
            "strict, limit 4 to 3, torn reads",
            torn(strict(Rules::CURRENT, 4, Change::Limit(3))),
            true,
        ),
        (
            "strict, limit 4, shard count 3 to 4",
            strict(Rules::CURRENT, 4, Change::Shards(4)),
            true,
        ),
        (
            "strict, limit 3 to 4",
            strict(Rules::CURRENT, 3, Change::Limit(4)),
            false,
        ),
        (
            "strict, limit 3, shard count 1 to 2, torn reads (5,312,564 states, 74 s)",
            torn(model(Admission::Strict, Rules::CURRENT, 1, 3, Change::Shards(2))),
            true,
        ),
    ] {
        assert_safe(&check(what, model, false), change);
    }
    let run = check(
        "best-effort, limit 3, limit 3 to 2",
        model(Admission::BestEffort, Rules::CURRENT, 3, 3, Change::Limit(2)),
        false,
    );
    assert!(run.failures.is_empty(), "{}: {:?}", run.what, run.found);
}

/// The rules before issue 26 overshoot: the whole lowering off the
/// fullest shard leaves a shard under its live items, its deletes take
/// it below 0, and a read lends that to the other shards. The trace
/// printed (limit 2): two creates reserve on #0 and #1; #0's put fails
/// ambiguously (its slot kept), #1's lands: (1, 1) for one live item,
/// on #1. The audit lowers BE by 1 off #1 (the fullest, on a tie):
/// (1, 0) while the item is live on #1. The item's delete takes #1 to
/// -1; a read of (1, -1) lends that -1: quota 2 on #2 under a limit of
/// 2. One create fills #1 again, two fill #2: three live items.
#[test]
fn the_rules_before_issue_26_let_strict_admission_overshoot() {
    let run = check(
        "strict, limit 2, rules before issue 26",
        strict(Rules::LEGACY, 2, Change::None),
        true,
    );
    let trace = &run.found[OVERSHOOT];
    eprintln!("the overshoot, a shortest trace:\n{}", trace.join("\n"));
    assert!(run.failures.contains(&COVERED), "{:?}", run.failures);
    // The repair alone is enough to overshoot a larger limit (with the
    // quotas of issue 26, which lent a share below 0: with today's, the
    // old repair leaves shards under their items, but no overshoot in
    // these states); the quotas before issue 26 overshoot nothing once no
    // shard is under its items.
    let repair_only = Rules {
        legacy_correction: true,
        ..Rules::LENDING_SHARES
    };
    let run = check(
        "strict, limit 4, the old repair only",
        strict(repair_only, 4, Change::None),
        true,
    );
    assert!(run.failures.contains(&OVERSHOOT), "{:?}", run.failures);
    let quotas_only = Rules {
        legacy_correction: false,
        ..Rules::LEGACY
    };
    let run = check(
        "strict, limit 4, the old quotas only",
        strict(quotas_only, 4, Change::None),
        false,
    );
    assert!(run.failures.is_empty(), "{:?}", run.found);
}

/// Best-effort admission: BE never counts above the live items, however
/// its `+1`s are lost, its `-1`s land on other shards and its repairs
/// interleave, also across a shard count change.
#[test]
fn best_effort_admission_never_counts_above_live() {
    for (what, change) in [("no change", Change::None), ("shard count 3 to 2", Change::Shards(2))] {
        let run = check(
            &format!("best-effort, limit 2, {what}"),
            model(Admission::BestEffort, Rules::CURRENT, 3, 2, change),
            false,
        );
        assert!(run.failures.is_empty(), "{}: {:?}", run.what, run.found);
        run.assert_found(UNDERCOUNT);
        run.assert_found(RAISED);
    }
}

/// Best-effort admission (lost `+1`s leave BE below live), then the
/// switch to strict at any step, over `shards` shards.
fn switched(rules: Rules, shards: u32, limit: u64) -> AdmissionModel {
    AdmissionModel {
        switch: true,
        ..model(Admission::Strict, rules, shards, limit, Change::None)
    }
}

/// No `always` property broken; each broken one's trace printed.
fn assert_holds(run: &Run) {
    for failure in &run.failures {
        print(run, failure);
    }
    assert!(run.failures.is_empty(), "{}: {:?}", run.what, run.failures);
}

fn print(run: &Run, property: &str) {
    eprintln!(
        "{}: {property}, a shortest trace:\n{}",
        run.what,
        run.found[property].join("\n")
    );
}

/// Issue 34 D2 on today's rules: switched from best-effort to strict
/// with BE below live, the audit plans a (fenced) raise in every state,
/// busy scope or not (every state of limit 1 over 2 shards). Strict
/// admission passes the limit after the raise only by the documented
/// exception, bounded: the strict requests between their two writes (a
/// reservation's put, a soft delete's `-1`) at any instant from the
/// audit's read to the raise's landing (`in_flight_at_raise`), until the
/// next repair lands; checked, 0 violations (unsharded, limit 2, too).
///
/// Not an `always`: every shard covering its live items (up to that
/// bound) once raised. A shortest trace breaking it (limit 1, 2 shards):
/// best-effort leaves live (3, 0), BE (0, 0) (two `+1`s lost), switch;
/// a create reserves on #0 (BE (1, 0)); the audit reads (#1 absent) and
/// plans a raise that only creates the shards; the third `+1` lands on
/// #1: BE (1, 1); two strict deletes on #0 land: live (1, 0), BE
/// (-1, 1); a create reserves on #0: BE (0, 1); the shards-only raise
/// lands (sum 1 covers live 1: `raised`, no request in flight at its
/// landing but the reservation); the next audit plans +1 on #0; the
/// reservation's put is refused (BE (-1, 1)), another create reserves
/// on #0 and its put lands: live (2, 0), BE (-1, 1): #0 short by 3.
/// (Live 2 is within the bound; the sum's raise lands next.) So the
/// `UNCOVERED` discovery stays a `sometimes`.
#[test]
fn after_the_switch_to_strict_the_raise_is_planned_at_once_and_the_limit_holds_but_for_the_requests_in_flight() {
    let run = check_until(
        "switch to strict, 2 shards, limit 1",
        switched(Rules::CURRENT, 2, 1),
        HasDiscoveries::AnyOf([RAISE_PLANNED].into()),
    );
    assert_holds(&run);
    run.assert_found(UNDERCOUNT);
    run.assert_found(RAISED);
    run.assert_found(STRICT_HOLDS);
}

/// Issue 34: once a fenced raise has landed after the switch (no
/// best-effort request left), strict admission passes the limit by at most
/// the documented bound (`in_flight_at_raise`: the strict requests between
/// their writes from the audit's read to the raise's landing). Too big for
/// `make test` (limit 2 over 2 shards: 13,109,434 states with snapshot
/// reads, 110 s; 107,668,028 with torn reads, 528 s, in a release build
/// on 2 shared cores, at e07babb); run by hand with `--release` after any change to
/// admission or the raise.
///
/// With quotas that lend the share of a shard read below 0 to the others
/// ([`Rules::LENDING_SHARES`], before issue 34's review) the run with
/// snapshot reads breaks it, by 2 for one request in flight (found after
/// 11,451,125 states, 84 s). Best-effort leaves live (1, 0), BE (0, -1) (a delete's
/// `-1` landed on #1, the delete stopped). Switch to strict. A strict
/// delete soft-deletes the item (live (0, 0), its `-1` in flight: the
/// bound is 1). The audit reads BE -1 < live 0 and raises by 1 onto #1,
/// epochs 1: BE (0, 0). Two creates read (0, 0) (quotas 1 and 1). The
/// delete's `-1` lands: BE (-1, 0). Two more creates read (-1, 0): #0 has
/// nothing left of its share and lends it to #1 (quotas 0 and 2), and both
/// reserve on #1; the first two reserve on #0 (-1 -> 0 -> 1); every put
/// lands: live (2, 2), 4 > 2 + 1. `request::tests::a_shard_gone_below_\
/// zero_since_the_read_lends_nothing_past_the_limit` replays it on
/// the request path, and `request::tests::a_shard_read_below_zero_lends_\
/// its_share_to_no_other_shard` the review's 3-shard variant.
///
/// An earlier trace with torn reads (a Query reading #0 absent before a
/// raise that creates it and #1 after it) is closed by [`Layout::fences`]
/// fencing only the absent shards of such a read.
#[test]
#[ignore = "millions of states: run by hand with --release (see its doc)"]
fn after_the_switch_to_strict_a_fenced_raise_lands_at_once_and_the_limit_holds() {
    let mut failed = Vec::new();
    for (what, model) in [
        ("2 shards, limit 2", switched(Rules::CURRENT, 2, 2)),
        ("2 shards, limit 2, torn reads", torn(switched(Rules::CURRENT, 2, 2))),
    ] {
        let run = check(&format!("switch to strict, {what}"), model, false);
        for failure in &run.failures {
            print(&run, failure);
        }
        if run.failures.is_empty() {
            run.assert_found(STRICT_HOLDS);
        } else {
            failed.push((run.what, run.failures));
        }
    }
    assert!(failed.is_empty(), "{failed:?}");
}

/// The run above with the quotas before issue 34's review finds the
/// overshoot (its doc).
#[test]
#[ignore = "millions of states: run by hand with --release"]
fn lending_the_share_of_a_shard_below_zero_passes_the_limit_after_the_switch() {
    let run = check(
        "switch to strict, 2 shards, limit 2, shares below 0 lent",
        switched(Rules::LENDING_SHARES, 2, 2),
        false,
    );
    for failure in &run.failures {
        print(&run, failure);
    }
    assert!(!run.failures.is_empty(), "no violation found with the shares lent");
}

/// The raise before e03c33a. Held back until the scope is quiet, the
/// audit plans nothing while a request is in flight (D2: a busy scope
/// stays under-reserved). Unfenced (and not held back), a create that
/// read before the raise reserves on its old quota after it: the
/// overshoot. The traces are printed.
#[test]
fn the_raise_before_the_fence_is_held_back_on_a_busy_scope_and_unfenced_overshoots() {
    let held_back = Rules {
        unfenced_raise: false,
        ..Rules::BEFORE_FENCE
    };
    let run = check(
        "switch to strict, 3 shards, limit 2, the raise held back",
        switched(held_back, 3, 2),
        false,
    );
    assert_eq!(run.failures, vec![RAISE_PLANNED], "{:?}", run.found);
    print(&run, RAISE_PLANNED);
    let unfenced = Rules {
        hold_back_raise: false,
        ..Rules::BEFORE_FENCE
    };
    let run = check(
        "switch to strict, 2 shards, limit 2, the raise unfenced",
        switched(unfenced, 2, 2),
        true,
    );
    assert!(run.failures.contains(&OVERSHOOT), "{:?}", run.failures);
    print(&run, OVERSHOOT);
    let run = check(
        "switch to strict, 3 shards, limit 2, the raise before e03c33a",
        switched(Rules::BEFORE_FENCE, 3, 2),
        false,
    );
    assert!(run.failures.contains(&RAISE_PLANNED), "{:?}", run.failures);
}

/// The first trace of the ignored test above, replayed on the real
/// request path, audit and `MemoryStore` (limit 3, 2 shards). Fails on
/// today's rules: 4 live items. Two best-effort creates lose their
/// `+1`s: live 2, BE 0. In strict admission a create reserves (quota
/// from the real read), its put not sent yet: BE 1, and 2 live + 1
/// reserved is within the limit. The audit raises BE by 1 to live (2),
/// at once, fenced; a new strict create is admitted (BE 2 < 3) and put:
/// live 3. The first create's put lands: live 4.
#[tokio::test]
#[ignore = "the documented exception (docs/design.md): a raise on a busy scope falls short by the puts in flight"]
async fn a_raise_while_a_reservation_s_put_is_in_flight_leaves_room_past_the_limit() {
    use hybrid_counter::audit::{Auditor, RepairMode};
    use hybrid_counter::ids::{ResourceId, Scope};
    use hybrid_counter::items::ResourceItem;
    use hybrid_counter::memory::{Fault, MemoryStore, Op};
    use hybrid_counter::request::Counter;
    use hybrid_counter::store::{NewResource, RequestStore};
    const NOW: i64 = 1_700_000_000_000;
    let store = Arc::new(MemoryStore::new());
    let scope = Scope::new("acct").unwrap();
    let id = |s: &str| ResourceId::new(s).unwrap();
    let best_effort = Counter::new(store.clone(), 3).with_best_effort_shards(2).with_seed(1);
    for n in 0..2 {
        store.inject(Op::AddBestEffort, Fault::Unavailable);
        best_effort
            .create(&scope, &id(&format!("w{n}")), serde_dynamo::Item::default(), NOW)
            .await
            .unwrap();
    }
    assert_eq!(store.best_effort("acct"), 0);
    // A strict create's reservation, as `Counter::reserve` makes it.
    let layout = Layout::new(2);
    let read = store.read_counters(&scope).await.unwrap();
    let fences = layout.fences(&read).expect("not torn");
    let quota = layout.quotas(&read.best_effort_items, 3).remove(0);
    store
        .reserve_best_effort(&scope, &quota.name, quota.reservation(fences[&quota.name]), NOW)
        .await
        .unwrap();
    let audit = Auditor::new(&*store, Admission::Strict)
        .with_best_effort_shards(2)
        .audit_scope(&scope, RepairMode::Apply, NOW)
        .await
        .unwrap();
    assert!(audit.repaired, "{audit:?}");
    assert_eq!(store.best_effort("acct"), 2);
    let strict = Counter::new(store.clone(), 3)
        .with_admission(Admission::Strict)
        .with_best_effort_shards(2)
        .with_seed(2);
    let admitted = strict
        .create(&scope, &id("x"), serde_dynamo::Item::default(), NOW)
        .await;
    // The first create's put lands.
    let item = ResourceItem {
        scope: scope.clone(),
        id: id("a"),
        counter_processed: false,
        deleted: false,
        incarnation: "a".into(),
        created_at: NOW,
        be_shard: quota.shard,
    };
    store
        .put_resource(&NewResource {
            item,
            payload: serde_dynamo::Item::default(),
        })
        .await
        .unwrap();
    let live = store.tables().resources.values().filter(|r| !r.state.deleted).count();
    assert!(
        live <= 3,
        "{live} live items under a limit of 3 (the create after the raise: {admitted:?})"
    );
}

/// The second trace of the ignored test above, replayed on the real
/// audit, `MemoryStore` and [`Layout::fences`] (limit 2, 2 shards), the
/// torn Query built by hand from two real reads. Failed at e03c33a
/// (3 live items); since 9aa2677's follow-up a raise first only creates
/// the absent shards and [`Layout::fences`] takes a read with a shard
/// absent after a raise as torn. Two items recorded on #0 lost their `+1`s: no
/// best-effort item exists, live 2. A strict create's Query reads #0:
/// absent. The audit raises #0 by 2 and creates #1, both at epoch 1.
/// The Query reads #1: 0 at epoch 1. The fences take the read as whole
/// (#0 Absent(1), #1 At(1)), the quotas lend #1 one slot, the
/// reservation on #1 holds and the put lands.
#[tokio::test]
async fn a_read_torn_across_a_raise_that_creates_a_shard_is_taken_as_whole() {
    use hybrid_counter::audit::{Auditor, RepairMode};
    use hybrid_counter::ids::{ResourceId, Scope};
    use hybrid_counter::items::ResourceItem;
    use hybrid_counter::memory::MemoryStore;
    use hybrid_counter::store::{NewResource, RequestStore};
    const NOW: i64 = 1_700_000_000_000;
    let store = Arc::new(MemoryStore::new());
    let scope = Scope::new("acct").unwrap();
    let put = |id: &str| NewResource {
        item: ResourceItem {
            scope: scope.clone(),
            id: ResourceId::new(id).unwrap(),
            counter_processed: false,
            deleted: false,
            incarnation: id.into(),
            created_at: NOW,
            be_shard: Some(0),
        },
        payload: serde_dynamo::Item::default(),
    };
    // Best-effort creates on #0 whose `+1` was lost.
    for id in ["w0", "w1"] {
        store.put_resource(&put(id)).await.unwrap();
    }
    // The Query has read #0 (absent): nothing of it in the snapshot.
    let audit = Auditor::new(&*store, Admission::Strict)
        .with_best_effort_shards(2)
        .audit_scope(&scope, RepairMode::Apply, NOW)
        .await
        .unwrap();
    assert!(audit.repaired, "{audit:?}");
    let after = store.read_counters(&scope).await.unwrap();
    assert_eq!(
        after.best_effort_epochs.len(),
        2,
        "the raise created both shards: {after:?}"
    );
    // The Query reads #1 after the raise.
    let name = keys::best_effort_name(Some(1));
    let torn = CounterSnapshot {
        best_effort: after.best_effort_items[&name],
        best_effort_items: [(name.clone(), after.best_effort_items[&name])].into(),
        best_effort_epochs: [(name.clone(), after.best_effort_epochs[&name])].into(),
        ..CounterSnapshot::default()
    };
    let layout = Layout::new(2);
    let admitted = layout.fences(&torn).and_then(|fences| {
        let quota = layout.quotas(&torn.best_effort_items, 2).remove(1);
        fences.get(&name).map(|fence| quota.reservation(*fence))
    });
    let reserved = match admitted {
        Some(reservation) => store.reserve_best_effort(&scope, &name, reservation, NOW).await.is_ok(),
        None => false,
    };
    if reserved {
        let mut x = put("x");
        x.item.be_shard = Some(1);
        store.put_resource(&x).await.unwrap();
    }
    let live = store.tables().resources.values().filter(|r| !r.state.deleted).count();
    assert!(
        live <= 2,
        "{live} live items under a limit of 2 (fence and quota on #1: {admitted:?})"
    );
}

/// [`hybrid_counter::store::sends::BEST_EFFORT`] is what the runs above send by
/// (`Resend::Never`). On a legacy policy, the SDK re-sending an applied
/// `+1` or `-1` answered with a failure (`Resend::BySdk`), the checker
/// finds BE counting twice: best-effort BE above live, a strict shard
/// under its live items.
#[test]
fn the_sdk_s_resend_of_a_best_effort_write_counts_it_twice() {
    assert_eq!(hybrid_counter::store::sends::BEST_EFFORT, Resend::Never);
    let run = check(
        "best-effort, limit 2, the SDK re-sends best-effort writes",
        AdmissionModel {
            best_effort_sends: Resend::BySdk,
            ..model(Admission::BestEffort, Rules::CURRENT, 2, 2, Change::None)
        },
        false,
    );
    assert_eq!(run.failures, vec![BE_AT_MOST_LIVE]);
    print(&run, BE_AT_MOST_LIVE);
    let run = check(
        "strict, limit 2, the SDK re-sends best-effort writes",
        AdmissionModel {
            best_effort_sends: Resend::BySdk,
            ..strict(Rules::CURRENT, 2, Change::None)
        },
        false,
    );
    assert!(run.failures.contains(&COVERED), "{:?}", run.failures);
    print(&run, COVERED);
}
