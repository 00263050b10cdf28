//! counterctl reaches AWS through the proxy its environment names
//! (`HTTPS_PROXY`), as the SDK's default HTTPS client does: the kit builds
//! that client itself (`hybrid_counter_aws::sdk`). A listener standing in
//! for the proxy receives the CONNECT; nothing reaches a network.

use std::io::{BufRead, BufReader};
use std::net::TcpListener;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

#[test]
fn counterctl_reaches_aws_through_the_proxy_of_its_environment() {
    let proxy = TcpListener::bind("127.0.0.1:0").expect("bind the proxy's port");
    proxy.set_nonblocking(true).expect("nonblocking");
    let port = proxy.local_addr().expect("address").port();
    let mut child = Command::new(env!("CARGO_BIN_EXE_counterctl"))
        .args(["--target", "aws", "--region", "us-east-1", "status"])
        .env_clear()
        .env("HTTPS_PROXY", format!("http://127.0.0.1:{port}"))
        .env("AWS_ACCESS_KEY_ID", "AKIDEXAMPLE")
        .env("AWS_SECRET_ACCESS_KEY", "example")
        .env("AWS_EC2_METADATA_DISABLED", "true")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("run counterctl");

    let deadline = Instant::now() + Duration::from_secs(60);
    let stream = loop {
        match proxy.accept() {
            Ok((stream, _)) => break Some(stream),
            Err(_) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(20)),
            Err(_) => break None,
        }
    };
    // Read the request before stopping counterctl: killed between its
    // connect and its write, it left nothing to read (a flake under load).
    let request = stream.map(|stream| {
        stream.set_nonblocking(false).expect("blocking");
        stream.set_read_timeout(Some(Duration::from_secs(10))).expect("timeout");
        let mut request = String::new();
        let read = BufReader::new(stream).read_line(&mut request);
        read.map(|_| request)
    });
    let _ = child.kill();
    let _ = child.wait();
    let request = request
        .expect("counterctl never connected to the proxy of its environment")
        .expect("the proxy request's first line");
    assert!(
        request.starts_with("CONNECT ") && request.contains(".us-east-1.amazonaws.com:443 "),
        "{request:?}"
    );
}
