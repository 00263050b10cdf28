//! The example HTTP API (DESIGN §6): a Lambda function URL (`AWS_IAM` auth)
//! in front of the counter library's request path, as an axum [`Router`]
//! ([`routes`]; contract: `handlers/api/openapi.yaml`) that `lambda_http`
//! runs ([`app`]). Each request logs one line with its caller and prints the
//! kit's metrics for it ([`hybrid_counter::metrics`]).
//!
//! **A single-trust example**: anyone the function URL lets in may act on
//! every scope, unless `ScopeAuthorization=principal-tag` bounds each caller
//! by its IAM tag ([`scope_auth`]; the caller policy: `docs/api.md`). A real
//! multi-tenant API authorizes in front of the counter.
//!
//! [`handle`] and its siblings run that router on one request at a given
//! time, so tests drive the code Lambda runs over any store ([`RequestStore`] and [`SequenceStore`]).

mod error;
pub mod routes;
pub mod scope_auth;
mod state;
#[cfg(test)]
mod test_support;

use std::future::Future;
use std::sync::Arc;

use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::http::header::CONTENT_LENGTH;
use axum::middleware::{self, Next};
use hybrid_counter::metrics::{Metric, Metrics};
use hybrid_counter::{Counter, EpochMillis, RequestStore, SequenceStore, StoreBase};
use hybrid_counter_aws::lambda::{CostWatch, emit_metrics};
use lambda_http::tower::ServiceExt;
use lambda_http::tower::util::MapResponse;
use tracing::info;

pub use error::{ApiError, MAX_BODY_BYTES};
pub use lambda_http::{Body, Request, Response, http};
pub use routes::{SEQUENCE_PARAMETER, item_path, router};
use scope_auth::caller_arn;
pub use scope_auth::{Authorizer, IamTags, NoTags, PrincipalTags, ScopeAuthorization};
pub use state::Api;
use state::Now;

/// The function as Lambda runs it: the [`router`], each request logged
/// and its metrics printed, and no `Content-Length` on a 204.
pub fn app<S, T>(api: Arc<Api<S, T>>) -> MapResponse<Router, fn(axum::response::Response) -> axum::response::Response>
where
    S: RequestStore + SequenceStore + 'static,
    T: PrincipalTags + Send + Sync + 'static,
{
    let routes = router(api.clone()).layer(middleware::from_fn_with_state(api, observe::<S, T>));
    ServiceExt::<Request>::map_response(routes, without_length_on_no_content as fn(_) -> _)
}

/// axum gives every answer of a known size a `Content-Length`, a 204's
/// included, which RFC 9110 section 8.6 forbids ("A server MUST NOT send a
/// Content-Length header field in any response with a status code of ...
/// 204"). The old router sent none.
fn without_length_on_no_content(mut response: axum::response::Response) -> axum::response::Response {
    if response.status() == StatusCode::NO_CONTENT {
        response.headers_mut().remove(CONTENT_LENGTH);
    }
    response
}

async fn observe<S: StoreBase, T>(
    State(api): State<Arc<Api<S, T>>>,
    request: axum::extract::Request,
    next: Next,
) -> axum::response::Response {
    let mut metrics = Metrics::from_env();
    let response = measured(&api.counter, request, &mut metrics, |request| next.run(request)).await;
    emit_metrics(&metrics);
    response
}

/// Runs `routes` on `request` and logs it with the caller's IAM identity;
/// the best-effort writes it swallowed and the cost of its store requests
/// are added to `metrics`. One request at a time per counter (as Lambda
/// runs a function instance) keeps the swallowed count the request's own.
async fn measured<S: StoreBase, F>(
    counter: &Counter<S>,
    request: axum::extract::Request,
    metrics: &mut Metrics,
    routes: impl FnOnce(axum::extract::Request) -> F,
) -> axum::response::Response
where
    F: Future<Output = axum::response::Response>,
{
    let (method, path) = (request.method().clone(), request.uri().path().to_owned());
    let caller = caller_arn(request.extensions().get()).map(str::to_owned);
    let watch = CostWatch::start(counter.store());
    let swallowed_before = counter.swallowed_best_effort_writes();
    let response = routes(request).await;
    let swallowed = counter.swallowed_best_effort_writes().saturating_sub(swallowed_before);
    metrics
        .add(Metric::SwallowedBestEffortWrites, swallowed as f64)
        .add_cost(&watch.cost(counter.store()));
    info!(%method, path, status = response.status().as_u16(), caller, "request handled");
    response
}

