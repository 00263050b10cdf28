//! `counterctl` against the emulator, driven as a library (the same
//! `ops_cli::execute` the binary calls) with `--endpoint-url` pointing at a
//! private fakecloud. The generated stack is deployed, then every resource
//! and setting is read back through the emulator's own service APIs (not
//! through CloudFormation): tables, stream, functions and their log
//! groups, roles and their policies, both event source mappings, queues and
//! redrive policy, alarms, the function URL. A redeploy with nothing to change must change nothing,
//! a parameter change goes through `plan` then `deploy`, and `destroy`
//! leaves the tables in place.
//!
//! Handler zips: see [`e2e::counterctl`].

use std::collections::{BTreeMap, BTreeSet};

use aws_sdk_dynamodb::types::{BillingMode, KeyType, PointInTimeRecoveryStatus, SseStatus, StreamViewType};
use aws_sdk_lambda::types::{Architecture, FunctionResponseType, FunctionUrlAuthType, Runtime};
use aws_sdk_sqs::types::QueueAttributeName;
use e2e::Emulator;
use e2e::counterctl::Counterctl;
use ops_cli::commands::deploy::{DeployReport, Outcome};
use ops_cli::{Report, exit};
use serde_json::Value;
use stack::outputs;

/// The service clients the checks read through.
pub(crate) struct Services {
    pub(crate) cfn: aws_sdk_cloudformation::Client,
    dynamodb: aws_sdk_dynamodb::Client,
    lambda: aws_sdk_lambda::Client,
    sqs: aws_sdk_sqs::Client,
    iam: aws_sdk_iam::Client,
    cloudwatch: aws_sdk_cloudwatch::Client,
    logs: aws_sdk_cloudwatchlogs::Client,
}

impl Services {
    pub(crate) async fn new(emulator: &Emulator) -> Self {
        let sdk = emulator.sdk_config().await;
        Self {
            cfn: aws_sdk_cloudformation::Client::new(&sdk),
            dynamodb: aws_sdk_dynamodb::Client::new(&sdk),
            lambda: aws_sdk_lambda::Client::new(&sdk),
            sqs: aws_sdk_sqs::Client::new(&sdk),
            iam: aws_sdk_iam::Client::new(&sdk),
            cloudwatch: aws_sdk_cloudwatch::Client::new(&sdk),
            logs: aws_sdk_cloudwatchlogs::Client::new(&sdk),
        }
    }

    /// Logical id -> physical id of every resource of the stack.
    pub(crate) async fn physical_ids(&self, stack: &str) -> BTreeMap<String, String> {
        let resources = self
            .cfn
            .list_stack_resources()
            .stack_name(stack)
            .send()
            .await
            .expect("list stack resources");
        resources
            .stack_resource_summaries()
            .iter()
            .map(|r| {
                (
                    r.logical_resource_id().unwrap_or_default().to_owned(),
                    r.physical_resource_id().unwrap_or_default().to_owned(),
                )
            })
            .collect()
    }

    async fn stack_exists(&self, stack: &str) -> bool {
        match self.cfn.describe_stacks().stack_name(stack).send().await {
            Ok(out) => out
                .stacks()
                .iter()
                .any(|s| s.stack_status().is_some_and(|st| st.as_str() != "DELETE_COMPLETE")),
            Err(_) => false,
        }
    }

    async fn table_exists(&self, table: &str) -> bool {
        self.dynamodb.describe_table().table_name(table).send().await.is_ok()
    }

    async fn batch_size(&self, uuid: &str) -> i32 {
        let mapping = self
            .lambda
            .get_event_source_mapping()
            .uuid(uuid)
            .send()
            .await
            .expect("get mapping");
        mapping.batch_size().expect("batch size")
    }
}

fn out<'a>(outputs: &'a BTreeMap<String, String>, key: &str) -> &'a str {
    outputs
        .get(key)
        .unwrap_or_else(|| panic!("output {key} missing: {outputs:?}"))
}

/// `arn:aws:dynamodb:r:a:table/<resources>` -> the same ARN for `table`.
fn table_arn_like(resources_arn: &str, table: &str) -> String {
    let (prefix, _) = resources_arn.rsplit_once('/').expect("table arn");
    format!("{prefix}/{table}")
}

async fn check_tables(s: &Services, o: &BTreeMap<String, String>) {
    let string_keys = |table: &aws_sdk_dynamodb::types::TableDescription| -> Vec<(String, KeyType)> {
        table
            .key_schema()
            .iter()
            .map(|k| (k.attribute_name().to_owned(), k.key_type().clone()))
            .collect()
    };
    for (name_output, sort_key, streamed) in [
        (outputs::RESOURCES_TABLE, "id", true),
        (outputs::COUNTERS_TABLE, "name", false),
    ] {
        let name = out(o, name_output);
        let described = s
            .dynamodb
            .describe_table()
            .table_name(name)
            .send()
            .await
            .expect("describe table");
        let table = described.table().expect("table description");
        assert_eq!(
            string_keys(table),
            [
                ("scope".to_owned(), KeyType::Hash),
                (sort_key.to_owned(), KeyType::Range)
            ],
            "{name} key schema"
        );
        for definition in table.attribute_definitions() {
            assert_eq!(definition.attribute_type().as_str(), "S", "{name}: {definition:?}");
        }
        assert_eq!(
            table.billing_mode_summary().and_then(|b| b.billing_mode()),
            Some(&BillingMode::PayPerRequest),
            "{name} billing"
        );
        assert_eq!(
            table.sse_description().and_then(|d| d.status()),
            Some(&SseStatus::Enabled),
            "{name} server-side encryption"
        );
        let backups = s
            .dynamodb
            .describe_continuous_backups()
            .table_name(name)
            .send()
            .await
            .expect("describe continuous backups");
        assert_eq!(
            backups
                .continuous_backups_description()
                .and_then(|d| d.point_in_time_recovery_description())
                .and_then(|p| p.point_in_time_recovery_status()),
            Some(&PointInTimeRecoveryStatus::Enabled),
            "{name} point-in-time recovery"
        );
        let stream = table.stream_specification();
        if streamed {
            let stream = stream.expect("resources table stream");
            assert!(stream.stream_enabled());
            assert_eq!(stream.stream_view_type(), Some(&StreamViewType::NewAndOldImages));
            assert_eq!(
                table.latest_stream_arn(),
                Some(out(o, outputs::RESOURCES_TABLE_STREAM_ARN))
            );
            assert_eq!(table.table_arn(), Some(out(o, outputs::RESOURCES_TABLE_ARN)));
        } else {
            assert!(
                !stream.is_some_and(|s| s.stream_enabled()),
                "{name} must have no stream"
            );
        }
    }
}

