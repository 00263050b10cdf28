//! `policy operator|caller|service-role`: the IAM policies of the people
//! and programs around a stack, generated from the stack model
//! (`stack::access`, `stack::service_role`), so the policies the docs
//! (docs/api.md, docs/operations.md, localstack/README.md, CI) tell users to
//! attach are the ones the tests check. Nothing is read or sent; the JSON
//! is printed as is, also with `--output json`.

use stack::access::OperatorScope;
use stack::boundary::boundary_policy;
use stack::policies::{caller_policy, limits_plan_policy, operator_policy, operator_policy_with_service_role};
use stack::service_role::{service_role_policy, service_role_trust_policy};

use crate::commands::deploy::package;
use crate::commands::docs::Generated;
use crate::config::{OperatorPolicyOptions, PolicyKind, ServiceRolePart};
use crate::error::Result;

/// Where the policy applies: the options, the artifacts bucket deploy
/// would use by default.
pub fn operator_scope(stack_name: &str, options: &OperatorPolicyOptions) -> Result<OperatorScope> {
    let artifacts_bucket = match &options.artifacts_bucket {
        Some(bucket) => bucket.clone(),
        None => package::bucket_name(stack_name, &options.account, &options.region)?,
    };
    Ok(OperatorScope {
        partition: options.partition.clone(),
        region: options.region.clone(),
        account: options.account.clone(),
        stack_name: stack_name.to_owned(),
        name_prefix: options.name_prefix.clone(),
        artifacts_bucket,
    })
}

