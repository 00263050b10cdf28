//! Reading Lambda event source mappings: every setting the kit looks at —
//! state, batch size, filter patterns, retries, record age, bisect,
//! response types, starting position, on-failure destination — taken once
//! from the SDK's types into [`MappingConfig`]. The local runner plays the
//! mappings it lists ([`list_mappings`]); `counterctl status` reports one
//! ([`get_mapping`]).
//!
//! It also owns the local take-over of a mapping ([`take_over`]): an
//! emulator that cannot run Lambda code but still polls a mapped queue
//! swallows its messages, so the mapping is disabled there and played by
//! the kit's runner instead, marked by a tag on the target function. Both
//! `counterctl deploy` (right after the stack is in place, before anything
//! can be sent to the queue) and the runner take mappings over with it.

use aws_sdk_lambda::Client;
use aws_sdk_lambda::error::SdkError;
use aws_sdk_lambda::operation::get_event_source_mapping::{GetEventSourceMappingError, GetEventSourceMappingOutput};
use aws_sdk_lambda::operation::list_event_source_mappings::ListEventSourceMappingsError;
use aws_sdk_lambda::operation::tag_resource::TagResourceError;
use aws_sdk_lambda::operation::update_event_source_mapping::UpdateEventSourceMappingError;
use aws_sdk_lambda::types::{EventSourceMappingConfiguration, EventSourceMappingMetric, FunctionResponseType};
use serde::Serialize;

/// One event source mapping as Lambda describes it, in plain types. A
/// setting Lambda leaves out is `None` (or empty); nothing is defaulted here.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct MappingConfig {
    pub uuid: String,
    /// `Creating`, `Enabled`, `Disabled`, `Updating`, ...
    #[serde(skip_serializing_if = "Option::is_none")]
    pub state: Option<String>,
    /// Why the state last changed (`StateTransitionReason`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub state_reason: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_processing_result: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub event_source_arn: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub function_arn: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub batch_size: Option<i32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub parallelization_factor: Option<i32>,
    /// -1: retry until the record expires.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub maximum_retry_attempts: Option<i32>,
    /// -1: no age limit.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub maximum_record_age_in_seconds: Option<i32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bisect_batch_on_function_error: Option<bool>,
    /// As Lambda names them, e.g. `ReportBatchItemFailures`.
    pub function_response_types: Vec<String>,
    /// `TRIM_HORIZON`, `LATEST` or `AT_TIMESTAMP`; stream sources only.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub starting_position: Option<String>,
    /// The on-failure destination's ARN, as configured.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub on_failure_destination: Option<String>,
    /// `FilterCriteria.Filters[].Pattern`: JSON text, as configured.
    pub filter_patterns: Vec<String>,
    /// `MetricsConfig.Metrics`: the mapping's own metric groups Lambda
    /// publishes (`EventCount`: `DroppedEventCount` and the other counts).
    pub metrics: Vec<String>,
}

impl MappingConfig {
    /// Whether Lambda publishes the mapping's event counts
    /// (`DroppedEventCount` and the rest: `MetricsConfig` `EventCount`).
    pub fn publishes_event_counts(&self) -> bool {
        self.metrics
            .iter()
            .any(|m| m == EventSourceMappingMetric::EventCount.as_str())
    }

    /// Whether the function answers with a partial batch response.
    pub fn reports_batch_item_failures(&self) -> bool {
        let wanted = FunctionResponseType::ReportBatchItemFailures;
        self.function_response_types.iter().any(|t| t == wanted.as_str())
    }
}

