//! How often a DynamoDB request is sent, in one place: the SDK's retries of
//! a write (its standard ones, or none for a write that must be sent once),
//! the kit's own budget for an operator's one-off write, and for the keys a
//! `BatchGetItem` left unprocessed.

use aws_sdk_dynamodb::config::retry::RetryConfig;

use hybrid_counter::error::StoreError;
use hybrid_counter::retry::{Backoff, Retry};
use hybrid_counter::store::Resend;

/// The retry configuration of a write sent as `resend` says: the SDK's
/// standard retries, or none (one attempt).
pub(crate) fn sent(resend: Resend) -> aws_sdk_dynamodb::config::Builder {
    let builder = aws_sdk_dynamodb::Config::builder();
    match resend {
        Resend::Never => builder.retry_config(RetryConfig::disabled()),
        Resend::BySdk => builder,
    }
}

/// An operator's one-off write (a limit override, a verify's clean-up):
/// retried on throttling and on 5xx answers after the SDK's own retries,
/// up to six attempts with full-jitter waits of up to 2 s. Only writes that
/// are safe to send twice go through it.
pub(crate) const ONE_OFF_WRITE_BACKOFF: Backoff = Backoff {
    base: std::time::Duration::from_millis(100),
    cap: std::time::Duration::from_secs(2),
    max_attempts: 6,
};

/// Whether a one-off write's failure may go away on its own: throttling,
/// a transaction holding the item, or a 5xx / transport failure.
fn one_off_retryable(err: &StoreError) -> bool {
    err.is_transient() || matches!(err, StoreError::Unavailable(_))
}

/// Runs a one-off operator write through the kit's retry helper
/// ([`ONE_OFF_WRITE_BACKOFF`]).
pub(crate) async fn one_off_write<T, F, Fut>(op: F) -> Result<T, StoreError>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, StoreError>>,
{
    Retry::new(ONE_OFF_WRITE_BACKOFF, None).run(op, one_off_retryable).await
}

/// Requests for one chunk of keys before unprocessed keys are an error,
/// and the waits between them (20 ms doubling, up to 1.28 s).
pub(super) const UNPROCESSED_KEYS_BACKOFF: Backoff = Backoff {
    base: std::time::Duration::from_millis(20),
    cap: std::time::Duration::from_millis(1_280),
    max_attempts: 8,
};
