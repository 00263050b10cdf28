//! The example HTTP API against the emulator: real `http` requests through
//! the handler function Lambda runs, over the DynamoDB store.

use ::api::http::{self, StatusCode, header};
use ::api::{Body, handle};
use aws_sdk_dynamodb::types::AttributeValue;
use e2e::Kit;
use serde_json::{Value, json};

use crate::{NOW, scope};

/// Sends one request to the API handler; returns the status, the headers and
/// the JSON body (`null` when empty).
async fn call(kit: &Kit, method: &str, path: &str, body: &str) -> (StatusCode, http::HeaderMap, Value) {
    let request = http::Request::builder()
        .method(method)
        .uri(path)
        .body(Body::from(body))
        .expect("valid request");
    let response = handle(&kit.counter, request, NOW).await;
    let json = match response.body() {
        Body::Empty => Value::Null,
        body => serde_json::from_slice(body).expect("the API answers JSON"),
    };
    (response.status(), response.headers().clone(), json)
}

#[tokio::test]
async fn api_creates_up_to_the_limit_then_answers_409_limit_exceeded() {
    let mut kit = Kit::start(2).await;
    for id in ["a", "b"] {
        let (status, _, body) = call(&kit, "POST", &format!("/scopes/acct/items/{id}"), "").await;
        assert_eq!(status, StatusCode::CREATED, "{body}");
        assert_eq!((&body["scope"], &body["id"]), (&json!("acct"), &json!(id)));
    }
    let (status, _, body) = call(&kit, "POST", "/scopes/acct/items/c", r#"{"color":"red"}"#).await;
    assert_eq!(status, StatusCode::CONFLICT);
    assert_eq!(
        body,
        json!({
            "error": "LimitExceeded",
            "message": "limit exceeded: the scope uses 2 of 2",
            "usage": 2,
            "limit": 2,
        })
    );
    assert_eq!(
        kit.counts(&scope("acct")).await.live,
        2,
        "the refused item must not be written"
    );

    let (status, _, usage) = call(&kit, "GET", "/scopes/acct/usage", "").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        usage,
        json!({"best_effort": 2, "eventual": 0, "effective": 2, "limit": 2})
    );
    kit.drain().await;
    let (_, _, usage) = call(&kit, "GET", "/scopes/acct/usage", "").await;
    assert_eq!(
        usage,
        json!({"best_effort": 2, "eventual": 2, "effective": 2, "limit": 2})
    );
    kit.assert_converged(&scope("acct")).await;
}

#[tokio::test]
async fn api_duplicate_create_is_409_already_exists() {
    let kit = Kit::start(10).await;
    let (status, _, first) = call(&kit, "POST", "/scopes/acct/items/w", r#"{"color":"blue"}"#).await;
    assert_eq!(status, StatusCode::CREATED);
    let (status, _, body) = call(&kit, "POST", "/scopes/acct/items/w", r#"{"color":"green"}"#).await;
    assert_eq!(status, StatusCode::CONFLICT);
    assert_eq!(body["error"], "AlreadyExists");
    let (_, _, usage) = call(&kit, "GET", "/scopes/acct/usage", "").await;
    assert_eq!(usage["best_effort"], 1, "a refused duplicate must not count");
    let item = get_item(&kit, "acct", "w").await.expect("the first item stays");
    assert_eq!(item["color"].as_s().unwrap(), "blue");
    assert_eq!(
        item["incarnation"].as_s().unwrap(),
        first["incarnation"].as_str().unwrap()
    );
    kit.assert_invariants(&scope("acct")).await;
}

#[tokio::test]
async fn api_delete_is_204_then_404() {
    let mut kit = Kit::start(10).await;
    assert_eq!(
        call(&kit, "POST", "/scopes/acct/items/w", "").await.0,
        StatusCode::CREATED
    );
    let (status, _, body) = call(&kit, "DELETE", "/scopes/acct/items/w", "").await;
    assert_eq!((status, body), (StatusCode::NO_CONTENT, Value::Null));
    let (status, _, body) = call(&kit, "DELETE", "/scopes/acct/items/w", "").await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert_eq!(body["error"], "NotFound");
    let (status, _, _) = call(&kit, "DELETE", "/scopes/acct/items/never-created", "").await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (_, _, usage) = call(&kit, "GET", "/scopes/acct/usage", "").await;
    assert_eq!(usage["best_effort"], 0, "repeated deletes must not drain BE");

    kit.drain().await;
    kit.assert_converged(&scope("acct")).await;
    assert!(
        get_item(&kit, "acct", "w").await.is_none(),
        "the stream hard-deletes the item"
    );
    // The id can be used again once deleted.
    assert_eq!(
        call(&kit, "POST", "/scopes/acct/items/w", "").await.0,
        StatusCode::CREATED
    );
}

#[tokio::test]
async fn api_stores_the_json_payload_on_the_item_under_the_decoded_key() {
    let kit = Kit::start(10).await;
    let payload = r#"{"color":"blue","size":3,"tags":["a","b"],"meta":{"draft":true}}"#;
    let (status, headers, body) = call(&kit, "POST", "/scopes/acct%201/items/w%2F1", payload).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    assert_eq!(headers[header::LOCATION], "/scopes/acct%201/items/w%2F1");
    assert_eq!((&body["scope"], &body["id"]), (&json!("acct 1"), &json!("w/1")));

    let item = get_item(&kit, "acct 1", "w/1")
        .await
        .expect("stored under the decoded key");
    assert_eq!(item["color"], AttributeValue::S("blue".into()));
    assert_eq!(item["size"], AttributeValue::N("3".into()));
    assert_eq!(
        item["tags"],
        AttributeValue::L(vec![AttributeValue::S("a".into()), AttributeValue::S("b".into())])
    );
    assert_eq!(item["meta"].as_m().unwrap()["draft"], AttributeValue::Bool(true));
    assert_eq!(item["counter_processed"], AttributeValue::Bool(false));
    assert_eq!(item["created_at"], AttributeValue::N(NOW.to_string()));

    // A body that is not an object, or uses the kit's attributes, writes nothing.
    for bad in ["[1]", "{", r#"{"deleted":true}"#] {
        let (status, _, body) = call(&kit, "POST", "/scopes/acct%201/items/other", bad).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{bad}");
        assert_eq!(body["error"], "InvalidInput");
    }
    assert_eq!(kit.counts(&scope("acct 1")).await.live, 1);
}

/// The raw item, read strongly consistent.
async fn get_item(kit: &Kit, scope: &str, id: &str) -> Option<std::collections::HashMap<String, AttributeValue>> {
    kit.dynamodb
        .get_item()
        .table_name(&kit.config.resources_table)
        .key("scope", AttributeValue::S(scope.into()))
        .key("id", AttributeValue::S(id.into()))
        .consistent_read(true)
        .send()
        .await
        .expect("get item")
        .item
}
