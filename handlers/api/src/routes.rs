//! The API's routes ([`router`]; the contract is `handlers/api/openapi.yaml`)
//! and what they extract: the scope and id from the path, `?sequence=` from
//! the query, the owner's payload from the body.

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::rejection::{BytesRejection, PathRejection};
use axum::extract::{DefaultBodyLimit, FromRequestParts, Path, Query, State};
use axum::http::request::Parts;
use axum::http::{Method, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Extension, Json, Router};
use hybrid_counter::{Error, RequestStore, ResourceId, Scope, SequenceStore};
use lambda_http::request::RequestContext;
use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, utf8_percent_encode};
use serde::Serialize;
use serde_dynamo::Item;
use tracing::warn;

use crate::error::{ApiError, MAX_BODY_BYTES};
use crate::scope_auth::PrincipalTags;
use crate::state::{Api, Now};

/// Methods of the item route, for `405`'s `Allow` header.
const ITEM_METHODS: &str = "POST, DELETE";
/// Methods of the usage route, for `405`'s `Allow` header.
const USAGE_METHODS: &str = "GET";

/// The query parameter a create asks for a sequence number with.
pub const SEQUENCE_PARAMETER: &str = "sequence";

/// Characters kept as-is when a scope or id is put back into a path: RFC 3986
/// unreserved ones; everything else is percent-encoded.
const SEGMENT: &AsciiSet = &NON_ALPHANUMERIC.remove(b'-').remove(b'_').remove(b'.').remove(b'~');

/// The routes over `api`. A method a route does not list is `405` with
/// `Allow` (HEAD included, which axum would otherwise serve with GET); any
/// other path is `404 RouteNotFound`; a body over [`MAX_BODY_BYTES`] is `413`.
pub fn router<S, T>(api: Arc<Api<S, T>>) -> Router
where
    S: RequestStore + SequenceStore + 'static,
    T: PrincipalTags + Send + Sync + 'static,
{
    let not_allowed = |allow: &'static str| move |method| async move { ApiError::MethodNotAllowed { method, allow } };
    let item = post(create::<S, T>)
        .delete(delete::<S, T>)
        .fallback(not_allowed(ITEM_METHODS));
    Router::new()
        .route("/scopes/{scope}/items/{id}", item.clone())
        // A parameter never matches an empty last segment: this empty id is
        // refused as one (400), not as an unknown path.
        .route("/scopes/{scope}/items/", item)
        .route(
            "/scopes/{scope}/usage",
            get(usage::<S, T>)
                .head(not_allowed(USAGE_METHODS))
                .fallback(not_allowed(USAGE_METHODS)),
        )
        .fallback(|method: Method, uri: Uri| async move {
            ApiError::NoRoute {
                method,
                path: uri.path().to_owned(),
            }
        })
        .layer(DefaultBodyLimit::max(MAX_BODY_BYTES))
        .with_state(api)
}

