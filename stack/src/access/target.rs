//! [`Target`]: what a grant is on, a resource of the template or, as an
//! [`OperatorScope`] names it, of a stack outside the template; a [`Grant`]
//! is some actions on one target.

use serde_json::{Value, json};

use crate::expr::Expr;
use crate::failed_batches::KEEP_PAYLOAD;
use crate::logical;
use crate::resources::iam::Action;
use hybrid_counter::keys::{KIT_STATE_SCOPE, LAYOUT_SCOPE};

/// What a grant is on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Target {
    ResourcesTable,
    CountersTable,
    /// The counters table, only under the partition key of the kit's own
    /// state ([`KIT_STATE_SCOPE`], `dynamodb:LeadingKeys`).
    KitState,
    /// The counters table, only under the layout record's partition key
    /// ([`LAYOUT_SCOPE`], `dynamodb:LeadingKeys`).
    KitLayout,
    ResourcesStream,
    Dlq1,
    Dlq2,
    /// The failed-batch bucket itself (`FailedBatchRecords=payload` only).
    FailedBatchBucket,
    /// Its objects (`payload` only).
    FailedBatchObjects,
    /// The limits file's object (`LimitsFileUri`, only when set).
    LimitsFile,
    /// The calling function's own log group.
    OwnLogGroup,
    /// The CloudFormation stack (its change sets are authorized on it).
    Stack,
    /// The bucket `counterctl deploy` uploads the zips and the template to.
    ArtifactsBucket,
    ArtifactsObjects,
    /// The stack's functions.
    Functions,
    /// Event source mappings (their ARNs end in a UUID nobody can predict).
    EventSourceMappings,
    /// The stack's alarms.
    Alarms,
    /// This account's IAM roles and users under `ScopeCallerPath`: the api's callers.
    IamRoles,
    IamUsers,
    /// `*`: for actions without resource-level permissions.
    Everything,
}

impl Target {
    /// The template condition under which the target exists.
    pub fn only_if(self) -> Option<&'static str> {
        match self {
            Target::FailedBatchBucket | Target::FailedBatchObjects => Some(KEEP_PAYLOAD),
            Target::IamRoles | Target::IamUsers => Some(crate::params::SCOPE_BY_TAG),
            Target::LimitsFile => Some(logical::LIMITS_FILE_SET),
            _ => None,
        }
    }

    /// The condition block a grant on the target carries, if any.
    pub fn condition(self) -> Option<Value> {
        match self {
            Target::KitState => Some(json!({
                "ForAllValues:StringEquals": {"dynamodb:LeadingKeys": [KIT_STATE_SCOPE]}
            })),
            Target::KitLayout => Some(json!({
                "ForAllValues:StringEquals": {"dynamodb:LeadingKeys": [LAYOUT_SCOPE]}
            })),
            _ => None,
        }
    }
}

/// The roles and the users under `ScopeCallerPath`, as IAM ARNs name them
/// (`arn:aws:iam::<account>:role<path><name>`: the path is part of the ARN,
/// <https://docs.aws.amazon.com/IAM/latest/UserGuide/reference_identifiers.html#identifiers-arns>).
pub fn scope_callers(kind: &str) -> Expr {
    Expr::sub(format!(
        "arn:${{AWS::Partition}}:iam::${{AWS::AccountId}}:{kind}${{{}}}*",
        crate::params::SCOPE_CALLER_PATH
    ))
}

/// The limits file's object as an ARN, `arn:<partition>:s3:::<bucket>/<key>`
/// from `LimitsFileUri`'s `s3://<bucket>/<key>` (only meaningful under
/// [`logical::LIMITS_FILE_SET`]).
pub fn limits_file_arn() -> Expr {
    Expr::join(
        "",
        vec![
            "arn:".into(),
            Expr::reference(crate::expr::AWS_PARTITION),
            ":s3:::".into(),
            Expr::select(1, Expr::split("s3://", Expr::reference(crate::params::LIMITS_FILE_URI))),
        ],
    )
}

/// Some of an operation's actions on one target.
#[derive(Debug, Clone, Copy)]
pub struct Grant {
    pub on: Target,
    pub actions: &'static [Action],
}

/// Shorthand for a [`Grant`] in the tables.
pub(super) const fn on(on: Target, actions: &'static [Action]) -> Grant {
    Grant { on, actions }
}

/// Where the operator's policy applies: the names `counterctl` derives
/// from the stack name and the account.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OperatorScope {
    /// `aws`, `aws-cn`, `aws-us-gov`.
    pub partition: String,
    pub region: String,
    pub account: String,
    pub stack_name: String,
    /// The stack's `NamePrefix` (by default the stack name).
    pub name_prefix: String,
    pub artifacts_bucket: String,
}

impl OperatorScope {
    /// The operator scope the tests of the policies read.
    #[cfg(test)]
    pub(crate) fn example() -> Self {
        OperatorScope {
            partition: "aws".to_owned(),
            region: "eu-west-1".to_owned(),
            account: "123456789012".to_owned(),
            stack_name: "hybrid-counter".to_owned(),
            name_prefix: "hc".to_owned(),
            artifacts_bucket: "hybrid-counter-artifacts-123456789012-eu-west-1".to_owned(),
        }
    }

    /// The ARN (pattern) of `target` in this stack and account; `None` for
    /// the limits file, whose object is a parameter's value (any bucket)
    /// that an operator scope does not know: only the drift check's role,
    /// in the template, reads it.
    pub fn arn(&self, target: Target) -> Option<String> {
        let OperatorScope {
            partition: p,
            region: r,
            account: a,
            stack_name,
            name_prefix: prefix,
            artifacts_bucket,
        } = self;
        use Target::*;
        let arn = match target {
            ResourcesTable => format!("arn:{p}:dynamodb:{r}:{a}:table/{prefix}-resources"),
            CountersTable | KitState | KitLayout => format!("arn:{p}:dynamodb:{r}:{a}:table/{prefix}-counters"),
            ResourcesStream => format!("arn:{p}:dynamodb:{r}:{a}:table/{prefix}-resources/stream/*"),
            Dlq1 => format!("arn:{p}:sqs:{r}:{a}:{prefix}-dlq1"),
            Dlq2 => format!("arn:{p}:sqs:{r}:{a}:{prefix}-dlq2"),
            // `<NamePrefix>-failed-batch-<8 hex digits of the stack id>`.
            FailedBatchBucket => format!("arn:{p}:s3:::{prefix}-failed-batch-*"),
            FailedBatchObjects => format!("arn:{p}:s3:::{prefix}-failed-batch-*/*"),
            OwnLogGroup => format!("arn:{p}:logs:{r}:{a}:log-group:/aws/lambda/{prefix}-*"),
            Stack => format!("arn:{p}:cloudformation:{r}:{a}:stack/{stack_name}/*"),
            ArtifactsBucket => format!("arn:{p}:s3:::{artifacts_bucket}"),
            ArtifactsObjects => format!("arn:{p}:s3:::{artifacts_bucket}/*"),
            Functions => format!("arn:{p}:lambda:{r}:{a}:function:{prefix}-*"),
            EventSourceMappings => format!("arn:{p}:lambda:{r}:{a}:event-source-mapping:*"),
            Alarms => format!("arn:{p}:cloudwatch:{r}:{a}:alarm:{prefix}-*"),
            IamRoles => format!("arn:{p}:iam::{a}:role/*"),
            IamUsers => format!("arn:{p}:iam::{a}:user/*"),
            Everything => "*".to_owned(),
            LimitsFile => return None,
        };
        Some(arn)
    }
}
