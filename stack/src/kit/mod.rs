//! The hybrid counter kit's stack: two tables, the stream consumer with its
//! DLQ1 → reprocessor → DLQ2 failure pipeline, the example API behind an
//! IAM-authenticated function URL, one least-privilege role (`permissions`)
//! and one log group per function, the parameters (`parameters`); the
//! alarms are [`crate::alarms`], the drift check [`crate::drift_check`]
//! (built with [`add_function`]), and [`crate::template`] joins them.

use std::collections::BTreeMap;

use hybrid_counter::config::{
    ENV_ADMISSION_MODE, ENV_BE_SHARDS, ENV_COUNTERS_TABLE, ENV_DEFAULT_LIMIT, ENV_DLQ2_URL, ENV_EC_SHARDS,
    ENV_PROCESSING_MODE, ENV_RESOURCE_KEY_SPREAD, ENV_RESOURCES_TABLE, ENV_SCOPE_KEYS, ENV_STREAM_ARN,
};
use hybrid_counter::keys;
use hybrid_counter::metrics::ENV_STACK_NAME;

use crate::expr::{AWS_STACK_NAME, Expr};
use crate::resources::dynamodb::{StreamSpecification, StreamViewType, Table};
use crate::resources::iam::{Action, InlinePolicy, Role, Statement};
use crate::resources::lambda::{
    AuthType, Code, DestinationConfig, Environment, EventSourceMapping, FilterCriteria, Function, LogFormat,
    LoggingConfig, MappingMetrics, MetricsConfig, OnFailure, Runtime, StartingPosition, Url,
};
use crate::resources::logs::LogGroup;
use crate::resources::sqs::{Queue, RedrivePolicy};
use crate::template::{Assertion, LiveChange, Parameter, ParameterRule, Resource, Template};
use crate::{access, capacity, failed_batches, logical, outputs, params};

mod parameters;
pub(crate) mod permissions;

pub use crate::params::SCOPE_BY_TAG;
use parameters::add_parameters;
pub(crate) use parameters::code_key;
pub use parameters::{DEFAULT_SCOPE_CALLER_PATH, SCOPE_CALLER_PATH_PATTERN};
pub(crate) use permissions::arn;
use permissions::{api_permissions, dlq_reprocessor_permissions, stream_arn, stream_counter_permissions};

/// Stream counter timeout, seconds: one batch of up to `StreamBatchSize`
/// records, with transaction retries, fits comfortably.
pub const STREAM_COUNTER_TIMEOUT: u32 = 60;
/// Reprocessor timeout, seconds: it re-reads a whole failed range from the
/// stream before processing it, so it gets twice the consumer's budget.
pub const DLQ_REPROCESSOR_TIMEOUT: u32 = 120;
/// API timeout, seconds: a request path, not a batch job.
pub const API_TIMEOUT: u32 = 10;
/// DLQ1 visibility timeout: AWS's rule for an SQS event source is at least
/// six times the function timeout, so a message is not handed to a second
/// invocation while the first is still retrying it.
pub const DLQ1_VISIBILITY_TIMEOUT: u32 = 6 * DLQ_REPROCESSOR_TIMEOUT;
/// 14 days, the SQS maximum: a failed range waits for an operator as long
/// as the service allows.
pub const DLQ_RETENTION_SECONDS: u32 = 1_209_600;
/// Days of Lambda logs kept.
pub const LOG_RETENTION_DAYS: u32 = 30;
/// The SQS event source's batch: the reprocessor replays one stream range
/// per message, so a small batch bounds the work of one invocation.
pub const DLQ1_BATCH_SIZE: i64 = 10;

const LAMBDA_SERVICE: &str = "lambda.amazonaws.com";

/// The condition under which the functions' roles also trust
/// [`params::EMULATOR_ROLE_ASSUMER`]: never on AWS, where it is empty.
pub const EMULATOR_ROLE_ASSUMER_SET: &str = "EmulatorRoleAssumerSet";

/// The template's description.
pub const DESCRIPTION: &str = "Hybrid Counter Kit: per-scope best-effort and eventual counters on DynamoDB, the \
                               stream consumer with its DLQ1 -> reprocessor -> DLQ2 failure pipeline, and an \
                               example API behind an IAM-authenticated function URL.";

