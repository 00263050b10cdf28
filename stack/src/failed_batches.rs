//! Where the stream mapping sends a batch it gives up on (stack parameter
//! `FailedBatchRecords`, DESIGN §5b).
//!
//! * `pointer`: DLQ1 (SQS) receives the on-failure record, a sequence range
//!   the reprocessor reads back from the stream while the stream still has
//!   it (24 hours).
//! * `payload` (default): an S3 bucket receives one object per failed batch,
//!   the same record plus the invocation payload with every record, and the
//!   bucket's event notification (object created under `aws/lambda/`) puts
//!   the object's address in DLQ1. The reprocessor replays the records from
//!   the object, so a batch is counted even after its range has left the
//!   stream. The bucket is encrypted (SSE-KMS, the AWS managed key), keeps
//!   versions, blocks public access, refuses plain HTTP, lets only the
//!   stream counter's role write objects and only the reprocessor's role
//!   and `OperatorPrincipalArn` read them, is retained when the stack is
//!   deleted, and expires objects after [`FAILED_BATCH_RETENTION_DAYS`].
//!
//! The function roles get the permissions of the chosen mode only: each
//! mode's grants are an inline policy of their own, present only under the
//! mode's template condition.

use crate::expr::Expr;
use crate::logical;
use crate::params;
use crate::resources::iam::{Action, InlinePolicy, PolicyDocument, Principal, Statement};
use crate::resources::s3::{
    AbortIncompleteMultipartUpload, Bucket, BucketEncryption, BucketPolicy, FilterRule, LifecycleConfiguration,
    LifecycleRule, NoncurrentVersionExpiration, NotificationConfiguration, NotificationFilter, ObjectOwnership,
    OwnershipControls, OwnershipControlsRule, PublicAccessBlockConfiguration, QueueConfiguration, S3KeyFilter,
    ServerSideEncryptionByDefault, ServerSideEncryptionRule, SseAlgorithm, Status, VersioningConfiguration,
};
use crate::resources::sqs::QueuePolicy;
use crate::template::{LiveChange, Parameter, Resource, Template};

/// `FailedBatchRecords`' values.
pub const POINTER: &str = "pointer";
pub const PAYLOAD: &str = "payload";
/// The default: see docs/failed-batches.md (a failed batch must outlive the stream's
/// 24 hours; it costs one S3 PUT per failed batch).
pub const DEFAULT: &str = PAYLOAD;

/// Template condition: failed batches go to the bucket with their records.
pub const KEEP_PAYLOAD: &str = "KeepFailedBatchPayload";
/// Template condition: failed batches go to DLQ1 as pointers.
pub const KEEP_POINTER: &str = "KeepFailedBatchPointer";

/// Days a failed batch object is kept: long past DLQ1's and DLQ2's 14 days,
/// so an operator who redrives a message from DLQ2 at the last moment still
/// finds its object.
pub const FAILED_BATCH_RETENTION_DAYS: i64 = 90;
/// Days a deleted or overwritten object's previous version is kept.
pub const NONCURRENT_VERSION_DAYS: i64 = 30;
/// Where Lambda writes the objects (`aws/lambda/<mapping uuid>/<shard>/...`):
/// only those are announced to DLQ1.
pub const OBJECT_PREFIX: &str = "aws/lambda/";

/// What `OperatorPrincipalArn` may hold: empty, or a role or user ARN.
pub const OPERATOR_PRINCIPAL_PATTERN: &str = "^$|^arn:aws[a-z-]*:iam::[0-9]{12}:(role|user)/[A-Za-z0-9+=,.@_/-]+$";

