//! Lambda function URLs served on loopback: the emulator stores a
//! function's URL configuration (`AWS::Lambda::Url`) but answers nothing at
//! its `*.lambda-url.*.on.aws` address, so the runner serves each deployed
//! function URL itself, through the invoker ([`Invoke::serve_url`]).
//!
//! The handler invoker serves it ([`crate::process`]): an HTTP request
//! becomes the function URL event (payload format 2.0, the API Gateway v2
//! HTTP shape: `rawPath` as sent, a body that is not text base64-encoded,
//! `requestContext.http`), and the function's response document becomes
//! the HTTP response (status, headers, cookies, base64 body decoded;
//! [`crate::url_event`]). The function answers at the root, as a function
//! URL does, with its deployed environment, as for a mapping.
//!
//! What differs from AWS, on purpose: the URL is plain HTTP on 127.0.0.1,
//! and **IAM auth is off**: requests are not signed and the event carries
//! no `requestContext.authorizer.iam`, whatever the deployed `AuthType`
//! (`AWS_IAM` for the kit's API). A function error answers 502 with the
//! error document, as on AWS.
//!
//! While a URL is served, the function carries the tag [`LOCAL_URL_TAG`]
//! with it, so `counterctl status` (another process) can print it; the
//! runner removes the tag when it stops.

use tracing::{info, warn};

use crate::error::{Error, sdk_message};
use crate::invoke::Invoke;
use crate::report::ServedUrl;

/// Tag on a function whose URL the runner serves locally; its value is the
/// local URL.
pub const LOCAL_URL_TAG: &str = "esm-runner:local-url";

/// The port of the `index`th URL served from `first` (0: any free port).
pub(crate) fn port_for(first: u16, index: usize) -> u16 {
    if first == 0 {
        return 0;
    }
    u16::try_from(index)
        .ok()
        .and_then(|i| first.checked_add(i))
        .unwrap_or(0)
}

/// Serves the URLs of `functions` that have one in the emulator, from
/// port `first_port` on; returns what is served.
pub(crate) async fn serve(
    lambda: &aws_sdk_lambda::Client,
    invoker: &impl Invoke,
    functions: &[String],
    first_port: u16,
) -> Result<Vec<ServedUrl>, Error> {
    let mut served = Vec::new();
    for function_name in functions {
        let config = match lambda
            .get_function_url_config()
            .function_name(function_name)
            .send()
            .await
        {
            Ok(config) => config,
            Err(err)
                if err
                    .as_service_error()
                    .is_some_and(|e| e.is_resource_not_found_exception()) =>
            {
                continue;
            }
            Err(err) => return Err(Error::emulator("Lambda", "GetFunctionUrlConfig")(sdk_message(err))),
        };
        let port = port_for(first_port, served.len());
        let Some(local_url) = invoker.serve_url(function_name, port).await? else {
            continue;
        };
        lambda
            .tag_resource()
            .resource(config.function_arn())
            .tags(LOCAL_URL_TAG, &local_url)
            .send()
            .await
            .map_err(|e| Error::emulator("Lambda", "TagResource")(sdk_message(e)))?;
        let url = ServedUrl {
            function_name: function_name.clone(),
            function_arn: config.function_arn().to_owned(),
            local_url,
            deployed_url: config.function_url().to_owned(),
            deployed_auth_type: config.auth_type().as_str().to_owned(),
        };
        served.push(url);
    }
    Ok(served)
}

/// Removes the tags of what [`serve`] served (its processes stop with the
/// invoker). A failure is logged: the runner is stopping anyway.
pub(crate) async fn unserve(lambda: &aws_sdk_lambda::Client, served: &[ServedUrl]) {
    for url in served {
        if let Err(err) = lambda
            .untag_resource()
            .resource(&url.function_arn)
            .tag_keys(LOCAL_URL_TAG)
            .send()
            .await
        {
            warn!(function = %url.function_name, error = %sdk_message(err), "could not remove the local URL tag");
        } else {
            info!(function = %url.function_name, url = %url.local_url, "stopped serving the function URL");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_take_consecutive_ports_from_the_first_or_free_ones() {
        assert_eq!(port_for(9001, 0), 9001);
        assert_eq!(port_for(9001, 2), 9003);
        assert_eq!(port_for(0, 3), 0);
        assert_eq!(port_for(u16::MAX, 1), 0, "past the last port: a free one");
    }
}