/// The kit's core: the tables, the queues, the three functions of the
/// counting pipeline and the API, their mappings, the function URL and the
/// outputs. [`crate::template`] adds the drift check and the alarms.
pub fn add_core(t: &mut Template) {
    add_parameters(t);
    failed_batches::add_parameter(t);
    add_emulator_role_assumer(t);
    crate::boundary::add_parameter(t);
    capacity::add_parameters(t);
    failed_batches::add_conditions(t);
    add_tables(t);
    add_queues(t);
    failed_batches::add_resources(t);
    for function in &FUNCTIONS {
        add_function(t, function);
    }
    add_mappings(t);
    add_function_url(t);
    add_outputs(t);
    failed_batches::add_outputs(t);
}

/// The api's scope authorization mode.
fn api_environment() -> Vec<(&'static str, Expr)> {
    vec![(
        hybrid_counter::config::ENV_SCOPE_AUTHORIZATION,
        Expr::reference(params::SCOPE_AUTHORIZATION),
    )]
}

/// With `principal-tag`: the tags of this account's roles and users under
/// `ScopeCallerPath`, the callers the api authorizes.
fn api_policies() -> Vec<InlinePolicy> {
    vec![
        InlinePolicy::new(
            "api-scope-prefix-tags",
            vec![
                Statement::allow(
                    "CallerRoleTags",
                    &[Action::IamListRoleTags],
                    vec![access::scope_callers("role")],
                ),
                Statement::allow(
                    "CallerUserTags",
                    &[Action::IamListUserTags],
                    vec![access::scope_callers("user")],
                ),
            ],
        )
        .only_if(SCOPE_BY_TAG),
    ]
}

/// The embedded emulator has no Lambda service to assume the functions'
/// roles, so its runner does; `counterctl deploy --target local` sets the
/// parameter to the account's root, every other target leaves it empty.
/// The template refuses anything else itself, for a console or CLI deploy
/// that bypasses `counterctl`: the pattern takes only an account root, and
/// the rule [`EMULATOR_ROLE_ASSUMER_RULE`] only an empty value outside the
/// emulators' accounts ([`EMULATOR_ACCOUNTS`]). Rules are checked before
/// anything changes (CloudFormation template `Rules`:
/// <https://docs.aws.amazon.com/AWSCloudFormation/latest/UserGuide/rules-section-structure.html>).
fn add_emulator_role_assumer(t: &mut Template) {
    t.parameter(
        params::EMULATOR_ROLE_ASSUMER,
        Parameter::string(
            "Only for the embedded emulator (counterctl sets it on --target local): an AWS principal that may \
             also assume the functions' roles, so the local runner runs each function with its own role's \
             credentials. Empty everywhere else: the roles trust lambda.amazonaws.com alone. The template \
             refuses any value but empty outside an emulator's account.",
        )
        .default_string("")
        .pattern(
            EMULATOR_ROLE_ASSUMER_PATTERN,
            "empty; on an emulator, the account root arn:aws:iam::<12 digits>:root",
        )
        .effect(
            "Adds a principal to the trust policy of every function's role.",
            LiveChange::Managed,
            "counterctl deploy sets it to the account's root on --target local and leaves it empty on every \
             other target.",
        ),
    );
    t.condition(
        EMULATOR_ROLE_ASSUMER_SET,
        Expr::differs(params::EMULATOR_ROLE_ASSUMER, ""),
    );
    t.rule(EMULATOR_ROLE_ASSUMER_RULE, emulator_role_assumer_rule());
}

/// What `EmulatorRoleAssumer` may hold at all: empty, or an account root.
pub const EMULATOR_ROLE_ASSUMER_PATTERN: &str = "^$|^arn:aws:iam::[0-9]{12}:root$";

/// The rule refusing `EmulatorRoleAssumer` outside the emulators.
pub const EMULATOR_ROLE_ASSUMER_RULE: &str = "EmulatorRoleAssumerOnlyOnAnEmulator";

/// The accounts the emulators the kit deploys to answer as: LocalStack's
/// and ministack's default `000000000000`, fakecloud's `123456789012` (the
/// account AWS's documentation uses in its examples).
pub const EMULATOR_ACCOUNTS: [&str; 2] = ["000000000000", "123456789012"];

/// `EmulatorRoleAssumer` is empty, or the stack is in an emulator's account.
pub fn emulator_role_assumer_rule() -> ParameterRule {
    ParameterRule {
        assertions: vec![Assertion {
            assert: Expr::or(vec![
                Expr::equals(Expr::reference(params::EMULATOR_ROLE_ASSUMER), "".into()),
                Expr::contains(&EMULATOR_ACCOUNTS, Expr::reference("AWS::AccountId")),
            ]),
            assert_description: format!(
                "{} must be empty on AWS: it makes another principal trusted by every function's role, which only \
                 the embedded emulator's runner needs.",
                params::EMULATOR_ROLE_ASSUMER
            ),
        }],
    }
}

