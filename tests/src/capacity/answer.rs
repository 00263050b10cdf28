//! The answers the model gives in DynamoDB's place, with their exact
//! shapes: a throttle names its limit as a `ThrottlingReason`
//! (<https://docs.aws.amazon.com/amazondynamodb/latest/APIReference/API_ThrottlingReason.html>:
//! `Table` + `Read|Write` + `KeyRangeThroughputExceeded`,
//! `AccountLimitExceeded` or `MaxOnDemandThroughputExceeded`); a
//! transaction refused is `TransactionCanceledException` with one
//! `CancellationReasons` entry per action in request order (`None`,
//! `TransactionConflict`, `ThrottlingError` on an on-demand table,
//! `ProvisionedThroughputExceeded` on a provisioned one: the codes of
//! `TransactionCanceledException` in the API reference); a plain write on
//! an item a transaction holds is `TransactionConflictException`; a
//! transaction whose client request token is still in flight is
//! `TransactionInProgressException`.

use serde::Serialize;
use serde_json::{Map, Value, json};

use super::params::CapacityMode;
use super::units::Access;

/// Which limit refused a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub enum Limit {
    /// One partition's budget (a key range).
    KeyRange,
    /// What an on-demand table serves at once: its initial throughput, or
    /// twice its previous peak. AWS documents no reason of its own for it:
    /// the table's partitions are what refuse, so the answer names the key
    /// range; the model counts it apart as a table-level limit.
    WarmThroughput,
    /// The account's per-table quota.
    AccountLimit,
    /// The table's configured maximum (`OnDemandThroughput`).
    MaxOnDemand,
}

impl Limit {
    /// The `ThrottlingReason` DynamoDB gives a request past this limit.
    pub fn reason(self, access: Access) -> &'static str {
        match (self, access) {
            (Limit::KeyRange | Limit::WarmThroughput, Access::Read) => "TableReadKeyRangeThroughputExceeded",
            (Limit::KeyRange | Limit::WarmThroughput, Access::Write) => "TableWriteKeyRangeThroughputExceeded",
            (Limit::AccountLimit, Access::Read) => "TableReadAccountLimitExceeded",
            (Limit::AccountLimit, Access::Write) => "TableWriteAccountLimitExceeded",
            (Limit::MaxOnDemand, Access::Read) => "TableReadMaxOnDemandThroughputExceeded",
            (Limit::MaxOnDemand, Access::Write) => "TableWriteMaxOnDemandThroughputExceeded",
        }
    }

    /// Whether the limit is the table's rather than one partition's.
    pub fn is_table_level(self) -> bool {
        self != Limit::KeyRange
    }
}

/// Why the model answered a request itself.
#[derive(Debug, Clone, PartialEq)]
pub enum Refusal {
    Throttle {
        table: String,
        access: Access,
        limit: Limit,
    },
    Conflict,
    InProgress,
}

/// An error answer: its code and JSON body (without `__type`).
#[derive(Debug, Clone, PartialEq)]
pub struct Answer {
    pub code: &'static str,
    pub body: Map<String, Value>,
    pub refusal: Refusal,
}

fn message(text: String) -> Map<String, Value> {
    Map::from_iter([("message".to_owned(), text.into())])
}

/// A plain request refused by `limit` of `table`.
pub(crate) fn throttle(mode: CapacityMode, table: &str, access: Access, limit: Limit) -> Answer {
    let resource = format!("arn:aws:dynamodb:us-east-1:000000000000:table/{table}");
    let reasons = json!([{ "reason": limit.reason(access), "resource": resource }]);
    // The member names of the service model the SDK parses.
    let (code, member) = match mode {
        CapacityMode::OnDemand => ("ThrottlingException", "throttlingReasons"),
        CapacityMode::Provisioned => ("ProvisionedThroughputExceededException", "ThrottlingReasons"),
    };
    let mut body = message(format!(
        "Throughput exceeds the current capacity of your table or index: {} (capacity model of the fault proxy)",
        limit.reason(access)
    ));
    body.insert(member.to_owned(), reasons);
    Answer {
        code,
        body,
        refusal: Refusal::Throttle {
            table: table.to_owned(),
            access,
            limit,
        },
    }
}

/// The cancellation code of a transaction item refused for capacity.
pub(crate) fn throttled_code(mode: CapacityMode) -> &'static str {
    match mode {
        CapacityMode::OnDemand => "ThrottlingError",
        CapacityMode::Provisioned => "ProvisionedThroughputExceeded",
    }
}

/// `TransactionCanceledException` with `codes`, one per action.
pub(crate) fn cancelled(codes: &[&str], refusal: Refusal) -> Answer {
    let reasons: Vec<Value> = codes
        .iter()
        .map(|code| match *code {
            "None" => json!({ "Code": "None" }),
            "TransactionConflict" => json!({ "Code": code, "Message": "Transaction is ongoing for the item." }),
            code => {
                json!({ "Code": code, "Message": "Throughput exceeds the current capacity of your table or index." })
            }
        })
        .collect();
    let mut body = Map::from_iter([(
        "Message".to_owned(),
        format!(
            "Transaction cancelled, please refer cancellation reasons for specific reasons [{}]",
            codes.join(", ")
        )
        .into(),
    )]);
    body.insert("CancellationReasons".to_owned(), reasons.into());
    Answer {
        code: "TransactionCanceledException",
        body,
        refusal,
    }
}

/// A plain write on an item a transaction holds.
pub(crate) fn conflict() -> Answer {
    Answer {
        code: "TransactionConflictException",
        body: message("Transaction is ongoing for the item (capacity model of the fault proxy)".into()),
        refusal: Refusal::Conflict,
    }
}

/// A transaction whose client request token is still in flight.
pub(crate) fn in_progress() -> Answer {
    Answer {
        code: "TransactionInProgressException",
        body: message("The transaction with the given request token is already in progress.".into()),
        refusal: Refusal::InProgress,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reasons_follow_the_resource_operation_limit_format() {
        assert_eq!(
            Limit::KeyRange.reason(Access::Write),
            "TableWriteKeyRangeThroughputExceeded"
        );
        assert_eq!(
            Limit::AccountLimit.reason(Access::Read),
            "TableReadAccountLimitExceeded"
        );
        assert_eq!(
            Limit::MaxOnDemand.reason(Access::Write),
            "TableWriteMaxOnDemandThroughputExceeded"
        );
        for limit in [Limit::WarmThroughput, Limit::AccountLimit, Limit::MaxOnDemand] {
            assert!(limit.is_table_level());
            // Every name the kit knows (its reason parser returns
            // Unspecified for any other).
            let reason = hybrid_counter::throttle::ThrottleReason::parse(limit.reason(Access::Write));
            assert_ne!(reason, hybrid_counter::throttle::ThrottleReason::UNSPECIFIED);
        }
        assert!(!Limit::KeyRange.is_table_level());
    }

    #[test]
    fn a_cancellation_lists_one_reason_per_action_in_order() {
        let answer = cancelled(&["None", "TransactionConflict"], Refusal::Conflict);
        assert_eq!(answer.code, "TransactionCanceledException");
        let codes: Vec<&str> = answer.body["CancellationReasons"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["Code"].as_str().unwrap())
            .collect();
        assert_eq!(codes, ["None", "TransactionConflict"]);
    }
}
