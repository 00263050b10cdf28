//! The metering of the store's requests on its meter
//! ([`Meter`](hybrid_counter::store::meter::Meter)): the capacity each
//! answer reports, a plain write's outcome, and a throttle counted with
//! DynamoDB's reasons before the error is classified.

use aws_sdk_dynamodb::error::{ProvideErrorMetadata, SdkError};
use aws_sdk_dynamodb::types::ConsumedCapacity;

use hybrid_counter::error::StoreError;
use hybrid_counter::store::meter::Written;

use super::classify::{ThrottleDetail, classify, is_capacity_throttle, throttle_reasons};
use super::store::DynamoStore;

impl DynamoStore {
    /// Records the capacity of one write's response (`TOTAL` mode reports
    /// `CapacityUnits`; a split, where given, is preferred).
    pub(super) fn consumed<'a>(&self, capacity: impl IntoIterator<Item = &'a ConsumedCapacity>) {
        for cc in capacity {
            self.meter.consumed(
                cc.write_capacity_units().or(cc.capacity_units()),
                cc.read_capacity_units(),
            );
        }
    }

    /// [`classify`], and a throttle counted on the meter with its reasons.
    pub(crate) fn classify<E, R>(&self, err: SdkError<E, R>) -> StoreError
    where
        E: ThrottleDetail + ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
        R: std::fmt::Debug,
    {
        match throttle_reasons(&err) {
            Some(reasons) => self.meter.throttled(&reasons),
            // A throttle the SDK did not model (an emulator's): no reason.
            None if is_capacity_throttle(err.code()) => self.meter.throttled(&[]),
            None => {}
        }
        classify(err)
    }

    /// Records the capacity of one read's response.
    pub(super) fn consumed_read(&self, capacity: Option<&ConsumedCapacity>) {
        if let Some(cc) = capacity {
            self.meter.consumed(
                cc.write_capacity_units(),
                cc.read_capacity_units().or(cc.capacity_units()),
            );
        }
    }

    /// Records one plain write's outcome (`capacity` reads the consumed
    /// capacity of its answer) and returns it without the answer.
    pub(super) fn plain<T>(
        &self,
        result: Result<T, StoreError>,
        written: Written,
        capacity: impl Fn(&T) -> Option<&ConsumedCapacity>,
    ) -> Result<(), StoreError> {
        match &result {
            Ok(out) => {
                self.meter.plain_write(written);
                self.consumed(capacity(out));
            }
            Err(_) => self.meter.failed(),
        }
        result.map(drop)
    }
}

#[cfg(test)]
mod tests {
    use aws_sdk_dynamodb::Client;
    use aws_sdk_dynamodb::operation::update_item::{UpdateItemError, UpdateItemOutput};
    use aws_sdk_dynamodb::types::ThrottlingReason;
    use aws_smithy_mocks::mock;
    use aws_smithy_types::error::ErrorMetadata;
    use hybrid_counter::throttle::ThrottleReason;

    use crate::dynamo::test_support::{scope, store, update_error};

    #[tokio::test(start_paused = true)]
    async fn a_throttle_is_counted_on_the_meter_by_the_reasons_dynamodb_gave() {
        use aws_sdk_dynamodb::types::error::ProvisionedThroughputExceededException;
        let reason = |r: &str| {
            ThrottlingReason::builder()
                .reason(r)
                .resource("arn:aws:dynamodb:us-east-1:123456789012:table/counters")
                .build()
        };
        let rules = [
            mock!(Client::update_item).then_error(move || {
                UpdateItemError::ProvisionedThroughputExceededException(
                    ProvisionedThroughputExceededException::builder()
                        .message("throttled")
                        .throttling_reasons(reason("TableWriteKeyRangeThroughputExceeded"))
                        .throttling_reasons(reason("TableWriteSomethingNew"))
                        .meta(
                            ErrorMetadata::builder()
                                .code("ProvisionedThroughputExceededException")
                                .build(),
                        )
                        .build(),
                )
            }),
            update_error("ThrottlingException"),
            update_error("InternalServerError"),
            mock!(Client::update_item).then_output(|| UpdateItemOutput::builder().build()),
        ];
        let s = store(&rules);
        s.set_limit(&scope(), Some(7), 1).await.unwrap();
        let throttles = s.meter().snapshot().throttles;
        let hot = ThrottleReason::parse("TableWriteKeyRangeThroughputExceeded");
        assert_eq!(throttles.get(hot), 1, "{throttles:?}");
        assert_eq!(
            throttles.get(ThrottleReason::UNSPECIFIED),
            2,
            "an unknown reason and a throttle without reasons: {throttles:?}"
        );
        assert_eq!(throttles.total(), 3, "a server error is no throttle");
    }
}
