//! `AWS::Logs::LogGroup`. Each function gets its own group, created by the
//! stack rather than by Lambda on first invocation, so the stack owns its
//! retention and each role can be scoped to exactly one group.

use serde::Serialize;

use crate::expr::Expr;

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct LogGroup {
    pub log_group_name: Expr,
    pub retention_in_days: u32,
}
