//! What the stack lifecycle commands (`plan`, `deploy`, `destroy`) are
//! given: the `--param` overrides, checked against the template's own
//! parameter list and constraints, the handler zips' directory and bucket,
//! and what `destroy` may delete.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use stack::expr::Literal;
use stack::template::{ParameterType, Template};

use crate::cli::StackArgs;
use crate::error::{Error, Result};

/// Template parameters counterctl fills in itself from the packaged zips.
pub const MANAGED_PARAMS: [&str; 6] = [
    stack::params::ARTIFACTS_BUCKET,
    stack::params::EMULATOR_ROLE_ASSUMER,
    stack::params::STREAM_COUNTER_CODE_KEY,
    stack::params::DLQ_REPROCESSOR_CODE_KEY,
    stack::params::API_CODE_KEY,
    stack::params::DRIFT_CHECK_CODE_KEY,
];

/// What a plan or deploy puts into the stack.
#[derive(Debug, Clone, Default)]
pub struct StackInputs {
    /// Validated `--param` overrides.
    pub overrides: BTreeMap<String, String>,
    /// Validated `--tag` stack tags.
    pub tags: BTreeMap<String, String>,
    pub artifacts_dir: Option<PathBuf>,
    pub artifacts_bucket: Option<String>,
    /// `--role-arn`: the CloudFormation service role, checked against the
    /// caller's account before the change set is created.
    pub role_arn: Option<String>,
}

/// What the operator asked `destroy` for.
#[derive(Debug, Clone, Copy)]
pub struct DestroyOptions {
    pub delete_data: bool,
    pub yes: bool,
    pub timeout: Duration,
}

pub(super) fn stack_inputs(template: &Template, args: StackArgs, stack_name: &str) -> Result<StackInputs> {
    let artifacts_bucket = args
        .artifacts_bucket
        .map(|b| validate_bucket_name(&b).map(|()| b))
        .transpose()?;
    let role_arn = args
        .role_arn
        .map(|arn| {
            // The account is checked once known (deploy reads it from STS).
            let account = arn.split(':').nth(4).unwrap_or_default().to_owned();
            let well_formed = account.len() == 12 && account.chars().all(|c| c.is_ascii_digit());
            if well_formed {
                validate_role_arn(&arn, &account)
            } else {
                Err(Error::RoleArn {
                    arn,
                    account: "<12 digits>".to_owned(),
                })
            }
        })
        .transpose()?;
    let mut overrides = parse_overrides(template, &args.params)?;
    if let Some(role) = &role_arn {
        fits_service_role(stack_name)?;
        with_boundary(&mut overrides, role, stack_name)?;
    }
    Ok(StackInputs {
        role_arn,
        overrides,
        tags: parse_tags(&args.tags)?,
        artifacts_dir: args.artifacts_dir,
        artifacts_bucket,
    })
}

/// CloudFormation's limit of tags on a stack.
pub const MAX_TAGS: usize = 50;
/// The longest tag key, characters.
pub const TAG_KEY_MAX: usize = 128;
/// The longest tag value, characters.
pub const TAG_VALUE_MAX: usize = 256;

/// Parses `--tag Key=Value` stack tags with CloudFormation's rules: a key
/// of 1-128 characters not starting with `aws:` (reserved), a value of
/// 1-256, both of Unicode letters, digits, spaces and `_ . : / = + - @`,
/// each key once, at most 50 tags. The value may contain `=`.
pub fn parse_tags(raw: &[String]) -> Result<BTreeMap<String, String>> {
    let allowed = |c: char| c.is_alphanumeric() || c == ' ' || "_.:/=+-@".contains(c);
    let mut tags = BTreeMap::new();
    for entry in raw {
        let bad = |reason: String| Error::Tag {
            raw: entry.clone(),
            reason,
        };
        let Some((key, value)) = entry.split_once('=') else {
            return Err(bad("not of the form Key=Value".to_owned()));
        };
        for (what, text, max) in [("key", key, TAG_KEY_MAX), ("value", value, TAG_VALUE_MAX)] {
            let length = text.chars().count();
            if !(1..=max).contains(&length) {
                return Err(bad(format!("the {what} is {length} characters; use 1 to {max}")));
            }
            if let Some(c) = text.chars().find(|c| !allowed(*c)) {
                return Err(bad(format!(
                    "the {what} contains {c:?}; use letters, digits, spaces and _ . : / = + - @"
                )));
            }
        }
        if key.to_ascii_lowercase().starts_with("aws:") {
            return Err(bad("keys starting with aws: are reserved for AWS".to_owned()));
        }
        if tags.insert(key.to_owned(), value.to_owned()).is_some() {
            return Err(Error::DuplicateTag { key: key.to_owned() });
        }
    }
    if tags.len() > MAX_TAGS {
        return Err(Error::InvalidArgument(format!(
            "{} tags given; a stack takes at most {MAX_TAGS}",
            tags.len()
        )));
    }
    Ok(tags)
}

