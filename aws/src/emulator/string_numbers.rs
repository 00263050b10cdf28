//! ministack's Lambda API answers an event source mapping created by its
//! CloudFormation with the template's numbers and booleans as JSON strings
//! (`"ParallelizationFactor": "1"`, `"BisectBatchOnFunctionError": "true"`):
//! it stores the resource's properties as the template resolved them, and
//! a `Ref` to a parameter resolves to a string. AWS's Lambda API types these
//! members as integers and booleans, and the Rust SDK refuses a string there,
//! so neither the local runner nor `counterctl status` could read a mapping.
//!
//! For the LocalStack target only (`counterctl --target localstack`, the
//! runner's `Host::LocalStack`), the Lambda client gets an interceptor
//! ([`mended`]) that rewrites such a member of a mapping document back into
//! the type AWS sends, before the SDK reads it: a string holding an integer
//! in an integer member, `"true"`/`"false"` in a boolean member. Nothing else
//! is touched, and an answer that is not a mapping document passes as it
//! came. It is listed in `localstack/README.md` as that emulator's known
//! difference.

use std::pin::Pin;
use std::task::{Context, Poll, ready};

use aws_smithy_runtime_api::box_error::BoxError;
use aws_smithy_runtime_api::client::interceptors::Intercept;
use aws_smithy_runtime_api::client::interceptors::context::BeforeDeserializationInterceptorContextMut;
use aws_smithy_runtime_api::client::runtime_components::RuntimeComponents;
use aws_smithy_types::body::SdkBody;
use aws_smithy_types::config_bag::ConfigBag;
use bytes::Bytes;
use serde_json::Value;

/// The integer members of an event source mapping (Lambda API reference,
/// `EventSourceMappingConfiguration`).
const INTEGER_MEMBERS: [&str; 7] = [
    "BatchSize",
    "MaximumBatchingWindowInSeconds",
    "ParallelizationFactor",
    "MaximumRetryAttempts",
    "MaximumRecordAgeInSeconds",
    "TumblingWindowInSeconds",
    "MaximumConcurrency",
];

/// Its boolean members.
const BOOLEAN_MEMBERS: [&str; 1] = ["BisectBatchOnFunctionError"];

/// `config` with the interceptor that mends mapping documents.
pub fn mended(config: aws_sdk_lambda::config::Builder) -> aws_sdk_lambda::config::Builder {
    config.interceptor(StringNumbers)
}

/// The mapping documents of a Lambda answer (`ListEventSourceMappings`'
/// `EventSourceMappings[]`, or the answer itself when it is one mapping:
/// it has a `UUID` and an `EventSourceArn`) with their integer and boolean
/// members in AWS's types. `None` when nothing had to change, or when the
/// body is not a JSON object.
pub fn mend(body: &[u8]) -> Option<Vec<u8>> {
    let mut document: Value = serde_json::from_slice(body).ok()?;
    let object = document.as_object_mut()?;
    let mut changed = false;
    if let Some(Value::Array(mappings)) = object.get_mut("EventSourceMappings") {
        for mapping in mappings {
            changed |= mend_mapping(mapping);
        }
    } else if object.contains_key("UUID") && object.contains_key("EventSourceArn") {
        changed = mend_mapping(&mut document);
    }
    changed.then(|| serde_json::to_vec(&document).ok()).flatten()
}

/// Mends one mapping's members (and its `ScalingConfig`'s); whether any changed.
fn mend_mapping(mapping: &mut Value) -> bool {
    let Some(object) = mapping.as_object_mut() else {
        return false;
    };
    let mut changed = false;
    for (name, value) in object.iter_mut() {
        let mended = match value {
            Value::String(text) if INTEGER_MEMBERS.contains(&name.as_str()) => {
                text.trim().parse::<i64>().ok().map(Value::from)
            }
            Value::String(text) if BOOLEAN_MEMBERS.contains(&name.as_str()) => match text.trim() {
                "true" => Some(Value::Bool(true)),
                "false" => Some(Value::Bool(false)),
                _ => None,
            },
            Value::Object(_) if name == "ScalingConfig" => {
                changed |= mend_mapping(value);
                None
            }
            _ => None,
        };
        if let Some(mended) = mended {
            *value = mended;
            changed = true;
        }
    }
    changed
}

