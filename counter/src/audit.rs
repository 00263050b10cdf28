//! Counting a scope's items by state, the ground truth the counters are
//! checked against: `EC == processed` always, `BE <= live` always, and after
//! the stream is drained `EC == live`.

use serde::Serialize;

/// Items of one scope by state.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct ScopeCounts {
    /// Not soft-deleted.
    pub live: u64,
    /// `counter_processed = true` (soft-deleted or not): must equal EC.
    pub processed: u64,
    /// Live and not yet counted: their INSERT is still in the stream path.
    pub pending_create: u64,
    /// Soft-deleted and not yet hard-deleted.
    pub pending_delete: u64,
}

impl ScopeCounts {
    /// Adds one item given its two flags.
    pub fn add(&mut self, counter_processed: bool, deleted: bool) {
        if !deleted {
            self.live += 1;
        }
        if counter_processed {
            self.processed += 1;
        }
        if !deleted && !counter_processed {
            self.pending_create += 1;
        }
        if deleted {
            self.pending_delete += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tallies_each_state() {
        let mut c = ScopeCounts::default();
        c.add(false, false); // pending create
        c.add(true, false); // counted, live
        c.add(true, true); // counted, pending delete
        c.add(false, true); // never counted, pending delete
        assert_eq!(
            c,
            ScopeCounts {
                live: 2,
                processed: 2,
                pending_create: 1,
                pending_delete: 2
            }
        );
    }
}
