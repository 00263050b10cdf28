//! SDK errors classified into [`StoreError`] by their error code, never by
//! message text, and the throttling reasons DynamoDB names. Public: the
//! lab and the benches classify their own requests with these.

use aws_sdk_dynamodb::error::{DisplayErrorContext, ProvideErrorMetadata, SdkError};
use aws_sdk_dynamodb::types::ThrottlingReason;

use hybrid_counter::error::StoreError;
use hybrid_counter::throttle::ThrottleReason;

/// Whether an error code is a failed condition on a plain write.
pub fn is_conditional_check_failed(code: Option<&str>) -> bool {
    code == Some("ConditionalCheckFailedException")
}

/// Whether an error code means DynamoDB throttled the request: a capacity
/// limit of a partition, the table, its maximum or the account.
pub fn is_capacity_throttle(code: Option<&str>) -> bool {
    matches!(
        code,
        Some("ProvisionedThroughputExceededException" | "ThrottlingException" | "RequestLimitExceeded")
    )
}

/// Whether an error code means "too fast or busy, retry later": throttling,
/// or the item is held by a concurrent transaction.
pub fn is_throttle(code: Option<&str>) -> bool {
    is_capacity_throttle(code)
        || matches!(
            code,
            Some("TransactionConflictException" | "TransactionInProgressException")
        )
}

/// Whether an error code means the request itself is invalid.
pub fn is_validation(code: Option<&str>) -> bool {
    code == Some("ValidationException")
}

/// The typed `ThrottlingReasons` of an operation's throttling errors
/// (`ProvisionedThroughputExceededException`, `ThrottlingException`,
/// `RequestLimitExceeded`); `None` for any other error.
pub trait ThrottleDetail {
    fn throttling_reasons(&self) -> Option<&[ThrottlingReason]>;
}

macro_rules! throttle_detail {
    ($($error:ty),* $(,)?) => {
        $(
            impl ThrottleDetail for $error {
                fn throttling_reasons(&self) -> Option<&[ThrottlingReason]> {
                    match self {
                        Self::ProvisionedThroughputExceededException(e) => Some(e.throttling_reasons()),
                        Self::ThrottlingException(e) => Some(e.throttling_reasons()),
                        Self::RequestLimitExceeded(e) => Some(e.throttling_reasons()),
                        _ => None,
                    }
                }
            }
        )*
    };
}

throttle_detail!(
    aws_sdk_dynamodb::operation::update_item::UpdateItemError,
    aws_sdk_dynamodb::operation::transact_write_items::TransactWriteItemsError,
    aws_sdk_dynamodb::operation::get_item::GetItemError,
    aws_sdk_dynamodb::operation::query::QueryError,
    aws_sdk_dynamodb::operation::batch_get_item::BatchGetItemError,
    aws_sdk_dynamodb::operation::put_item::PutItemError,
    aws_sdk_dynamodb::operation::delete_item::DeleteItemError,
    aws_sdk_dynamodb::operation::scan::ScanError,
);

/// Why DynamoDB throttled the request `err` answered, when it was
/// throttled: the reasons it named ([`ThrottleReason::UNSPECIFIED`] for
/// one this kit does not know), or none. `None` when not a throttle.
pub fn throttle_reasons<E: ThrottleDetail, R>(err: &SdkError<E, R>) -> Option<Vec<ThrottleReason>> {
    let reasons = err.as_service_error()?.throttling_reasons()?;
    Some(
        reasons
            .iter()
            .map(|r| r.reason().map_or(ThrottleReason::UNSPECIFIED, ThrottleReason::parse))
            .collect(),
    )
}

/// Classifies an SDK error by its error code (never by message text).
pub fn classify<E, R>(err: SdkError<E, R>) -> StoreError
where
    E: ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
    R: std::fmt::Debug,
{
    let code = err.code().map(str::to_owned);
    if is_conditional_check_failed(code.as_deref()) {
        StoreError::ConditionFailed
    } else if is_throttle(code.as_deref()) {
        StoreError::Transient(code.unwrap_or_default())
    } else if is_validation(code.as_deref()) {
        StoreError::Rejected(err.message().unwrap_or("ValidationException").to_owned())
    } else {
        StoreError::Unavailable(DisplayErrorContext(&err).to_string())
    }
}

#[cfg(test)]
mod tests {
    use aws_sdk_dynamodb::Client;
    use aws_sdk_dynamodb::operation::update_item::UpdateItemError;
    use aws_sdk_dynamodb::types::error::ConditionalCheckFailedException;
    use aws_smithy_mocks::mock;
    use aws_smithy_types::error::ErrorMetadata;
    use hybrid_counter::store::RequestStore;

    use super::*;
    use crate::dynamo::test_support::{key, scope, store, update_error};

    #[tokio::test]
    async fn plain_write_errors_are_classified_by_their_code() {
        let s = store(&[
            mock!(Client::update_item).then_error(|| {
                // As the SDK parses it: the modeled error with its code.
                UpdateItemError::ConditionalCheckFailedException(
                    ConditionalCheckFailedException::builder()
                        .meta(ErrorMetadata::builder().code("ConditionalCheckFailedException").build())
                        .build(),
                )
            }),
            update_error("ThrottlingException"),
            update_error("TransactionConflictException"),
            update_error("ValidationException"),
            update_error("InternalServerError"),
        ]);
        assert_eq!(s.mark_deleted(&key(), "inc", 1).await, Err(StoreError::ConditionFailed));
        // Refused before it was applied: safe to send again.
        assert!(
            s.add_best_effort(&scope(), "best_effort", 1, 1)
                .await
                .unwrap_err()
                .is_transient()
        );
        assert!(
            s.add_best_effort(&scope(), "best_effort", 1, 1)
                .await
                .unwrap_err()
                .is_transient()
        );
        assert!(matches!(
            s.add_best_effort(&scope(), "best_effort", 1, 1).await,
            Err(StoreError::Rejected(_))
        ));
        // Outcome unknown: neither transient nor a refusal.
        let err = s.add_best_effort(&scope(), "best_effort", 1, 1).await.unwrap_err();
        assert!(
            matches!(err, StoreError::Unavailable(_)) && !err.is_transient(),
            "{err}"
        );
        assert_eq!(s.meter().snapshot().failed_requests, 5);
    }
}
