//! Which scopes a caller may act on (stack parameter `ScopeAuthorization`).
//!
//! The example API is single-trust by default (`none`): the function URL's
//! `AWS_IAM` auth decides who may call it at all, and every such caller
//! may act on every scope. With `principal-tag`, the caller's IAM principal
//! must carry the tag [`SCOPE_PREFIX_TAG`], and the scope must be within
//! its value ([`scope_within`]: the tag `acme` covers `acme` and `acme/...`,
//! never `acme2` or `acme-evil`); anything else is `403 ScopeForbidden`.
//!
//! The caller's ARN comes from the event, which Lambda writes only for a
//! request through the function URL; a direct `Invoke` can carry any event.
//! So the documented caller policy (`docs/api.md`, the stack crate's
//! `policies::caller_policy`) allows `lambda:InvokeFunction` only under
//! `lambda:InvokedViaFunctionUrl` (Lambda developer guide, "Control access
//! to Lambda function URLs":
//! <https://docs.aws.amazon.com/lambda/latest/dg/urls-auth.html>): a caller
//! cannot reach the function except through the URL, where the ARN is its own.
//!
//! The function URL event does not carry principal tags: its
//! `requestContext.authorizer.iam` holds `accessKey`, `accountId`,
//! `callerId`, `cognitoIdentity`, `principalOrgId`, `userArn` and `userId`
//! only (Lambda developer guide, "Invoking Lambda function URLs", request
//! payload: <https://docs.aws.amazon.com/lambda/latest/dg/urls-invocation.html#urls-payloads>).
//! So the function reads the tag from IAM with the caller's ARN:
//! `iam:ListRoleTags` for an assumed role
//! (`arn:aws:sts::<account>:assumed-role/<role>/<session>`), `iam:ListUserTags`
//! for an IAM user (`arn:aws:iam::<account>:user/<path>/<name>`). Hence:
//! * only principals of the function's own account are authorized (IAM
//!   reads another account's tags only with a role there);
//! * a role's tag is read, not a session tag given at `AssumeRole` (those
//!   exist only in the session's credentials); federated users, the root
//!   user and other principals are refused;
//! * each request makes one IAM read, which IAM rate-limits account-wide:
//!   an API with heavy traffic should put the scope check in an authorizer
//!   that caches it (API Gateway) instead.

use std::future::Future;

use lambda_http::request::RequestContext;

/// The environment variable carrying the stack parameter.
pub use hybrid_counter::config::ENV_SCOPE_AUTHORIZATION;

/// The IAM tag whose value bounds every scope the caller acts on.
pub const SCOPE_PREFIX_TAG: &str = "hck-scope-prefix";

/// The separator that ends a tag's scope boundary.
pub const SCOPE_SEPARATOR: char = '/';

/// Whether `scope` is within the caller's tag value `tag`: the scope is the
/// tag itself or starts with the tag and [`SCOPE_SEPARATOR`] (a tag that
/// already ends with it counts once). A bare prefix is not enough: `acme`
/// covers `acme/eu` but not `acme2`. An empty tag covers nothing.
pub fn scope_within(tag: &str, scope: &str) -> bool {
    let tag = tag.strip_suffix(SCOPE_SEPARATOR).unwrap_or(tag);
    if tag.is_empty() {
        return false;
    }
    scope == tag
        || scope
            .strip_prefix(tag)
            .is_some_and(|rest| rest.starts_with(SCOPE_SEPARATOR))
}

/// The stack parameter's values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ScopeAuthorization {
    /// Single trust: any caller the function URL lets in, any scope.
    #[default]
    None,
    /// The scope must be within the caller's [`SCOPE_PREFIX_TAG`] ([`scope_within`]).
    PrincipalTag,
}

