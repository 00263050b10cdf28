//! From a validated config to SDK clients: resolves the endpoint (for
//! `local`, the emulator that `localstack/fakecloud.sh` runs, for
//! `localstack` without a token the one `localstack/ministack.sh` runs,
//! each started when it does not answer), loads the SDK configuration (for the emulators the
//! static keys captured from the environment, else dummy ones; the standard
//! chain for AWS) and builds one client per
//! service the commands use.

use std::path::{Path, PathBuf};
use std::time::Duration;

use aws_config::Region;
use aws_sdk_cloudformation::config::Credentials;
use hybrid_counter_aws::probe::healthy;

use crate::cli::Target;
use crate::config::{Config, Endpoint};
use crate::error::{Error, Result};
use crate::progress::Ui;

/// The script that installs, starts and stops the embedded emulator.
pub const FAKECLOUD_SCRIPT: &str = "localstack/fakecloud.sh";

/// An emulator counterctl starts with its script when nothing answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ScriptedEmulator {
    /// Its state files' prefix under `.run/`, and a word of its command line.
    pub name: &'static str,
    pub script: &'static str,
    /// What answers 200 once it serves.
    pub health_path: &'static str,
}

/// fakecloud, the embedded default (`--target local`).
pub const FAKECLOUD: ScriptedEmulator = ScriptedEmulator {
    name: "fakecloud",
    script: FAKECLOUD_SCRIPT,
    health_path: hybrid_counter_aws::probe::HEALTH_PATH,
};

/// ministack, LocalStack's stand-in without a token (`--target localstack`):
/// anything answering LocalStack's health path at its port is used.
pub const MINISTACK: ScriptedEmulator = ScriptedEmulator {
    name: "ministack",
    script: "localstack/ministack.sh",
    health_path: crate::config::LOCALSTACK_HEALTH_PATH,
};

/// Where `localstack/ministack.sh install` puts ministack, under the workspace.
pub const MINISTACK_VENV: &str = ".venv-ministack";

/// One client per service, sharing one SDK configuration.
#[derive(Clone)]
pub struct Clients {
    pub cloudformation: aws_sdk_cloudformation::Client,
    pub s3: aws_sdk_s3::Client,
    pub lambda: aws_sdk_lambda::Client,
    pub sqs: aws_sdk_sqs::Client,
    pub cloudwatch: aws_sdk_cloudwatch::Client,
    pub sts: aws_sdk_sts::Client,
    pub dynamodb: aws_sdk_dynamodb::Client,
    /// Reads failed stream ranges back (`redrive --replay`).
    pub dynamodbstreams: aws_sdk_dynamodbstreams::Client,
    pub region: String,
    /// The endpoint every client talks to; `None` for AWS's own.
    pub endpoint: Option<String>,
    pub target: Target,
    /// Poll interval while waiting for CloudFormation: an emulator answers
    /// at once, AWS takes seconds.
    pub poll: Duration,
}

/// Resolves the endpoint, starting the emulator when needed, and builds the clients.
pub async fn connect(config: &Config, ui: &Ui) -> Result<Clients> {
    let endpoint = match &config.endpoint {
        Endpoint::Explicit(url) => {
            if config.target == Target::Local && !healthy(url) {
                return Err(Error::EndpointDown { endpoint: url.clone() });
            }
            Some(url.clone())
        }
        Endpoint::Fixed(url) => Some(url.clone()),
        Endpoint::LocalEmulator { default_port } => Some(ensure_emulator(config, FAKECLOUD, *default_port, ui)?),
        Endpoint::Ministack { default_port } => Some(ensure_emulator(config, MINISTACK, *default_port, ui)?),
        Endpoint::Aws => None,
    };

    let mut loader = hybrid_counter_aws::sdk::defaults();
    if let Some(region) = &config.region {
        loader = loader.region(Region::new(region.clone()));
    }
    if let Some(profile) = &config.profile {
        loader = loader.profile_name(profile);
    }
    if let Some(endpoint) = &endpoint {
        loader = loader.endpoint_url(endpoint);
    }
    if config.is_emulator() {
        loader = loader.credentials_provider(emulator_credentials(|k| config.env.aws_keys.get(k).cloned()));
    }
    let sdk = loader.load().await;
    let region = sdk.region().map(|r| r.to_string()).ok_or(Error::NoRegion)?;

    let mut lambda_config = aws_sdk_lambda::config::Builder::from(&sdk);
    if config.target == Target::Localstack {
        lambda_config = hybrid_counter_aws::emulator::string_numbers::mended(lambda_config);
    }
    Ok(Clients {
        cloudformation: aws_sdk_cloudformation::Client::new(&sdk),
        s3: hybrid_counter_aws::s3::client(&sdk),
        lambda: aws_sdk_lambda::Client::from_conf(lambda_config.build()),
        sqs: aws_sdk_sqs::Client::new(&sdk),
        cloudwatch: aws_sdk_cloudwatch::Client::new(&sdk),
        sts: aws_sdk_sts::Client::new(&sdk),
        dynamodb: aws_sdk_dynamodb::Client::new(&sdk),
        dynamodbstreams: aws_sdk_dynamodbstreams::Client::new(&sdk),
        region,
        poll: if config.is_emulator() {
            Duration::from_millis(250)
        } else {
            Duration::from_secs(2)
        },
        endpoint,
        target: config.target,
    })
}

