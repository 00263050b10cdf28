//! Each function runs with its own execution role, as on Lambda, which
//! hands a function its role's temporary credentials: the runner reads the
//! role ARN from the deployed function's configuration and asks the
//! emulator's STS for that role's credentials (`AssumeRole`).
//!
//! The kit's roles trust `lambda.amazonaws.com`, which nothing local can be.
//! On the embedded emulator `counterctl deploy --target local` sets the
//! stack's `EmulatorRoleAssumer` parameter to the deploying account, whose
//! root (the emulator's `test` identity) the roles then also trust; on AWS
//! the parameter is empty and the statement does not exist
//! (`localstack/README.md`, "Local-only differences").

use aws_config::SdkConfig;
use aws_sdk_sts::config::Credentials;

use crate::error::{Error, sdk_message};

/// STS allows at most 64 characters in a role session name.
const SESSION_NAME_MAX: usize = 64;

/// Obtains the credentials of deployed functions' execution roles, as the
/// caller of `sdk` (the emulator's account).
#[derive(Clone, Debug)]
pub struct FunctionRoles {
    lambda: aws_sdk_lambda::Client,
    sts: aws_sdk_sts::Client,
}

impl FunctionRoles {
    pub fn new(sdk: &SdkConfig) -> Self {
        Self {
            lambda: aws_sdk_lambda::Client::new(sdk),
            sts: aws_sdk_sts::Client::new(sdk),
        }
    }

    /// The execution role ARN of the deployed `function`.
    pub async fn role_of(&self, function: &str) -> Result<String, Error> {
        let configuration = self
            .lambda
            .get_function_configuration()
            .function_name(function)
            .send()
            .await
            .map_err(|e| Error::emulator("Lambda", "GetFunctionConfiguration")(sdk_message(e)))?;
        configuration
            .role()
            .filter(|role| !role.is_empty())
            .map(str::to_owned)
            .ok_or_else(|| Error::AssumeRole {
                function: function.to_owned(),
                role: String::new(),
                message: "the function has no execution role".to_owned(),
            })
    }

    /// Temporary credentials of the deployed `function`'s execution role,
    /// in a session named after the function (valid one hour, the roles'
    /// default maximum).
    pub async fn credentials(&self, function: &str) -> Result<Credentials, Error> {
        let role = self.role_of(function).await?;
        let session: String = function.chars().take(SESSION_NAME_MAX).collect();
        let failed = |message: String| Error::AssumeRole {
            function: function.to_owned(),
            role: role.clone(),
            message,
        };
        let out = self
            .sts
            .assume_role()
            .role_arn(&role)
            .role_session_name(session)
            .send()
            .await
            .map_err(|e| failed(sdk_message(e)))?;
        let keys = out
            .credentials()
            .ok_or_else(|| failed("STS answered without credentials".to_owned()))?;
        Ok(Credentials::new(
            keys.access_key_id(),
            keys.secret_access_key(),
            Some(keys.session_token().to_owned()),
            std::time::SystemTime::try_from(*keys.expiration()).ok(),
            "esm-runner-function-role",
        ))
    }
}

/// The variables that give a function process `credentials`, as Lambda
/// sets them.
pub fn environment(credentials: &Credentials) -> [(String, String); 3] {
    [
        ("AWS_ACCESS_KEY_ID".to_owned(), credentials.access_key_id().to_owned()),
        (
            "AWS_SECRET_ACCESS_KEY".to_owned(),
            credentials.secret_access_key().to_owned(),
        ),
        (
            "AWS_SESSION_TOKEN".to_owned(),
            credentials.session_token().unwrap_or_default().to_owned(),
        ),
    ]
}

/// The runner's own SDK configuration: the emulator at `endpoint`, as its
/// account (`test`), for what Lambda's service does there: read the
/// mappings, poll the sources, assume the functions' roles.
pub async fn emulator_sdk_config(endpoint: &str, region: &str) -> aws_config::SdkConfig {
    hybrid_counter_aws::sdk::defaults()
        .endpoint_url(endpoint)
        .region(aws_config::Region::new(region.to_owned()))
        .credentials_provider(aws_sdk_sqs::config::Credentials::new(
            "test",
            "test",
            None,
            None,
            "esm-runner",
        ))
        .load()
        .await
}