/// `ListEventSourceMappings` and `GetEventSourceMapping` answer with the
/// same getters on two types; one body reads both.
macro_rules! mapping_config_from {
    ($($sdk:ty),+) => {$(
        impl From<&$sdk> for MappingConfig {
            fn from(m: &$sdk) -> Self {
                let owned = |s: Option<&str>| s.map(str::to_owned);
                Self {
                    uuid: m.uuid().unwrap_or_default().to_owned(),
                    state: owned(m.state()),
                    state_reason: owned(m.state_transition_reason()),
                    last_processing_result: owned(m.last_processing_result()),
                    event_source_arn: owned(m.event_source_arn()),
                    function_arn: owned(m.function_arn()),
                    batch_size: m.batch_size(),
                    parallelization_factor: m.parallelization_factor(),
                    maximum_retry_attempts: m.maximum_retry_attempts(),
                    maximum_record_age_in_seconds: m.maximum_record_age_in_seconds(),
                    bisect_batch_on_function_error: m.bisect_batch_on_function_error(),
                    function_response_types: m
                        .function_response_types()
                        .iter()
                        .map(|t| t.as_str().to_owned())
                        .collect(),
                    starting_position: m.starting_position().map(|p| p.as_str().to_owned()),
                    on_failure_destination: owned(
                        m.destination_config()
                            .and_then(|d| d.on_failure())
                            .and_then(|f| f.destination()),
                    ),
                    filter_patterns: m
                        .filter_criteria()
                        .map(|c| c.filters().iter().filter_map(|f| owned(f.pattern())).collect())
                        .unwrap_or_default(),
                    metrics: m
                        .metrics_config()
                        .map(|c| c.metrics().iter().map(|m| m.as_str().to_owned()).collect())
                        .unwrap_or_default(),
                }
            }
        }
    )+};
}

mapping_config_from!(EventSourceMappingConfiguration, GetEventSourceMappingOutput);

/// Every event source mapping of the account and region, across pages. An
/// emulator that hands back the marker it was given would page forever;
/// the paginator stops there (and on an empty marker).
pub async fn list_mappings(client: &Client) -> Result<Vec<MappingConfig>, SdkError<ListEventSourceMappingsError>> {
    let mappings: Vec<_> = client
        .list_event_source_mappings()
        .into_paginator()
        .items()
        .send()
        .try_collect()
        .await?;
    Ok(mappings.iter().map(MappingConfig::from).collect())
}

/// The event source mapping `uuid`.
pub async fn get_mapping(client: &Client, uuid: &str) -> Result<MappingConfig, SdkError<GetEventSourceMappingError>> {
    let output = client.get_event_source_mapping().uuid(uuid).send().await?;
    Ok(MappingConfig::from(&output))
}

/// Tag on a target function saying the local runner plays one of its
/// mappings (`<prefix><uuid>`), with the emulator's own copy disabled.
pub const TAKEOVER_TAG_PREFIX: &str = "esm-runner:plays:";

/// The take-over tag's key for mapping `uuid`.
pub fn takeover_tag(uuid: &str) -> String {
    format!("{TAKEOVER_TAG_PREFIX}{uuid}")
}

/// Tag on a function whose mappings a local runner plays until stopped
/// (`counterctl local run`, `make deploy`): its heartbeat, rewritten every
/// few seconds, and whether it can invoke the handlers ([`RunnerHealth`]).
/// Removed when the runner stops cleanly; a stale one means it died.
pub const RUNNER_HEALTH_TAG: &str = "esm-runner:health";

/// A heartbeat older than this means the runner is not running.
pub const RUNNER_HEARTBEAT_STALE_SECS: u64 = 30;

/// What a runner last said about itself, in [`RUNNER_HEALTH_TAG`]:
/// `ok <unix seconds>` or `failing <unix seconds> <reason>`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunnerHealth {
    pub at_unix_secs: u64,
    /// Why it cannot play the mappings (it cannot invoke the handlers).
    pub problem: Option<String>,
}

