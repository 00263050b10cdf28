//! `counterctl load`: a load generator over the counter library, against
//! whatever the target is. Concurrent workers create and delete items in a
//! set of scopes; the report gives throughput, latency percentiles per
//! operation, refusals, errors by kind, and the limit overshoots observed
//! (concurrent creators can pass `max(BE, EC) < limit` together: the design
//! accepts that, strict mode is the fix). After the run it waits for the
//! stream consumer to drain the scopes and audits them. A library caller
//! may watch every call's invocation and answer ([`CallObserver`]; the e2e
//! tests' history check does).

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use hybrid_counter::audit::{Auditor, RepairMode, ScopeAudit};
use hybrid_counter::scope_keys::ScopeKeys;
use hybrid_counter::{AuditStore, Counter, ResourceId, Scope};
use hybrid_counter_aws::DynamoStore;
use serde::Serialize;

use super::deployed::counter_config;
use super::{Context, Location};
pub use crate::config::CallObserver;
use crate::config::{LoadOptions, LoadStop};
use crate::error::{Error, Result, during, invalid};

/// Latency of one operation kind, milliseconds.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Latency {
    pub count: u64,
    pub p50_ms: f64,
    pub p95_ms: f64,
    pub p99_ms: f64,
    pub max_ms: f64,
}

