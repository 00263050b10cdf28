//! Approaches 2 and 3, optimistic concurrency: read the item (value and
//! its [`Check`]), compute the new value, write it conditioned on the check
//! being unchanged; when the condition fails, someone else wrote first:
//! read again and retry (within a budget). Thresholds are exact: the check
//! is against the value the conditional write is based on.
//!
//! The blog's approach 2 writes a random entity tag with each write and,
//! after a failure, reads the item back: its own tag there means its write
//! landed. A competitor writing in between hides it, and the change is
//! applied again. The lab's variant on a numeric version (the same whoever
//! writes it) cannot tell at all: "someone else moved the version" and "my own
//! write landed and its answer was lost" look alike. Plain OCC cannot tell "someone else moved the version" from "my own
//! write landed and its answer was lost": after a 500 after apply, the SDK's
//! retry fails its condition (the version moved, by us) and the loop
//! applies the change **again**. OCC *with history* keeps the tokens of the
//! last writers on the item ([`HISTORY`] of them): after a failed condition
//! or an unknown outcome the re-read finds its own token and stops, so a
//! change lands once. The price is a bigger item (more write units per
//! write) and a read per attempt.

use std::collections::HashMap;

use aws_sdk_dynamodb::types::{AttributeValue, ReturnConsumedCapacity};
use hybrid_counter::error::StoreError;
use hybrid_counter_aws::dynamo::classify;

use crate::strategy::{
    Books, BoxFuture, LabError, Outcome, Place, Strategy, charge_refused_write, charge_write, conflict_retries,
    is_retryable, item_size,
};
use crate::table::{self, COUNTER_SK, ENTITY_TAG, VALUE, VERSION, WRITERS, key, n, s};

/// How many writers' tokens the history keeps: more than the concurrent
/// callers, so a writer's token is still there when it reads again.
pub const HISTORY: usize = 32;

/// What the item carries for the condition, and how a writer recognises
/// its own landed write when it reads again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Check {
    /// A numeric version, bumped by every writer: it cannot (the lab's variant).
    Version,
    /// The blog's approach 2: a random entity tag per change, read back.
    EntityTag,
    /// The blog's approach 3: a version and the last writers' tokens.
    History,
}

pub struct Occ {
    place: Place,
    check: Check,
    books: Books,
}

struct Read {
    value: i64,
    /// `None`: the item does not exist yet.
    version: Option<i64>,
    writers: Vec<String>,
    tag: Option<String>,
    /// The item's size, what a write refused by its condition is charged.
    size: usize,
}

impl Occ {
    pub fn new(place: Place, check: Check) -> Self {
        Self {
            place,
            check,
            books: Books::default(),
        }
    }

    /// Whether `read` shows the write of the change with `token`.
    fn shows_own_write(&self, read: &Read, token: &str) -> bool {
        match self.check {
            Check::Version => false,
            Check::EntityTag => read.tag.as_deref() == Some(token),
            Check::History => read.writers.iter().any(|w| w == token),
        }
    }

    async fn read_item(&self) -> Result<Read, StoreError> {
        let item = table::counter_item(&self.place, &self.books.meter).await?;
        let writers = item
            .as_ref()
            .and_then(|item| item.get(WRITERS))
            .and_then(|list| list.as_l().ok())
            .map(|list| list.iter().filter_map(|v| v.as_s().ok().cloned()).collect())
            .unwrap_or_default();
        Ok(Read {
            size: item.as_ref().map_or(0, item_size),
            value: table::number(item.as_ref(), VALUE),
            version: item.as_ref().map(|item| table::number(Some(item), VERSION)),
            tag: item
                .as_ref()
                .and_then(|item| item.get(ENTITY_TAG))
                .and_then(|tag| tag.as_s().ok())
                .cloned(),
            writers,
        })
    }

    /// One conditional write of `value` over `read`.
    async fn write(&self, read: &Read, value: i64, token: &str) -> Result<(), StoreError> {
        let mut names = HashMap::from([("#n".to_owned(), VALUE.to_owned())]);
        let mut values = HashMap::from([(":value".to_owned(), n(value))]);
        let mut update = "SET #n = :value".to_owned();
        let condition = if self.check == Check::EntityTag {
            names.insert("#e".to_owned(), ENTITY_TAG.to_owned());
            values.insert(":token".to_owned(), s(token));
            update.push_str(", #e = :token");
            match &read.tag {
                Some(tag) => {
                    values.insert(":tag".to_owned(), s(tag.as_str()));
                    "#e = :tag"
                }
                None => "attribute_not_exists(#e)",
            }
        } else {
            names.insert("#v".to_owned(), VERSION.to_owned());
            values.insert(":next".to_owned(), n(read.version.unwrap_or(0) + 1));
            update.push_str(", #v = :next");
            match read.version {
                Some(version) => {
                    values.insert(":version".to_owned(), n(version));
                    "#v = :version"
                }
                None => "attribute_not_exists(#v)",
            }
        };
        if self.check == Check::History {
            let keep = read.writers.len().saturating_sub(HISTORY - 1);
            let mut writers: Vec<AttributeValue> = read.writers[keep..].iter().map(|w| s(w.as_str())).collect();
            writers.push(s(token));
            names.insert("#w".to_owned(), WRITERS.to_owned());
            values.insert(":writers".to_owned(), AttributeValue::L(writers));
            update.push_str(", #w = :writers");
        }
        let out = self
            .place
            .client
            .update_item()
            .table_name(&self.place.table)
            .set_key(Some(key(&self.place.counter, COUNTER_SK)))
            .update_expression(update)
            .condition_expression(condition)
            .set_expression_attribute_names(Some(names))
            .set_expression_attribute_values(Some(values))
            .return_consumed_capacity(ReturnConsumedCapacity::Total)
            .send()
            .await
            .map_err(classify)?;
        charge_write(&self.books.meter, out.consumed_capacity());
        Ok(())
    }

