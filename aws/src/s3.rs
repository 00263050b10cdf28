//! Objects in S3: a bounded read of one object ([`get_object_bytes`],
//! used for failed batches and the drift check's limits file), the
//! reprocessor's read of the failed batch a DLQ1 notification names, the
//! local runner's write of the object Lambda would have written, and the S3
//! client for an SDK configuration ([`client`]).
//!
//! A missing object (`NoSuchKey`; the reprocessor's role has
//! `s3:ListBucket` on the bucket so S3 answers that rather than
//! `AccessDenied`) and an object that is not a failed batch of the stack's
//! stream are permanent failures; any other error of the read may pass on
//! a later receive. So are an object outside the stack's failed batches
//! (checked before any request, [`Expected`]) and one larger than
//! [`MAX_OBJECT_BYTES`] (checked on the response's length before the body
//! is read, and again while reading it).

use aws_sdk_s3::error::{DisplayErrorContext, ProvideErrorMetadata};
use aws_sdk_s3::primitives::ByteStream;

use crate::failed_batch::{Expected, FailedBatchObject, MAX_OBJECT_BYTES, ObjectRef};
use crate::replay::ReplayError;

/// The S3 client of `sdk`: path-style requests when the endpoint is
/// overridden (the local emulator answers at one host, not at
/// `<bucket>.<host>`), virtual-hosted as S3 prefers otherwise.
pub fn client(sdk: &aws_config::SdkConfig) -> aws_sdk_s3::Client {
    aws_sdk_s3::Client::from_conf(
        aws_sdk_s3::config::Builder::from(sdk)
            .force_path_style(sdk.endpoint_url().is_some())
            .build(),
    )
}

/// Why an object could not be read ([`get_object_bytes`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ObjectReadError {
    #[error("{object} does not exist")]
    Missing { object: String },
    #[error("{object} holds {size} bytes, more than the {max} read: not read")]
    TooLarge { object: String, size: u64, max: u64 },
    #[error("cannot read {object}: {why}")]
    Failed { object: String, why: String },
}

/// The bytes of `object`, at most `max_bytes` of them: a larger object is
/// [`ObjectReadError::TooLarge`], refused on the response's declared length
/// before the body is read, and again while reading it (the length may be
/// absent or wrong). A missing object or bucket is
/// [`ObjectReadError::Missing`].
pub async fn get_object_bytes(
    client: &aws_sdk_s3::Client,
    object: &ObjectRef,
    max_bytes: u64,
) -> Result<Vec<u8>, ObjectReadError> {
    let failed = |why: String| ObjectReadError::Failed {
        object: object.to_string(),
        why,
    };
    let too_large = |size: u64| ObjectReadError::TooLarge {
        object: object.to_string(),
        size,
        max: max_bytes,
    };
    let mut output = client
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
                return ObjectReadError::Missing {
                    object: object.to_string(),
                };
            }
            // The service's code and message (`AccessDenied: ...`), not the
            // whole raw response; the full chain when there is no answer.
            failed(match (err.code(), err.message()) {
                (Some(code), Some(message)) => format!("{code}: {message}"),
                (Some(code), None) => code.to_owned(),
                _ => DisplayErrorContext(&err).to_string(),
            })
        })?;
    let declared = output.content_length().and_then(|n| u64::try_from(n).ok());
    if let Some(size) = declared.filter(|size| *size > max_bytes) {
        return Err(too_large(size));
    }
    let mut bytes = Vec::with_capacity(declared.unwrap_or(0) as usize);
    while let Some(chunk) = output
        .body
        .try_next()
        .await
        .map_err(|e| failed(format!("reading the body: {e}")))?
    {
        bytes.extend_from_slice(&chunk);
        if bytes.len() as u64 > max_bytes {
            return Err(too_large(bytes.len() as u64));
        }
    }
    Ok(bytes)
}