/// S3's rules for general purpose bucket names (the subset that matters
/// for names made of a stack name, an account and a region).
pub fn validate_bucket_name(name: &str) -> Result<()> {
    let reason = if !(3..=63).contains(&name.len()) {
        Some(format!("{} characters, S3 allows 3 to 63", name.len()))
    } else if !name
        .chars()
        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '.')
    {
        Some("only lowercase letters, digits, hyphens and dots are allowed".to_owned())
    } else if !name.starts_with(|c: char| c.is_ascii_alphanumeric())
        || !name.ends_with(|c: char| c.is_ascii_alphanumeric())
    {
        Some("it must start and end with a letter or digit".to_owned())
    } else if name.contains("..") {
        Some("it must not contain two adjacent dots".to_owned())
    } else {
        None
    };
    match reason {
        Some(reason) => Err(Error::BucketName {
            name: name.to_owned(),
            reason,
        }),
        None => Ok(()),
    }
}

/// Parses and checks `--param Key=Value` overrides against `template`:
/// the key must be one of its parameters and not one counterctl manages, and
/// the value must meet the parameter's type, bounds and allowed values
/// (CloudFormation checks patterns itself, before it changes anything).
pub fn parse_overrides(template: &Template, raw: &[String]) -> Result<BTreeMap<String, String>> {
    let mut overrides = BTreeMap::new();
    for entry in raw {
        let Some((key, value)) = entry.split_once('=') else {
            return Err(Error::ParamSyntax { raw: entry.clone() });
        };
        let key = key.trim();
        if key.is_empty() {
            return Err(Error::ParamSyntax { raw: entry.clone() });
        }
        let Some(parameter) = template.parameters.get(key) else {
            let known: Vec<&str> = stack::params::ALL
                .iter()
                .copied()
                .filter(|p| !MANAGED_PARAMS.contains(p))
                .collect();
            return Err(Error::UnknownParam {
                key: key.to_owned(),
                known: known.join(", "),
            });
        };
        if MANAGED_PARAMS.contains(&key) {
            return Err(Error::ManagedParam { key: key.to_owned() });
        }
        let bad = |reason: String| Error::ParamValue {
            key: key.to_owned(),
            value: value.to_owned(),
            reason,
        };
        if parameter.kind == ParameterType::Number {
            let number: i64 = value
                .trim()
                .parse()
                .map_err(|_| bad("expected an integer".to_owned()))?;
            if let Some(min) = parameter.min_value.filter(|min| number < *min) {
                return Err(bad(format!("must be at least {min}")));
            }
            if let Some(max) = parameter.max_value.filter(|max| number > *max) {
                return Err(bad(format!("must be at most {max}")));
            }
        } else {
            let length = value.chars().count();
            if let Some(min) = parameter.min_length.filter(|min| length < *min as usize) {
                return Err(bad(format!("must be at least {min} characters")));
            }
            if let Some(max) = parameter.max_length.filter(|max| length > *max as usize) {
                return Err(bad(format!("must be at most {max} characters")));
            }
        }
        if !parameter.allowed_values.is_empty() && !parameter.allowed_values.iter().any(|v| v == value) {
            return Err(bad(format!("allowed values: {}", parameter.allowed_values.join(", "))));
        }
        if overrides.insert(key.to_owned(), value.to_owned()).is_some() {
            return Err(Error::DuplicateParam { key: key.to_owned() });
        }
    }
    Ok(overrides)
}

