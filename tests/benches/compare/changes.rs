//! Which change a request belongs to: each caller runs a change inside
//! [`as_change`], and [`ChangeHeader`] (an SDK interceptor) names it on
//! every request the change sends, so the fault proxy draws that change's
//! own faults ([`e2e::faults::CHANGE_HEADER`]).

use std::future::Future;

use aws_sdk_dynamodb::config::interceptors::BeforeTransmitInterceptorContextMut;
use aws_sdk_dynamodb::config::{ConfigBag, Intercept, RuntimeComponents};
use aws_sdk_dynamodb::error::BoxError;
use e2e::faults::CHANGE_HEADER;

tokio::task_local! {
    static CHANGE: u64;
}

/// Runs `work` as change `n`: its requests carry the header.
pub async fn as_change<F: Future>(n: u64, work: F) -> F::Output {
    CHANGE.scope(n, work).await
}

#[derive(Debug)]
pub struct ChangeHeader;

impl Intercept for ChangeHeader {
    fn name(&self) -> &'static str {
        "ChangeHeader"
    }

    fn modify_before_transmit(
        &self,
        context: &mut BeforeTransmitInterceptorContextMut<'_>,
        _components: &RuntimeComponents,
        _cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        if let Ok(n) = CHANGE.try_with(|n| *n) {
            context.request_mut().headers_mut().insert(CHANGE_HEADER, n.to_string());
        }
        Ok(())
    }
}