/// Reads the failed batch at `object`, which must be where `expected` says
/// and one of `stream_arn`.
pub async fn fetch_failed_batch(
    client: &aws_sdk_s3::Client,
    object: &ObjectRef,
    expected: Expected<'_>,
    stream_arn: &str,
) -> Result<FailedBatchObject, ReplayError> {
    expected.check(object)?;
    let bytes = get_object_bytes(client, object, MAX_OBJECT_BYTES)
        .await
        .map_err(|err| match err {
            ObjectReadError::Missing { object } => ReplayError::ObjectMissing { object },
            ObjectReadError::TooLarge { object, size, max } => ReplayError::ObjectTooLarge { object, size, max },
            ObjectReadError::Failed { object, why } => ReplayError::ObjectStore { object, why },
        })?;
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
        let batch = fetch_failed_batch(&client(&rule), &at(), Expected::KeyLayout, STREAM)
            .await
            .unwrap();
        assert_eq!(batch.payload.records.len(), 2);
        assert_eq!(rule.num_calls(), 1);
    }

    #[tokio::test]
    async fn a_missing_object_is_a_permanent_failure() {
        let rule = mock!(aws_sdk_s3::Client::get_object)
            .then_error(|| GetObjectError::NoSuchKey(NoSuchKey::builder().message("gone").build()));
        let err = fetch_failed_batch(&client(&rule), &at(), Expected::KeyLayout, STREAM)
            .await
            .unwrap_err();
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
        let err = fetch_failed_batch(&client(&garbage), &at(), Expected::KeyLayout, STREAM)
            .await
            .unwrap_err();
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
        let err = fetch_failed_batch(&client(&slow), &at(), Expected::KeyLayout, STREAM)
            .await
            .unwrap_err();
        assert!(
            matches!(err, ReplayError::ObjectStore { .. }) && !err.is_permanent(),
            "{err}"
        );
        assert!(err.to_string().contains("SlowDown"), "{err}");
    }

    #[tokio::test]
    async fn an_object_of_another_stream_is_a_permanent_failure() {
        let rule = serves(OBJECT);
        let err = fetch_failed_batch(
            &client(&rule),
            &at(),
            Expected::KeyLayout,
            "arn:aws:dynamodb:us-east-1:1:table/x/stream/y",
        )
        .await
        .unwrap_err();
        assert!(
            matches!(err, ReplayError::WrongStream { .. }) && err.is_permanent(),
            "{err}"
        );
    }

    #[tokio::test]
    async fn an_object_outside_the_stacks_failed_batches_is_refused_without_a_read() {
        let rule = serves(OBJECT);
        let stack = Expected::Stack {
            bucket: "failed-batches",
            mapping_uuid: "m",
        };
        // The stack's own object is read.
        fetch_failed_batch(&client(&rule), &at(), stack, STREAM).await.unwrap();
        let cases = [
            (
                ObjectRef {
                    bucket: "someone-elses".to_owned(),
                    ..at()
                },
                stack,
                "not in the stack's failed-batch bucket failed-batches",
            ),
            (
                ObjectRef {
                    key: "aws/lambda/other-mapping/shardId-1/x".to_owned(),
                    ..at()
                },
                stack,
                "not under aws/lambda/m/",
            ),
            (
                ObjectRef {
                    key: "secrets/config.json".to_owned(),
                    ..at()
                },
                Expected::KeyLayout,
                "not under aws/lambda/",
            ),
            (
                ObjectRef {
                    key: "aws/lambda//x".to_owned(),
                    ..at()
                },
                Expected::KeyLayout,
                "<mapping uuid>/",
            ),
        ];
        for (object, expected, why) in cases {
            let err = fetch_failed_batch(&client(&rule), &object, expected, STREAM)
                .await
                .unwrap_err();
            assert!(
                matches!(err, ReplayError::ForeignObject { .. }) && err.is_permanent(),
                "{err}"
            );
            assert!(err.to_string().contains(why), "{err}");
        }
        assert_eq!(rule.num_calls(), 1, "only the stack's own object was requested");
    }

    #[tokio::test]
    async fn an_object_larger_than_any_failed_batch_is_not_read() {
        // Its declared length is refused before the body is read.
        let declared = mock!(aws_sdk_s3::Client::get_object).then_output(|| {
            GetObjectOutput::builder()
                .content_length(i64::try_from(MAX_OBJECT_BYTES).unwrap() + 1)
                .body(ByteStream::from_static(b"{}"))
                .build()
        });
        let err = fetch_failed_batch(&client(&declared), &at(), Expected::KeyLayout, STREAM)
            .await
            .unwrap_err();
        assert!(
            matches!(err, ReplayError::ObjectTooLarge { size, .. } if size == MAX_OBJECT_BYTES + 1),
            "{err}"
        );
        assert!(err.is_permanent());
        // Without a length, the read stops once past the cap.
        let body = vec![b' '; usize::try_from(MAX_OBJECT_BYTES).unwrap() + 1];
        let unsized_body = mock!(aws_sdk_s3::Client::get_object)
            .then_output(move || GetObjectOutput::builder().body(ByteStream::from(body.clone())).build());
        let err = fetch_failed_batch(&client(&unsized_body), &at(), Expected::KeyLayout, STREAM)
            .await
            .unwrap_err();
        assert!(matches!(err, ReplayError::ObjectTooLarge { .. }), "{err}");
    }

    #[test]
    fn the_cap_covers_the_largest_payload_lambda_can_write_escaped() {
        // A 6 MB event in which every byte needs escaping, plus the record.
        const LAMBDA_SYNC_PAYLOAD: u64 = 6 * 1024 * 1024;
        const { assert!(MAX_OBJECT_BYTES >= 2 * LAMBDA_SYNC_PAYLOAD + 4 * 1024) };
        // Well inside the function's memory.
        const { assert!(MAX_OBJECT_BYTES < 16 * 1024 * 1024) };
    }
}
