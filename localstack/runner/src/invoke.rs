//! How the runner calls a function: a small trait with two implementations,
//! the prebuilt handler binaries, each behind a Lambda runtime API the
//! runner serves ([`crate::process`]), and an in-process closure for tests.

use std::future::Future;

use serde_json::Value;

use crate::error::Error;

/// What one synchronous invocation returned.
#[derive(Debug, Clone, PartialEq)]
pub enum Invocation {
    /// The function returned this JSON (`null` for an empty response).
    Response(Value),
    /// The function failed (Lambda's `X-Amz-Function-Error`): it raised,
    /// timed out or crashed. `body` is its error document, if any.
    FunctionError { error_type: String, body: Value },
}

impl Invocation {
    /// A function error with Lambda's error document shape.
    pub fn error(error_type: &str, message: &str) -> Self {
        Self::FunctionError {
            error_type: error_type.to_owned(),
            body: serde_json::json!({"errorType": error_type, "errorMessage": message}),
        }
    }
}

/// Invokes a deployed function by name with a JSON event. An `Err` means
/// the invocation could not be made at all (the runtime is down), which the
/// runner treats like Lambda treats a throttle: retried, never counted as a
/// function error.
pub trait Invoke: Send + Sync + 'static {
    fn invoke(&self, function_name: &str, payload: Value) -> impl Future<Output = Result<Invocation, Error>> + Send;

    /// Called with the names of the functions of the mappings and schedules after every
    /// discovery, before any of them is invoked (the process invoker starts
    /// its processes here). It prepares every function it can and returns
    /// the first failure; a function it could not prepare is tried again
    /// at its invocation.
    fn prepare(&self, functions: &[String]) -> impl Future<Output = Result<(), Error>> + Send {
        let _ = functions;
        async { Ok(()) }
    }

    /// Called on every poll of [`crate::Runner::run`]: an invoker that
    /// serves function URLs restarts a served function whose deployed
    /// configuration changed (its requests do not pass through the runner,
    /// so [`Invoke::invoke`] cannot notice).
    fn follow_redeploys(&self) -> impl Future<Output = ()> + Send {
        async {}
    }

    /// Serves `function_name` over HTTP on loopback `port` (0: any free
    /// port) with Lambda function URL semantics ([`crate::function_url`]);
    /// returns its URL, or `None` when this invoker cannot serve HTTP (the
    /// in-process test double).
    fn serve_url(&self, function_name: &str, port: u16) -> impl Future<Output = Result<Option<String>, Error>> + Send {
        let _ = (function_name, port);
        async { Ok(None) }
    }
}

/// An in-process invoker: calls a closure with the function name and the
/// event. Tests use it to run the library's handler functions directly, or
/// to play a function that fails on purpose.
pub struct FnInvoker<F> {
    f: F,
}

impl<F, Fut> FnInvoker<F>
where
    F: Fn(String, Value) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<Invocation, Error>> + Send + 'static,
{
    pub fn new(f: F) -> Self {
        Self { f }
    }
}

impl<F, Fut> Invoke for FnInvoker<F>
where
    F: Fn(String, Value) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<Invocation, Error>> + Send + 'static,
{
    fn invoke(&self, function_name: &str, payload: Value) -> impl Future<Output = Result<Invocation, Error>> + Send {
        (self.f)(function_name.to_owned(), payload)
    }
}
