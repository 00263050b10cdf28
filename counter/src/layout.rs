//! The layout record: the scope keys (`ScopeKeyShards`, `ResourceKeySpread`)
//! a stack's items are written under, recorded once in the counters table
//! by `counterctl deploy`, and checked by every function at start: one
//! started with another layout (a parameter changed outside counterctl)
//! refuses to read or write items instead of hiding or miscounting them.

use std::future::Future;

use crate::error::{Error, StoreError};
use crate::scope_keys::ScopeKeys;
use crate::store::StoreBase;
use crate::time::EpochMillis;

/// Where the layout record is kept.
pub trait LayoutStore: StoreBase {
    /// The recorded layout (strongly consistent), `None` before the first
    /// record.
    fn layout_record(&self) -> impl Future<Output = Result<Option<ScopeKeys>, StoreError>> + Send;

    /// Records `keys` if nothing is recorded yet (`ConditionFailed`
    /// otherwise). A create conditioned on absence: a re-send after a lost
    /// answer fails its condition, and the next read tells.
    fn record_layout(&self, keys: ScopeKeys, now: EpochMillis) -> impl Future<Output = Result<(), StoreError>> + Send;
}

/// What a function does at start: refuses to run under another layout than
/// the recorded one ([`Error::LayoutMismatch`]). It never writes the
/// record: only counterctl does, after its own check of the parameters, so
/// a function started after a change made outside counterctl cannot freeze
/// the wrong layout. No record yet (a stack counterctl has not deployed
/// since the record exists): nothing to compare, it runs.
pub async fn check<S: LayoutStore>(store: &S, configured: ScopeKeys) -> Result<Checked, Error> {
    match store.layout_record().await {
        Ok(Some(recorded)) if recorded != configured => Err(mismatch(recorded, configured)),
        Ok(Some(_)) => Ok(Checked::Matches),
        Ok(None) => Ok(Checked::NotRecorded),
        Err(e) => Err(Error::Unavailable(format!("reading the layout record: {e}"))),
    }
}

/// What [`check`] found when it lets a function run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Checked {
    /// The record holds the configured layout.
    Matches,
    /// Nothing is recorded: nothing to compare (a stack counterctl has not
    /// deployed since the record exists, or whose record failed to write).
    NotRecorded,
}

/// What counterctl does after a deploy: records `configured` when nothing
/// is recorded, else checks it like [`check`]. A lost answer or a
/// concurrent deploy is settled by reading the record again.
pub async fn record<S: LayoutStore>(store: &S, configured: ScopeKeys, now: EpochMillis) -> Result<(), Error> {
    let unavailable = |e: StoreError| Error::Unavailable(format!("the layout record: {e}"));
    let recorded = match store.layout_record().await.map_err(unavailable)? {
        Some(recorded) => recorded,
        None => match store.record_layout(configured, now).await {
            Ok(()) => return Ok(()),
            Err(e @ (StoreError::ConditionFailed | StoreError::Unavailable(_) | StoreError::Transient(_))) => store
                .layout_record()
                .await
                .map_err(unavailable)?
                .ok_or_else(|| Error::Unavailable(format!("the layout record could not be written: {e}")))?,
            Err(e) => return Err(unavailable(e)),
        },
    };
    if recorded == configured {
        Ok(())
    } else {
        Err(mismatch(recorded, configured))
    }
}

fn mismatch(recorded: ScopeKeys, configured: ScopeKeys) -> Error {
    Error::LayoutMismatch {
        recorded_keys: recorded.count(),
        recorded_spread: recorded.spread(),
        keys: configured.count(),
        spread: configured.spread(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memory::MemoryStore;

    fn layout(keys: u32, spread: u32) -> ScopeKeys {
        ScopeKeys::new(keys).unwrap().with_spread(spread).unwrap()
    }

    /// A table whose record is absent and whose writes are refused, as a
    /// role without `PutItem` on it sees it.
    struct RefusedWrites;

    impl crate::store::StoreBase for RefusedWrites {}

    impl LayoutStore for RefusedWrites {
        async fn layout_record(&self) -> Result<Option<ScopeKeys>, StoreError> {
            Ok(None)
        }

        async fn record_layout(&self, _: ScopeKeys, _: EpochMillis) -> Result<(), StoreError> {
            Err(StoreError::Unavailable(
                "AccessDeniedException: not authorized to PutItem".into(),
            ))
        }
    }

    #[tokio::test]
    async fn a_write_that_is_refused_and_left_nothing_keeps_its_reason() {
        let err = record(&RefusedWrites, layout(2, 4), 1).await.unwrap_err();
        let text = err.to_string();
        assert!(
            text.contains("could not be written") && text.contains("AccessDeniedException"),
            "{text}"
        );
    }

    #[tokio::test]
    async fn counterctl_records_the_layout_and_every_start_must_match_it() {
        let store = MemoryStore::new();
        record(&store, layout(4, 8), 1).await.unwrap();
        assert_eq!(store.layout_record().await.unwrap(), Some(layout(4, 8)));
        record(&store, layout(4, 8), 2).await.unwrap();
        assert_eq!(check(&store, layout(4, 8)).await.unwrap(), Checked::Matches);
        for other in [layout(4, 1), layout(1, 1), layout(8, 8), layout(4, 16)] {
            assert!(record(&store, other, 3).await.is_err(), "{other:?}");
            let err = check(&store, other).await.unwrap_err();
            assert!(
                matches!(
                    err,
                    Error::LayoutMismatch {
                        recorded_keys: 4,
                        recorded_spread: 8,
                        ..
                    }
                ),
                "{other:?}: {err}"
            );
            let message = err.to_string();
            assert!(
                message.contains("ScopeKeyShards=4") && message.contains("ResourceKeySpread=8"),
                "{message}"
            );
        }
        assert_eq!(
            store.layout_record().await.unwrap(),
            Some(layout(4, 8)),
            "never overwritten"
        );
    }

    /// Review of the record: a function started after a change made outside
    /// counterctl, on a stack without a record, must not record its layout
    /// (it would freeze the wrong one): it runs unchecked, and the next
    /// counterctl deploy (after its own check) records the layout.
    #[tokio::test]
    async fn a_start_never_writes_the_record() {
        let store = MemoryStore::new();
        assert_eq!(check(&store, layout(4, 1)).await.unwrap(), Checked::NotRecorded);
        assert_eq!(store.layout_record().await.unwrap(), None);
    }

    #[tokio::test]
    async fn a_record_that_cannot_be_read_is_unavailable_not_a_mismatch() {
        let store = MemoryStore::new();
        store.inject(crate::memory::Op::Layout, crate::memory::Fault::Unavailable);
        assert!(matches!(check(&store, layout(1, 1)).await, Err(Error::Unavailable(_))));
    }
}
