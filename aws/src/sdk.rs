//! The SDK configuration every client of the kit starts from: the standard
//! credential and region chain (`aws_config::defaults`), with the kit's
//! HTTPS client. The SDKs' `default-https-client` feature is off in the
//! workspace, so a loader built without [`defaults`] has no HTTP client.

use aws_config::{BehaviorVersion, ConfigLoader};
use aws_smithy_http_client::{Builder, ConnectorBuilder, proxy::ProxyConfig, tls, tls::rustls_provider::CryptoMode};
use aws_smithy_runtime_api::client::http::SharedHttpClient;

/// The HTTPS client, built as the SDK's default client is (aws-smithy-runtime
/// 1.9 `default_https_client`, through the same `build_with_connector_fn`,
/// which aws-smithy-http-client hides from its docs; its public `Builder`
/// sets no proxy): hyper on rustls with the platform's trusted roots, the
/// client's timeouts and sleep, and the proxy of the environment
/// (`HTTPS_PROXY`, `HTTP_PROXY`, `NO_PROXY`, as at the latest behaviour
/// version). Crypto on `aws-lc-rs` (post-quantum key exchange preferred)
/// with feature `aws-lc`, which the Lambda release build turns on; `ring`
/// otherwise.
fn https_client() -> SharedHttpClient {
    Builder::new().build_with_connector_fn(|settings, components| {
        let mut connector = ConnectorBuilder::default().tls_provider(tls::Provider::Rustls(crypto_mode()));
        connector.set_connector_settings(settings.cloned());
        if let Some(components) = components {
            connector.set_sleep_impl(components.sleep_impl());
        }
        connector.set_proxy_config(Some(ProxyConfig::from_env()));
        connector.build()
    })
}

#[cfg(feature = "aws-lc")]
fn crypto_mode() -> CryptoMode {
    CryptoMode::AwsLc
}

#[cfg(not(feature = "aws-lc"))]
fn crypto_mode() -> CryptoMode {
    CryptoMode::Ring
}

/// `aws_config::defaults` at the latest behaviour version, with the kit's
/// HTTPS client. Every `SdkConfig` of the kit is loaded from here
/// (`clippy.toml` refuses the other loaders).
#[allow(clippy::disallowed_methods)] // the one loader the others are told to use
pub fn defaults() -> ConfigLoader {
    aws_config::defaults(BehaviorVersion::latest()).http_client(https_client())
}
