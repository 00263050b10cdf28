//! A function URL request as Lambda hands it to the function, and the
//! function's answer as Lambda turns it into the HTTP response: pure
//! translations, so the runner can serve a function URL in front of a
//! handler process it started ([`crate::process`]).
//!
//! The event is payload format 2.0 (the API Gateway v2 HTTP shape that
//! function URLs use): `rawPath` as sent, `rawQueryString`, lowercase
//! `headers` with repeated values joined by commas, `cookies`,
//! `requestContext.http`, and a body that is base64-encoded unless its
//! content type is text. The answer is read as Lambda reads it: a document
//! with `statusCode` gives the status, `headers`, `cookies` (as
//! `set-cookie`) and the body (base64-decoded when `isBase64Encoded`);
//! any other JSON is the body of a 200 with `content-type:
//! application/json`.

use std::time::{SystemTime, UNIX_EPOCH};

use aws_smithy_types::base64;
use bytes::Bytes;
use hyper::header::{CONTENT_TYPE, HeaderName, HeaderValue};
use hyper::{Response, StatusCode};
use serde_json::{Map, Value, json};

/// The parts of an HTTP request the event is made of.
#[derive(Debug, Clone)]
pub struct UrlRequest {
    pub method: String,
    /// Path and query as sent (`/scopes/a%20b/usage?x=1`).
    pub path_and_query: String,
    pub headers: Vec<(String, String)>,
    pub body: Bytes,
    pub source_ip: String,
}

/// Whether a body of this content type is passed as text; anything else,
/// curl's default `application/x-www-form-urlencoded` among it, is
/// base64-encoded, as a function URL hands a form post over.
fn is_text(content_type: Option<&str>) -> bool {
    let Some(content_type) = content_type else {
        return true;
    };
    let essence = content_type.split(';').next().unwrap_or("").trim().to_ascii_lowercase();
    essence.starts_with("text/")
        || ["application/json", "application/xml", "application/javascript"].contains(&essence.as_str())
        || essence.ends_with("+json")
        || essence.ends_with("+xml")
}

/// Adds `value` under `key`, joined to an earlier value by a comma.
fn join(map: &mut Map<String, Value>, key: String, value: &str) {
    let joined = match map.get(&key).and_then(Value::as_str) {
        Some(earlier) => format!("{earlier},{value}"),
        None => value.to_owned(),
    };
    map.insert(key, Value::String(joined));
}

/// The function URL event (payload format 2.0) for `request`.
pub fn event(request: &UrlRequest, request_id: &str, domain_name: &str) -> Value {
    let (raw_path, raw_query) = request
        .path_and_query
        .split_once('?')
        .unwrap_or((request.path_and_query.as_str(), ""));
    let mut headers = Map::new();
    let mut cookies = Vec::new();
    for (name, value) in &request.headers {
        let name = name.to_ascii_lowercase();
        if name == "cookie" {
            cookies.extend(
                value
                    .split(';')
                    .map(str::trim)
                    .filter(|c| !c.is_empty())
                    .map(str::to_owned),
            );
            continue;
        }
        join(&mut headers, name, value);
    }
    let mut query = Map::new();
    for pair in raw_query.split('&').filter(|p| !p.is_empty()) {
        let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
        join(&mut query, key.to_owned(), value);
    }
    let text = is_text(headers.get("content-type").and_then(Value::as_str));
    let body = if request.body.is_empty() {
        Value::Null
    } else if text {
        Value::String(String::from_utf8_lossy(&request.body).into_owned())
    } else {
        Value::String(base64::encode(&request.body))
    };
    let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default();
    let user_agent = headers
        .get("user-agent")
        .cloned()
        .unwrap_or(Value::String(String::new()));
    let mut event = json!({
        "version": "2.0",
        "routeKey": "$default",
        "rawPath": raw_path,
        "rawQueryString": raw_query,
        "headers": headers,
        "requestContext": {
            "accountId": "anonymous",
            "apiId": domain_name.split('.').next().unwrap_or(domain_name),
            "domainName": domain_name,
            "domainPrefix": domain_name.split('.').next().unwrap_or(domain_name),
            "http": {
                "method": request.method,
                "path": raw_path,
                "protocol": "HTTP/1.1",
                "sourceIp": request.source_ip,
                "userAgent": user_agent,
            },
            "requestId": request_id,
            "routeKey": "$default",
            "stage": "$default",
            "timeEpoch": now.as_millis() as u64,
        },
        "isBase64Encoded": !text && !request.body.is_empty(),
    });
    if !cookies.is_empty() {
        event["cookies"] = json!(cookies);
    }
    if !query.is_empty() {
        event["queryStringParameters"] = Value::Object(query);
    }
    if !body.is_null() {
        event["body"] = body;
    }
    event
}

