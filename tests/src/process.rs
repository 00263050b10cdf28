//! Emulator processes of the harness: a free loopback port, and a process
//! started on one until it serves (fakecloud's and ministack's start).

use std::net::TcpListener;
use std::path::PathBuf;
use std::process::Child;
use std::time::{Duration, Instant};

/// Starts an emulator process on a free loopback port, trying three ports:
/// `spawn(port, log)` starts it writing to `log`, `healthy(endpoint)` says
/// when it serves, within `patience`. Returns the process, its endpoint
/// and its log's path; panics with the last log when it never served.
pub fn spawn_on_free_port(
    name: &str,
    patience: Duration,
    spawn: impl Fn(u16, std::fs::File) -> Child,
    healthy: impl Fn(&str) -> bool,
) -> (Child, String, PathBuf) {
    let log_dir = std::env::temp_dir().join("hck-e2e");
    std::fs::create_dir_all(&log_dir).expect("create log dir");
    for _ in 0..3 {
        let port = free_port();
        let log_path = log_dir.join(format!("{name}-{port}.log"));
        let mut child = spawn(port, std::fs::File::create(&log_path).expect("create emulator log"));
        let endpoint = format!("http://127.0.0.1:{port}");
        let deadline = Instant::now() + patience;
        while Instant::now() < deadline {
            if healthy(&endpoint) {
                return (child, endpoint, log_path);
            }
            if let Ok(Some(_)) = child.try_wait() {
                break; // port taken between probe and bind: try another
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = child.kill();
        let _ = child.wait();
        eprintln!(
            "{name} did not come up on port {port}; log:\n{}",
            std::fs::read_to_string(&log_path).unwrap_or_default()
        );
    }
    panic!("{name} did not start after 3 attempts");
}

/// A loopback port nothing listens on now.
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("no free loopback port")
}