impl Latency {
    fn of(mut micros: Vec<u64>) -> Self {
        micros.sort_unstable();
        let at = |q: f64| {
            if micros.is_empty() {
                return 0.0;
            }
            let i = ((micros.len() as f64 * q).ceil() as usize).clamp(1, micros.len()) - 1;
            micros[i] as f64 / 1000.0
        };
        Self {
            count: micros.len() as u64,
            p50_ms: at(0.50),
            p95_ms: at(0.95),
            p99_ms: at(0.99),
            max_ms: micros.last().map_or(0.0, |m| *m as f64 / 1000.0),
        }
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct Overshoot {
    pub scope: String,
    pub live: u64,
    pub limit: u64,
}

#[derive(Debug, Clone, Serialize)]
pub struct LoadReport {
    #[serde(flatten)]
    pub location: Location,
    pub scopes: u32,
    pub workers: u32,
    pub seconds: f64,
    pub operations: u64,
    pub operations_per_second: f64,
    pub create: Latency,
    pub delete: Latency,
    pub created: u64,
    pub deleted: u64,
    pub limit_exceeded: u64,
    /// Errors by kind (`AlreadyExists`, `NotFound`, `Unavailable`, ...).
    pub errors: BTreeMap<String, u64>,
    pub overshoots: Vec<Overshoot>,
    pub drained: bool,
    pub drain_seconds: f64,
    /// Scopes with findings after the drain (empty when clean or not drained).
    pub audit: Vec<ScopeAudit>,
    pub drift: bool,
}

impl LoadReport {
    pub fn healthy(&self) -> bool {
        !self.drift
    }
}

#[derive(Default)]
struct WorkerStats {
    create: Vec<u64>,
    delete: Vec<u64>,
    created: u64,
    deleted: u64,
    limit_exceeded: u64,
    errors: BTreeMap<String, u64>,
}

async fn worker(
    counter: Counter<DynamoStore>,
    scopes: Arc<Vec<Scope>>,
    number: u32,
    options: LoadOptions,
    issued: Arc<AtomicU64>,
    deadline: Option<Instant>,
) -> WorkerStats {
    let observer = options.observer.0.clone();
    let mut rng = fastrand::Rng::with_seed(options.seed.wrapping_add(u64::from(number)));
    let mut stats = WorkerStats::default();
    let mut mine: Vec<(Scope, ResourceId)> = Vec::new();
    let mut next_id = 0u64;
    loop {
        if deadline.is_some_and(|d| Instant::now() >= d) {
            break;
        }
        if let LoadStop::Operations(total) = options.stop
            && issued.fetch_add(1, Ordering::Relaxed) >= total
        {
            break;
        }
        if deadline.is_some() {
            issued.fetch_add(1, Ordering::Relaxed);
        }
        let now = hybrid_counter::now_millis();
        if !mine.is_empty() && rng.f64() < options.delete_ratio {
            let (scope, id) = mine.swap_remove(rng.usize(..mine.len()));
            let started = Instant::now();
            let token = observer.as_ref().map(|o| o.invoked(false, &scope, &id));
            let result = counter.delete(&scope, &id, now).await;
            stats.delete.push(started.elapsed().as_micros() as u64);
            if let (Some(observer), Some(token)) = (&observer, token) {
                observer.deleted(token, &result);
            }
            match result {
                Ok(()) => stats.deleted += 1,
                Err(err) => *stats.errors.entry(err.code().to_owned()).or_default() += 1,
            }
        } else {
            let scope = scopes[rng.usize(..scopes.len())].clone();
            let Ok(id) = ResourceId::new(format!("s{}-w{number}-{next_id}", options.seed)) else {
                break;
            };
            next_id += 1;
            let started = Instant::now();
            let token = observer.as_ref().map(|o| o.invoked(true, &scope, &id));
            let result = counter.create(&scope, &id, Default::default(), now).await;
            stats.create.push(started.elapsed().as_micros() as u64);
            if let (Some(observer), Some(token)) = (&observer, token) {
                observer.created(token, &result);
            }
            match result {
                Ok(_) => {
                    stats.created += 1;
                    mine.push((scope, id));
                }
                Err(err) if err.is_limit_exceeded() => stats.limit_exceeded += 1,
                Err(err) => *stats.errors.entry(err.code().to_owned()).or_default() += 1,
            }
        }
    }
    stats
}

pub async fn run(ctx: &Context<'_>, options: &LoadOptions) -> Result<LoadReport> {
    let config = counter_config(ctx).await?;
    let default_limit = config.default_limit.unwrap_or(u64::MAX);
    let store = DynamoStore::new(ctx.clients.dynamodb.clone(), &config);
    let auditor = Auditor::configured(&store, &config).with_attempts(5);
    let scopes: Vec<Scope> = (0..options.scopes.max(1))
        .map(|n| Scope::new(format!("{}-{n}", options.scope_prefix)))
        .collect::<std::result::Result<_, _>>()
        .map_err(|e| Error::ParamValue {
            key: "--scope-prefix".into(),
            value: options.scope_prefix.clone(),
            reason: e.to_string(),
        })?;
    if let Some(limit) = options.limit {
        for scope in &scopes {
            store
                .set_scope_limit(config.scope_keys, scope, Some(limit), hybrid_counter::now_millis())
                .await
                .map_err(during("setting the scope limits"))?;
        }
    }
    // The deployed stack's admission mode and best-effort shards, as its
    // API function runs them.
    let counter = Counter::configured(store.clone(), default_limit, &config);
    let scopes = Arc::new(scopes);
    let issued = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let deadline = match options.stop {
        LoadStop::Duration(d) => Some(started + d),
        LoadStop::Operations(_) => None,
    };
    let mut tasks = tokio::task::JoinSet::new();
    for number in 0..options.workers.max(1) {
        tasks.spawn(worker(
            counter.clone(),
            scopes.clone(),
            number,
            options.clone(),
            issued.clone(),
            deadline,
        ));
    }
    let mut stats = Vec::new();
    let mut tick = tokio::time::interval(Duration::from_millis(500));
    loop {
        tokio::select! {
            joined = tasks.join_next() => match joined {
                Some(Ok(s)) => stats.push(s),
                Some(Err(e)) => return Err(during("a load worker")(e)),
                None => break,
            },
            _ = tick.tick() => ctx.ui.step(format!(
                "load: {} operations in {:.1}s",
                issued.load(Ordering::Relaxed),
                started.elapsed().as_secs_f64()
            )),
        }
    }
    let seconds = started.elapsed().as_secs_f64();
    let mut create = Vec::new();
    let mut delete = Vec::new();
    let mut errors = BTreeMap::new();
    let (mut created, mut deleted, mut limit_exceeded) = (0, 0, 0);
    for s in stats {
        create.extend(s.create);
        delete.extend(s.delete);
        created += s.created;
        deleted += s.deleted;
        limit_exceeded += s.limit_exceeded;
        for (kind, n) in s.errors {
            *errors.entry(kind).or_default() += n;
        }
    }
    let operations = (create.len() + delete.len()) as u64;

    let drain_started = Instant::now();
    let mut drained = options.drain_timeout.is_zero();
    if !options.drain_timeout.is_zero() {
        while drain_started.elapsed() < options.drain_timeout {
            ctx.ui.step(format!(
                "waiting for the stream consumer to drain ({:.0}s)",
                drain_started.elapsed().as_secs_f64()
            ));
            if pending_of(&store, config.scope_keys, &scopes).await? == 0 {
                drained = true;
                break;
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }
    let limit = options.limit.unwrap_or(default_limit);
    let judged = drained && !options.drain_timeout.is_zero();
    let (overshoots, audit, drift) = check_scopes(&auditor, config.scope_keys, &scopes, limit, judged).await?;
    Ok(LoadReport {
        location: Location::of(ctx),
        scopes: options.scopes.max(1),
        workers: options.workers.max(1),
        seconds,
        operations,
        operations_per_second: if seconds > 0.0 {
            operations as f64 / seconds
        } else {
            0.0
        },
        create: Latency::of(create),
        delete: Latency::of(delete),
        created,
        deleted,
        limit_exceeded,
        errors,
        overshoots,
        drained: drained && !options.drain_timeout.is_zero(),
        drain_seconds: drain_started.elapsed().as_secs_f64(),
        audit,
        drift,
    })
}

/// The changes of `scopes`' items the stream has not counted yet, over
/// every key of each scope.
async fn pending_of<S: AuditStore>(store: &S, keys: ScopeKeys, scopes: &[Scope]) -> Result<u64> {
    let mut pending = 0;
    for scope in scopes {
        for key in keys.resource_keys(scope).map_err(invalid)? {
            let c = hybrid_counter::audit::count_scope(store, &key)
                .await
                .map_err(during("counting a scope"))?;
            pending += c.pending_create + c.pending_delete;
        }
    }
    Ok(pending)
}

/// Audits every key of each of `scopes`: a scope whose live items (over
/// its keys) pass `limit` overshot; with `judged` (the stream drained),
/// each key's findings, or an EC other than its live items, are drift.
async fn check_scopes<S: AuditStore>(
    auditor: &Auditor<'_, S>,
    keys: ScopeKeys,
    scopes: &[Scope],
    limit: u64,
    judged: bool,
) -> Result<(Vec<Overshoot>, Vec<ScopeAudit>, bool)> {
    let mut overshoots = Vec::new();
    let mut audit = Vec::new();
    let mut drift = false;
    for scope in scopes {
        let mut live = 0;
        for key in keys.keys(scope).map_err(invalid)? {
            let check = auditor
                .audit_scope(&key, RepairMode::None, hybrid_counter::now_millis())
                .await
                .map_err(during("auditing a scope"))?;
            live += check.counts.live;
            if judged {
                drift |= check.has_drift() || check.eventual != check.counts.live as i64;
                if !check.findings.is_empty() {
                    audit.push(check);
                }
            }
        }
        if live > limit {
            overshoots.push(Overshoot {
                scope: scope.to_string(),
                live,
                limit,
            });
        }
    }
    Ok((overshoots, audit, drift))
}

impl fmt::Display for LoadReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "Load on stack {} ({}): {} operations in {:.2}s = {:.1} ops/s ({} workers, {} scopes)",
            self.location.stack_name,
            self.location.target,
            self.operations,
            self.seconds,
            self.operations_per_second,
            self.workers,
            self.scopes
        )?;
        for (name, l) in [("create", &self.create), ("delete", &self.delete)] {
            writeln!(
                f,
                "  {name:<6} n={:<7} p50 {:.2} ms  p95 {:.2} ms  p99 {:.2} ms  max {:.2} ms",
                l.count, l.p50_ms, l.p95_ms, l.p99_ms, l.max_ms
            )?;
        }
        writeln!(
            f,
            "  created {}, deleted {}, LimitExceeded {}",
            self.created, self.deleted, self.limit_exceeded
        )?;
        if !self.errors.is_empty() {
            let list: Vec<String> = self.errors.iter().map(|(k, n)| format!("{k} {n}")).collect();
            writeln!(f, "  errors: {}", list.join(", "))?;
        }
        if self.overshoots.is_empty() {
            writeln!(f, "  no scope above its limit")?;
        } else {
            for o in &self.overshoots {
                writeln!(f, "  OVERSHOOT scope {}: {} live, limit {}", o.scope, o.live, o.limit)?;
            }
        }
        if self.drained {
            writeln!(
                f,
                "  stream drained in {:.1}s; audit: {}",
                self.drain_seconds,
                if self.drift { "DRIFT FOUND" } else { "clean" }
            )?;
        } else {
            writeln!(
                f,
                "  stream not drained (nothing consuming it? run `counterctl local run`); no audit"
            )?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use hybrid_counter::memory::MemoryStore;
    use hybrid_counter::{Admission, CounterConfig};

    use super::*;

    #[tokio::test]
    async fn the_drain_wait_and_the_audit_at_four_keys_cover_every_key_of_a_scope() {
        let config = CounterConfig {
            resources_table: "r".into(),
            counters_table: "c".into(),
            default_limit: Some(100),
            eventual_shards: 1,
            best_effort_shards: 1,
            admission: Admission::BestEffort,
            scope_keys: ScopeKeys::new(4).unwrap(),
        };
        let store = Arc::new(MemoryStore::new());
        let counter = Counter::configured(store.clone(), 100, &config);
        let scopes = [Scope::new("load-0").unwrap()];
        for n in 0..12 {
            let id = ResourceId::new(format!("r-{n}")).unwrap();
            counter.create(&scopes[0], &id, Default::default(), 1).await.unwrap();
        }
        // No stream ran: every create is still pending.
        assert_eq!(pending_of(&*store, config.scope_keys, &scopes).await.unwrap(), 12);
        let auditor = Auditor::configured(&*store, &config);
        let (overshoots, _, _) = check_scopes(&auditor, config.scope_keys, &scopes, 10, false)
            .await
            .unwrap();
        assert_eq!(overshoots.len(), 1, "12 live items over the keys pass a limit of 10");
        assert_eq!((overshoots[0].scope.as_str(), overshoots[0].live), ("load-0", 12));
        // Judged, the uncounted items are drift on the keys that hold them.
        let (_, _, drift) = check_scopes(&auditor, config.scope_keys, &scopes, 100, true)
            .await
            .unwrap();
        assert!(drift);
    }

    #[test]
    fn percentiles_use_the_nearest_rank() {
        let l = Latency::of((1..=100).map(|ms| ms * 1000).collect());
        assert_eq!(
            (l.count, l.p50_ms, l.p95_ms, l.p99_ms, l.max_ms),
            (100, 50.0, 95.0, 99.0, 100.0)
        );
        let empty = Latency::of(Vec::new());
        assert_eq!(empty.count, 0);
        assert_eq!(empty.p99_ms, 0.0);
    }
}
