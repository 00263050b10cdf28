//! The hybrid counter kit's stack: two tables, the stream consumer with its
//! DLQ1 → reprocessor → DLQ2 failure pipeline, the example API behind an
//! IAM-authenticated function URL, one least-privilege role and one log
//! group per function; the alarms and the dashboard are [`crate::alarms`],
//! the scheduled drift check [`crate::drift_check`] (built with this
//! module's [`add_function`]), and [`crate::template`] puts them together.

use std::collections::BTreeMap;

use hybrid_counter::config::{
    Admission, ENV_ADMISSION_MODE, ENV_BE_SHARDS, ENV_COUNTERS_TABLE, ENV_DEFAULT_LIMIT, ENV_DLQ2_URL, ENV_EC_SHARDS,
    ENV_PROCESSING_MODE, ENV_RESOURCES_TABLE, ENV_SCOPE_KEYS, ENV_STREAM_ARN,
};
use hybrid_counter::keys;
use hybrid_counter::metrics::ENV_STACK_NAME;
use hybrid_counter::stream::Mode;

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

fn add_parameters(t: &mut Template) {
    t.parameter(
        params::NAME_PREFIX,
        Parameter::string(
            "Prefix of every physical name (tables, queues, functions, log groups, alarms). Lowercase \
             letters, digits and hyphens; at most 40 characters so the longest function name stays \
             within Lambda's 64.",
        )
        .default_string("hybrid-counter")
        .length(1, 40)
        .pattern(
            "^[a-z]([a-z0-9-]*[a-z0-9])?$",
            "lowercase letters, digits and hyphens, starting with a letter and not ending with a hyphen",
        )
        .effect(
            "Names every physical resource: the two tables, the queues, the functions and their log groups, \
             the alarms, the topic, the dashboard and the failed-batch bucket. The functions find the tables \
             through their environment.",
            LiveChange::Unsafe,
            "A new name replaces every named resource: CloudFormation creates new, empty tables (the old ones \
             are retained with the data, outside the stack), new queues (messages in the old DLQs stay \
             behind) and new functions. Deploy a new stack under another --stack-name instead.",
        ),
    );
    t.parameter(
        params::DEFAULT_LIMIT,
        Parameter::number(
            "Per-scope limit for scopes without a `limit` override item in the counters table.",
            100,
            0,
            params::MAX_LIMIT as i64,
        )
        .effect(
            "The api function's DEFAULT_LIMIT: each create reads it, with the scope's override, before it \
             admits (strict admission derives the per-shard quotas from it).",
            LiveChange::Window,
            "Lambda rolls the new value out over up to about a minute (LastUpdateStatus InProgress), old and \
             new side by side: until the rollout is over and the creates started before its end are done (the \
             API's 10 s timeout), creates on the old value admit up to it, strict admission's too. Lowering it \
             below a scope's usage refuses that scope's creates until deletes bring it under; nothing is taken \
             back. (A `counterctl scope set-limit` override lands at once: a strict create that read the old \
             limit can pass the new one by at most the creates in flight at the change.)",
        ),
    );
    t.parameter(
        params::STREAM_BATCH_SIZE,
        Parameter::number(
            "Records per invocation of the stream counter (DynamoDB Streams allows 1-10000).",
            100,
            1,
            10_000,
        )
        .effect(
            "BatchSize of the stream event source mapping. In batched processing a larger batch writes a \
             scope's counter once for more records (fewer write units per counted event) and takes longer \
             per invocation.",
            LiveChange::Safe,
            "The mapping is updated in place; batches in flight finish at the old size.",
        ),
    );
    t.parameter(
        params::PARALLELIZATION_FACTOR,
        Parameter::number(
            "Concurrent batches per stream shard (1-10). Records of one item stay in order at any value.",
            1,
            1,
            10,
        )
        .effect(
            "ParallelizationFactor of the stream mapping: how many stream counter invocations run at once \
             per stream shard. More run more transactions at once, and more of them conflict on a hot \
             scope's counter item (retried, or spread with EcShardCount).",
            LiveChange::Safe,
            "The mapping is updated in place; records of one item stay in order at any value.",
        ),
    );
    t.parameter(
        params::MAXIMUM_RETRY_ATTEMPTS,
        Parameter::number(
            "Retries of a failing batch before it goes to DLQ1 (-1: until the record reaches \
             MaximumRecordAgeInSeconds). Bisecting a batch does not use up retries.",
            10,
            -1,
            10_000,
        )
        .effect(
            "MaximumRetryAttempts of the stream mapping: how often a failing batch is retried (bisected on \
             each error) before it goes to the failure path (FailedBatchRecords).",
            LiveChange::Safe,
            "Applies to the next failure. Fewer retries send a failing batch to the failure path sooner, \
             where the reprocessor replays it.",
        ),
    );
    t.parameter(
        params::MAXIMUM_RECORD_AGE_IN_SECONDS,
        Parameter::number(
            "Age after which a failing record goes to DLQ1 instead of being retried. Capped at 86400 \
             (not the service's 604800, nor -1 for no limit) because the stream keeps records 24 hours: \
             the DLQ1 message names a sequence range, and the reprocessor can only replay it while the \
             records are still in the stream.",
            21_600,
            60,
            86_400,
        )
        .effect(
            "MaximumRecordAgeInSeconds of the stream mapping: a failing record older than this goes to the \
             failure path instead of being retried.",
            LiveChange::Safe,
            "Applies to the next failure; a lower age sends old failing records to the failure path sooner.",
        ),
    );
    t.parameter(
        params::DLQ1_MAX_RECEIVE_COUNT,
        Parameter::number(
            "Receives of a DLQ1 message (reprocessor attempts) before SQS moves it to DLQ2 for an operator.",
            5,
            1,
            1_000,
        )
        .effect(
            "maxReceiveCount of DLQ1's redrive policy: how many reprocessor attempts, 720 s apart, a failed \
             batch gets before it reaches DLQ2 and its alarm.",
            LiveChange::Safe,
            "The queue's redrive policy is updated in place and applies to each message's next receive.",
        ),
    );
    t.parameter(
        params::EC_SHARD_COUNT,
        Parameter::number(
            "Eventual-counter shards per scope (eventual#0..N-1). More shards spread a hot scope's \
             writes; reads sum them with one Query.",
            1,
            1,
            100,
        )
        .effect(
            "EC_SHARDS of the stream counter and the reprocessor: how many eventual-counter items an \
             invocation spreads a scope's counts over. Readers (usage, admission, audit) sum every \
             eventual item they find, whatever the count.",
            LiveChange::Safe,
            "Applies from each function's next invocation. After a lowering, the items above the new count \
             keep their share and stay in every sum; EC stays equal to the processed items throughout.",
        ),
    );
    t.parameter(
        params::BE_SHARD_COUNT,
        Parameter::number(
            "Best-effort-counter shards per scope (best_effort#0..N-1; 1 keeps the single best_effort item). \
             A create counts on one at random and its delete on the same one, so a hot scope's request path \
             is not capped by one item's 1,000 writes/s; reads sum them with the one Query they make, and \
             strict admission splits the limit into per-shard quotas.",
            1,
            1,
            100,
        )
        .effect(
            "BE_SHARDS of the api function: how many best-effort items a create picks from (its delete takes \
             from the item's own shard), and in strict admission how the limit splits into quotas.",
            LiveChange::Window,
            "Lambda rolls the new count out over up to about a minute (LastUpdateStatus InProgress): old \
             and new run side by side; BE <= live (best-effort) and BE >= live (strict) hold throughout. In \
             strict admission creates under the two counts reserve side by side until the rollout is over and \
             the last create started before its end is done (up to about a minute plus the API's 10 s \
             timeout), and can pass the limit by at most the most creates in flight at any instant of that \
             window, not only those in flight at the change. Change it when hot scopes are below their limit. \
             In strict admission, growing it back over shards retired before the last raise leaves them at an \
             older epoch: the scope's strict creates answer 503 until `counterctl audit --repair` fences them \
             (the audit reports MixedEpochs); growing it past the shards of the last raise leaves the new \
             ones absent, and its strict creates may be refused below the limit until the audit creates \
             them (ShardsAbsent).",
        ),
    );
    t.parameter(
        params::SCOPE_KEY_SHARDS,
        Parameter::number(
            "Partition keys each scope's items are spread over (1 keeps the scope itself as the only key). \
             With N > 1 an item of scope s lives under the key s#k, k a hash of its id (FNV-1a mod N), and \
             each key has its own counters and admits up to its share of the scope's limit (the limit split \
             as evenly as integers allow), reading only its own counters: one Query per create, as with one \
             key. Why: one partition serves about 1,000 write units/s and a create costs about 4 on its \
             scope's partition of the resources table, so an unsharded hot scope tops out near 250 \
             creates/s; N keys lift that about N times. The cost: a create is refused at its key's share \
             while other keys may have room, so a scope can be refused below its limit; keep every limit \
             much larger than N (each key's share is limit / N). Usage and audits read all N keys; a limit \
             override is written as a copy on every key (while copies disagree, admission is bounded by the \
             larger limit); gapless sequences stay on the bare scope.",
            1,
            1,
            i64::from(hybrid_counter::scope_keys::MAX_KEYS),
        )
        .effect(
            "SCOPE_KEY_SHARDS of the api function and the drift check: which partition key a create, a \
             delete and a read of an item use, how the limit splits into per-key shares, and which keys \
             usage, audits and limit overrides read and write. counterctl reads the deployed value.",
            LiveChange::Unsafe,
            "Every item's partition key and every limit override's copy depend on N: after a change what \
             is stored would be hidden from its scope's counters, audits and admission, and during the \
             rollout old and new instances would admit one scope under both layouts. N is fixed when the \
             stack is created: counterctl plan and deploy refuse any change; no migration exists: deploy a \
             new stack.",
        ),
    );
    t.parameter(
        params::LAMBDA_MEMORY_SIZE,
        Parameter::number("Memory of every function, MB (CPU scales with it).", 256, 128, 10_240).effect(
            "MemorySize of every function, and with it its CPU share and its price per millisecond.",
            LiveChange::Safe,
            "Each function's configuration is updated in place; the next invocations run with the new size.",
        ),
    );
    t.parameter(
        params::LAMBDA_ARCHITECTURE,
        Parameter::string("Instruction set the function zips were built for.")
            .default_string("arm64")
            .allowed_values(&["arm64", "x86_64"])
            .effect(
                "Architectures of every function: the instruction set Lambda runs the zips on. `make build` \
                 builds arm64 zips.",
                LiveChange::Unsafe,
                "A value that does not match the deployed zips makes every invocation fail (the bootstrap \
                 cannot execute): the API answers errors and the stream stops being counted. Change it only \
                 together with zips built for the new architecture.",
            ),
    );
    t.parameter(
        params::ARTIFACTS_BUCKET,
        Parameter::string("S3 bucket holding the cargo-lambda zips, in the stack's region.")
            .length(3, 63)
            .pattern(
                "^[a-z0-9][a-z0-9.-]*[a-z0-9]$",
                "an S3 bucket name: lowercase letters, digits, dots and hyphens",
            )
            .effect(
                "Where every function's code is read from when CloudFormation creates or updates it.",
                LiveChange::Managed,
                "counterctl deploy sets it (--artifacts-bucket, else a bucket named after the stack, account \
                 and region) and uploads the zips there first.",
            ),
    );
    t.parameter(params::STREAM_COUNTER_CODE_KEY, code_key("stream counter"));
    t.parameter(params::DLQ_REPROCESSOR_CODE_KEY, code_key("DLQ reprocessor"));
    t.parameter(params::API_CODE_KEY, code_key("API"));
    t.parameter(
        params::ADMISSION_MODE,
        Parameter::string(
            "How the API admits a create. best-effort: admitted when max(best-effort, eventual) < limit; \
             concurrent creators can overshoot the limit. strict: each create first reserves its slot with \
             a conditional best-effort increment (count < limit), so concurrent creators never overshoot, \
             at one more write per create. After switching to strict, once the rollout is over and one API \
             timeout has passed, run `counterctl audit --repair` so the best-effort counters reserve every \
             live item.",
        )
        .default_string(Admission::default().as_str())
        .allowed_values(&Admission::NAMES)
        .effect(
            "ADMISSION_MODE of the api function: whether a create is admitted on a read (best-effort) or \
             reserves its slot with a conditional best-effort increment first (strict); the audit judges BE \
             by it.",
            LiveChange::Window,
            "Lambda rolls it out over up to about a minute (LastUpdateStatus InProgress): best-effort and \
             strict creates run side by side. Switching to strict leaves scopes with BE, or a shard, below \
             their live items, and the limit holds only as in best-effort admission until `counterctl audit \
             --repair` raises them: run it once LastUpdateStatus is Successful and the API's 10 s timeout has \
             passed (a best-effort create still running undercounts again), so the window is up to about a \
             minute plus 10 s plus the repair. Switching back leaves over-reserved scopes, which refuse early \
             until the next repair.",
        ),
    );
    t.parameter(
        params::PROCESSING_MODE,
        Parameter::string(
            "How the stream counter and the reprocessor write a batch. batched: one transaction per scope \
             per batch with the net delta on the counter (about 2 write units per counted create at batch \
             size 100). per-record: one transaction per record (4 write units each), kept for comparison.",
        )
        .default_string(Mode::default().as_str())
        .allowed_values(&Mode::NAMES)
        .effect(
            "PROCESSING_MODE of the stream counter and the reprocessor: one transaction per scope per batch, \
             or one per record.",
            LiveChange::Safe,
            "Applies from each function's next invocation. Both modes make the same conditional writes, so \
             invocations of either mode may overlap.",
        ),
    );
    t.parameter(
        params::SCOPE_AUTHORIZATION,
        Parameter::string(
            "Which scopes a caller of the example API may act on. none: every caller the function URL's \
             AWS_IAM auth lets in may act on every scope (a single-trust example). principal-tag: the \
             caller's IAM role or user (of this account, under the IAM path ScopeCallerPath) must carry the \
             tag hck-scope-prefix, and the scope must be its value or start with its value and /, else 403 \
             (tag acme: acme and acme/eu, never acme2); the function reads the tag with iam:ListRoleTags / \
             iam:ListUserTags on each request.",
        )
        .default_string(SCOPE_NONE)
        .allowed_values(&[SCOPE_NONE, SCOPE_PRINCIPAL_TAG])
        .effect(
            "SCOPE_AUTHORIZATION of the api function, and the api role's grant of iam:ListRoleTags and \
             iam:ListUserTags (only under principal-tag).",
            LiveChange::Window,
            "The role is updated before the function. Switching to principal-tag: callers without the tag \
             are refused from the api's next invocation. Switching back to none: for the seconds between the \
             two updates the function still reads tags without the grant, and refuses callers it would have \
             let in; it never lets in a caller it should refuse.",
        ),
    );
    t.parameter(
        params::SCOPE_CALLER_PATH,
        Parameter::string(
            "With ScopeAuthorization=principal-tag: the IAM path of the roles and users whose tags the api may \
             read, so it cannot read every principal's tags in the account. Create the callers' roles and users \
             under it (aws iam create-role --path /hck-callers/ ...); a caller elsewhere is refused (its tags \
             cannot be read). / allows every path.",
        )
        .default_string(DEFAULT_SCOPE_CALLER_PATH)
        .pattern(
            SCOPE_CALLER_PATH_PATTERN,
            "an IAM path: / or /name/.../ (letters, digits and + = , . @ _ -)",
        )
        .length(1, 512)
        .effect(
            "The resource of the api role's iam:ListRoleTags and iam:ListUserTags grants (only under \
             principal-tag).",
            LiveChange::Window,
            "The role's policy is updated in place: callers outside the new path are refused from then on.",
        ),
    );
    t.condition(
        SCOPE_BY_TAG,
        Expr::equals(Expr::reference(params::SCOPE_AUTHORIZATION), SCOPE_PRINCIPAL_TAG.into()),
    );
}

