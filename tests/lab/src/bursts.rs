//! Which changes of a run meet a resend burst: a fixed number of changes,
//! drawn from the run's fault seed, whose first writes are all answered 500
//! after they were applied, long enough to outlast the SDK's retries so
//! that the caller's own resend (if its code makes one) is tested in every
//! run rather than when chance brings a burst. The same changes for every
//! approach of a run: the changes are numbered alike in all of them.

/// `count` distinct changes among `0..changes`, in increasing order, the
/// same for the same `seed` (all of them when `count >= changes`).
pub fn burst_changes(seed: u64, changes: u64, count: usize) -> Vec<u64> {
    let mut picked: Vec<u64> = Vec::with_capacity(count);
    let mut state = seed;
    while (picked.len() as u64) < changes.min(count as u64) {
        let change = splitmix64(&mut state) % changes;
        if !picked.contains(&change) {
            picked.push(change);
        }
    }
    picked.sort_unstable();
    picked
}

/// The SplitMix64 generator's next value (Steele, Lea and Flood, 2014).
fn splitmix64(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_run_gets_the_same_number_of_distinct_bursts_within_its_changes() {
        for seed in 0..200 {
            let picked = burst_changes(seed, 320, 4);
            assert_eq!(picked.len(), 4, "seed {seed}: {picked:?}");
            assert!(picked.windows(2).all(|w| w[0] < w[1]), "distinct, in order: {picked:?}");
            assert!(picked.iter().all(|&c| c < 320), "{picked:?}");
        }
    }

    #[test]
    fn a_seed_replays_its_bursts_and_seeds_differ() {
        assert_eq!(
            burst_changes(16_363_882_000_572_466_676, 320, 4),
            burst_changes(16_363_882_000_572_466_676, 320, 4)
        );
        let runs: std::collections::HashSet<Vec<u64>> = (0..5).map(|s| burst_changes(s, 320, 4)).collect();
        assert_eq!(runs.len(), 5, "five seeds, five schedules: {runs:?}");
    }

    #[test]
    fn asking_for_more_bursts_than_changes_faults_every_change_once() {
        assert_eq!(burst_changes(9, 3, 10), vec![0, 1, 2]);
        assert_eq!(burst_changes(9, 0, 4), Vec::<u64>::new());
    }
}
