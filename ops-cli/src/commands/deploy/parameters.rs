//! The parameters a change set is sent with, decided from the template,
//! the `--param` overrides, the values counterctl manages itself and the
//! deployed stack's own values. Pure: no I/O.

use std::collections::BTreeMap;

use aws_sdk_cloudformation::types::Parameter;
use stack::template::Template;

use crate::config;
use crate::error::{Error, Result};

/// The parameters every item's key depends on.
const LAYOUT: [&str; 2] = [stack::params::SCOPE_KEY_SHARDS, stack::params::RESOURCE_KEY_SPREAD];

/// The parameters to send and the values they end up with.
#[derive(Debug, Clone, PartialEq)]
pub struct ParameterPlan {
    pub sdk: Vec<Parameter>,
    /// Every template parameter's value after the deploy (defaults included).
    pub effective: BTreeMap<String, String>,
}

/// Decides each template parameter's value: counterctl's own (bucket and
/// code keys) and `--param` overrides first; on an existing stack, the
/// deployed value (`UsePreviousValue`, as `aws cloudformation deploy` does,
/// so a redeploy never silently resets a tuned setting), except the
/// scope-key layout, sent as the value the guard checked so that an update
/// made outside counterctl after the stack was read cannot ride along; on
/// a new stack, `NamePrefix` from the stack name, so two stacks never
/// share physical names; otherwise the template default.
pub fn plan_parameters(
    template: &Template,
    overrides: &BTreeMap<String, String>,
    managed: &BTreeMap<String, String>,
    previous: Option<&BTreeMap<String, String>>,
    stack_name: &str,
) -> Result<ParameterPlan> {
    let mut sdk = Vec::new();
    let mut effective = BTreeMap::new();
    for key in template.parameters.keys() {
        let given = managed.get(key).or_else(|| overrides.get(key));
        if let Some(value) = given {
            sdk.push(Parameter::builder().parameter_key(key).parameter_value(value).build());
            effective.insert(key.clone(), value.clone());
        } else if let Some(value) = previous.and_then(|p| p.get(key)) {
            let parameter = Parameter::builder().parameter_key(key);
            let parameter = if LAYOUT.contains(&key.as_str()) {
                parameter.parameter_value(value)
            } else {
                parameter.use_previous_value(true)
            };
            sdk.push(parameter.build());
            effective.insert(key.clone(), value.clone());
        } else if key == stack::params::NAME_PREFIX && previous.is_none() {
            let prefix = name_prefix(stack_name)?;
            sdk.push(Parameter::builder().parameter_key(key).parameter_value(&prefix).build());
            effective.insert(key.clone(), prefix);
        } else if let Some(default) = config::default_value(template, key) {
            effective.insert(key.clone(), default);
        }
    }
    Ok(ParameterPlan { sdk, effective })
}

/// A stack deployed when `OperatorPrincipalArn` could be an account root
/// keeps it on every deploy (`UsePreviousValue`), which the template's
/// pattern now refuses: unless `--param` replaces it, refuses with the
/// value to pass instead.
pub fn check_previous_operator(
    previous: &BTreeMap<String, String>,
    overrides: &BTreeMap<String, String>,
) -> Result<()> {
    let key = stack::params::OPERATOR_PRINCIPAL_ARN;
    match previous.get(key) {
        Some(arn) if arn.ends_with(":root") && !overrides.contains_key(key) => Err(Error::RootOperatorPrincipal {
            arn: arn.clone(),
            account: arn.split(':').nth(4).unwrap_or("<account>").to_owned(),
        }),
        _ => Ok(()),
    }
}

