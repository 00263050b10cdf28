//! The API clients: each creates and deletes under limits through the
//! example API's real handler (`handlers/api`), some creates with
//! `?sequence=true`. No answer may carry the store's words, every answer
//! keeps its contract, and no request takes as long as the API's timeout.
//! Now and then a client pauses past the audit's grace, so repairs land in
//! the middle of the load.

use hybrid_counter::{Admission, ResourceId};
use serde_json::Value;

use crate::counts::{bounds, live_count};
use crate::params::SIM_API_TIMEOUT_MS;
use crate::rng::Rng;
use crate::world::Sim;

/// What the in-memory store (and DynamoDB) say in their errors: none of it
/// may reach an API caller.
const STORE_WORDS: &[&str] = &[
    "injected",
    "TransactionConflict",
    "ConditionalCheck",
    "conditional check",
    "cancelled",
    "Throttl",
    "throttle",
    "Exception",
    "transient failure",
    "store unavailable:",
    "request rejected",
];

impl Sim {
    /// Every client, joined.
    pub(crate) fn clients(
        &self,
        n: u64,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = Result<(), String>> + '_>> {
        Box::pin(async move {
            if n >= self.p.clients {
                return Ok(());
            }
            let (first, rest) = tokio::join!(self.client(n), self.clients(n + 1));
            first.and(rest)
        })
    }

    /// Client `n`'s requests; done when they are, or at its first
    /// violation (so the other actors stop too).
    async fn client(&self, n: u64) -> Result<(), String> {
        if n >= self.p.clients {
            return Ok(());
        }
        let result = self.requests(n).await;
        self.clients_done.set(self.clients_done.get() + 1);
        result
    }

    async fn requests(&self, n: u64) -> Result<(), String> {
        let mut r = Rng::new(self.seed, 100 + n);
        let mut quiet = Rng::new(self.seed, 700 + n);
        let mut seq = Rng::new(self.seed, 1_100 + n);
        for _ in 0..self.p.ops_per_client {
            tokio::time::sleep(r.millis(0, 300)).await;
            if quiet.chance(self.p.quiet_per_mille) {
                let grace = self.grace() as u64;
                let pause = quiet.millis(grace + 100, 2 * grace + 200);
                self.bump(|s| s.quiet_moments += 1);
                tokio::time::sleep(pause).await;
            }
            let scope = self.scope(r.range(0, self.p.scopes - 1));
            let id = ResourceId::new(format!("w{}", r.range(0, self.p.ids - 1))).unwrap();
            let started = tokio::time::Instant::now();
            if r.chance(650) {
                let numbered = seq.chance(self.p.sequence_per_mille);
                let create = self.windows.lock().unwrap().start_create(scope.as_str());
                let path = api::item_path(&scope, &id) + if numbered { "?sequence=true" } else { "" };
                let answer = self.call_api(n, "POST", &path).await;
                // Whether this create ran inside a window of its scope, read
                // before it closes the window it may have been the last of.
                let in_window = {
                    let mut windows = self.windows.lock().unwrap();
                    let in_window = windows.covers(scope.as_str());
                    windows.finish_create(create, || self.store.tables());
                    in_window
                };
                if numbered {
                    let ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
                    self.bump(|s| s.longest_numbered_request_ms = s.longest_numbered_request_ms.max(ms));
                } else {
                    self.took(started)?;
                }
                let (status, code, body) = answer?;
                self.log(|| format!("client{n} create {path}: {status} {code} {}", body["sequence"]));
                match (status, code.as_str()) {
                    // Created; its number claimed, not claimed, or (the
                    // claim's answer lost) unknown and maybe still landing.
                    (201, _) | (503, "CreatedWithoutSequence" | "CreatedSequenceUnknown") => {
                        self.bump(|s| s.creates_ok += 1);
                        if numbered {
                            match body["sequence"].as_u64() {
                                Some(number) => {
                                    self.bump(|s| s.numbered_creates += 1);
                                    let key = (scope.to_string(), number);
                                    if let Some(other) = self.numbered.borrow_mut().insert(key, id.to_string()) {
                                        return Err(format!(
                                            "sequence number {number} of {scope} answered twice: to {other} and {id}"
                                        ));
                                    }
                                }
                                None => self.bump(|s| s.created_without_sequence += 1),
                            }
                        }
                        let tables = self.store.tables();
                        let live = live_count(&tables, self.p.scope_keys, scope.as_str());
                        let limit = bounds(&tables, self.p.scope_keys, self.p.limit)
                            .into_iter()
                            .find(|b| b.index.is_none() && b.scope == scope.as_str())
                            .map_or(self.p.limit, |b| b.limit);
                        if live > limit {
                            // Without strict mode concurrent creators may
                            // overshoot (DESIGN §5); counted, not a failure.
                            // In strict mode only within a configuration
                            // change's window, or while a counters key
                            // drains above its share (exception (4)): the
                            // checker fails the schedule at any other.
                            let strict = self.windows.lock().unwrap().mode != Some(Admission::BestEffort);
                            self.bump(|s| {
                                s.over_limit_creates += 1;
                                if strict && !in_window {
                                    // A key left above its share fills no
                                    // more, the others do: exception (4).
                                    s.strict_creates_above_limit_keys_draining += 1;
                                } else if strict {
                                    s.strict_creates_above_limit_in_a_window += 1;
                                } else {
                                    s.best_effort_overshoots += 1;
                                }
                            });
                        }
                    }
                    (409, "LimitExceeded") => self.bump(|s| s.limit_exceeded += 1),
                    (409, "AlreadyExists") => {}
                    (503, "Unavailable") => self.bump(|s| s.unavailable += 1),
                    _ => return Err(format!("create answered outside its contract: {status} {body}")),
                }
            } else {
                let path = api::item_path(&scope, &id);
                let answer = self.call_api(n, "DELETE", &path).await;
                self.took(started)?;
                let (status, code, body) = answer?;
                self.log(|| format!("client{n} delete {path}: {status} {code}"));
                match (status, code.as_str()) {
                    (204, _) => self.bump(|s| s.deletes_ok += 1),
                    (404, "NotFound") => {}
                    (503, "Unavailable") => self.bump(|s| s.unavailable += 1),
                    _ => return Err(format!("delete answered outside its contract: {status} {body}")),
                }
            }
        }
        Ok(())
    }

