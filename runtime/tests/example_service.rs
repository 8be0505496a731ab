//! The Rust example service (`runtime/examples/service.rs`) as two real processes on
//! loopback, `--edge` calling the other with `--next`: the edge replaces a forged context
//! with its own stamp, the next tier schedules the request by that same GAT one hop
//! further, and bad input or a dead next tier gets a status that says what went wrong.
//! `cargo test` builds the example; the test skips, saying so, when it is missing.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

fn now_ns() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).expect("after 1970").as_nanos() as u64
}

/// target/<profile>/examples/service, beside this test's own target/<profile>/deps.
fn example_binary() -> Option<PathBuf> {
    let exe = std::env::current_exe().ok()?;
    let path = exe.parent()?.parent()?.join("examples/service");
    path.is_file().then_some(path)
}

/// A started example; killed (by its pid, through the handle) when dropped.
struct Service {
    child: Child,
    addr: String,
}

impl Service {
    fn start(binary: &PathBuf, args: &[&str]) -> Service {
        let mut child = Command::new(binary)
            .args(["--listen", "127.0.0.1:0"])
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap_or_else(|e| panic!("starting {}: {e}", binary.display()));
        // Readiness: the line naming the bound address.
        let mut line = String::new();
        BufReader::new(child.stdout.take().expect("piped")).read_line(&mut line).expect("reading its stdout");
        let addr = line
            .strip_prefix("listening on ")
            .and_then(|rest| rest.split_whitespace().next())
            .unwrap_or_else(|| panic!("the example printed {line:?}, not `listening on ADDR`"))
            .to_string();
        Service { child, addr }
    }
}

impl Drop for Service {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// An HTTP/1.1 GET with `headers`; returns the status, the response headers (lower-cased
/// names) and the body.
fn get(addr: &str, headers: &[(&str, &str)]) -> (u16, Vec<(String, String)>, String) {
    let mut stream = TcpStream::connect(addr).unwrap_or_else(|e| panic!("connecting to {addr}: {e}"));
    stream.set_read_timeout(Some(Duration::from_secs(20))).expect("a timeout");
    let mut request = format!("GET / HTTP/1.1\r\nhost: {addr}\r\nconnection: close\r\n");
    for (name, value) in headers {
        request.push_str(&format!("{name}: {value}\r\n"));
    }
    request.push_str("\r\n");
    stream.write_all(request.as_bytes()).expect("sending the request");
    let mut raw = String::new();
    stream.read_to_string(&mut raw).expect("reading the response");
    let (head, body) = raw.split_once("\r\n\r\n").unwrap_or_else(|| panic!("no header end in {raw:?}"));
    let mut lines = head.lines();
    let status = lines
        .next()
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no status line in {raw:?}"));
    let headers = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    // Bodies here are short and sent in one piece (no chunked framing to undo).
    (status, headers, body.to_string())
}

fn header<'a>(headers: &'a [(String, String)], name: &str) -> Option<&'a str> {
    headers.iter().find(|(n, _)| n == name).map(|(_, v)| v.as_str())
}

#[test]
fn the_edge_stamps_and_the_next_tier_schedules_by_the_same_gat() {
    let Some(binary) = example_binary() else {
        eprintln!("SKIP: target/release/examples/service is missing; `cargo test` builds it (or `cargo build --release -p tailor-runtime --example service`)");
        return;
    };
    let next = Service::start(&binary, &["--index", "1"]);
    let edge = Service::start(&binary, &["--edge", "--next", &format!("http://{}/", next.addr)]);

    // A client's forged, hour-old context: the edge strips it and stamps its own.
    let forged = format!("1.g{}.c0.k1.h0", now_ns() - 3_600_000_000_000);
    let before = now_ns();
    let (status, headers, body) = get(&edge.addr, &[("tailor-context", &forged), ("tailor-demand-us", "500,500")]);
    let after = now_ns();
    assert_eq!(status, 200, "{body}");
    let seen = header(&headers, "tailor-seen-gat").unwrap_or_else(|| panic!("no tailor-seen-gat in {headers:?}"));
    let gats: Vec<u64> = seen.split(',').map(|g| g.parse().expect("a GAT in ns")).collect();
    assert_eq!(gats.len(), 2, "one GAT per tier: {seen}");
    assert_eq!(gats[0], gats[1], "the next tier scheduled by another GAT: {seen}");
    assert!(before <= gats[0] && gats[0] <= after, "not the edge's stamp ({before}..{after}): {seen}");
    assert!(body.contains("hop 0"), "the edge is hop 0: {body}");

    // A tier that is not the edge keeps the (recent) GAT it is given, and its hop.
    let gat = now_ns() - 5_000_000;
    let (status, headers, body) = get(&next.addr, &[("tailor-context", &format!("1.g{gat}.c0.k1.h3"))]);
    assert_eq!(status, 200, "{body}");
    assert_eq!(header(&headers, "tailor-seen-gat"), Some(gat.to_string().as_str()));
    assert!(body.contains("hop 3"), "{body}");

    // Bad input names the header and the fix.
    let (status, _, body) = get(&edge.addr, &[("tailor-demand-us", "lots")]);
    assert_eq!(status, 400, "{body}");
    assert!(body.contains("tailor-demand-us"), "{body}");
    let (status, _, body) = get(&edge.addr, &[("tailor-demand-us", "100")]);
    assert_eq!(status, 502, "the next tier has no value for its index 1: {body}");
    assert!(body.contains(&next.addr), "names the next tier: {body}");

    // The next tier gone: 502 naming it, and the edge keeps serving.
    let next_addr = next.addr.clone();
    drop(next);
    let (status, _, body) = get(&edge.addr, &[]);
    assert_eq!(status, 502, "{body}");
    assert!(body.contains(&next_addr), "names the dead next tier: {body}");
}
