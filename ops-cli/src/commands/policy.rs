//! `policy operator`: the IAM policy the operator or CI role needs to run
//! counterctl against a stack, generated from the stack model's table of
//! every AWS call counterctl makes (`stack::access`), so the policy the
//! docs (localstack/README.md, CI) tell users to attach is the one the tests check. Nothing is read
//! or sent; the JSON is printed as is, also with `--output json`.

use stack::access::{OperatorScope, operator_policy};

use crate::commands::deploy::package;
use crate::commands::docs::Generated;
use crate::config::OperatorPolicyOptions;
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

/// The policy document, pretty-printed JSON.
pub fn operator(stack_name: &str, options: &OperatorPolicyOptions) -> Result<Generated> {
    let policy = operator_policy(&operator_scope(stack_name, options)?);
    Ok(Generated {
        what: "policy operator".to_owned(),
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