#[derive(Debug)]
struct StringNumbers;

impl Intercept for StringNumbers {
    fn name(&self) -> &'static str {
        "StringNumbers"
    }

    /// The body is still a stream here: it is wrapped in one that mends the
    /// whole answer once it has arrived.
    fn modify_before_deserialization(
        &self,
        context: &mut BeforeDeserializationInterceptorContextMut<'_>,
        _components: &RuntimeComponents,
        _cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        let response = context.response_mut();
        let body = response.take_body();
        *response.body_mut() = SdkBody::from_body_1_x(Mending {
            inner: body,
            received: Vec::new(),
            done: false,
        });
        Ok(())
    }
}

/// A response body read to its end, then handed on mended ([`mend`]) as one frame.
struct Mending {
    inner: SdkBody,
    received: Vec<u8>,
    done: bool,
}

impl http_body::Body for Mending {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, BoxError>>> {
        let this = self.get_mut();
        if this.done {
            return Poll::Ready(None);
        }
        loop {
            match ready!(Pin::new(&mut this.inner).poll_frame(cx)) {
                Some(Ok(frame)) => {
                    if let Ok(data) = frame.into_data() {
                        this.received.extend_from_slice(&data);
                    }
                }
                Some(Err(error)) => return Poll::Ready(Some(Err(error))),
                None => {
                    this.done = true;
                    let received = std::mem::take(&mut this.received);
                    let body = mend(&received).unwrap_or(received);
                    return Poll::Ready(Some(Ok(http_body::Frame::data(Bytes::from(body)))));
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn mended_json(body: Value) -> Option<Value> {
        mend(&serde_json::to_vec(&body).unwrap()).map(|b| serde_json::from_slice(&b).unwrap())
    }

    #[test]
    fn a_listed_mappings_numbers_and_booleans_get_their_aws_types() {
        let listed = json!({"EventSourceMappings": [{
            "UUID": "u", "EventSourceArn": "arn:s", "BatchSize": 100,
            "ParallelizationFactor": "1", "MaximumRetryAttempts": "-1",
            "MaximumRecordAgeInSeconds": " 60 ", "BisectBatchOnFunctionError": "true",
            "ScalingConfig": {"MaximumConcurrency": "5"}, "StartingPosition": "TRIM_HORIZON"
        }]});
        assert_eq!(
            mended_json(listed),
            Some(json!({"EventSourceMappings": [{
                "UUID": "u", "EventSourceArn": "arn:s", "BatchSize": 100,
                "ParallelizationFactor": 1, "MaximumRetryAttempts": -1,
                "MaximumRecordAgeInSeconds": 60, "BisectBatchOnFunctionError": true,
                "ScalingConfig": {"MaximumConcurrency": 5}, "StartingPosition": "TRIM_HORIZON"
            }]}))
        );
    }

    #[test]
    fn one_mapping_is_mended_and_the_sdk_then_reads_it() {
        let one = mended_json(json!({"UUID": "u", "EventSourceArn": "arn:s", "BisectBatchOnFunctionError": "false"}));
        assert_eq!(
            one,
            Some(json!({"UUID": "u", "EventSourceArn": "arn:s", "BisectBatchOnFunctionError": false}))
        );
    }

    #[test]
    fn anything_else_passes_untouched() {
        // A function's environment may hold a variable named like a member.
        let function = json!({"FunctionName": "f", "Environment": {"Variables": {"BatchSize": "5"}}});
        assert_eq!(mended_json(function), None);
        assert_eq!(
            mended_json(json!({"UUID": "u", "EventSourceArn": "a", "BatchSize": 5})),
            None
        );
        assert_eq!(
            mended_json(json!({"UUID": "u", "EventSourceArn": "a", "BatchSize": "many"})),
            None
        );
        assert_eq!(mend(b"not json"), None);
        assert_eq!(mend(b"[1]"), None);
    }
}
