//! Failed batches kept in S3 (`FailedBatchRecords=payload`): the
//! reprocessor's read of the object a DLQ1 notification names, and the
//! local runner's write of the object Lambda would have written.
//!
//! A missing object (`NoSuchKey`; the reprocessor's role has
//! `s3:ListBucket` on the bucket so S3 answers that rather than
//! `AccessDenied`) and an object that is not a failed batch of the stack's
//! stream are permanent failures; any other error of the read may pass on
//! a later receive.

use aws_sdk_s3::error::DisplayErrorContext;
use aws_sdk_s3::primitives::ByteStream;

use crate::failed_batch::{FailedBatchObject, ObjectRef};
use crate::replay::ReplayError;

/// Reads the failed batch at `object`, which must be one of `stream_arn`.
pub async fn fetch_failed_batch(
    client: &aws_sdk_s3::Client,
    object: &ObjectRef,
    stream_arn: &str,
) -> Result<FailedBatchObject, ReplayError> {
    let failed = |why: String| ReplayError::ObjectStore {
        object: object.to_string(),
        why,
    };
    let output = client
        .get_object()
        .bucket(&object.bucket)
        .key(&object.key)
        .send()
        .await
        .map_err(|err| {
            let missing = err
                .as_service_error()
                .is_some_and(|e| e.is_no_such_key() || e.meta().code() == Some("NoSuchBucket"));
            if missing {
                ReplayError::ObjectMissing {
                    object: object.to_string(),
                }
            } else {
                failed(DisplayErrorContext(err).to_string())
            }
        })?;
    let bytes = output
        .body
        .collect()
        .await
        .map_err(|e| failed(format!("reading the body: {e}")))?
        .into_bytes();
    FailedBatchObject::from_bytes_of(&bytes, object, stream_arn)
}

/// Writes `batch` at `object`, as Lambda's S3 on-failure destination does.
pub async fn put_failed_batch(
    client: &aws_sdk_s3::Client,
    object: &ObjectRef,
    batch: &FailedBatchObject,
) -> Result<(), String> {
    let body = serde_json::to_vec(batch).map_err(|e| e.to_string())?;
    client
        .put_object()
        .bucket(&object.bucket)
        .key(&object.key)
        .content_type("application/json")
        .body(ByteStream::from(body))
        .send()
        .await
        .map(|_| ())
        .map_err(|e| DisplayErrorContext(e).to_string())
}

#[cfg(test)]
mod tests {
    use aws_sdk_s3::operation::get_object::{GetObjectError, GetObjectOutput};
    use aws_sdk_s3::types::error::NoSuchKey;
    use aws_smithy_mocks::{MockResponseInterceptor, Rule, RuleMode, create_mock_http_client, mock};

    use super::*;

    const OBJECT: &str = include_str!("fixtures/failed_batch_object.json");
    const STREAM: &str =
        "arn:aws:dynamodb:us-east-1:123456789012:table/hybrid-counter-resources/stream/2026-11-14T00:04:06.388";

    fn client(rule: &Rule) -> aws_sdk_s3::Client {
        aws_sdk_s3::Client::from_conf(
            aws_sdk_s3::Config::builder()
                .with_test_defaults()
                .region(aws_sdk_s3::config::Region::new("us-east-1"))
                .retry_config(aws_sdk_s3::config::retry::RetryConfig::disabled())
                .http_client(create_mock_http_client())
                .interceptor(
                    MockResponseInterceptor::new()
                        .rule_mode(RuleMode::MatchAny)
                        .with_rule(rule),
                )
                .build(),
        )
    }

    fn at() -> ObjectRef {
        ObjectRef {
            bucket: "failed-batches".to_owned(),
            key: "aws/lambda/m/shardId-1/2026/11/14/x".to_owned(),
        }
    }

    fn serves(body: &'static str) -> Rule {
        mock!(aws_sdk_s3::Client::get_object)
            .match_requests(|r| r.bucket() == Some("failed-batches") && r.key() == Some(at().key.as_str()))
            .then_output(move || {
                GetObjectOutput::builder()
                    .body(ByteStream::from_static(body.as_bytes()))
                    .build()
            })
    }

    #[tokio::test]
    async fn a_kept_batch_is_read_from_the_object_the_notification_names() {
        let rule = serves(OBJECT);
        let batch = fetch_failed_batch(&client(&rule), &at(), STREAM).await.unwrap();
        assert_eq!(batch.payload.records.len(), 2);
        assert_eq!(rule.num_calls(), 1);
    }

    #[tokio::test]
    async fn a_missing_object_is_a_permanent_failure() {
        let rule = mock!(aws_sdk_s3::Client::get_object)
            .then_error(|| GetObjectError::NoSuchKey(NoSuchKey::builder().message("gone").build()));
        let err = fetch_failed_batch(&client(&rule), &at(), STREAM).await.unwrap_err();
        assert_eq!(
            err,
            ReplayError::ObjectMissing {
                object: at().to_string()
            }
        );
        assert!(err.is_permanent());
    }

    #[tokio::test]
    async fn a_garbage_object_is_a_permanent_failure_and_a_refused_read_is_retried() {
        let garbage = serves("{\"hello\": 1}");
        let err = fetch_failed_batch(&client(&garbage), &at(), STREAM).await.unwrap_err();
        assert!(
            matches!(err, ReplayError::NotAFailedBatchObject { .. }) && err.is_permanent(),
            "{err}"
        );

        let slow = mock!(aws_sdk_s3::Client::get_object).then_error(|| {
            GetObjectError::generic(
                aws_smithy_types::error::ErrorMetadata::builder()
                    .code("SlowDown")
                    .message("reduce your request rate")
                    .build(),
            )
        });
        let err = fetch_failed_batch(&client(&slow), &at(), STREAM).await.unwrap_err();
        assert!(
            matches!(err, ReplayError::ObjectStore { .. }) && !err.is_permanent(),
            "{err}"
        );
        assert!(err.to_string().contains("SlowDown"), "{err}");
    }

    #[tokio::test]
    async fn an_object_of_another_stream_is_a_permanent_failure() {
        let rule = serves(OBJECT);
        let err = fetch_failed_batch(&client(&rule), &at(), "arn:aws:dynamodb:us-east-1:1:table/x/stream/y")
            .await
            .unwrap_err();
        assert!(
            matches!(err, ReplayError::WrongStream { .. }) && err.is_permanent(),
            "{err}"
        );
    }
}
