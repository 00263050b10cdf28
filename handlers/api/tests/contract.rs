//! The API against its contract, `handlers/api/openapi.yaml`: each request
//! below goes through the handler Lambda runs (over the in-memory store),
//! and its answer must be one the document lists for that path and method,
//! with the document's required headers and a body valid against the
//! document's schema (jsonschema, draft 2020-12, OpenAPI 3.1's dialect).
//! Then the answers given and the answers listed must be the same set, so
//! the document cannot list a status nothing produces and the API cannot
//! give one the document lacks.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use api::http::{Method, StatusCode};
use api::scope_auth::Principal;
use api::{Authorizer, Body, PrincipalTags, Request, Response, ScopeAuthorization, handle, handle_with};
use hybrid_counter::memory::{Chaos, Fault, MemoryStore, Op};
use hybrid_counter::{Counter, EpochMillis};
use serde_json::{Value, json};

const NOW: EpochMillis = 1_790_000_000_000;
const ITEM: &str = "/scopes/{scope}/items/{id}";
const USAGE: &str = "/scopes/{scope}/usage";

/// (path template, lowercase method, status).
type Answer = (String, String, u16);

struct Contract {
    document: Value,
}

impl Contract {
    fn load() -> Self {
        let document = serde_yaml_ng::from_str(include_str!("../openapi.yaml")).expect("openapi.yaml is YAML");
        Self { document }
    }

    /// Every (path, method, status) the document lists.
    fn listed(&self) -> BTreeSet<Answer> {
        let mut listed = BTreeSet::new();
        for (path, item) in self.document["paths"].as_object().expect("paths") {
            for (method, operation) in item.as_object().expect("a path item") {
                let Some(responses) = operation.get("responses").and_then(Value::as_object) else {
                    continue;
                };
                for status in responses.keys() {
                    let status = status
                        .parse()
                        .unwrap_or_else(|_| panic!("{path} {method}: status {status}"));
                    listed.insert((path.clone(), method.clone(), status));
                }
            }
        }
        listed
    }

    /// Follows a local `$ref` (`#/components/...`).
    fn resolve<'a>(&'a self, value: &'a Value) -> &'a Value {
        match value.get("$ref").and_then(Value::as_str) {
            Some(pointer) => self
                .document
                .pointer(pointer.strip_prefix('#').expect("a local $ref"))
                .unwrap_or_else(|| panic!("{pointer} is not in the document")),
            None => value,
        }
    }

    /// Why `response` is not what the document says `method path` answers.
    fn violations(&self, path: &str, method: &Method, response: &Response<Body>) -> Vec<String> {
        let method = method.as_str().to_lowercase();
        let status = response.status().as_u16().to_string();
        let Some(listed) = self.document["paths"][path][&method]["responses"].get(&status) else {
            return vec![format!("the document lists no {status} for {method} {path}")];
        };
        let listed = self.resolve(listed);
        let mut wrong = Vec::new();
        for (name, header) in listed.get("headers").and_then(Value::as_object).into_iter().flatten() {
            let value = response.headers().get(name.as_str()).and_then(|v| v.to_str().ok());
            match value {
                None if header["required"] == true => wrong.push(format!("header {name} is missing")),
                Some(value) if header["schema"]["type"] == "integer" && value.parse::<u64>().is_err() => {
                    wrong.push(format!("header {name} is {value:?}, not an integer"));
                }
                _ => {}
            }
        }
        let body: &[u8] = response.body();
        let Some(schema) = listed.pointer("/content/application~1json/schema") else {
            if !body.is_empty() {
                wrong.push(format!(
                    "a body where the document lists none: {}",
                    String::from_utf8_lossy(body)
                ));
            }
            return wrong;
        };
        let instance: Value = match serde_json::from_slice(body) {
            Ok(instance) => instance,
            Err(err) => {
                return vec![format!(
                    "the body is not JSON ({err}): {}",
                    String::from_utf8_lossy(body)
                )];
            }
        };
        // The schema as the root of a document that also holds the
        // components, so its `#/components/...` references resolve.
        let mut root = schema.clone();
        root["components"] = self.document["components"].clone();
        let validator = jsonschema::draft202012::new(&root).expect("the document's schema compiles");
        wrong.extend(
            validator
                .iter_errors(&instance)
                .map(|e| format!("{instance}: {e} at {}", e.instance_path())),
        );
        wrong
    }
}

/// No caller has a scope prefix tag: with `principal-tag`, everyone is refused.
#[derive(Clone)]
struct Untagged;

impl PrincipalTags for Untagged {
    async fn tag(&self, _: &Principal, _: &str) -> Result<Option<String>, String> {
        Ok(None)
    }
}

