//! Which scopes a caller may act on (stack parameter `ScopeAuthorization`).
//!
//! The example API is single-trust by default (`none`): the function URL's
//! `AWS_IAM` auth decides who may call it at all, and every such caller
//! may act on every scope. With `principal-tag`, the caller's IAM principal
//! must carry the tag [`SCOPE_PREFIX_TAG`], and the scope must start with
//! its value; anything else is `403 ScopeForbidden`.
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

use lambda_http::RequestExt;

use lambda_http::Request;

/// The environment variable carrying the stack parameter.
pub use hybrid_counter::config::ENV_SCOPE_AUTHORIZATION;

/// The IAM tag whose value must prefix every scope the caller acts on.
pub const SCOPE_PREFIX_TAG: &str = "hck-scope-prefix";

/// The stack parameter's values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ScopeAuthorization {
    /// Single trust: any caller the function URL lets in, any scope.
    #[default]
    None,
    /// The caller's [`SCOPE_PREFIX_TAG`] must prefix the scope.
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
        let mut parts = arn.splitn(6, ':');
        let (_arn, _partition, service, _region, account, resource) = (
            parts.next()?,
            parts.next()?,
            parts.next()?,
            parts.next()?,
            parts.next()?,
            parts.next()?,
        );
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
    /// Whether the caller of `request` may act on `scope`: always with
    /// `none`; with `principal-tag` only if its tag prefixes the scope.
    /// A refusal is the reason, for the caller (`ScopeForbidden`).
    pub async fn check(&self, request: &Request, scope: &str) -> Result<(), String> {
        if self.mode == ScopeAuthorization::None {
            return Ok(());
        }
        let forbidden = |reason: String| reason;
        let context = request.request_context_ref();
        let iam = context.and_then(|c| c.authorizer()).and_then(|a| a.iam.as_ref());
        let Some(arn) = iam.and_then(|iam| iam.user_arn.as_deref()) else {
            return Err(forbidden("the request carries no IAM caller".to_owned()));
        };
        let principal = Principal::from_arn(arn)
            .ok_or_else(|| forbidden(format!("{arn} is neither an IAM role session nor an IAM user")))?;
        let own_account = match context {
            Some(lambda_http::request::RequestContext::ApiGatewayV2(c)) => c.account_id.as_deref(),
            _ => None,
        };
        if own_account != Some(principal.account()) {
            return Err(forbidden(format!(
                "{arn} belongs to another account than the function's; its tags cannot be read"
            )));
        }
        let prefix = self.tags.tag(&principal, SCOPE_PREFIX_TAG).await.map_err(|err| {
            tracing::warn!(caller = arn, error = %err, "cannot read the caller's tags");
            forbidden(format!("the tags of {arn} cannot be read"))
        })?;
        match prefix {
            None => Err(forbidden(format!("{arn} has no {SCOPE_PREFIX_TAG} tag"))),
            Some(prefix) if prefix.is_empty() || !scope.starts_with(&prefix) => Err(forbidden(format!(
                "scope {scope:?} does not start with {prefix:?}, the {SCOPE_PREFIX_TAG} tag of {arn}"
            ))),
            Some(_) => Ok(()),
        }
    }
}
