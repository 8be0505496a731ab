//! Shared by the loopback tests: `tailor-fanout` processes started and stopped by pid, a
//! minimal HTTP/1.1 client, the `/metrics` reader and a readiness poll.

#![allow(dead_code)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

pub struct Proc {
    pub child: Child,
    pub addrs: Vec<SocketAddr>,
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub fn start(args: &[&str]) -> Proc {
    let mut child = Command::new(env!("CARGO_BIN_EXE_tailor-fanout"))
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("start tailor-fanout");
    let out = child.stdout.take().expect("stdout piped");
    let mut proc = Proc { child, addrs: Vec::new() };
    for line in BufReader::new(out).lines() {
        let line = line.expect("read child stdout");
        if let Some(a) = line.strip_prefix("listening ") {
            proc.addrs.push(a.parse().expect("listening line has an address"));
        } else if line == "ready" {
            return proc;
        }
    }
    panic!("tailor-fanout {args:?} exited before printing `ready`");
}

pub struct Reply {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: String,
}

impl Reply {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(n, _)| n.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_str())
    }
    pub fn num(&self, name: &str) -> i64 {
        self.header(name).unwrap_or_else(|| panic!("no {name} header in {:?}", self.headers)).parse().unwrap()
    }
}

/// A minimal HTTP/1.1 request on a fresh connection (Connection: close).
pub fn http(addr: SocketAddr, method: &str, path: &str, headers: &[(&str, String)]) -> Reply {
    let mut s = TcpStream::connect(addr).expect("connect");
    let mut req = format!("{method} {path} HTTP/1.1\r\nhost: {addr}\r\ncontent-length: 0\r\nconnection: close\r\n");
    for (n, v) in headers {
        req += &format!("{n}: {v}\r\n");
    }
    req += "\r\n";
    s.write_all(req.as_bytes()).expect("send");
    let mut raw = String::new();
    s.read_to_string(&mut raw).expect("read");
    let (head, body) = raw.split_once("\r\n\r\n").expect("a complete response");
    let mut lines = head.lines();
    let status = lines.next().unwrap().split(' ').nth(1).unwrap().parse().unwrap();
    let headers =
        lines.filter_map(|l| l.split_once(':')).map(|(n, v)| (n.trim().to_string(), v.trim().to_string())).collect();
    Reply { status, headers, body: body.to_string() }
}

/// One value from a handler's or task server's `/metrics`, by the name the tests use.
pub fn stat(addr: SocketAddr, name: &str) -> u64 {
    let series = match name {
        "in_flight_tasks" => "tailor_fanout_tasks_in_flight",
        "central_waiting" => "tailor_fanout_central_waiting",
        "admission_queued" => "tailor_fanout_admission_queued",
        "timeouts" => "tailor_fanout_query_timeouts_total",
        "served" => "tailor_task_server_tasks_served_total",
        "queued" => "tailor_task_server_queue_length",
        other => panic!("no metric for {other}"),
    };
    let r = http(addr, "GET", "/metrics", &[]);
    tailor_telemetry::testing::sample_value(&r.body, series)
        .unwrap_or_else(|| panic!("no {series} in /metrics {:?}", r.body)) as u64
}

/// Polls `cond` until it holds (readiness, not a fixed sleep), failing after 20 s.
pub fn wait_until(what: &str, mut cond: impl FnMut() -> bool) {
    let start = Instant::now();
    while !cond() {
        assert!(start.elapsed() < Duration::from_secs(20), "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

pub fn wall_ns() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_nanos() as u64
}
