//! The stream-shard simulator: the resources table's `NEW_AND_OLD_IMAGES`
//! stream as DynamoDB Streams shapes it. Every applied write of a resource
//! item appends an `INSERT`, `MODIFY` or `REMOVE` record in the Lambda
//! event's form ([`Record`]), so readers decode it with the production path
//! ([`crate::stream::ChangeRecord::from_lambda`]). Shards split, sequence
//! numbers increase across the stream, and old records expire.

use std::collections::VecDeque;

use aws_lambda_events::event::dynamodb::{EventRecord as Record, StreamRecord, StreamViewType};
use serde_dynamo::{AttributeValue, Item};

use crate::error::StoreError;
use crate::keys;
use crate::stream::process::Decoded;
use crate::stream::record::ChangeRecord;
use crate::time::EpochMillis;

/// The id of the in-memory stream's first shard (the root of every split).
pub const STREAM_SHARD_ID: &str = "shardId-00000000000000000001-memory";

/// The id of shard number `index` (0 is [`STREAM_SHARD_ID`]).
fn shard_id(index: usize) -> String {
    format!("shardId-{:020}-memory", index + 1)
}

/// One shard of the in-memory stream, as `DescribeStream` lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamShard {
    pub shard_id: String,
    pub parent_shard_id: Option<String>,
    /// Closed: it gets no more records (it was split).
    pub closed: bool,
}

/// Sequence numbers start here so they have the width of real ones.
const FIRST_SEQUENCE: u64 = 100_000_000_000_000_000;

/// The text form of sequence number `n` (0-based).
pub fn sequence_number(n: u64) -> String {
    (FIRST_SEQUENCE + n).to_string()
}

fn parse_sequence(text: &str) -> Option<u64> {
    text.parse::<u64>().ok()?.checked_sub(FIRST_SEQUENCE)
}

/// The ARN the in-memory stream's records carry.
pub const STREAM_ARN: &str = "arn:aws:dynamodb:us-east-1:000000000000:table/memory/stream/memory";

/// The event name of a stream record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Event {
    Insert,
    Modify,
    Remove,
}

impl Event {
    fn as_str(self) -> &'static str {
        match self {
            Event::Insert => "INSERT",
            Event::Modify => "MODIFY",
            Event::Remove => "REMOVE",
        }
    }
}

/// One retained stream record.
#[derive(Debug, Clone)]
struct StreamEntry {
    n: u64,
    /// Index of its shard in [`Stream::shards`].
    shard: usize,
    at: EpochMillis,
    record: Record,
}

/// A shard of the stream: its parent and, once split, its two children.
#[derive(Debug, Clone, Default)]
struct ShardState {
    parent: Option<usize>,
    children: Option<[usize; 2]>,
    /// Every record of this shard numbered below this one has been trimmed.
    trimmed_below: u64,
    /// Records appended to it, ever.
    appended: u64,
    /// Of those, trimmed.
    trimmed: u64,
}

/// The stream: its retained records and every shard it ever had.
#[derive(Debug)]
pub(super) struct Stream {
    records: VecDeque<StreamEntry>,
    next: u64,
    shards: Vec<ShardState>,
    /// Timestamp of the records appended by the current call.
    pub(super) now: EpochMillis,
}

impl Default for Stream {
    fn default() -> Self {
        Self {
            records: VecDeque::new(),
            next: 0,
            shards: vec![ShardState::default()],
            now: 0,
        }
    }
}