/// The upgrade that turns callers into 403s: a `principal-tag` stack
/// deployed before `ScopeCallerPath` existed gets its default
/// (`/hck-callers/`), and callers at another path are refused from then on.
pub fn scope_path_upgrade_warning(
    previous: Option<&BTreeMap<String, String>>,
    overrides: &BTreeMap<String, String>,
) -> Option<String> {
    let previous = previous?;
    let path = stack::params::SCOPE_CALLER_PATH;
    let by_tag = overrides
        .get(stack::params::SCOPE_AUTHORIZATION)
        .or_else(|| previous.get(stack::params::SCOPE_AUTHORIZATION))
        .is_some_and(|mode| mode == "principal-tag");
    (by_tag && !previous.contains_key(path) && !overrides.contains_key(path)).then(|| {
        format!(
            "breaking change: {path} takes its default {} on this stack, so the api refuses (403) \
             every caller whose role or user is not under that IAM path; move the callers there, or keep them \
             where they are with --param {path}=/ (docs/api.md)",
            stack::kit::DEFAULT_SCOPE_CALLER_PATH
        )
    })
}

/// Who besides Lambda may assume the functions' roles: on the embedded
/// emulator, the deploying account (its root, which the emulator's `test`
/// identity is), so the local runner can run each function with its own
/// role; on every other target, nobody (the parameter is empty).
pub fn emulator_role_assumer(target: crate::cli::Target, account: &str) -> String {
    match target {
        crate::cli::Target::Local if !account.is_empty() => format!("arn:aws:iam::{account}:root"),
        _ => String::new(),
    }
}

