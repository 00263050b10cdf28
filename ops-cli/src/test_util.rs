//! What the unit tests of counterctl's SDK-calling modules share: an SDK
//! client whose requests `aws-smithy-mocks` rules answer, so each test
//! states what the service says and checks what counterctl makes of it,
//! without a network.

/// A client of the SDK crate `$sdk` (e.g. `aws_sdk_dynamodb`) whose
/// requests the rules `$rules` (an iterator of `&Rule`) answer, in
/// `$mode` (a [`aws_smithy_mocks::RuleMode`]), with the SDK's retries off:
/// each rule answers the requests it is written for, no more.
macro_rules! mock_client {
    ($sdk:ident, $mode:expr, $rules:expr) => {{
        let interceptor = $rules.into_iter().fold(
            ::aws_smithy_mocks::MockResponseInterceptor::new().rule_mode($mode),
            |interceptor, rule| interceptor.with_rule(rule),
        );
        $sdk::Client::from_conf(
            $sdk::Config::builder()
                .with_test_defaults()
                .region($sdk::config::Region::new("us-east-1"))
                .retry_config($sdk::config::retry::RetryConfig::disabled())
                .http_client(::aws_smithy_mocks::create_mock_http_client())
                .interceptor(interceptor)
                .build(),
        )
    }};
}