fn add_tables(t: &mut Template) {
    let mut resources = Table::keyed(Expr::sub("${NamePrefix}-resources"), keys::SCOPE, keys::ID);
    // Old images too: the consumer recognises a soft delete by `deleted`
    // going false -> true, and the filter matches on both images.
    resources.stream_specification = Some(StreamSpecification {
        stream_view_type: StreamViewType::NewAndOldImages,
    });
    capacity::RESOURCES.apply(&mut resources);
    let mut counters = Table::keyed(Expr::sub("${NamePrefix}-counters"), keys::SCOPE, keys::NAME);
    capacity::COUNTERS.apply(&mut counters);
    // Retained: the tables are the system of record; deleting or replacing
    // the stack must never take the data with it.
    t.resource(logical::RESOURCES_TABLE, Resource::retained(resources));
    t.resource(logical::COUNTERS_TABLE, Resource::retained(counters));
}

fn add_queues(t: &mut Template) {
    // Queues and log groups are stateful, but their contents only mean
    // something next to the stack's functions, and their fixed names would
    // block re-creating the stack: deleted with it, explicitly.
    t.resource(
        logical::DLQ2,
        Resource::deleted(Queue {
            queue_name: Expr::sub("${NamePrefix}-dlq2"),
            message_retention_period: DLQ_RETENTION_SECONDS,
            sqs_managed_sse_enabled: true,
            visibility_timeout: None,
            redrive_policy: None,
        }),
    );
    t.resource(
        logical::DLQ1,
        Resource::deleted(Queue {
            queue_name: Expr::sub("${NamePrefix}-dlq1"),
            message_retention_period: DLQ_RETENTION_SECONDS,
            sqs_managed_sse_enabled: true,
            visibility_timeout: Some(DLQ1_VISIBILITY_TIMEOUT),
            redrive_policy: Some(RedrivePolicy {
                dead_letter_target_arn: Expr::get_att(logical::DLQ2, "Arn"),
                max_receive_count: Expr::reference(params::DLQ1_MAX_RECEIVE_COUNT),
            }),
        }),
    );
}