fn request(method: &Method, uri: &str, body: &str) -> Request {
    api::http::Request::builder()
        .method(method)
        .uri(uri)
        .body(Body::from(body))
        .unwrap()
}

/// The function URL fixture, with a role session as its caller.
fn signed_request(method: &Method, path: &str) -> Request {
    let mut event: Value = serde_json::from_str(include_str!("../fixtures/function-url-create.json")).unwrap();
    event["requestContext"]["authorizer"]["iam"]["userArn"] =
        json!("arn:aws:sts::123456789012:assumed-role/untagged/session");
    event["rawPath"] = json!(path);
    event["requestContext"]["http"]["path"] = json!(path);
    event["requestContext"]["http"]["method"] = json!(method.as_str());
    let mut request = lambda_http::request::from_str(&event.to_string()).unwrap();
    *request.method_mut() = method.clone();
    request
}

/// A counter whose every store call fails as an exhausted DynamoDB call does.
fn unavailable() -> Counter<MemoryStore> {
    let store = Arc::new(MemoryStore::new());
    store.set_chaos(Chaos {
        faults: [Op::ReadCounters, Op::GetResource, Op::PutResource, Op::AddBestEffort]
            .into_iter()
            .map(|op| (op, Fault::Unavailable, 1000))
            .collect(),
        ..Chaos::default()
    });
    Counter::new(store, 5)
}

