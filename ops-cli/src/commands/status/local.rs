//! What `status` says of the emulators it runs on: on ministack, the
//! attention items that are the emulator's limits (no alarm actions, no
//! mapping metrics), and what the local runner's heartbeat (read from the
//! function's tags by `status`) and its absence mean.

use hybrid_counter_aws::esm::RUNNER_HEALTH_TAG;

use crate::commands::Context;

/// Whether an attention item is only what ministack cannot do: its alarms
/// take no actions and its mappings publish no metrics.
pub(super) fn is_ministack_limit(item: &str) -> bool {
    item.ends_with(NOTIFIES_NO_ONE) || item.contains(NO_EVENT_COUNTS)
}

/// The path only ministack answers its health on (`localstack/ministack.sh`).
const MINISTACK_HEALTH_PATH: &str = "/_ministack/health";

/// Whether the stack is on ministack: the endpoint counterctl started it
/// at, or any `--target localstack` endpoint that answers ministack's
/// health path.
pub(super) fn on_ministack(ctx: &Context<'_>) -> bool {
    if matches!(ctx.config.endpoint, crate::config::Endpoint::Ministack { .. }) {
        return true;
    }
    let authority = ctx.clients.endpoint.as_deref().and_then(crate::connect::http_authority);
    ctx.clients.target == crate::cli::Target::Localstack
        && authority.is_some_and(|a| hybrid_counter_aws::probe::answers_ok(a, MINISTACK_HEALTH_PATH))
}

/// The emulator limits among `items`, said once each as what they are.
pub(super) fn ministack_limits(items: &[String]) -> Vec<String> {
    let mut limits = Vec::new();
    let alarms = items.iter().filter(|item| item.ends_with(NOTIFIES_NO_ONE)).count();
    if alarms > 0 {
        limits.push(format!(
            "ministack keeps no alarm actions: {alarms} alarm(s) notify no one here (on AWS they notify the topic)"
        ));
    }
    if items.iter().any(|item| item.contains(NO_EVENT_COUNTS)) {
        limits.push(
            "ministack keeps no mapping metrics (MetricsConfig EventCount): the local runner logs the stream \
             mapping's counts instead (.run/local-runner.log)"
                .to_owned(),
        );
    }
    limits
}

pub(super) const NOTIFIES_NO_ONE: &str = "notifies no one (no alarm actions)";

pub(super) const NO_EVENT_COUNTS: &str = "publishes no event counts (MetricsConfig EventCount)";

/// What status says of a mapping whose function carries no heartbeat
/// while the kit's runner is expected to play it.
pub const RUNNER_NOT_RUNNING: &str = "the local runner is not running: start it with `make local-run` \
     (log .run/local-runner.log)";

/// What status says of a mapping on ministack while no local runner runs.
pub const RUNNER_NOT_RUNNING_ON_MINISTACK: &str = "the local runner is not running: ministack plays this mapping \
     itself, without the kit's failure path (no bisect on error, no retry limit, no on-failure record) or parallel \
     batches, and the local API is not served; start it with `make local-run` (log .run/local-runner.log)";

/// What the local runner's heartbeat among a function's `tags` says needs
/// attention now: it stopped reporting, or it cannot invoke the handlers.
pub fn runner_problem(tags: Option<&std::collections::HashMap<String, String>>) -> Option<String> {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default()
        .as_secs();
    tags.and_then(|t| t.get(RUNNER_HEALTH_TAG))
        .and_then(|value| hybrid_counter_aws::esm::RunnerHealth::parse(value))
        .and_then(|health| health.attention(now))
}
