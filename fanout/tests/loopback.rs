//! Real processes on loopback: a task-server process and a handler process, talked to over HTTP.
//!
//! Each test starts `tailor-fanout` processes (this crate's binary), waits for
//! their `ready` line, and stops exactly those children by `Child::kill` in a
//! drop guard (their stdin is a pipe from us, so they also exit if the test
//! process dies). Service times are long (tens to hundreds of ms) so orderings
//! hold however busy the machine is; nothing asserts an absolute time.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

struct Proc {
    child: Child,
    addrs: Vec<SocketAddr>,
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start(args: &[&str]) -> Proc {
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

struct Reply {
    status: u16,
    headers: Vec<(String, String)>,
    body: String,
}

impl Reply {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(n, _)| n.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_str())
    }
    fn num(&self, name: &str) -> i64 {
        self.header(name).unwrap_or_else(|| panic!("no {name} header in {:?}", self.headers)).parse().unwrap()
    }
}

/// A minimal HTTP/1.1 request on a fresh connection (Connection: close).
fn http(addr: SocketAddr, method: &str, path: &str, headers: &[(&str, String)]) -> Reply {
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

fn stat(addr: SocketAddr, name: &str) -> u64 {
    let r = http(addr, "GET", "/stats", &[]);
    r.body
        .lines()
        .find_map(|l| l.strip_prefix(&format!("{name} ")))
        .unwrap_or_else(|| panic!("no {name} in stats {:?}", r.body))
        .trim()
        .parse::<f64>()
        .unwrap() as u64
}

/// Polls `cond` until it holds (readiness, not a fixed sleep), failing after 20 s.
fn wait_until(what: &str, mut cond: impl FnMut() -> bool) {
    let start = Instant::now();
    while !cond() {
        assert!(start.elapsed() < Duration::from_secs(20), "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

fn wall_ns() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_nanos() as u64
}

/// A context header value (core's wire codec format, docs/wire-format.md).
fn context(deadline: u64, class: u8) -> String {
    format!("1.g{}.d{deadline}.c{class}.k1.h1", wall_ns())
}

#[test]
fn deadlines_travel_on_the_wire_from_handler_to_task_servers() {
    let servers = start(&["servers", "--count", "2", "--policy", "edf", "--service-fixed-ms", "20"]);
    // Directly: a deadline in the past is reported missed, one far ahead is not.
    let s = servers.addrs[0];
    let late = http(s, "POST", "/task", &[("tailor-context", context(wall_ns() - 1_000_000, 0))]);
    assert_eq!(late.status, 200);
    assert_eq!(late.num("tailor-missed"), 1, "the server read the deadline from the header");
    let early = http(s, "POST", "/task", &[("tailor-context", context(wall_ns() + 10_000_000_000, 0))]);
    assert_eq!(early.num("tailor-missed"), 0);
    // A malformed context is served anyway and counted.
    let bad = http(s, "POST", "/task", &[("tailor-context", "garbage".to_string())]);
    assert_eq!(bad.status, 200);
    assert_eq!(stat(s, "bad_context"), 1);

    // Through the handler process: the budget is SLO − x_99^u(k) of the offline
    // estimate (20 ms fixed), and the servers judge misses by the deadline it sent.
    let list = format!("{},{}", servers.addrs[0], servers.addrs[1]);
    for queuing in ["at-servers", "central"] {
        let handler = start(&[
            "handler",
            "--servers",
            &list,
            "--scheme",
            "tf-edfq",
            "--queuing",
            queuing,
            "--slo-ms",
            "100",
            "--offline-fixed-ms",
            "20",
        ]);
        let h = handler.addrs[0];
        let ok = http(h, "POST", "/query", &[("tailor-class", "0".into()), ("tailor-fanout", "2".into())]);
        assert_eq!(ok.status, 200, "{queuing}: {}", ok.body);
        assert_eq!(ok.num("tailor-budget-ns"), 80_000_000, "{queuing}: 100 ms SLO − 20 ms unloaded tail");
        assert_eq!(ok.num("tailor-tasks-missed"), 0);
        // A per-query SLO below the unloaded tail: the budget is negative, the
        // deadline is t0 itself, and both tasks arrive after it.
        let tight = http(
            h,
            "POST",
            "/query",
            &[("tailor-class", "0".into()), ("tailor-fanout", "2".into()), ("tailor-slo-ms", "5".into())],
        );
        assert_eq!(tight.status, 200);
        assert!(tight.num("tailor-budget-ns") < 0);
        assert_eq!(tight.num("tailor-tasks-missed"), 2, "{queuing}: the deadline reached the queue that judged it");
        // Bad input gets a 400 that names the header.
        let bad = http(h, "POST", "/query", &[("tailor-fanout", "many".into())]);
        assert_eq!(bad.status, 400);
        assert!(bad.body.contains("tailor-fanout"), "{}", bad.body);
        let too_wide = http(h, "POST", "/query", &[("tailor-fanout", "3".into())]);
        assert_eq!(too_wide.status, 400);
    }
}

/// §III.B.2 on real sockets: the handler starts from a wrong offline estimate
/// (5 ms) of servers that take 20 ms; the post-dequeue times it learns from the
/// results replace it, through the pool first and then per server, and the
/// budgets of the next queries follow (SLO − x_99^u(k) of ~20 ms, not of 5).
#[test]
fn learned_post_dequeue_times_replace_a_wrong_offline_estimate() {
    let servers = start(&["servers", "--count", "2", "--policy", "edf", "--service-fixed-ms", "20"]);
    let list = format!("{},{}", servers.addrs[0], servers.addrs[1]);
    #[rustfmt::skip]
    let handler = start(&[
        "handler", "--servers", &list, "--scheme", "tf-edfq", "--slo-ms", "100",
        "--offline-fixed-ms", "5", "--min-samples", "20",
    ]);
    let h = handler.addrs[0];
    let query = || {
        let r = http(h, "POST", "/query", &[("tailor-class", "0".into()), ("tailor-fanout", "2".into())]);
        assert_eq!(r.status, 200, "{}", r.body);
        r.num("tailor-budget-ns")
    };
    assert_eq!(query(), 95_000_000, "before any result: 100 ms SLO − the offline 5 ms");
    // Each query brings one result per server: the pool (both servers) reaches 20
    // samples after 10 queries, each server after 20.
    wait_until("the servers' own learned CDFs", || {
        query();
        stat(h, "servers_on_own_cdf") == 2
    });
    let budget = query();
    assert!(
        (60_000_000..=80_500_000).contains(&budget),
        "budget {budget} ns: 100 ms − a learned tail of at least the 20 ms service"
    );
    assert!(stat(h, "planner_refreshes") > 0);
}

/// Serves a blocker, then queues a task with a late deadline and one with an
/// earlier deadline; returns the served order (served-seq) of (late, early).
fn served_order(policy: &str) -> (i64, i64) {
    let servers = start(&["servers", "--count", "1", "--policy", policy, "--service-fixed-ms", "150"]);
    let s = servers.addrs[0];
    let far = wall_ns() + 60_000_000_000;
    let blocker = std::thread::spawn(move || http(s, "POST", "/task", &[("tailor-context", context(far, 0))]));
    wait_until("the blocker in service", || stat(s, "served") == 1);
    let late_deadline = wall_ns() + 30_000_000_000;
    let late = std::thread::spawn(move || http(s, "POST", "/task", &[("tailor-context", context(late_deadline, 0))]));
    wait_until("the late-deadline task queued", || stat(s, "queued") == 2);
    // Arrives second, but its deadline is older: EDF must serve it first.
    let early_deadline = wall_ns() + 10_000_000_000;
    let early = std::thread::spawn(move || http(s, "POST", "/task", &[("tailor-context", context(early_deadline, 0))]));
    wait_until("both tasks waiting", || stat(s, "queued") == 3);
    blocker.join().unwrap();
    let (late, early) = (late.join().unwrap(), early.join().unwrap());
    (late.num("tailor-served-seq"), early.num("tailor-served-seq"))
}

#[test]
fn a_task_server_serves_the_earliest_deadline_first() {
    let (late, early) = served_order("edf");
    assert_eq!((early, late), (1, 2), "edf: the older deadline goes first although it arrived later");
    // The same arrivals under fifo: arrival order.
    let (late, early) = served_order("fifo");
    assert_eq!((late, early), (1, 2), "fifo: arrival order");
}

/// A TF-EDFQ handler over `list` for the admission tests: SLO 60 ms, unloaded tail 20 ms,
/// R_th 0.2 over a 1 s window, plus `extra` arguments.
/// A misspelt flag or a bad value stops the process with the flag's name, instead of running
/// without the setting.
#[test]
fn an_unknown_valueless_or_invalid_flag_is_an_error_naming_it() {
    for (args, want) in [
        (&["handler", "--servers", "127.0.0.1:1", "--reject-lat", "true"][..], "'--reject-lat'"),
        (&["servers", "--count"][..], "'--count <COUNT>'"),
        (&["servers", "count", "2"][..], "'count'"),
        (&["servers", "--count", "two"][..], "invalid value 'two' for '--count <COUNT>'"),
        (&["servers", "--policy", "lifo"][..], "invalid value 'lifo' for '--policy <POLICY>'"),
        (&["handler", "--servers", "localhost"][..], "invalid value 'localhost' for '--servers <SERVERS>'"),
        (&["handler", "--servers", "127.0.0.1:1", "--scheme", "edf"][..], "for '--scheme <SCHEME>'"),
        (
            &["handler", "--servers", "127.0.0.1:1", "--reject-late", "yes"][..],
            "invalid value 'yes' for '--reject-late",
        ),
        (&["probe", "x.toml", "tf-edfq", "high"][..], "invalid value 'high' for '<LOAD>'"),
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_tailor-fanout")).args(args).output().expect("run tailor-fanout");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(want), "{args:?}: {err}");
    }
}

fn admission_handler(list: &str, extra: &[&str]) -> Proc {
    let mut args = vec![
        "handler",
        "--servers",
        list,
        "--scheme",
        "tf-edfq",
        "--slo-ms",
        "60",
        "--offline-fixed-ms",
        "20",
        "--r-th",
        "0.2",
        "--window-ms",
        "1000",
    ];
    args.extend_from_slice(extra);
    start(&args)
}

#[test]
fn admission_rejects_under_overload_and_recovers_after_it() {
    let servers = start(&["servers", "--count", "2", "--policy", "edf", "--service-fixed-ms", "20"]);
    let list = format!("{},{}", servers.addrs[0], servers.addrs[1]);
    // SLO 60 ms, unloaded tail 20 ms: 40 ms of queueing budget, two tasks' worth.
    let handler = admission_handler(&list, &[]);
    let h = handler.addrs[0];
    let query = move || http(h, "POST", "/query", &[("tailor-fanout", "2".into())]);
    assert_eq!(query().status, 200, "an idle system admits");
    // Overload: 30 queries at once queue 30 tasks per server (600 ms); most miss.
    let burst: Vec<_> = (0..30).map(|_| std::thread::spawn(query)).collect();
    for b in burst {
        assert_eq!(b.join().unwrap().status, 200, "nothing is rejected before a miss is known");
    }
    // The misses are now in the window: new queries are rejected fast, with a reason.
    let t = Instant::now();
    let rejected = query();
    assert_eq!(rejected.status, 503, "{}", rejected.body);
    assert_eq!(rejected.header("tailor-rejected"), Some("admission"));
    assert!(rejected.body.contains("R_th = 0.2"), "{}", rejected.body);
    assert!(t.elapsed() < Duration::from_millis(500), "a rejection sends no task");
    assert!(stat(h, "rejected") >= 1);
    // The overload is over; once the misses leave the window, queries are admitted again.
    wait_until("admission to recover", || query().status == 200);
}

/// With `--predict-misses`, a task whose server already holds more queued work
/// (tasks ahead of it in its queue's order × mean service) than its budget is
/// counted missed when it is dispatched: the controller sees the overload while
/// the burst is still arriving, before any of its deadlines has passed, and
/// rejects the rest of the burst (without prediction nothing in the burst is
/// rejected: the test above). Both queuing modes; recovery after the window.
#[test]
fn predicted_misses_reject_within_the_burst_that_causes_them() {
    let servers = start(&["servers", "--count", "2", "--policy", "edf", "--service-fixed-ms", "20"]);
    let list = format!("{},{}", servers.addrs[0], servers.addrs[1]);
    for queuing in ["at-servers", "central"] {
        // SLO 60 ms, unloaded tail 20 ms: 40 ms of budget; the 4th task queued
        // at a server expects (3 − ½) × 20 ms = 50 ms of wait: a predicted miss.
        let handler = admission_handler(&list, &["--queuing", queuing, "--predict-misses", "true"]);
        let h = handler.addrs[0];
        let query = move || http(h, "POST", "/query", &[("tailor-fanout", "2".into())]);
        assert_eq!(query().status, 200, "{queuing}: an idle system admits");
        let burst: Vec<_> = (0..30).map(|_| std::thread::spawn(query)).collect();
        let replies: Vec<Reply> = burst.into_iter().map(|b| b.join().unwrap()).collect();
        let rejected: Vec<&Reply> = replies.iter().filter(|r| r.status == 503).collect();
        assert!(!rejected.is_empty(), "{queuing}: the burst's predicted misses reject part of it");
        assert!(rejected.iter().all(|r| r.header("tailor-rejected") == Some("admission")));
        assert!(replies.iter().all(|r| r.status == 200 || r.status == 503));
        assert!(stat(h, "rejected") >= rejected.len() as u64);
        wait_until("admission to recover", || query().status == 200);
    }
}

/// `--reject-late`: with a miss ratio that never rejects (R_th = 1), a burst of 30
/// fan-out-2 queries onto a 20 ms server (40 ms of queuing budget: about two tasks' worth)
/// admits the few that fit and turns the rest away at once with the reason, so the
/// admitted ones never meet the 600 ms queue an unchecked burst builds; once the queue
/// has drained, queries are admitted again.
#[test]
fn late_tasks_are_rejected_at_once_while_their_queue_is_long() {
    let servers = start(&["servers", "--count", "2", "--policy", "edf", "--service-fixed-ms", "20"]);
    let list = format!("{},{}", servers.addrs[0], servers.addrs[1]);
    let handler = admission_handler(&list, &["--r-th", "1.0", "--reject-late", "true"]);
    let h = handler.addrs[0];
    let query = move || http(h, "POST", "/query", &[("tailor-fanout", "2".into())]);
    assert_eq!(query().status, 200, "an idle system admits");
    let burst: Vec<_> = (0..30).map(|_| std::thread::spawn(query)).collect();
    let replies: Vec<_> = burst.into_iter().map(|b| b.join().unwrap()).collect();
    let admitted: Vec<_> = replies.iter().filter(|r| r.status == 200).collect();
    let rejected: Vec<_> = replies.iter().filter(|r| r.status == 503).collect();
    assert_eq!(admitted.len() + rejected.len(), 30, "every query answered 200 or 503");
    assert!(!admitted.is_empty(), "the queries that fit the budget are admitted");
    assert!(rejected.len() >= 15, "{} of 30 rejected: about two tasks' worth fit", rejected.len());
    for r in &rejected {
        assert_eq!(r.header("tailor-rejected"), Some("admission"));
        assert!(r.body.contains("queue ahead of this query's task"), "{}", r.body);
    }
    let worst_ms =
        admitted.iter().map(|r| r.header("tailor-latency-ns").unwrap().parse::<u64>().unwrap()).max().unwrap()
            / 1_000_000;
    assert!(worst_ms < 300, "the admitted queries met a short queue: the slowest took {worst_ms} ms");
    assert_eq!(stat(h, "rejected_late"), rejected.len() as u64);
    assert_eq!(stat(h, "rejected"), rejected.len() as u64, "the ratio (R_th = 1) rejected nothing");
    wait_until("admission to recover", || query().status == 200);
}

/// One slow server (20 ms a task) and one fast (1 ms). A burst of fan-out-2 queries
/// overloads only the slow one. Afterwards fan-out-1 queries that land on the fast server
/// are still admitted with `--per-server-admission` (its own miss ratio is 0), while the
/// handler-wide ratio (about half the burst's tasks missed) rejects every query.
#[test]
fn per_server_admission_rejects_only_queries_that_touch_the_overloaded_server() {
    let slow = start(&["servers", "--count", "1", "--policy", "edf", "--service-fixed-ms", "20"]);
    let fast = start(&["servers", "--count", "1", "--policy", "edf", "--service-fixed-ms", "1"]);
    let list = format!("{},{}", slow.addrs[0], fast.addrs[0]);
    let mut admitted_after = Vec::new();
    for per_server in ["true", "false"] {
        let handler = admission_handler(&list, &["--per-server-admission", per_server]);
        let h = handler.addrs[0];
        let query = move |k: u32| http(h, "POST", "/query", &[("tailor-fanout", k.to_string())]);
        assert_eq!(query(2).status, 200, "per-server {per_server}: an idle system admits");
        let burst: Vec<_> = (0..30).map(|_| std::thread::spawn(move || query(2))).collect();
        for b in burst {
            assert_eq!(b.join().unwrap().status, 200, "nothing is rejected before a miss is known");
        }
        let both = query(2);
        assert_eq!(both.status, 503, "per-server {per_server}: a query on the slow server is rejected");
        let statuses: Vec<u16> = (0..20).map(|_| query(1).status).collect();
        assert!(statuses.iter().all(|&s| s == 200 || s == 503), "{statuses:?}");
        admitted_after.push(statuses.iter().filter(|&&s| s == 200).count());
        wait_until("admission to recover", || query(2).status == 200);
    }
    // 20 picks between two servers: all on one of them has probability 2 × 2^-20.
    assert!(
        admitted_after[0] > 0 && admitted_after[0] < 20,
        "per server: the queries on the fast server pass, those on the slow one do not: {admitted_after:?}"
    );
    assert_eq!(admitted_after[1], 0, "handler-wide: the average ratio rejects every query: {admitted_after:?}");
}
