//! The template refuses, before it changes anything, the parameter values
//! that would widen who can reach the stack: an `EmulatorRoleAssumer` on
//! AWS, an `OperatorPrincipalArn` that is an account root, a
//! `ScopeCallerPath` that is not an IAM path. Patterns are checked with
//! the `regex` crate (CloudFormation's `AllowedPattern` is a Java regular
//! expression; these use only the syntax both share); the rule is
//! evaluated with the rule functions it uses (`Fn::Or`, `Fn::Equals`,
//! `Fn::Contains`, `Ref`), as CloudFormation's rule functions define them:
//! <https://docs.aws.amazon.com/AWSCloudFormation/latest/TemplateReference/intrinsic-function-reference-rules.html>.

use std::collections::BTreeMap;

use regex::Regex;
use serde_json::Value;
use stack::{kit, logical, params};

fn pattern(parameter: &str) -> Regex {
    let t = stack::template();
    let pattern = t.parameters[parameter]
        .allowed_pattern
        .as_deref()
        .unwrap_or_else(|| panic!("{parameter} has no AllowedPattern"));
    Regex::new(pattern).unwrap()
}

/// A rule function's value, with `refs` as the parameters and pseudo parameters.
fn evaluate(expr: &Value, refs: &BTreeMap<&str, &str>) -> Value {
    let Some((key, arg)) = expr.as_object().and_then(|m| m.iter().next()) else {
        return expr.clone();
    };
    let boolean = |b: bool| Value::Bool(b);
    match key.as_str() {
        "Ref" => Value::String(refs[arg.as_str().unwrap()].to_owned()),
        "Fn::Or" => boolean(
            arg.as_array()
                .unwrap()
                .iter()
                .any(|c| evaluate(c, refs) == Value::Bool(true)),
        ),
        "Fn::And" => boolean(
            arg.as_array()
                .unwrap()
                .iter()
                .all(|c| evaluate(c, refs) == Value::Bool(true)),
        ),
        "Fn::Not" => boolean(evaluate(&arg[0], refs) == Value::Bool(false)),
        "Fn::Equals" => boolean(evaluate(&arg[0], refs) == evaluate(&arg[1], refs)),
        "Fn::Contains" => {
            let needle = evaluate(&arg[1], refs);
            boolean(arg[0].as_array().unwrap().contains(&needle))
        }
        other => panic!("{other} is not a rule function this test knows"),
    }
}

/// Whether the template's rules let a deploy with `values` into `account` through.
fn rules_pass(account: &str, values: &[(&str, &str)]) -> bool {
    let t = stack::template();
    let rendered = serde_json::to_value(&t).unwrap();
    let mut refs: BTreeMap<&str, &str> = BTreeMap::new();
    let defaults: Vec<(String, String)> = t
        .parameters
        .iter()
        .map(|(name, p)| {
            let default = match &p.default {
                Some(stack::expr::Literal::String(s)) => s.clone(),
                Some(stack::expr::Literal::Integer(i)) => i.to_string(),
                _ => String::new(),
            };
            (name.clone(), default)
        })
        .collect();
    for (name, default) in &defaults {
        refs.insert(name, default);
    }
    refs.insert("AWS::AccountId", account);
    for (name, value) in values {
        refs.insert(name, value);
    }
    rendered["Rules"].as_object().unwrap().values().all(|rule| {
        rule["Assertions"]
            .as_array()
            .unwrap()
            .iter()
            .all(|a| evaluate(&a["Assert"], &refs) == Value::Bool(true))
    })
}

#[test]
fn on_aws_the_template_refuses_any_emulator_role_assumer_but_empty() {
    let aws_account = "111122223333";
    assert!(rules_pass(aws_account, &[(params::EMULATOR_ROLE_ASSUMER, "")]));
    for value in ["arn:aws:iam::111122223333:root", "arn:aws:iam::999999999999:root", "*"] {
        assert!(
            !rules_pass(aws_account, &[(params::EMULATOR_ROLE_ASSUMER, value)]),
            "{value} passes the rules on AWS"
        );
    }
    // The embedded emulator's account still takes what counterctl sets there.
    for account in kit::EMULATOR_ACCOUNTS {
        let root = format!("arn:aws:iam::{account}:root");
        assert!(
            rules_pass(account, &[(params::EMULATOR_ROLE_ASSUMER, &root)]),
            "{account}"
        );
    }
}

#[test]
fn the_emulator_role_assumer_pattern_takes_only_empty_or_an_account_root() {
    let p = pattern(params::EMULATOR_ROLE_ASSUMER);
    for ok in ["", "arn:aws:iam::123456789012:root"] {
        assert!(p.is_match(ok), "{ok:?}");
    }
    for refused in [
        "*",
        "arn:aws:iam::123456789012:role/anything",
        "arn:aws:iam::*:root",
        "123456789012",
        "arn:aws:iam::123456789012:root ",
    ] {
        assert!(!p.is_match(refused), "{refused:?}");
    }
}

#[test]
fn the_operator_principal_is_a_role_or_user_never_an_account_root() {
    let p = pattern(params::OPERATOR_PRINCIPAL_ARN);
    for ok in [
        "",
        "arn:aws:iam::123456789012:role/ops",
        "arn:aws:iam::123456789012:role/team/ops",
        "arn:aws:iam::123456789012:user/alice",
    ] {
        assert!(p.is_match(ok), "{ok:?}");
    }
    for refused in [
        "arn:aws:iam::123456789012:root",
        "arn:aws:iam::123456789012:role/",
        "arn:aws:sts::123456789012:assumed-role/ops/session",
        "*",
    ] {
        assert!(!p.is_match(refused), "{refused:?}");
    }
}

#[test]
fn the_api_reads_only_the_tags_of_principals_under_the_scope_caller_path() {
    let p = pattern(params::SCOPE_CALLER_PATH);
    for ok in ["/", "/hck-callers/", "/a/b.c/"] {
        assert!(p.is_match(ok), "{ok:?}");
    }
    for refused in ["", "hck-callers/", "/hck-callers", "/*/", "//"] {
        assert!(!p.is_match(refused), "{refused:?}");
    }
    let t = stack::template();
    assert_eq!(
        t.parameters[params::SCOPE_CALLER_PATH].default,
        Some(stack::expr::Literal::String(kit::DEFAULT_SCOPE_CALLER_PATH.to_owned()))
    );
    let rendered = serde_json::to_value(&t).unwrap();
    let policies = rendered["Resources"][logical::API_ROLE]["Properties"]["Policies"]
        .as_array()
        .unwrap()
        .clone();
    // A policy under a condition is `Fn::If: [condition, policy, AWS::NoValue]`.
    let unconditioned = |p: &Value| p.get("Fn::If").map_or(p.clone(), |branches| branches[1].clone());
    let resources: Vec<Value> = policies
        .iter()
        .map(unconditioned)
        .flat_map(|p| p["PolicyDocument"]["Statement"].as_array().unwrap().clone())
        .filter(|s| s["Action"].to_string().contains("iam:List"))
        .flat_map(|s| s["Resource"].as_array().unwrap().clone())
        .collect();
    assert_eq!(resources.len(), 2, "{policies:?}");
    for resource in resources {
        let sub = resource["Fn::Sub"].as_str().unwrap_or_default();
        assert!(
            sub.ends_with(":role${ScopeCallerPath}*") || sub.ends_with(":user${ScopeCallerPath}*"),
            "{resource}"
        );
    }
}
