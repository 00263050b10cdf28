//! DLQ1, DLQ2 and the redrive: DLQ1 replayed by the reprocessor's logic
//! ([`hybrid_counter_aws::replay::replay_records`]) over the in-memory
//! stream, with its partial batch response and lost deletes; a message
//! moves to DLQ2 after `maxReceiveCount`, and the operator redrives it.

use std::collections::VecDeque;
use std::time::Duration;

use esm_runner::Invocation;
use esm_runner::batch::{SqsVerdict, sqs_verdict};
use hybrid_counter_aws::replay::{OnFailureRecord, replay_records};
use serde_json::json;

use crate::rng::Rng;
use crate::world::{Message, Sim};

impl Sim {
    pub(crate) fn send_dlq1(&self, body: String) {
        let id = self.next_message.get();
        self.next_message.set(id + 1);
        self.dlq1.borrow_mut().push_back(Message {
            id: format!("m{id}"),
            body,
            receives: 0,
            visible_at: tokio::time::Instant::now(),
        });
    }

    pub(crate) async fn reprocessor(&self) {
        let mut r = Rng::new(self.seed, 300);
        while !self.done() {
            self.reprocessor_step(&mut r).await;
            tokio::time::sleep(r.millis(100, 1_000)).await;
        }
    }

    /// One receive of up to 10 visible messages and their replay. Returns
    /// how many were received.
    pub(crate) async fn reprocessor_step(&self, r: &mut Rng) -> usize {
        let now = tokio::time::Instant::now();
        let mut batch = Vec::new();
        {
            let mut dlq1 = self.dlq1.borrow_mut();
            let mut kept = VecDeque::new();
            while let Some(mut m) = dlq1.pop_front() {
                if batch.len() < 10 && m.visible_at <= now {
                    m.receives += 1;
                    if m.receives > self.p.max_receive_count {
                        // The redrive policy moves it on this receive.
                        self.log(|| format!("DLQ1: {} -> DLQ2 after {} receives", m.id, m.receives - 1));
                        self.bump(|s| s.moved_to_dlq2 += 1);
                        self.dlq2.borrow_mut().push_back(m);
                    } else {
                        batch.push(m);
                    }
                } else {
                    kept.push_back(m);
                }
            }
            *dlq1 = kept;
        }
        if batch.is_empty() {
            return 0;
        }
        self.bump(|s| s.invocations += 1);
        let crash_at = (self.stormy.get() && r.chance(self.p.crash_per_mille)).then(|| r.range(0, batch.len() as u64));
        let mut failures = Vec::new();
        for (i, m) in batch.iter().enumerate() {
            if crash_at == Some(i as u64) {
                break;
            }
            let outcome = match OnFailureRecord::from_body(&m.body) {
                Ok(record) => {
                    let info = &record.batch_info;
                    let records =
                        self.store
                            .stream_range(&info.shard_id, &info.start_sequence_number, &info.end_sequence_number);
                    replay_records(&self.processor, info, records, self.now_stream()).await
                }
                Err(err) => Err(err),
            };
            self.log(|| format!("reprocessor: {} -> {:?}", m.id, outcome.as_ref().map(|_| "ok")));
            match outcome {
                Ok(_) => self.bump(|s| s.dlq1_replays_ok += 1),
                Err(_) => failures.push(json!({ "itemIdentifier": m.id })),
            }
        }
        let ids: Vec<String> = batch.iter().map(|m| m.id.clone()).collect();
        let invocation = match crash_at {
            Some(_) => {
                self.bump(|s| s.handler_crashes += 1);
                Invocation::error("Runtime.ExitError", "crashed mid-batch")
            }
            None => Invocation::Response(json!({ "batchItemFailures": failures })),
        };
        let verdict = sqs_verdict(&invocation, &ids, true);
        let visible_at = tokio::time::Instant::now() + Duration::from_secs(30);
        let received = batch.len();
        for mut m in batch {
            let delete = match &verdict {
                SqsVerdict::DeleteAll => true,
                SqsVerdict::DeleteAllBut(keep) => !keep.contains(&m.id),
                SqsVerdict::DeleteNone { .. } => false,
            };
            // A lost delete: the message comes back and is replayed again.
            let lost_delete = delete && self.stormy.get() && r.chance(self.p.duplicate_per_mille);
            if lost_delete {
                self.bump(|s| s.duplicate_deliveries += 1);
            }
            if !delete || lost_delete {
                m.visible_at = visible_at;
                self.dlq1.borrow_mut().push_back(m);
            }
        }
        received
    }

    /// The operator's redrive: DLQ2 back to DLQ1, receive counts reset.
    pub(crate) fn redrive(&self) {
        let moved: Vec<Message> = self.dlq2.borrow_mut().drain(..).collect();
        for m in moved {
            self.log(|| format!("redrive: {} -> DLQ1", m.id));
            self.bump(|s| s.redriven += 1);
            self.send_dlq1(m.body);
        }
    }

    pub(crate) async fn operator(&self) {
        let mut r = Rng::new(self.seed, 400);
        while !self.done() {
            tokio::time::sleep(r.millis(1_000, 5_000)).await;
            if r.chance(300) {
                self.redrive();
            }
        }
    }
}
