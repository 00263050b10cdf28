//! The kit's one stable hash (FNV-1a, 64 bits): what picks a key or a shard
//! must give the same answer in every process and release, which std's
//! hasher does not promise.

const OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
const PRIME: u64 = 0x0100_0000_01b3;

/// FNV-1a of `bytes`.
pub fn fnv1a(bytes: &[u8]) -> u64 {
    fnv1a_from(bytes, OFFSET)
}

/// FNV-1a of `bytes`, starting from `seed` instead of the offset basis
/// (a salt: the hash of something else).
pub fn fnv1a_from(bytes: &[u8], seed: u64) -> u64 {
    bytes.iter().fold(seed, |h, b| (h ^ u64::from(*b)).wrapping_mul(PRIME))
}

#[cfg(test)]
mod tests {
    #[test]
    fn matches_the_published_test_vectors() {
        // FNV-1a 64: "" is the offset basis, "a" is 0xaf63dc4c8601ec8c.
        assert_eq!(super::fnv1a(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(super::fnv1a(b"a"), 0xaf63_dc4c_8601_ec8c);
    }
}