/// The `host:port` of an `http://` endpoint; `None` for https or
/// anything else, which is not probed (the SDK says what is wrong with it).
pub fn http_authority(endpoint: &str) -> Option<&str> {
    let rest = endpoint.strip_prefix("http://")?;
    rest.split('/').next().filter(|a| !a.is_empty())
}

/// Static credentials for an emulator: the environment's keys when set
/// (LocalStack maps an access key to an account), else dummy ones.
pub fn emulator_credentials(env: impl Fn(&str) -> Option<String>) -> Credentials {
    match (env("AWS_ACCESS_KEY_ID"), env("AWS_SECRET_ACCESS_KEY")) {
        (Some(id), Some(secret)) if !id.is_empty() && !secret.is_empty() => {
            Credentials::new(id, secret, env("AWS_SESSION_TOKEN"), None, "counterctl-environment")
        }
        _ => Credentials::new("test", "test", None, None, "counterctl-emulator"),
    }
}

/// The directory holding `localstack/fakecloud.sh`: the current directory
/// or one of its parents, else the workspace this binary was built in.
pub fn workspace_root() -> Option<PathBuf> {
    let from_cwd = std::env::current_dir().ok().and_then(|cwd| find_upwards(&cwd));
    from_cwd.or_else(|| {
        std::env::current_exe()
            .ok()
            .and_then(|exe| exe.parent().and_then(find_upwards))
    })
}

fn find_upwards(start: &Path) -> Option<PathBuf> {
    start
        .ancestors()
        .find(|dir| dir.join(FAKECLOUD_SCRIPT).is_file())
        .map(Path::to_path_buf)
}

/// The endpoint of the emulator `<script> start` runs, read from its
/// state directory like the script does: the recorded port when the
/// recorded pid is a live process of that emulator, else `default_port`.
pub fn emulator_endpoint(run_dir: &Path, name: &str, default_port: u16) -> String {
    let read = |file: &str| std::fs::read_to_string(run_dir.join(format!("{name}.{file}"))).ok();
    let port = running_port(read("pid").as_deref(), read("port").as_deref(), |pid| {
        std::fs::read(format!("/proc/{pid}/cmdline"))
            .map(|cmd| String::from_utf8_lossy(&cmd).contains(name))
            .unwrap_or(false)
    });
    format!("http://127.0.0.1:{}", port.unwrap_or(default_port))
}

/// The port of a running script-started emulator, from the contents of its
/// pid and port files; `is_fakecloud` checks that a pid is a live fakecloud
/// (a recycled pid after a reboot is not).
pub fn running_port(
    pid_file: Option<&str>,
    port_file: Option<&str>,
    is_fakecloud: impl Fn(u32) -> bool,
) -> Option<u16> {
    let pid: u32 = pid_file?.trim().parse().ok()?;
    if !is_fakecloud(pid) {
        return None;
    }
    port_file?.trim().parse().ok().filter(|p| *p > 0)
}

