//! Why DynamoDB throttled a request, as it says in the `ThrottlingReasons`
//! of a `ProvisionedThroughputExceededException`, `ThrottlingException` or
//! `RequestLimitExceeded`
//! (<https://docs.aws.amazon.com/amazondynamodb/latest/APIReference/API_ThrottlingReason.html>):
//! `<Table|Index><Read|Write><limit>`, where the limit tells an operator
//! what helps (<https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/troubleshooting-throttling-diagnostics.html>).
//! A key range (one partition) is fixed by spreading the scope, the other
//! three by raising a table-level limit. The kit's metrics carry the reason
//! as the [`DIMENSION`] of `Throttles` ([`crate::metrics`]).

/// The dimension of the per-reason `Throttles` metric.
pub const DIMENSION: &str = "ThrottleReason";

/// Which limit a throttled request met.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Limit {
    /// One partition's 3,000 read / 1,000 write units per second: a hot
    /// scope. Shard it; warm throughput does not lift this.
    KeyRange,
    /// The table's provisioned capacity (the kit's tables are on-demand).
    Provisioned,
    /// The account's per-table quota of the region.
    AccountLimit,
    /// The on-demand table's configured maximum (`OnDemandThroughput`).
    MaxOnDemand,
}

/// The limit suffixes DynamoDB uses, in [`Limit`] order.
const LIMITS: [(Limit, &str); 4] = [
    (Limit::KeyRange, "KeyRangeThroughputExceeded"),
    (Limit::Provisioned, "ProvisionedThroughputExceeded"),
    (Limit::AccountLimit, "AccountLimitExceeded"),
    (Limit::MaxOnDemand, "MaxOnDemandThroughputExceeded"),
];

/// Every reason DynamoDB documents, and one for none.
const NAMES: [&str; ThrottleReason::COUNT] = [
    "TableReadKeyRangeThroughputExceeded",
    "TableReadProvisionedThroughputExceeded",
    "TableReadAccountLimitExceeded",
    "TableReadMaxOnDemandThroughputExceeded",
    "TableWriteKeyRangeThroughputExceeded",
    "TableWriteProvisionedThroughputExceeded",
    "TableWriteAccountLimitExceeded",
    "TableWriteMaxOnDemandThroughputExceeded",
    "IndexReadKeyRangeThroughputExceeded",
    "IndexReadProvisionedThroughputExceeded",
    "IndexReadAccountLimitExceeded",
    "IndexReadMaxOnDemandThroughputExceeded",
    "IndexWriteKeyRangeThroughputExceeded",
    "IndexWriteProvisionedThroughputExceeded",
    "IndexWriteAccountLimitExceeded",
    "IndexWriteMaxOnDemandThroughputExceeded",
    "Unspecified",
];

/// One of DynamoDB's throttling reasons, or [`ThrottleReason::UNSPECIFIED`]
/// when the answer named none (a throttled transaction item, an emulator)
/// or one this kit does not know.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ThrottleReason(u8);

impl ThrottleReason {
    /// How many there are, [`ThrottleReason::UNSPECIFIED`] included.
    pub const COUNT: usize = 17;
    pub const UNSPECIFIED: ThrottleReason = ThrottleReason(16);

    /// The reason DynamoDB calls `reason`; [`Self::UNSPECIFIED`] for a name
    /// it does not document.
    pub fn parse(reason: &str) -> Self {
        NAMES[..Self::COUNT - 1]
            .iter()
            .position(|n| *n == reason)
            .map_or(Self::UNSPECIFIED, |i| Self(i as u8))
    }

    /// Every reason, in a fixed order ([`Self::index`]).
    pub fn all() -> impl Iterator<Item = ThrottleReason> {
        (0..Self::COUNT as u8).map(ThrottleReason)
    }

    /// The position of the reason in [`Self::all`].
    pub fn index(self) -> usize {
        usize::from(self.0)
    }

    /// DynamoDB's name, the metric's dimension value.
    pub fn name(self) -> &'static str {
        NAMES[self.index()]
    }

    /// The limit met; `None` when unspecified.
    pub fn limit(self) -> Option<Limit> {
        (self != Self::UNSPECIFIED).then(|| LIMITS[self.index() % LIMITS.len()].0)
    }
}

impl std::fmt::Display for ThrottleReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_documented_reason_is_resource_access_and_limit() {
        let mut expected = Vec::new();
        for resource in ["Table", "Index"] {
            for access in ["Read", "Write"] {
                for (_, limit) in LIMITS {
                    expected.push(format!("{resource}{access}{limit}"));
                }
            }
        }
        assert_eq!(&NAMES[..16], expected.as_slice());
        for name in &expected {
            assert_eq!(ThrottleReason::parse(name).name(), name);
        }
    }

    #[test]
    fn each_reason_names_the_limit_it_met() {
        let hot = ThrottleReason::parse("TableWriteKeyRangeThroughputExceeded");
        assert_eq!(hot.limit(), Some(Limit::KeyRange));
        let capped = ThrottleReason::parse("TableReadMaxOnDemandThroughputExceeded");
        assert_eq!(capped.limit(), Some(Limit::MaxOnDemand));
        assert_eq!(
            ThrottleReason::parse("IndexWriteAccountLimitExceeded").limit(),
            Some(Limit::AccountLimit)
        );
    }

    #[test]
    fn an_unknown_or_missing_reason_is_unspecified() {
        assert_eq!(ThrottleReason::parse("SomethingNew"), ThrottleReason::UNSPECIFIED);
        assert_eq!(ThrottleReason::parse(""), ThrottleReason::UNSPECIFIED);
        assert_eq!(ThrottleReason::UNSPECIFIED.limit(), None);
        assert_eq!(ThrottleReason::UNSPECIFIED.name(), "Unspecified");
        assert_eq!(ThrottleReason::all().count(), ThrottleReason::COUNT);
    }
}
