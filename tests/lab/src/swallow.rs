//! The likely real cause of seed 004's lost likes: a handler (a Lambda that
//! must not fail its invocation) sends the like's `ADD` with the SDK's
//! retries and catches whatever error is left, logs it and returns success.
//! On a hot item past its partition's write throughput the error left is a
//! throttle: the like is lost, and only the log knows.

use hybrid_counter::error::StoreError;

use crate::atomic::AtomicCounter;
use crate::strategy::{LabError, Strategy};

/// What the handler did with one like; its invoker is told success either way.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Handled {
    /// The `ADD` was answered 200.
    Liked,
    /// The `ADD` failed after the SDK's retries and the error was caught:
    /// `throttled` when the last answer was a throttle.
    Swallowed { throttled: bool },
}

/// One like as the catching handler sends it: `ADD` of 1 through `add`
/// (which should carry the SDK's retries), every error caught.
pub async fn like_catching_errors(add: &AtomicCounter) -> Handled {
    match add.apply(1, None).await {
        Ok(_) => Handled::Liked,
        Err(LabError::Store(StoreError::Transient(_))) => Handled::Swallowed { throttled: true },
        Err(_) => Handled::Swallowed { throttled: false },
    }
}

#[cfg(test)]
mod tests {
    use aws_sdk_dynamodb::Client;
    use aws_sdk_dynamodb::operation::update_item::{UpdateItemError, UpdateItemOutput};
    use aws_smithy_mocks::{Rule, mock};

    use super::*;
    use crate::test_util::{meta, place};

    /// An `ADD` through a client with the SDK's retries, its `UpdateItem`s
    /// throttled `throttles` times and then answered 200.
    fn add_throttled(throttles: usize) -> (AtomicCounter, Rule) {
        let updates = mock!(Client::update_item)
            .sequence()
            .error(|| UpdateItemError::generic(meta("ThrottlingException")))
            .times(throttles)
            .output(|| UpdateItemOutput::builder().build())
            .build();
        let add = AtomicCounter::new(place(std::slice::from_ref(&updates), true), true);
        (add, updates)
    }

    /// The SDK's standard retries absorb a throttle that passes within its
    /// 3 attempts: the like is stored.
    #[tokio::test]
    async fn a_throttle_the_sdk_retries_past_stores_the_like() {
        let (add, updates) = add_throttled(2);
        assert_eq!(like_catching_errors(&add).await, Handled::Liked);
        assert_eq!(updates.num_calls(), 3, "two throttles retried by the SDK");
    }

    /// Throttled on all 3 attempts: the error is caught, the invoker hears
    /// nothing, and nothing was stored (the caller's books say an error).
    #[tokio::test]
    async fn a_throttle_that_outlasts_the_sdk_retries_is_swallowed() {
        let (add, updates) = add_throttled(3);
        assert_eq!(like_catching_errors(&add).await, Handled::Swallowed { throttled: true });
        assert_eq!(updates.num_calls(), 3, "the SDK's 3 attempts, then the catch");
        assert_eq!(add.truth().snapshot().errors, 1);
    }
}