/// `POST /scopes/{scope}/items/{id}`: creates the item, then (with
/// `?sequence=true`) claims the scope's next number for it, so a refused
/// create spends no number; a number not claimed after the create is a
/// `503` that says the item exists ([`ApiError::CreatedWithoutSequence`],
/// [`ApiError::CreatedSequenceUnknown`]). Any query parses as a list of pairs.
async fn create<S: RequestStore + SequenceStore, T: PrincipalTags>(
    State(api): State<Arc<Api<S, T>>>,
    Now(now): Now,
    context: Option<Extension<RequestContext>>,
    ItemKey { scope, id }: ItemKey,
    Query(query): Query<Vec<(String, String)>>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    api.authorize(context, &scope).await?;
    let numbered = wants_sequence(&query)?;
    let payload = parse_payload(&body.map_err(unreadable)?)?;
    let created = api.counter.create(&scope, &id, payload, now).await?;
    let sequence = if numbered {
        let claimed = api
            .counter
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
    let location = [(header::LOCATION, item_path(&scope, &id))];
    Ok((StatusCode::CREATED, location, Json(body)).into_response())
}

/// `DELETE /scopes/{scope}/items/{id}`.
async fn delete<S: RequestStore, T: PrincipalTags>(
    State(api): State<Arc<Api<S, T>>>,
    Now(now): Now,
    context: Option<Extension<RequestContext>>,
    ItemKey { scope, id }: ItemKey,
) -> Result<StatusCode, ApiError> {
    api.authorize(context, &scope).await?;
    api.counter.delete(&scope, &id, now).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// `GET /scopes/{scope}/usage`.
async fn usage<S: RequestStore, T: PrincipalTags>(
    State(api): State<Arc<Api<S, T>>>,
    context: Option<Extension<RequestContext>>,
    ScopeKey(scope): ScopeKey,
) -> Result<Json<hybrid_counter::Usage>, ApiError> {
    api.authorize(context, &scope).await?;
    Ok(Json(api.counter.usage(&scope).await?))
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

/// `{scope}` and `{id}` of the item route (no `{id}`: an empty one). The
/// route matches the path as sent; each segment is percent-decoded after,
/// so `%2F` puts a `/` inside an id instead of adding a segment. Then both
/// are validated.
struct ItemKey {
    scope: Scope,
    id: ResourceId,
}

impl<S: Send + Sync> FromRequestParts<S> for ItemKey {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        let Path(params) = Path::<Vec<(String, String)>>::from_request_parts(parts, state)
            .await
            .map_err(undecodable)?;
        let param = |name: &str| {
            params
                .iter()
                .find(|(key, _)| key == name)
                .map_or("", |(_, value)| value)
        };
        Ok(Self {
            scope: Scope::new(param("scope")).map_err(Error::from)?,
            id: ResourceId::new(param("id")).map_err(Error::from)?,
        })
    }
}

/// `{scope}` of the usage route, as [`ItemKey`] reads it.
struct ScopeKey(Scope);

impl<S: Send + Sync> FromRequestParts<S> for ScopeKey {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        let Path(scope) = Path::<String>::from_request_parts(parts, state)
            .await
            .map_err(undecodable)?;
        Ok(Self(Scope::new(scope).map_err(Error::from)?))
    }
}

/// A path segment that is not UTF-8 once percent-decoded.
fn undecodable(rejection: PathRejection) -> ApiError {
    use axum::extract::path::ErrorKind;
    match &rejection {
        PathRejection::FailedToDeserializePathParams(err) => match err.kind() {
            ErrorKind::InvalidUtf8InPathParam { key } => {
                let kind = if key == "id" { "resource id" } else { key };
                ApiError::invalid(format!("{kind} is not valid UTF-8 once percent-decoded"))
            }
            _ => ApiError::invalid(rejection.body_text()),
        },
        _ => ApiError::invalid(rejection.body_text()),
    }
}

/// A body that could not be read: over the limit, or broken off.
fn unreadable(rejection: BytesRejection) -> ApiError {
    if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE {
        ApiError::PayloadTooLarge
    } else {
        ApiError::invalid(rejection.body_text())
    }
}

/// Whether a create's query asks for a sequence number: `sequence=true` or
/// `sequence=false` (the default), at most once. Other parameters are not
/// the API's and are left alone. Names and values are compared once
/// percent-decoded (`sequence=tru%65` is `true`), as RFC 3986 makes `%65`
/// and `e` the same; the router before axum compared the raw text.
pub fn wants_sequence(query: &[(String, String)]) -> Result<bool, ApiError> {
    let mut wanted = None;
    for (_, value) in query.iter().filter(|(key, _)| key == SEQUENCE_PARAMETER) {
        if wanted.is_some() {
            return Err(ApiError::invalid(format!(
                "give the {SEQUENCE_PARAMETER} parameter at most once"
            )));
        }
        wanted = Some(match value.as_str() {
            "true" => true,
            "false" => false,
            other => {
                return Err(ApiError::invalid(format!(
                    "the {SEQUENCE_PARAMETER} parameter must be true or false, not {other:?}"
                )));
            }
        });
    }
    Ok(wanted.unwrap_or(false))
}

/// The owner's payload: an empty body is no payload; otherwise the body must
/// be a JSON object, whose members become the item's attributes.
pub fn parse_payload(body: &[u8]) -> Result<Item, ApiError> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(Item::default());
    }
    let value: serde_json::Value = serde_json::from_slice(body)
        .map_err(|e| ApiError::invalid(format!("the request body is not valid JSON: {e}")))?;
    let serde_json::Value::Object(attributes) = value else {
        return Err(ApiError::invalid(format!(
            "the request body must be a JSON object of item attributes, not {}",
            json_kind(&value)
        )));
    };
    if attributes.contains_key("") {
        return Err(ApiError::invalid(
            "payload attribute names must not be empty".to_owned(),
        ));
    }
    serde_dynamo::to_item(attributes)
        .map_err(|e| ApiError::invalid(format!("the payload cannot be stored as an item: {e}")))
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

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use axum::http::{StatusCode, header};
    use hybrid_counter::memory::{Chaos, Fault, MemoryStore, Op};
    use hybrid_counter::{Counter, Error};
    use serde_dynamo::Item;
    use serde_json::{Value, json};

    use super::*;
    use crate::error::{SEQUENCE_CONTENDED_MESSAGE, UNAVAILABLE_MESSAGE};
    use crate::test_support::{NOW, call, counter, json, payload, request, scope};
    use crate::{MAX_BODY_BYTES, handle};

    /// Creates `path` (an item route) and answers its 201 body.
    async fn created(c: &Counter<MemoryStore>, path: &str) -> Value {
        let (status, body) = call(c, "POST", path, "").await;
        assert_eq!(status, StatusCode::CREATED, "{path}: {body}");
        body
    }

    #[tokio::test]
    async fn routes_the_three_operations() {
        let c = counter(5);
        let body = created(&c, "/scopes/acct/items/w1").await;
        assert_eq!((&body["scope"], &body["id"]), (&json!("acct"), &json!("w1")));
        assert!(payload(c.store(), "acct", "w1").is_some());
        let (status, usage) = call(&c, "GET", "/scopes/acct/usage", "").await;
        assert_eq!((status, &usage["best_effort"]), (StatusCode::OK, &json!(1)));
        let (status, _) = call(&c, "DELETE", "/scopes/acct/items/w1", "").await;
        assert_eq!(status, StatusCode::NO_CONTENT);
        let (_, usage) = call(&c, "GET", "/scopes/acct/usage", "").await;
        assert_eq!(usage["best_effort"], json!(0), "the delete reached the item");
    }

    #[tokio::test]
    async fn segments_are_percent_decoded_after_splitting() {
        let c = counter(5);
        let body = created(&c, "/scopes/acct%2042/items/a%2Fb%25c%C3%BC").await;
        assert_eq!((&body["scope"], &body["id"]), (&json!("acct 42"), &json!("a/b%cü")));
        // Not an escape: kept as written.
        let body = created(&c, "/scopes/100%/items/x").await;
        assert_eq!(body["scope"], json!("100%"));
        let (status, usage) = call(&c, "GET", "/scopes/100%/usage", "").await;
        assert_eq!((status, &usage["best_effort"]), (StatusCode::OK, &json!(1)));
    }

    #[tokio::test]
    async fn unknown_paths_are_route_not_found() {
        let c = counter(5);
        for path in [
            "/",
            "/scopes",
            "/scopes/acct",
            "/scopes/acct/items",
            "/scopes/acct/usage/",
            "/scopes/acct/items/w1/extra",
            "/Scopes/acct/usage",
        ] {
            let (status, body) = call(&c, "GET", path, "").await;
            assert_eq!(
                (status, &body["error"]),
                (StatusCode::NOT_FOUND, &json!("RouteNotFound")),
                "{path}"
            );
        }
    }

    #[tokio::test]
    async fn a_wrong_method_is_refused_before_the_ids_are_validated() {
        let c = counter(5);
        for (method, path, allow) in [
            ("GET", "/scopes/acct/items/%00", "POST, DELETE"),
            ("PUT", "/scopes/%00/usage", "GET"),
        ] {
            let response = handle(&c, request(method, path, ""), NOW).await;
            assert_eq!(response.status(), StatusCode::METHOD_NOT_ALLOWED, "{method} {path}");
            assert_eq!(response.headers()[header::ALLOW], allow);
        }
    }

    #[tokio::test]
    async fn method_not_allowed_is_405_with_allow() {
        let c = counter(5);
        for (method, path, allow) in [
            ("GET", "/scopes/acct/items/w1", "POST, DELETE"),
            ("PUT", "/scopes/acct/items/w1", "POST, DELETE"),
            ("POST", "/scopes/acct/usage", "GET"),
            ("DELETE", "/scopes/acct/usage", "GET"),
            ("HEAD", "/scopes/acct/usage", "GET"),
        ] {
            let response = handle(&c, request(method, path, ""), NOW).await;
            assert_eq!(response.status(), StatusCode::METHOD_NOT_ALLOWED, "{method} {path}");
            assert_eq!(response.headers()[header::ALLOW], allow);
            if method != "HEAD" {
                assert_eq!(json(&response)["error"], "MethodNotAllowed");
            }
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

    #[tokio::test]
    async fn the_id_length_limit_counts_decoded_bytes() {
        // 256 bytes once decoded, 768 characters on the wire: accepted.
        let c = counter(5);
        let (status, _) = call(&c, "POST", &format!("/scopes/acct/items/{}", "%41".repeat(256)), "").await;
        assert_eq!(status, StatusCode::CREATED);
        let (status, _) = call(&c, "POST", &format!("/scopes/acct/items/{}", "%41".repeat(257)), "").await;
        assert_eq!(status, StatusCode::BAD_REQUEST);
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
        let store = Arc::new(MemoryStore::new());
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
    async fn the_sequence_parameter_is_read_percent_decoded() {
        let c = counter(10);
        let (status, body) = call(&c, "POST", "/scopes/acct/items/a?%73equence=tru%65", "").await;
        assert_eq!(
            (status, body["sequence"].clone()),
            (StatusCode::CREATED, json!(1)),
            "{body}"
        );
        let (status, _) = call(&c, "POST", "/scopes/acct/items/b?sequence=true&%73equence=false", "").await;
        assert_eq!(
            status,
            StatusCode::BAD_REQUEST,
            "the same parameter twice, however spelled"
        );
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
        let body = axum::body::to_bytes(response.into_body(), usize::MAX).await.unwrap();
        assert_eq!(
            serde_json::from_slice::<Value>(&body).unwrap(),
            json!({"error": "SequenceContended", "message": SEQUENCE_CONTENDED_MESSAGE})
        );
    }
}
