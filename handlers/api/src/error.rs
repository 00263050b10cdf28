//! Every way a request fails: [`ApiError`], answered as the JSON error
//! `{"error": "<Code>", "message": "..."}` with its status. A store failure
//! answers a fixed message: what DynamoDB said goes to the log, never to
//! the caller.

use axum::Json;
use axum::http::{HeaderValue, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use hybrid_counter::{Error, ResourceId};
use serde_json::json;
use tracing::warn;

/// Largest accepted request body. DynamoDB stores at most 400 KB per item,
/// so a bigger payload could never be written: refuse it before any I/O.
pub const MAX_BODY_BYTES: usize = 400 * 1024;

/// Seconds a client should wait before retrying after a `503`.
const RETRY_AFTER_SECONDS: &str = "1";

/// What a client sees instead of a store failure's text.
pub(crate) const UNAVAILABLE_MESSAGE: &str = "the counter store is unavailable; retry later";

/// What a client sees when no sequence number could be claimed: the
/// failures behind it (DynamoDB's words) go to the log.
pub(crate) const SEQUENCE_CONTENDED_MESSAGE: &str =
    "no sequence number could be claimed: the scope's sequence is contended or the store is unavailable; retry later";

/// What a client sees when the claim of a sequence number was answered
/// ambiguously and may still apply (no `Retry-After`: a blind retry could
/// claim a second number).
const SEQUENCE_OUTCOME_UNKNOWN_MESSAGE: &str = "a sequence number may have been claimed for this request: the \
     store's answer to the claim was lost and the claim may still apply; the number's item records its owner";

/// Every way a request fails, each with its status and error code.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    /// `404 RouteNotFound`: the path is none of the API's routes.
    #[error("no route for {method} {path}")]
    NoRoute { method: Method, path: String },
    /// `405 MethodNotAllowed`, with `Allow`.
    #[error("method {method} is not allowed here; allowed: {allow}")]
    MethodNotAllowed { method: Method, allow: &'static str },
    /// `413 PayloadTooLarge`.
    #[error("the request body is over the maximum of {MAX_BODY_BYTES} bytes")]
    PayloadTooLarge,
    /// The counter's own outcomes: `400 InvalidInput`, `404 NotFound`,
    /// `409 AlreadyExists`, `409 LimitExceeded`, `503 Unavailable`,
    /// `503 SequenceContended`, `503 SequenceOutcomeUnknown`.
    #[error(transparent)]
    Counter(#[from] Error),
    /// `503 CreatedWithoutSequence`: a create that asked for a sequence
    /// number created the item, then claimed no number for it.
    #[error(
        "item {id} was created, but no sequence number could be claimed for it ({reason}); the item stays, \
         unnumbered: delete it and create it again to number it"
    )]
    CreatedWithoutSequence { id: ResourceId, reason: String },
    /// `503 CreatedSequenceUnknown`: a create that asked for a sequence
    /// number created the item, and the claim of its number was answered
    /// ambiguously: the item may be numbered (the number's item names it).
    #[error(
        "item {id} was created, and a sequence number may have been claimed for it: the store's answer to the \
         claim was lost and the claim may still apply; such a number records {id} as its owner, so do not create \
         the item again to number it"
    )]
    CreatedSequenceUnknown { id: ResourceId },
    /// `403 ScopeForbidden`: with `ScopeAuthorization=principal-tag`, the
    /// caller may not act on this scope.
    #[error("this caller may not act on this scope: {reason}")]
    ScopeForbidden { reason: String },
}

impl ApiError {
    /// `400 InvalidInput` with `reason` as the message.
    pub(crate) fn invalid(reason: String) -> Self {
        Self::Counter(Error::InvalidInput(reason))
    }

    pub fn status(&self) -> StatusCode {
        match self {
            ApiError::NoRoute { .. } => StatusCode::NOT_FOUND,
            ApiError::MethodNotAllowed { .. } => StatusCode::METHOD_NOT_ALLOWED,
            ApiError::PayloadTooLarge => StatusCode::PAYLOAD_TOO_LARGE,
            ApiError::Counter(err) => match err {
                Error::InvalidInput(_) => StatusCode::BAD_REQUEST,
                Error::NotFound => StatusCode::NOT_FOUND,
                Error::AlreadyExists | Error::LimitExceeded { .. } | Error::ShareExceeded { .. } => {
                    StatusCode::CONFLICT
                }
                Error::Unavailable(_)
                | Error::LayoutMismatch { .. }
                | Error::SequenceContended { .. }
                | Error::SequenceOutcomeUnknown { .. } => StatusCode::SERVICE_UNAVAILABLE,
            },
            ApiError::CreatedWithoutSequence { .. } | ApiError::CreatedSequenceUnknown { .. } => {
                StatusCode::SERVICE_UNAVAILABLE
            }
            ApiError::ScopeForbidden { .. } => StatusCode::FORBIDDEN,
        }
    }

