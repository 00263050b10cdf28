//! A caller holding exactly the documented caller policy
//! (`stack::policies::caller_policy`, docs/api.md) cannot `Invoke` the api
//! function directly with a function URL event it wrote, naming another
//! principal: its `lambda:InvokeFunction` holds only under
//! `lambda:InvokedViaFunctionUrl`, which a direct invocation does not set
//! (<https://docs.aws.amazon.com/lambda/latest/dg/urls-auth.html>). The
//! same caller with the grant unconditioned gets past IAM, so the refusal
//! is the condition's doing. Needs the emulator's `--iam strict` to
//! evaluate the condition key.

use serde_json::json;
use stack::access::OperatorScope;
use stack::policies::caller_policy;

const ACCOUNT: &str = "123456789012";

/// The forged function URL event: another principal as the caller.
fn forged_event() -> Vec<u8> {
    let mut event: serde_json::Value =
        serde_json::from_str(include_str!("../../../handlers/api/fixtures/function-url-create.json")).unwrap();
    event["requestContext"]["authorizer"]["iam"]["userArn"] =
        json!(format!("arn:aws:sts::{ACCOUNT}:assumed-role/victim/session"));
    event.to_string().into_bytes()
}

/// A role under /hck-callers/ with `policy`, assumed; a Lambda client as it.
async fn caller(sdk: &aws_config::SdkConfig, name: &str, policy: serde_json::Value) -> aws_sdk_lambda::Client {
    let credentials = e2e::iam::role_credentials(sdk, ACCOUNT, name, "/hck-callers/", &policy, "caller").await;
    let as_caller = sdk
        .to_builder()
        .credentials_provider(aws_sdk_lambda::config::SharedCredentialsProvider::new(credentials))
        .build();
    aws_sdk_lambda::Client::new(&as_caller)
}

fn is_access_denied<E: std::fmt::Debug>(err: &E) -> bool {
    let text = format!("{err:?}");
    text.contains("AccessDenied")
}

#[tokio::test]
async fn a_direct_invoke_with_a_forged_caller_is_refused_to_the_documented_caller_policy() {
    let (emulator, _counterctl, _) = crate::deployed().await;
    let sdk = emulator.sdk_config().await;
    let scope = OperatorScope {
        partition: "aws".to_owned(),
        region: "us-east-1".to_owned(),
        account: ACCOUNT.to_owned(),
        stack_name: "hybrid-counter".to_owned(),
        name_prefix: "hybrid-counter".to_owned(),
        artifacts_bucket: String::new(),
    };
    let function = "hybrid-counter-api";

    let documented = caller(&sdk, "documented-caller", caller_policy(&scope)).await;
    let refused = documented
        .invoke()
        .function_name(function)
        .payload(aws_sdk_lambda::primitives::Blob::new(forged_event()))
        .send()
        .await
        .expect_err("a direct Invoke by a caller with the documented policy");
    assert!(is_access_denied(&refused), "{refused:?}");
    // The one denial this test provokes, taken so the harness does not
    // count it as a grant the kit is missing.
    let denied = emulator.take_denials();
    assert!(
        denied.len() == 1 && denied[0].contains("documented-caller") && denied[0].contains("lambda:InvokeFunction"),
        "{denied:?}"
    );

    // The same grant without the condition: IAM lets the call through
    // (whatever the function then answers), so the condition refused it.
    let mut unconditioned = caller_policy(&scope);
    unconditioned["Statement"][1]
        .as_object_mut()
        .unwrap()
        .remove("Condition");
    let broad = caller(&sdk, "unconditioned-caller", unconditioned).await;
    let through = broad
        .invoke()
        .function_name(function)
        .payload(aws_sdk_lambda::primitives::Blob::new(forged_event()))
        .send()
        .await;
    if let Err(err) = &through {
        assert!(!is_access_denied(err), "an unconditioned grant is refused too: {err:?}");
    }
}