/// What each function is expected to look like.
struct FunctionSpec {
    output: &'static str,
    timeout: i32,
    env: &'static [&'static str],
}

const FUNCTIONS: [FunctionSpec; 3] = [
    FunctionSpec {
        output: outputs::STREAM_COUNTER_FUNCTION,
        timeout: 60,
        env: &[
            "COUNTERS_TABLE",
            "EC_SHARDS",
            "KIT_STACK_NAME",
            "PROCESSING_MODE",
            "RESOURCES_TABLE",
            "RESOURCE_KEY_SPREAD",
            "SCOPE_KEY_SHARDS",
        ],
    },
    FunctionSpec {
        output: outputs::DLQ_REPROCESSOR_FUNCTION,
        timeout: 120,
        env: &[
            "COUNTERS_TABLE",
            "DLQ2_URL",
            "EC_SHARDS",
            "KIT_STACK_NAME",
            "PROCESSING_MODE",
            "RESOURCES_TABLE",
            "RESOURCE_KEY_SPREAD",
            "SCOPE_KEY_SHARDS",
            "STREAM_ARN",
        ],
    },
    FunctionSpec {
        output: outputs::API_FUNCTION,
        timeout: 10,
        env: &[
            "ADMISSION_MODE",
            "BE_SHARDS",
            "COUNTERS_TABLE",
            "DEFAULT_LIMIT",
            "KIT_STACK_NAME",
            "RESOURCES_TABLE",
            "RESOURCE_KEY_SPREAD",
            "SCOPE_AUTHORIZATION",
            "SCOPE_KEY_SHARDS",
        ],
    },
];

/// Checks the three functions; returns (function name -> role name).
async fn check_functions(
    s: &Services,
    o: &BTreeMap<String, String>,
    report: &DeployReport,
) -> BTreeMap<String, String> {
    let mut roles = BTreeMap::new();
    let code_hashes: BTreeSet<String> = report
        .artifacts
        .iter()
        .map(|a| {
            let raw: Vec<u8> = (0..a.sha256.len())
                .step_by(2)
                .map(|i| u8::from_str_radix(&a.sha256[i..i + 2], 16).unwrap())
                .collect();
            aws_smithy_types::base64::encode(raw)
        })
        .collect();
    for spec in &FUNCTIONS {
        let name = out(o, spec.output);
        let config = s
            .lambda
            .get_function_configuration()
            .function_name(name)
            .send()
            .await
            .unwrap_or_else(|e| panic!("function {name}: {e:?}"));
        assert_eq!(config.runtime(), Some(&Runtime::Providedal2023), "{name} runtime");
        assert_eq!(config.handler(), Some("bootstrap"), "{name} handler");
        assert_eq!(config.architectures(), [Architecture::Arm64], "{name} architecture");
        assert_eq!(config.memory_size(), Some(256), "{name} memory");
        assert_eq!(config.timeout(), Some(spec.timeout), "{name} timeout");
        let variables = config
            .environment()
            .and_then(|e| e.variables())
            .cloned()
            .unwrap_or_default();
        let keys: Vec<&str> = {
            let mut keys: Vec<&str> = variables.keys().map(String::as_str).collect();
            keys.sort_unstable();
            keys
        };
        assert_eq!(keys, spec.env, "{name} environment");
        assert_eq!(variables["RESOURCES_TABLE"], out(o, outputs::RESOURCES_TABLE));
        assert_eq!(variables["COUNTERS_TABLE"], out(o, outputs::COUNTERS_TABLE));
        assert_eq!(
            variables["KIT_STACK_NAME"], "hybrid-counter",
            "the metrics' Stack dimension"
        );
        if let Some(limit) = variables.get("DEFAULT_LIMIT") {
            assert_eq!(limit, "100");
        }
        if let Some(admission) = variables.get("ADMISSION_MODE") {
            assert_eq!(admission, "best-effort");
        }
        for shards in ["EC_SHARDS", "BE_SHARDS", "SCOPE_KEY_SHARDS"] {
            if let Some(n) = variables.get(shards) {
                assert_eq!(n, "1", "{name} {shards}");
            }
        }
        if let Some(mode) = variables.get("PROCESSING_MODE") {
            assert_eq!(mode, "batched");
        }
        // Its own log group, JSON logs, 30 days of retention.
        let group = format!("/aws/lambda/{name}");
        let logging = config.logging_config().expect("logging config");
        assert_eq!(
            logging.log_format().map(|f| f.as_str()),
            Some("JSON"),
            "{name} log format"
        );
        assert!(
            logging.log_group().is_some_and(|g| g.contains(&group)),
            "{name} logs to {group}: {logging:?}"
        );
        let groups = s
            .logs
            .describe_log_groups()
            .log_group_name_prefix(&group)
            .send()
            .await
            .expect("describe log groups");
        let found = groups
            .log_groups()
            .iter()
            .find(|g| g.log_group_name() == Some(group.as_str()))
            .unwrap_or_else(|| panic!("log group {group} missing"));
        assert_eq!(found.retention_in_days(), Some(30), "{group} retention");
        // The code is the uploaded zip: Lambda's CodeSha256 is the base64 SHA-256.
        let code = config.code_sha256().unwrap_or_default();
        assert!(
            code_hashes.contains(code),
            "{name} code {code} not one of {code_hashes:?}"
        );
        let role_arn = config.role().expect("role");
        let role = role_arn.rsplit('/').next().unwrap().to_owned();
        roles.insert(name.to_owned(), role);
    }
    assert_eq!(
        roles.values().collect::<BTreeSet<_>>().len(),
        3,
        "one role per function: {roles:?}"
    );
    roles
}

