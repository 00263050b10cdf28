//! `AWS::S3::Bucket` and `AWS::S3::BucketPolicy`, for the bucket that keeps
//! failed stream batches with their records (`FailedBatchRecords=payload`).

use serde::Serialize;

use crate::expr::Expr;
use crate::resources::iam::PolicyDocument;

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct Bucket {
    pub bucket_name: Expr,
    pub bucket_encryption: BucketEncryption,
    pub public_access_block_configuration: PublicAccessBlockConfiguration,
    pub ownership_controls: OwnershipControls,
    pub versioning_configuration: VersioningConfiguration,
    pub lifecycle_configuration: LifecycleConfiguration,
    pub notification_configuration: NotificationConfiguration,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct BucketEncryption {
    pub server_side_encryption_configuration: Vec<ServerSideEncryptionRule>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct ServerSideEncryptionRule {
    pub server_side_encryption_by_default: ServerSideEncryptionByDefault,
    /// One KMS request per bucket key period instead of one per object.
    pub bucket_key_enabled: bool,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct ServerSideEncryptionByDefault {
    #[serde(rename = "SSEAlgorithm")]
    pub sse_algorithm: SseAlgorithm,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum SseAlgorithm {
    /// SSE-KMS; without a key id, the AWS managed key `aws/s3`.
    #[serde(rename = "aws:kms")]
    AwsKms,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct PublicAccessBlockConfiguration {
    pub block_public_acls: bool,
    pub block_public_policy: bool,
    pub ignore_public_acls: bool,
    pub restrict_public_buckets: bool,
}

impl PublicAccessBlockConfiguration {
    /// All four blocks on.
    pub fn all() -> Self {
        Self {
            block_public_acls: true,
            block_public_policy: true,
            ignore_public_acls: true,
            restrict_public_buckets: true,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct OwnershipControls {
    pub rules: Vec<OwnershipControlsRule>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct OwnershipControlsRule {
    pub object_ownership: ObjectOwnership,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum ObjectOwnership {
    /// ACLs off: the bucket owner owns every object.
    BucketOwnerEnforced,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct VersioningConfiguration {
    pub status: Status,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum Status {
    Enabled,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct LifecycleConfiguration {
    pub rules: Vec<LifecycleRule>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct LifecycleRule {
    pub id: String,
    pub status: Status,
    pub expiration_in_days: Expr,
    pub noncurrent_version_expiration: NoncurrentVersionExpiration,
    pub abort_incomplete_multipart_upload: AbortIncompleteMultipartUpload,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct NoncurrentVersionExpiration {
    pub noncurrent_days: Expr,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct AbortIncompleteMultipartUpload {
    pub days_after_initiation: u32,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct NotificationConfiguration {
    pub queue_configurations: Vec<QueueConfiguration>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct QueueConfiguration {
    /// e.g. `s3:ObjectCreated:*`.
    pub event: String,
    pub queue: Expr,
    pub filter: NotificationFilter,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct NotificationFilter {
    #[serde(rename = "S3Key")]
    pub s3_key: S3KeyFilter,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct S3KeyFilter {
    pub rules: Vec<FilterRule>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct FilterRule {
    /// `prefix` or `suffix`.
    pub name: String,
    pub value: String,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct BucketPolicy {
    pub bucket: Expr,
    pub policy_document: PolicyDocument,
}
