//! The layout record: the scope keys (`ScopeKeyShards`, `ResourceKeySpread`)
//! a stack's items are written under, recorded once in the counters table
//! by the first function to start, and checked by every function at start:
//! one started with another layout (a parameter changed outside counterctl,
//! or a release that does not pass it) refuses to read or write items
//! instead of hiding or miscounting them.

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

/// Checks that `configured` is the layout the stack's items are written
/// under, recording it first when nothing is recorded (a new stack, or one
/// that predates the record: its first function to start records the
/// layout it runs with). A mismatch is [`Error::LayoutMismatch`]; a store
/// error is `Unavailable` (the caller starts again later).
pub async fn confirm<S: LayoutStore>(store: &S, configured: ScopeKeys, now: EpochMillis) -> Result<(), Error> {
    let unavailable = |e: StoreError| Error::Unavailable(format!("reading the layout record: {e}"));
    let recorded = match store.layout_record().await.map_err(unavailable)? {
        Some(recorded) => recorded,
        None => match store.record_layout(configured, now).await {
            Ok(()) => return Ok(()),
            // Another function recorded first, or our answer was lost.
            Err(StoreError::ConditionFailed) | Err(StoreError::Unavailable(_)) | Err(StoreError::Transient(_)) => store
                .layout_record()
                .await
                .map_err(unavailable)?
                .ok_or_else(|| Error::Unavailable("the layout record could not be written".into()))?,
            Err(e) => return Err(unavailable(e)),
        },
    };
    if recorded == configured {
        Ok(())
    } else {
        Err(Error::LayoutMismatch {
            recorded_keys: recorded.count(),
            recorded_spread: recorded.spread(),
            keys: configured.count(),
            spread: configured.spread(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memory::MemoryStore;

    fn layout(keys: u32, spread: u32) -> ScopeKeys {
        ScopeKeys::new(keys).unwrap().with_spread(spread).unwrap()
    }

    #[tokio::test]
    async fn the_first_start_records_its_layout_and_later_starts_must_match_it() {
        let store = MemoryStore::new();
        confirm(&store, layout(4, 8), 1).await.unwrap();
        assert_eq!(store.layout_record().await.unwrap(), Some(layout(4, 8)));
        confirm(&store, layout(4, 8), 2).await.unwrap();
        for other in [layout(4, 1), layout(1, 1), layout(8, 8), layout(4, 16)] {
            let err = confirm(&store, other, 3).await.unwrap_err();
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

    #[tokio::test]
    async fn a_stack_that_predates_the_record_records_the_layout_it_runs_with() {
        let store = MemoryStore::new();
        confirm(&store, ScopeKeys::default(), 1).await.unwrap();
        assert!(confirm(&store, layout(2, 1), 2).await.is_err());
    }
}