/// A template parameter's default as the string CloudFormation stores.
pub fn default_value(template: &Template, key: &str) -> Option<String> {
    template
        .parameters
        .get(key)
        .and_then(|p| p.default.as_ref())
        .map(|literal| match literal {
            Literal::String(s) => s.clone(),
            Literal::Integer(i) => i.to_string(),
            Literal::Boolean(b) => b.to_string(),
        })
}

/// Refuses a stack name too long for a CloudFormation service role: its
/// grants name the functions' roles `<stack>-<logical id>-*`, which
/// CloudFormation only generates whole up to
/// [`stack::service_role::max_stack_name_with_service_role`] characters.
pub fn fits_service_role(stack_name: &str) -> Result<()> {
    let max = stack::service_role::max_stack_name_with_service_role();
    let len = stack_name.chars().count();
    if len > max {
        return Err(Error::StackNameTooLongForServiceRole {
            name: stack_name.to_owned(),
            len,
            max,
        });
    }
    Ok(())
}

/// With a service role the roles' boundary is required: fills in the
/// conventional `hck-boundary-<stack>` of the role's account and partition
/// when not given, refuses an empty one.
fn with_boundary(overrides: &mut BTreeMap<String, String>, role_arn: &str, stack_name: &str) -> Result<()> {
    let key = stack::params::ROLE_PERMISSIONS_BOUNDARY_ARN;
    let mut fields = role_arn.split(':');
    let partition = fields.nth(1).unwrap_or("aws");
    let account = fields.nth(2).unwrap_or_default();
    let expected = format!(
        "arn:{partition}:iam::{account}:policy/{}",
        stack::boundary::boundary_name(stack_name)
    );
    match overrides.get(key).map(|v| v.trim()) {
        None => {
            overrides.insert(key.to_owned(), expected);
            Ok(())
        }
        Some("") => Err(Error::NoBoundaryWithRoleArn { param: key, expected }),
        Some(_) => Ok(()),
    }
}

