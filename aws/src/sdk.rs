//! The SDK configuration every client of the kit starts from: the standard
//! credential and region chain (`aws_config::defaults`), with the kit's
//! HTTPS client. The SDKs' `default-https-client` feature is off in the
//! workspace, so a loader built without [`defaults`] has no HTTP client.

use aws_config::{BehaviorVersion, ConfigLoader};
use aws_smithy_http_client::tls::{self, rustls_provider::CryptoMode};
use aws_smithy_runtime_api::client::http::SharedHttpClient;

/// The HTTPS client: hyper on rustls, with the platform's trusted roots.
/// Crypto on `aws-lc-rs` (post-quantum key exchange preferred) with feature
/// `aws-lc`, which the Lambda release build turns on; `ring` otherwise.
pub fn https_client() -> SharedHttpClient {
    aws_smithy_http_client::Builder::new()
        .tls_provider(tls::Provider::Rustls(crypto_mode()))
        .build_https()
}

#[cfg(feature = "aws-lc")]
fn crypto_mode() -> CryptoMode {
    CryptoMode::AwsLc
}

#[cfg(not(feature = "aws-lc"))]
fn crypto_mode() -> CryptoMode {
    CryptoMode::Ring
}

/// `aws_config::defaults` at the latest behaviour version, with
/// [`https_client`]. Every `SdkConfig` of the kit is loaded from here.
pub fn defaults() -> ConfigLoader {
    aws_config::defaults(BehaviorVersion::latest()).http_client(https_client())
}
