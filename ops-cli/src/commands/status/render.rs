//! `status`'s text report: the stack, its mappings, queues, alarms, API,
//! tables, drift check, layout, limits and outputs, then the emulator's
//! limits and what needs attention.

use std::fmt;

use super::{ApiStatus, StatusReport};

fn opt<T: fmt::Display>(value: Option<T>) -> String {
    value.map_or_else(|| "-".to_owned(), |v| v.to_string())
}

impl fmt::Display for StatusReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "Stack {}: {} (target {}, region {}{})",
            self.location.stack_name,
            self.status,
            self.location.target,
            self.location.region,
            self.last_updated
                .as_deref()
                .map(|t| format!(", updated {t}"))
                .unwrap_or_default()
        )?;
        if let Some(reason) = &self.status_reason {
            writeln!(f, "  {reason}")?;
        }
        writeln!(f, "Event source mappings:")?;
        for m in &self.mappings {
            if let Some(problem) = &m.problem {
                writeln!(f, "  {} {}: {problem}", m.name, m.uuid)?;
                continue;
            }
            let played = if m.played_by_local_runner {
                " (played by the local runner)"
            } else {
                ""
            };
            writeln!(f, "  {}  {}{played}  {}", m.name, opt(m.state.as_deref()), m.uuid)?;
            // Retries, record age, bisecting and parallelization are stream settings.
            if m.event_source_arn
                .as_deref()
                .is_some_and(|a| a.starts_with("arn:aws:sqs:"))
            {
                writeln!(
                    f,
                    "    batch {}  response types [{}]",
                    opt(m.batch_size),
                    m.function_response_types.join(", ")
                )?;
            } else {
                writeln!(
                    f,
                    "    batch {}  parallelization {}  retries {}  max record age {}s  bisect {}  response types [{}]",
                    opt(m.batch_size),
                    opt(m.parallelization_factor),
                    opt(m.maximum_retry_attempts),
                    opt(m.maximum_record_age_in_seconds),
                    opt(m.bisect_batch_on_function_error),
                    m.function_response_types.join(", ")
                )?;
            }
            if let Some(destination) = &m.on_failure_destination {
                writeln!(f, "    on failure -> {destination}")?;
            }
            if !m.filter_patterns.is_empty() {
                writeln!(f, "    {} filter pattern(s)", m.filter_patterns.len())?;
            }
            if m.is_stream() {
                match m.metrics.is_empty() {
                    true => writeln!(f, "    metrics: none (DroppedEventCount is not published)")?,
                    false => writeln!(f, "    metrics: {}", m.metrics.join(", "))?,
                }
            }
            if let Some(result) = &m.last_processing_result {
                writeln!(f, "    last result: {result}")?;
            }
        }
        writeln!(f, "Queues (visible / in flight / delayed):")?;
        for q in &self.queues {
            match &q.problem {
                Some(problem) => writeln!(f, "  {}: {problem}", q.name)?,
                None => writeln!(
                    f,
                    "  {}  {} / {} / {}",
                    q.name,
                    opt(q.visible),
                    opt(q.in_flight),
                    opt(q.delayed)
                )?,
            }
        }
        writeln!(f, "  failed batches: {}", self.failed_batches())?;
        match &self.alarm_topic {
            Some(topic) => writeln!(f, "Alarms (notify {topic}):")?,
            None => writeln!(f, "Alarms:")?,
        }
        let width = self.alarms.iter().map(|a| a.name.len()).max().unwrap_or(0);
        for a in &self.alarms {
            match &a.problem {
                Some(problem) => writeln!(f, "  {}: {problem}", a.name)?,
                None => writeln!(f, "  {:<width$}  {}", a.name, opt(a.state.as_deref()))?,
            }
        }
        if let Some(api) = &self.api {
            write!(f, "{api}")?;
        }
        writeln!(f, "Tables:")?;
        for t in &self.tables {
            match (&t.problem, t.replicated()) {
                (Some(problem), _) => writeln!(f, "  {} ({}): {problem}", t.table, t.role)?,
                (None, true) => writeln!(
                    f,
                    "  {} ({})  replicas in {}: a global table, the counters cannot be trusted",
                    t.table,
                    t.role,
                    t.replica_regions.join(", ")
                )?,
                (None, false) => writeln!(f, "  {} ({})  single-region", t.table, t.role)?,
            }
            if t.problem.is_none() {
                writeln!(f, "    {}", t.capacity())?;
            }
        }
        writeln!(f, "Drift check:")?;
        write!(f, "{}", self.drift_check)?;
        if let Some(layout) = &self.layout {
            write!(f, "{layout}")?;
        }
        if let Some(limits) = &self.limits {
            writeln!(f, "Limits: {limits}")?;
        }
        crate::commands::write_outputs(f, &self.outputs)?;
        if !self.emulator_limits.is_empty() {
            writeln!(f, "Emulator limits (not the stack's; no attention needed):")?;
            for item in &self.emulator_limits {
                writeln!(f, "  - {item}")?;
            }
        }
        if self.attention.is_empty() {
            writeln!(f, "All well.")
        } else {
            writeln!(f, "Needs attention:")?;
            for item in &self.attention {
                writeln!(f, "  - {item}")?;
            }
            Ok(())
        }
    }
}

impl fmt::Display for ApiStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "API (function URL of {}):", self.function_name)?;
        if let Some(problem) = &self.problem {
            return writeln!(f, "  {problem}");
        }
        writeln!(
            f,
            "  deployed  {}  auth {}",
            opt(self.url.as_deref()),
            opt(self.auth_type.as_deref())
        )?;
        if self.local_iam_auth.is_none() {
            return Ok(());
        }
        match (&self.local_url, self.local_answering) {
            (Some(url), Some(true)) => writeln!(
                f,
                "  local     {url}  served by the local runner; IAM auth is off locally (requests are not signed)"
            ),
            (Some(url), _) => writeln!(
                f,
                "  local     {url}  not answering: the runner that served it is gone; start it with `make local-run`"
            ),
            (None, _) => writeln!(
                f,
                "  local     not served: the local runner serves it while it runs (`make local-run`)"
            ),
        }
    }
}
