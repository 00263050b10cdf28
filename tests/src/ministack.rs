//! The second emulator: a private ministack (a LocalStack-compatible edge
//! on one port, from PyPI, in its own virtualenv) on a free loopback port,
//! for the tests of the LocalStack path without a token and the
//! conformance suite. Started like the harness' fakecloud,
//! stopped (with the function processes it started) when dropped.
//!
//! It is required like fakecloud: a missing install fails the test with the
//! command that installs it (`localstack/ministack.sh install`, which `make
//! tools` runs). `MINISTACK_BIN` selects another executable.
//!
//! It runs without IAM enforcement (ministack enforces none), so these
//! tests check behaviour, not grants: those stay with fakecloud.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use aws_config::SdkConfig;

/// Where ministack says it serves.
pub const HEALTH_PATH: &str = "/_ministack/health";

/// A ministack process owned by one test.
pub struct Ministack {
    child: Child,
    pub endpoint: String,
    pub log: PathBuf,
    /// Its `TMPDIR`, removed when dropped: ministack extracts every
    /// `provided.*` function's code there (about 80 MB per distinct zip)
    /// and never removes it itself.
    tmp: PathBuf,
}

/// The executable: `MINISTACK_BIN`, else the workspace's `.venv-ministack`.
pub fn ministack_bin() -> PathBuf {
    std::env::var_os("MINISTACK_BIN").map_or_else(
        || {
            std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .parent()
                .expect("workspace root")
                .join(".venv-ministack/bin/ministack")
        },
        PathBuf::from,
    )
}

impl Ministack {
    /// Starts ministack on a free loopback port and waits until it answers.
    pub fn start() -> Self {
        let bin = ministack_bin();
        assert!(
            bin.is_file(),
            "ministack is not installed ({} is missing): run `make tools` or `localstack/ministack.sh install` \
             (seconds, from PyPI), or set MINISTACK_BIN",
            bin.display()
        );
        static STARTED: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let n = STARTED.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let tmp = std::env::temp_dir().join(format!("hck-ministack-{}-{n}", std::process::id()));
        std::fs::create_dir_all(&tmp).unwrap_or_else(|e| panic!("cannot create {}: {e}", tmp.display()));
        let (child, endpoint, log) = crate::process::spawn_on_free_port(
            "ministack",
            Duration::from_secs(60),
            |port, log| {
                let mut command = Command::new(&bin);
                command
                    .env("TMPDIR", &tmp)
                    .env("GATEWAY_PORT", port.to_string())
                    .env("BIND_HOST", "127.0.0.1")
                    // The functions it runs call this emulator back, not AWS.
                    .env("AWS_ENDPOINT_URL", format!("http://127.0.0.1:{port}"))
                    .env("LOG_LEVEL", "WARNING")
                    .stdin(Stdio::null())
                    .stdout(log.try_clone().expect("log handle"))
                    .stderr(log);
                // Its own process group: dropping it stops the function
                // processes it started too.
                std::os::unix::process::CommandExt::process_group(&mut command, 0);
                command
                    .spawn()
                    .unwrap_or_else(|e| panic!("cannot start ministack {}: {e}", bin.display()))
            },
            |endpoint| hybrid_counter_aws::probe::answers_ok(endpoint.trim_start_matches("http://"), HEALTH_PATH),
        );
        Self {
            child,
            endpoint,
            log,
            tmp,
        }
    }

    /// SDK configuration pointing at this emulator with dummy credentials.
    pub async fn sdk_config(&self) -> SdkConfig {
        crate::sdk::sdk_config_for(&self.endpoint).await
    }
}

impl Drop for Ministack {
    fn drop(&mut self) {
        // SIGTERM to the whole group, then SIGKILL to what is left.
        let group = format!("-{}", self.child.id());
        let kill = |signal: &str| {
            let _ = Command::new("kill")
                .args([signal, "--", &group])
                .stderr(Stdio::null())
                .status();
        };
        kill("-TERM");
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                break;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        kill("-KILL");
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.tmp);
    }
}