impl Stream {
    /// The open shard an item's next record goes to: down its lineage from
    /// the first shard, each split sending it to the child its key hashes to.
    fn shard_of(&self, keys: &Item) -> usize {
        let text = |k: &str| match keys.get(k) {
            Some(AttributeValue::S(s)) => s.clone(),
            _ => String::new(),
        };
        let key = format!("{}\u{0}{}", text(keys::SCOPE), text(keys::ID));
        let mut at = 0;
        let mut depth = 0u64;
        while let Some(children) = self.shards[at].children {
            let hash = key.bytes().fold(0xcbf2_9ce4_8422_2325 ^ depth, |h, b| {
                (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
            });
            at = children[usize::from(hash % 2 == 1)];
            depth += 1;
        }
        at
    }

    /// Index of the shard named `shard_id`.
    fn shard_index(&self, shard_id: &str) -> Result<usize, StoreError> {
        (0..self.shards.len())
            .find(|&i| self::shard_id(i) == shard_id)
            .ok_or_else(|| StoreError::Rejected(format!("ResourceNotFoundException: no shard {shard_id}")))
    }

    /// Appends the record of one applied write to its item's open shard.
    pub(super) fn append(&mut self, event: Event, old: Option<&Item>, new: Option<&Item>) {
        let n = self.next;
        self.next += 1;
        let any = new.or(old).expect("a record has an image");
        let keys: Item = [keys::SCOPE, keys::ID]
            .iter()
            .filter_map(|k| any.get(*k).map(|v| ((*k).to_owned(), v.clone())))
            .collect::<std::collections::HashMap<_, _>>()
            .into();
        let size = [Some(&keys), old, new]
            .into_iter()
            .flatten()
            .map(item_size)
            .sum::<usize>();
        let mut data = StreamRecord::default();
        data.approximate_creation_date_time = chrono::DateTime::from_timestamp_millis(self.now).unwrap_or_default();
        data.keys = keys;
        data.new_image = new.cloned().unwrap_or_default();
        data.old_image = old.cloned().unwrap_or_default();
        data.sequence_number = Some(sequence_number(n));
        data.size_bytes = i64::try_from(size).unwrap_or(i64::MAX);
        data.stream_view_type = Some(StreamViewType::NewAndOldImages);
        let mut record = Record::default();
        record.event_id = format!("{n:032x}");
        record.event_name = event.as_str().to_owned();
        record.event_version = Some("1.1".to_owned());
        record.event_source = Some("aws:dynamodb".to_owned());
        record.aws_region = "us-east-1".to_owned();
        record.event_source_arn = Some(STREAM_ARN.to_owned());
        record.change = data;
        let shard = self.shard_of(&record.change.keys);
        self.shards[shard].appended += 1;
        self.records.push_back(StreamEntry {
            n,
            shard,
            at: self.now,
            record,
        });
    }

    /// The retained records of shard `shard_id` after `after` (from the
    /// trim horizon when `None`), at most `max`: `GetRecords` from
    /// `AFTER_SEQUENCE_NUMBER`. [`StoreError::Gone`] when records of the
    /// shard after `after` were trimmed.
    pub(super) fn read(&self, shard_id: &str, after: Option<&str>, max: usize) -> Result<Vec<Record>, StoreError> {
        let shard = self.shard_index(shard_id)?;
        let from = match after {
            None => 0,
            Some(seq) => parse_sequence(seq).ok_or_else(|| bad_sequence(seq))? + 1,
        };
        if from < self.shards[shard].trimmed_below && after.is_some() {
            return Err(StoreError::Gone(format!(
                "TrimmedDataAccessException: records after {} were trimmed",
                after.unwrap_or_default()
            )));
        }
        Ok(self
            .records
            .iter()
            .filter(|e| e.shard == shard && e.n >= from)
            .take(max)
            .map(|e| e.record.clone())
            .collect())
    }

    /// The records of shard `shard_id` from `start` through `end`, both
    /// inclusive: `AT_SEQUENCE_NUMBER` then reading on.
    /// [`StoreError::Gone`] when `start` was trimmed.
    pub(super) fn range(&self, shard_id: &str, start: &str, end: &str) -> Result<Vec<Record>, StoreError> {
        let shard = self.shard_index(shard_id)?;
        let first = parse_sequence(start).ok_or_else(|| bad_sequence(start))?;
        let last = parse_sequence(end).ok_or_else(|| bad_sequence(end))?;
        if first < self.shards[shard].trimmed_below {
            return Err(StoreError::Gone(format!(
                "TrimmedDataAccessException: {start} is beyond the trim horizon"
            )));
        }
        Ok(self
            .records
            .iter()
            .filter(|e| e.shard == shard && (first..=last).contains(&e.n))
            .map(|e| e.record.clone())
            .collect())
    }

    /// The shards, parents before children: every open shard, and every
    /// closed one that still holds a record (or never held any).
    pub(super) fn listed_shards(&self) -> Vec<StreamShard> {
        self.shards
            .iter()
            .enumerate()
            .filter(|(_, s)| s.children.is_none() || s.appended == 0 || s.trimmed < s.appended)
            .map(|(i, s)| StreamShard {
                shard_id: shard_id(i),
                parent_shard_id: s.parent.map(shard_id),
                closed: s.children.is_some(),
            })
            .collect()
    }

    /// Splits open shard `shard_id`: it is closed and two children open;
    /// returns their ids. `None` when the shard is unknown or closed.
    pub(super) fn split(&mut self, shard_id: &str) -> Option<[String; 2]> {
        let at = self.shard_index(shard_id).ok()?;
        if self.shards[at].children.is_some() {
            return None;
        }
        let children = [self.shards.len(), self.shards.len() + 1];
        for _ in children {
            self.shards.push(ShardState {
                parent: Some(at),
                ..ShardState::default()
            });
        }
        self.shards[at].children = Some(children);
        Some(children.map(self::shard_id))
    }

    /// Every retained record, decoded with the production decoder.
    pub(super) fn changes(&self) -> Vec<Decoded> {
        self.records
            .iter()
            .map(|e| ChangeRecord::from_lambda(&e.record))
            .collect()
    }

    /// Expires the records written before `cutoff`; returns how many.
    pub(super) fn trim(&mut self, cutoff: EpochMillis) -> usize {
        let mut trimmed = 0;
        while self.records.front().is_some_and(|e| e.at < cutoff) {
            let entry = self.records.pop_front().expect("checked");
            let shard = &mut self.shards[entry.shard];
            shard.trimmed_below = entry.n + 1;
            shard.trimmed += 1;
            trimmed += 1;
        }
        trimmed
    }
}

fn item_size(item: &Item) -> usize {
    item.iter().map(|(k, v)| k.len() + format!("{v:?}").len()).sum()
}

fn bad_sequence(seq: &str) -> StoreError {
    StoreError::Rejected(format!(
        "ValidationException: {seq:?} is not a sequence number of this stream"
    ))
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use serde_dynamo::AttributeValue;

    use super::super::MemoryStore;
    use super::super::tests::{count_insert, key, resource};
    use super::*;
    use crate::store::{RequestStore, ResourceRead, StreamStore};
    use crate::stream::{Change, record::IgnoreReason};

    #[tokio::test]
    async fn every_applied_write_appends_a_record_the_production_decoder_reads() {
        let store = MemoryStore::new();
        store.put_resource(&resource("a", "i1")).await.unwrap();
        store.transact(&count_insert("a", "i1")).await.unwrap();
        store.mark_deleted(&key("a"), "i1", 9).await.unwrap();
        let delete = crate::stream::plan::resolve_delete(
            &key("a"),
            "i1",
            store.get_resource(&key("a")).await.unwrap().as_ref(),
            crate::stream::plan::ShardChoice::SINGLE,
            0,
        );
        let crate::stream::plan::DeleteDecision::Write(tx) = delete else {
            panic!("expected a write")
        };
        store.transact(&tx).await.unwrap();
        // A refused write appends nothing.
        assert!(store.mark_deleted(&key("a"), "i1", 9).await.is_err());
        let changes: Vec<Change> = store.stream_changes().into_iter().map(|d| d.unwrap().change).collect();
        assert_eq!(
            changes,
            vec![
                Change::Insert {
                    key: key("a"),
                    incarnation: "i1".into()
                },
                Change::Ignore(IgnoreReason::OtherModify),
                Change::SoftDelete {
                    key: key("a"),
                    incarnation: "i1".into()
                },
                Change::Ignore(IgnoreReason::Remove),
            ]
        );
        let records = store.stream_read(STREAM_SHARD_ID, None, 10).unwrap();
        let lambda = serde_json::to_value(&records[2]).unwrap();
        assert!(crate::stream::filter::passes(&lambda));
        assert_eq!(
            lambda["dynamodb"]["NewImage"]["color"],
            serde_json::json!({"S": "blue"})
        );
        assert_eq!(
            lambda["dynamodb"]["OldImage"]["deleted"],
            serde_json::json!({"BOOL": false})
        );
        let seqs: Vec<u64> = records
            .iter()
            .map(|r| parse_sequence(r.change.sequence_number.as_deref().unwrap()).unwrap())
            .collect();
        assert_eq!(seqs, vec![0, 1, 2, 3]);
    }

    #[tokio::test]
    async fn trimmed_records_are_gone_for_readers_behind_the_horizon() {
        let store = MemoryStore::new();
        let now = Arc::new(std::sync::atomic::AtomicI64::new(0));
        let clock = now.clone();
        store.set_clock(Arc::new(move || clock.load(std::sync::atomic::Ordering::SeqCst)));
        store.put_resource(&resource("a", "i1")).await.unwrap();
        now.store(100, std::sync::atomic::Ordering::SeqCst);
        store.put_resource(&resource("b", "i2")).await.unwrap();
        assert_eq!(store.trim_stream(50), 1);
        let first = sequence_number(0);
        assert!(matches!(
            store.stream_range(STREAM_SHARD_ID, &first, &first),
            Err(StoreError::Gone(_))
        ));
        assert!(matches!(
            store.stream_read(STREAM_SHARD_ID, Some("99999"), 1),
            Err(StoreError::Rejected(_))
        ));
        // From the trim horizon, or after the trimmed record, the rest reads.
        assert_eq!(store.stream_read(STREAM_SHARD_ID, None, 10).unwrap().len(), 1);
        assert_eq!(store.stream_read(STREAM_SHARD_ID, Some(&first), 10).unwrap().len(), 1);
        assert_eq!(
            store
                .stream_range(STREAM_SHARD_ID, &sequence_number(1), &sequence_number(1))
                .unwrap()
                .len(),
            1
        );
    }

    #[tokio::test]
    async fn a_split_closes_the_shard_and_each_item_goes_on_in_one_child() {
        let store = MemoryStore::new();
        let now = Arc::new(std::sync::atomic::AtomicI64::new(0));
        let clock = now.clone();
        store.set_clock(Arc::new(move || clock.load(std::sync::atomic::Ordering::SeqCst)));
        for id in ["a", "b", "c", "d", "e", "f"] {
            store.put_resource(&resource(id, "i1")).await.unwrap();
        }
        let [left, right] = store.split_stream_shard(STREAM_SHARD_ID).unwrap();
        assert_eq!(
            store.split_stream_shard(STREAM_SHARD_ID),
            None,
            "a closed shard does not split"
        );
        now.store(100, std::sync::atomic::Ordering::SeqCst);
        for id in ["a", "b", "c", "d", "e", "f"] {
            store.transact(&count_insert(id, "i1")).await.unwrap();
        }
        let shards = store.stream_shards();
        assert_eq!(
            shards,
            vec![
                StreamShard {
                    shard_id: STREAM_SHARD_ID.into(),
                    parent_shard_id: None,
                    closed: true
                },
                StreamShard {
                    shard_id: left.clone(),
                    parent_shard_id: Some(STREAM_SHARD_ID.into()),
                    closed: false
                },
                StreamShard {
                    shard_id: right.clone(),
                    parent_shard_id: Some(STREAM_SHARD_ID.into()),
                    closed: false
                },
            ]
        );
        let ids = |shard: &str| -> Vec<String> {
            store
                .stream_read(shard, None, 100)
                .unwrap()
                .iter()
                .map(|r| match r.change.keys.get(keys::ID) {
                    Some(AttributeValue::S(id)) => id.clone(),
                    other => panic!("no id: {other:?}"),
                })
                .collect()
        };
        assert_eq!(ids(STREAM_SHARD_ID), ["a", "b", "c", "d", "e", "f"]);
        let (l, r) = (ids(&left), ids(&right));
        assert_eq!(l.len() + r.len(), 6);
        assert!(
            !l.is_empty() && !r.is_empty(),
            "one scope spreads over both children: {l:?} {r:?}"
        );
        // Each item goes on in one child whatever it writes next.
        for id in l.iter().chain(&r) {
            store.mark_deleted(&key(id), "i1", 9).await.unwrap();
        }
        assert_eq!(ids(&left), [l.clone(), l.clone()].concat());
        assert_eq!(ids(&right), [r.clone(), r.clone()].concat());
        // A range is read on its own shard only.
        let first = sequence_number(6);
        let on_left = store.stream_range(&left, &first, &sequence_number(11)).unwrap();
        assert_eq!(on_left.len(), l.len());
        assert!(store.stream_range("shardId-nope", &first, &first).is_err());
        // Once the parent's records expired, it is no longer listed.
        store.trim_stream(50);
        let listed: Vec<String> = store.stream_shards().into_iter().map(|s| s.shard_id).collect();
        assert_eq!(listed, [left, right]);
    }
}
