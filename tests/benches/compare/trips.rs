//! What the fault proxy's counts say about a run: the DynamoDB requests
//! that reached it, and the counts between two snapshots.

use e2e::faults::{FaultKind, FaultStats, Service};

/// DynamoDB requests that reached the proxy: forwarded, or answered by it.
pub fn round_trips(stats: &FaultStats) -> u64 {
    let forwarded: u64 = stats
        .forwarded
        .iter()
        .filter(|(op, _)| op.as_ref().is_some_and(|op| op.service == Service::DynamoDb))
        .map(|(_, n)| n)
        .sum();
    // Applied-then-failed and delayed requests were forwarded too.
    let answered: u64 = [
        FaultKind::FailBefore,
        FaultKind::Throttle,
        FaultKind::TransactionConflict,
    ]
    .into_iter()
    .map(|kind| stats.of_kind(kind))
    .sum();
    forwarded + answered
}

pub fn since(now: &FaultStats, before: &FaultStats) -> FaultStats {
    let mut delta = now.clone();
    for (op, n) in &before.forwarded {
        *delta.forwarded.entry(op.clone()).or_default() -= n;
    }
    for (key, n) in &before.injected {
        *delta.injected.entry(key.clone()).or_default() -= n;
    }
    delta
}
