//! Checks on an admin endpoint from outside the process, for tests: a blocking scrape, `promtool check metrics`, a real Prometheus server.
//!
//! Both Prometheus tools come from the distribution's `prometheus` package
//! (`.ci/run` installs it); where they are absent the helpers say so
//! ([`Promtool::Absent`], `Ok(None)`) and the test prints that it skipped.

use std::fs::File;
use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::exposition::TEXT_CONTENT_TYPE;

/// How long one request to a local endpoint may take.
const IO_TIMEOUT: Duration = Duration::from_secs(10);

/// One HTTP answer, read whole.
#[derive(Clone, Debug)]
pub struct HttpResponse {
    pub status: u16,
    pub content_type: Option<String>,
    pub body: String,
}

/// `GET path` on `addr` over HTTP/1.1 with `Connection: close`, optionally with an `Accept` header.
pub fn http_get(addr: SocketAddr, path: &str, accept: Option<&str>) -> io::Result<HttpResponse> {
    let mut stream = TcpStream::connect_timeout(&addr, IO_TIMEOUT)?;
    stream.set_read_timeout(Some(IO_TIMEOUT))?;
    stream.set_write_timeout(Some(IO_TIMEOUT))?;
    let accept = accept.map(|a| format!("Accept: {a}\r\n")).unwrap_or_default();
    write!(stream, "GET {path} HTTP/1.1\r\nHost: {addr}\r\n{accept}Connection: close\r\n\r\n")?;
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw)?;
    parse_response(&raw).ok_or_else(|| {
        io::Error::new(io::ErrorKind::InvalidData, format!("GET {path} on {addr}: malformed HTTP response"))
    })
}

fn parse_response(raw: &[u8]) -> Option<HttpResponse> {
    let split = raw.windows(4).position(|w| w == b"\r\n\r\n")?;
    let head = std::str::from_utf8(&raw[..split]).ok()?;
    let mut lines = head.split("\r\n");
    let status = lines.next()?.split(' ').nth(1)?.parse().ok()?;
    let mut content_type = None;
    let mut content_length = None;
    let mut chunked = false;
    for line in lines {
        let (name, value) = line.split_once(':')?;
        let value = value.trim();
        match name.to_ascii_lowercase().as_str() {
            "content-type" => content_type = Some(value.to_string()),
            "content-length" => content_length = value.parse::<usize>().ok(),
            "transfer-encoding" => chunked = value.eq_ignore_ascii_case("chunked"),
            _ => {}
        }
    }
    let rest = &raw[split + 4..];
    let body =
        if chunked { dechunk(rest)? } else { rest[..content_length.unwrap_or(rest.len()).min(rest.len())].to_vec() };
    Some(HttpResponse { status, content_type, body: String::from_utf8(body).ok()? })
}

fn dechunk(mut rest: &[u8]) -> Option<Vec<u8>> {
    let mut body = Vec::new();
    loop {
        let line_end = rest.windows(2).position(|w| w == b"\r\n")?;
        let size_text = std::str::from_utf8(&rest[..line_end]).ok()?;
        let size = usize::from_str_radix(size_text.split(';').next()?.trim(), 16).ok()?;
        rest = &rest[line_end + 2..];
        if size == 0 {
            return Some(body);
        }
        body.extend_from_slice(rest.get(..size)?);
        rest = rest.get(size + 2..)?;
    }
}

/// What `promtool check metrics` said.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Promtool {
    /// Exit 0, no lint problems.
    Clean,
    /// Its complaints, verbatim.
    Problems(String),
    /// `promtool` is not installed (`apt-get install prometheus`).
    Absent,
}

/// Runs `promtool check metrics` on exposition text.
pub fn promtool_check_metrics(text: &str) -> io::Result<Promtool> {
    let child = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn();
    let mut child = match child {
        Ok(child) => child,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Promtool::Absent),
        Err(e) => return Err(e),
    };
    child.stdin.take().expect("stdin is piped").write_all(text.as_bytes())?;
    let out = child.wait_with_output()?;
    let said = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    Ok(if out.status.success() && said.trim().is_empty() { Promtool::Clean } else { Promtool::Problems(said) })
}

/// A scrape of `/metrics` checked the way an operator would.
#[derive(Clone, Debug)]
pub struct Scrape {
    /// The exposition text.
    pub body: String,
    /// promtool's verdict on it.
    pub promtool: Promtool,
}

