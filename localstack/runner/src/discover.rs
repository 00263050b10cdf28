//! The deployed event source mappings as the runner plays them. The AWS
//! layer reads them back from the emulator's Lambda API
//! (`hybrid_counter_aws::esm`) and the queue's visibility timeout and
//! redrive policy (`hybrid_counter_aws::sqs`); here they become a
//! [`Mapping`]: the filter patterns parsed and checked against what the
//! runner can evaluate, batch size, bisect, retries, record age, response
//! types, on-failure destination and starting position for a stream, the
//! queue's URL for SQS. The target function's tags (`GetFunction`) say
//! which disabled mappings the runner took over earlier. The function
//! listing and a function's environment, which schedules read too, are
//! here as well ([`function_names`], [`environment_variables`]).

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use hybrid_counter_aws::esm::{self, MappingConfig, function_name_from_arn};
use hybrid_counter_aws::sqs::{self as aws_sqs, RedrivePolicy, parse_queue_arn};
use serde::Serialize;
use serde_json::Value;

use crate::error::{Error, sdk_message};

/// One event source mapping as the runner plays it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Mapping {
    pub uuid: String,
    pub function_arn: String,
    /// The function's name (the ARN's name part, without a qualifier).
    pub function_name: String,
    pub source_arn: String,
    pub batch_size: usize,
    /// Parsed `FilterCriteria.Filters[].Pattern`; empty means no filter.
    pub filters: Vec<Value>,
    pub report_batch_item_failures: bool,
    /// Whether the emulator itself has the mapping enabled.
    pub emulator_enabled: bool,
    pub source: Source,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Source {
    Stream(StreamSettings),
    Queue(QueueSettings),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum StartingPosition {
    TrimHorizon,
    Latest,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct StreamSettings {
    pub starting_position: StartingPosition,
    pub bisect_batch_on_function_error: bool,
    /// `None`: retry until the record expires (`MaximumRetryAttempts` -1).
    pub maximum_retry_attempts: Option<u32>,
    /// `None`: no age limit (`MaximumRecordAgeInSeconds` -1).
    pub maximum_record_age: Option<Duration>,
    /// ARN of the on-failure destination (an SQS queue, or an S3 bucket
    /// that keeps the batch with its records), if any.
    pub on_failure_destination: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct QueueSettings {
    pub queue_url: String,
    pub visibility_timeout: Duration,
    pub redrive: Option<RedrivePolicy>,
}

/// Parses the filter patterns, refusing what the runner's matcher cannot
/// evaluate faithfully (content filters such as `prefix` or `numeric`):
/// silently treating them as "no match" would drop records Lambda delivers.
pub fn parse_filters(uuid: &str, patterns: &[String]) -> Result<Vec<Value>, Error> {
    fn supported(pattern: &Value) -> bool {
        match pattern {
            Value::Object(fields) => !fields.is_empty() && fields.values().all(supported),
            Value::Array(values) => values.iter().all(|v| !v.is_object() && !v.is_array()),
            _ => false,
        }
    }
    patterns
        .iter()
        .map(|raw| {
            let unsupported = |reason: String| Error::UnsupportedMapping {
                uuid: uuid.to_owned(),
                reason,
            };
            let value: Value = serde_json::from_str(raw)
                .map_err(|e| unsupported(format!("filter pattern {raw:?} is not JSON: {e}")))?;
            if !supported(&value) {
                return Err(unsupported(format!(
                    "filter pattern {raw} uses more than nested fields with lists of literal values, \
                     which is all the local runner evaluates"
                )));
            }
            Ok(value)
        })
        .collect()
}

/// Reads every enabled mapping, and every disabled one the runner took over
/// earlier, from the emulator; only those of `functions` when given.
pub async fn discover(
    lambda: &aws_sdk_lambda::Client,
    sqs: &aws_sdk_sqs::Client,
    functions: Option<&[String]>,
) -> Result<Vec<Mapping>, Error> {
    let configs = esm::list_mappings(lambda)
        .await
        .map_err(|e| Error::emulator("Lambda", "ListEventSourceMappings")(sdk_message(e)))?;
    let mut tags_seen: BTreeMap<String, HashMap<String, String>> = BTreeMap::new();
    let mut mappings = Vec::new();
    for config in configs {
        let function_arn = config.function_arn.clone().unwrap_or_default();
        let function_name = function_name_from_arn(&function_arn);
        if functions.is_some_and(|only| !only.iter().any(|f| f == &function_name)) {
            continue;
        }
        if !tags_seen.contains_key(&function_name) {
            let tags = function_tags(lambda, &function_name).await?;
            tags_seen.insert(function_name.clone(), tags);
        }
        let emulator_enabled = esm::is_active_state(config.state.as_deref());
        let taken_over = tags_seen[&function_name].contains_key(&esm::takeover_tag(&config.uuid));
        if !emulator_enabled && !taken_over {
            continue;
        }
        let mut mapping = mapping_from(sqs, config, function_arn, function_name).await?;
        mapping.emulator_enabled = emulator_enabled;
        mappings.push(mapping);
    }
    mappings.sort_by(|a, b| a.uuid.cmp(&b.uuid));
    Ok(mappings)
}

/// Every function deployed in the emulator (`ListFunctions`).
pub(crate) async fn function_names(lambda: &aws_sdk_lambda::Client) -> Result<Vec<String>, Error> {
    let mut names = Vec::new();
    let mut pages = lambda.list_functions().into_paginator().send();
    while let Some(page) = pages.next().await {
        let page = page.map_err(|e| Error::emulator("Lambda", "ListFunctions")(sdk_message(e)))?;
        names.extend(
            page.functions()
                .iter()
                .filter_map(|f| f.function_name().map(str::to_owned)),
        );
    }
    Ok(names)
}

/// A function configuration's environment variables (none: empty).
pub(crate) fn environment_variables(
    environment: Option<&aws_sdk_lambda::types::EnvironmentResponse>,
) -> BTreeMap<String, String> {
    environment
        .and_then(|e| e.variables())
        .map(|vars| vars.iter().map(|(k, v)| (k.clone(), v.clone())).collect())
        .unwrap_or_default()
}

/// The function's tags (`GetFunction`).
async fn function_tags(lambda: &aws_sdk_lambda::Client, function_name: &str) -> Result<HashMap<String, String>, Error> {
    let out = lambda
        .get_function()
        .function_name(function_name)
        .send()
        .await
        .map_err(|e| Error::emulator("Lambda", "GetFunction")(sdk_message(e)))?;
    Ok(out.tags.unwrap_or_default())
}

async fn mapping_from(
    sqs: &aws_sdk_sqs::Client,
    config: MappingConfig,
    function_arn: String,
    function_name: String,
) -> Result<Mapping, Error> {
    let uuid = config.uuid.clone();
    let source_arn = config.event_source_arn.clone().unwrap_or_default();
    let unsupported = |reason: String| Error::UnsupportedMapping {
        uuid: uuid.clone(),
        reason,
    };
    let filters = parse_filters(&uuid, &config.filter_patterns)?;
    let batch_size = usize::try_from(config.batch_size.unwrap_or(0))
        .ok()
        .filter(|n| *n > 0)
        .ok_or_else(|| unsupported(format!("batch size {:?} is not positive", config.batch_size)))?;
    let report_batch_item_failures = config.reports_batch_item_failures();
    let source = if source_arn.contains(":dynamodb:") && source_arn.contains("/stream/") {
        let starting_position = match config.starting_position.as_deref() {
            Some("LATEST") => StartingPosition::Latest,
            Some("TRIM_HORIZON") | None => StartingPosition::TrimHorizon,
            Some(other) => return Err(unsupported(format!("starting position {other} is not supported"))),
        };
        let on_failure_destination = config.on_failure_destination.clone().filter(|d| !d.is_empty());
        if let Some(destination) = &on_failure_destination
            && parse_queue_arn(destination).is_none()
            && parse_bucket_arn(destination).is_none()
        {
            return Err(unsupported(format!(
                "the on-failure destination {destination} is neither an SQS queue nor an S3 bucket ARN; \
                 the local runner plays only those two"
            )));
        }
        Source::Stream(StreamSettings {
            starting_position,
            bisect_batch_on_function_error: config.bisect_batch_on_function_error.unwrap_or(false),
            maximum_retry_attempts: config.maximum_retry_attempts.and_then(|n| u32::try_from(n).ok()),
            maximum_record_age: config
                .maximum_record_age_in_seconds
                .and_then(|n| u64::try_from(n).ok())
                .map(Duration::from_secs),
            on_failure_destination,
        })
    } else if let Some((_, account, name)) = parse_queue_arn(&source_arn) {
        Source::Queue(queue_settings(sqs, account, name).await?)
    } else {
        return Err(unsupported(format!(
            "the source {source_arn} is neither a DynamoDB stream nor an SQS queue"
        )));
    };
    Ok(Mapping {
        uuid,
        function_arn,
        function_name,
        source_arn,
        batch_size,
        filters,
        report_batch_item_failures,
        emulator_enabled: true,
        source,
    })
}

/// The URL of the queue an SQS ARN names.
/// The bucket of an S3 bucket ARN (`arn:<partition>:s3:::<bucket>`).
pub fn parse_bucket_arn(arn: &str) -> Option<&str> {
    match arn.split(':').collect::<Vec<_>>().as_slice() {
        ["arn", _, "s3", "", "", bucket] if !bucket.is_empty() && !bucket.contains('/') => Some(bucket),
        _ => None,
    }
}

pub async fn queue_url(sqs: &aws_sdk_sqs::Client, arn: &str) -> Result<String, Error> {
    let (_, account, name) = parse_queue_arn(arn).ok_or_else(|| Error::Emulator {
        service: "SQS",
        operation: "GetQueueUrl",
        message: format!("{arn} is not an SQS queue ARN"),
    })?;
    lookup_queue_url(sqs, account, name).await
}

async fn lookup_queue_url(sqs: &aws_sdk_sqs::Client, account: &str, name: &str) -> Result<String, Error> {
    sqs.get_queue_url()
        .queue_name(name)
        .queue_owner_aws_account_id(account)
        .send()
        .await
        .map_err(|e| Error::emulator("SQS", "GetQueueUrl")(sdk_message(e)))?
        .queue_url
        .ok_or_else(|| Error::emulator("SQS", "GetQueueUrl")(format!("no URL for queue {name}")))
}

async fn queue_settings(sqs: &aws_sdk_sqs::Client, account: &str, name: &str) -> Result<QueueSettings, Error> {
    let queue_url = lookup_queue_url(sqs, account, name).await?;
    let attributes = aws_sqs::queue_attributes(sqs, &queue_url)
        .await
        .map_err(|e| Error::emulator("SQS", "GetQueueAttributes")(sdk_message(e)))?;
    Ok(QueueSettings {
        queue_url,
        visibility_timeout: attributes.visibility_timeout,
        redrive: attributes.redrive_policy,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_s3_on_failure_destination_is_a_bucket_arn_and_nothing_else() {
        assert_eq!(
            parse_bucket_arn("arn:aws:s3:::hc-failed-batch-1a2b3c4d"),
            Some("hc-failed-batch-1a2b3c4d")
        );
        assert_eq!(parse_bucket_arn("arn:aws-cn:s3:::b"), Some("b"));
        for not_a_bucket in [
            "arn:aws:s3:::",
            "arn:aws:s3:::b/key",
            "arn:aws:sqs:us-east-1:123456789012:q",
            "b",
        ] {
            assert_eq!(parse_bucket_arn(not_a_bucket), None, "{not_a_bucket}");
        }
    }

    #[test]
    fn the_kits_own_filter_patterns_are_accepted() {
        let raw: Vec<String> = hybrid_counter::stream::filter::patterns()
            .iter()
            .map(Value::to_string)
            .collect();
        assert_eq!(
            parse_filters("m", &raw).unwrap(),
            hybrid_counter::stream::filter::patterns()
        );
    }

    #[test]
    fn content_filters_the_runner_cannot_evaluate_are_refused() {
        for raw in [
            r#"{"dynamodb": {"Keys": {"id": {"S": [{"prefix": "w"}]}}}}"#,
            r#"{"eventName": "INSERT"}"#,
            r#"{}"#,
            "not json",
        ] {
            let err = parse_filters("m", &[raw.to_owned()]).unwrap_err();
            assert!(matches!(err, Error::UnsupportedMapping { .. }), "{raw}: {err}");
        }
    }
}
