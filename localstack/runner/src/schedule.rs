//! Scheduled functions: the stack's EventBridge rule runs the drift check
//! on AWS; the emulator keeps the rule but runs no code, so the runner
//! plays it, invoking the function with an EventBridge `Scheduled Event`
//! at the deployed rate.
//!
//! Which function runs how often is read from the function's environment
//! (`DRIFT_CHECK_SCHEDULE`), which the stack sets from the same parameter
//! as the rule's `ScheduleExpression`: one `GetFunctionConfiguration` per
//! function, and no EventBridge client in the build.
//!
//! `rate(N unit)` is played, with AWS's rules (a value of 1 takes the
//! singular unit, any other the plural; minutes, hours or days). `cron(...)`
//! is not: the function is skipped with a warning that says so. The first
//! run is at discovery (so a fresh `make deploy` shows a check at once),
//! then one every interval; a run still going when the next is due is not
//! overlapped, as a slow tick would be on AWS only by a second invocation.

use std::collections::HashMap;
use std::time::{Duration, SystemTime};

use hybrid_counter::config::ENV_DRIFT_CHECK_SCHEDULE;
use serde::Serialize;
use serde_json::{Value, json};
use tokio::time::Instant;
use tracing::warn;

use crate::discover::{environment_variables, function_names};
use crate::error::{Error, sdk_message};

/// A function the runner invokes on a schedule.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Schedule {
    pub function_name: String,
    pub function_arn: String,
    /// As deployed, e.g. `rate(5 minutes)`.
    pub expression: String,
    #[serde(skip)]
    pub every: Duration,
}

/// The interval of a schedule expression: `None` for an empty one (off),
/// the reason for one the runner does not play.
pub fn parse_rate(expression: &str) -> Result<Option<Duration>, String> {
    let expression = expression.trim();
    if expression.is_empty() {
        return Ok(None);
    }
    if expression.starts_with("cron(") {
        return Err(format!(
            "{expression} is a cron expression, which the local runner does not play; deploy with a \
             rate(...) schedule to run it locally, or invoke the function by hand"
        ));
    }
    let inner = expression
        .strip_prefix("rate(")
        .and_then(|rest| rest.strip_suffix(')'))
        .ok_or_else(|| format!("{expression:?} is neither rate(...) nor cron(...)"))?;
    let (value, unit) = inner
        .trim()
        .split_once(' ')
        .ok_or_else(|| format!("{expression}: expected rate(<value> <unit>)"))?;
    let value: u64 = value
        .parse()
        .ok()
        .filter(|v| *v > 0)
        .ok_or_else(|| format!("{expression}: the value must be a positive integer"))?;
    let (seconds, singular) = match unit.trim() {
        "minute" => (60, true),
        "minutes" => (60, false),
        "hour" => (3_600, true),
        "hours" => (3_600, false),
        "day" => (86_400, true),
        "days" => (86_400, false),
        other => {
            return Err(format!(
                "{expression}: unit {other:?} is not minute(s), hour(s) or day(s)"
            ));
        }
    };
    if singular != (value == 1) {
        return Err(format!(
            "{expression}: a value of 1 takes the singular unit (rate(1 minute)), any other the plural \
             (rate(5 minutes)), as EventBridge requires"
        ));
    }
    Ok(Some(Duration::from_secs(value * seconds)))
}

/// The schedules of `functions` (every function in the emulator when
/// `None`): those whose environment names a rate. A function with a
/// schedule the runner cannot play is skipped with a warning.
pub async fn discover(lambda: &aws_sdk_lambda::Client, functions: Option<&[String]>) -> Result<Vec<Schedule>, Error> {
    let names: Vec<String> = match functions {
        Some(names) => names.to_vec(),
        None => function_names(lambda).await?,
    };
    let mut schedules = Vec::new();
    for name in names {
        let config = lambda
            .get_function_configuration()
            .function_name(&name)
            .send()
            .await
            .map_err(|e| Error::emulator("Lambda", "GetFunctionConfiguration")(sdk_message(e)))?;
        let Some(expression) = environment_variables(config.environment()).remove(ENV_DRIFT_CHECK_SCHEDULE) else {
            continue;
        };
        match parse_rate(&expression) {
            Ok(None) => {}
            Ok(Some(every)) => schedules.push(Schedule {
                function_arn: config.function_arn().unwrap_or_default().to_owned(),
                function_name: name,
                expression,
                every,
            }),
            Err(reason) => warn!(function = %name, %reason, "schedule not played"),
        }
    }
    Ok(schedules)
}