/// Why a scrape of `/metrics` is not one an operator's Prometheus would accept.
#[derive(Debug, thiserror::Error)]
pub enum ScrapeError {
    /// No HTTP answer (nothing listens, or the connection broke).
    #[error("GET /metrics on {addr}: {source}")]
    Get {
        addr: SocketAddr,
        #[source]
        source: io::Error,
    },
    /// An answer other than 200.
    #[error("GET /metrics on {addr}: status {status} ({body})")]
    Status { addr: SocketAddr, status: u16, body: String },
    /// Not the text exposition format Prometheus asked for.
    #[error("GET /metrics on {addr}: content type {content_type:?}, expected {TEXT_CONTENT_TYPE:?}")]
    ContentType { addr: SocketAddr, content_type: Option<String> },
    /// promtool is installed but could not be run.
    #[error("running promtool: {0}")]
    Promtool(#[source] io::Error),
}

/// Scrapes `http://addr/metrics` as `curl` would (text format), requires 200
/// and the text content type, and runs promtool on the body.
pub fn scrape_metrics(addr: SocketAddr) -> Result<Scrape, ScrapeError> {
    let resp = http_get(addr, "/metrics", None).map_err(|source| ScrapeError::Get { addr, source })?;
    if resp.status != 200 {
        return Err(ScrapeError::Status { addr, status: resp.status, body: resp.body });
    }
    if resp.content_type.as_deref() != Some(TEXT_CONTENT_TYPE) {
        return Err(ScrapeError::ContentType { addr, content_type: resp.content_type });
    }
    let promtool = promtool_check_metrics(&resp.body).map_err(ScrapeError::Promtool)?;
    Ok(Scrape { body: resp.body, promtool })
}

/// The value of the first sample of `series` (a name, or a name with its
/// labels as written, e.g. `tailor_x_total{tier="lc"}`) in exposition text.
pub fn sample_value(text: &str, series: &str) -> Option<f64> {
    text.lines().filter(|l| !l.starts_with('#')).find_map(|line| {
        let rest = line.strip_prefix(series)?;
        // The name must end here: `foo` must not match `foo_total`.
        let value = rest.strip_prefix(' ')?;
        value.split(' ').next()?.parse().ok()
    })
}

/// Why a PromQL query against the test Prometheus found nothing; every variant quotes it.
#[derive(Debug, thiserror::Error)]
pub enum PromQueryError {
    /// Prometheus did not answer.
    #[error("query {promql}: {source}")]
    Get {
        promql: String,
        #[source]
        source: io::Error,
    },
    /// The answer is not the API's JSON.
    #[error("query {promql}: {source}: {body}")]
    NotJson {
        promql: String,
        body: String,
        #[source]
        source: serde_json::Error,
    },
    /// The API reported an error (a PromQL syntax error, say).
    #[error("query {promql}: {body}")]
    Failed { promql: String, body: String },
    /// No series before the timeout; `targets` is Prometheus' view of its scrape targets.
    #[error("query {promql}: no series after {timeout:?}; targets: {targets}")]
    NoSeries { promql: String, timeout: Duration, targets: String },
}

static NEXT_DIR: AtomicU64 = AtomicU64::new(0);

/// A real Prometheus server scraping given targets every second, with its
/// config and data in a temporary directory; stopped (by pid) and removed on drop.
pub struct PrometheusServer {
    child: Child,
    dir: PathBuf,
    addr: SocketAddr,
}

impl PrometheusServer {
    /// Starts `prometheus` with job `tailor` scraping `targets`' `/metrics`
    /// and returns once it reports ready; `Ok(None)` when it is not installed.
    pub fn start(targets: &[SocketAddr]) -> io::Result<Option<PrometheusServer>> {
        let dir = std::env::temp_dir().join(format!(
            "tailor-prometheus-{}-{}",
            std::process::id(),
            NEXT_DIR.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&dir)?;
        let targets: Vec<String> = targets.iter().map(|t| format!("'{t}'")).collect();
        let config = format!(
            "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\nscrape_configs:\n  - job_name: tailor\n    static_configs:\n      - targets: [{}]\n",
            targets.join(", ")
        );
        std::fs::write(dir.join("prometheus.yml"), config)?;
        // Prometheus takes a port number, not a bound socket: take a free one and hand it over.
        let addr = TcpListener::bind("127.0.0.1:0")?.local_addr()?;
        let log = std::fs::File::create(dir.join("prometheus.log"))?;
        let spawned = Command::new("prometheus")
            .arg(format!("--config.file={}", dir.join("prometheus.yml").display()))
            .arg(format!("--storage.tsdb.path={}", dir.join("data").display()))
            .arg(format!("--web.listen-address={addr}"))
            .arg("--log.level=warn")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn();
        let child = match spawned {
            Ok(child) => child,
            Err(e) => {
                let _ = std::fs::remove_dir_all(&dir);
                return if e.kind() == io::ErrorKind::NotFound { Ok(None) } else { Err(e) };
            }
        };
        let mut server = PrometheusServer { child, dir, addr };
        server.wait_ready(Duration::from_secs(60))?;
        Ok(Some(server))
    }

    /// Where its HTTP API listens.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("prometheus.log")).unwrap_or_default()
    }