/// The parameter.
pub fn add_parameter(t: &mut Template) {
    t.parameter(
        params::FAILED_BATCH_RECORDS,
        Parameter::string(
            "Where the stream mapping sends a batch it gives up on. payload: an S3 bucket keeps the batch \
             with its records (one PUT per failed batch), and its notification puts the object's address \
             in DLQ1; the reprocessor replays the records from the object, even after they have left the \
             stream's 24-hour retention. pointer: DLQ1 receives only the batch's sequence range, which the \
             reprocessor can read back only while the stream still holds it.",
        )
        .default_string(DEFAULT)
        .allowed_values(&[PAYLOAD, POINTER])
        .effect(
            "The stream mapping's on-failure destination (the bucket or DLQ1), the bucket and its \
             notification to DLQ1 (created under payload, retained when removed), and each role's grants for \
             its mode.",
            LiveChange::Window,
            "Empty DLQ1 and DLQ2 before switching from payload to pointer: afterwards the reprocessor may no \
             longer read the bucket, so a queued message naming an object fails to DLQ2 (the object stays in \
             the retained bucket). From pointer to payload, queued ranges still replay while the stream keeps \
             them (24 h).",
        ),
    );
    t.parameter(
        params::OPERATOR_PRINCIPAL_ARN,
        Parameter::string(
            "ARN of the IAM role or user of this account that runs `counterctl redrive --replay`, the only \
             principal besides the reprocessor allowed to read or delete failed batches in the bucket \
             (payload). Not an account root (aws:PrincipalArn never equals it for a role or user) and not \
             another account's principal (the objects are encrypted with the account's aws/s3 key, which \
             another account cannot use); counterctl refuses another account's. Empty: only the reprocessor \
             reads them.",
        )
        .default_string("")
        .pattern(
            OPERATOR_PRINCIPAL_PATTERN,
            "empty, or an IAM role or user ARN (not an account root)",
        )
        .effect(
            "The failed-batch bucket's policy: who besides the reprocessor may read the kept batches.",
            LiveChange::Safe,
            "The bucket policy is updated in place.",
        ),
    );
}

/// The two conditions.
pub fn add_conditions(t: &mut Template) {
    let mode = || Expr::reference(params::FAILED_BATCH_RECORDS);
    t.condition(KEEP_PAYLOAD, Expr::equals(mode(), PAYLOAD.into()));
    t.condition(KEEP_POINTER, Expr::equals(mode(), POINTER.into()));
    t.condition(
        HAS_OPERATOR_PRINCIPAL,
        Expr::differs(params::OPERATOR_PRINCIPAL_ARN, ""),
    );
}

/// `<NamePrefix>-failed-batch-<first 8 hex digits of the stack id's uuid>`:
/// unique per stack creation, so a re-created stack does not collide with
/// the bucket the deleted one retained; at most 40 + 22 = 62 characters, and
/// known without referring to the bucket (the queue policy it depends on
/// names it).
fn bucket_name() -> Expr {
    let stack_uuid = Expr::select(2, Expr::split("/", Expr::reference("AWS::StackId")));
    Expr::join(
        "-",
        vec![
            Expr::reference(params::NAME_PREFIX),
            "failed-batch".into(),
            Expr::select(0, Expr::split("-", stack_uuid)),
        ],
    )
}

fn computed_bucket_arn() -> Expr {
    Expr::join(
        "",
        vec![
            "arn:".into(),
            Expr::reference("AWS::Partition"),
            ":s3:::".into(),
            bucket_name(),
        ],
    )
}

fn bucket_arn() -> Expr {
    Expr::get_att(logical::FAILED_BATCH_BUCKET, "Arn")
}

fn objects_arn() -> Expr {
    Expr::sub(format!("${{{}.Arn}}/*", logical::FAILED_BATCH_BUCKET))
}

/// The stream mapping's on-failure destination.
pub fn on_failure_destination() -> Expr {
    Expr::when(KEEP_PAYLOAD, bucket_arn(), Expr::get_att(logical::DLQ1, "Arn"))
}

/// What the stream mapping does as the stream counter's role when it gives
/// up on a batch: one inline policy per mode, each only under its mode.
pub fn stream_counter_policies() -> Vec<InlinePolicy> {
    vec![
        InlinePolicy::new(
            "failed-batches-to-dlq1",
            vec![Statement::allow(
                "OnFailureDestination",
                // The failed batch's description goes to DLQ1.
                &[Action::SqsSendMessage],
                vec![Expr::get_att(logical::DLQ1, "Arn")],
            )],
        )
        .only_if(KEEP_POINTER),
        InlinePolicy::new(
            "failed-batches-to-s3",
            vec![
                Statement::allow(
                    "FailedBatchObjects",
                    // The failed batch with its records goes to the bucket.
                    &[Action::S3PutObject],
                    vec![objects_arn()],
                ),
                Statement::allow(
                    "FailedBatchBucket",
                    // Listed with PutObject by Lambda's documentation of S3
                    // on-failure destinations.
                    &[Action::S3ListBucket],
                    vec![bucket_arn()],
                ),
            ],
        )
        .only_if(KEEP_PAYLOAD),
    ]
}