/// Handles one request at time `now` as Lambda does ([`app`]), every caller
/// allowed every scope (`ScopeAuthorization=none`). Never fails: every
/// outcome is a response.
pub async fn handle<S: RequestStore + SequenceStore + 'static>(
    counter: &Counter<S>,
    request: Request,
    now: EpochMillis,
) -> Response<Body> {
    handle_with(counter, &Authorizer::<NoTags>::default(), request, now).await
}

/// [`handle`], each scope checked by `authorizer` first.
pub async fn handle_with<S, T>(
    counter: &Counter<S>,
    authorizer: &Authorizer<T>,
    request: Request,
    now: EpochMillis,
) -> Response<Body>
where
    S: RequestStore + SequenceStore + 'static,
    T: PrincipalTags + Clone + Send + Sync + 'static,
{
    let api = shared(counter, authorizer);
    let response = app(api).oneshot(at(request, now)).await;
    lambda_response(response.unwrap_or_else(|never| match never {})).await
}

/// [`handle`] without the printing: the request's metrics are added to `metrics`.
pub async fn handle_measured<S: RequestStore + SequenceStore + 'static>(
    counter: &Counter<S>,
    request: Request,
    now: EpochMillis,
    metrics: &mut Metrics,
) -> Response<Body> {
    let routes = router(shared(counter, &Authorizer::<NoTags>::default()));
    let response = measured(
        counter,
        at(request, now).map(axum::body::Body::new),
        metrics,
        |request| async { routes.oneshot(request).await.unwrap_or_else(|never| match never {}) },
    )
    .await;
    lambda_response(without_length_on_no_content(response)).await
}

/// An [`Api`] over clones of `counter` and `authorizer` (a counter's clone
/// shares its store and its counts).
fn shared<S, T: Clone>(counter: &Counter<S>, authorizer: &Authorizer<T>) -> Arc<Api<S, T>> {
    Arc::new(Api {
        counter: counter.clone(),
        authorizer: authorizer.clone(),
    })
}

/// `request`, to be handled at `now`.
fn at(mut request: Request, now: EpochMillis) -> Request {
    request.extensions_mut().insert(Now(now));
    request
}

/// The answer as `lambda_http` hands it to Lambda, an empty body as [`Body::Empty`].
async fn lambda_response(response: axum::response::Response) -> Response<Body> {
    let response = lambda_http::IntoResponse::into_response(response).await;
    response.map(|body| match body {
        Body::Text(text) if text.is_empty() => Body::Empty,
        Body::Binary(bytes) if bytes.is_empty() => Body::Empty,
        body => body,
    })
}

#[cfg(test)]
mod tests {
    use hybrid_counter::memory::{Fault, Op};
    use lambda_http::RequestExt;
    use serde_json::json;

    use super::*;
    use crate::test_support::{NOW, counter, payload, request};

    #[tokio::test]
    async fn a_204_carries_no_content_length_and_other_answers_carry_theirs() {
        let c = counter(5);
        let created = handle(&c, request("POST", "/scopes/acct/items/w1", ""), NOW).await;
        assert_eq!(created.status(), StatusCode::CREATED);
        assert!(
            created.headers().contains_key(CONTENT_LENGTH),
            "{:?}",
            created.headers()
        );
        let deleted = handle(&c, request("DELETE", "/scopes/acct/items/w1", ""), NOW).await;
        assert_eq!(deleted.status(), StatusCode::NO_CONTENT);
        assert_eq!(deleted.headers().get(CONTENT_LENGTH), None, "RFC 9110 8.6");
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

    #[tokio::test]
    async fn a_function_url_event_reaches_the_route_with_its_caller() {
        let request = lambda_http::request::from_str(include_str!("../fixtures/function-url-create.json")).unwrap();
        assert_eq!(
            caller_arn(request.request_context_ref()),
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
}
