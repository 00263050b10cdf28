//! `counterctl verify`: does this deployed stack count correctly? A
//! post-deploy check for any target (the emulator, LocalStack, AWS), for CI
//! pipelines and operators.
//!
//! It writes through the same library the API runs, as the deployed stack
//! configures it (admission mode, best-effort shards, scope keys: with
//! `ScopeKeyShards` N > 1 each check covers every key of its scopes, and
//! the limit check's create is refused at its key's share), into scopes of its
//! own (`verify-<run>-<n>`, unique per run), so it is safe on a production
//! stack: it never reads or writes another scope's items. The checks, in
//! order, each timed and with its verdict:
//!
//! 1. `writes`: creates and deletes answer as the API would;
//! 2. `limit`: a create at a per-scope limit override is refused;
//! 3. `re-create`: an id deleted and hard-deleted by the stream can be
//!    created again;
//! 4. `stream`: the stream pipeline (mapping, stream counter) counts every
//!    item within `--timeout`: `EC == live`, nothing pending;
//! 5. `failure-path` (with `--failure-path`): a batch of its own scope
//!    `verify-<run>-dlq`, failed on purpose, is counted by the reprocessor
//!    from its on-failure record in DLQ1 ([`failure`]);
//! 6. `audit`: the audit engine finds nothing in those scopes;
//! 7. `cleanup`: every item it wrote is deleted (and hard-deleted by the
//!    stream), then the scopes' counter items and limit overrides removed.
//!
//! `--dry-run` lists what would be written. The report exits 0 only when
//! every check passed, 1 otherwise (the documented codes: 3 without the
//! stack, 4 when a call fails).

use std::fmt;
use std::time::{Duration, Instant};

use hybrid_counter::audit::{Auditor, RepairMode, count_over};
use hybrid_counter::{
    AuditStore as _, Counter, Error as CounterError, ResourceId, Scope, StreamStore as _, now_millis,
};
use hybrid_counter_aws::DynamoStore;
use serde::Serialize;

use super::{Context, Location};
use crate::config::VerifyOptions;
use crate::error::{Result, invalid};

pub mod failure;
mod support;

use support::{Outcome, Verify, during, id, room_for};

/// One check's outcome.
#[derive(Debug, Clone, Serialize)]
pub struct Check {
    pub name: &'static str,
    pub passed: bool,
    pub seconds: f64,
    pub detail: String,
}

#[derive(Debug, Clone, Serialize)]
pub struct VerifyReport {
    #[serde(flatten)]
    pub location: Location,
    pub run: String,
    pub scopes: Vec<String>,
    pub dry_run: bool,
    /// What a run writes (the plan, with `--dry-run`).
    pub writes: Vec<String>,
    pub checks: Vec<Check>,
    pub seconds: f64,
}

impl VerifyReport {
    /// Every check ran and passed (a dry run checks nothing and succeeds).
    pub fn passed(&self) -> bool {
        self.checks.iter().all(|c| c.passed)
    }
}

/// The scopes of one run.
fn scopes_of(run: &str, count: u32) -> Result<Vec<Scope>> {
    (0..count)
        .map(|n| Scope::new(format!("verify-{run}-{n}")).map_err(invalid))
        .collect()
}

/// What `options` would write, in words.
fn plan(scopes: &[Scope], options: &VerifyOptions) -> Vec<String> {
    let deletes = options.operations / 4;
    let mut writes: Vec<String> = scopes
        .iter()
        .map(|s| {
            format!(
                "{s}: set a limit override with room for the run, create {} items (v0..v{}), delete {deletes} of them",
                options.operations,
                options.operations - 1
            )
        })
        .collect();
    if let Some(first) = scopes.first() {
        writes.push(format!(
            "{first}: set its limit override to its live count (with several keys: the key of the next id full at \
             its share), try one create more (must be refused)"
        ));
        writes.push(format!(
            "{first}: create, delete and, once the stream removed it, create `again` again"
        ));
    }
    writes.push("then delete every item written, wait for the stream to remove them, and remove the scopes' counter and limit items".into());
    writes
}

