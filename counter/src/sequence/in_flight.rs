//! Test double: a [`SequenceStore`] whose sequence claims may be answered 500
//! *before* they apply and then apply later, as a DynamoDB request still in
//! flight after a timeout does. The late claim is the very request that was
//! sent (same number, token and condition), so it lands only if `last_id`
//! still equals its condition and the numbered item is still absent.
//! Everything else goes to the [`MemoryStore`] inside.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::task::JoinHandle;

use crate::error::StoreError;
use crate::ids::Scope;
use crate::memory::MemoryStore;
use crate::store::{SequenceClaim, SequenceEntry, SequenceStore, StoreBase};

pub(super) struct InFlight {
    inner: Arc<MemoryStore>,
    /// Chance, per mille, that a claim is answered 500 and sent on later.
    late_per_mille: u32,
    /// A late claim lands after up to this long (uniform).
    max_delay: Duration,
    rng: Mutex<fastrand::Rng>,
    landing: Mutex<Vec<JoinHandle<()>>>,
    late: AtomicUsize,
}

impl InFlight {
    pub(super) fn new(inner: MemoryStore, seed: u64, late_per_mille: u32, max_delay: Duration) -> Self {
        Self {
            inner: Arc::new(inner),
            late_per_mille,
            max_delay,
            rng: Mutex::new(fastrand::Rng::with_seed(seed)),
            landing: Mutex::new(Vec::new()),
            late: AtomicUsize::new(0),
        }
    }

    pub(super) fn memory(&self) -> &MemoryStore {
        &self.inner
    }

    /// Claims answered 500 and sent on later, so far.
    pub(super) fn late_claims(&self) -> usize {
        self.late.load(Ordering::Relaxed)
    }

    /// Waits until every late claim has landed or failed its condition.
    pub(super) async fn land_all(&self) {
        let handles: Vec<JoinHandle<()>> = self.landing.lock().unwrap().drain(..).collect();
        for handle in handles {
            handle.await.expect("a late claim");
        }
    }

    /// Whether the next claim is late, and by how long.
    fn draw_delay(&self) -> Option<Duration> {
        let mut rng = self.rng.lock().unwrap();
        (rng.u32(0..1000) < self.late_per_mille).then(|| {
            let micros = u64::try_from(self.max_delay.as_micros()).unwrap_or(u64::MAX);
            Duration::from_micros(rng.u64(0..=micros))
        })
    }
}

impl StoreBase for InFlight {}

impl SequenceStore for InFlight {
    fn last_sequence(&self, scope: &Scope) -> impl Future<Output = Result<u64, StoreError>> + Send {
        self.inner.last_sequence(scope)
    }

    async fn claim_sequence(&self, claim: &SequenceClaim) -> Result<(), StoreError> {
        let Some(delay) = self.draw_delay() else {
            return self.inner.claim_sequence(claim).await;
        };
        let (inner, claim) = (self.inner.clone(), claim.clone());
        let landing = tokio::spawn(async move {
            tokio::time::sleep(delay).await;
            // The answer goes nowhere: the caller already saw a 500.
            let _ = inner.claim_sequence(&claim).await;
        });
        self.landing.lock().unwrap().push(landing);
        self.late.fetch_add(1, Ordering::Relaxed);
        Err(StoreError::Unavailable(
            "timed out; the request is still in flight".into(),
        ))
    }

    fn sequence_entry(
        &self,
        scope: &Scope,
        number: u64,
    ) -> impl Future<Output = Result<Option<SequenceEntry>, StoreError>> + Send {
        self.inner.sequence_entry(scope, number)
    }
}
