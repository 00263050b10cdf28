//! The Lambda runtime API, served by the runner itself to one handler
//! process: the prebuilt binary is started with `AWS_LAMBDA_RUNTIME_API`
//! pointing here and polls for its next event as it does on Lambda, so no
//! compiler and no `cargo lambda watch` runs once the build step is done.
//!
//! The routes are the ones `lambda_runtime` calls ([Lambda's runtime API,
//! 2018-06-01](https://docs.aws.amazon.com/lambda/latest/dg/runtimes-api.html)):
//! `GET /2018-06-01/runtime/invocation/next` (long-polled: answered when an
//! event is submitted, with the `Lambda-Runtime-Aws-Request-Id`,
//! `-Deadline-Ms`, `-Invoked-Function-Arn` and `-Trace-Id` headers),
//! `POST .../invocation/{id}/response`, `POST .../invocation/{id}/error`
//! and `POST /2018-06-01/runtime/init/error`. One process handles one event
//! at a time, as one Lambda execution environment does; events submitted
//! meanwhile wait in order. Its HTTP/1 accept loop ([`serve_http1`]) also
//! serves the function URLs ([`crate::process`]).

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::{Method, Request, Response, StatusCode};
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;

const NEXT: &str = "/2018-06-01/runtime/invocation/next";
const INVOCATION: &str = "/2018-06-01/runtime/invocation/";
const INIT_ERROR: &str = "/2018-06-01/runtime/init/error";

/// What the function answered to one event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// `POST .../response`: the function's result document.
    Response(Bytes),
    /// `POST .../error` (or `init/error`): the error document, and its
    /// `errorType` (from the document, else the runtime's header).
    Error { error_type: String, body: Bytes },
}

struct Event {
    id: String,
    payload: Bytes,
    deadline_ms: u128,
    function_arn: String,
}

struct Shared {
    /// Events not yet handed to the process, taken by one `next` at a time.
    events: tokio::sync::Mutex<mpsc::UnboundedReceiver<Event>>,
    /// Set on the first `next`: the process is up and polling.
    polled: tokio::sync::watch::Sender<bool>,
    /// Who waits for the outcome of each event handed out or queued.
    waiting: Mutex<HashMap<String, oneshot::Sender<Outcome>>>,
    /// What the process reported on `init/error`, for the next caller.
    init_error: Mutex<Option<Outcome>>,
}

/// A runtime API on a free loopback port, for one process; the server
/// stops when this is dropped.
pub(crate) struct RuntimeApi {
    address: SocketAddr,
    queue: mpsc::UnboundedSender<Event>,
    shared: Arc<Shared>,
    server: JoinHandle<()>,
}

impl Drop for RuntimeApi {
    fn drop(&mut self) {
        self.server.abort();
    }
}

impl RuntimeApi {
    /// Binds `127.0.0.1:0` and serves the runtime API there.
    pub(crate) async fn start() -> std::io::Result<Self> {
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0)).await?;
        let address = listener.local_addr()?;
        let (queue, events) = mpsc::unbounded_channel();
        let shared = Arc::new(Shared {
            events: tokio::sync::Mutex::new(events),
            polled: tokio::sync::watch::Sender::new(false),
            waiting: Mutex::default(),
            init_error: Mutex::default(),
        });
        let serving = shared.clone();
        let server = tokio::spawn(serve_http1(listener, move |_, request| route(serving.clone(), request)));
        Ok(Self {
            address,
            queue,
            shared,
            server,
        })
    }

    /// The value of `AWS_LAMBDA_RUNTIME_API` for the process: `host:port`.
    pub(crate) fn address(&self) -> String {
        self.address.to_string()
    }

    /// Completes once the process asked for its first event.
    pub(crate) async fn polled(&self) {
        let mut polled = self.shared.polled.subscribe();
        let _ = polled.wait_for(|polled| *polled).await;
    }

    /// Queues `payload` for the process; the receiver gets its outcome. An
    /// `init/error` reported earlier answers at once.
    pub(crate) fn submit(&self, payload: Bytes, function_arn: &str, timeout: Duration) -> oneshot::Receiver<Outcome> {
        let (sender, receiver) = oneshot::channel();
        if let Some(outcome) = self.shared.init_error.lock().expect("init error lock").clone() {
            let _ = sender.send(outcome);
            return receiver;
        }
        let id = uuid::Uuid::new_v4().to_string();
        let deadline_ms = (SystemTime::now() + timeout)
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default()
            .as_millis();
        self.shared
            .waiting
            .lock()
            .expect("waiting lock")
            .insert(id.clone(), sender);
        let _ = self.queue.send(Event {
            id,
            payload,
            deadline_ms,
            function_arn: function_arn.to_owned(),
        });
        receiver
    }
}

