//! The scope-key layout in `status`: the stack's `ScopeKeyShards` and
//! `ResourceKeySpread` against the layout record its functions check at
//! start ([`hybrid_counter::layout`]), so a start they refuse, or one they
//! make unchecked, shows here rather than only in their logs and alarms.

use std::fmt;

use hybrid_counter::scope_keys::ScopeKeys;
use serde::Serialize;

use crate::commands::Context;
use crate::commands::deploy::cfn::StackInfo;
use crate::commands::deploy::scope_keys::{recorded, scope_keys_param};
use crate::error::Result;

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LayoutStatus {
    /// The layout the stack's parameters give (`None`: they do not parse).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub parameters: Option<Layout>,
    /// The layout record (`None`: none yet, or it could not be read).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub recorded: Option<Layout>,
    /// What needs an operator, with the remedy.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub problem: Option<String>,
    /// No record: the functions start unchecked (a stack deployed without
    /// counterctl, or before the record existed). Not an attention item.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Layout {
    pub scope_key_shards: u32,
    pub resource_key_spread: u32,
}

impl From<ScopeKeys> for Layout {
    fn from(keys: ScopeKeys) -> Self {
        Self {
            scope_key_shards: keys.count(),
            resource_key_spread: keys.spread(),
        }
    }
}

impl fmt::Display for Layout {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "ScopeKeyShards={} ResourceKeySpread={}",
            self.scope_key_shards, self.resource_key_spread
        )
    }
}

/// Reads `stack`'s record; `None` for a stack without a counters table.
pub async fn read(ctx: &Context<'_>, stack: &StackInfo) -> Option<LayoutStatus> {
    stack.outputs.get(stack::outputs::COUNTERS_TABLE)?;
    Some(judge(scope_keys_param(&stack.parameters), recorded(ctx, stack).await))
}

/// What the parameters and the record (or the failure to read it) mean.
pub fn judge(parameters: Result<ScopeKeys>, recorded: Result<Option<ScopeKeys>>) -> LayoutStatus {
    let unrecorded = "no layout record: the functions start unchecked, so a layout changed outside counterctl \
                      would hide and miscount items; counterctl deploy records it";
    let (problem, note) = match (&parameters, &recorded) {
        (Err(e), Ok(None)) => (Some(e.to_string()), Some(unrecorded.to_owned())),
        (Err(e), _) | (_, Err(e)) => (Some(e.to_string()), None),
        (Ok(given), Ok(Some(record))) if given == record => (None, None),
        (Ok(given), Ok(Some(record))) => (
            Some(format!(
                "the parameters give {} but the items are written under {} (the layout record): new function \
                 instances refuse to start; set them back with counterctl deploy --param ScopeKeyShards={} \
                 --param ResourceKeySpread={}",
                Layout::from(*given),
                Layout::from(*record),
                record.count(),
                record.spread()
            )),
            None,
        ),
        (Ok(_), Ok(None)) => (None, Some(unrecorded.to_owned())),
    };
    LayoutStatus {
        parameters: parameters.ok().map(Layout::from),
        recorded: recorded.ok().flatten().map(Layout::from),
        problem,
        note,
    }
}

impl LayoutStatus {
    pub fn attention(&self) -> Option<String> {
        self.problem.as_ref().map(|p| format!("scope keys: {p}"))
    }
}

impl fmt::Display for LayoutStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let given = self.parameters.map_or_else(|| "-".to_owned(), |l| l.to_string());
        match (&self.recorded, &self.problem, &self.note) {
            (Some(_), None, _) => writeln!(f, "Scope keys: {given} (as recorded)"),
            (Some(record), Some(_), _) => writeln!(f, "Scope keys: {given}, recorded {record}: see below"),
            (None, None, Some(note)) => writeln!(f, "Scope keys: {given}; {note}"),
            (None, Some(_), Some(note)) => writeln!(f, "Scope keys: {given}; {note}; and see below"),
            (None, _, None) => writeln!(f, "Scope keys: {given}; the record was not read: see below"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::Error;

    fn keys(count: u32, spread: u32) -> ScopeKeys {
        ScopeKeys::new(count).unwrap().with_spread(spread).unwrap()
    }

    #[test]
    fn parameters_as_recorded_need_nothing_and_say_so() {
        let status = judge(Ok(keys(2, 4)), Ok(Some(keys(2, 4))));
        assert_eq!(status.attention(), None);
        assert_eq!(
            status.to_string(),
            "Scope keys: ScopeKeyShards=2 ResourceKeySpread=4 (as recorded)\n"
        );
    }

    #[test]
    fn a_layout_the_functions_refuse_names_the_deploy_that_sets_it_back() {
        let status = judge(Ok(keys(2, 1)), Ok(Some(keys(2, 4))));
        let item = status.attention().expect("the functions refuse to start");
        assert!(
            item.contains("refuse to start")
                && item.contains("--param ScopeKeyShards=2 --param ResourceKeySpread=4")
                && item.contains("give ScopeKeyShards=2 ResourceKeySpread=1"),
            "{item}"
        );
    }

    #[test]
    fn an_unreadable_record_needs_an_operator_and_no_record_is_only_said() {
        // No record (a stack deployed without counterctl): said, not an
        // attention item, so such a stack can be "All well".
        let status = judge(Ok(keys(1, 1)), Ok(None));
        assert_eq!(status.attention(), None);
        assert!(status.to_string().contains("start unchecked"), "{status}");
        let unreadable = Error::Aws {
            action: "reading the layout record",
            message: "AccessDeniedException".into(),
        };
        let status = judge(Ok(keys(1, 1)), Err(unreadable));
        let item = status.attention().unwrap();
        assert!(item.contains("AccessDenied"), "{item}");
        assert!(status.to_string().contains("not read"), "{status}");
        assert_eq!(status.parameters, Some(Layout::from(keys(1, 1))));
    }
}