/// The policy document `options` asks for, pretty-printed JSON.
pub fn operator(stack_name: &str, options: &OperatorPolicyOptions) -> Result<Generated> {
    let scope = operator_scope(stack_name, options)?;
    let policy = match (options.kind, &options.service_role_arn) {
        (PolicyKind::Operator, None) => operator_policy(&scope),
        (PolicyKind::Operator, Some(role)) => operator_policy_with_service_role(&scope, role),
        (PolicyKind::Caller, _) => caller_policy(&scope),
        (PolicyKind::LimitsPlan, _) => limits_plan_policy(&scope),
        (PolicyKind::ServiceRole(ServiceRolePart::Permissions), _) => service_role_policy(&scope),
        (PolicyKind::ServiceRole(ServiceRolePart::Trust), _) => service_role_trust_policy(),
        (PolicyKind::ServiceRole(ServiceRolePart::Boundary), _) => boundary_policy(&scope),
    };
    Ok(Generated {
        what: match options.kind {
            PolicyKind::Operator => "policy operator",
            PolicyKind::Caller => "policy caller",
            PolicyKind::LimitsPlan => "policy limits-plan",
            PolicyKind::ServiceRole(_) => "policy service-role",
        }
        .to_owned(),
        text: format!("{policy:#}\n"),
    })
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;
    use crate::Config;
    use crate::cli::Cli;
    use crate::config::CommandConfig;

    fn config(args: &[&str]) -> crate::Result<Config> {
        let cli = Cli::try_parse_from(std::iter::once("counterctl").chain(args.iter().copied())).unwrap();
        Config::from_cli(cli, &|_| None)
    }

    #[test]
    fn the_printed_policy_is_the_stack_models_for_the_deploys_names() {
        let config = config(&[
            "--target",
            "aws",
            "--region",
            "eu-west-1",
            "--stack-name",
            "orders-counter",
            "policy",
            "operator",
            "--account",
            "123456789012",
        ])
        .unwrap();
        let CommandConfig::OperatorPolicy(options) = &config.command else {
            panic!("{:?}", config.command)
        };
        let printed: serde_json::Value =
            serde_json::from_str(&operator(&config.stack_name, options).unwrap().text).unwrap();
        let expected = operator_policy(&OperatorScope {
            partition: "aws".to_owned(),
            region: "eu-west-1".to_owned(),
            account: "123456789012".to_owned(),
            stack_name: "orders-counter".to_owned(),
            // A new stack's NamePrefix is its name.
            name_prefix: "orders-counter".to_owned(),
            // The bucket deploy creates.
            artifacts_bucket: package::bucket_name("orders-counter", "123456789012", "eu-west-1").unwrap(),
        });
        assert_eq!(printed, expected);
    }

    fn printed(args: &[&str]) -> crate::Result<serde_json::Value> {
        let mut all = vec![
            "--target",
            "aws",
            "--region",
            "eu-west-1",
            "--stack-name",
            "orders-counter",
            "policy",
        ];
        all.extend_from_slice(args);
        let config = config(&all)?;
        let CommandConfig::OperatorPolicy(options) = &config.command else {
            panic!("{:?}", config.command)
        };
        Ok(serde_json::from_str(&operator(&config.stack_name, options)?.text).unwrap())
    }

    fn scope() -> OperatorScope {
        OperatorScope {
            partition: "aws".to_owned(),
            region: "eu-west-1".to_owned(),
            account: "123456789012".to_owned(),
            stack_name: "orders-counter".to_owned(),
            name_prefix: "orders-counter".to_owned(),
            artifacts_bucket: package::bucket_name("orders-counter", "123456789012", "eu-west-1").unwrap(),
        }
    }

    #[test]
    fn policy_caller_limits_plan_and_service_role_print_the_stack_models_policies() {
        let caller = printed(&["caller", "--account", "123456789012"]).unwrap();
        assert_eq!(caller, caller_policy(&scope()));
        let plan = printed(&["limits-plan", "--account", "123456789012"]).unwrap();
        assert_eq!(plan, limits_plan_policy(&scope()));
        let role = printed(&["service-role", "--account", "123456789012"]).unwrap();
        assert_eq!(role, service_role_policy(&scope()));
        let trust = printed(&["service-role", "--account", "123456789012", "--trust"]).unwrap();
        assert_eq!(trust, service_role_trust_policy());
    }

    #[test]
    fn policy_service_role_prints_the_boundary_and_refuses_a_stack_name_too_long_for_it() {
        let boundary = printed(&["service-role", "--account", "123456789012", "--boundary"]).unwrap();
        assert_eq!(boundary, boundary_policy(&scope()));
        let long = "a".repeat(stack::service_role::max_stack_name_with_service_role() + 1);
        let err = config(&[
            "--target",
            "aws",
            "--region",
            "eu-west-1",
            "--stack-name",
            &long,
            "policy",
            "service-role",
            "--account",
            "123456789012",
        ])
        .unwrap_err();
        assert!(
            matches!(err, crate::Error::StackNameTooLongForServiceRole { .. }),
            "{err}"
        );
        assert_eq!(err.exit_code(), crate::exit::USAGE);
    }

    #[test]
    fn with_a_service_role_the_operator_policy_passes_only_that_role() {
        let arn = "arn:aws:iam::123456789012:role/orders-cfn";
        let policy = printed(&["operator", "--account", "123456789012", "--service-role-arn", arn]).unwrap();
        assert_eq!(policy, operator_policy_with_service_role(&scope(), arn));
        // Another account's role, or a service role on another policy, is a usage error.
        for args in [
            vec![
                "operator",
                "--account",
                "123456789012",
                "--service-role-arn",
                "arn:aws:iam::999999999999:role/x",
            ],
            vec!["operator", "--account", "123456789012", "--service-role-arn", "*"],
            vec!["caller", "--account", "123456789012", "--service-role-arn", arn],
            vec!["limits-plan", "--account", "123456789012", "--service-role-arn", arn],
        ] {
            let err = printed(&args).unwrap_err();
            assert_eq!(err.exit_code(), crate::exit::USAGE, "{args:?}: {err}");
        }
    }

    #[test]
    fn a_bad_account_or_no_region_is_a_usage_error() {
        let err = config(&[
            "--target",
            "aws",
            "--region",
            "eu-west-1",
            "policy",
            "operator",
            "--account",
            "12345",
        ])
        .unwrap_err();
        assert_eq!(err.exit_code(), crate::exit::USAGE, "{err}");
        let err = config(&["--target", "aws", "policy", "operator", "--account", "123456789012"]);
        // AWS_REGION may be set in the environment running the tests.
        if std::env::var_os("AWS_REGION").is_none() {
            assert!(matches!(err, Err(crate::Error::NoRegion)), "{err:?}");
        }
    }
}
