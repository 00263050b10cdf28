//! `counterctl status --limits FILE`: the overrides compared with the
//! limits file, as `status` reports it. An override changed outside the
//! file (a `limit set`), or a scope under a prefix entry that has no
//! override yet (created after the last apply), is an attention item.
//! The plan without the usage reads: one Scan; the comparison itself is
//! the core's ([`LimitsDrift`]), the scheduled drift check's too.

use std::path::Path;

pub use hybrid_counter::limits::drift::LimitsDrift;

use super::plan;
use super::table::Limits;
use crate::commands::Context;
use hybrid_counter::limits::file::LimitsFile;

/// Compares the table with `file`; a failed read is reported, not raised,
/// so the rest of `status` still prints.
pub async fn check(ctx: &Context<'_>, path: &Path, file: &LimitsFile) -> LimitsDrift {
    let name = path.display().to_string();
    let planned = async {
        let limits = Limits::open(ctx).await?;
        plan::read(&limits, file).await
    };
    match planned.await {
        Ok(plan) => LimitsDrift::of(&name, &plan.changes, &plan.default_limit),
        Err(e) => LimitsDrift::failed(&name, e.to_string()),
    }
}