impl RunnerHealth {
    /// The tag value: at most 256 characters of those a tag value may hold.
    pub fn tag_value(&self) -> String {
        let value = match &self.problem {
            None => format!("ok {}", self.at_unix_secs),
            Some(problem) => format!("failing {} {problem}", self.at_unix_secs),
        };
        value
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || " _.:/=+-@".contains(c) {
                    c
                } else {
                    ' '
                }
            })
            .take(256)
            .collect()
    }

    /// Reads a tag value back; `None` when it is not one.
    pub fn parse(value: &str) -> Option<Self> {
        let (state, rest) = value.split_once(' ')?;
        let (at, problem) = rest.split_once(' ').unwrap_or((rest, ""));
        let at_unix_secs = at.parse().ok()?;
        match state {
            "ok" => Some(Self {
                at_unix_secs,
                problem: None,
            }),
            "failing" => Some(Self {
                at_unix_secs,
                problem: Some(problem.trim().to_owned()),
            }),
            _ => None,
        }
    }

    /// What needs attention at `now_unix_secs`: the reason it cannot
    /// invoke, or that it stopped reporting.
    pub fn attention(&self, now_unix_secs: u64) -> Option<String> {
        let age = now_unix_secs.saturating_sub(self.at_unix_secs);
        if age > RUNNER_HEARTBEAT_STALE_SECS {
            return Some(format!(
                "the local runner is not running: its last heartbeat is {age}s old (start it with `make local-run`; \
                 log .run/local-runner.log)"
            ));
        }
        self.problem
            .as_ref()
            .map(|problem| format!("the local runner cannot invoke the handlers: {problem}"))
    }
}

/// Whether Lambda polls this mapping now (or is about to).
pub fn is_active_state(state: Option<&str>) -> bool {
    matches!(state, Some("Enabled" | "Enabling" | "Updating" | "Creating"))
}

/// Whether an event source ARN names an SQS queue.
pub fn is_queue_source(arn: &str) -> bool {
    arn.split(':').nth(2) == Some("sqs")
}

/// Why a take-over failed: the call that failed and the SDK's error.
#[derive(Debug)]
pub enum TakeOverError {
    Tag(SdkError<TagResourceError>),
    Disable(SdkError<UpdateEventSourceMappingError>),
}

/// Takes mapping `uuid` (targeting `function_arn`) over from the emulator:
/// tags the function first, so that a runner reading the mappings meanwhile
/// still plays the mapping once it is disabled, then disables the
/// emulator's copy.
pub async fn take_over(client: &Client, uuid: &str, function_arn: &str) -> Result<(), TakeOverError> {
    client
        .tag_resource()
        .resource(function_arn)
        .tags(takeover_tag(uuid), "true")
        .send()
        .await
        .map_err(TakeOverError::Tag)?;
    client
        .update_event_source_mapping()
        .uuid(uuid)
        .enabled(false)
        .send()
        .await
        .map_err(TakeOverError::Disable)?;
    Ok(())
}

