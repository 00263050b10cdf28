//! The local event-source runner: plays the Lambda event source mappings
//! deployed in an emulator that cannot run Lambda code itself (DESIGN §8).
//!
//! It reads the mappings back from the emulator's Lambda API through the
//! AWS layer (`hybrid_counter_aws::esm`) into its own [`Mapping`]s
//! ([`discover`]), polls their sources — DynamoDB stream shards
//! ([`stream`]) and SQS queues ([`sqs`], on `hybrid_counter_aws::sqs`) —
//! and invokes the target functions through an [`Invoke`] implementation:
//! normally the prebuilt handler binaries, each polling a Lambda runtime
//! API the runner serves ([`process`]), in tests a closure ([`FnInvoker`]). Batch
//! size, filter criteria, partial batch responses, bisect on error, retry
//! and record-age limits, the on-failure destination and per-shard ordering
//! follow AWS; the decisions themselves are pure functions in [`batch`].
//!
//! Two ways to drive it: [`run`] polls until a shutdown future completes
//! (`counterctl local run`); [`run_until_idle`] drains what the sources hold
//! now and returns (tests, `counterctl load`).
//!
//! fakecloud's own SQS poller runs even without a container engine and then
//! deletes every message of a mapped queue unprocessed (it counts the
//! missing invocation as a success). So the runner takes an enabled SQS
//! mapping over: it tags the target function (`esm-runner:plays:<uuid>`),
//! disables the emulator's copy of the mapping, and keeps playing it, also
//! in later runs. Stream mappings need no such step: the emulator's stream
//! poller only advances its own checkpoint.
//!
//! LocalStack ([`Host::LocalStack`]) runs both mappings itself, but its
//! stream mapping has no `BisectBatchOnFunctionError` and no
//! `ParallelizationFactor`. To play them with the kit's semantics instead,
//! the runner takes both over the same way while it plays, and
//! [`Runner::hand_back`] enables LocalStack's copies again (and removes the
//! tags) when it stops.

pub mod batch;
pub mod binaries;
mod ctx;
mod deployed;
pub mod discover;
pub mod error;
pub mod function_url;
mod health;
pub mod invoke;
pub mod process;
pub mod report;
pub mod role;
mod runtime_api;
pub mod schedule;
pub mod sqs;
pub mod stream;
pub mod url_event;

use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use hybrid_counter_aws::streams::ShardReader;
use tokio::task::JoinSet;
use tokio::time::Instant;
use tracing::{info, warn};

pub use discover::{Mapping, Source};
pub use error::Error;
pub use invoke::{FnInvoker, Invocation, Invoke};
pub use process::{HandlerProcesses, ProcessConfig};
pub use report::{MappingReport, RunReport, ScheduleReport, ServedUrl};
pub use role::{FunctionRoles, emulator_sdk_config};
pub use schedule::Schedule;

pub use ctx::{Clock, DEFAULT_FUNCTION_URL_PORT, Host, RunnerConfig};
pub use health::FIRST_HEARTBEAT;

use crate::ctx::{Ctx, Drained};
use crate::error::sdk_message;
use hybrid_counter_aws::esm::{TakeOverError, takeover_tag};

/// Serves the deployed function URLs and plays the deployed mappings
/// through the prebuilt handler binaries until `shutdown` completes; the batch in
/// flight on each source finishes first, then the handler processes stop.
pub async fn run(config: RunnerConfig, shutdown: impl Future<Output = ()>) -> Result<RunReport, Error> {
    let invoker = HandlerProcesses::new(config.processes.clone(), &config.endpoint, &config.region)?;
    let runner = Runner::connect(config, invoker).await?;
    for url in runner.serve_function_urls().await? {
        info!("{}", url.describe());
    }
    runner.run(shutdown).await
}

/// Plays the deployed mappings through the prebuilt handler binaries until every
/// source is drained, then returns (the handler processes are stopped).
pub async fn run_until_idle(config: RunnerConfig) -> Result<RunReport, Error> {
    let invoker = HandlerProcesses::new(config.processes.clone(), &config.endpoint, &config.region)?;
    Runner::connect(config, invoker).await?.run_until_idle().await
}