/// The running emulator's endpoint, starting it with its script first if
/// nothing answers.
fn ensure_emulator(config: &Config, emulator: ScriptedEmulator, default_port: u16, ui: &Ui) -> Result<String> {
    let root = workspace_root();
    let run_dir = root.as_ref().map_or_else(|| PathBuf::from(".run"), |r| r.join(".run"));
    let endpoint = emulator_endpoint(&run_dir, emulator.name, default_port);
    let authority = endpoint.trim_start_matches("http://");
    if hybrid_counter_aws::probe::answers_ok(authority, emulator.health_path) {
        return Ok(endpoint);
    }
    if emulator == MINISTACK {
        let venv = root.as_deref().unwrap_or(Path::new(".")).join(MINISTACK_VENV);
        if !venv.join("bin/ministack").is_file() {
            return Err(Error::MinistackNotInstalled { venv });
        }
    } else {
        let binary = config
            .env
            .fakecloud_bin
            .clone()
            .unwrap_or_else(|| "fakecloud".to_owned());
        if find_binary(&binary).is_none() {
            return Err(Error::EmulatorNotInstalled { binary });
        }
    }
    let script = emulator.script;
    let Some(root) = root else {
        return Err(Error::EmulatorStart(format!(
            "{script} not found from the current directory; run counterctl from the kit's workspace"
        )));
    };
    let port = endpoint.rsplit(':').next().unwrap_or("4566").to_owned();
    ui.step(format!("starting {} on port {port} ({script} start)", emulator.name));
    let output = std::process::Command::new(root.join(script))
        .args(["start", "--port", &port])
        .current_dir(&root)
        .stdin(std::process::Stdio::null())
        .output()
        .map_err(|e| Error::EmulatorStart(format!("cannot run {script}: {e}")))?;
    if !output.status.success() {
        let stderr = String::from_utf8_lossy(&output.stderr);
        let last = stderr
            .lines()
            .rev()
            .find(|l| !l.trim().is_empty())
            .unwrap_or("no output");
        return Err(Error::EmulatorStart(last.trim().to_owned()));
    }
    let started = String::from_utf8_lossy(&output.stdout).trim().to_owned();
    let endpoint = if started.starts_with("http") { started } else { endpoint };
    ui.log(format!("{} running at {endpoint}", emulator.name));
    Ok(endpoint)
}

/// `name` itself if it is a path, else the first match on PATH or in
/// `~/.cargo/bin` (where `cargo install` puts it; often not on PATH).
fn find_binary(name: &str) -> Option<PathBuf> {
    let candidate = Path::new(name);
    if candidate.components().count() > 1 {
        return candidate.is_file().then(|| candidate.to_path_buf());
    }
    let cargo_bin = std::env::var_os("CARGO_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cargo")))
        .map(|home| home.join("bin"));
    std::env::var_os("PATH")
        .map(|path| std::env::split_paths(&path).collect::<Vec<_>>())
        .unwrap_or_default()
        .into_iter()
        .chain(cargo_bin)
        .map(|dir| dir.join(name))
        .find(|path| path.is_file())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_recorded_port_counts_only_for_a_live_fakecloud() {
        assert_eq!(running_port(Some("42\n"), Some("4600\n"), |pid| pid == 42), Some(4600));
        assert_eq!(running_port(Some("42"), Some("4600"), |_| false), None);
        assert_eq!(running_port(None, Some("4600"), |_| true), None);
        assert_eq!(running_port(Some("x"), Some("4600"), |_| true), None);
        assert_eq!(running_port(Some("42"), Some("junk"), |_| true), None);
    }

    #[test]
    fn without_state_the_default_port_is_used() {
        let dir = std::env::temp_dir().join(format!("ops-cli-run-{}", std::process::id()));
        assert_eq!(emulator_endpoint(&dir, "fakecloud", 4566), "http://127.0.0.1:4566");
        assert_eq!(emulator_endpoint(&dir, "ministack", 4610), "http://127.0.0.1:4610");
    }

    #[test]
    fn emulator_credentials_prefer_the_environment() {
        let creds = emulator_credentials(|_| None);
        assert_eq!(creds.access_key_id(), "test");
        let creds = emulator_credentials(|k| match k {
            "AWS_ACCESS_KEY_ID" => Some("000000000001".into()),
            "AWS_SECRET_ACCESS_KEY" => Some("s".into()),
            _ => None,
        });
        assert_eq!(creds.access_key_id(), "000000000001");
    }

    #[test]
    fn a_closed_port_is_not_healthy() {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map(|a| a.port())
            .unwrap();
        assert!(!healthy(&format!("http://127.0.0.1:{port}")));
    }
}