/// The event EventBridge sends for one tick of a scheduled rule.
pub fn scheduled_event(schedule: &Schedule, at: SystemTime, region: &str) -> Value {
    let time = chrono::DateTime::<chrono::Utc>::from(at).to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    let account = schedule.function_arn.split(':').nth(4).unwrap_or_default();
    json!({
        "version": "0",
        "id": format!("esm-runner-{}", at.duration_since(SystemTime::UNIX_EPOCH).unwrap_or_default().as_millis()),
        "detail-type": "Scheduled Event",
        "source": "aws.events",
        "account": account,
        "time": time,
        "region": region,
        "resources": [],
        "detail": {},
    })
}

/// When each scheduled function is next due.
#[derive(Debug, Default)]
pub struct Due {
    next: HashMap<String, Instant>,
}

impl Due {
    /// Whether `schedule` is due at `now`, and if so books its next tick:
    /// due at once the first time, then every interval after the last
    /// tick; ticks missed while a run was going are not made up.
    pub fn take(&mut self, schedule: &Schedule, now: Instant) -> bool {
        let next = self.next.entry(schedule.function_name.clone()).or_insert(now);
        if now < *next {
            return false;
        }
        *next += schedule.every;
        if *next <= now {
            *next = now + schedule.every;
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_are_read_as_eventbridge_writes_them_and_cron_is_refused_with_the_way_out() {
        assert_eq!(parse_rate(""), Ok(None));
        assert_eq!(parse_rate("rate(1 minute)"), Ok(Some(Duration::from_secs(60))));
        assert_eq!(parse_rate("rate(15 minutes)"), Ok(Some(Duration::from_secs(900))));
        assert_eq!(parse_rate("rate(2 hours)"), Ok(Some(Duration::from_secs(7_200))));
        assert_eq!(parse_rate("rate(1 day)"), Ok(Some(Duration::from_secs(86_400))));
        for bad in [
            "rate(1 minutes)",
            "rate(5 minute)",
            "rate(0 minutes)",
            "rate(5 weeks)",
            "every 5 minutes",
        ] {
            assert!(parse_rate(bad).is_err(), "{bad}");
        }
        let cron = parse_rate("cron(0 * * * ? *)").unwrap_err();
        assert!(cron.contains("rate(...)"), "{cron}");
    }

    #[test]
    fn a_schedule_runs_at_discovery_then_every_interval_without_making_up_missed_ticks() {
        let schedule = Schedule {
            function_name: "hc-drift-check".into(),
            function_arn: "arn:aws:lambda:us-east-1:123456789012:function:hc-drift-check".into(),
            expression: "rate(1 minute)".into(),
            every: Duration::from_secs(60),
        };
        let start = Instant::now();
        let mut due = Due::default();
        assert!(due.take(&schedule, start), "first run at discovery");
        assert!(!due.take(&schedule, start + Duration::from_secs(59)));
        assert!(due.take(&schedule, start + Duration::from_secs(60)));
        assert!(!due.take(&schedule, start + Duration::from_secs(61)));
        // A long pause (a slow run): one run now, the next a full interval on.
        assert!(due.take(&schedule, start + Duration::from_secs(300)));
        assert!(!due.take(&schedule, start + Duration::from_secs(359)));
        assert!(due.take(&schedule, start + Duration::from_secs(360)));
    }

    #[test]
    fn the_event_is_an_eventbridge_scheduled_event() {
        let schedule = Schedule {
            function_name: "f".into(),
            function_arn: "arn:aws:lambda:us-east-1:123456789012:function:f".into(),
            expression: "rate(1 minute)".into(),
            every: Duration::from_secs(60),
        };
        let event = scheduled_event(&schedule, SystemTime::UNIX_EPOCH + Duration::from_secs(60), "us-east-1");
        assert_eq!(event["detail-type"], "Scheduled Event");
        assert_eq!(event["source"], "aws.events");
        assert_eq!(event["account"], "123456789012");
        assert_eq!(event["time"], "1970-01-01T00:01:00Z");
    }
}