/// What differs between the functions.
pub(crate) struct FunctionSpec {
    pub function: &'static str,
    pub role: &'static str,
    pub log_group: &'static str,
    pub name_suffix: &'static str,
    pub code_key: &'static str,
    pub timeout: u32,
    /// The request path's settings: default limit, admission mode,
    /// best-effort shards and scope keys.
    pub default_limit: bool,
    pub ec_shards: bool,
    /// The reprocessor's: the stream it may replay and DLQ2, where a
    /// message that can never be replayed goes at once.
    pub permanent_failures: bool,
    pub permissions: fn() -> Vec<Statement>,
    /// Inline policies that hold only under a template condition.
    pub conditional_policies: fn() -> Vec<InlinePolicy>,
    /// Variables of this function alone.
    pub environment: fn() -> Vec<(&'static str, Expr)>,
}

pub(crate) const FUNCTIONS: [FunctionSpec; 3] = [
    FunctionSpec {
        function: logical::STREAM_COUNTER_FUNCTION,
        role: logical::STREAM_COUNTER_ROLE,
        log_group: logical::STREAM_COUNTER_LOG_GROUP,
        name_suffix: "stream-counter",
        code_key: params::STREAM_COUNTER_CODE_KEY,
        timeout: STREAM_COUNTER_TIMEOUT,
        default_limit: false,
        ec_shards: true,
        permanent_failures: false,
        permissions: stream_counter_permissions,
        conditional_policies: failed_batches::stream_counter_policies,
        environment: Vec::new,
    },
    FunctionSpec {
        function: logical::DLQ_REPROCESSOR_FUNCTION,
        role: logical::DLQ_REPROCESSOR_ROLE,
        log_group: logical::DLQ_REPROCESSOR_LOG_GROUP,
        name_suffix: "dlq-reprocessor",
        code_key: params::DLQ_REPROCESSOR_CODE_KEY,
        timeout: DLQ_REPROCESSOR_TIMEOUT,
        default_limit: false,
        ec_shards: true,
        permanent_failures: true,
        permissions: dlq_reprocessor_permissions,
        conditional_policies: failed_batches::reprocessor_policies,
        environment: Vec::new,
    },
    FunctionSpec {
        function: logical::API_FUNCTION,
        role: logical::API_ROLE,
        log_group: logical::API_LOG_GROUP,
        name_suffix: "api",
        code_key: params::API_CODE_KEY,
        timeout: API_TIMEOUT,
        default_limit: true,
        ec_shards: false,
        permanent_failures: false,
        permissions: api_permissions,
        conditional_policies: api_policies,
        environment: api_environment,
    },
];

pub(crate) fn add_function(t: &mut Template, spec: &FunctionSpec) {
    let name = format!("${{NamePrefix}}-{}", spec.name_suffix);
    t.resource(
        spec.log_group,
        Resource::deleted(LogGroup {
            log_group_name: Expr::sub(format!("/aws/lambda/{name}")),
            retention_in_days: LOG_RETENTION_DAYS,
        }),
    );

    let mut statements = (spec.permissions)();
    statements.push(Statement::allow(
        "OwnLogGroup",
        &[Action::LogsCreateLogStream, Action::LogsPutLogEvents],
        // The group's `Arn` attribute ends in `:*`, which covers its streams
        // and nothing else.
        vec![Expr::get_att(spec.log_group, "Arn")],
    ));
    t.resource(
        spec.role,
        Role::for_service(
            LAMBDA_SERVICE,
            std::iter::once(InlinePolicy::new(
                &format!("{}-permissions", spec.name_suffix),
                statements,
            ))
            .chain((spec.conditional_policies)())
            .collect(),
        )
        .also_trusting(Expr::when(
            EMULATOR_ROLE_ASSUMER_SET,
            Expr::reference(params::EMULATOR_ROLE_ASSUMER),
            Expr::no_value(),
        ))
        .bounded_by(crate::boundary::role_boundary()),
    );

    let mut variables = BTreeMap::from([
        (
            ENV_RESOURCES_TABLE.to_owned(),
            Expr::reference(logical::RESOURCES_TABLE),
        ),
        (ENV_COUNTERS_TABLE.to_owned(), Expr::reference(logical::COUNTERS_TABLE)),
        // The dimension of the kit's own metrics: two stacks never mix them.
        (ENV_STACK_NAME.to_owned(), Expr::reference(AWS_STACK_NAME)),
    ]);
    if spec.default_limit {
        variables.insert(ENV_DEFAULT_LIMIT.to_owned(), Expr::reference(params::DEFAULT_LIMIT));
        variables.insert(ENV_ADMISSION_MODE.to_owned(), Expr::reference(params::ADMISSION_MODE));
        variables.insert(ENV_BE_SHARDS.to_owned(), Expr::reference(params::BE_SHARD_COUNT));
    }
    if spec.default_limit || spec.ec_shards {
        // Which key an item lives under and which counters key counts it.
        variables.insert(ENV_SCOPE_KEYS.to_owned(), Expr::reference(params::SCOPE_KEY_SHARDS));
        variables.insert(
            ENV_RESOURCE_KEY_SPREAD.to_owned(),
            Expr::reference(params::RESOURCE_KEY_SPREAD),
        );
    }
    if spec.ec_shards {
        variables.insert(ENV_EC_SHARDS.to_owned(), Expr::reference(params::EC_SHARD_COUNT));
        variables.insert(ENV_PROCESSING_MODE.to_owned(), Expr::reference(params::PROCESSING_MODE));
    }
    if spec.permanent_failures {
        variables.insert(ENV_STREAM_ARN.to_owned(), stream_arn());
        variables.insert(ENV_DLQ2_URL.to_owned(), Expr::reference(logical::DLQ2));
    }
    variables.extend((spec.environment)().into_iter().map(|(k, v)| (k.to_owned(), v)));
    t.resource(
        spec.function,
        Function {
            function_name: Expr::sub(name),
            runtime: Runtime::ProvidedAl2023,
            handler: "bootstrap".to_owned(),
            architectures: vec![Expr::reference(params::LAMBDA_ARCHITECTURE)],
            memory_size: Expr::reference(params::LAMBDA_MEMORY_SIZE),
            timeout: spec.timeout,
            role: Expr::get_att(spec.role, "Arn"),
            code: Code {
                s3_bucket: Expr::reference(params::ARTIFACTS_BUCKET),
                s3_key: Expr::reference(spec.code_key),
            },
            // Referencing the group also orders it before the function, so
            // Lambda never creates an unmanaged group of the same name.
            logging_config: LoggingConfig {
                log_format: LogFormat::Json,
                log_group: Expr::reference(spec.log_group),
            },
            environment: Environment { variables },
        },
    );
}

fn add_mappings(t: &mut Template) {
    let mut stream = EventSourceMapping::new(
        stream_arn(),
        Expr::reference(logical::STREAM_COUNTER_FUNCTION),
        Expr::reference(params::STREAM_BATCH_SIZE),
    );
    // From the oldest record still in the stream: a (re)created mapping
    // must not skip writes that are not counted yet.
    stream.starting_position = Some(StartingPosition::TrimHorizon);
    stream.parallelization_factor = Some(Expr::reference(params::PARALLELIZATION_FACTOR));
    stream.maximum_retry_attempts = Some(Expr::reference(params::MAXIMUM_RETRY_ATTEMPTS));
    stream.maximum_record_age_in_seconds = Some(Expr::reference(params::MAXIMUM_RECORD_AGE_IN_SECONDS));
    stream.bisect_batch_on_function_error = Some(true);
    stream.filter_criteria = Some(FilterCriteria::from_patterns(
        &hybrid_counter::stream::filter::patterns(),
    ));
    stream.destination_config = Some(DestinationConfig {
        on_failure: OnFailure {
            destination: failed_batches::on_failure_destination(),
        },
    });
    // The mapping's own counts: records it dropped (the dropped-events
    // alarm) and what it polled, filtered, invoked and sent on failure (the
    // dashboard).
    stream.metrics_config = Some(MetricsConfig {
        metrics: vec![MappingMetrics::EventCount],
    });
    t.resource(logical::STREAM_MAPPING, stream);

    t.resource(
        logical::DLQ1_MAPPING,
        EventSourceMapping::new(
            arn(logical::DLQ1),
            Expr::reference(logical::DLQ_REPROCESSOR_FUNCTION),
            DLQ1_BATCH_SIZE.into(),
        ),
    );
}

fn add_function_url(t: &mut Template) {
    t.resource(
        logical::API_FUNCTION_URL,
        Url {
            auth_type: AuthType::AwsIam,
            target_function_arn: arn(logical::API_FUNCTION),
        },
    );
}

fn add_outputs(t: &mut Template) {
    let name = |id: &str| Expr::reference(id);
    let entries: [(&str, &str, Expr); 16] = [
        (
            outputs::RESOURCES_TABLE,
            "Resources table name",
            name(logical::RESOURCES_TABLE),
        ),
        (
            outputs::RESOURCES_TABLE_ARN,
            "Resources table ARN",
            arn(logical::RESOURCES_TABLE),
        ),
        (
            outputs::RESOURCES_TABLE_STREAM_ARN,
            "Resources table stream ARN",
            stream_arn(),
        ),
        (
            outputs::COUNTERS_TABLE,
            "Counters table name",
            name(logical::COUNTERS_TABLE),
        ),
        (
            outputs::STREAM_COUNTER_FUNCTION,
            "Stream counter function name",
            name(logical::STREAM_COUNTER_FUNCTION),
        ),
        (
            outputs::DLQ_REPROCESSOR_FUNCTION,
            "DLQ reprocessor function name",
            name(logical::DLQ_REPROCESSOR_FUNCTION),
        ),
        (outputs::API_FUNCTION, "API function name", name(logical::API_FUNCTION)),
        (
            outputs::API_FUNCTION_URL,
            "API function URL (requests must be SigV4-signed)",
            Expr::get_att(logical::API_FUNCTION_URL, "FunctionUrl"),
        ),
        (
            outputs::DLQ1_URL,
            "DLQ1 URL (failed stream ranges)",
            name(logical::DLQ1),
        ),
        (outputs::DLQ1_ARN, "DLQ1 ARN", arn(logical::DLQ1)),
        (
            outputs::DLQ2_URL,
            "DLQ2 URL (ranges the reprocessor gave up on)",
            name(logical::DLQ2),
        ),
        (outputs::DLQ2_ARN, "DLQ2 ARN", arn(logical::DLQ2)),
        (
            outputs::STREAM_MAPPING_ID,
            "UUID of the stream event source mapping",
            name(logical::STREAM_MAPPING),
        ),
        (
            outputs::DLQ1_MAPPING_ID,
            "UUID of the DLQ1 event source mapping",
            name(logical::DLQ1_MAPPING),
        ),
        (
            outputs::DLQ2_ALARM_NAME,
            "DLQ2-not-empty alarm name",
            name(logical::DLQ2_NOT_EMPTY_ALARM),
        ),
        (
            outputs::ITERATOR_AGE_ALARM_NAME,
            "Stream counter iterator-age alarm name",
            name(logical::ITERATOR_AGE_ALARM),
        ),
    ];
    for (output, description, value) in entries {
        t.output(output, description, value);
    }
}