/// A CloudFormation service role of `account`: `arn:<partition>:iam::<account>:role/<path/name>`.
pub fn validate_role_arn(arn: &str, account: &str) -> Result<String> {
    let arn = arn.trim();
    let valid = arn
        .split_once(":iam::")
        .and_then(|(partition, rest)| {
            let partition = partition.strip_prefix("arn:")?;
            let (owner, role) = rest.split_once(":role/")?;
            Some(
                matches!(partition, "aws" | "aws-cn" | "aws-us-gov")
                    && owner == account
                    && !role.is_empty()
                    && !role.ends_with('/'),
            )
        })
        .unwrap_or(false);
    if valid {
        Ok(arn.to_owned())
    } else {
        Err(Error::RoleArn {
            arn: arn.to_owned(),
            account: account.to_owned(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn overrides(raw: &[&str]) -> Result<BTreeMap<String, String>> {
        let raw: Vec<String> = raw.iter().map(|s| (*s).to_owned()).collect();
        parse_overrides(&stack::template(), &raw)
    }

    #[test]
    fn the_parameters_counterctl_sets_are_those_the_configuration_reference_calls_so() {
        let template = stack::template();
        let documented: std::collections::BTreeSet<&str> = template
            .parameters
            .iter()
            .filter(|(_, p)| {
                p.effect
                    .as_ref()
                    .is_some_and(|e| e.live_change == stack::template::LiveChange::Managed)
            })
            .map(|(name, _)| name.as_str())
            .collect();
        assert_eq!(documented, MANAGED_PARAMS.into_iter().collect());
    }

    #[test]
    fn overrides_parse_and_validate_against_the_template() {
        let parsed = overrides(&["StreamBatchSize=50", "LambdaArchitecture=x86_64"]).unwrap();
        assert_eq!(parsed["StreamBatchSize"], "50");
        assert_eq!(parsed["LambdaArchitecture"], "x86_64");
    }

    #[test]
    fn an_unknown_param_key_lists_the_known_ones() {
        let err = overrides(&["BatchSize=5"]).unwrap_err();
        let message = err.to_string();
        assert!(message.starts_with("unknown parameter \"BatchSize\""), "{message}");
        assert!(message.contains("StreamBatchSize"), "{message}");
        assert!(
            !message.contains("ArtifactsBucket"),
            "managed parameters are not offered: {message}"
        );
        assert_eq!(err.exit_code(), crate::exit::USAGE);
    }

    #[test]
    fn param_syntax_errors_are_clear() {
        for raw in ["StreamBatchSize", "=5"] {
            let err = overrides(&[raw]).unwrap_err();
            assert!(matches!(err, Error::ParamSyntax { .. }), "{raw}: {err}");
            assert!(err.to_string().contains("Key=Value"), "{err}");
        }
    }

    #[test]
    fn managed_and_duplicate_params_are_refused() {
        let err = overrides(&["ApiCodeKey=x.zip"]).unwrap_err();
        assert!(matches!(err, Error::ManagedParam { .. }), "{err}");
        let err = overrides(&["StreamBatchSize=5", "StreamBatchSize=6"]).unwrap_err();
        assert!(matches!(err, Error::DuplicateParam { .. }), "{err}");
    }

    #[test]
    fn param_values_are_checked_against_type_bounds_and_allowed_values() {
        let cases = [
            ("StreamBatchSize=many", "expected an integer"),
            ("StreamBatchSize=0", "must be at least 1"),
            ("StreamBatchSize=10001", "must be at most 10000"),
            ("LambdaArchitecture=sparc", "allowed values: arm64, x86_64"),
            ("NamePrefix=", "must be at least 1 characters"),
        ];
        for (raw, expected) in cases {
            let err = overrides(&[raw]).unwrap_err();
            assert!(matches!(err, Error::ParamValue { .. }), "{raw}: {err}");
            assert!(err.to_string().contains(expected), "{raw}: {err}");
        }
    }

    #[test]
    fn defaults_render_as_cloudformation_strings() {
        let template = stack::template();
        assert_eq!(default_value(&template, "StreamBatchSize").as_deref(), Some("100"));
        assert_eq!(default_value(&template, "LambdaArchitecture").as_deref(), Some("arm64"));
        assert_eq!(default_value(&template, "ArtifactsBucket"), None);
    }

    #[test]
    fn tags_follow_cloudformation_s_rules_and_a_bad_one_says_why() {
        let tags = |raw: &[&str]| parse_tags(&raw.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>());
        let ok = tags(&["team=payments", "cost-center=cc:42/a=b", "Ünïcode key=é @ +"]).unwrap();
        assert_eq!(ok["team"], "payments");
        assert_eq!(ok["cost-center"], "cc:42/a=b", "the value may hold '='");
        assert_eq!(ok.len(), 3);
        let long_key = format!("{}=v", "k".repeat(129));
        let long_value = format!("k={}", "v".repeat(257));
        for (raw, reason) in [
            ("team", "not of the form Key=Value"),
            ("=v", "the key is 0 characters; use 1 to 128"),
            ("k=", "the value is 0 characters; use 1 to 256"),
            (long_key.as_str(), "the key is 129 characters; use 1 to 128"),
            (long_value.as_str(), "the value is 257 characters; use 1 to 256"),
            ("team=a;b", "the value contains ';'"),
            ("t*am=a", "the key contains '*'"),
            ("aws:owner=me", "reserved for AWS"),
            ("AWS:owner=me", "reserved for AWS"),
        ] {
            let err = tags(&[raw]).unwrap_err();
            assert!(matches!(err, Error::Tag { .. }), "{raw}: {err}");
            assert!(err.to_string().contains(reason), "{raw}: {err}");
            assert_eq!(err.exit_code(), crate::exit::USAGE);
        }
        assert!(matches!(tags(&["a=1", "a=2"]), Err(Error::DuplicateTag { .. })));
        let many: Vec<String> = (0..=MAX_TAGS).map(|n| format!("k{n}=v")).collect();
        assert!(parse_tags(&many).is_err());
    }
}