/// Serves HTTP/1 on `listener` until accepting fails: each request goes to
/// `handle`, with the address of the peer that sent it.
pub(crate) async fn serve_http1<F, Fut, E>(listener: tokio::net::TcpListener, handle: F)
where
    F: Fn(SocketAddr, Request<Incoming>) -> Fut + Clone + Send + Sync + 'static,
    Fut: Future<Output = Result<Response<Full<Bytes>>, E>> + Send + 'static,
    E: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    while let Ok((stream, peer)) = listener.accept().await {
        let handle = handle.clone();
        tokio::spawn(async move {
            let service = hyper::service::service_fn(move |request| handle(peer, request));
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(hyper_util::rt::TokioIo::new(stream), service)
                .await;
        });
    }
}

fn answer(status: StatusCode, body: impl Into<Bytes>) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(body.into()));
    *response.status_mut() = status;
    response
}

/// The error document's `errorType`, else the runtime's header, else `Unhandled`.
fn error_outcome(header: Option<&str>, body: Bytes) -> Outcome {
    let from_body = serde_json::from_slice::<serde_json::Value>(&body)
        .ok()
        .and_then(|doc| doc.get("errorType").and_then(|t| t.as_str()).map(str::to_owned));
    Outcome::Error {
        error_type: from_body
            .or_else(|| header.map(str::to_owned))
            .unwrap_or_else(|| "Unhandled".to_owned()),
        body,
    }
}

async fn route(shared: Arc<Shared>, request: Request<Incoming>) -> Result<Response<Full<Bytes>>, hyper::Error> {
    let path = request.uri().path().to_owned();
    let method = request.method().clone();
    if method == Method::GET && path == NEXT {
        return Ok(next(&shared).await);
    }
    if method != Method::POST {
        return Ok(answer(StatusCode::NOT_FOUND, "no such runtime API route"));
    }
    let error_type = request
        .headers()
        .get("Lambda-Runtime-Function-Error-Type")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let body = request.into_body().collect().await?.to_bytes();
    if path == INIT_ERROR {
        *shared.init_error.lock().expect("init error lock") = Some(error_outcome(error_type.as_deref(), body));
        return Ok(answer(StatusCode::ACCEPTED, "{}"));
    }
    let Some((id, kind)) = path.strip_prefix(INVOCATION).and_then(|rest| rest.split_once('/')) else {
        return Ok(answer(StatusCode::NOT_FOUND, "no such runtime API route"));
    };
    let outcome = match kind {
        "response" => Outcome::Response(body),
        "error" => error_outcome(error_type.as_deref(), body),
        _ => return Ok(answer(StatusCode::NOT_FOUND, "no such runtime API route")),
    };
    match shared.waiting.lock().expect("waiting lock").remove(id) {
        Some(waiter) => {
            let _ = waiter.send(outcome);
            Ok(answer(StatusCode::ACCEPTED, "{}"))
        }
        None => Ok(answer(
            StatusCode::BAD_REQUEST,
            "unknown or already answered request id",
        )),
    }
}