/// The stack name as a `NamePrefix`: lowercase letters, digits and inner
/// hyphens, at most 40 characters (the template's constraint).
fn name_prefix(stack_name: &str) -> Result<String> {
    let prefix = stack_name.to_ascii_lowercase();
    let valid = (1..=40).contains(&prefix.len())
        && prefix.starts_with(|c: char| c.is_ascii_lowercase())
        && !prefix.ends_with('-')
        && prefix
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-');
    if valid {
        Ok(prefix)
    } else {
        Err(Error::ParamValue {
            key: stack::params::NAME_PREFIX.to_owned(),
            value: prefix,
            reason: "the stack name does not fit the resource name prefix (at most 40 characters, not ending \
                     in a hyphen); pass --param NamePrefix=<prefix>"
                .to_owned(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_embedded_emulator_lets_the_deploying_account_assume_the_functions_roles() {
        use crate::cli::Target;
        assert_eq!(
            emulator_role_assumer(Target::Local, "123456789012"),
            "arn:aws:iam::123456789012:root"
        );
        assert_eq!(emulator_role_assumer(Target::Aws, "123456789012"), "");
        assert_eq!(emulator_role_assumer(Target::Localstack, "000000000000"), "");
    }

    fn map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect()
    }

    fn sent(plan: &ParameterPlan, key: &str) -> Option<(Option<String>, Option<bool>)> {
        plan.sdk
            .iter()
            .find(|p| p.parameter_key() == Some(key))
            .map(|p| (p.parameter_value().map(str::to_owned), p.use_previous_value()))
    }

    #[test]
    fn a_new_stack_gets_overrides_managed_values_defaults_and_its_name_as_prefix() {
        let template = stack::template();
        let plan = plan_parameters(
            &template,
            &map(&[("StreamBatchSize", "25")]),
            &map(&[("ArtifactsBucket", "b"), ("ApiCodeKey", "api/x.zip")]),
            None,
            "Team-A",
        )
        .unwrap();
        assert_eq!(sent(&plan, "StreamBatchSize"), Some((Some("25".into()), None)));
        assert_eq!(sent(&plan, "ArtifactsBucket"), Some((Some("b".into()), None)));
        assert_eq!(sent(&plan, "NamePrefix"), Some((Some("team-a".into()), None)));
        // Defaults are left to CloudFormation but known for the comparison.
        assert_eq!(sent(&plan, "DefaultLimit"), None);
        assert_eq!(plan.effective["DefaultLimit"], "100");
        assert_eq!(plan.effective["StreamBatchSize"], "25");
    }

    #[test]
    fn an_existing_stack_keeps_its_deployed_values_unless_overridden() {
        let template = stack::template();
        let previous = map(&[("StreamBatchSize", "25"), ("NamePrefix", "old"), ("DefaultLimit", "7")]);
        let plan = plan_parameters(
            &template,
            &map(&[("DefaultLimit", "9")]),
            &map(&[("ArtifactsBucket", "b")]),
            Some(&previous),
            "hybrid-counter",
        )
        .unwrap();
        assert_eq!(sent(&plan, "StreamBatchSize"), Some((None, Some(true))));
        assert_eq!(sent(&plan, "NamePrefix"), Some((None, Some(true))));
        assert_eq!(sent(&plan, "DefaultLimit"), Some((Some("9".into()), None)));
        assert_eq!(plan.effective["StreamBatchSize"], "25");
        assert_eq!(plan.effective["NamePrefix"], "old");
        // A parameter the deployed stack did not have yet takes its default.
        assert_eq!(sent(&plan, "EcShardCount"), None);
        assert_eq!(plan.effective["EcShardCount"], "1");
    }

    #[test]
    fn the_scope_key_layout_is_sent_as_the_value_read_never_as_the_previous_one() {
        let previous = map(&[
            ("ScopeKeyShards", "4"),
            ("ResourceKeySpread", "8"),
            ("StreamBatchSize", "25"),
        ]);
        let plan = plan_parameters(&stack::template(), &map(&[]), &map(&[]), Some(&previous), "hc").unwrap();
        // An update made outside counterctl after the read cannot ride
        // along with UsePreviousValue.
        assert_eq!(sent(&plan, "ScopeKeyShards"), Some((Some("4".into()), None)));
        assert_eq!(sent(&plan, "ResourceKeySpread"), Some((Some("8".into()), None)));
        assert_eq!(sent(&plan, "StreamBatchSize"), Some((None, Some(true))));
    }

    #[test]
    fn a_deployed_root_operator_principal_is_refused_with_what_to_pass_instead() {
        let previous = map(&[("OperatorPrincipalArn", "arn:aws:iam::123456789012:root")]);
        let err = check_previous_operator(&previous, &map(&[])).unwrap_err();
        let message = err.to_string();
        assert!(
            message.contains("--param OperatorPrincipalArn=arn:aws:iam::123456789012:role/"),
            "{message}"
        );
        assert!(message.contains("--param OperatorPrincipalArn= "), "{message}");
        assert_eq!(err.exit_code(), crate::exit::USAGE);
        let replaced = map(&[("OperatorPrincipalArn", "arn:aws:iam::123456789012:role/ops")]);
        assert!(check_previous_operator(&previous, &replaced).is_ok());
        assert!(check_previous_operator(&replaced, &map(&[])).is_ok());
    }

    #[test]
    fn a_principal_tag_stack_from_before_the_caller_path_is_warned_of_the_403s() {
        let old = map(&[("ScopeAuthorization", "principal-tag")]);
        let warning = scope_path_upgrade_warning(Some(&old), &map(&[])).unwrap();
        assert!(warning.contains("--param ScopeCallerPath=/"), "{warning}");
        assert!(scope_path_upgrade_warning(Some(&old), &map(&[("ScopeCallerPath", "/")])).is_none());
        let current = map(&[
            ("ScopeAuthorization", "principal-tag"),
            ("ScopeCallerPath", "/hck-callers/"),
        ]);
        assert!(scope_path_upgrade_warning(Some(&current), &map(&[])).is_none());
        assert!(scope_path_upgrade_warning(Some(&map(&[("ScopeAuthorization", "none")])), &map(&[])).is_none());
        assert!(scope_path_upgrade_warning(None, &map(&[])).is_none());
    }

    #[test]
    fn a_stack_name_that_cannot_be_a_prefix_asks_for_one() {
        let err = plan_parameters(&stack::template(), &map(&[]), &map(&[]), None, &"a".repeat(41)).unwrap_err();
        assert!(err.to_string().contains("--param NamePrefix="), "{err}");
        let given = plan_parameters(
            &stack::template(),
            &map(&[("NamePrefix", "short")]),
            &map(&[]),
            None,
            &"a".repeat(41),
        )
        .unwrap();
        assert_eq!(given.effective["NamePrefix"], "short");
    }
}
