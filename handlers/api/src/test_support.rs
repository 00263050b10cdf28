//! What the unit tests share: an in-memory counter, requests, and the
//! function URL fixture with a caller of choice.

use std::sync::Arc;

use hybrid_counter::memory::MemoryStore;
use hybrid_counter::{Counter, EpochMillis, RequestStore, Scope, SequenceStore};
use serde_dynamo::Item;
use serde_json::Value;

use crate::http::StatusCode;
use crate::scope_auth::{self, Principal};
use crate::{Authorizer, Body, PrincipalTags, Request, Response, ScopeAuthorization, handle};

pub const NOW: EpochMillis = 1_790_000_000_000;

/// The owner's payload of an item as the table holds it (its image
/// without the kit's attributes).
pub fn payload(store: &MemoryStore, scope: &str, id: &str) -> Option<Item> {
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

pub fn counter(limit: u64) -> Counter<MemoryStore> {
    Counter::new(Arc::default(), limit)
}

pub fn request(method: &str, path: &str, body: &str) -> Request {
    lambda_http::http::Request::builder()
        .method(method)
        .uri(path)
        .body(Body::from(body))
        .unwrap()
}

/// The JSON body of `response` (`null` when empty).
pub fn json(response: &Response<Body>) -> Value {
    match response.body() {
        Body::Empty => Value::Null,
        body => serde_json::from_slice(body).expect("the body is JSON"),
    }
}

pub async fn call<S: RequestStore + SequenceStore + 'static>(
    counter: &Counter<S>,
    method: &str,
    path: &str,
    body: &str,
) -> (StatusCode, Value) {
    let response = handle(counter, request(method, path, body), NOW).await;
    (response.status(), json(&response))
}

pub fn scope(s: &str) -> Scope {
    Scope::new(s).unwrap()
}

/// Tags as IAM would hold them, by principal name.
#[derive(Clone)]
pub struct FakeTags(std::collections::HashMap<&'static str, &'static str>);

impl PrincipalTags for FakeTags {
    async fn tag(&self, principal: &Principal, key: &str) -> Result<Option<String>, String> {
        assert_eq!(key, scope_auth::SCOPE_PREFIX_TAG);
        let (Principal::Role { name, .. } | Principal::User { name, .. }) = principal;
        Ok(self.0.get(name.as_str()).map(|v| (*v).to_owned()))
    }
}

/// The function URL fixture, its caller replaced by `user_arn` and its
/// path by `path`.
pub fn function_url_request(user_arn: &str, path: &str) -> Request {
    let mut event: Value = serde_json::from_str(include_str!("../fixtures/function-url-create.json")).unwrap();
    event["requestContext"]["authorizer"]["iam"]["userArn"] = user_arn.into();
    event["rawPath"] = path.into();
    event["requestContext"]["http"]["path"] = path.into();
    lambda_http::request::from_str(&event.to_string()).unwrap()
}

pub fn principal_tag(tags: &[(&'static str, &'static str)]) -> Authorizer<FakeTags> {
    Authorizer {
        mode: ScopeAuthorization::PrincipalTag,
        tags: FakeTags(tags.iter().copied().collect()),
    }
}

pub fn forbidden_message(response: Response<Body>) -> String {
    assert_eq!(response.status(), StatusCode::FORBIDDEN);
    let body = json(&response);
    assert_eq!(body["error"], "ScopeForbidden");
    body["message"].as_str().unwrap().to_owned()
}