/// The runner's Lambda client: on a LocalStack-compatible emulator it reads
/// mappings whose numbers come as strings (ministack's, created by its
/// CloudFormation; [`hybrid_counter_aws::emulator::string_numbers`]).
fn lambda_client(sdk: &aws_config::SdkConfig, host: Host) -> aws_sdk_lambda::Client {
    let config = aws_sdk_lambda::config::Builder::from(sdk);
    let config = match host {
        Host::LocalStack => hybrid_counter_aws::emulator::string_numbers::mended(config),
        Host::Fakecloud => config,
    };
    aws_sdk_lambda::Client::from_conf(config.build())
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum Key {
    Shard {
        uuid: String,
        shard_id: String,
    },
    /// A mapping's UUID.
    Queue(String),
    /// A scheduled function.
    Schedule(String),
}

struct Job {
    key: Key,
    mapping: Arc<Mapping>,
    shard_closed: bool,
}

/// Plays the mappings of one emulator with one invoker.
pub struct Runner<I> {
    ctx: Arc<Ctx<I>>,
    /// The emulator's copies disabled while the runner plays them, to be
    /// enabled again by [`Runner::hand_back`] (LocalStack only).
    taken_over: Mutex<Vec<Mapping>>,
}

impl<I: Invoke> Runner<I> {
    /// Connects to the emulator named by `config` (with dummy credentials);
    /// nothing is read until the runner runs.
    pub async fn connect(config: RunnerConfig, invoker: I) -> Result<Self, Error> {
        let sdk = emulator_sdk_config(&config.endpoint, &config.region).await;
        Ok(Self {
            ctx: Arc::new(Ctx {
                invoker,
                streams: aws_sdk_dynamodbstreams::Client::new(&sdk),
                sqs: aws_sdk_sqs::Client::new(&sdk),
                s3: hybrid_counter_aws::s3::client(&sdk),
                lambda: lambda_client(&sdk, config.host),
                config,
                clock: Arc::new(SystemTime::now),
                stopping: AtomicBool::new(false),
                checkpoints: Mutex::default(),
                finished_shards: Mutex::default(),
                schedules: Mutex::default(),
                report: Mutex::default(),
                queue_urls: tokio::sync::Mutex::default(),
                served: Mutex::default(),
            }),
            taken_over: Mutex::default(),
        })
    }

    /// Replaces the wall clock (record age is measured against it).
    pub fn with_clock(mut self, clock: impl Fn() -> SystemTime + Send + Sync + 'static) -> Self {
        Arc::get_mut(&mut self.ctx).expect("runner not started yet").clock = Arc::new(clock);
        self
    }

    /// The invoker, e.g. to inspect what a test double saw.
    pub fn invoker(&self) -> &I {
        &self.ctx.invoker
    }

    /// What the runner did so far.
    pub fn report(&self) -> RunReport {
        self.ctx.report.lock().expect("report lock").clone()
    }

    /// The last sequence number processed on a shard, if any.
    pub fn checkpoint(&self, uuid: &str, shard_id: &str) -> Option<String> {
        self.ctx.checkpoint(uuid, shard_id)
    }

    /// Serves the function URLs of the configured functions (all deployed
    /// ones when none are configured) on loopback, from
    /// `function_url_port` on, through the invoker ([`function_url`]);
    /// [`Runner::run`] stops serving them when it stops. Returns what is
    /// served (nothing with an invoker that cannot serve HTTP).
    pub async fn serve_function_urls(&self) -> Result<Vec<ServedUrl>, Error> {
        let ctx = &self.ctx;
        let functions = match &ctx.config.functions {
            Some(functions) => functions.clone(),
            None => discover::function_names(&ctx.lambda).await?,
        };
        let first_port = ctx.config.function_url_port;
        let served = function_url::serve(&ctx.lambda, &ctx.invoker, &functions, first_port).await?;
        ctx.served.lock().expect("served lock").extend(served.iter().cloned());
        ctx.report
            .lock()
            .expect("report lock")
            .function_urls
            .clone_from(&served);
        Ok(served)
    }

    /// Reads the mappings and the schedules, takes SQS mappings over from
    /// the emulator's own poller, and lets the invoker prepare for their
    /// functions; an `Err` when one of them cannot be prepared
    /// ([`Runner::discover_all`] plays the others).
    pub async fn discover(&self) -> Result<Vec<Mapping>, Error> {
        match self.discover_all().await? {
            (_, Some(err)) => Err(err),
            (mappings, None) => Ok(mappings),
        }
    }

    /// [`Runner::discover`], with the invoker's failure to prepare a
    /// function beside the mappings: one broken function does not keep the
    /// others' mappings from being played.
    pub async fn discover_all(&self) -> Result<(Vec<Mapping>, Option<Error>), Error> {
        let ctx = &self.ctx;
        let mappings = discover::discover(&ctx.lambda, &ctx.sqs, ctx.config.functions.as_deref()).await?;
        let host = ctx.config.host;
        for mapping in &mappings {
            if mapping.emulator_enabled && host.takes_over(&mapping.source) {
                self.take_over(mapping).await?;
            }
            // A disabled mapping played here was taken over, in this run or
            // in one that ended without handing it back.
            if host.hands_back() {
                let mut taken = self.taken_over.lock().expect("taken-over lock");
                if !taken.iter().any(|m| m.uuid == mapping.uuid) {
                    taken.push(mapping.clone());
                }
            }
            ctx.update_report(mapping, |entry| {
                entry.uuid.clone_from(&mapping.uuid);
                entry.function_name.clone_from(&mapping.function_name);
                entry.source_arn.clone_from(&mapping.source_arn);
                entry.kind = match mapping.source {
                    Source::Stream(_) => "stream".to_owned(),
                    Source::Queue(_) => "sqs".to_owned(),
                };
            });
        }
        // After the takeover: the emulator's own SQS poller deletes mapped
        // messages until then.
        let schedules = if host.plays_schedules() {
            schedule::discover(&ctx.lambda, ctx.config.functions.as_deref()).await?
        } else {
            Vec::new()
        };
        {
            let mut report = ctx.report.lock().expect("report lock");
            for s in &schedules {
                let entry = report.schedules.entry(s.function_name.clone()).or_default();
                entry.function_name.clone_from(&s.function_name);
                entry.expression.clone_from(&s.expression);
            }
        }
        let targets: Vec<String> = (mappings.iter().map(|m| &m.function_name))
            .chain(schedules.iter().map(|s| &s.function_name))
            .cloned()
            .collect();
        *ctx.schedules.lock().expect("schedules lock") = schedules;
        let prepared = ctx.invoker.prepare(&targets).await;
        Ok((mappings, prepared.err()))
    }

    /// Enables the emulator's copies of the mappings this runner took over
    /// again and removes their tags (LocalStack; nothing on fakecloud, whose
    /// SQS poller would delete the messages unprocessed). Call it once the
    /// runner stopped; returns the mappings handed back. Each one is tried
    /// even when an earlier one failed; the first error is returned.
    pub async fn hand_back(&self) -> Result<Vec<String>, Error> {
        let taken: Vec<Mapping> = std::mem::take(&mut *self.taken_over.lock().expect("taken-over lock"));
        let lambda = &self.ctx.lambda;
        let mut handed = Vec::new();
        let mut first_error = None;
        for mapping in taken {
            let enabled = lambda
                .update_event_source_mapping()
                .uuid(&mapping.uuid)
                .enabled(true)
                .send()
                .await
                .map_err(|e| Error::emulator("Lambda", "UpdateEventSourceMapping")(sdk_message(e)));
            let untagged = lambda
                .untag_resource()
                .resource(&mapping.function_arn)
                .tag_keys(takeover_tag(&mapping.uuid))
                .send()
                .await
                .map_err(|e| Error::emulator("Lambda", "UntagResource")(sdk_message(e)));
            match enabled.and(untagged) {
                Ok(_) => {
                    info!(mapping = %mapping.uuid, source = %mapping.source_arn, "handed the mapping back to the emulator");
                    handed.push(mapping.uuid);
                }
                Err(err) => {
                    warn!(mapping = %mapping.uuid, error = %err, "could not hand the mapping back");
                    first_error.get_or_insert(err);
                }
            }
        }
        match first_error {
            Some(err) => Err(err),
            None => Ok(handed),
        }
    }

    async fn take_over(&self, mapping: &Mapping) -> Result<(), Error> {
        hybrid_counter_aws::esm::take_over(&self.ctx.lambda, &mapping.uuid, &mapping.function_arn)
            .await
            .map_err(|e| match e {
                TakeOverError::Tag(e) => Error::emulator("Lambda", "TagResource")(sdk_message(e)),
                TakeOverError::Disable(e) => Error::emulator("Lambda", "UpdateEventSourceMapping")(sdk_message(e)),
            })?;
        info!(
            mapping = %mapping.uuid,
            source = %mapping.source_arn,
            host = ?self.ctx.config.host,
            "took the mapping over: the emulator's own copy is disabled while the runner plays it"
        );
        Ok(())
    }

    async fn jobs(&self, mappings: &[Mapping]) -> Result<Vec<Job>, Error> {
        let mut jobs = Vec::new();
        for mapping in mappings {
            let shared = Arc::new(mapping.clone());
            match &mapping.source {
                Source::Queue(_) => jobs.push(Job {
                    key: Key::Queue(mapping.uuid.clone()),
                    mapping: shared,
                    shard_closed: false,
                }),
                Source::Stream(_) => {
                    let reader = ShardReader::new(self.ctx.streams.clone(), mapping.source_arn.clone());
                    let shards = reader
                        .shards()
                        .await
                        .map_err(|e| Error::emulator("DynamoDB Streams", "DescribeStream")(e.to_string()))?;
                    let finished = self.ctx.finished_shards.lock().expect("finished lock").clone();
                    let lineage: Vec<(&str, Option<&str>)> = shards
                        .iter()
                        .map(|s| (s.shard_id.as_str(), s.parent_shard_id.as_deref()))
                        .collect();
                    // A child shard waits until its parent is read to its
                    // end, so an item's records stay in order.
                    let readable = batch::readable_shards(&lineage, |id| {
                        finished.contains(&(mapping.uuid.clone(), id.to_owned()))
                    });
                    for shard in readable.into_iter().map(|at| &shards[at]) {
                        jobs.push(Job {
                            key: Key::Shard {
                                uuid: mapping.uuid.clone(),
                                shard_id: shard.shard_id.clone(),
                            },
                            mapping: shared.clone(),
                            shard_closed: shard.ending_sequence_number.is_some(),
                        });
                    }
                }
            }
        }
        Ok(jobs)
    }

    fn spawn(&self, set: &mut JoinSet<(Key, Result<Drained, Error>)>, job: Job) {
        let ctx = self.ctx.clone();
        set.spawn(async move {
            let result = match (&job.key, &job.mapping.source) {
                (Key::Shard { shard_id, .. }, Source::Stream(settings)) => {
                    stream::drain_shard(&ctx, &job.mapping, settings, shard_id, job.shard_closed).await
                }
                (_, Source::Queue(settings)) => sqs::drain_queue(&ctx, &job.mapping, settings).await,
                (Key::Queue(_) | Key::Schedule(_), Source::Stream(_)) => Ok(Drained::default()),
            };
            if let (Key::Shard { uuid, shard_id }, Ok(Drained { finished: true, .. })) = (&job.key, &result) {
                ctx.finished_shards
                    .lock()
                    .expect("finished lock")
                    .insert((uuid.clone(), shard_id.clone()));
            }
            (job.key, result)
        });
    }

    /// Runs one tick of `schedule` (see [`schedule`]).
    fn spawn_tick(&self, set: &mut JoinSet<(Key, Result<Drained, Error>)>, schedule: Schedule) {
        let ctx = self.ctx.clone();
        set.spawn(async move {
            let key = Key::Schedule(schedule.function_name.clone());
            let event = schedule::scheduled_event(&schedule, ctx.now(), &ctx.config.region);
            let result = ctx
                .invoker
                .invoke(&schedule.function_name, event)
                .await
                .map(|invocation| {
                    let mut report = ctx.report.lock().expect("report lock");
                    let entry = report.schedules.entry(schedule.function_name.clone()).or_default();
                    entry.invocations += 1;
                    match invocation {
                        Invocation::Response(response) => {
                            info!(function = %schedule.function_name, %response, "scheduled run");
                            entry.last_response = Some(response);
                        }
                        Invocation::FunctionError { error_type, body } => {
                            warn!(function = %schedule.function_name, %error_type, %body, "scheduled run failed");
                            entry.function_errors += 1;
                        }
                    }
                    Drained::default()
                });
            (key, result)
        });
    }

    /// Drains every source, round after round (the handlers' own writes
    /// come back through the stream), until a round finds nothing new.
    /// Schedules are not ticked here: they are no source to drain.
    pub async fn run_until_idle(&self) -> Result<RunReport, Error> {
        self.ctx.stopping.store(false, Ordering::Relaxed);
        let deadline = Instant::now() + self.ctx.config.idle_timeout;
        loop {
            let mappings = self.discover().await?;
            let mut set = JoinSet::new();
            for job in self.jobs(&mappings).await? {
                self.spawn(&mut set, job);
            }
            let mut progressed = false;
            loop {
                match tokio::time::timeout_at(deadline, set.join_next()).await {
                    Ok(None) => break,
                    Ok(Some(joined)) => match joined.unwrap_or_else(|e| std::panic::resume_unwind(e.into_panic())) {
                        (_, Ok(drained)) => progressed |= drained.progressed,
                        (_, Err(err)) => {
                            self.stop(&mut set).await;
                            return Err(err);
                        }
                    },
                    Err(_) => {
                        self.stop(&mut set).await;
                        return Err(self.not_idle());
                    }
                }
            }
            if progressed {
                continue;
            }
            if !(self.ctx.config.wait_for_in_flight && self.messages_pending(&mappings).await?) {
                return Ok(self.report());
            }
            if Instant::now() >= deadline {
                return Err(self.not_idle());
            }
            tokio::time::sleep(self.ctx.config.poll_interval).await;
        }
    }

    fn not_idle(&self) -> Error {
        Error::NotIdle {
            after: self.ctx.config.idle_timeout,
            report: Box::new(self.report()),
        }
    }

    async fn stop(&self, set: &mut JoinSet<(Key, Result<Drained, Error>)>) {
        self.ctx.stopping.store(true, Ordering::Relaxed);
        while set.join_next().await.is_some() {}
    }

    /// Whether a played queue still holds messages, visible or in flight.
    async fn messages_pending(&self, mappings: &[Mapping]) -> Result<bool, Error> {
        for mapping in mappings {
            let Source::Queue(settings) = &mapping.source else {
                continue;
            };
            let depth = hybrid_counter_aws::sqs::depth(&self.ctx.sqs, &settings.queue_url)
                .await
                .map_err(|e| Error::emulator("SQS", "GetQueueAttributes")(sdk_message(e)))?;
            if depth.visible > 0 || depth.in_flight > 0 {
                return Ok(true);
            }
        }
        Ok(false)
    }

    /// Polls every source until `shutdown` completes. Each source has its
    /// own task (so a shard stuck retrying holds back only itself); a
    /// source with nothing new rests for the poll interval, and the
    /// mappings are re-read every discovery interval. Errors of one source
    /// are logged and retried on the next poll. Scheduled functions run
    /// when due ([`schedule::Due`]), one run of each at a time.
    pub async fn run(&self, shutdown: impl Future<Output = ()>) -> Result<RunReport, Error> {
        self.ctx.stopping.store(false, Ordering::Relaxed);
        let config = &self.ctx.config;
        tokio::pin!(shutdown);
        let mut set: JoinSet<(Key, Result<Drained, Error>)> = JoinSet::new();
        let mut running: HashSet<Key> = HashSet::new();
        let mut resting: HashMap<Key, Instant> = HashMap::new();
        let mut mappings: Vec<Mapping> = Vec::new();
        let mut discovered_at: Option<Instant> = None;
        let mut due = schedule::Due::default();
        let mut tick = tokio::time::interval(config.poll_interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        // Why the handlers cannot be invoked; the heartbeat says it.
        let mut problems: health::Problems<Key> = health::Problems::default();
        let mut heartbeat = health::Heartbeat::default();
        let mut beat_at: Option<Instant> = None;
        loop {
            tokio::select! {
                () = &mut shutdown => break,
                Some(joined) = set.join_next(), if !set.is_empty() => {
                    let (key, result) = joined.unwrap_or_else(|e| std::panic::resume_unwind(e.into_panic()));
                    running.remove(&key);
                    match result {
                        Ok(drained) if drained.progressed => problems.progressed(&key),
                        Ok(_) => {
                            resting.insert(key, Instant::now() + config.poll_interval);
                        }
                        Err(err) => {
                            problems.failed(key.clone(), &err);
                            warn!(?key, error = %err, "polling a source failed; trying again");
                            resting.insert(key, Instant::now() + config.poll_interval);
                        }
                    }
                }
                _ = tick.tick() => {
                    self.ctx.invoker.follow_redeploys().await;
                    if discovered_at.is_none_or(|at| at.elapsed() >= config.discovery_interval) {
                        discovered_at = Some(Instant::now());
                        match self.discover_all().await {
                            Ok((found, unprepared)) => {
                                mappings = found;
                                problems.discovered(unprepared.as_ref());
                            }
                            Err(err) => {
                                problems.discovered(Some(&err));
                                warn!(error = %err, "could not read the event source mappings");
                            }
                        }
                    }
                    if beat_at.is_none_or(|at| at.elapsed() >= health::HEARTBEAT_INTERVAL) {
                        let functions = config.functions.clone().unwrap_or_else(|| {
                            let mut names: Vec<String> = mappings.iter().map(|m| m.function_name.clone()).collect();
                            names.dedup();
                            names
                        });
                        let first = beat_at.is_none();
                        beat_at = Some(Instant::now());
                        heartbeat.beat(&self.ctx.lambda, &functions, problems.current()).await;
                        if first {
                            match problems.current() {
                                None => info!("{FIRST_HEARTBEAT} ok: the mappings are discovered and the handlers started"),
                                Some(problem) => warn!("{FIRST_HEARTBEAT} failing: {problem}"),
                            }
                        }
                    }
                    let jobs = match self.jobs(&mappings).await {
                        Ok(jobs) => jobs,
                        Err(err) => {
                            warn!(error = %err, "could not list the stream shards");
                            continue;
                        }
                    };
                    let now = Instant::now();
                    for job in jobs {
                        if running.contains(&job.key) || resting.get(&job.key).is_some_and(|until| *until > now) {
                            continue;
                        }
                        running.insert(job.key.clone());
                        self.spawn(&mut set, job);
                    }
                    let schedules = self.ctx.schedules.lock().expect("schedules lock").clone();
                    for schedule in schedules {
                        let key = Key::Schedule(schedule.function_name.clone());
                        if running.contains(&key) || !due.take(&schedule, now) {
                            continue;
                        }
                        running.insert(key);
                        self.spawn_tick(&mut set, schedule);
                    }
                }
            }
        }
        self.stop(&mut set).await;
        heartbeat.clear(&self.ctx.lambda).await;
        let served = std::mem::take(&mut *self.ctx.served.lock().expect("served lock"));
        function_url::unserve(&self.ctx.lambda, &served).await;
        Ok(self.report())
    }
}