/// Decodes an IAM policy document (URL-encoded on the wire, as IAM returns it).
fn policy_json(document: &str) -> Value {
    let decoded = if document.trim_start().starts_with('{') {
        document.to_owned()
    } else {
        percent_encoding::percent_decode_str(document)
            .decode_utf8()
            .expect("utf-8 policy")
            .into_owned()
    };
    serde_json::from_str(&decoded).unwrap_or_else(|e| panic!("policy document {decoded}: {e}"))
}

fn as_list(value: &Value) -> Vec<String> {
    match value {
        Value::String(s) => vec![s.clone()],
        Value::Array(items) => items.iter().filter_map(Value::as_str).map(str::to_owned).collect(),
        _ => Vec::new(),
    }
}

/// Every statement of `role`'s inline policies (it has no managed ones).
async fn role_statements(s: &Services, role: &str) -> Vec<Value> {
    let names = s
        .iam
        .list_role_policies()
        .role_name(role)
        .send()
        .await
        .expect("list role policies");
    let attached = s
        .iam
        .list_attached_role_policies()
        .role_name(role)
        .send()
        .await
        .expect("list attached policies");
    assert!(
        attached.attached_policies().is_empty(),
        "{role}: no managed policies expected: {:?}",
        attached.attached_policies()
    );
    let mut statements = Vec::new();
    for name in names.policy_names() {
        let policy = s
            .iam
            .get_role_policy()
            .role_name(role)
            .policy_name(name)
            .send()
            .await
            .expect("get role policy");
        let document = policy_json(policy.policy_document());
        statements.extend(document["Statement"].as_array().expect("statements").iter().cloned());
    }
    statements
}

/// `(action, resource)` pairs `role` allows.
async fn allowed_pairs(s: &Services, role: &str) -> BTreeSet<(String, String)> {
    let mut pairs = BTreeSet::new();
    for statement in role_statements(s, role).await {
        if statement["Effect"] == "Deny" {
            continue;
        }
        assert_eq!(statement["Effect"], "Allow", "{role}: {statement}");
        for action in as_list(&statement["Action"]) {
            for resource in as_list(&statement["Resource"]) {
                pairs.insert((action.clone(), resource));
            }
        }
    }
    pairs
}

async fn check_roles(s: &Services, o: &BTreeMap<String, String>, roles: &BTreeMap<String, String>) {
    let resources = out(o, outputs::RESOURCES_TABLE_ARN);
    let counters = table_arn_like(resources, out(o, outputs::COUNTERS_TABLE));
    let stream = out(o, outputs::RESOURCES_TABLE_STREAM_ARN);
    let dlq1 = out(o, outputs::DLQ1_ARN);
    let account = resources.split(':').nth(4).expect("account in arn");
    let pair = |a: &str, r: &str| (a.to_owned(), r.to_owned());
    let logs = |function: &str| {
        let group = format!("arn:aws:logs:us-east-1:{account}:log-group:/aws/lambda/{function}:*");
        [pair("logs:CreateLogStream", &group), pair("logs:PutLogEvents", &group)]
    };
    // Stream processing: a chunk's deletes read their items with one
    // BatchGetItem (batched mode), a record's with GetItem (per-record).
    let item_writes = [
        pair("dynamodb:GetItem", resources),
        pair("dynamodb:BatchGetItem", resources),
        pair("dynamodb:UpdateItem", resources),
        pair("dynamodb:DeleteItem", resources),
        pair("dynamodb:UpdateItem", &counters),
        // The layout record (its partition only, by condition), read at
        // start; only counterctl writes it.
        pair("dynamodb:GetItem", &counters),
    ];
    // The replay reads the shard its message names.
    let stream_reads = [
        pair("dynamodb:GetRecords", stream),
        pair("dynamodb:GetShardIterator", stream),
    ];

    let stream_counter = out(o, outputs::STREAM_COUNTER_FUNCTION);
    let mut expected: BTreeSet<_> = item_writes.iter().chain(&stream_reads).cloned().collect();
    // The stream mapping's own reads.
    expected.insert(pair("dynamodb:DescribeStream", stream));
    expected.insert(pair("dynamodb:ListStreams", stream));
    // The grants of the stack's FailedBatchRecords only: the bucket's
    // objects under payload (the output exists only then), DLQ1 under pointer.
    let bucket = o.get(outputs::FAILED_BATCH_BUCKET).map(|b| format!("arn:aws:s3:::{b}"));
    match &bucket {
        Some(bucket) => {
            expected.insert(pair("s3:PutObject", &format!("{bucket}/*")));
            expected.insert(pair("s3:ListBucket", bucket));
        }
        None => {
            expected.insert(pair("sqs:SendMessage", dlq1));
        }
    }
    expected.extend(logs(stream_counter));
    assert_eq!(
        allowed_pairs(s, &roles[stream_counter]).await,
        expected,
        "stream counter role"
    );

    let reprocessor = out(o, outputs::DLQ_REPROCESSOR_FUNCTION);
    let mut expected: BTreeSet<_> = item_writes.iter().chain(&stream_reads).cloned().collect();
    // What the SQS mapping does with the function's role (AWS documents these three).
    for action in ["sqs:ReceiveMessage", "sqs:DeleteMessage", "sqs:GetQueueAttributes"] {
        expected.insert(pair(action, dlq1));
    }
    // Permanent failures go straight to DLQ2, and nowhere else.
    expected.insert(pair("sqs:SendMessage", out(o, outputs::DLQ2_ARN)));
    if let Some(bucket) = &bucket {
        expected.insert(pair("s3:GetObject", &format!("{bucket}/*")));
        expected.insert(pair("s3:ListBucket", bucket));
    }
    expected.extend(logs(reprocessor));
    assert_eq!(
        allowed_pairs(s, &roles[reprocessor]).await,
        expected,
        "reprocessor role"
    );

    let api = out(o, outputs::API_FUNCTION);
    let mut expected: BTreeSet<_> = [
        pair("dynamodb:GetItem", resources),
        pair("dynamodb:PutItem", resources),
        pair("dynamodb:UpdateItem", resources),
        pair("dynamodb:Query", &counters),
        pair("dynamodb:UpdateItem", &counters),
        pair("dynamodb:GetItem", &counters),
        // The Put of a gapless sequence claim's numbered item.
        pair("dynamodb:PutItem", &counters),
    ]
    .into_iter()
    .collect();
    expected.extend(logs(api));
    assert_eq!(allowed_pairs(s, &roles[api]).await, expected, "api role");

    // The kit's own state partition is the drift check's alone, and the
    // layout record is read-only to every function.
    for function in [stream_counter, reprocessor, api] {
        let denies: Vec<Value> = role_statements(s, &roles[function])
            .await
            .into_iter()
            .filter(|st| st["Effect"] == "Deny")
            .collect();
        assert_eq!(denies.len(), 2, "{function}: {denies:?}");
        assert_eq!(
            as_list(&denies[1]["Condition"]["ForAnyValue:StringEquals"]["dynamodb:LeadingKeys"]),
            [hybrid_counter::keys::LAYOUT_SCOPE],
            "{function}"
        );
        assert_eq!(
            as_list(&denies[1]["Action"]),
            [
                "dynamodb:PutItem",
                "dynamodb:UpdateItem",
                "dynamodb:DeleteItem",
                "dynamodb:BatchWriteItem",
                "dynamodb:PartiQLInsert",
                "dynamodb:PartiQLUpdate",
                "dynamodb:PartiQLDelete",
            ],
            "{function}"
        );
        assert_eq!(
            as_list(&denies[0]["Resource"]),
            std::slice::from_ref(&counters),
            "{function}"
        );
        assert_eq!(
            as_list(&denies[0]["Condition"]["ForAnyValue:StringEquals"]["dynamodb:LeadingKeys"]),
            [hybrid_counter::keys::KIT_STATE_SCOPE],
            "{function}"
        );
        let denied = as_list(&denies[0]["Action"]);
        for action in stack::access::KIT_STATE_DENIED {
            assert!(
                denied.iter().any(|a| a == action.as_str()),
                "{function}: {action:?} not denied"
            );
        }
    }

    for role in roles.values() {
        let described = s.iam.get_role().role_name(role).send().await.expect("get role");
        let trust = policy_json(
            described
                .role()
                .and_then(|r| r.assume_role_policy_document())
                .expect("trust policy"),
        );
        let statement = &trust["Statement"][0];
        assert_eq!(trust["Statement"].as_array().map(Vec::len), Some(1), "{role}: {trust}");
        assert_eq!(
            as_list(&statement["Principal"]["Service"]),
            ["lambda.amazonaws.com"],
            "{role}"
        );
        // Deployed with `--target local`: the account may assume it too, so
        // the local runner runs each function with its own role.
        assert_eq!(
            as_list(&statement["Principal"]["AWS"]),
            [format!("arn:aws:iam::{account}:root")],
            "{role}"
        );
        assert_eq!(as_list(&statement["Action"]), ["sts:AssumeRole"], "{role}");
    }
}

