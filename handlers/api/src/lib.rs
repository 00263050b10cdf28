//! The example HTTP API (DESIGN §6): a Lambda function URL (AWS_IAM auth)
//! in front of the counter library's request path.
//!
//! | request | success |
//! |---|---|
//! | `POST /scopes/{scope}/items/{id}` with an optional JSON object (the owner's payload) | `201` + [`Created`](hybrid_counter::Created) |
//! | the same with `?sequence=true` | `201` + the same and `"sequence": n`, the scope's next gapless number ([`hybrid_counter::sequence`]) |
//! | `DELETE /scopes/{scope}/items/{id}` | `204` |
//! | `GET /scopes/{scope}/usage` | `200` + [`Usage`](hybrid_counter::Usage) |
//!
//! A numbered create creates the item first (so a refused create spends no
//! number), then claims the number for it; if no number can be claimed the
//! answer is `503 CreatedWithoutSequence`: the item exists, unnumbered; if
//! the claim's outcome is unknown, `503 CreatedSequenceUnknown`: it may be
//! numbered.
//!
//! Everything else is a JSON error `{"error": "<Code>", "message": "..."}`
//! (see [`ApiError`]). A store failure becomes `503` with `Retry-After` and a
//! fixed message: what DynamoDB said (a cancelled transaction included) goes
//! to the log, never to the caller.
//!
//! Every request prints one line of the kit's metrics: best-effort writes
//! the request path swallowed, transactions, conflicts and write units (see
//! [`hybrid_counter::metrics`]).
//!
//! **A single-trust example.** Anyone the function URL's `AWS_IAM` auth
//! lets in may act on every scope: the API itself checks no ownership. A
//! caller needs both `lambda:InvokeFunctionUrl` and `lambda:InvokeFunction`
//! on the function (new function URLs require both since October 2025,
//! <https://docs.aws.amazon.com/lambda/latest/dg/urls-auth.html>), the
//! second only under `lambda:InvokedViaFunctionUrl` (the exact policy:
//! `docs/api.md`). The opt-in stack parameter
//! `ScopeAuthorization=principal-tag` restricts each caller to the scopes
//! within its IAM principal's `hck-scope-prefix` tag (`acme` and `acme/...`),
//! else `403 ScopeForbidden` ([`scope_auth`], which says how the tag is read
//! and what that costs). A real multi-tenant API authorizes in front of the
//! counter, with its own notion of tenant.
//!
//! Routing works on plain `http` types and the handler is generic over
//! [`Store`] and takes the time as a parameter, so tests drive exactly the
//! code Lambda runs, against an in-memory store or the emulator.

pub mod scope_auth;

use std::borrow::Cow;

use hybrid_counter::metrics::{Metric, Metrics};
use hybrid_counter::{Counter, EpochMillis, Error, ResourceId, Scope, Store};
use hybrid_counter_aws::lambda::{CostWatch, emit_metrics};
use lambda_http::RequestExt;
use lambda_http::http::{HeaderValue, Method, StatusCode, header};
use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, percent_decode_str, utf8_percent_encode};
use serde::Serialize;
use serde_dynamo::Item;
use serde_json::json;
use tracing::{info, warn};

pub use lambda_http::{Body, Request, Response, http};
pub use scope_auth::{Authorizer, IamTags, NoTags, PrincipalTags, ScopeAuthorization};

/// Largest accepted request body. DynamoDB stores at most 400 KB per item,
/// so a bigger payload could never be written: refuse it before any I/O.
pub const MAX_BODY_BYTES: usize = 400 * 1024;

/// Seconds a client should wait before retrying after a `503`.
const RETRY_AFTER_SECONDS: &str = "1";

/// What a client sees instead of a store failure's text.
const UNAVAILABLE_MESSAGE: &str = "the counter store is unavailable; retry later";

/// What a client sees when no sequence number could be claimed: the
/// failures behind it (DynamoDB's words) go to the log.
const SEQUENCE_CONTENDED_MESSAGE: &str =
    "no sequence number could be claimed: the scope's sequence is contended or the store is unavailable; retry later";

/// What a client sees when the claim of a sequence number was answered
/// ambiguously and may still apply (no `Retry-After`: a blind retry could
/// claim a second number).
const SEQUENCE_OUTCOME_UNKNOWN_MESSAGE: &str = "a sequence number may have been claimed for this request: the \
     store's answer to the claim was lost and the claim may still apply; the number's item records its owner";

/// Methods of the item route, for `405`'s `Allow` header.
const ITEM_METHODS: &str = "POST, DELETE";
/// Methods of the usage route, for `405`'s `Allow` header.
const USAGE_METHODS: &str = "GET";

/// Characters kept as-is when a scope or id is put back into a path: RFC 3986
/// unreserved ones; everything else is percent-encoded.
const SEGMENT: &AsciiSet = &NON_ALPHANUMERIC.remove(b'-').remove(b'_').remove(b'.').remove(b'~');

