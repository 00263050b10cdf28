//! The emulator's health probe: an HTTP GET of fakecloud's health path,
//! healthy when it answers 200. Plain `std` sockets with timeouts, no HTTP
//! client and no runtime, because it runs before anything else does: the
//! e2e harness polls it while the emulator starts, `counterctl` asks it
//! before it decides to start one.

use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::time::Duration;

/// Where fakecloud answers whether it is up.
pub const HEALTH_PATH: &str = "/_fakecloud/health";

/// How long the probe waits to connect, and then for the answer.
pub const TIMEOUT: Duration = Duration::from_secs(2);

/// Whether the emulator at `endpoint` (`http://host:port`, a path after it
/// is ignored) answers [`HEALTH_PATH`] with 200. An endpoint that is not
/// plain http is no emulator started by the kit: it counts as healthy, and
/// the SDK reports whatever is wrong with it.
pub fn healthy(endpoint: &str) -> bool {
    let Some(rest) = endpoint.strip_prefix("http://") else {
        return true;
    };
    let authority = rest.split('/').next().unwrap_or(rest);
    answers_ok(authority, HEALTH_PATH)
}

/// Whether `GET path` on `authority` (`host:port`) answers with status 200
/// at one of the addresses the host resolves to.
pub fn answers_ok(authority: &str, path: &str) -> bool {
    let Ok(addrs) = authority.to_socket_addrs() else {
        return false;
    };
    addrs.into_iter().any(|addr| status(addr, authority, path) == Some(200))
}

/// The status code of `GET path` at `addr`; `None` when nothing answered
/// in time, or not with an HTTP status line.
fn status(addr: SocketAddr, host: &str, path: &str) -> Option<u16> {
    let mut stream = TcpStream::connect_timeout(&addr, TIMEOUT).ok()?;
    stream.set_read_timeout(Some(TIMEOUT)).ok()?;
    stream.set_write_timeout(Some(TIMEOUT)).ok()?;
    // HTTP/1.0: the server closes the connection after its answer.
    write!(stream, "GET {path} HTTP/1.0\r\nHost: {host}\r\n\r\n").ok()?;
    let mut status_line = String::new();
    BufReader::new(stream).read_line(&mut status_line).ok()?;
    let mut parts = status_line.split_whitespace();
    if !parts.next()?.starts_with("HTTP/") {
        return None;
    }
    parts.next()?.parse().ok()
}

#[cfg(test)]
mod tests {
    //! The probe against a one-shot server on loopback.

    use std::io::Read;
    use std::net::TcpListener;
    use std::thread::JoinHandle;

    use super::*;

    /// Serves one connection on a free loopback port: reads the request,
    /// then writes `answer` (nothing: closes at once). Returns the
    /// endpoint and the request it got.
    fn serve_once(answer: Option<&'static str>) -> (String, JoinHandle<String>) {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind loopback");
        let endpoint = format!("http://{}", listener.local_addr().expect("local address"));
        let server = std::thread::spawn(move || {
            let (mut stream, _) = listener.accept().expect("accept");
            let mut request = Vec::new();
            let mut byte = [0u8; 1];
            while !request.ends_with(b"\r\n\r\n") && stream.read(&mut byte).is_ok_and(|n| n == 1) {
                request.push(byte[0]);
            }
            if let Some(answer) = answer {
                stream.write_all(answer.as_bytes()).expect("answer");
            }
            String::from_utf8(request).expect("ascii request")
        });
        (endpoint, server)
    }

    #[test]
    fn an_emulator_answering_200_is_healthy() {
        let (endpoint, server) = serve_once(Some("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"));
        assert!(healthy(&endpoint));
        let request = server.join().unwrap();
        assert!(request.starts_with("GET /_fakecloud/health HTTP/1.0\r\n"), "{request}");
    }

    #[test]
    fn a_path_after_the_endpoint_is_ignored() {
        let (endpoint, server) = serve_once(Some("HTTP/1.0 200 OK\r\n\r\n"));
        assert!(healthy(&format!("{endpoint}/some/path")));
        assert!(server.join().unwrap().starts_with("GET /_fakecloud/health "));
    }

    #[test]
    fn anything_but_an_http_200_is_not_healthy() {
        for answer in [
            Some("HTTP/1.1 500 Internal Server Error\r\n\r\n"),
            Some("HTTP/1.1 404 Not Found\r\n\r\n"),
            Some("200 OK\r\n\r\n"),
            // Closes without answering.
            None,
        ] {
            let (endpoint, server) = serve_once(answer);
            assert!(!healthy(&endpoint), "{answer:?}");
            server.join().unwrap();
        }
    }

    #[test]
    fn nothing_listening_is_not_healthy() {
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("free port")
            .port();
        assert!(!healthy(&format!("http://127.0.0.1:{port}")));
    }

    #[test]
    fn https_endpoints_are_left_to_the_sdk() {
        assert!(healthy("https://sqs.us-east-1.amazonaws.com"));
    }
}