/// Where the api's callers live by default.
pub const DEFAULT_SCOPE_CALLER_PATH: &str = "/hck-callers/";

/// An IAM path (IAM identifiers: `/` or `/a/b/`, at most 512 characters).
pub const SCOPE_CALLER_PATH_PATTERN: &str = "^/([A-Za-z0-9+=,.@_-]+/)*$";

const SCOPE_NONE: &str = "none";
const SCOPE_PRINCIPAL_TAG: &str = "principal-tag";
pub use crate::params::SCOPE_BY_TAG;

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
        Expr::negate(Expr::equals(Expr::reference(params::EMULATOR_ROLE_ASSUMER), "".into())),
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

/// The parameter carrying the S3 key of one function's zip.
pub(crate) fn code_key(what: &str) -> Parameter {
    Parameter::string(&format!(
        "S3 key of the {what} zip (cargo-lambda bootstrap.zip). Use a key that changes with the \
         content: CloudFormation only updates the code when the key changes."
    ))
    .length(1, 1024)
    .effect(
        &format!("The code of the {what} function."),
        LiveChange::Managed,
        "counterctl deploy sets it from the zip's content hash, so the function's code changes exactly when \
         the zip does.",
    )
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

fn no_environment() -> Vec<(&'static str, Expr)> {
    Vec::new()
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
        environment: no_environment,
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
        environment: no_environment,
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
        variables.insert(ENV_SCOPE_KEYS.to_owned(), Expr::reference(params::SCOPE_KEY_SHARDS));
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

pub(crate) fn arn(logical_id: &str) -> Expr {
    Expr::get_att(logical_id, "Arn")
}

fn stream_arn() -> Expr {
    Expr::get_att(logical::RESOURCES_TABLE, "StreamArn")
}

/// What stream processing does to the tables (`stack::access` lists each
/// call). Inside `TransactWriteItems` each action is authorized as its
/// single-item operation (there is no `TransactWriteItems` IAM action): the
/// flag flip is an `UpdateItem`, the hard delete a `DeleteItem`. A soft
/// delete is decided on its item's current state: one `BatchGetItem` per
/// chunk in batched mode (its own action, which `GetItem` does not cover),
/// a `GetItem` per record in per-record mode.
fn resource_item_statements() -> Vec<Statement> {
    vec![
        Statement::allow(
            "ResourcesTableItems",
            &[
                Action::DynamoDbGetItem,
                Action::DynamoDbBatchGetItem,
                Action::DynamoDbUpdateItem,
                Action::DynamoDbDeleteItem,
            ],
            vec![arn(logical::RESOURCES_TABLE)],
        ),
        Statement::allow(
            "EventualCounter",
            &[Action::DynamoDbUpdateItem],
            vec![arn(logical::COUNTERS_TABLE)],
        ),
        kit_state_denied(),
    ]
}

/// The partition of the kit's own state (the drift check's cursor) is the
/// drift check's alone: the request and stream roles are denied every item
/// action under its key, whatever their allows on the counters table say.
/// `ForAnyValue`: a request without a leading key (a Scan) is not matched.
fn kit_state_denied() -> Statement {
    Statement::deny(
        "KitStateIsNotOurs",
        crate::access::KIT_STATE_DENIED,
        vec![arn(logical::COUNTERS_TABLE)],
    )
    .when(
        "ForAnyValue:StringEquals",
        "dynamodb:LeadingKeys",
        Expr::List(vec![keys::KIT_STATE_SCOPE.into()]),
    )
}

fn stream_counter_permissions() -> Vec<Statement> {
    let mut statements = resource_item_statements();
    statements.push(Statement::allow(
        "ResourcesStream",
        // The event source mapping reads the stream with the function's
        // role. ListStreams has no resource-level permissions, so on this
        // ARN it grants nothing; it is listed because Lambda's documented
        // set for stream sources names it, and granting it on `*` would be
        // the only wildcard resource in the stack.
        &[
            Action::DynamoDbDescribeStream,
            Action::DynamoDbGetRecords,
            Action::DynamoDbGetShardIterator,
            Action::DynamoDbListStreams,
        ],
        vec![stream_arn()],
    ));
    // The mapping sends a failed batch to its destination (DLQ1 or the
    // failed-batch bucket) as the function's role: those grants are in the
    // conditional policies of `failed_batches::stream_counter_policies`.
    statements
}

fn dlq_reprocessor_permissions() -> Vec<Statement> {
    let mut statements = vec![
        Statement::allow(
            "Dlq1Consumer",
            // What the SQS event source mapping does as the function's role
            // (AWS documents these three; the mapping never changes a
            // message's visibility, nor does the reprocessor).
            &[
                Action::SqsReceiveMessage,
                Action::SqsDeleteMessage,
                Action::SqsGetQueueAttributes,
            ],
            vec![arn(logical::DLQ1)],
        ),
        Statement::allow(
            "ReplayStreamRange",
            // The reprocessor itself re-reads the failed sequence range from
            // the shard the message names: no DescribeStream.
            &[Action::DynamoDbGetRecords, Action::DynamoDbGetShardIterator],
            vec![stream_arn()],
        ),
        Statement::allow(
            "PermanentFailuresToDlq2",
            // A message that can never be replayed goes to DLQ2 at once.
            &[Action::SqsSendMessage],
            vec![arn(logical::DLQ2)],
        ),
    ];
    statements.extend(resource_item_statements());
    statements
}

fn api_permissions() -> Vec<Statement> {
    vec![
        Statement::allow(
            "ResourcesTableRequestPath",
            // Create puts the item, delete reads it and soft-deletes it.
            &[
                Action::DynamoDbGetItem,
                Action::DynamoDbPutItem,
                Action::DynamoDbUpdateItem,
            ],
            vec![arn(logical::RESOURCES_TABLE)],
        ),
        Statement::allow(
            "CountersTableRequestPath",
            // One Query reads every counter of a scope (BE, EC shards, limit);
            // UpdateItem moves the best-effort counter. A gapless sequence
            // claim (`?sequence=true`) is one TransactWriteItems whose
            // Update of `sequence` and Put of `sequence#<n>` IAM checks as
            // UpdateItem and PutItem; GetItem reads `last_id` and a numbered
            // item back.
            &[
                Action::DynamoDbQuery,
                Action::DynamoDbUpdateItem,
                Action::DynamoDbGetItem,
                Action::DynamoDbPutItem,
            ],
            vec![arn(logical::COUNTERS_TABLE)],
        ),
        kit_state_denied(),
    ]
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