/// The stream mapping's on-failure destination by the stack's
/// `FailedBatchRecords`: the bucket's ARN under payload (its name is an
/// output only then), DLQ1's under pointer.
/// The logical ids of the resources a deploy's events name (the stack's own
/// events left out): what the update touched.
fn touched(report: &DeployReport) -> BTreeSet<&str> {
    report
        .events
        .iter()
        .filter(|e| !e.is_stack_event())
        .map(|e| e.logical_id.as_str())
        .collect()
}

fn on_failure_destination(o: &BTreeMap<String, String>) -> String {
    o.get(outputs::FAILED_BATCH_BUCKET).map_or_else(
        || out(o, outputs::DLQ1_ARN).to_owned(),
        |bucket| format!("arn:aws:s3:::{bucket}"),
    )
}

async fn check_mappings(s: &Services, o: &BTreeMap<String, String>) {
    let function_of = |arn: Option<&str>| arn.and_then(|a| a.rsplit(':').next()).unwrap_or_default().to_owned();

    let stream = s
        .lambda
        .get_event_source_mapping()
        .uuid(out(o, outputs::STREAM_MAPPING_ID))
        .send()
        .await
        .expect("stream mapping");
    assert_eq!(
        stream.event_source_arn(),
        Some(out(o, outputs::RESOURCES_TABLE_STREAM_ARN))
    );
    assert_eq!(
        function_of(stream.function_arn()),
        out(o, outputs::STREAM_COUNTER_FUNCTION)
    );
    assert_eq!(stream.batch_size(), Some(100));
    assert_eq!(stream.starting_position().map(|p| p.as_str()), Some("TRIM_HORIZON"));
    assert_eq!(stream.parallelization_factor(), Some(1));
    assert_eq!(stream.bisect_batch_on_function_error(), Some(true));
    assert_eq!(stream.maximum_retry_attempts(), Some(10));
    assert_eq!(stream.maximum_record_age_in_seconds(), Some(21_600));
    assert_eq!(
        stream
            .metrics_config()
            .map(|c| c.metrics().iter().map(|m| m.as_str()).collect::<Vec<_>>()),
        Some(vec!["EventCount"]),
        "the mapping publishes DroppedEventCount and the other event counts"
    );
    assert_eq!(
        stream.function_response_types(),
        [FunctionResponseType::ReportBatchItemFailures]
    );
    assert_eq!(
        stream
            .destination_config()
            .and_then(|d| d.on_failure())
            .and_then(|f| f.destination()),
        Some(on_failure_destination(o).as_str()),
        "on-failure destination: the failed-batch bucket under payload, DLQ1 under pointer"
    );
    let patterns: BTreeSet<String> = stream
        .filter_criteria()
        .map(|c| {
            c.filters()
                .iter()
                .filter_map(|f| f.pattern())
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default();
    // Compared as canonical JSON (sorted keys), whatever the spacing.
    let canonical = hybrid_counter::stream::filter::pattern_text;
    let deployed: BTreeSet<String> = patterns
        .iter()
        .map(|p| canonical(&serde_json::from_str(p).expect("json pattern")))
        .collect();
    let expected: BTreeSet<String> = hybrid_counter::stream::filter::patterns()
        .iter()
        .map(canonical)
        .collect();
    assert_eq!(deployed, expected, "filter criteria");

    let dlq1 = s
        .lambda
        .get_event_source_mapping()
        .uuid(out(o, outputs::DLQ1_MAPPING_ID))
        .send()
        .await
        .expect("dlq1 mapping");
    assert_eq!(dlq1.event_source_arn(), Some(out(o, outputs::DLQ1_ARN)));
    assert_eq!(
        function_of(dlq1.function_arn()),
        out(o, outputs::DLQ_REPROCESSOR_FUNCTION)
    );
    assert_eq!(dlq1.batch_size(), Some(10));
    assert_eq!(
        dlq1.function_response_types(),
        [FunctionResponseType::ReportBatchItemFailures]
    );
}

async fn queue_attributes(s: &Services, url: &str) -> BTreeMap<String, String> {
    let answer = s
        .sqs
        .get_queue_attributes()
        .queue_url(url)
        .attribute_names(QueueAttributeName::All)
        .send()
        .await
        .expect("queue attributes");
    answer
        .attributes()
        .map(|a| a.iter().map(|(k, v)| (k.as_str().to_owned(), v.clone())).collect())
        .unwrap_or_default()
}

async fn check_queues(s: &Services, o: &BTreeMap<String, String>) {
    let dlq1 = queue_attributes(s, out(o, outputs::DLQ1_URL)).await;
    assert_eq!(dlq1["QueueArn"], out(o, outputs::DLQ1_ARN));
    let redrive: Value = serde_json::from_str(&dlq1["RedrivePolicy"]).expect("redrive policy json");
    assert_eq!(redrive["deadLetterTargetArn"], out(o, outputs::DLQ2_ARN), "{redrive}");
    assert_eq!(
        redrive["maxReceiveCount"].to_string().trim_matches('"'),
        "5",
        "{redrive}"
    );
    assert_eq!(dlq1["SqsManagedSseEnabled"], "true");
    assert_eq!(dlq1["VisibilityTimeout"], "720");
    assert_eq!(dlq1["MessageRetentionPeriod"], "1209600");

    let dlq2 = queue_attributes(s, out(o, outputs::DLQ2_URL)).await;
    assert_eq!(dlq2["QueueArn"], out(o, outputs::DLQ2_ARN));
    assert_eq!(dlq2["MessageRetentionPeriod"], "1209600", "DLQ2 keeps messages 14 days");
    assert_eq!(dlq2["SqsManagedSseEnabled"], "true");
    assert!(
        !dlq2.contains_key("RedrivePolicy"),
        "DLQ2 is the end of the line: {dlq2:?}"
    );
}

async fn check_alarms(s: &Services, o: &BTreeMap<String, String>) {
    let names = [
        out(o, outputs::DLQ2_ALARM_NAME),
        out(o, outputs::ITERATOR_AGE_ALARM_NAME),
        out(o, outputs::DROPPED_EVENTS_ALARM_NAME),
        out(o, outputs::ON_FAILURE_DELIVERY_ALARM_NAME),
    ];
    let described = s
        .cloudwatch
        .describe_alarms()
        .set_alarm_names(Some(names.iter().map(|n| (*n).to_owned()).collect()))
        .send()
        .await
        .expect("describe alarms");
    let alarm = |name: &str| {
        described
            .metric_alarms()
            .iter()
            .find(|a| a.alarm_name() == Some(name))
            .unwrap_or_else(|| panic!("alarm {name} missing"))
            .clone()
    };
    let dimensions = |a: &aws_sdk_cloudwatch::types::MetricAlarm| -> Vec<(String, String)> {
        a.dimensions()
            .iter()
            .map(|d| {
                (
                    d.name().unwrap_or_default().to_owned(),
                    d.value().unwrap_or_default().to_owned(),
                )
            })
            .collect()
    };

    let dlq2 = alarm(names[0]);
    let dlq2_name = out(o, outputs::DLQ2_URL).rsplit('/').next().unwrap();
    assert_eq!(dlq2.namespace(), Some("AWS/SQS"));
    assert_eq!(dlq2.metric_name(), Some("ApproximateNumberOfMessagesVisible"));
    assert_eq!(dimensions(&dlq2), [("QueueName".to_owned(), dlq2_name.to_owned())]);
    assert_eq!(dlq2.statistic().map(|s| s.as_str()), Some("Maximum"));
    assert_eq!((dlq2.period(), dlq2.evaluation_periods()), (Some(60), Some(1)));
    assert_eq!(dlq2.threshold(), Some(1.0));
    assert_eq!(
        dlq2.comparison_operator().map(|c| c.as_str()),
        Some("GreaterThanOrEqualToThreshold")
    );
    assert_eq!(dlq2.treat_missing_data(), Some("notBreaching"));

    let age = alarm(names[1]);
    assert_eq!(age.namespace(), Some("AWS/Lambda"));
    assert_eq!(age.metric_name(), Some("IteratorAge"));
    assert_eq!(
        dimensions(&age),
        [(
            "FunctionName".to_owned(),
            out(o, outputs::STREAM_COUNTER_FUNCTION).to_owned()
        )]
    );
    assert_eq!(age.statistic().map(|s| s.as_str()), Some("Maximum"));
    assert_eq!((age.period(), age.evaluation_periods()), (Some(60), Some(5)));
    assert_eq!(age.threshold(), Some(60_000.0));
    assert_eq!(
        age.comparison_operator().map(|c| c.as_str()),
        Some("GreaterThanThreshold")
    );
    assert_eq!(age.treat_missing_data(), Some("notBreaching"));

    // The silent losses: any record the stream mapping drops, any failed
    // batch whose on-failure record Lambda could not deliver. Both notify
    // the stack's topic on ALARM and on OK.
    let topic = out(o, outputs::ALARM_TOPIC_ARN);
    let losses = [
        (
            alarm(names[2]),
            "DroppedEventCount",
            ("EventSourceMappingUUID", out(o, outputs::STREAM_MAPPING_ID)),
        ),
        (
            alarm(names[3]),
            "DestinationDeliveryFailures",
            ("FunctionName", out(o, outputs::STREAM_COUNTER_FUNCTION)),
        ),
    ];
    for (loss, metric, (dimension, value)) in losses {
        let name = loss.alarm_name().unwrap_or_default();
        assert_eq!(loss.namespace(), Some("AWS/Lambda"), "{name}");
        assert_eq!(loss.metric_name(), Some(metric), "{name}");
        assert_eq!(dimensions(&loss), [(dimension.to_owned(), value.to_owned())], "{name}");
        assert_eq!(loss.statistic().map(|s| s.as_str()), Some("Sum"), "{name}");
        assert_eq!(
            (loss.period(), loss.evaluation_periods()),
            (Some(60), Some(1)),
            "{name}"
        );
        assert_eq!(loss.threshold(), Some(0.0), "{name}");
        assert_eq!(
            loss.comparison_operator().map(|c| c.as_str()),
            Some("GreaterThanThreshold"),
            "{name}: one lost record alarms"
        );
        assert_eq!(loss.treat_missing_data(), Some("notBreaching"), "{name}");
        assert_eq!(loss.alarm_actions(), [topic], "{name}");
        assert_eq!(loss.ok_actions(), [topic], "{name}");
    }
}

async fn check_function_url(s: &Services, o: &BTreeMap<String, String>) {
    let url = s
        .lambda
        .get_function_url_config()
        .function_name(out(o, outputs::API_FUNCTION))
        .send()
        .await
        .expect("function url");
    assert_eq!(url.auth_type(), &FunctionUrlAuthType::AwsIam);
    assert_eq!(url.function_url(), out(o, outputs::API_FUNCTION_URL));
}

/// The resources a deploy with the template's defaults creates: all but
/// those whose condition is off by default (the email subscription, the
/// drift check's schedule rule and its permission, the limits alarms).
pub fn created_by_default(template: &stack::Template) -> BTreeSet<&str> {
    let off = [
        stack::alarms::SUBSCRIBE_ALARM_EMAIL,
        stack::logical::DRIFT_CHECK_ENABLED,
        stack::logical::LIMITS_FILE_SET,
    ];
    template
        .resources
        .iter()
        .filter(|(_, r)| r.condition.as_deref().is_none_or(|c| !off.contains(&c)))
        .map(|(id, _)| id.as_str())
        .collect()
}

#[tokio::test]
async fn deploy_verifies_redeploys_updates_and_destroys_the_stack() {
    let emulator = Emulator::start();
    let services = Services::new(&emulator).await;
    let cli = Counterctl::new(&emulator);
    let stack_name = "hybrid-counter";
    let template = stack::template();

    // A plan of a new stack lists every resource as an addition and applies nothing.
    let plan = cli.plan(&[]).await;
    assert_eq!(plan.change_set_type, "CREATE");
    assert!(!plan.no_changes);
    let added: BTreeSet<&str> = plan.diff.resources.iter().map(|r| r.logical_id.as_str()).collect();
    let every: BTreeSet<&str> = template.resources.keys().map(String::as_str).collect();
    // What the defaults create: not the alarm email's subscription (no
    // AlarmEmail given). fakecloud's change set lists it anyway.
    let expected = created_by_default(&template);
    assert!(added.is_superset(&expected) && added.is_subset(&every), "{added:?}");
    assert!(
        plan.diff
            .resources
            .iter()
            .all(|r| r.action == ops_cli::commands::deploy::diff::Action::Add)
    );
    assert!(
        !services.stack_exists(stack_name).await,
        "plan must not leave a stack behind"
    );

    // Deploy.
    let first = cli.deploy(&[]).await;
    eprintln!("first deploy against the emulator: {:.2}s", first.seconds);
    assert_eq!(first.outcome, Outcome::Created, "{first}");
    assert_eq!(first.status, "CREATE_COMPLETE");
    assert_eq!(Report::Deploy(first.clone()).exit_code(), exit::SUCCESS);
    assert!(
        first
            .artifacts
            .iter()
            .all(|a| a.state == ops_cli::commands::deploy::package::ArtifactState::Uploaded),
        "{:?}",
        first.artifacts
    );
    for key in outputs::ALL {
        assert!(!out(&first.outputs, key).is_empty(), "output {key} is empty");
    }
    let created: BTreeSet<&str> = first
        .events
        .iter()
        .filter(|e| e.status.as_str() == "CREATE_COMPLETE" && !e.is_stack_event())
        .map(|e| e.logical_id.as_str())
        .collect();
    assert_eq!(created, expected, "one CREATE_COMPLETE event per resource");
    let o = first.outputs.clone();

    check_tables(&services, &o).await;
    let roles = check_functions(&services, &o, &first).await;
    check_roles(&services, &o, &roles).await;
    check_mappings(&services, &o).await;
    check_queues(&services, &o).await;
    check_alarms(&services, &o).await;
    check_function_url(&services, &o).await;

    let status = cli.status().await.expect("status");
    assert_eq!(status.status, "CREATE_COMPLETE");
    assert_eq!(status.mappings.len(), 2);
    assert!(status.mappings.iter().all(|m| m.problem.is_none()), "{status}");
    assert_eq!(status.mappings[0].batch_size, Some(100));
    assert_eq!(status.mappings[0].metrics, ["EventCount"], "{status}");
    // Defaults: no warm throughput asked for, no maximum, no Contributor Insights.
    assert!(
        status
            .tables
            .iter()
            .all(|t| t.max_throughput.is_none() && t.contributor_insights.as_deref() == Some("DISABLED")),
        "{status}"
    );
    // FailedBatchRecords=payload by default: failed batches go to the bucket.
    let bucket = out(&o, outputs::FAILED_BATCH_BUCKET);
    assert!(bucket.starts_with("hybrid-counter-failed-batch-"), "{bucket}");
    assert_eq!(
        status.mappings[0].on_failure_destination.as_deref(),
        Some(format!("arn:aws:s3:::{bucket}").as_str())
    );
    assert!(status.failed_batches().contains(&format!("s3://{bucket}")), "{status}");
    assert!(status.queues.iter().all(|q| q.visible == Some(0)), "{status}");
    // The limits alarms exist only with a LimitsFileUri.
    let created = created_by_default(&template);
    let alarm_count = template
        .resources
        .iter()
        .filter(|(id, r)| matches!(r.kind, stack::ResourceKind::Alarm(_)) && created.contains(id.as_str()))
        .count();
    assert_eq!(status.alarms.len(), alarm_count, "every alarm of the stack: {status}");
    assert!(
        status.alarms.iter().all(|a| a.problem.is_none() && a.state.is_some()),
        "{status}"
    );
    let topic = out(&o, outputs::ALARM_TOPIC_ARN);
    assert_eq!(status.alarm_topic.as_deref(), Some(topic));
    assert!(
        status.alarms.iter().all(|a| a.actions == [topic]),
        "every alarm notifies the stack's topic: {status}"
    );
    // The deploy took the DLQ1 mapping over for a local runner that this test does not start.
    assert!(e2e::counterctl::healthy_but_for_the_stopped_runner(&status), "{status}");

    // Redeploy with nothing changed: success, nothing executed, nothing replaced.
    let ids_before = services.physical_ids(stack_name).await;
    assert_eq!(ids_before.len(), expected.len());
    let again = cli.deploy(&[]).await;
    assert_eq!(again.outcome, Outcome::Unchanged, "{again}");
    assert!(again.no_change_reason.is_some());
    assert!(again.events.is_empty(), "nothing executed: {:?}", again.events);
    assert!(
        again
            .artifacts
            .iter()
            .all(|a| a.state == ops_cli::commands::deploy::package::ArtifactState::Present),
        "unchanged code is not uploaded again"
    );
    assert_eq!(Report::Deploy(again.clone()).exit_code(), exit::SUCCESS);
    assert_eq!(
        services.physical_ids(stack_name).await,
        ids_before,
        "no resource replaced"
    );
    assert_eq!(again.outputs, o);

    // Plan a parameter change: exactly the stream mapping's batch size, nothing applied.
    let plan = cli.plan(&["StreamBatchSize=25"]).await;
    assert_eq!(plan.change_set_type, "UPDATE");
    assert!(!plan.no_changes, "{plan}");
    let changed: Vec<&str> = plan.diff.resources.iter().map(|r| r.logical_id.as_str()).collect();
    assert_eq!(changed, [stack::logical::STREAM_MAPPING], "{plan}");
    let mapping = &plan.diff.resources[0];
    assert_eq!(mapping.action, ops_cli::commands::deploy::diff::Action::Modify);
    assert_eq!(mapping.properties.len(), 1, "{plan}");
    assert_eq!(mapping.properties[0].name, "BatchSize");
    assert_eq!(mapping.properties[0].causes, ["parameter StreamBatchSize"]);
    assert_eq!(plan.diff.parameters.len(), 1);
    assert_eq!(plan.diff.parameters[0].old.as_deref(), Some("100"));
    assert_eq!(plan.diff.parameters[0].new.as_deref(), Some("25"));
    let text = plan.to_string();
    assert!(
        text.contains("StreamMapping") && text.contains("BatchSize (parameter StreamBatchSize)"),
        "{text}"
    );
    let mapping_id = out(&o, outputs::STREAM_MAPPING_ID);
    assert_eq!(services.batch_size(mapping_id).await, 100, "plan applies nothing");

    // Apply it.
    let update = cli.deploy(&["StreamBatchSize=25"]).await;
    assert_eq!(update.outcome, Outcome::Updated, "{update}");
    assert_eq!(update.status, "UPDATE_COMPLETE");
    assert_eq!(
        services.batch_size(mapping_id).await,
        25,
        "the new batch size is on the mapping"
    );
    assert_eq!(update.outputs, o, "updated in place: same outputs");
    assert_eq!(services.physical_ids(stack_name).await, ids_before, "nothing replaced");
    assert_eq!(
        touched(&update),
        BTreeSet::from([stack::logical::STREAM_MAPPING]),
        "{:?}",
        update.events
    );

    // A later deploy without the flag keeps the deployed value.
    let keep = cli.deploy(&[]).await;
    assert_eq!(keep.outcome, Outcome::Unchanged, "{keep}");
    assert_eq!(keep.parameters["StreamBatchSize"], "25");
    assert_eq!(services.batch_size(mapping_id).await, 25);

    // A capacity parameter: its condition puts OnDemandThroughput into the
    // counters table, updated in place.
    let capped = cli.deploy(&["CountersTableMaxWriteRequestUnits=8000"]).await;
    assert_eq!(capped.outcome, Outcome::Updated, "{capped}");
    assert_eq!(capped.parameters["CountersTableMaxWriteRequestUnits"], "8000");
    assert_eq!(
        touched(&capped),
        BTreeSet::from([stack::logical::COUNTERS_TABLE]),
        "{:?}",
        capped.events
    );
    assert_eq!(services.physical_ids(stack_name).await, ids_before, "nothing replaced");
    // fakecloud difference (localstack/README.md): its provisioner takes the
    // maximum only as a JSON number, and the parameter's Ref is a string, so
    // the table reads back with no maximum where AWS says 8000 (status
    // reading one: the unit tests of `replicas`). Asserted, so this fails
    // when fakecloud changes.
    let status = cli.status().await.expect("status");
    let maxima: Vec<_> = status
        .tables
        .iter()
        .map(|t| (t.role.as_str(), t.max_throughput))
        .collect();
    assert_eq!(maxima, [("resources", None), ("counters", None)], "{status}");

    // Destroy: the stack goes, the tables stay.
    let destroyed = cli.destroy(&[]).await.expect("destroy");
    assert!(destroyed.existed && destroyed.deleted, "{destroyed}");
    assert_eq!(
        destroyed.retained_tables,
        [out(&o, outputs::RESOURCES_TABLE), out(&o, outputs::COUNTERS_TABLE)]
    );
    assert!(destroyed.deleted_tables.is_empty());
    assert!(!services.stack_exists(stack_name).await);
    assert!(
        services.table_exists(out(&o, outputs::RESOURCES_TABLE)).await,
        "resources table retained"
    );
    assert!(
        services.table_exists(out(&o, outputs::COUNTERS_TABLE)).await,
        "counters table retained"
    );
    let gone = services
        .lambda
        .get_function_configuration()
        .function_name(out(&o, outputs::API_FUNCTION))
        .send()
        .await;
    assert!(gone.is_err(), "functions are deleted with the stack");

    // Status of a missing stack: a clear error and the not-found exit code.
    let err = cli.status().await.unwrap_err();
    assert_eq!(err.exit_code(), exit::NOT_FOUND);
    assert!(err.to_string().contains("does not exist"), "{err}");
    // Destroying again is a no-op.
    let again = cli.destroy(&[]).await.expect("second destroy");
    assert!(!again.existed);
}

/// A first create that fails (here: a queue already holds DLQ2's name, as
/// in #35's reproduction) rolls back; the next `counterctl deploy`
/// replaces the rolled-back stack, tables included (new and empty: the
/// tables' `DeletionPolicy: RetainExceptOnCreate` deletes them with AWS's
/// rollback), and creates it, with no manual step
/// (<https://docs.aws.amazon.com/AWSCloudFormation/latest/TemplateReference/aws-attribute-deletionpolicy.html>).
#[tokio::test]
async fn a_failed_first_create_is_created_by_the_next_deploy_without_manual_steps() {
    let emulator = Emulator::start();
    let services = Services::new(&emulator).await;
    let cli = Counterctl::new(&emulator);
    let squatter = services
        .sqs
        .create_queue()
        .queue_name("hybrid-counter-dlq2")
        .send()
        .await
        .expect("create the queue that takes DLQ2's name");
    let squatter = squatter.queue_url().expect("queue url").to_owned();

    let failed = cli.deploy(&[]).await;
    assert_eq!(failed.outcome, Outcome::Failed, "{failed}");
    assert_eq!(Report::Deploy(failed.clone()).exit_code(), exit::FAILED);
    let text = failed.to_string();
    assert!(text.contains("DEPLOY FAILED"), "{text}");
    assert!(
        failed
            .failures
            .iter()
            .any(|f| f.logical_id == stack::logical::DLQ2 || f.reason.contains(stack::logical::DLQ2)),
        "DLQ2 is named as the failure: {:?}",
        failed.failures
    );
    // On AWS the rollback has deleted the tables (RetainExceptOnCreate);
    // fakecloud 0.51 keeps a failed change set's resources in the
    // ROLLBACK_COMPLETE stack, and deploy deletes what the stack still lists.

    // The cause goes away; the next deploy needs nothing else.
    services
        .sqs
        .delete_queue()
        .queue_url(&squatter)
        .send()
        .await
        .expect("delete the queue");
    let created = cli.deploy(&[]).await;
    assert_eq!(created.outcome, Outcome::Created, "{created}");
    for table in ["hybrid-counter-resources", "hybrid-counter-counters"] {
        assert!(services.table_exists(table).await, "{table}");
    }
}

/// `FailedBatchRecords=pointer`: no bucket, the stream mapping's failed
/// batches go to DLQ1 as pointers, and the roles grant DLQ1's send and no
/// S3 action.
#[tokio::test]
async fn a_pointer_stack_sends_failed_batches_to_dlq1_and_keeps_no_bucket() {
    let emulator = Emulator::start();
    let services = Services::new(&emulator).await;
    let cli = Counterctl::new(&emulator);
    let deployed = cli.deploy(&["FailedBatchRecords=pointer"]).await;
    assert_eq!(deployed.outcome, Outcome::Created, "{deployed}");
    let o = deployed.outputs.clone();
    assert!(!o.contains_key(outputs::FAILED_BATCH_BUCKET), "{o:?}");
    let created: BTreeSet<&str> = deployed
        .events
        .iter()
        .filter(|e| e.status.as_str() == "CREATE_COMPLETE" && !e.is_stack_event())
        .map(|e| e.logical_id.as_str())
        .collect();
    for payload_only in [
        stack::logical::FAILED_BATCH_BUCKET,
        stack::logical::FAILED_BATCH_BUCKET_POLICY,
        stack::logical::DLQ1_POLICY,
    ] {
        assert!(!created.contains(payload_only), "{payload_only} created under pointer");
    }
    let roles = check_functions(&services, &o, &deployed).await;
    check_roles(&services, &o, &roles).await;
    check_mappings(&services, &o).await;
    let status = cli.status().await.expect("status");
    assert_eq!(
        status.mappings[0].on_failure_destination.as_deref(),
        Some(out(&o, outputs::DLQ1_ARN))
    );
    assert!(
        status.failed_batches().starts_with("pointers to stream ranges"),
        "{status}"
    );
}

#[tokio::test]
async fn destroy_deletes_data_only_when_confirmed() {
    let emulator = Emulator::start();
    let services = Services::new(&emulator).await;
    let cli = Counterctl::new(&emulator);

    // Missing zips are a usage error before anything is sent.
    let err = cli
        .run(&["deploy", "--artifacts-dir", "/nonexistent/lambda"])
        .await
        .unwrap_err();
    assert_eq!(err.exit_code(), exit::USAGE);
    assert!(err.to_string().contains("make build"), "{err}");

    let deployed = cli.deploy(&["NamePrefix=hck-data"]).await;
    assert_eq!(deployed.outcome, Outcome::Created, "{deployed}");
    let tables = [
        out(&deployed.outputs, outputs::RESOURCES_TABLE).to_owned(),
        out(&deployed.outputs, outputs::COUNTERS_TABLE).to_owned(),
    ];
    assert_eq!(tables, ["hck-data-resources", "hck-data-counters"]);

    // Not a terminal and no --yes: refused, nothing deleted.
    let err = cli.destroy(&["--delete-data"]).await.unwrap_err();
    assert!(matches!(err, ops_cli::Error::ConfirmationRequired), "{err}");
    assert_eq!(err.exit_code(), exit::USAGE);
    assert!(services.stack_exists("hybrid-counter").await);

    let destroyed = cli.destroy(&["--delete-data", "--yes"]).await.expect("destroy");
    assert!(destroyed.deleted, "{destroyed}");
    assert_eq!(destroyed.deleted_tables, tables);
    assert!(destroyed.retained_tables.is_empty());
    for table in &tables {
        assert!(!services.table_exists(table).await, "{table} deleted");
    }
}