impl ScopeAuthorization {
    /// From the environment as `lookup` reads it; unset is `none`.
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> Result<Self, String> {
        match lookup(ENV_SCOPE_AUTHORIZATION).as_deref().map(str::trim) {
            None | Some("" | "none") => Ok(Self::None),
            Some("principal-tag") => Ok(Self::PrincipalTag),
            Some(other) => Err(format!(
                "environment variable {ENV_SCOPE_AUTHORIZATION} must be none or principal-tag, got {other:?}"
            )),
        }
    }
}

/// The IAM principal that signed the request (function URL with `AWS_IAM`).
pub(crate) fn caller_arn(context: Option<&RequestContext>) -> Option<&str> {
    context?.authorizer()?.iam.as_ref()?.user_arn.as_deref()
}

/// The IAM principal a caller's ARN names, whose tags can be read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Principal {
    Role { account: String, name: String },
    User { account: String, name: String },
}

impl Principal {
    /// Parses the `userArn` of the function URL's IAM authorizer; `None`
    /// for a principal without readable tags (root, federated user, ...).
    pub fn from_arn(arn: &str) -> Option<Self> {
        let [_arn, _partition, service, _region, account, resource] = arn.splitn(6, ':').collect::<Vec<_>>()[..] else {
            return None;
        };
        let account = account.to_owned();
        match service {
            "sts" => {
                let mut segments = resource.strip_prefix("assumed-role/")?.split('/');
                let name = segments.next().filter(|n| !n.is_empty())?.to_owned();
                Some(Self::Role { account, name })
            }
            "iam" => {
                let name = resource.strip_prefix("user/")?.rsplit('/').next()?;
                (!name.is_empty()).then(|| Self::User {
                    account,
                    name: name.to_owned(),
                })
            }
            _ => None,
        }
    }

    pub fn account(&self) -> &str {
        match self {
            Self::Role { account, .. } | Self::User { account, .. } => account,
        }
    }
}

/// Where a principal's tags are read: IAM on AWS, a fake in tests.
pub trait PrincipalTags {
    /// The value of the tag `key` of `principal`, `None` if it has none.
    fn tag(&self, principal: &Principal, key: &str) -> impl Future<Output = Result<Option<String>, String>> + Send;
}

/// No tag source: what [`crate::handle`] uses, with `none`.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoTags;

impl PrincipalTags for NoTags {
    async fn tag(&self, _: &Principal, _: &str) -> Result<Option<String>, String> {
        Err("no source of principal tags is configured".to_owned())
    }
}

/// The tags IAM holds for the caller's role or user.
#[derive(Debug, Clone)]
pub struct IamTags {
    pub iam: aws_sdk_iam::Client,
}

impl PrincipalTags for IamTags {
    async fn tag(&self, principal: &Principal, key: &str) -> Result<Option<String>, String> {
        let describe = |e: &dyn std::fmt::Display| e.to_string();
        // A principal has at most 50 tags; one page (up to 100) holds them.
        let tags = match principal {
            Principal::Role { name, .. } => {
                self.iam
                    .list_role_tags()
                    .role_name(name)
                    .send()
                    .await
                    .map_err(|e| describe(&aws_sdk_iam::error::DisplayErrorContext(e)))?
                    .tags
            }
            Principal::User { name, .. } => {
                self.iam
                    .list_user_tags()
                    .user_name(name)
                    .send()
                    .await
                    .map_err(|e| describe(&aws_sdk_iam::error::DisplayErrorContext(e)))?
                    .tags
            }
        };
        Ok(tags.into_iter().find(|t| t.key == key).map(|t| t.value))
    }
}

/// The scope check of one request.
#[derive(Debug, Clone, Default)]
pub struct Authorizer<T> {
    pub mode: ScopeAuthorization,
    pub tags: T,
}

