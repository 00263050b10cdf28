//! The harness' SDK configuration for an endpoint: its own module so that
//! the fault proxy and the counterctl driver reach it without going
//! through the crate root.

use aws_config::{Region, SdkConfig};

/// SDK configuration for any `endpoint` (this harness' emulator, or a
/// [`faults::FaultProxy`] in front of it) with the harness' region and
/// dummy credentials.
pub async fn sdk_config_for(endpoint: &str) -> SdkConfig {
    hybrid_counter_aws::sdk::defaults()
        .endpoint_url(endpoint)
        .region(Region::new("us-east-1"))
        .credentials_provider(aws_sdk_dynamodb::config::Credentials::new(
            "test", "test", None, None, "e2e",
        ))
        .load()
        .await
}