    fn wait_ready(&mut self, timeout: Duration) -> io::Result<()> {
        let start = Instant::now();
        loop {
            if let Some(status) = self.child.try_wait()? {
                return Err(io::Error::other(format!("prometheus exited ({status}): {}", self.log())));
            }
            if matches!(http_get(self.addr, "/-/ready", None), Ok(r) if r.status == 200) {
                return Ok(());
            }
            if start.elapsed() > timeout {
                return Err(io::Error::other(format!("prometheus not ready after {timeout:?}: {}", self.log())));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Runs an instant PromQL query until it returns at least one series (the
    /// targets are scraped every second), and returns the series.
    pub fn query_until_present(
        &self,
        promql: &str,
        timeout: Duration,
    ) -> Result<Vec<serde_json::Value>, PromQueryError> {
        let path = format!("/api/v1/query?query={}", percent_encode(promql));
        let start = Instant::now();
        let promql = || promql.to_string();
        loop {
            let resp =
                http_get(self.addr, &path, None).map_err(|source| PromQueryError::Get { promql: promql(), source })?;
            let answer: serde_json::Value = match serde_json::from_str(&resp.body) {
                Ok(answer) => answer,
                Err(source) => return Err(PromQueryError::NotJson { promql: promql(), body: resp.body, source }),
            };
            if answer["status"] != "success" {
                return Err(PromQueryError::Failed { promql: promql(), body: resp.body });
            }
            if let Some(series) = answer["data"]["result"].as_array().filter(|r| !r.is_empty()) {
                return Ok(series.clone());
            }
            if start.elapsed() > timeout {
                let targets = http_get(self.addr, "/api/v1/targets", None).map(|r| r.body).unwrap_or_default();
                return Err(PromQueryError::NoSeries { promql: promql(), timeout, targets });
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }
}

impl Drop for PrometheusServer {
    fn drop(&mut self) {
        // Our own child, by pid.
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn percent_encode(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// Locks on the ports this process has claimed ([`claim_port`]), held until it exits.
static CLAIMED_PORTS: Mutex<Vec<File>> = Mutex::new(Vec::new());

/// A loopback port for a child process to listen on, which nothing else will take before
/// the child binds it. A port the kernel hands out for `:0` is in the ephemeral range,
/// where any process's outgoing connection may take it as its local port meanwhile (a
/// test failed that way); this one is below that range, claimed by an exclusive lock on
/// a file named after it in `$TMPDIR/tailor-test-ports` (other tests and harnesses, in
/// this process or another, skip a claimed port) and checked free by binding it once.
/// Where the code under test can bind port 0 and report its address, prefer that.
pub fn claim_port() -> io::Result<u16> {
    let ephemeral_low = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|r| r.split_whitespace().next()?.parse::<u16>().ok())
        .unwrap_or(32768);
    let span = ephemeral_low.saturating_sub(1024).min(16384);
    if span == 0 {
        return Err(io::Error::other(format!("no ports below the ephemeral range ({ephemeral_low})")));
    }
    let base = ephemeral_low - span;
    let dir = std::env::temp_dir().join("tailor-test-ports");
    std::fs::create_dir_all(&dir)?;
    let mut claimed = CLAIMED_PORTS.lock().unwrap_or_else(|p| p.into_inner());
    // Processes start at different places, so they rarely contend for one file.
    let start = (std::process::id() as usize * 7919 + claimed.len()) % span as usize;
    for i in 0..span as usize {
        let port = base + ((start + i) % span as usize) as u16;
        let Ok(file) =
            std::fs::OpenOptions::new().create(true).truncate(false).write(true).open(dir.join(port.to_string()))
        else {
            continue;
        };
        // SAFETY: flock on a descriptor we own; LOCK_NB makes it fail instead of waiting.
        let locked = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } == 0;
        if !locked || TcpListener::bind(("127.0.0.1", port)).is_err() {
            continue;
        }
        claimed.push(file);
        return Ok(port);
    }
    Err(io::Error::other(format!("no free loopback port in {base}..{ephemeral_low}")))
}

/// [`claim_port`] for a test: panics when no port is free.
pub fn free_port() -> u16 {
    claim_port().unwrap_or_else(|e| panic!("claiming a loopback port: {e}"))
}

/// `127.0.0.1:`[`free_port`].
pub fn free_loopback_addr() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], free_port()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn responses_parse_with_length_or_chunks() {
        let plain = b"HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ncontent-length: 3\r\n\r\nabc";
        let r = parse_response(plain).unwrap();
        assert_eq!((r.status, r.content_type.as_deref(), r.body.as_str()), (200, Some("text/plain"), "abc"));
        let chunked = b"HTTP/1.1 404 Not Found\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n";
        let r = parse_response(chunked).unwrap();
        assert_eq!((r.status, r.body.as_str()), (404, "abcde"));
    }

    #[test]
    fn sample_values_match_whole_series_names() {
        let text = "# TYPE a_total counter\na_total 3\na_total_x 9\nb{tier=\"lc\"} 2.5\n";
        assert_eq!(sample_value(text, "a_total"), Some(3.0));
        assert_eq!(sample_value(text, "b{tier=\"lc\"}"), Some(2.5));
        assert_eq!(sample_value(text, "a"), None);
    }

    /// Answers one connection on loopback with `response`, from a thread of its own.
    fn answer_once(response: &'static str) -> (SocketAddr, std::thread::JoinHandle<()>) {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let server = std::thread::spawn(move || {
            let (mut conn, _) = listener.accept().unwrap();
            // The whole request head first, and the connection half-closed and drained after
            // the answer: closing with unread request bytes sends a reset, which the client
            // can see before the answer (a CI run read ConnectionReset here).
            let mut request = Vec::new();
            let mut chunk = [0u8; 1024];
            while !request.windows(4).any(|w| w == b"\r\n\r\n") {
                match conn.read(&mut chunk) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => request.extend_from_slice(&chunk[..n]),
                }
            }
            conn.write_all(response.as_bytes()).unwrap();
            let _ = conn.shutdown(std::net::Shutdown::Write);
            while matches!(conn.read(&mut chunk), Ok(n) if n > 0) {}
        });
        (addr, server)
    }

    #[test]
    fn a_bad_scrape_says_which_check_failed() {
        // A port nothing listens on: bound and dropped.
        let closed = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
        match scrape_metrics(closed) {
            Err(ScrapeError::Get { addr, source }) => {
                assert_eq!(addr, closed);
                assert_eq!(source.kind(), io::ErrorKind::ConnectionRefused);
            }
            other => panic!("expected ScrapeError::Get, got {other:?}"),
        }
        let (addr, server) = answer_once("HTTP/1.1 404 Not Found\r\ncontent-length: 4\r\n\r\nnope");
        let e = scrape_metrics(addr).unwrap_err();
        server.join().unwrap();
        assert!(matches!(&e, ScrapeError::Status { status: 404, body, .. } if body == "nope"), "{e:?}");
        let (addr, server) =
            answer_once("HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 2\r\n\r\n{}");
        let e = scrape_metrics(addr).unwrap_err();
        server.join().unwrap();
        assert!(
            matches!(&e, ScrapeError::ContentType { content_type: Some(t), .. } if t == "application/json"),
            "{e:?}"
        );
        assert!(e.to_string().contains(TEXT_CONTENT_TYPE), "the message names the expected type: {e}");
    }

    #[test]
    fn queries_are_percent_encoded() {
        assert_eq!(percent_encode("up{job=\"tailor\"}"), "up%7Bjob%3D%22tailor%22%7D");
    }
}