/// Runs the checks; a failed check is recorded and the rest still run
/// where they can (the cleanup always does).
pub async fn run(ctx: &Context<'_>, options: &VerifyOptions) -> Result<VerifyReport> {
    let started = Instant::now();
    let deployed = super::deployed::deployed(ctx).await?;
    let config = deployed.checked_counter_config(ctx).await?;
    let run = format!("{:x}{:04x}", now_millis(), fastrand::u16(..));
    let scopes = scopes_of(&run, options.scopes)?;
    let failure_scope = if options.failure_path {
        Some(failure::scope_of(&run)?)
    } else {
        None
    };
    let mut writes = plan(&scopes, options);
    if let Some(scope) = &failure_scope {
        let cleanup = writes.pop();
        writes.extend(failure::plan(scope));
        writes.extend(cleanup);
    }
    let all_scopes: Vec<Scope> = scopes.iter().chain(&failure_scope).cloned().collect();
    let mut report = VerifyReport {
        location: Location::of(ctx),
        run,
        scopes: all_scopes.iter().map(ToString::to_string).collect(),
        dry_run: options.dry_run,
        writes,
        checks: Vec::new(),
        seconds: 0.0,
    };
    if options.dry_run {
        return Ok(report);
    }
    let target = match failure_scope {
        Some(_) => Some(failure_target(&deployed)?),
        None => None,
    };
    let store = DynamoStore::new(ctx.clients.dynamodb.clone(), &config);
    let counter = Counter::configured(store.clone(), config.default_limit.unwrap_or(u64::MAX), &config);
    let verify = Verify {
        ctx,
        config: &config,
        store: &store,
        counter: &counter,
        scopes: &scopes,
        options,
        outputs: &deployed.stack.outputs,
    };
    let mut checks = Vec::new();
    checks.push(timed("writes", verify.writes()).await?);
    checks.push(timed("limit", verify.limit()).await?);
    checks.push(timed("re-create", verify.recreate()).await?);
    checks.push(timed("stream", verify.stream_counts_everything()).await?);
    if let (Some(scope), Some(target)) = (&failure_scope, &target) {
        checks.push(timed("failure-path", verify.failure_path(scope, target)).await?);
    }
    // The audit and the cleanup cover the failure path's scope too.
    let verify = Verify {
        scopes: &all_scopes,
        ..verify
    };
    let auditor = Auditor::configured(&store, &config);
    checks.push(timed("audit", verify.audit(&auditor)).await?);
    checks.push(timed("cleanup", verify.cleanup()).await?);
    report.checks = checks;
    report.seconds = started.elapsed().as_secs_f64();
    Ok(report)
}

/// The stack's stream, DLQ1 and stream function, for `--failure-path`.
fn failure_target(deployed: &super::deployed::Deployed) -> Result<failure::Target> {
    let dlq1_arn = deployed.output(stack::outputs::DLQ1_ARN)?;
    let function = deployed.output(stack::outputs::STREAM_COUNTER_FUNCTION)?;
    // The function's ARN in DLQ1's region and account (the stack's).
    let function_arn = match hybrid_counter_aws::sqs::parse_queue_arn(&dlq1_arn) {
        Some((region, account, _)) => format!("arn:aws:lambda:{region}:{account}:function:{function}"),
        None => function,
    };
    Ok(failure::Target {
        stream_arn: deployed.output(stack::outputs::RESOURCES_TABLE_STREAM_ARN)?,
        dlq1_url: deployed.output(stack::outputs::DLQ1_URL)?,
        function_arn,
    })
}

