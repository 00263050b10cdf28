//! What a component needs, derived from [`CALLS`], [`PLATFORM_USES`] and,
//! for a function, its own log group: each action on each target with the
//! template condition it holds under, which the roles are checked against
//! and the policies rendered from.

use crate::resources::iam::Action::{self, *};

use super::calls::CALLS;
use super::component::Component;
use super::platform::PLATFORM_USES;
use super::target::Target;

/// One needed `(action, target)`, and what needs it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Need {
    pub action: Action,
    pub on: Target,
    /// The template condition it holds under (`None`: always).
    pub when: Option<&'static str>,
}

/// Why every function's role writes its own log group.
const LOGS_DOC: &str = "Lambda sends the function's logs with its execution role \
                        (https://docs.aws.amazon.com/lambda/latest/dg/monitoring-cloudwatchlogs.html)";

/// What `component` needs: its calls' grants, its platform uses and, for a
/// function, its own log group, each with the condition it holds under,
/// and who needs it.
pub fn needs(component: Component) -> Vec<(Need, String)> {
    let mut out = Vec::new();
    for call in CALLS.iter().filter(|c| c.by.contains(&component)) {
        for grant in call.grants {
            for &action in grant.actions {
                let need = Need {
                    action,
                    on: grant.on,
                    when: grant.on.only_if(),
                };
                out.push((need, format!("{} ({})", call.operation, call.why)));
            }
        }
    }
    for platform in PLATFORM_USES.iter().filter(|p| p.by == component) {
        for &action in platform.grant.actions {
            let need = Need {
                action,
                on: platform.grant.on,
                when: platform.when.or(platform.grant.on.only_if()),
            };
            out.push((need, platform.why.to_owned()));
        }
    }
    if component.role_and_log_group().is_some() {
        for action in [LogsCreateLogStream, LogsPutLogEvents] {
            let need = Need {
                action,
                on: Target::OwnLogGroup,
                when: None,
            };
            out.push((need, LOGS_DOC.to_owned()));
        }
    }
    out
}

/// The actions the request and stream roles are explicitly denied on the
/// kit's own state partition: every item action of the counters table,
/// whatever their allows say.
pub const KIT_STATE_DENIED: &[Action] = &[
    DynamoDbGetItem,
    DynamoDbBatchGetItem,
    DynamoDbPutItem,
    DynamoDbUpdateItem,
    DynamoDbDeleteItem,
    DynamoDbConditionCheckItem,
    DynamoDbQuery,
    DynamoDbBatchWriteItem,
    DynamoDbPartiQlInsert,
    DynamoDbPartiQlUpdate,
    DynamoDbPartiQlDelete,
];

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::*;
    use crate::access::{OperatorScope, Target::*};
    use crate::logical;
    use crate::policies::operator_policy;
    use hybrid_counter::keys::KIT_STATE_SCOPE;

    fn scope() -> OperatorScope {
        OperatorScope::example()
    }

    #[test]
    fn the_operator_writes_the_drift_state_only_under_the_kit_state_key() {
        let policy = operator_policy(&scope());
        let kit_state = policy["Statement"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["Sid"] == "KitState")
            .expect("a KitState statement");
        assert_eq!(
            kit_state["Condition"],
            json!({"ForAllValues:StringEquals": {"dynamodb:LeadingKeys": [KIT_STATE_SCOPE]}})
        );
        assert_eq!(kit_state["Action"], json!(["dynamodb:GetItem", "dynamodb:PutItem"]));
    }

    #[test]
    fn a_redrive_move_task_needs_the_receive_side_on_dlq2_and_send_on_dlq1() {
        let needs: Vec<Need> = needs(Component::Operator).into_iter().map(|(n, _)| n).collect();
        for action in [
            SqsStartMessageMoveTask,
            SqsReceiveMessage,
            SqsDeleteMessage,
            SqsGetQueueAttributes,
        ] {
            assert!(needs.iter().any(|n| n.action == action && n.on == Dlq2), "{action:?}");
        }
        assert!(needs.iter().any(|n| n.action == SqsSendMessage && n.on == Dlq1));
    }

    /// `limits plan|apply|export`: the Scan of every override, the
    /// conditioned writes and their read-back, each changed scope's usage
    /// (a Query of its counters), on the counters table; the drift check's
    /// limits file is never the operator's.
    #[test]
    fn the_operator_policy_covers_the_limits_commands() {
        let policy = operator_policy(&scope());
        let statements = policy["Statement"].as_array().unwrap();
        let counters = statements
            .iter()
            .find(|s| s["Sid"] == "CountersTable")
            .expect("a CountersTable statement");
        assert_eq!(
            counters["Resource"],
            json!(["arn:aws:dynamodb:eu-west-1:123456789012:table/hc-counters"])
        );
        let actions = counters["Action"].as_array().unwrap();
        for action in [
            "dynamodb:Scan",
            "dynamodb:UpdateItem",
            "dynamodb:DeleteItem",
            "dynamodb:GetItem",
            "dynamodb:Query",
        ] {
            assert!(actions.contains(&json!(action)), "{action}: {actions:?}");
        }
        assert!(statements.iter().all(|s| s["Sid"] != "LimitsFile"));
        let drift_check: Vec<Need> = needs(Component::DriftCheck).into_iter().map(|(n, _)| n).collect();
        assert!(
            drift_check
                .iter()
                .any(|n| n.action == S3GetObject && n.on == LimitsFile && n.when == Some(logical::LIMITS_FILE_SET))
        );
    }

    /// The CI plan job's policy reads the stack and the counters table
    /// (and its layout record) and writes nothing.
    #[test]
    fn the_limits_plan_policy_reads_the_stack_and_the_counters_table_only() {
        let policy = crate::policies::limits_plan_policy(&scope());
        let statements: Vec<(String, Value, Value)> = policy["Statement"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| {
                (
                    s["Sid"].as_str().unwrap().to_owned(),
                    s["Action"].clone(),
                    s["Resource"].clone(),
                )
            })
            .collect();
        assert_eq!(
            statements,
            vec![
                (
                    "CountersTable".to_owned(),
                    json!(["dynamodb:Query", "dynamodb:Scan"]),
                    json!(["arn:aws:dynamodb:eu-west-1:123456789012:table/hc-counters"]),
                ),
                (
                    "KitLayout".to_owned(),
                    json!(["dynamodb:GetItem"]),
                    json!(["arn:aws:dynamodb:eu-west-1:123456789012:table/hc-counters"]),
                ),
                (
                    "Stack".to_owned(),
                    json!(["cloudformation:DescribeStacks"]),
                    json!(["arn:aws:cloudformation:eu-west-1:123456789012:stack/hybrid-counter/*"]),
                ),
            ]
        );
    }
}
