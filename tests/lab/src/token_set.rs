//! Approach 7, a set of tokens: the counter item holds a string set, a +1
//! adds the change's token (`ADD tokens :token`), a -1 deletes one
//! (`DELETE tokens :token`), the value is the set's size. Adding or
//! deleting a token twice changes nothing, so resends are safe and each
//! change counts once; the threshold is a condition on the set's size. The
//! item grows with the count, and every write is charged for the whole
//! item (1 write unit per KB): the cost per write grows with the value, and
//! the 400 KB item limit caps it. Tokens of [`TOKEN_LENGTH`] characters,
//! as the blog's; the set takes whatever threshold the others take (the
//! blog sizes it at about fifty; `make compare` runs it at the others').

use std::collections::HashMap;

use aws_sdk_dynamodb::types::{AttributeValue, ReturnConsumedCapacity};
use hybrid_counter::error::StoreError;
use hybrid_counter_aws::dynamo::classify;

use crate::strategy::{
    Books, BoxFuture, LabError, Outcome, Place, Pool, Strategy, caller_retries, charge_refused_write, charge_write,
    is_retryable,
};
use crate::table::{self, COUNTER_SK, TOKENS, key, n};

/// The blog's tokens: 8 characters.
pub const TOKEN_LENGTH: usize = 8;

pub struct TokenSet {
    place: Place,
    /// Tokens the callers believe are in the set, for the -1s to remove.
    added: Pool,
    books: Books,
}

impl TokenSet {
    pub fn new(place: Place) -> Self {
        Self {
            place,
            added: Pool::default(),
            books: Books::default(),
        }
    }

    async fn send(&self, add: bool, token: &str, threshold: Option<i64>) -> Result<Outcome, LabError> {
        let mut values = HashMap::from([(":token".to_owned(), AttributeValue::Ss(vec![token.to_owned()]))]);
        let condition = match threshold {
            Some(limit) if add => {
                values.insert(":one".to_owned(), AttributeValue::S(token.to_owned()));
                values.insert(":limit".to_owned(), n(limit));
                // Our own token already in: a resend, let it through.
                Some("attribute_not_exists(#t) OR contains(#t, :one) OR size(#t) < :limit")
            }
            _ => None,
        };
        let update = || async {
            self.place
                .client
                .update_item()
                .table_name(&self.place.table)
                .set_key(Some(key(&self.place.counter, COUNTER_SK)))
                .update_expression(if add { "ADD #t :token" } else { "DELETE #t :token" })
                .set_condition_expression(condition.map(str::to_owned))
                .expression_attribute_names("#t", TOKENS)
                .set_expression_attribute_values(Some(values.clone()))
                .return_consumed_capacity(ReturnConsumedCapacity::Total)
                .send()
                .await
                .map_err(classify)
        };
        match caller_retries().run(update, is_retryable).await {
            Ok(out) => {
                charge_write(&self.books.meter, out.consumed_capacity());
                Ok(Outcome::Applied)
            }
            Err(StoreError::ConditionFailed) => {
                // Refused at the threshold: the set is full, about `limit` tokens.
                let full = threshold.unwrap_or(0).max(0) as usize * (TOKEN_LENGTH + 1);
                charge_refused_write(&self.books.meter, full);
                Ok(Outcome::Refused)
            }
            Err(err) => Err(err.into()),
        }
    }

    async fn add(&self, delta: i64, threshold: Option<i64>) -> Result<Outcome, LabError> {
        if delta > 0 {
            let mut token = uuid::Uuid::new_v4().simple().to_string();
            token.truncate(TOKEN_LENGTH);
            let outcome = self.send(true, &token, threshold).await?;
            if outcome == Outcome::Applied {
                self.added.put(token);
            }
            return Ok(outcome);
        }
        let token = self.added.take().ok_or(LabError::Empty)?;
        let result = self.send(false, &token, None).await;
        if result.is_err() {
            self.added.put(token);
        }
        result
    }
}

impl Strategy for TokenSet {
    fn name(&self) -> &'static str {
        "set of tokens"
    }

    fn change(&self, delta: i64, threshold: Option<i64>) -> BoxFuture<'_, Result<Outcome, LabError>> {
        Box::pin(self.add(delta, threshold))
    }

    fn read(&self) -> BoxFuture<'_, Result<i64, LabError>> {
        Box::pin(async move {
            let item = table::counter_item(&self.place, &self.books.meter).await?;
            Ok(item
                .as_ref()
                .and_then(|item| item.get(TOKENS))
                .and_then(|set| set.as_ss().ok())
                .map_or(0, |set| set.len() as i64))
        })
    }

    fn books(&self) -> &Books {
        &self.books
    }
}

#[cfg(test)]
mod tests {
    use aws_sdk_dynamodb::Client;
    use aws_sdk_dynamodb::operation::update_item::{UpdateItemInput, UpdateItemOutput};
    use aws_smithy_mocks::mock;

    use super::*;
    use crate::test_util::{log, logged, place};

    /// Guarantee: a +1 resent after ambiguous 500s (the SDK's 3 attempts,
    /// then the caller's resend) adds the same token,
    /// which the set holds once; the -1 deletes exactly that token.
    #[tokio::test]
    async fn a_resent_add_carries_the_same_token_and_the_decrement_removes_it() {
        let sent = log();
        let updates = mock!(Client::update_item)
            .match_requests(crate::test_util::logging::<UpdateItemInput>(&sent))
            .sequence()
            .http_status(500, None)
            .times(3)
            .output(|| UpdateItemOutput::builder().build())
            .times(2)
            .build();
        let set = TokenSet::new(place(&[updates], true));
        assert_eq!(set.apply(1, Some(5)).await, Ok(Outcome::Applied));
        assert_eq!(set.apply(-1, None).await, Ok(Outcome::Applied));
        assert_eq!(set.apply(-1, None).await, Err(LabError::Empty), "nothing left to undo");
        let sent = logged(&sent);
        let token = |u: &UpdateItemInput| u.expression_attribute_values().unwrap()[":token"].clone();
        assert_eq!(sent.len(), 3);
        assert_eq!(token(&sent[0]), token(&sent[1]), "the resend adds the same token");
        assert_eq!(token(&sent[0]).as_ss().unwrap()[0].len(), TOKEN_LENGTH);
        assert_eq!(sent[2].update_expression(), Some("DELETE #t :token"));
        assert_eq!(token(&sent[2]), token(&sent[0]), "the -1 removes the token added");
        assert_eq!(
            sent[0].condition_expression(),
            Some("attribute_not_exists(#t) OR contains(#t, :one) OR size(#t) < :limit")
        );
        assert_eq!(set.truth().snapshot().value, 0);
    }
}