/// Runs one check and times it; `Ok(Err(detail))` is a failed check, an
/// `Err` a call that could not be made.
async fn timed(
    name: &'static str,
    check: impl std::future::Future<Output = Result<std::result::Result<String, String>>>,
) -> Result<Check> {
    let started = Instant::now();
    let (passed, detail) = match check.await? {
        Ok(detail) => (true, detail),
        Err(detail) => (false, detail),
    };
    Ok(Check {
        name,
        passed,
        seconds: started.elapsed().as_secs_f64(),
        detail,
    })
}

impl Verify<'_> {
    async fn writes(&self) -> Outcome {
        let (mut created, mut deleted) = (0, 0);
        for scope in self.scopes {
            self.ctx.ui.step(format!("verify: writing in {scope}"));
            // Room for the run whatever the stack's default limit is.
            self.store
                .set_scope_limit(
                    self.config.scope_keys,
                    scope,
                    Some(room_for(self.config.scope_keys, self.options.operations + 1)),
                    now_millis(),
                )
                .await
                .map_err(during("setting a limit override"))?;
            for n in 0..self.options.operations {
                match self
                    .counter
                    .create(scope, &id(format!("v{n}"))?, Default::default(), now_millis())
                    .await
                {
                    Ok(_) => created += 1,
                    Err(err) => return Ok(Err(format!("create {scope}/v{n} answered {err}"))),
                }
            }
            for n in (0..self.options.operations).step_by(4) {
                match self.counter.delete(scope, &id(format!("v{n}"))?, now_millis()).await {
                    Ok(()) => deleted += 1,
                    Err(err) => return Ok(Err(format!("delete {scope}/v{n} answered {err}"))),
                }
            }
            if let Err(err) = self.counter.delete(scope, &id("v0".into())?, now_millis()).await
                && !matches!(err, CounterError::NotFound)
            {
                return Ok(Err(format!(
                    "a repeated delete of {scope}/v0 answered {err}, not NotFound"
                )));
            }
        }
        Ok(Ok(format!(
            "{created} creates and {deleted} deletes answered as the API would; a repeated delete is NotFound"
        )))
    }

    async fn limit(&self) -> Outcome {
        let scope = &self.scopes[0];
        // A create is refused at its key's share: create on the fullest key.
        let mut fullest = (0, 0);
        for (index, key) in self.keys(scope)?.iter().enumerate() {
            let live = count_over(self.store, self.config.scope_keys, key)
                .await
                .map_err(during("counting a scope"))?
                .live;
            if index == 0 || live > fullest.1 {
                fullest = (index as u32, live);
            }
        }
        let over = over_id(self.config.scope_keys, fullest.0)?;
        let limit = refusing_limit(self.config.scope_keys, fullest.1);
        self.store
            .set_scope_limit(self.config.scope_keys, scope, Some(limit), now_millis())
            .await
            .map_err(during("setting a limit override"))?;
        let answer = self
            .counter
            .create(scope, &over, Default::default(), now_millis())
            .await;
        Ok(judge_refusal(answer.map(drop), limit))
    }

    /// Waits until the stream pipeline counted every item of the scopes.
    async fn stream_counts_everything(&self) -> Outcome {
        let started = Instant::now();
        loop {
            let mut pending = 0;
            let mut off = Vec::new();
            for scope in self.scopes {
                let count = self.scope_count(scope).await?;
                pending += count.pending;
                if !count.settled() {
                    off.push(format!("{scope}: EC {}, live {}", count.eventual, count.live));
                }
            }
            if off.is_empty() {
                return Ok(Ok(format!(
                    "the stream counted every item in {:.1}s (EC == live, nothing pending)",
                    started.elapsed().as_secs_f64()
                )));
            }
            if let Some(problem) = self.runner_problem(started.elapsed()).await {
                return Ok(Err(format!("{pending} item changes are not counted: {problem}")));
            }
            if started.elapsed() >= self.options.timeout {
                return Ok(Err(format!(
                    "after {}s, {pending} item changes are still not counted ({}): is the stream mapping enabled \
                     and its function healthy? See `counterctl status`",
                    self.options.timeout.as_secs(),
                    off.join("; ")
                )));
            }
            self.ctx.ui.step(format!(
                "verify: waiting for the stream to count {pending} changes ({:.0}s)",
                started.elapsed().as_secs_f64()
            ));
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }

    /// Waits until none of `ids` of `scope` exists any more (the stream
    /// counter removes a deleted item once it uncounted it); `Err` says why
    /// not: the timeout, or at once what the local runner reports.
    async fn gone(&self, scope: &Scope, ids: &[ResourceId]) -> Result<std::result::Result<(), String>> {
        let started = Instant::now();
        let keys = ids
            .iter()
            .map(|id| {
                Ok(hybrid_counter::store::ResourceKey {
                    scope: self.config.scope_keys.resource_key_of(scope, id).map_err(invalid)?,
                    id: id.clone(),
                })
            })
            .collect::<Result<Vec<_>>>()?;
        while started.elapsed() < self.options.timeout {
            let states = self.store.get_resources(&keys).await.map_err(during("reading items"))?;
            if states.iter().all(Option::is_none) {
                return Ok(Ok(()));
            }
            if let Some(problem) = self.runner_problem(started.elapsed()).await {
                return Ok(Err(format!("the stream did not remove the deleted items: {problem}")));
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
        Ok(Err(format!(
            "the stream did not remove the deleted items within {}s",
            self.options.timeout.as_secs()
        )))
    }

    async fn recreate(&self) -> Outcome {
        let scope = &self.scopes[0];
        let again = id("again".into())?;
        // Room for it under the override the limit check set.
        self.store
            .set_scope_limit(self.config.scope_keys, scope, None, now_millis())
            .await
            .map_err(during("clearing a limit override"))?;
        if let Err(err) = self
            .counter
            .create(scope, &again, Default::default(), now_millis())
            .await
        {
            return Ok(Err(format!("the first create answered {err}")));
        }
        if let Err(err) = self.counter.delete(scope, &again, now_millis()).await {
            return Ok(Err(format!("the delete answered {err}")));
        }
        if let Err(why) = self.gone(scope, std::slice::from_ref(&again)).await? {
            return Ok(Err(why));
        }
        Ok(
            match self
                .counter
                .create(scope, &again, Default::default(), now_millis())
                .await
            {
                Ok(_) => Ok("an id deleted and removed by the stream was created again".into()),
                Err(err) => Err(format!("creating the id again answered {err}")),
            },
        )
    }

    async fn audit(&self, auditor: &Auditor<'_, DynamoStore>) -> Outcome {
        let mut found = Vec::new();
        for scope in self.scopes {
            for key in self.keys(scope)? {
                let audit = auditor
                    .audit_scope(&key, RepairMode::None, now_millis())
                    .await
                    .map_err(during("auditing a scope"))?;
                if !audit.findings.is_empty() || audit.eventual != audit.counts.live as i64 {
                    found.push(format!(
                        "{key}: EC {}, live {}, findings {:?}",
                        audit.eventual, audit.counts.live, audit.findings
                    ));
                }
            }
        }
        Ok(if found.is_empty() {
            Ok(format!("{} scopes audited, nothing found", self.scopes.len()))
        } else {
            Err(found.join("; "))
        })
    }

    /// Deletes what the run wrote; always runs.
    async fn cleanup(&self) -> Outcome {
        let mut left = Vec::new();
        let mut removed = 0;
        for scope in self.scopes {
            let _ = self
                .store
                .set_scope_limit(self.config.scope_keys, scope, None, now_millis())
                .await;
            let mut ids = Vec::new();
            for key in self.resource_keys(scope)? {
                let items = self.store.scope_items(&key).await.map_err(during("listing items"))?;
                for row in items.iter().filter(|r| r.is_kits()) {
                    let item = id(row.id.clone())?;
                    if !row.deleted {
                        match self.counter.delete(scope, &item, now_millis()).await {
                            Ok(()) | Err(CounterError::NotFound) => {}
                            Err(err) => return Ok(Err(format!("deleting {scope}/{} answered {err}", row.id))),
                        }
                    }
                    ids.push(item);
                }
            }
            if let Err(why) = self.gone(scope, &ids).await? {
                left.push(format!("{scope}: {why}"));
                continue;
            }
            for key in self.keys(scope)? {
                removed += self
                    .store
                    .remove_scope_counters(&key)
                    .await
                    .map_err(during("removing a scope's counters"))?;
            }
        }
        Ok(if left.is_empty() {
            Ok(format!("every item written removed, and {removed} counter items"))
        } else {
            Err(format!("left behind: {}", left.join("; ")))
        })
    }
}

/// An id of the limit check's create that lands on key `index`: `over`
/// under one key, else the first of `over`, `over-1`, `over-2`, ... that
/// hashes there.
fn over_id(keys: hybrid_counter::scope_keys::ScopeKeys, index: u32) -> Result<ResourceId> {
    let candidates = std::iter::once("over".to_owned()).chain((1..10_000).map(|n| format!("over-{n}")));
    for candidate in candidates {
        let id = id(candidate)?;
        if keys.index(&id) == index {
            return Ok(id);
        }
    }
    id("over".into())
}

/// The override at which a create of an id on a key holding `on_key` live
/// items is refused: that key's share of it is `on_key` (the scope's live
/// count under one key; with N keys, N times the key's items, so every
/// share is `on_key` whatever the other keys hold).
fn refusing_limit(keys: hybrid_counter::scope_keys::ScopeKeys, on_key: u64) -> u64 {
    on_key * u64::from(keys.count())
}

/// The limit check's verdict on a create's `answer` at the override
/// `limit`: refused at the scope's limit, or at its key's share of it.
fn judge_refusal(answer: std::result::Result<(), CounterError>, limit: u64) -> std::result::Result<String, String> {
    match answer {
        Err(CounterError::LimitExceeded { usage, limit: at }) if at == limit => Ok(format!(
            "a create at the override ({limit}) was refused (usage {usage})"
        )),
        Err(CounterError::ShareExceeded {
            usage,
            share,
            limit: at,
            key,
            keys,
        }) if at == limit => Ok(format!(
            "a create at the override ({limit}) was refused at its key's share ({share} on key {key} of {keys}, \
             usage {usage})"
        )),
        Err(err) => Err(format!("a create at the override {limit} answered {err}")),
        Ok(()) => Err(format!(
            "a create at the override {limit} was admitted: the limit is not enforced"
        )),
    }
}

impl fmt::Display for VerifyReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "Verify stack {} ({}), run {} in {}",
            self.location.stack_name,
            self.location.target,
            self.run,
            self.scopes.join(", ")
        )?;
        if self.dry_run {
            writeln!(f, "Dry run: nothing written. A run would:")?;
            for line in &self.writes {
                writeln!(f, "  {line}")?;
            }
            return Ok(());
        }
        for check in &self.checks {
            writeln!(
                f,
                "  {:<4}  {:<12} {:>6.1}s  {}",
                if check.passed { "PASS" } else { "FAIL" },
                check.name,
                check.seconds,
                check.detail
            )?;
        }
        let failed = self.checks.iter().filter(|c| !c.passed).count();
        if failed == 0 {
            writeln!(f, "Result: PASSED ({} checks, {:.1}s)", self.checks.len(), self.seconds)
        } else {
            writeln!(f, "Result: FAILED ({failed} of {} checks)", self.checks.len())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scopes_are_unique_per_run_and_valid() {
        let a = scopes_of("18c0ffee0001", 3).unwrap();
        let b = scopes_of("18c0ffee0002", 3).unwrap();
        assert_eq!(a[2].as_str(), "verify-18c0ffee0001-2");
        assert!(a.iter().all(|s| !b.contains(s)));
    }

    #[test]
    fn the_plan_names_every_write_and_the_cleanup() {
        let scopes = scopes_of("r", 2).unwrap();
        let options = VerifyOptions {
            scopes: 2,
            operations: 8,
            timeout: Duration::from_secs(5),
            dry_run: true,
            failure_path: false,
        };
        let text = plan(&scopes, &options).join("\n");
        assert!(text.contains("create 8 items (v0..v7), delete 2"), "{text}");
        assert!(text.contains("verify-r-1"), "{text}");
        assert!(
            text.contains("limit override") && text.contains("remove the scopes' counter"),
            "{text}"
        );
    }

    #[tokio::test]
    async fn at_four_keys_the_limit_check_fills_the_key_of_its_create_and_counts_cover_every_key() {
        use std::sync::Arc;

        use hybrid_counter::memory::MemoryStore;
        use hybrid_counter::scope_keys::ScopeKeys;

        let config = hybrid_counter::CounterConfig {
            resources_table: "r".into(),
            counters_table: "c".into(),
            default_limit: Some(100),
            eventual_shards: 1,
            best_effort_shards: 1,
            admission: hybrid_counter::Admission::BestEffort,
            scope_keys: ScopeKeys::new(4).unwrap(),
        };
        let store = Arc::new(MemoryStore::new());
        let counter = Counter::configured(store.clone(), 100, &config);
        let scope = Scope::new("verify-r-0").unwrap();
        for n in 0..12 {
            counter
                .create(&scope, &id(format!("v{n}")).unwrap(), Default::default(), 1)
                .await
                .unwrap();
        }
        let count = support::count_keys(&*store, config.scope_keys, &scope).await.unwrap();
        assert_eq!((count.live, count.pending), (12, 12), "every key is counted");

        let over = over_id(config.scope_keys, 2).unwrap();
        assert_eq!(config.scope_keys.index(&over), 2);
        assert_eq!(over_id(ScopeKeys::default(), 0).unwrap().as_str(), "over");
        let key = config.scope_keys.key_of(&scope, &over).unwrap();
        let on_key = hybrid_counter::audit::count_scope(&*store, &key).await.unwrap().live;
        assert!(on_key > 0, "12 items over 4 keys");
        let limit = refusing_limit(config.scope_keys, on_key);
        for k in 0..4 {
            store.set_limit(&format!("verify-r-0#{k}"), Some(limit));
        }
        let answer = counter.create(&scope, &over, Default::default(), 1).await.map(drop);
        let verdict = judge_refusal(answer, limit);
        assert!(verdict.as_ref().is_ok_and(|d| d.contains("key's share")), "{verdict:?}");
        // Room for 5 creates on any key of 4, whichever they land on.
        assert_eq!(room_for(config.scope_keys, 5), 20);
        assert_eq!(room_for(ScopeKeys::default(), 5), 5);
        // One key: the scope's live count, refused as LimitExceeded.
        assert_eq!(refusing_limit(ScopeKeys::default(), 12), 12);
        let refused = Err(CounterError::LimitExceeded { usage: 12, limit: 12 });
        assert!(judge_refusal(refused, 12).is_ok());
        assert!(judge_refusal(Ok(()), 12).unwrap_err().contains("not enforced"));
    }

    #[test]
    fn a_report_passes_only_when_every_check_passed() {
        let check = |passed| Check {
            name: "x",
            passed,
            seconds: 0.0,
            detail: String::new(),
        };
        let mut report = VerifyReport {
            location: Location {
                stack_name: "s".into(),
                target: "local".into(),
                region: "us-east-1".into(),
                endpoint: None,
            },
            run: "r".into(),
            scopes: vec![],
            dry_run: false,
            writes: vec![],
            checks: vec![check(true), check(true)],
            seconds: 1.0,
        };
        assert!(report.passed());
        report.checks.push(check(false));
        assert!(!report.passed());
        assert!(report.to_string().contains("Result: FAILED (1 of 3 checks)"));
    }
}
