//! The drift check's comparison with the limits file: when the stack's
//! `LimitsFileUri` is set, each run reads the file from S3 (one GetObject,
//! on the one object the role may read), parses it with the parser
//! `counterctl limits` uses, compares it with the table's overrides (the
//! diff `counterctl status --limits` reports, [`hybrid_counter::limits`])
//! and logs each override that differs. A file that cannot be read,
//! parsed or compared is an error logged and counted (`LimitsFileErrors`),
//! never a failed invocation: the counters' own drift check runs all the
//! same.

use aws_sdk_s3::Client;
use hybrid_counter::audit::drift::DriftStore;
use hybrid_counter::config::ENV_LIMITS_FILE_URI;
use hybrid_counter::error::StoreError;
use hybrid_counter::limits::diff::{Change, DefaultLimit, Kind, diff};
use hybrid_counter::limits::drift::LimitsDrift;
use hybrid_counter::limits::file::{FileError, LimitsFile};
use hybrid_counter::metrics::{Metric, Metrics};
use hybrid_counter::scope_keys::ScopeKeys;
use hybrid_counter_aws::failed_batch::ObjectRef;
use hybrid_counter_aws::s3::{ObjectReadError, get_object_bytes};
use tracing::{error, info, warn};

/// The largest limits file read, bytes: far above a file of thousands of
/// overrides (about 100 bytes each), well inside the function's memory.
pub const MAX_LIMITS_FILE_BYTES: u64 = 4 * 1024 * 1024;

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

/// Reads and parses the file, at most [`MAX_LIMITS_FILE_BYTES`] of it.
pub async fn read_file(s3: &Client, uri: &ObjectRef) -> Result<LimitsFile, LimitsError> {
    let unreadable = |message: String| LimitsError::Unreadable {
        uri: uri.to_string(),
        message,
    };
    let bytes = get_object_bytes(s3, uri, MAX_LIMITS_FILE_BYTES).await.map_err(|e| {
        unreadable(match e {
            ObjectReadError::Missing { .. } => "no such object".to_owned(),
            ObjectReadError::TooLarge { size, max, .. } => {
                format!("it holds {size} bytes, more than a limits file may ({max} bytes)")
            }
            ObjectReadError::Failed { why, .. } => why,
        })
    })?;
    let text = String::from_utf8(bytes).map_err(|e| unreadable(format!("not UTF-8 text: {e}")))?;
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
    keys: ScopeKeys,
) -> Result<(Vec<Change>, DefaultLimit), LimitsError> {
    let uri = ObjectRef::from_s3_uri(uri).ok_or_else(|| LimitsError::BadUri(uri.to_owned()))?;
    let file = read_file(s3, &uri).await?;
    // With scopes over several keys, an override is a copy on each: folded
    // back onto its scope, a missing or disagreeing copy is drift.
    let table = store.limit_overrides(&file.prefixes()).await?.fold(keys);
    let default_limit = DefaultLimit {
        deployed: deployed_default.unwrap_or_default(),
        file: deployed_default.and(file.default_limit.map(|l| l.get())),
    };
    Ok((diff(&file, &table), default_limit))
}

/// Compares the table with the file at `uri` and logs what differs, one
/// line per scope; a failure is logged as an error and returned in the
/// drift's `error`, never raised. `keys`: the keys each scope is spread
/// over (`SCOPE_KEY_SHARDS`).
pub async fn check<S: DriftStore>(
    s3: &Client,
    store: &S,
    uri: &str,
    deployed_default: Option<u64>,
    keys: ScopeKeys,
) -> LimitsDrift {
    match compare(s3, store, uri, deployed_default, keys).await {
        Ok((changes, default_limit)) => {
            for c in &changes {
                let what = match c.kind {
                    Kind::Changed if c.copies_disagree() || c.old == c.new => {
                        "limit override's copies on the scope's keys missing or disagreeing"
                    }
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
