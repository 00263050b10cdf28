//! The core stack's parameters (names, tables, shards, admission, the
//! pipeline's tuning, the api's authorization) with their descriptions,
//! constraints and runtime effects, and the conditions they drive.

use hybrid_counter::config::Admission;
use hybrid_counter::stream::Mode;

use crate::expr::Expr;
use crate::params::{self, SCOPE_BY_TAG};
use crate::template::{LiveChange, Parameter, Template};

/// Where the api's callers live by default.
pub const DEFAULT_SCOPE_CALLER_PATH: &str = "/hck-callers/";

/// An IAM path (IAM identifiers: `/` or `/a/b/`, at most 512 characters).
pub const SCOPE_CALLER_PATH_PATTERN: &str = "^/([A-Za-z0-9+=,.@_-]+/)*$";

const SCOPE_NONE: &str = "none";
const SCOPE_PRINCIPAL_TAG: &str = "principal-tag";

pub(super) fn add_parameters(t: &mut Template) {
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
             back. With ScopeKeyShards above 1 that holds per counters key: a key above its new share keeps its \
             items while the others may fill theirs, so the scope can pass the new limit until that key drains \
             (strict admission's exception (4), docs/design.md). (A `counterctl limit set` override is \
             written in a few transactions, each key with its share from what the keys hold: a strict create \
             that read an older limit or share can pass the new one by at most the creates in flight from the \
             change until its last transaction; it leaves no key above its share but those creates'.)",
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
             much larger than N (each key's share is limit / N). Usage reads all N keys, audits their resources \
             keys; a limit \
             override is written as a copy on every key (while copies disagree, admission is bounded by the \
             larger limit); gapless sequences stay on the bare scope. Never change it on a deployed stack \
             (counterctl refuses; the console and other tools do not).",
            1,
            1,
            i64::from(hybrid_counter::scope_keys::MAX_KEYS),
        )
        .effect(
            "SCOPE_KEY_SHARDS of every function: which counters key a create, a \
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
        params::RESOURCE_KEY_SPREAD,
        Parameter::number(
            "Resources-table partition keys per counters key, fixed when the stack is created (1 keeps \
             one level: an item lives under its counters key). With M > 1 an item of scope s lives under \
             s#r, r below N x M from the same hash of its id, with r mod N its counters key, while its \
             counters, admission and limit copies stay on the N counters keys (s#0 when N = 1). Why: a \
             create writes about 3 units on its resources key (4 per create at three creates to one \
             delete) and under 2 on its counters key, and resources keys hold no state, so they can be \
             many (no share of the limit, no override copy) while the counters keys stay few. Costs: an \
             audit of a counters key reads its M resources keys, one Query each; the longest scope is \
             shorter by the digits of N x M - 1; the records of one counters key arrive on up to M stream \
             shards, whose batches write the same eventual counter, so raise EcShardCount with M (with one \
             EC shard the measured consumer fell to about 100 creates/s from transaction conflicts; counterctl \
             warns below M x ParallelizationFactor). Never change it on a deployed stack (counterctl refuses; \
             the console and other tools do not).",
            1,
            1,
            i64::from(hybrid_counter::scope_keys::MAX_SPREAD),
        )
        .effect(
            "RESOURCE_KEY_SPREAD of every function: which resources-table key a create, a delete and a read \
             of an item use, which counters key the stream consumer counts an item on, which resources keys \
             an audit or the drift check of a counters key reads, and how counterctl audit sums a Scan's \
             resources keys per counters key. counterctl reads the deployed value.",
            LiveChange::Unsafe,
            "Every item's partition key depends on it, as on ScopeKeyShards: it is fixed when the stack is \
             created; counterctl plan and deploy refuse any change; deploy a new stack.",
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