/// What the reprocessor reads of a failed batch kept in the bucket.
pub fn reprocessor_policies() -> Vec<InlinePolicy> {
    vec![
        InlinePolicy::new(
            "failed-batches-from-s3",
            vec![
                Statement::allow("ReadFailedBatches", &[Action::S3GetObject], vec![objects_arn()]),
                Statement::allow(
                    "FailedBatchBucket",
                    // So a missing object answers NoSuchKey (a permanent
                    // failure, straight to DLQ2), not AccessDenied (retried
                    // for an hour).
                    &[Action::S3ListBucket],
                    vec![bucket_arn()],
                ),
            ],
        )
        .only_if(KEEP_PAYLOAD),
    ]
}

/// The bucket, its TLS-only policy, and DLQ1's policy letting the bucket's
/// notifications in; all only with `payload`.
pub fn add_resources(t: &mut Template) {
    let dlq1_arn = Expr::get_att(logical::DLQ1, "Arn");
    t.resource(
        logical::DLQ1_POLICY,
        Resource::from(QueuePolicy {
            queues: vec![Expr::reference(logical::DLQ1)],
            policy_document: PolicyDocument::new(vec![
                Statement::allow(
                    "FailedBatchNotifications",
                    &[Action::SqsSendMessage],
                    vec![dlq1_arn.clone()],
                )
                .for_principal(Principal::Service("s3.amazonaws.com".to_owned()))
                .when("ArnEquals", "aws:SourceArn", computed_bucket_arn())
                .when("StringEquals", "aws:SourceAccount", Expr::reference("AWS::AccountId")),
            ]),
        })
        .only_if(KEEP_PAYLOAD),
    );
    // Retained: the objects are the only copy of batches that may have left
    // the stream. S3 checks that it may send to DLQ1 when the notification
    // is configured, hence the queue policy first.
    t.resource(
        logical::FAILED_BATCH_BUCKET,
        Resource::retained(Bucket {
            bucket_name: bucket_name(),
            bucket_encryption: BucketEncryption {
                server_side_encryption_configuration: vec![ServerSideEncryptionRule {
                    server_side_encryption_by_default: ServerSideEncryptionByDefault {
                        sse_algorithm: SseAlgorithm::AwsKms,
                    },
                    bucket_key_enabled: true,
                }],
            },
            public_access_block_configuration: PublicAccessBlockConfiguration::all(),
            ownership_controls: OwnershipControls {
                rules: vec![OwnershipControlsRule {
                    object_ownership: ObjectOwnership::BucketOwnerEnforced,
                }],
            },
            versioning_configuration: VersioningConfiguration {
                status: Status::Enabled,
            },
            lifecycle_configuration: LifecycleConfiguration {
                rules: vec![LifecycleRule {
                    id: "expire-failed-batches".to_owned(),
                    status: Status::Enabled,
                    expiration_in_days: FAILED_BATCH_RETENTION_DAYS.into(),
                    noncurrent_version_expiration: NoncurrentVersionExpiration {
                        noncurrent_days: NONCURRENT_VERSION_DAYS.into(),
                    },
                    abort_incomplete_multipart_upload: AbortIncompleteMultipartUpload {
                        days_after_initiation: 1,
                    },
                }],
            },
            notification_configuration: NotificationConfiguration {
                queue_configurations: vec![QueueConfiguration {
                    event: "s3:ObjectCreated:*".to_owned(),
                    queue: dlq1_arn,
                    filter: NotificationFilter {
                        s3_key: S3KeyFilter {
                            rules: vec![FilterRule {
                                name: "prefix".to_owned(),
                                value: OBJECT_PREFIX.to_owned(),
                            }],
                        },
                    },
                }],
            },
        })
        .only_if(KEEP_PAYLOAD)
        .after(logical::DLQ1_POLICY),
    );
    t.resource(
        logical::FAILED_BATCH_BUCKET_POLICY,
        // Kept with the bucket (the same deletion and update-replace
        // policies, "DeletionPolicy attribute":
        // https://docs.aws.amazon.com/AWSCloudFormation/latest/UserGuide/aws-attribute-deletionpolicy.html):
        // a kept bucket without it would hold full item images with no Deny.
        Resource::retained(BucketPolicy {
            bucket: Expr::reference(logical::FAILED_BATCH_BUCKET),
            policy_document: PolicyDocument::new(vec![
                Statement::deny("TlsOnly", &[Action::S3Any], vec![bucket_arn(), objects_arn()])
                    .for_principal(Principal::Anyone)
                    .when("Bool", "aws:SecureTransport", "false".into()),
                // Only the stream mapping, as the stream counter's role,
                // writes a failed batch: nobody can plant one for the
                // reprocessor to replay.
                Statement::deny(
                    "OnlyTheStreamCounterWrites",
                    &[Action::S3PutObject],
                    vec![objects_arn()],
                )
                .for_principal(Principal::Anyone)
                .when(
                    "StringNotLike",
                    "aws:userid",
                    role_sessions(logical::STREAM_COUNTER_ROLE),
                ),
                // Only the reprocessor and the operator read the records
                // or delete them, by any route: a GetObject naming a
                // versionId is authorized as s3:GetObjectVersion, a
                // DeleteObject naming one (the delete that removes data in a
                // versioned bucket) as s3:DeleteObjectVersion, and
                // replication reads as s3:GetObjectVersionForReplication
                // (S3 actions by request:
                // https://docs.aws.amazon.com/AmazonS3/latest/userguide/using-with-s3-policy-actions.html).
                // The account's administrators keep the bucket-level actions
                // (policy, lifecycle), so they can still change this policy
                // or empty the bucket: SECURITY.md.
                Statement::deny(
                    ONLY_REPROCESSOR_AND_OPERATOR,
                    &OBJECT_READS_AND_DELETES,
                    vec![objects_arn()],
                )
                .for_principal(Principal::Anyone)
                // Both must hold to deny: not one of the reprocessor's
                // sessions, and not the operator.
                .when(
                    "StringNotLike",
                    "aws:userid",
                    role_sessions(logical::DLQ_REPROCESSOR_ROLE),
                )
                .when("ArnNotEquals", "aws:PrincipalArn", operator_or_reprocessor()),
            ]),
        })
        .only_if(KEEP_PAYLOAD),
    );
}