    /// The machine-readable `error` field.
    pub fn code(&self) -> &'static str {
        match self {
            ApiError::NoRoute { .. } => "RouteNotFound",
            ApiError::MethodNotAllowed { .. } => "MethodNotAllowed",
            ApiError::PayloadTooLarge => "PayloadTooLarge",
            ApiError::Counter(err) => err.code(),
            ApiError::CreatedWithoutSequence { .. } => "CreatedWithoutSequence",
            ApiError::CreatedSequenceUnknown { .. } => "CreatedSequenceUnknown",
            ApiError::ScopeForbidden { .. } => "ScopeForbidden",
        }
    }

    /// The human-readable `message` field, fixed for each store failure:
    /// what the store said is deliberately not part of it.
    pub fn message(&self) -> String {
        match self {
            ApiError::Counter(Error::InvalidInput(reason)) => reason.clone(),
            ApiError::Counter(Error::Unavailable(_)) => UNAVAILABLE_MESSAGE.to_owned(),
            ApiError::Counter(Error::SequenceContended { .. }) => SEQUENCE_CONTENDED_MESSAGE.to_owned(),
            ApiError::Counter(Error::SequenceOutcomeUnknown { .. }) => SEQUENCE_OUTCOME_UNKNOWN_MESSAGE.to_owned(),
            other => other.to_string(),
        }
    }
}

/// The JSON error answer, with `Allow` on `405` and `Retry-After` on `503`;
/// a store failure or contention is logged with the store's words.
impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        if let ApiError::Counter(
            err @ (Error::Unavailable(_) | Error::SequenceContended { .. } | Error::SequenceOutcomeUnknown { .. }),
        ) = &self
        {
            warn!(error = %err, detail = err.detail(), "counter store unavailable or contended");
        }
        let mut body = json!({ "error": self.code(), "message": self.message() });
        match &self {
            ApiError::Counter(Error::LimitExceeded { usage, limit }) => {
                body["usage"] = json!(usage);
                body["limit"] = json!(limit);
            }
            // The scope's own usage is not known: only the key was read.
            ApiError::Counter(Error::ShareExceeded {
                usage,
                share,
                limit,
                key,
                keys,
            }) => {
                body["limit"] = json!(limit);
                body["key"] = json!(key);
                body["keys"] = json!(keys);
                body["key_usage"] = json!(usage);
                body["key_share"] = json!(share);
            }
            _ => {}
        }
        let mut response = (self.status(), Json(body)).into_response();
        let headers = response.headers_mut();
        match &self {
            ApiError::MethodNotAllowed { allow, .. } => {
                headers.insert(header::ALLOW, HeaderValue::from_static(allow));
            }
            ApiError::Counter(Error::Unavailable(_) | Error::SequenceContended { .. }) => {
                headers.insert(header::RETRY_AFTER, HeaderValue::from_static(RETRY_AFTER_SECONDS));
            }
            _ => {}
        }
        response
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_counter_error_has_its_status_and_code() {
        let cases = [
            (Error::InvalidInput("x".into()), 400, "InvalidInput"),
            (Error::NotFound, 404, "NotFound"),
            (Error::AlreadyExists, 409, "AlreadyExists"),
            (Error::LimitExceeded { usage: 1, limit: 1 }, 409, "LimitExceeded"),
            (
                Error::ShareExceeded {
                    usage: 1,
                    share: 1,
                    limit: 4,
                    key: 2,
                    keys: 4,
                },
                409,
                "LimitExceeded",
            ),
            (Error::Unavailable("x".into()), 503, "Unavailable"),
            (
                Error::SequenceContended {
                    scope: "s".into(),
                    attempts: 3,
                    last: "x".into(),
                },
                503,
                "SequenceContended",
            ),
            (
                Error::SequenceOutcomeUnknown {
                    scope: "s".into(),
                    numbers: vec![4],
                    attempts: 3,
                    last: "x".into(),
                },
                503,
                "SequenceOutcomeUnknown",
            ),
        ];
        for (err, status, code) in cases {
            let err = ApiError::from(err);
            assert_eq!((err.status().as_u16(), err.code()), (status, code));
        }
    }
}