/// The name part of a function ARN (`arn:aws:lambda:r:a:function:NAME[:qualifier]`),
/// or the input when it is already a name.
pub fn function_name_from_arn(arn: &str) -> String {
    match arn.split(':').collect::<Vec<_>>().as_slice() {
        ["arn", _, "lambda", _, _, "function", name, ..] => (*name).to_owned(),
        _ => arn.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    //! The conversion from both SDK types and the paging, through an
    //! intercepted Lambda client.

    use aws_sdk_lambda::operation::list_event_source_mappings::ListEventSourceMappingsOutput;
    use aws_sdk_lambda::types::{DestinationConfig, EventSourcePosition, Filter, FilterCriteria, OnFailure};
    use aws_smithy_mocks::{Rule, mock};

    use super::*;
    use aws_smithy_mocks::mock_client;

    const STREAM: &str = "arn:aws:dynamodb:us-east-1:123456789012:table/resources/stream/2024-01-01T00:00:00.000";
    const DLQ1: &str = "arn:aws:sqs:us-east-1:123456789012:hck-dlq1";
    const PATTERN: &str = r#"{"eventName":["INSERT"]}"#;

    /// Every setting the kit reads, on either SDK type's builder.
    macro_rules! with_every_setting {
        ($builder:expr) => {
            $builder
                .uuid("m-1")
                .state("Enabled")
                .state_transition_reason("USER_INITIATED")
                .last_processing_result("OK")
                .event_source_arn(STREAM)
                .function_arn("arn:aws:lambda:us-east-1:123456789012:function:hck-stream-counter")
                .batch_size(100)
                .parallelization_factor(1)
                .maximum_retry_attempts(-1)
                .maximum_record_age_in_seconds(3600)
                .bisect_batch_on_function_error(true)
                .function_response_types(FunctionResponseType::ReportBatchItemFailures)
                .starting_position(EventSourcePosition::TrimHorizon)
                .destination_config(
                    DestinationConfig::builder()
                        .on_failure(OnFailure::builder().destination(DLQ1).build())
                        .build(),
                )
                .filter_criteria(
                    FilterCriteria::builder()
                        .filters(Filter::builder().pattern(PATTERN).build())
                        .build(),
                )
                .metrics_config(
                    aws_sdk_lambda::types::EventSourceMappingMetricsConfig::builder()
                        .metrics(EventSourceMappingMetric::EventCount)
                        .build(),
                )
        };
    }

    fn expected() -> MappingConfig {
        MappingConfig {
            uuid: "m-1".into(),
            state: Some("Enabled".into()),
            state_reason: Some("USER_INITIATED".into()),
            last_processing_result: Some("OK".into()),
            event_source_arn: Some(STREAM.into()),
            function_arn: Some("arn:aws:lambda:us-east-1:123456789012:function:hck-stream-counter".into()),
            batch_size: Some(100),
            parallelization_factor: Some(1),
            maximum_retry_attempts: Some(-1),
            maximum_record_age_in_seconds: Some(3600),
            bisect_batch_on_function_error: Some(true),
            function_response_types: vec!["ReportBatchItemFailures".into()],
            starting_position: Some("TRIM_HORIZON".into()),
            on_failure_destination: Some(DLQ1.into()),
            filter_patterns: vec![PATTERN.into()],
            metrics: vec!["EventCount".into()],
        }
    }

    fn page(marker: Option<&'static str>, uuids: &'static [&'static str], next: Option<&'static str>) -> Rule {
        mock!(Client::list_event_source_mappings)
            .match_requests(move |r| r.marker() == marker)
            .then_output(move || {
                ListEventSourceMappingsOutput::builder()
                    .set_event_source_mappings(Some(
                        uuids
                            .iter()
                            .map(|u| EventSourceMappingConfiguration::builder().uuid(*u).build())
                            .collect(),
                    ))
                    .set_next_marker(next.map(str::to_owned))
                    .build()
            })
    }

    fn uuids(mappings: &[MappingConfig]) -> Vec<&str> {
        mappings.iter().map(|m| m.uuid.as_str()).collect()
    }

    #[tokio::test]
    async fn a_listed_mapping_carries_every_setting() {
        let rule = mock!(Client::list_event_source_mappings).then_output(|| {
            ListEventSourceMappingsOutput::builder()
                .event_source_mappings(with_every_setting!(EventSourceMappingConfiguration::builder()).build())
                .build()
        });
        let client = mock_client!(aws_sdk_lambda, &[rule]);
        let mappings = list_mappings(&client).await.unwrap();
        assert_eq!(mappings, vec![expected()]);
        assert!(mappings[0].reports_batch_item_failures());
        assert!(mappings[0].publishes_event_counts());
    }

    #[tokio::test]
    async fn a_mapping_read_by_uuid_converts_like_a_listed_one() {
        let rule = mock!(Client::get_event_source_mapping)
            .match_requests(|r| r.uuid() == Some("m-1"))
            .then_output(|| with_every_setting!(GetEventSourceMappingOutput::builder()).build());
        let client = mock_client!(aws_sdk_lambda, &[rule]);
        assert_eq!(get_mapping(&client, "m-1").await.unwrap(), expected());
    }

    #[tokio::test]
    async fn a_bare_mapping_leaves_its_settings_unset() {
        let rule = mock!(Client::get_event_source_mapping)
            .then_output(|| GetEventSourceMappingOutput::builder().uuid("m-2").build());
        let client = mock_client!(aws_sdk_lambda, &[rule]);
        let mapping = get_mapping(&client, "m-2").await.unwrap();
        assert_eq!(
            mapping,
            MappingConfig {
                uuid: "m-2".into(),
                ..MappingConfig::default()
            }
        );
        assert!(!mapping.reports_batch_item_failures());
        assert!(!mapping.publishes_event_counts());
    }

    #[tokio::test]
    async fn every_page_is_listed() {
        let client = mock_client!(
            aws_sdk_lambda,
            &[
                page(None, &["a", "b"], Some("p2")),
                page(Some("p2"), &[], Some("p3")),
                page(Some("p3"), &["c"], Some("")),
            ]
        );
        assert_eq!(uuids(&list_mappings(&client).await.unwrap()), ["a", "b", "c"]);
    }

    #[tokio::test]
    async fn a_marker_handed_back_unchanged_ends_the_listing() {
        let client = mock_client!(
            aws_sdk_lambda,
            &[page(None, &["a"], Some("p2")), page(Some("p2"), &["b"], Some("p2"))]
        );
        assert_eq!(uuids(&list_mappings(&client).await.unwrap()), ["a", "b"]);
    }

    #[tokio::test]
    async fn a_take_over_tags_the_function_before_it_disables_the_mapping() {
        use aws_sdk_lambda::operation::tag_resource::TagResourceOutput;
        use aws_sdk_lambda::operation::update_event_source_mapping::UpdateEventSourceMappingOutput;
        const FUNCTION: &str = "arn:aws:lambda:us-east-1:123456789012:function:hck-reprocessor";
        // Sequential rules: a disable sent first would meet the tag's rule
        // and fail the test.
        let tag = mock!(Client::tag_resource)
            .match_requests(|r| {
                r.resource() == Some(FUNCTION)
                    && r.tags().and_then(|t| t.get("esm-runner:plays:m-1")).map(String::as_str) == Some("true")
            })
            .then_output(|| TagResourceOutput::builder().build());
        let disable = mock!(Client::update_event_source_mapping)
            .match_requests(|r| r.uuid() == Some("m-1") && r.enabled() == Some(false))
            .then_output(|| UpdateEventSourceMappingOutput::builder().build());
        let client = mock_client!(aws_sdk_lambda, &[tag, disable]);
        take_over(&client, "m-1", FUNCTION).await.unwrap();
    }

    #[test]
    fn only_queue_sources_and_polling_states_are_told_apart() {
        assert!(is_queue_source(DLQ1));
        assert!(!is_queue_source(STREAM));
        assert!(is_active_state(Some("Enabled")) && is_active_state(Some("Creating")));
        assert!(!is_active_state(Some("Disabled")) && !is_active_state(None));
    }

    #[test]
    fn function_names_come_from_arns_with_or_without_a_qualifier() {
        assert_eq!(
            function_name_from_arn("arn:aws:lambda:us-east-1:123456789012:function:hck-stream-counter"),
            "hck-stream-counter"
        );
        assert_eq!(
            function_name_from_arn("arn:aws:lambda:us-east-1:123456789012:function:f:live"),
            "f"
        );
        assert_eq!(function_name_from_arn("plain"), "plain");
    }

    #[test]
    fn a_runners_health_round_trips_through_its_tag_and_says_what_needs_attention() {
        let failing = RunnerHealth {
            at_unix_secs: 100,
            problem: Some("the handler binary api is not built (`target/debug/api` is missing)".to_owned()),
        };
        let value = failing.tag_value();
        assert!(!value.contains('`') && !value.contains('('), "{value}");
        let read = RunnerHealth::parse(&value).unwrap();
        assert_eq!(read.at_unix_secs, 100);
        assert!(
            read.attention(110)
                .unwrap()
                .contains("cannot invoke the handlers: the handler binary api")
        );
        let ok = RunnerHealth {
            at_unix_secs: 100,
            problem: None,
        };
        assert_eq!(RunnerHealth::parse(&ok.tag_value()), Some(ok.clone()));
        assert_eq!(ok.attention(100 + RUNNER_HEARTBEAT_STALE_SECS), None);
        assert!(ok.attention(200).unwrap().contains("not running"));
        assert_eq!(RunnerHealth::parse("garbage"), None);
    }
}
