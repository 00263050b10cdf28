//! `impl LayoutStore for MemoryStore`: the layout record, created once.

use super::{MemoryStore, Op};
use crate::error::StoreError;
use crate::layout::LayoutStore;
use crate::scope_keys::ScopeKeys;
use crate::time::EpochMillis;

impl LayoutStore for MemoryStore {
    async fn layout_record(&self) -> Result<Option<ScopeKeys>, StoreError> {
        self.call(Op::Layout, &[], |t, _| Ok(t.layout))
    }

    async fn record_layout(&self, keys: ScopeKeys, _now: EpochMillis) -> Result<(), StoreError> {
        self.call(Op::Layout, &[], |t, _| match t.layout {
            Some(_) => Err(StoreError::ConditionFailed),
            None => {
                t.layout = Some(keys);
                Ok(())
            }
        })
    }
}