impl<T: PrincipalTags> Authorizer<T> {
    /// Whether the caller may act on `scope`, `context` being its request's
    /// (`lambda_http` puts it in the request's extensions): always with
    /// `none`; with `principal-tag` only if the scope is within its tag.
    /// A refusal is the reason, for the caller (`ScopeForbidden`).
    pub async fn check(&self, context: Option<&RequestContext>, scope: &str) -> Result<(), String> {
        if self.mode == ScopeAuthorization::None {
            return Ok(());
        }
        let Some(arn) = caller_arn(context) else {
            return Err("the request carries no IAM caller".to_owned());
        };
        let principal =
            Principal::from_arn(arn).ok_or_else(|| format!("{arn} is neither an IAM role session nor an IAM user"))?;
        let own_account = match context {
            Some(RequestContext::ApiGatewayV2(c)) => c.account_id.as_deref(),
            _ => None,
        };
        if own_account != Some(principal.account()) {
            return Err(format!(
                "{arn} belongs to another account than the function's; its tags cannot be read"
            ));
        }
        let prefix = self.tags.tag(&principal, SCOPE_PREFIX_TAG).await.map_err(|err| {
            tracing::warn!(caller = arn, error = %err, "cannot read the caller's tags");
            format!("the tags of {arn} cannot be read")
        })?;
        match prefix {
            None => Err(format!("{arn} has no {SCOPE_PREFIX_TAG} tag")),
            Some(prefix) if !scope_within(&prefix, scope) => Err(format!(
                "scope {scope:?} is neither {prefix:?} nor under \"{prefix}{SCOPE_SEPARATOR}\", the {SCOPE_PREFIX_TAG} tag of {arn}"
            )),
            Some(_) => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use lambda_http::http::{Method, StatusCode};
    use lambda_http::{Request, RequestExt};

    use super::*;
    use crate::test_support::{NOW, counter, forbidden_message, function_url_request, payload, principal_tag};
    use crate::{handle, handle_with};

    #[test]
    fn a_scope_that_only_shares_a_prefix_with_the_tag_is_outside_it() {
        for scope in ["acme2", "acme-evil", "acmeacme", "acm", "acme\\x", "", "/acme"] {
            assert!(!scope_within("acme", scope), "{scope:?}");
        }
    }

    #[test]
    fn the_tag_covers_itself_and_what_lies_under_its_separator() {
        for scope in ["acme", "acme/", "acme/eu", "acme/eu/west"] {
            assert!(scope_within("acme", scope), "{scope:?}");
            assert!(scope_within("acme/", scope), "{scope:?}");
        }
        assert!(!scope_within("acme/", "acme2"));
    }

    /// Every principal carries the tag `acme`.
    struct Acme;

    impl PrincipalTags for Acme {
        async fn tag(&self, _: &Principal, _: &str) -> Result<Option<String>, String> {
            Ok(Some("acme".to_owned()))
        }
    }

    fn from_caller(arn: &str) -> Request {
        let mut event: serde_json::Value =
            serde_json::from_str(include_str!("../fixtures/function-url-create.json")).unwrap();
        event["requestContext"]["authorizer"]["iam"]["userArn"] = serde_json::json!(arn);
        lambda_http::request::from_str(&event.to_string()).unwrap()
    }

    #[tokio::test]
    async fn a_caller_tagged_acme_is_refused_acme2_and_allowed_acme_slash() {
        let authorizer = Authorizer {
            mode: ScopeAuthorization::PrincipalTag,
            tags: Acme,
        };
        let account = {
            let event: serde_json::Value =
                serde_json::from_str(include_str!("../fixtures/function-url-create.json")).unwrap();
            event["requestContext"]["accountId"].as_str().unwrap().to_owned()
        };
        let request = from_caller(&format!("arn:aws:sts::{account}:assumed-role/tenant/session"));
        for scope in ["acme2", "acme-evil"] {
            let refused = authorizer
                .check(request.request_context_ref(), scope)
                .await
                .unwrap_err();
            assert!(refused.contains("neither"), "{refused}");
        }
        for scope in ["acme", "acme/eu"] {
            authorizer.check(request.request_context_ref(), scope).await.unwrap();
        }
    }

    #[test]
    fn an_empty_tag_covers_no_scope() {
        for tag in ["", "/"] {
            for scope in ["", "/", "acme", "/acme"] {
                assert!(!scope_within(tag, scope), "{tag:?} {scope:?}");
            }
        }
    }

    #[tokio::test]
    async fn with_principal_tag_a_caller_acts_only_on_scopes_within_its_tag() {
        let role = "arn:aws:sts::123456789012:assumed-role/tenant-acct/session-1";
        let authorizer = principal_tag(&[("tenant-acct", "acct"), ("widget-service", "other")]);
        let c = counter(5);
        let created = handle_with(
            &c,
            &authorizer,
            function_url_request(role, "/scopes/acct%2F42/items/w1"),
            NOW,
        )
        .await;
        assert_eq!(created.status(), StatusCode::CREATED);

        let refused = handle_with(
            &c,
            &authorizer,
            function_url_request(role, "/scopes/bank/items/w1"),
            NOW,
        )
        .await;
        let message = forbidden_message(refused);
        assert!(
            message.contains(r#"scope "bank" is neither "acct" nor under "acct/", the hck-scope-prefix tag of"#),
            "{message}"
        );
        // The same holds for an IAM user, and for reads.
        let user = "arn:aws:iam::123456789012:user/widget-service";
        let mut usage = function_url_request(user, "/scopes/acct%2042/usage");
        *usage.method_mut() = Method::GET;
        let message = forbidden_message(handle_with(&c, &authorizer, usage, NOW).await);
        assert!(message.contains(r#"is neither "other""#), "{message}");
        assert!(
            payload(c.store(), "bank", "w1").is_none(),
            "a refused request writes nothing"
        );
    }

    #[tokio::test]
    async fn with_principal_tag_untagged_foreign_and_anonymous_callers_are_refused() {
        let authorizer = principal_tag(&[("tenant-acct", "acct")]);
        let c = counter(5);
        let cases = [
            (
                "arn:aws:sts::123456789012:assumed-role/untagged/s",
                "has no hck-scope-prefix tag",
            ),
            (
                "arn:aws:sts::999999999999:assumed-role/tenant-acct/s",
                "belongs to another account",
            ),
            (
                "arn:aws:iam::123456789012:root",
                "neither an IAM role session nor an IAM user",
            ),
        ];
        for (arn, why) in cases {
            let response = handle_with(&c, &authorizer, function_url_request(arn, "/scopes/acct/items/w1"), NOW).await;
            let message = forbidden_message(response);
            assert!(message.contains(why), "{arn}: {message}");
        }
        // Without ScopeAuthorization (`none`), the same untagged caller may.
        let response = handle(
            &c,
            function_url_request(
                "arn:aws:sts::123456789012:assumed-role/untagged/s",
                "/scopes/acct/items/w1",
            ),
            NOW,
        )
        .await;
        assert_eq!(response.status(), StatusCode::CREATED);
    }

    #[test]
    fn caller_arns_name_the_principal_whose_tags_are_read() {
        assert_eq!(
            Principal::from_arn("arn:aws:sts::123456789012:assumed-role/app-role/i-0abc"),
            Some(Principal::Role {
                account: "123456789012".into(),
                name: "app-role".into()
            })
        );
        assert_eq!(
            Principal::from_arn("arn:aws:iam::123456789012:user/division/team/alice"),
            Some(Principal::User {
                account: "123456789012".into(),
                name: "alice".into()
            })
        );
        for other in [
            "arn:aws:iam::123456789012:root",
            "arn:aws:sts::123456789012:federated-user/bob",
            "arn:aws:sts::123456789012:assumed-role/",
            "not an arn",
        ] {
            assert_eq!(Principal::from_arn(other), None, "{other}");
        }
        let lookup = |value: &'static str| move |_: &str| Some(value.to_owned());
        assert_eq!(ScopeAuthorization::from_lookup(|_| None), Ok(ScopeAuthorization::None));
        assert_eq!(
            ScopeAuthorization::from_lookup(lookup("principal-tag")),
            Ok(ScopeAuthorization::PrincipalTag)
        );
        assert!(ScopeAuthorization::from_lookup(lookup("tags")).is_err());
    }
}