/// Waits for the next event and hands it out with Lambda's headers.
async fn next(shared: &Shared) -> Response<Full<Bytes>> {
    shared.polled.send_replace(true);
    let mut events = shared.events.lock().await;
    let Some(event) = events.recv().await else {
        return answer(StatusCode::GONE, "the runtime API is shutting down");
    };
    let mut response = answer(StatusCode::OK, event.payload);
    let headers = response.headers_mut();
    let mut set = |name: &'static str, value: &str| {
        if let Ok(value) = hyper::header::HeaderValue::from_str(value) {
            headers.insert(name, value);
        }
    };
    set("Lambda-Runtime-Aws-Request-Id", &event.id);
    set("Lambda-Runtime-Deadline-Ms", &event.deadline_ms.to_string());
    set("Lambda-Runtime-Invoked-Function-Arn", &event.function_arn);
    set(
        "Lambda-Runtime-Trace-Id",
        &format!("Root=1-00000000-{}", event.id.replace('-', "")[..24].to_owned()),
    );
    set("content-type", "application/json");
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One HTTP request to the runtime API, as `lambda_runtime` sends it.
    async fn call(api: &RuntimeApi, method: Method, path: &str, body: &str) -> (StatusCode, hyper::HeaderMap, Bytes) {
        let stream = tokio::net::TcpStream::connect(api.address()).await.unwrap();
        let (mut sender, connection) = hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream))
            .await
            .unwrap();
        tokio::spawn(connection);
        let request = Request::builder()
            .method(method)
            .uri(path)
            .header(hyper::header::HOST, api.address())
            .body(Full::new(Bytes::from(body.to_owned())))
            .unwrap();
        let response = sender.send_request(request).await.unwrap();
        let (parts, body) = response.into_parts();
        (parts.status, parts.headers, body.collect().await.unwrap().to_bytes())
    }

    #[tokio::test]
    async fn an_event_is_handed_out_with_lambdas_headers_and_its_response_returned() {
        let api = RuntimeApi::start().await.unwrap();
        let outcome = api.submit(Bytes::from_static(b"{\"n\":1}"), "arn:fn", Duration::from_secs(30));
        let (status, headers, body) = call(&api, Method::GET, NEXT, "").await;
        assert_eq!(status, StatusCode::OK);
        assert_eq!(&body[..], b"{\"n\":1}");
        assert_eq!(headers["lambda-runtime-invoked-function-arn"], "arn:fn");
        let deadline: u128 = headers["lambda-runtime-deadline-ms"].to_str().unwrap().parse().unwrap();
        assert!(deadline > SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_millis());
        let id = headers["lambda-runtime-aws-request-id"].to_str().unwrap().to_owned();
        let (status, ..) = call(
            &api,
            Method::POST,
            &format!("{INVOCATION}{id}/response"),
            "{\"ok\":true}",
        )
        .await;
        assert_eq!(status, StatusCode::ACCEPTED);
        assert_eq!(
            outcome.await.unwrap(),
            Outcome::Response(Bytes::from_static(b"{\"ok\":true}"))
        );
        let (status, ..) = call(&api, Method::POST, &format!("{INVOCATION}{id}/response"), "{}").await;
        assert_eq!(
            status,
            StatusCode::BAD_REQUEST,
            "an answered event cannot be answered twice"
        );
    }

    #[tokio::test]
    async fn an_error_takes_its_type_from_the_document_and_an_init_error_answers_every_later_event() {
        let api = RuntimeApi::start().await.unwrap();
        let outcome = api.submit(Bytes::from_static(b"{}"), "arn:fn", Duration::from_secs(30));
        let (_, headers, _) = call(&api, Method::GET, NEXT, "").await;
        let id = headers["lambda-runtime-aws-request-id"].to_str().unwrap().to_owned();
        let document = r#"{"errorType":"Handler","errorMessage":"boom"}"#;
        call(&api, Method::POST, &format!("{INVOCATION}{id}/error"), document).await;
        assert!(matches!(outcome.await.unwrap(), Outcome::Error { error_type, .. } if error_type == "Handler"));

        call(&api, Method::POST, INIT_ERROR, r#"{"errorMessage":"no TABLE"}"#).await;
        let later = api.submit(Bytes::from_static(b"{}"), "arn:fn", Duration::from_secs(30));
        assert!(matches!(later.await.unwrap(), Outcome::Error { error_type, .. } if error_type == "Unhandled"));
    }
}
