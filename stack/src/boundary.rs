//! The permissions boundary of the stack's roles: the template's optional
//! `RolePermissionsBoundaryArn` set on every role it creates, and the
//! boundary policy itself, the union of what the functions need, derived
//! from the access table the roles are generated from ([`crate::access`]).
//! A CloudFormation service role may create roles only with this boundary
//! ([`crate::service_role`]), so a template it deploys cannot grant more
//! (IAM permissions boundaries:
//! <https://docs.aws.amazon.com/IAM/latest/UserGuide/access_policies_boundaries.html>).

use serde_json::Value;

use crate::access::{Component, OperatorScope};
use crate::expr::Expr;
use crate::params;
use crate::template::{LiveChange, Parameter, Template};

/// Template condition: a boundary was given.
pub const BOUNDARY_SET: &str = "RolePermissionsBoundarySet";

/// Empty, or the ARN of a customer managed policy of this account.
pub const BOUNDARY_PATTERN: &str =
    "^$|^arn:aws[a-z-]*:iam::[0-9]{12}:policy/([A-Za-z0-9+=,.@_-]+/)*[A-Za-z0-9+=,.@_-]{1,128}$";

/// The name the kit's docs and `counterctl` give the boundary policy of
/// `stack_name`, created once by an administrator outside the stack.
pub fn boundary_name(stack_name: &str) -> String {
    format!("hck-boundary-{stack_name}")
}

/// The ARN of [`boundary_name`] in `scope`'s account.
pub fn boundary_arn(scope: &OperatorScope) -> String {
    format!(
        "arn:{}:iam::{}:policy/{}",
        scope.partition,
        scope.account,
        boundary_name(&scope.stack_name)
    )
}

/// The parameter and its condition.
pub fn add_parameter(t: &mut Template) {
    t.parameter(
        params::ROLE_PERMISSIONS_BOUNDARY_ARN,
        Parameter::string(
            "ARN of the IAM managed policy set as permissions boundary on every role the stack creates \
             (counterctl policy service-role prints it; create it once as hck-boundary-<stack>). Required with \
             a CloudFormation service role (counterctl deploy --role-arn fills it in), which may create roles \
             only with it. Empty: no boundary.",
        )
        .default_string("")
        .pattern(
            BOUNDARY_PATTERN,
            "empty, or an IAM policy ARN arn:aws:iam::<12 digits>:policy/<name>",
        )
        .effect(
            "PermissionsBoundary of the four functions' roles.",
            LiveChange::Safe,
            "Set in place on each role; the boundary grants everything the functions need, so nothing they \
             do is refused.",
        ),
    );
    t.condition(BOUNDARY_SET, Expr::differs(params::ROLE_PERMISSIONS_BOUNDARY_ARN, ""));
}

/// What every role of the template gets as `PermissionsBoundary`.
pub fn role_boundary() -> Expr {
    Expr::when(
        BOUNDARY_SET,
        Expr::reference(params::ROLE_PERMISSIONS_BOUNDARY_ARN),
        Expr::no_value(),
    )
}

/// The boundary policy: one statement per target, every action any
/// function's calls and platform uses need there, under any
/// parameter values (a boundary only caps; each role grants its own).
pub fn boundary_policy(scope: &OperatorScope) -> Value {
    crate::policies::policy_of(&Component::FUNCTIONS, scope)
}
