//! The state's hash: the checker fingerprints every state it meets.

use super::*;

/// Hashes the state as four words, each field packed without overlap: the
/// checker fingerprints every state it meets (and tells states apart by
/// fingerprint only), and field by field that is most of a debug build's
/// run time.
/// A count packed in 3 bits.
fn small(n: u8) -> u8 {
    assert!(n < 8, "a count of requests above 7");
    n
}

impl std::hash::Hash for State {
    fn hash<H: std::hash::Hasher>(&self, h: &mut H) {
        let bytes = |b: [u8; SLOTS]| u64::from(u32::from_le_bytes(b));
        let signed = |b: [i8; SLOTS]| bytes(b.map(|c| c.to_le_bytes()[0]));
        // A tag, two flags, four quotas of 3 bits (at most 7) and four
        // fences of 6 bits, or four counts of 4 bits (-4 to 11), epochs,
        // items seen and how many were read.
        let client = |c: &Client| -> u64 {
            match *c {
                Client::Idle => 0,
                Client::Read {
                    quotas,
                    fences,
                    fresh,
                    stale,
                } => {
                    let quotas = quotas.iter().enumerate().fold(0, |acc, (k, q)| {
                        assert!(*q < 8, "a quota above 7");
                        acc | u64::from(*q) << (3 * k)
                    });
                    let fences = fences
                        .iter()
                        .enumerate()
                        .fold(0, |acc, (k, f)| acc | u64::from(*f) << (6 * k));
                    1 | u64::from(fresh) << 3 | u64::from(stale) << 4 | quotas << 5 | fences << 17
                }
                Client::Reserved { shard } => 2 | u64::from(shard) << 3,
                Client::SoftDeleted { shard } => 3 | u64::from(shard) << 3,
                Client::Put { shard } => 4 | u64::from(shard) << 3,
                Client::Decremented { shard } => 5 | u64::from(shard) << 3,
                Client::Reading {
                    got,
                    epochs,
                    seen,
                    n,
                    fresh,
                    stale,
                } => {
                    let got = got.iter().enumerate().fold(0, |acc, (k, c)| {
                        let c = u64::try_from(i64::from(*c) + 4).expect("a count below -4");
                        assert!(c < 16, "a count above 11");
                        acc | c << (4 * k)
                    });
                    6 | u64::from(fresh) << 3
                        | u64::from(stale) << 4
                        | u64::from(n) << 5
                        | got << 8
                        | bytes(epochs) << 24
                        | u64::from(seen) << 56
                }
            }
        };
        h.write_u64(signed(self.be) | bytes(self.live) << 32);
        for c in &self.clients {
            h.write_u64(client(c));
        }
        let repair = match self.repair {
            None => 0,
            Some(Plan::Set(r)) => signed(r) << 2 | 1,
            Some(Plan::Raise {
                adds,
                from,
                writes,
                shards_only,
            }) => {
                signed(adds) << 2 | 2 | u64::from(from) << 34 | u64::from(writes) << 42 | u64::from(shards_only) << 50
            }
        };
        h.write_u64(repair);
        h.write_u64(
            u64::from(self.changed)
                | u64::from(self.excess) << 1
                | u64::from(self.in_flight_at_change) << 9
                | u64::from(self.window) << 17
                | u64::from(self.present) << 25
                | u64::from(self.strict) << 33
                | u64::from(self.raised) << 34
                | u64::from(self.repair_strict) << 47
                | u64::from(self.closed) << 48
                | u64::from(small(self.in_flight_at_raise)) << 49
                | u64::from(small(self.in_flight_at_plan)) << 52
                | self.epoch.iter().enumerate().fold(0, |acc, (k, e)| {
                    assert!(*e < 8, "an epoch above 7");
                    acc | u64::from(*e) << (35 + 3 * k)
                }),
        );
    }
}