/// The bucket policy statement that keeps failed batches from everyone but
/// the reprocessor and the operator.
pub const ONLY_REPROCESSOR_AND_OPERATOR: &str = "OnlyTheReprocessorAndTheOperatorReadOrDelete";

/// Every object action that reads a failed batch's records or removes one.
pub const OBJECT_READS_AND_DELETES: [Action; 5] = [
    Action::S3GetObject,
    Action::S3GetObjectVersion,
    Action::S3GetObjectVersionForReplication,
    Action::S3DeleteObject,
    Action::S3DeleteObjectVersion,
];

/// Template condition: an `OperatorPrincipalArn` was given.
pub const HAS_OPERATOR_PRINCIPAL: &str = "HasOperatorPrincipal";

/// `OperatorPrincipalArn` when given (else the reprocessor's role again,
/// so the list is never empty): the other principal that may read.
fn operator_or_reprocessor() -> Expr {
    Expr::when(
        HAS_OPERATOR_PRINCIPAL,
        Expr::reference(params::OPERATOR_PRINCIPAL_ARN),
        Expr::get_att(logical::DLQ_REPROCESSOR_ROLE, "Arn"),
    )
}

/// Every session of `role`, as `aws:userid` names it: `<role id>:<session>`
/// (IAM's global condition keys; AWS's "restrict bucket access to an IAM
/// role" pattern). Not `aws:PrincipalArn` with the role's ARN: an emulator
/// may put the session's ARN there (fakecloud 0.51.0 does) where AWS puts
/// the role's, and the role's unique id also stops a role deleted and
/// created again under the same name from inheriting the access.
fn role_sessions(role: &str) -> Expr {
    Expr::sub(format!("${{{role}.RoleId}}:*"))
}

/// The bucket's name, as an output that exists only with `payload`.
pub fn add_outputs(t: &mut Template) {
    t.conditional_output(
        crate::outputs::FAILED_BATCH_BUCKET,
        "Bucket keeping failed stream batches with their records (FailedBatchRecords=payload)",
        Expr::reference(logical::FAILED_BATCH_BUCKET),
        KEEP_PAYLOAD,
    );
}