    /// One request to the example API (`handlers/api`, the real handler
    /// over the request path of this moment) from client `n`: its status,
    /// error code and JSON body. No answer may carry the store's words
    /// (DynamoDB's text goes to the log, never to the caller).
    async fn call_api(&self, n: u64, method: &str, path: &str) -> Result<(u16, String, Value), String> {
        let request = lambda_http::http::Request::builder()
            .method(method)
            .uri(path)
            .body(lambda_http::Body::Empty)
            .map_err(|e| e.to_string())?;
        let mut metrics = hybrid_counter::metrics::Metrics::new("simulation");
        let response = api::handle_measured(self.counter(), request, self.now_api(n), &mut metrics).await;
        let status = response.status().as_u16();
        let body: Value = match response.body() {
            lambda_http::Body::Empty => Value::Null,
            body => {
                serde_json::from_slice(body).map_err(|e| format!("{method} {path}: a body that is not JSON: {e}"))?
            }
        };
        self.bump(|s| s.answers_checked += 1);
        let text = body.to_string();
        if let Some(word) = STORE_WORDS.iter().find(|w| text.contains(*w)) {
            return Err(format!(
                "{method} {path} answered {status} with the store's words ({word:?}): {text}"
            ));
        }
        let code = body["error"].as_str().unwrap_or_default().to_owned();
        Ok((status, code, body))
    }

    /// Records how long a request took; one longer than the audit's grace
    /// period would break the premise of every held-back repair (the
    /// simulation's API timeout).
    fn took(&self, started: tokio::time::Instant) -> Result<(), String> {
        let ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.bump(|s| s.longest_request_ms = s.longest_request_ms.max(ms));
        if ms >= SIM_API_TIMEOUT_MS as u64 {
            return Err(format!(
                "a request took {ms} ms, as long as the API's timeout of {SIM_API_TIMEOUT_MS} ms"
            ));
        }
        Ok(())
    }
}