/// A routed request with validated identifiers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    Create { scope: Scope, id: ResourceId },
    Delete { scope: Scope, id: ResourceId },
    Usage { scope: Scope },
}

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
    #[error("the request body is {len} bytes; the maximum is {MAX_BODY_BYTES} bytes")]
    PayloadTooLarge { len: usize },
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
    pub fn status(&self) -> StatusCode {
        match self {
            ApiError::NoRoute { .. } => StatusCode::NOT_FOUND,
            ApiError::MethodNotAllowed { .. } => StatusCode::METHOD_NOT_ALLOWED,
            ApiError::PayloadTooLarge { .. } => StatusCode::PAYLOAD_TOO_LARGE,
            ApiError::Counter(err) => match err {
                Error::InvalidInput(_) => StatusCode::BAD_REQUEST,
                Error::NotFound => StatusCode::NOT_FOUND,
                Error::AlreadyExists | Error::LimitExceeded { .. } => StatusCode::CONFLICT,
                Error::Unavailable(_) | Error::SequenceContended { .. } | Error::SequenceOutcomeUnknown { .. } => {
                    StatusCode::SERVICE_UNAVAILABLE
                }
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
            ApiError::PayloadTooLarge { .. } => "PayloadTooLarge",
            ApiError::Counter(err) => match err {
                Error::InvalidInput(_) => "InvalidInput",
                Error::NotFound => "NotFound",
                Error::AlreadyExists => "AlreadyExists",
                Error::LimitExceeded { .. } => "LimitExceeded",
                Error::Unavailable(_) => "Unavailable",
                Error::SequenceContended { .. } => "SequenceContended",
                Error::SequenceOutcomeUnknown { .. } => "SequenceOutcomeUnknown",
            },
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

    /// The JSON error response, with `Allow` on `405` and `Retry-After` on `503`.
    pub fn into_response(self) -> Response<Body> {
        let mut body = json!({ "error": self.code(), "message": self.message() });
        if let ApiError::Counter(Error::LimitExceeded { usage, limit }) = &self {
            body["usage"] = json!(usage);
            body["limit"] = json!(limit);
        }
        let mut response = json_response(self.status(), &body);
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

/// Handles one request at time `now`. Never fails: every outcome is a
/// response, and each is logged with the caller's IAM identity. The
/// request's metrics are printed once.
/// Every caller may act on every scope (`ScopeAuthorization=none`).
pub async fn handle<S: Store>(counter: &Counter<S>, request: Request, now: EpochMillis) -> Response<Body> {
    handle_with(counter, &Authorizer::<NoTags>::default(), request, now).await
}

/// [`handle`], each scope checked by `authorizer` first.
pub async fn handle_with<S: Store, T: PrincipalTags>(
    counter: &Counter<S>,
    authorizer: &Authorizer<T>,
    request: Request,
    now: EpochMillis,
) -> Response<Body> {
    let mut metrics = Metrics::from_env();
    let response = measured(counter, authorizer, request, now, &mut metrics).await;
    emit_metrics(&metrics);
    response
}

/// [`handle`] without the printing: the best-effort writes this request
/// swallowed and the cost of its store requests are added to `metrics`.
/// One request at a time per counter (as Lambda runs a function instance)
/// keeps the swallowed count the request's own.
pub async fn handle_measured<S: Store>(
    counter: &Counter<S>,
    request: Request,
    now: EpochMillis,
    metrics: &mut Metrics,
) -> Response<Body> {
    measured(counter, &Authorizer::<NoTags>::default(), request, now, metrics).await
}

async fn measured<S: Store, T: PrincipalTags>(
    counter: &Counter<S>,
    authorizer: &Authorizer<T>,
    request: Request,
    now: EpochMillis,
    metrics: &mut Metrics,
) -> Response<Body> {
    let watch = CostWatch::start(counter.store());
    let swallowed_before = counter.swallowed_best_effort_writes();
    let response = respond(counter, authorizer, &request, now).await;
    let swallowed = counter.swallowed_best_effort_writes().saturating_sub(swallowed_before);
    metrics
        .add(Metric::SwallowedBestEffortWrites, swallowed as f64)
        .add_cost(&watch.cost(counter.store()));
    response
}

async fn respond<S: Store, T: PrincipalTags>(
    counter: &Counter<S>,
    authorizer: &Authorizer<T>,
    request: &Request,
    now: EpochMillis,
) -> Response<Body> {
    let response = match dispatch(counter, authorizer, request, now).await {
        Ok(response) => response,
        Err(err) => {
            if let ApiError::Counter(
                counter_error @ (Error::Unavailable(_)
                | Error::SequenceContended { .. }
                | Error::SequenceOutcomeUnknown { .. }),
            ) = &err
            {
                warn!(error = %counter_error, detail = counter_error.detail(), "counter store unavailable or contended");
            }
            err.into_response()
        }
    };
    info!(
        method = %request.method(),
        path = request.uri().path(),
        status = response.status().as_u16(),
        caller = caller_arn(request),
        "request handled"
    );
    response
}

async fn dispatch<S: Store, T: PrincipalTags>(
    counter: &Counter<S>,
    authorizer: &Authorizer<T>,
    request: &Request,
    now: EpochMillis,
) -> Result<Response<Body>, ApiError> {
    let action = route(request.method(), request.uri().path())?;
    let (Action::Create { scope, .. } | Action::Delete { scope, .. } | Action::Usage { scope }) = &action;
    authorizer
        .check(request, scope.as_str())
        .await
        .map_err(|reason| ApiError::ScopeForbidden { reason })?;
    match action {
        Action::Create { scope, id } => {
            let numbered = wants_sequence(request.uri().query())?;
            let payload = parse_payload(request.body())?;
            let created = counter.create(&scope, &id, payload, now).await?;
            let sequence = if numbered {
                let claimed = counter
                    .next_number(&scope, Some(id.as_str()), now)
                    .await
                    .map_err(|err| {
                        warn!(%scope, %id, error = %err, detail = err.detail(), "created without a sequence number");
                        match err {
                            Error::SequenceOutcomeUnknown { .. } => ApiError::CreatedSequenceUnknown { id: id.clone() },
                            err => ApiError::CreatedWithoutSequence {
                                id: id.clone(),
                                reason: ApiError::Counter(err).message(),
                            },
                        }
                    })?;
                Some(claimed.number)
            } else {
                None
            };
            let body = CreatedResponse {
                created: &created,
                sequence,
            };
            let mut response = json_response(StatusCode::CREATED, &body);
            if let Ok(location) = HeaderValue::from_str(&item_path(&scope, &id)) {
                response.headers_mut().insert(header::LOCATION, location);
            }
            Ok(response)
        }
        Action::Delete { scope, id } => {
            counter.delete(&scope, &id, now).await?;
            let mut response = Response::new(Body::Empty);
            *response.status_mut() = StatusCode::NO_CONTENT;
            Ok(response)
        }
        Action::Usage { scope } => Ok(json_response(StatusCode::OK, &counter.usage(&scope).await?)),
    }
}

/// The body of `201 Created`: the create's outcome, and the sequence number
/// when the create asked for one.
#[derive(Debug, Serialize)]
struct CreatedResponse<'a> {
    #[serde(flatten)]
    created: &'a hybrid_counter::Created,
    #[serde(skip_serializing_if = "Option::is_none")]
    sequence: Option<u64>,
}

/// The query parameter a create asks for a sequence number with.
pub const SEQUENCE_PARAMETER: &str = "sequence";

/// Whether a create's query string asks for a sequence number:
/// `sequence=true` or `sequence=false` (the default), at most once. Other
/// parameters are not the API's and are left alone.
pub fn wants_sequence(query: Option<&str>) -> Result<bool, ApiError> {
    let invalid = |reason: String| ApiError::Counter(Error::InvalidInput(reason));
    let mut wanted = None;
    for pair in query.unwrap_or_default().split('&') {
        let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
        if key != SEQUENCE_PARAMETER {
            continue;
        }
        if wanted.is_some() {
            return Err(invalid(format!("give the {SEQUENCE_PARAMETER} parameter at most once")));
        }
        wanted = Some(match value {
            "true" => true,
            "false" => false,
            other => {
                return Err(invalid(format!(
                    "the {SEQUENCE_PARAMETER} parameter must be true or false, not {other:?}"
                )));
            }
        });
    }
    Ok(wanted.unwrap_or(false))
}

/// Matches `path` (still percent-encoded) and `method` against the routes,
/// then decodes and validates the identifiers. A path segment is decoded
/// after splitting, so `%2F` puts a `/` inside an id instead of adding a
/// segment.
pub fn route(method: &Method, path: &str) -> Result<Action, ApiError> {
    let no_route = || ApiError::NoRoute {
        method: method.clone(),
        path: path.to_owned(),
    };
    let not_allowed = |allow| ApiError::MethodNotAllowed {
        method: method.clone(),
        allow,
    };
    let segments: Vec<&str> = path.strip_prefix('/').ok_or_else(no_route)?.split('/').collect();
    match segments.as_slice() {
        ["scopes", scope, "items", id] => {
            let create = match *method {
                Method::POST => true,
                Method::DELETE => false,
                _ => return Err(not_allowed(ITEM_METHODS)),
            };
            let (scope, id) = (scope_segment(scope)?, id_segment(id)?);
            Ok(if create {
                Action::Create { scope, id }
            } else {
                Action::Delete { scope, id }
            })
        }
        ["scopes", scope, "usage"] => match *method {
            Method::GET => Ok(Action::Usage {
                scope: scope_segment(scope)?,
            }),
            _ => Err(not_allowed(USAGE_METHODS)),
        },
        _ => Err(no_route()),
    }
}

fn scope_segment(raw: &str) -> Result<Scope, Error> {
    Ok(Scope::new(decode_segment("scope", raw)?)?)
}

fn id_segment(raw: &str) -> Result<ResourceId, Error> {
    Ok(ResourceId::new(decode_segment("resource id", raw)?)?)
}

fn decode_segment(kind: &str, raw: &str) -> Result<String, Error> {
    percent_decode_str(raw)
        .decode_utf8()
        .map(Cow::into_owned)
        .map_err(|_| Error::InvalidInput(format!("{kind} is not valid UTF-8 once percent-decoded")))
}

/// The owner's payload: an empty body is no payload; otherwise the body must
/// be a JSON object, whose members become the item's attributes.
pub fn parse_payload(body: &[u8]) -> Result<Item, ApiError> {
    if body.len() > MAX_BODY_BYTES {
        return Err(ApiError::PayloadTooLarge { len: body.len() });
    }
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(Item::default());
    }
    let invalid = |reason: String| ApiError::Counter(Error::InvalidInput(reason));
    let value: serde_json::Value =
        serde_json::from_slice(body).map_err(|e| invalid(format!("the request body is not valid JSON: {e}")))?;
    let serde_json::Value::Object(attributes) = value else {
        return Err(invalid(format!(
            "the request body must be a JSON object of item attributes, not {}",
            json_kind(&value)
        )));
    };
    if attributes.contains_key("") {
        return Err(invalid("payload attribute names must not be empty".to_owned()));
    }
    serde_dynamo::to_item(attributes).map_err(|e| invalid(format!("the payload cannot be stored as an item: {e}")))
}

fn json_kind(value: &serde_json::Value) -> &'static str {
    match value {
        serde_json::Value::Null => "null",
        serde_json::Value::Bool(_) => "a boolean",
        serde_json::Value::Number(_) => "a number",
        serde_json::Value::String(_) => "a string",
        serde_json::Value::Array(_) => "an array",
        serde_json::Value::Object(_) => "an object",
    }
}

/// The percent-encoded path of an item, for `Location`.
pub fn item_path(scope: &Scope, id: &ResourceId) -> String {
    format!(
        "/scopes/{}/items/{}",
        utf8_percent_encode(scope.as_str(), SEGMENT),
        utf8_percent_encode(id.as_str(), SEGMENT)
    )
}

fn json_response(status: StatusCode, value: &impl Serialize) -> Response<Body> {
    let (status, text) = match serde_json::to_string(value) {
        Ok(text) => (status, text),
        // Unreachable for the API's plain types; still an answer, not a panic.
        Err(err) => {
            warn!(error = %err, "response serialization failed");
            let fallback = r#"{"error":"Internal","message":"the response could not be serialized"}"#;
            (StatusCode::INTERNAL_SERVER_ERROR, fallback.to_owned())
        }
    };
    let mut response = Response::new(Body::Text(text));
    *response.status_mut() = status;
    response
        .headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    response
}

/// The IAM principal that signed the request (function URL with AWS_IAM).
fn caller_arn(request: &Request) -> Option<&str> {
    request
        .request_context_ref()?
        .authorizer()?
        .iam
        .as_ref()?
        .user_arn
        .as_deref()
}

#[cfg(test)]
mod tests {
    use hybrid_counter::memory::{Chaos, Fault, MemoryStore, Op};
    use serde_json::Value;

    use super::*;

    const NOW: EpochMillis = 1_790_000_000_000;

    /// The owner's payload of an item as the table holds it (its image
    /// without the kit's attributes).
    fn payload(store: &MemoryStore, scope: &str, id: &str) -> Option<Item> {
        let mut image = store
            .tables()
            .resources
            .get(&(scope.to_owned(), id.to_owned()))?
            .image
            .clone();
        for name in hybrid_counter::keys::RESERVED_RESOURCE_ATTRIBUTES {
            image.remove(name);
        }
        Some(image)
    }

    fn counter(limit: u64) -> Counter<MemoryStore> {
        Counter::new(MemoryStore::default(), limit)
    }

    fn request(method: &str, path: &str, body: &str) -> Request {
        lambda_http::http::Request::builder()
            .method(method)
            .uri(path)
            .body(Body::from(body))
            .unwrap()
    }

    async fn call<S: Store>(counter: &Counter<S>, method: &str, path: &str, body: &str) -> (StatusCode, Value) {
        let response = handle(counter, request(method, path, body), NOW).await;
        let json = match response.body() {
            Body::Empty => Value::Null,
            body => serde_json::from_slice(body).expect("the body is JSON"),
        };
        (response.status(), json)
    }

    fn scope(s: &str) -> Scope {
        Scope::new(s).unwrap()
    }

    #[tokio::test]
    async fn a_swallowed_best_effort_write_is_counted_in_that_request_s_metrics_only() {
        let c = counter(5);
        c.store().inject(Op::AddBestEffort, Fault::Unavailable);
        let mut first = Metrics::new("hc-dev");
        let response = handle_measured(&c, request("POST", "/scopes/acct/items/w1", ""), NOW, &mut first).await;
        assert_eq!(response.status(), StatusCode::CREATED, "the create itself succeeds");
        let mut second = Metrics::new("hc-dev");
        let response = handle_measured(&c, request("POST", "/scopes/acct/items/w2", ""), NOW, &mut second).await;
        assert_eq!(response.status(), StatusCode::CREATED);
        let doc = first.document(1).unwrap();
        assert_eq!(doc["_aws"]["CloudWatchMetrics"][0]["Namespace"], "HybridCounterKit");
        assert_eq!(doc["Stack"], "hc-dev");
        assert_eq!(doc[Metric::SwallowedBestEffortWrites.name()], 1.0);
        assert_eq!(second.value(Metric::SwallowedBestEffortWrites), Some(0.0));
        assert!(second.value(Metric::Transactions).is_some() && second.value(Metric::WriteUnits).is_some());
    }

    fn id(s: &str) -> ResourceId {
        ResourceId::new(s).unwrap()
    }

    #[test]
    fn routes_the_three_operations() {
        assert_eq!(
            route(&Method::POST, "/scopes/acct/items/w1").unwrap(),
            Action::Create {
                scope: scope("acct"),
                id: id("w1")
            }
        );
        assert_eq!(
            route(&Method::DELETE, "/scopes/acct/items/w1").unwrap(),
            Action::Delete {
                scope: scope("acct"),
                id: id("w1")
            }
        );
        assert_eq!(
            route(&Method::GET, "/scopes/acct/usage").unwrap(),
            Action::Usage { scope: scope("acct") }
        );
    }

    #[test]
    fn segments_are_percent_decoded_after_splitting() {
        assert_eq!(
            route(&Method::POST, "/scopes/acct%2042/items/a%2Fb%25c%C3%BC").unwrap(),
            Action::Create {
                scope: scope("acct 42"),
                id: id("a/b%cü")
            }
        );
        // Not an escape: kept as written.
        assert_eq!(
            route(&Method::GET, "/scopes/100%/usage").unwrap(),
            Action::Usage { scope: scope("100%") }
        );
    }

    #[test]
    fn unknown_paths_are_route_not_found() {
        for path in [
            "/",
            "/scopes",
            "/scopes/acct",
            "/scopes/acct/items",
            "/scopes/acct/usage/",
            "/scopes/acct/items/w1/extra",
            "/Scopes/acct/usage",
            "scopes/acct/usage",
        ] {
            let err = route(&Method::GET, path).unwrap_err();
            assert!(matches!(err, ApiError::NoRoute { .. }), "{path}: {err}");
            assert_eq!((err.status(), err.code()), (StatusCode::NOT_FOUND, "RouteNotFound"));
        }
    }

    #[test]
    fn a_wrong_method_is_refused_before_the_ids_are_validated() {
        let err = route(&Method::GET, "/scopes/acct/items/%00").unwrap_err();
        assert!(
            matches!(
                err,
                ApiError::MethodNotAllowed {
                    allow: "POST, DELETE",
                    ..
                }
            ),
            "{err}"
        );
        let err = route(&Method::PUT, "/scopes/acct/usage").unwrap_err();
        assert!(matches!(err, ApiError::MethodNotAllowed { allow: "GET", .. }), "{err}");
    }

    #[tokio::test]
    async fn method_not_allowed_is_405_with_allow() {
        let c = counter(5);
        for (method, path, allow) in [
            ("GET", "/scopes/acct/items/w1", "POST, DELETE"),
            ("PUT", "/scopes/acct/items/w1", "POST, DELETE"),
            ("POST", "/scopes/acct/usage", "GET"),
            ("DELETE", "/scopes/acct/usage", "GET"),
        ] {
            let response = handle(&c, request(method, path, ""), NOW).await;
            assert_eq!(response.status(), StatusCode::METHOD_NOT_ALLOWED, "{method} {path}");
            assert_eq!(response.headers()[header::ALLOW], allow);
            let body: Value = serde_json::from_slice(response.body()).unwrap();
            assert_eq!(body["error"], "MethodNotAllowed");
        }
    }

    #[tokio::test]
    async fn bad_ids_are_400_with_the_reason() {
        let c = counter(5);
        let long = "x".repeat(257);
        for (path, reason) in [
            ("/scopes//items/w1".to_owned(), "scope must not be empty"),
            ("/scopes/acct/items/".to_owned(), "resource id must not be empty"),
            (
                "/scopes/acct/items/a%00b".to_owned(),
                "resource id contains a control character at byte 1",
            ),
            (
                "/scopes/acct/items/a%0Ab".to_owned(),
                "resource id contains a control character",
            ),
            ("/scopes/a%7Fb/usage".to_owned(), "scope contains a control character"),
            (
                format!("/scopes/acct/items/{long}"),
                "resource id is 257 bytes long; the maximum is 256 bytes",
            ),
            (
                "/scopes/%20acct/usage".to_owned(),
                "scope must not start or end with whitespace",
            ),
            (
                "/scopes/acct/items/%FF".to_owned(),
                "resource id is not valid UTF-8 once percent-decoded",
            ),
        ] {
            let method = if path.ends_with("/usage") { "GET" } else { "POST" };
            let (status, body) = call(&c, method, &path, "").await;
            assert_eq!(status, StatusCode::BAD_REQUEST, "{path}");
            assert_eq!(body["error"], "InvalidInput", "{path}");
            let message = body["message"].as_str().unwrap();
            assert!(message.starts_with(reason), "{path}: {message}");
        }
        assert!(c.store().tables().resources.is_empty(), "nothing may be written");
    }

    #[test]
    fn the_id_length_limit_counts_decoded_bytes() {
        // 256 bytes once decoded, 768 characters on the wire: accepted.
        let path = format!("/scopes/acct/items/{}", "%41".repeat(256));
        assert!(route(&Method::POST, &path).is_ok());
        let path = format!("/scopes/acct/items/{}", "%41".repeat(257));
        assert!(route(&Method::POST, &path).is_err());
    }

    #[tokio::test]
    async fn create_stores_the_json_object_as_the_payload() {
        let c = counter(5);
        let response = handle(
            &c,
            request(
                "POST",
                "/scopes/acct%201/items/w%2F1",
                r#"{"color":"blue","size":3,"tags":["a"],"meta":{"x":null}}"#,
            ),
            NOW,
        )
        .await;
        assert_eq!(response.status(), StatusCode::CREATED);
        assert_eq!(response.headers()[header::CONTENT_TYPE], "application/json");
        assert_eq!(response.headers()[header::LOCATION], "/scopes/acct%201/items/w%2F1");
        let body: Value = serde_json::from_slice(response.body()).unwrap();
        assert_eq!(body["scope"], "acct 1");
        assert_eq!(body["id"], "w/1");
        assert_eq!(body["best_effort_counted"], true);
        assert!(!body["incarnation"].as_str().unwrap().is_empty());
        let payload = payload(c.store(), "acct 1", "w/1").unwrap();
        let expected: Item =
            serde_dynamo::to_item(json!({"color":"blue","size":3,"tags":["a"],"meta":{"x":null}})).unwrap();
        assert_eq!(payload, expected);
    }

    #[tokio::test]
    async fn an_empty_body_is_an_empty_payload() {
        let c = counter(5);
        for (n, body) in ["", "  \n", "{}"].into_iter().enumerate() {
            let (status, _) = call(&c, "POST", &format!("/scopes/acct/items/w{n}"), body).await;
            assert_eq!(status, StatusCode::CREATED, "{body:?}");
            assert!(payload(c.store(), "acct", &format!("w{n}")).unwrap().is_empty());
        }
    }

    #[tokio::test]
    async fn bad_bodies_are_400_and_write_nothing() {
        let c = counter(5);
        for (body, reason) in [
            ("{", "the request body is not valid JSON"),
            ("not json", "the request body is not valid JSON"),
            (
                "[1,2]",
                "the request body must be a JSON object of item attributes, not an array",
            ),
            (
                "\"text\"",
                "the request body must be a JSON object of item attributes, not a string",
            ),
            (
                "null",
                "the request body must be a JSON object of item attributes, not null",
            ),
            (
                "42",
                "the request body must be a JSON object of item attributes, not a number",
            ),
            (r#"{"":1}"#, "payload attribute names must not be empty"),
            (
                r#"{"incarnation":"mine"}"#,
                "payload attribute \"incarnation\" is reserved by the counter kit",
            ),
            (
                r#"{"scope":"other"}"#,
                "payload attribute \"scope\" is reserved by the counter kit",
            ),
        ] {
            let (status, json) = call(&c, "POST", "/scopes/acct/items/w", body).await;
            assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
            assert_eq!(json["error"], "InvalidInput");
            let message = json["message"].as_str().unwrap();
            assert!(message.starts_with(reason), "{body}: {message}");
        }
        assert!(c.store().tables().resources.is_empty());
        assert!(c.store().tables().counters.is_empty());
    }

    #[tokio::test]
    async fn a_body_too_big_for_an_item_is_413() {
        let c = counter(5);
        let body = format!(r#"{{"blob":"{}"}}"#, "x".repeat(MAX_BODY_BYTES));
        let (status, json) = call(&c, "POST", "/scopes/acct/items/w", &body).await;
        assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE);
        assert_eq!(json["error"], "PayloadTooLarge");
    }

    #[tokio::test]
    async fn limit_duplicate_and_delete_map_to_their_statuses() {
        let c = counter(2);
        assert_eq!(
            call(&c, "POST", "/scopes/acct/items/a", "").await.0,
            StatusCode::CREATED
        );
        let (status, json) = call(&c, "POST", "/scopes/acct/items/a", "").await;
        assert_eq!(status, StatusCode::CONFLICT);
        assert_eq!(json["error"], "AlreadyExists");
        assert_eq!(
            call(&c, "POST", "/scopes/acct/items/b", "").await.0,
            StatusCode::CREATED
        );

        let (status, json) = call(&c, "POST", "/scopes/acct/items/c", "").await;
        assert_eq!(status, StatusCode::CONFLICT);
        assert_eq!(
            json,
            json!({
                "error": "LimitExceeded",
                "message": "limit exceeded: the scope uses 2 of 2",
                "usage": 2,
                "limit": 2,
            })
        );

        let (status, json) = call(&c, "GET", "/scopes/acct/usage", "").await;
        assert_eq!(status, StatusCode::OK);
        assert_eq!(
            json,
            json!({"best_effort": 2, "eventual": 0, "effective": 2, "limit": 2})
        );

        assert_eq!(
            call(&c, "DELETE", "/scopes/acct/items/a", "").await,
            (StatusCode::NO_CONTENT, Value::Null)
        );
        let (status, json) = call(&c, "DELETE", "/scopes/acct/items/a", "").await;
        assert_eq!(status, StatusCode::NOT_FOUND);
        assert_eq!(json["error"], "NotFound");
        let (status, json) = call(&c, "DELETE", "/scopes/acct/items/never", "").await;
        assert_eq!(
            (status, json["error"].as_str()),
            (StatusCode::NOT_FOUND, Some("NotFound"))
        );
        assert_eq!(
            c.usage(&scope("acct")).await.unwrap().best_effort,
            1,
            "repeated deletes must not drain BE"
        );
    }

    #[tokio::test]
    async fn strict_admission_keeps_the_contract_and_gives_back_refused_slots() {
        let c = counter(2).with_admission(hybrid_counter::Admission::Strict);
        // A bad payload is refused before any slot is reserved.
        let (status, _) = call(&c, "POST", "/scopes/acct/items/a", r#"{"deleted":true}"#).await;
        assert_eq!(status, StatusCode::BAD_REQUEST);
        assert!(c.store().tables().counters.is_empty());
        assert_eq!(
            call(&c, "POST", "/scopes/acct/items/a", "").await.0,
            StatusCode::CREATED
        );
        // A duplicate reserved a slot, then gave it back.
        let (status, json) = call(&c, "POST", "/scopes/acct/items/a", "").await;
        assert_eq!(
            (status, json["error"].as_str()),
            (StatusCode::CONFLICT, Some("AlreadyExists"))
        );
        assert_eq!(c.usage(&scope("acct")).await.unwrap().best_effort, 1);
        assert_eq!(
            call(&c, "POST", "/scopes/acct/items/b", "").await.0,
            StatusCode::CREATED
        );
        let (status, json) = call(&c, "POST", "/scopes/acct/items/c", "").await;
        assert_eq!(
            (status, json["error"].as_str()),
            (StatusCode::CONFLICT, Some("LimitExceeded"))
        );
        assert_eq!(
            call(&c, "DELETE", "/scopes/acct/items/a", "").await.0,
            StatusCode::NO_CONTENT
        );
        assert_eq!(c.usage(&scope("acct")).await.unwrap().best_effort, 1);
    }

    #[tokio::test]
    async fn an_unavailable_store_is_503_with_retry_after_and_no_detail() {
        // Every call fails the way an exhausted DynamoDB call would.
        let store = MemoryStore::new();
        store.set_chaos(Chaos {
            faults: [Op::ReadCounters, Op::GetResource, Op::PutResource, Op::AddBestEffort]
                .into_iter()
                .map(|op| (op, Fault::Unavailable, 1000))
                .collect(),
            ..Chaos::default()
        });
        let c = Counter::new(store, 5);
        for (method, path) in [
            ("POST", "/scopes/acct/items/w"),
            ("DELETE", "/scopes/acct/items/w"),
            ("GET", "/scopes/acct/usage"),
        ] {
            let response = handle(&c, request(method, path, ""), NOW).await;
            assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE, "{method}");
            assert_eq!(response.headers()[header::RETRY_AFTER], "1");
            let text = std::str::from_utf8(response.body()).unwrap();
            assert!(!text.contains("injected"), "the store's error stays in the log: {text}");
            let json: Value = serde_json::from_str(text).unwrap();
            assert_eq!(json, json!({"error": "Unavailable", "message": UNAVAILABLE_MESSAGE}));
        }
    }

    #[test]
    fn every_counter_error_has_its_status_and_code() {
        let cases = [
            (Error::InvalidInput("x".into()), 400, "InvalidInput"),
            (Error::NotFound, 404, "NotFound"),
            (Error::AlreadyExists, 409, "AlreadyExists"),
            (Error::LimitExceeded { usage: 1, limit: 1 }, 409, "LimitExceeded"),
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

    #[tokio::test]
    async fn a_create_that_asks_for_a_sequence_number_gets_the_next_one_and_others_get_none() {
        let c = counter(10);
        let (status, body) = call(&c, "POST", "/scopes/acct/items/a?sequence=true", "").await;
        assert_eq!(
            (status, body["sequence"].clone()),
            (StatusCode::CREATED, json!(1)),
            "{body}"
        );
        assert_eq!(body["id"], json!("a"));
        let (_, body) = call(&c, "POST", "/scopes/acct/items/b", "").await;
        assert!(body.get("sequence").is_none(), "not asked, not given: {body}");
        let (_, body) = call(&c, "POST", "/scopes/acct/items/c?x=1&sequence=true", r#"{"n": 1}"#).await;
        assert_eq!(body["sequence"], json!(2), "no gap for the unnumbered create: {body}");
        let owners: Vec<_> = c
            .store()
            .tables()
            .sequence_items
            .into_values()
            .map(|e| e.owner)
            .collect();
        assert_eq!(owners, vec![Some("a".to_owned()), Some("c".to_owned())]);
    }

    #[tokio::test]
    async fn a_refused_numbered_create_spends_no_number_and_bad_parameters_are_400() {
        let c = counter(1);
        call(&c, "POST", "/scopes/acct/items/a?sequence=true", "").await;
        let (status, _) = call(&c, "POST", "/scopes/acct/items/b?sequence=true", "").await;
        assert_eq!(status, StatusCode::CONFLICT, "over the limit");
        let (status, _) = call(&c, "POST", "/scopes/acct/items/a?sequence=true", "").await;
        assert_eq!(status, StatusCode::CONFLICT, "already exists");
        assert_eq!(c.store().tables().sequences["acct"], 1, "refused creates claim nothing");
        for (query, reason) in [
            ("sequence=yes", "must be true or false, not \"yes\""),
            ("sequence", "must be true or false, not \"\""),
            ("sequence=true&sequence=true", "at most once"),
        ] {
            let (status, body) = call(&c, "POST", &format!("/scopes/other/items/x?{query}"), "").await;
            assert_eq!(status, StatusCode::BAD_REQUEST, "{query}");
            assert_eq!(body["error"], json!("InvalidInput"));
            assert!(body["message"].as_str().unwrap().contains(reason), "{query}: {body}");
        }
        assert!(
            c.store().tables().resources.keys().all(|(s, _)| s != "other"),
            "a bad request writes nothing"
        );
    }

    #[tokio::test]
    async fn a_create_whose_number_cannot_be_claimed_says_the_item_exists_unnumbered() {
        let c = counter(10);
        c.store().inject(
            hybrid_counter::memory::Op::ClaimSequence,
            hybrid_counter::memory::Fault::Rejected,
        );
        let (status, body) = call(&c, "POST", "/scopes/acct/items/a?sequence=true", "").await;
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(body["error"], json!("CreatedWithoutSequence"));
        assert!(
            body["message"].as_str().unwrap().contains("item a was created"),
            "{body}"
        );
        assert!(
            c.store()
                .tables()
                .resources
                .contains_key(&("acct".to_owned(), "a".to_owned()))
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_create_whose_numbers_claim_may_still_apply_says_it_may_be_numbered_not_unnumbered() {
        // Every claim answered 500 before it applied: the last one may
        // still land, so the item may be numbered.
        let c = counter(10);
        c.store().set_chaos(hybrid_counter::memory::Chaos {
            faults: vec![(
                hybrid_counter::memory::Op::ClaimSequence,
                hybrid_counter::memory::Fault::Unavailable,
                1000,
            )],
            ..hybrid_counter::memory::Chaos::default()
        });
        let response = handle(&c, request("POST", "/scopes/acct/items/a?sequence=true", ""), NOW).await;
        assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert!(
            response.headers().get(header::RETRY_AFTER).is_none(),
            "a blind retry could claim a second number"
        );
        let body: Value = serde_json::from_slice(response.body()).unwrap();
        assert_eq!(body["error"], json!("CreatedSequenceUnknown"), "{body}");
        let message = body["message"].as_str().unwrap();
        assert!(message.contains("may have been claimed"), "{body}");
        assert!(
            !message.contains("unnumbered") && !message.contains("injected"),
            "{body}"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_contended_sequence_answers_a_fixed_message_without_the_stores_words() {
        // Every claim of the budget cancelled with DynamoDB's reasons: the
        // item is created, unnumbered, and the body says so in the API's
        // words only.
        let c = counter(10);
        for _ in 0..hybrid_counter::sequence::DEFAULT_BACKOFF.max_attempts {
            c.store().inject(
                hybrid_counter::memory::Op::ClaimSequence,
                hybrid_counter::memory::Fault::Conflict,
            );
        }
        let response = handle(&c, request("POST", "/scopes/acct/items/a?sequence=true", ""), NOW).await;
        assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
        let text = std::str::from_utf8(response.body()).unwrap();
        for word in ["TransactionConflict", "cancelled", "attempts"] {
            assert!(!text.contains(word), "{word:?} in the body: {text}");
        }
        let body: Value = serde_json::from_str(text).unwrap();
        assert_eq!(
            body,
            json!({
                "error": "CreatedWithoutSequence",
                "message": format!(
                    "item a was created, but no sequence number could be claimed for it ({SEQUENCE_CONTENDED_MESSAGE}); \
                     the item stays, unnumbered: delete it and create it again to number it"
                ),
            })
        );
        // The same error on its own: a fixed code and message.
        let err = ApiError::from(Error::SequenceContended {
            scope: "acct".into(),
            attempts: 16,
            last: "transaction cancelled: [TransactionConflict, None]".into(),
        });
        let response = err.into_response();
        assert_eq!(response.headers()[header::RETRY_AFTER], "1");
        let body: Value = serde_json::from_slice(response.body()).unwrap();
        assert_eq!(
            body,
            json!({"error": "SequenceContended", "message": SEQUENCE_CONTENDED_MESSAGE})
        );
    }

    #[tokio::test]
    async fn a_function_url_event_reaches_the_route_with_its_caller() {
        let request = lambda_http::request::from_str(include_str!("../fixtures/function-url-create.json")).unwrap();
        assert_eq!(
            caller_arn(&request),
            Some("arn:aws:iam::123456789012:user/widget-service")
        );
        let c = counter(5);
        let response = handle(&c, request, NOW).await;
        assert_eq!(response.status(), StatusCode::CREATED);
        let payload = payload(c.store(), "acct 42", "widget/1").expect("stored under the decoded key");
        assert_eq!(
            payload,
            serde_dynamo::to_item(json!({"color": "blue", "size": 3})).unwrap()
        );
    }

    /// Tags as IAM would hold them, by principal name; records each read.
    struct FakeTags(std::collections::HashMap<&'static str, &'static str>);

    impl PrincipalTags for FakeTags {
        async fn tag(&self, principal: &scope_auth::Principal, key: &str) -> Result<Option<String>, String> {
            assert_eq!(key, scope_auth::SCOPE_PREFIX_TAG);
            let (scope_auth::Principal::Role { name, .. } | scope_auth::Principal::User { name, .. }) = principal;
            Ok(self.0.get(name.as_str()).map(|v| (*v).to_owned()))
        }
    }

    /// The function URL fixture, its caller replaced by `user_arn` and its
    /// path by `path`.
    fn function_url_request(user_arn: &str, path: &str) -> Request {
        let mut event: Value = serde_json::from_str(include_str!("../fixtures/function-url-create.json")).unwrap();
        event["requestContext"]["authorizer"]["iam"]["userArn"] = user_arn.into();
        event["rawPath"] = path.into();
        event["requestContext"]["http"]["path"] = path.into();
        lambda_http::request::from_str(&event.to_string()).unwrap()
    }

    fn principal_tag(tags: &[(&'static str, &'static str)]) -> Authorizer<FakeTags> {
        Authorizer {
            mode: ScopeAuthorization::PrincipalTag,
            tags: FakeTags(tags.iter().copied().collect()),
        }
    }

    async fn forbidden_message(response: Response<Body>) -> String {
        assert_eq!(response.status(), StatusCode::FORBIDDEN);
        let body: Value = serde_json::from_slice(response.body()).unwrap();
        assert_eq!(body["error"], "ScopeForbidden");
        body["message"].as_str().unwrap().to_owned()
    }

    #[tokio::test]
    async fn with_principal_tag_a_caller_acts_only_on_scopes_within_its_tag() {
        let role = "arn:aws:sts::123456789012:assumed-role/tenant-acct/session-1";
        let authorizer = principal_tag(&[("tenant-acct", "acct"), ("widget-service", "other")]);
        let c = counter(5);
        let created = handle_with(
            &c,
            &authorizer,
            function_url_request(role, "/scopes/acct%2F42/items/w1"),
            NOW,
        )
        .await;
        assert_eq!(created.status(), StatusCode::CREATED);

        let refused = handle_with(
            &c,
            &authorizer,
            function_url_request(role, "/scopes/bank/items/w1"),
            NOW,
        )
        .await;
        let message = forbidden_message(refused).await;
        assert!(
            message.contains(r#"scope "bank" is neither "acct" nor under "acct/", the hck-scope-prefix tag of"#),
            "{message}"
        );
        // The same holds for an IAM user, and for reads.
        let user = "arn:aws:iam::123456789012:user/widget-service";
        let mut usage = function_url_request(user, "/scopes/acct%2042/usage");
        *usage.method_mut() = Method::GET;
        let message = forbidden_message(handle_with(&c, &authorizer, usage, NOW).await).await;
        assert!(message.contains(r#"is neither "other""#), "{message}");
        assert!(
            payload(c.store(), "bank", "w1").is_none(),
            "a refused request writes nothing"
        );
    }

    #[tokio::test]
    async fn with_principal_tag_untagged_foreign_and_anonymous_callers_are_refused() {
        let authorizer = principal_tag(&[("tenant-acct", "acct")]);
        let c = counter(5);
        let cases = [
            (
                "arn:aws:sts::123456789012:assumed-role/untagged/s",
                "has no hck-scope-prefix tag",
            ),
            (
                "arn:aws:sts::999999999999:assumed-role/tenant-acct/s",
                "belongs to another account",
            ),
            (
                "arn:aws:iam::123456789012:root",
                "neither an IAM role session nor an IAM user",
            ),
        ];
        for (arn, why) in cases {
            let response = handle_with(&c, &authorizer, function_url_request(arn, "/scopes/acct/items/w1"), NOW).await;
            let message = forbidden_message(response).await;
            assert!(message.contains(why), "{arn}: {message}");
        }
        // Without ScopeAuthorization (`none`), the same untagged caller may.
        let response = handle(
            &c,
            function_url_request(
                "arn:aws:sts::123456789012:assumed-role/untagged/s",
                "/scopes/acct/items/w1",
            ),
            NOW,
        )
        .await;
        assert_eq!(response.status(), StatusCode::CREATED);
    }

    #[test]
    fn caller_arns_name_the_principal_whose_tags_are_read() {
        use scope_auth::Principal;
        assert_eq!(
            Principal::from_arn("arn:aws:sts::123456789012:assumed-role/app-role/i-0abc"),
            Some(Principal::Role {
                account: "123456789012".into(),
                name: "app-role".into()
            })
        );
        assert_eq!(
            Principal::from_arn("arn:aws:iam::123456789012:user/division/team/alice"),
            Some(Principal::User {
                account: "123456789012".into(),
                name: "alice".into()
            })
        );
        for other in [
            "arn:aws:iam::123456789012:root",
            "arn:aws:sts::123456789012:federated-user/bob",
            "arn:aws:sts::123456789012:assumed-role/",
            "not an arn",
        ] {
            assert_eq!(Principal::from_arn(other), None, "{other}");
        }
        let lookup = |value: &'static str| move |_: &str| Some(value.to_owned());
        assert_eq!(ScopeAuthorization::from_lookup(|_| None), Ok(ScopeAuthorization::None));
        assert_eq!(
            ScopeAuthorization::from_lookup(lookup("principal-tag")),
            Ok(ScopeAuthorization::PrincipalTag)
        );
        assert!(ScopeAuthorization::from_lookup(lookup("tags")).is_err());
    }
}
