//! Typed `Properties` of the resource types the kit deploys, one module per
//! service. Each struct carries only the properties the kit sets; enums stand
//! for the closed sets of values the service accepts, so a typo is a compile
//! error, not a failed deploy.

pub mod cloudwatch;
pub mod dynamodb;
pub mod events;
pub mod iam;
pub mod kms;
pub mod lambda;
pub mod logs;
pub mod s3;
pub mod sns;
pub mod sqs;