/// The HTTP response Lambda makes of the function's answer `document`.
pub fn response(document: &Value) -> Response<Bytes> {
    let Some(status) = document.get("statusCode").and_then(Value::as_u64) else {
        let mut response = Response::new(Bytes::from(document.to_string()));
        response
            .headers_mut()
            .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        return response;
    };
    let body = match document.get("body") {
        Some(Value::String(text)) if document.get("isBase64Encoded") == Some(&Value::Bool(true)) => {
            Bytes::from(base64::decode(text).unwrap_or_else(|_| text.as_bytes().to_vec()))
        }
        Some(Value::String(text)) => Bytes::from(text.clone()),
        None | Some(Value::Null) => Bytes::new(),
        Some(other) => Bytes::from(other.to_string()),
    };
    let mut response = Response::new(body);
    *response.status_mut() =
        StatusCode::from_u16(u16::try_from(status).unwrap_or(500)).unwrap_or(StatusCode::BAD_GATEWAY);
    let headers = response.headers_mut();
    for (name, value) in document.get("headers").and_then(Value::as_object).into_iter().flatten() {
        let value = value.as_str().map_or_else(|| value.to_string(), str::to_owned);
        if let (Ok(name), Ok(value)) = (HeaderName::try_from(name.as_str()), HeaderValue::try_from(value)) {
            headers.insert(name, value);
        }
    }
    for cookie in document.get("cookies").and_then(Value::as_array).into_iter().flatten() {
        if let Some(Ok(value)) = cookie.as_str().map(HeaderValue::try_from) {
            headers.append(hyper::header::SET_COOKIE, value);
        }
    }
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(body: &[u8], content_type: Option<&str>) -> UrlRequest {
        let mut headers = vec![
            ("Host".to_owned(), "127.0.0.1:9001".to_owned()),
            ("X-Tag".to_owned(), "a".to_owned()),
            ("x-tag".to_owned(), "b".to_owned()),
            ("Cookie".to_owned(), "s=1; t=2".to_owned()),
        ];
        if let Some(content_type) = content_type {
            headers.push(("Content-Type".to_owned(), content_type.to_owned()));
        }
        UrlRequest {
            method: "POST".to_owned(),
            path_and_query: "/scopes/a%20b/items/w?x=1&x=2&y".to_owned(),
            headers,
            body: Bytes::copy_from_slice(body),
            source_ip: "127.0.0.1".to_owned(),
        }
    }

    #[test]
    fn the_event_is_payload_format_2_with_the_raw_path_joined_headers_and_cookies() {
        let event = event(
            &request(b"{\"color\":\"blue\"}", None),
            "id-1",
            "abc.lambda-url.us-east-1.on.aws",
        );
        assert_eq!(event["version"], "2.0");
        assert_eq!(event["rawPath"], "/scopes/a%20b/items/w");
        assert_eq!(event["rawQueryString"], "x=1&x=2&y");
        assert_eq!(event["queryStringParameters"], json!({"x": "1,2", "y": ""}));
        assert_eq!(event["headers"]["x-tag"], "a,b");
        assert_eq!(event["cookies"], json!(["s=1", "t=2"]));
        assert!(event["headers"].get("cookie").is_none());
        assert_eq!(event["requestContext"]["http"]["method"], "POST");
        assert_eq!(event["requestContext"]["requestId"], "id-1");
        assert_eq!(event["requestContext"]["apiId"], "abc");
        assert_eq!(event["body"], "{\"color\":\"blue\"}");
        assert_eq!(event["isBase64Encoded"], false);
    }

    #[test]
    fn a_binary_body_is_base64_encoded_and_an_empty_one_left_out() {
        let binary = event(&request(&[0, 159, 1], Some("application/octet-stream")), "i", "d");
        assert_eq!(binary["isBase64Encoded"], true);
        assert_eq!(binary["body"], base64::encode([0u8, 159, 1]));
        // curl's default content type: a form post is handed over base64-encoded.
        let form = event(&request(b"a=1", Some("application/x-www-form-urlencoded")), "i", "d");
        assert_eq!(form["isBase64Encoded"], true);
        assert_eq!(form["body"], base64::encode("a=1"));
        let empty = event(&request(b"", Some("application/json")), "i", "d");
        assert!(empty.get("body").is_none());
        assert_eq!(empty["isBase64Encoded"], false);
    }

    #[test]
    fn a_response_document_gives_status_headers_cookies_and_decoded_body() {
        let answer = response(&json!({
            "statusCode": 201,
            "headers": {"content-type": "application/json", "location": "/scopes/a/items/w"},
            "cookies": ["s=1", "t=2"],
            "body": base64::encode("{\"ok\":true}"),
            "isBase64Encoded": true,
        }));
        assert_eq!(answer.status(), StatusCode::CREATED);
        assert_eq!(answer.headers()["location"], "/scopes/a/items/w");
        assert_eq!(answer.headers().get_all("set-cookie").iter().count(), 2);
        assert_eq!(&answer.body()[..], b"{\"ok\":true}");
    }

    #[test]
    fn any_other_json_is_the_body_of_a_200() {
        let answer = response(&json!({"n": 1}));
        assert_eq!(answer.status(), StatusCode::OK);
        assert_eq!(answer.headers()["content-type"], "application/json");
        assert_eq!(&answer.body()[..], b"{\"n\":1}");
    }
}