#[tokio::test]
async fn the_openapi_document_lists_exactly_the_answers_the_api_gives() {
    let contract = Contract::load();
    let (post, delete, get) = (Method::POST, Method::DELETE, Method::GET);
    let c = Counter::new(Arc::new(MemoryStore::new()), 2);
    let down = unavailable();
    let numbering_fails = Counter::new(Arc::new(MemoryStore::new()), 5);
    numbering_fails.store().inject(Op::ClaimSequence, Fault::Rejected);
    let forbidding = Authorizer {
        mode: ScopeAuthorization::PrincipalTag,
        tags: Untagged,
    };
    let too_big = format!(r#"{{"blob":"{}"}}"#, "x".repeat(api::MAX_BODY_BYTES));

    // (what it shows, path template, method, the status expected, answer);
    // in order, on one counter with a limit of 2 where it matters.
    let mut answers: Vec<(&str, &str, &Method, StatusCode, Response<Body>)> = Vec::new();
    let r = handle(&c, request(&post, "/scopes/acct/items/a", r#"{"color":"blue"}"#), NOW).await;
    answers.push(("a create", ITEM, &post, StatusCode::CREATED, r));
    let r = handle(&c, request(&post, "/scopes/acct/items/b?sequence=true", ""), NOW).await;
    answers.push(("a numbered create", ITEM, &post, StatusCode::CREATED, r));
    let r = handle(&c, request(&post, "/scopes/acct/items/a", ""), NOW).await;
    answers.push(("a duplicate", ITEM, &post, StatusCode::CONFLICT, r));
    let r = handle(&c, request(&post, "/scopes/acct/items/c", ""), NOW).await;
    answers.push(("over the limit", ITEM, &post, StatusCode::CONFLICT, r));
    // A scope spread over 4 keys with a limit of 2: two keys have a share of 0.
    let spread = Counter::new(Arc::new(MemoryStore::new()), 2)
        .with_scope_keys(hybrid_counter::scope_keys::ScopeKeys::new(4).unwrap());
    let full_key = (0..)
        .map(|n| format!("k{n}"))
        .find(|id| {
            spread
                .scope_keys()
                .index(&hybrid_counter::ResourceId::new(id.as_str()).unwrap())
                == 3
        })
        .unwrap();
    let r = handle(
        &spread,
        request(&post, &format!("/scopes/acct/items/{full_key}"), ""),
        NOW,
    )
    .await;
    answers.push(("over a key's share", ITEM, &post, StatusCode::CONFLICT, r));
    let r = handle(&c, request(&post, "/scopes/acct/items/c?sequence=maybe", ""), NOW).await;
    answers.push(("a bad sequence parameter", ITEM, &post, StatusCode::BAD_REQUEST, r));
    let r = handle(&c, request(&post, "/scopes/acct/items/c", &too_big), NOW).await;
    answers.push(("a body too big", ITEM, &post, StatusCode::PAYLOAD_TOO_LARGE, r));
    let r = handle(&down, request(&post, "/scopes/acct/items/c", ""), NOW).await;
    answers.push(("a create, store down", ITEM, &post, StatusCode::SERVICE_UNAVAILABLE, r));
    let r = handle(
        &numbering_fails,
        request(&post, "/scopes/acct/items/c?sequence=true", ""),
        NOW,
    )
    .await;
    answers.push(("created, unnumbered", ITEM, &post, StatusCode::SERVICE_UNAVAILABLE, r));
    let r = handle_with(&c, &forbidding, signed_request(&post, "/scopes/acct/items/c"), NOW).await;
    answers.push(("a create, scope forbidden", ITEM, &post, StatusCode::FORBIDDEN, r));

    let r = handle(&c, request(&get, "/scopes/acct/usage", ""), NOW).await;
    answers.push(("usage", USAGE, &get, StatusCode::OK, r));
    let r = handle(&c, request(&get, "/scopes/%20acct/usage", ""), NOW).await;
    answers.push(("usage of a bad scope", USAGE, &get, StatusCode::BAD_REQUEST, r));
    let r = handle(&down, request(&get, "/scopes/acct/usage", ""), NOW).await;
    answers.push(("usage, store down", USAGE, &get, StatusCode::SERVICE_UNAVAILABLE, r));
    let r = handle_with(&c, &forbidding, signed_request(&get, "/scopes/acct/usage"), NOW).await;
    answers.push(("usage, scope forbidden", USAGE, &get, StatusCode::FORBIDDEN, r));

    let r = handle(&c, request(&delete, "/scopes/acct/items/a", ""), NOW).await;
    answers.push(("a delete", ITEM, &delete, StatusCode::NO_CONTENT, r));
    let r = handle(&c, request(&delete, "/scopes/acct/items/a", ""), NOW).await;
    answers.push(("a repeated delete", ITEM, &delete, StatusCode::NOT_FOUND, r));
    let r = handle(&c, request(&delete, "/scopes/acct/items/a%00", ""), NOW).await;
    answers.push(("a delete of a bad id", ITEM, &delete, StatusCode::BAD_REQUEST, r));
    let r = handle(&down, request(&delete, "/scopes/acct/items/a", ""), NOW).await;
    answers.push((
        "a delete, store down",
        ITEM,
        &delete,
        StatusCode::SERVICE_UNAVAILABLE,
        r,
    ));
    let r = handle_with(&c, &forbidding, signed_request(&delete, "/scopes/acct/items/b"), NOW).await;
    answers.push(("a delete, scope forbidden", ITEM, &delete, StatusCode::FORBIDDEN, r));

    let mut given = BTreeSet::new();
    let mut wrong = BTreeMap::new();
    for (what, path, method, expected, response) in &answers {
        assert_eq!(response.status(), *expected, "{what}: {:?}", response.body());
        let violations = contract.violations(path, method, response);
        if !violations.is_empty() {
            wrong.insert(*what, violations);
        }
        given.insert((path.to_string(), method.as_str().to_lowercase(), expected.as_u16()));
    }
    assert!(wrong.is_empty(), "answers that break the contract: {wrong:#?}");
    let listed = contract.listed();
    let never_given: Vec<_> = listed.difference(&given).collect();
    let not_listed: Vec<_> = given.difference(&listed).collect();
    assert!(
        never_given.is_empty() && not_listed.is_empty(),
        "listed but never given: {never_given:?}; given but not listed: {not_listed:?}"
    );
}

#[test]
fn the_contract_check_refuses_a_body_its_schema_does_not_allow() {
    // The check itself must be able to fail: a usage without `limit`, a
    // create without `Location`, and a 204 with a body.
    let contract = Contract::load();
    let mut usage = Response::new(Body::from(r#"{"best_effort":1,"eventual":0,"effective":1}"#));
    *usage.status_mut() = StatusCode::OK;
    let wrong = contract.violations(USAGE, &Method::GET, &usage);
    assert!(
        wrong.iter().any(|w| w.contains("\"limit\" is a required property")),
        "{wrong:?}"
    );
    let mut created = Response::new(Body::from(
        r#"{"scope":"a","id":"b","incarnation":"i","best_effort_counted":true}"#,
    ));
    *created.status_mut() = StatusCode::CREATED;
    assert_eq!(
        contract.violations(ITEM, &Method::POST, &created),
        vec!["header Location is missing".to_owned()]
    );
    let mut deleted = Response::new(Body::from("{}"));
    *deleted.status_mut() = StatusCode::NO_CONTENT;
    assert_eq!(contract.violations(ITEM, &Method::DELETE, &deleted).len(), 1);
    let mut teapot = Response::new(Body::Empty);
    *teapot.status_mut() = StatusCode::IM_A_TEAPOT;
    assert_eq!(
        contract.violations(USAGE, &Method::GET, &teapot),
        vec!["the document lists no 418 for get /scopes/{scope}/usage".to_owned()]
    );
}