    async fn add(&self, delta: i64, threshold: Option<i64>) -> Result<Outcome, LabError> {
        let token = uuid::Uuid::new_v4().simple().to_string();
        let mut retry = conflict_retries();
        loop {
            let read = match self.read_item().await {
                Ok(read) => read,
                Err(err) if is_retryable(&err) && retry.pause().await => continue,
                Err(err) => return Err(err.into()),
            };
            // An earlier attempt of ours landed although we were not told.
            if self.shows_own_write(&read, &token) {
                return Ok(Outcome::Applied);
            }
            if delta > 0 && threshold.is_some_and(|limit| read.value >= limit) {
                return Ok(Outcome::Refused);
            }
            match self.write(&read, read.value + delta, &token).await {
                Ok(()) => return Ok(Outcome::Applied),
                // Someone else wrote first (or, unknowably for plain OCC,
                // our own write did): read again.
                Err(StoreError::ConditionFailed) => {
                    charge_refused_write(&self.books.meter, read.size);
                    if !retry.pause().await {
                        return Err(LabError::Contended {
                            attempts: retry.failures(),
                        });
                    }
                }
                Err(err) if is_retryable(&err) && retry.pause().await => {}
                Err(err) => return Err(err.into()),
            }
        }
    }
}

impl Strategy for Occ {
    fn name(&self) -> &'static str {
        match self.check {
            Check::Version => "OCC on a numeric version",
            Check::EntityTag => "OCC, entity tag read back",
            Check::History => "OCC with history",
        }
    }

    fn change(&self, delta: i64, threshold: Option<i64>) -> BoxFuture<'_, Result<Outcome, LabError>> {
        Box::pin(self.add(delta, threshold))
    }

    fn read(&self) -> BoxFuture<'_, Result<i64, LabError>> {
        Box::pin(async move { Ok(self.read_item().await?.value) })
    }

    fn books(&self) -> &Books {
        &self.books
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use aws_sdk_dynamodb::Client;
    use aws_sdk_dynamodb::operation::get_item::GetItemOutput;
    use aws_sdk_dynamodb::operation::update_item::{UpdateItemError, UpdateItemInput, UpdateItemOutput};
    use aws_sdk_dynamodb::types::error::ConditionalCheckFailedException;
    use aws_smithy_mocks::{Rule, mock};

    use super::*;
    use crate::test_util::{Log, log, logged, meta, place};

    fn item(value: i64, version: i64, writers: &[String]) -> HashMap<String, AttributeValue> {
        HashMap::from([
            (VALUE.to_owned(), n(value)),
            (VERSION.to_owned(), n(version)),
            (
                WRITERS.to_owned(),
                AttributeValue::L(writers.iter().map(|w| s(w.as_str())).collect()),
            ),
        ])
    }

    fn get(value: i64, version: i64) -> Rule {
        mock!(Client::get_item).then_output(move || {
            GetItemOutput::builder()
                .set_item(Some(item(value, version, &[])))
                .build()
        })
    }

    fn condition_failed() -> UpdateItemError {
        UpdateItemError::ConditionalCheckFailedException(
            ConditionalCheckFailedException::builder()
                .meta(meta("ConditionalCheckFailedException"))
                .build(),
        )
    }

    /// Update rule answering 500 (applied, answer lost), then the SDK's
    /// retry with a failed condition (the version moved: by that write).
    /// Each request is shown to `seen` (what the write carried) first.
    fn landed_then_condition_failed(
        sent: &Log<UpdateItemInput>,
        seen: impl Fn(&UpdateItemInput) + Send + Sync + 'static,
    ) -> Rule {
        let log = crate::test_util::logging(sent);
        mock!(Client::update_item)
            .match_requests(move |input| {
                seen(input);
                log(input)
            })
            .sequence()
            .http_status(500, None)
            .error(condition_failed)
            .build()
    }

    fn update_ok(sent: &Log<UpdateItemInput>) -> Rule {
        mock!(Client::update_item)
            .match_requests(crate::test_util::logging(sent))
            .then_output(|| UpdateItemOutput::builder().build())
    }

    /// Guarantee: a failed condition means "lost to another writer", so OCC
    /// reads again and writes over the new version.
    /// Known failure mode: when the "other writer" was its own write whose
    /// 500 came after apply, it applies the change a second time.
    #[tokio::test]
    async fn plain_occ_retries_on_a_failed_condition_and_reapplies_its_own_landed_write() {
        let sent = log();
        let landed = landed_then_condition_failed(&sent, |_| ());
        let occ = Occ::new(
            place(&[get(0, 0), landed.clone(), get(1, 1), update_ok(&sent)], true),
            Check::Version,
        );
        assert_eq!(occ.apply(1, None).await, Ok(Outcome::Applied));
        assert_eq!(landed.num_calls(), 2, "the first write and the SDK's retry of it");
        let sent = logged(&sent);
        assert_eq!(sent.len(), 2, "then a second write after the re-read");
        let value = |u: &UpdateItemInput| u.expression_attribute_values().unwrap()[":value"].clone();
        let version = |u: &UpdateItemInput| u.expression_attribute_values().unwrap()[":version"].clone();
        // Two different conditional writes landed: 0 -> 1 (ours, answer
        // lost) and 1 -> 2 (ours again): the counter is 2, the caller believes 1.
        assert_eq!((value(&sent[0]), version(&sent[0])), (n(1), n(0)));
        assert_eq!((value(&sent[1]), version(&sent[1])), (n(2), n(1)));
        assert_eq!(occ.truth().snapshot().value, 1);
        assert_eq!(
            occ.meter().snapshot().write_units,
            1.0,
            "the refused write is charged, the mock reporting no capacity"
        );
    }

    /// Guarantee: with the writers' history, the re-read after the failed
    /// condition finds the caller's own token and stops: applied once.
    #[tokio::test]
    async fn occ_with_history_finds_its_own_landed_write_and_does_not_reapply() {
        let sent = log();
        let token: Arc<Mutex<Vec<String>>> = Arc::default();
        let seen = token.clone();
        let reread = mock!(Client::get_item).then_compute_output(move |_| {
            GetItemOutput::builder()
                .set_item(Some(item(1, 1, &seen.lock().unwrap())))
                .build()
        });
        let capture = token.clone();
        let landed = landed_then_condition_failed(&sent, move |input| {
            let writers = input.expression_attribute_values().unwrap()[":writers"].as_l().unwrap();
            *capture.lock().unwrap() = writers.iter().map(|w| w.as_s().unwrap().clone()).collect();
        });
        let occ = Occ::new(place(&[get(0, 0), landed.clone(), reread], true), Check::History);
        assert_eq!(occ.apply(1, None).await, Ok(Outcome::Applied));
        assert_eq!(landed.num_calls(), 2, "the write and the SDK's retry of it");
        assert_eq!(logged(&sent).len(), 1, "no write after the re-read");
        assert_eq!(token.lock().unwrap().len(), 1, "the history holds the one writer");
    }

    /// Guarantee: the threshold is checked against the value the write is
    /// based on; at the threshold nothing is written.
    #[tokio::test]
    async fn at_the_threshold_occ_refuses_without_writing() {
        let occ = Occ::new(place(&[get(5, 9)], true), Check::Version);
        // Only the read is answered: any write would have failed.
        assert_eq!(occ.apply(1, Some(5)).await, Ok(Outcome::Refused));
    }

    /// The blog's approach 2: after the ambiguous 500 (and the SDK's retry
    /// refused by the condition), the read-back finds the change's own
    /// entity tag on the item: applied once, no second write.
    #[tokio::test]
    async fn occ_with_an_entity_tag_reads_back_its_own_tag_and_does_not_reapply() {
        let sent = log();
        let tag: Arc<Mutex<Option<String>>> = Arc::default();
        let written = tag.clone();
        let reread = mock!(Client::get_item).then_compute_output(move |_| {
            let mut item = item(1, 0, &[]);
            item.insert(ENTITY_TAG.to_owned(), s(written.lock().unwrap().clone().unwrap()));
            GetItemOutput::builder().set_item(Some(item)).build()
        });
        let capture = tag.clone();
        let landed = landed_then_condition_failed(&sent, move |input| {
            let token = input.expression_attribute_values().unwrap()[":token"].as_s().unwrap();
            *capture.lock().unwrap() = Some(token.clone());
        });
        let occ = Occ::new(place(&[get(0, 0), landed.clone(), reread], true), Check::EntityTag);
        assert_eq!(occ.apply(1, None).await, Ok(Outcome::Applied));
        assert_eq!(landed.num_calls(), 2, "the write and the SDK's retry of it");
        let sent = logged(&sent);
        assert_eq!(sent.len(), 1, "no write after the read-back");
        assert_eq!(sent[0].condition_expression(), Some("attribute_not_exists(#e)"));
        assert_eq!(sent[0].update_expression(), Some("SET #n = :value, #e = :token"));
    }
}
