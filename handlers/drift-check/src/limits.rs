//! The drift check's comparison with the limits file: when the stack's
//! `LimitsFileUri` is set, each run reads the file from S3 (one GetObject,
//! on the one object the role may read), parses it with the parser
//! `counterctl limits` uses, compares it with the table's overrides (the
//! diff `counterctl status --limits` reports, [`hybrid_counter::limits`])
//! and logs each override that differs. A file that cannot be read,
//! parsed or compared is an error logged and counted (`LimitsFileErrors`),
//! never a failed invocation: the counters' own drift check runs all the
//! same.

use std::fmt;

use aws_sdk_s3::Client;
use aws_sdk_s3::error::ProvideErrorMetadata;
use aws_smithy_types::error::display::DisplayErrorContext;
use hybrid_counter::audit::drift::DriftStore;
use hybrid_counter::config::ENV_LIMITS_FILE_URI;
use hybrid_counter::error::StoreError;
use hybrid_counter::limits::diff::{Change, DefaultLimit, Kind, diff};
use hybrid_counter::limits::drift::LimitsDrift;
use hybrid_counter::limits::file::{FileError, LimitsFile};
use hybrid_counter::metrics::{Metric, Metrics};
use tracing::{error, info, warn};

/// Where the limits file is: `s3://bucket/key`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LimitsFileUri {
    pub bucket: String,
    pub key: String,
}

impl LimitsFileUri {
    /// `s3://bucket/key`, both parts non-empty (the stack's AllowedPattern
    /// says the same; this is for a function configured by hand).
    pub fn parse(uri: &str) -> Result<Self, LimitsError> {
        uri.strip_prefix("s3://")
            .and_then(|rest| rest.split_once('/'))
            .filter(|(bucket, key)| !bucket.is_empty() && !key.is_empty())
            .map(|(bucket, key)| Self {
                bucket: bucket.to_owned(),
                key: key.to_owned(),
            })
            .ok_or_else(|| LimitsError::BadUri(uri.to_owned()))
    }
}

impl fmt::Display for LimitsFileUri {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "s3://{}/{}", self.bucket, self.key)
    }
}

/// Why the comparison with the limits file could not be made.
#[derive(Debug, thiserror::Error)]
pub enum LimitsError {
    #[error("{ENV_LIMITS_FILE_URI} {0:?} is not an S3 URI: set the stack's LimitsFileUri to s3://bucket/key")]
    BadUri(String),
    #[error("cannot read the limits file {uri}: {message}")]
    Unreadable { uri: String, message: String },
    #[error("invalid limits file {0}: fix it, then `counterctl limits plan` it")]
    Invalid(#[from] FileError),
    #[error("cannot read the limit overrides: {0}")]
    Overrides(#[from] StoreError),
}

/// Reads and parses the file.
pub async fn read_file(s3: &Client, uri: &LimitsFileUri) -> Result<LimitsFile, LimitsError> {
    let unreadable = |message: String| LimitsError::Unreadable {
        uri: uri.to_string(),
        message,
    };
    let object = s3
        .get_object()
        .bucket(&uri.bucket)
        .key(&uri.key)
        .send()
        .await
        .map_err(|e| {
            // The service's code and message (`AccessDenied: ...`), not the
            // whole raw response; the full chain when there is no answer.
            unreadable(match (e.code(), e.message()) {
                (Some(code), Some(message)) => format!("{code}: {message}"),
                (Some(code), None) => code.to_owned(),
                _ => DisplayErrorContext(&e).to_string(),
            })
        })?;
    let bytes = object
        .body
        .collect()
        .await
        .map_err(|e| unreadable(format!("reading its body: {e}")))?
        .into_bytes();
    let text = String::from_utf8(bytes.to_vec()).map_err(|e| unreadable(format!("not UTF-8 text: {e}")))?;
    Ok(LimitsFile::parse(&uri.to_string(), &text)?)
}

/// The changes the file would make to the table's overrides, and the
/// default limits (deployed, and as the file says; not compared when the
/// deployed one is unknown: `None`).
pub async fn compare<S: DriftStore>(
    s3: &Client,
    store: &S,
    uri: &str,
    deployed_default: Option<u64>,
) -> Result<(Vec<Change>, DefaultLimit), LimitsError> {
    let uri = LimitsFileUri::parse(uri)?;
    let file = read_file(s3, &uri).await?;
    let table = store.limit_overrides(&file.prefixes()).await?;
    let default_limit = DefaultLimit {
        deployed: deployed_default.unwrap_or_default(),
        file: deployed_default.and(file.default_limit.map(|l| l.get())),
    };
    Ok((diff(&file, &table), default_limit))
}

/// Compares the table with the file at `uri` and logs what differs, one
/// line per scope; a failure is logged as an error and returned in the
/// drift's `error`, never raised.
pub async fn check<S: DriftStore>(s3: &Client, store: &S, uri: &str, deployed_default: Option<u64>) -> LimitsDrift {
    match compare(s3, store, uri, deployed_default).await {
        Ok((changes, default_limit)) => {
            for c in &changes {
                let what = match c.kind {
                    Kind::Changed => "limit override changed outside the limits file",
                    Kind::Removed => "limit override not in the limits file",
                    Kind::Added => "limit override of the limits file missing from the table",
                };
                warn!(scope = %c.scope, table = ?c.old, file = ?c.new, prefix = ?c.prefix, "{what}");
            }
            let drift = LimitsDrift::of(uri, &changes, &default_limit);
            if drift.in_sync() {
                info!(file = uri, "limit overrides as in the limits file");
            } else {
                warn!(file = uri, "limit overrides {drift}");
            }
            drift
        }
        Err(e) => {
            error!(file = uri, error = %e, "limits file check failed; the counters' drift check runs all the same");
            LimitsDrift::failed(uri, e.to_string())
        }
    }
}

/// The comparison's metrics: `LimitsFileErrors` always (0 or 1, so its
/// alarm sees a data point and goes back to OK), `LimitsDrifted` when the
/// comparison was made (the scopes that differ, plus one for a different
/// default limit).
pub fn add_metrics(metrics: &mut Metrics, drift: &LimitsDrift) {
    let failed = drift.error.is_some();
    metrics.add(Metric::LimitsFileErrors, if failed { 1.0 } else { 0.0 });
    if !failed {
        let drifted = drift.scopes() + usize::from(drift.default_limit.is_some());
        metrics.add(Metric::LimitsDrifted, drifted as f64);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_s3_uri_names_a_bucket_and_a_key_and_anything_else_is_refused_by_name() {
        let uri = LimitsFileUri::parse("s3://ops-config/hc/prod/limits.yaml").unwrap();
        assert_eq!(
            (uri.bucket.as_str(), uri.key.as_str()),
            ("ops-config", "hc/prod/limits.yaml")
        );
        assert_eq!(uri.to_string(), "s3://ops-config/hc/prod/limits.yaml");
        for bad in [
            "",
            "ops-config/limits.yaml",
            "s3://ops-config",
            "s3://ops-config/",
            "s3:///limits.yaml",
        ] {
            let err = LimitsFileUri::parse(bad).unwrap_err();
            assert!(matches!(err, LimitsError::BadUri(_)), "{bad:?}: {err}");
            assert!(err.to_string().contains(ENV_LIMITS_FILE_URI), "{err}");
        }
    }
}
