//! Real processes on loopback: a task-server process and a handler process, talked to over HTTP.
//!
//! Each test starts `tailor-fanout` processes (this crate's binary), waits for
//! their `ready` line, and stops exactly those children by `Child::kill` in a
//! drop guard (their stdin is a pipe from us, so they also exit if the test
//! process dies). Service times are long (tens to hundreds of ms) so orderings
//! hold however busy the machine is; nothing asserts an absolute time.

use std::net::SocketAddr;
use std::process::Command;
use std::time::{Duration, Instant};

mod common;

use common::*;
use tailor_telemetry::testing::sample_value;

fn metric(addr: SocketAddr, series: &str) -> u64 {
    let r = http(addr, "GET", "/metrics", &[]);
    assert_eq!(r.status, 200, "GET /metrics: {}", r.body);
    sample_value(&r.body, series).unwrap_or_else(|| panic!("no {series} in /metrics:\n{}", r.body)) as u64
}

/// Queries the handler rejected, for either reason.
fn rejected_total(h: SocketAddr) -> u64 {
    REJECTED_REASONS.iter().map(|r| metric(h, &format!("tailor_fanout_queries_rejected_total{{reason=\"{r}\"}}"))).sum()
}

const REJECTED_REASONS: [&str; 2] = ["admission", "late"];

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
    assert_eq!(metric(s, "tailor_task_server_bad_context_total"), 1);

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
        metric(h, "tailor_fanout_servers_by_cdf{source=\"own\"}") == 2
    });
    let budget = query();
    assert!(
        (60_000_000..=80_500_000).contains(&budget),
        "budget {budget} ns: 100 ms − a learned tail of at least the 20 ms service"
    );
    assert!(metric(h, "tailor_fanout_planner_refreshes_total") > 0);
}

/// Serves a blocker, then queues a task with a late deadline and one with an
/// earlier deadline; returns the served order (served-seq) of (late, early).
fn served_order(policy: &str) -> (i64, i64) {
    let servers = start(&["servers", "--count", "1", "--policy", policy, "--service-fixed-ms", "150"]);
    let s = servers.addrs[0];
    let far = wall_ns() + 60_000_000_000;
    let blocker = std::thread::spawn(move || http(s, "POST", "/task", &[("tailor-context", context(far, 0))]));
    wait_until("the blocker in service", || metric(s, "tailor_task_server_tasks_served_total") == 1);
    let late_deadline = wall_ns() + 30_000_000_000;
    let late = std::thread::spawn(move || http(s, "POST", "/task", &[("tailor-context", context(late_deadline, 0))]));
    wait_until("the late-deadline task queued", || metric(s, "tailor_task_server_queue_length") == 2);
    // Arrives second, but its deadline is older: EDF must serve it first.
    let early_deadline = wall_ns() + 10_000_000_000;
    let early = std::thread::spawn(move || http(s, "POST", "/task", &[("tailor-context", context(early_deadline, 0))]));
    wait_until("both tasks waiting", || metric(s, "tailor_task_server_queue_length") == 3);
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
        (
            &["handler", "--servers", "127.0.0.1:1", "--r-th", "0.1", "--admission-window", "days"][..],
            "invalid value 'days' for '--admission-window",
        ),
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

/// Two 20 ms EDF servers behind [`admission_handler`] with `extra` flags (SLO 60 ms, unloaded
/// tail 20 ms: 40 ms of queuing budget, about two tasks' worth); checks that an idle system
/// admits. Returns both processes (alive while held) and a fan-out-2 query.
fn two_servers_behind(extra: &[&str]) -> (Proc, Proc, impl Fn() -> Reply + Copy + Send + 'static) {
    let servers = start(&["servers", "--count", "2", "--policy", "edf", "--service-fixed-ms", "20"]);
    let list = format!("{},{}", servers.addrs[0], servers.addrs[1]);
    let handler = admission_handler(&list, extra);
    let h = handler.addrs[0];
    let query = move || http(h, "POST", "/query", &[("tailor-fanout", "2".into())]);
    assert_eq!(query().status, 200, "an idle system admits");
    (servers, handler, query)
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
    assert!(rejected_total(h) >= 1);
    // The overload is over; once the misses leave the window, queries are admitted again.
    wait_until("admission to recover", || query().status == 200);
}

/// `--admission-window tasks`: the ratio over the last 20 task outcomes, no clock. After
/// the burst's misses the handler rejects; each rejected query (2 tasks) moves the window
/// by 2, so within 10 rejections the misses have left and queries are admitted again, with
/// no time window to wait for (a window that only refused queries do not move would stay
/// full of misses for good).
#[test]
fn a_count_window_rejects_after_misses_and_recovers_by_the_rejected_queries() {
    let (_servers, handler, query) = two_servers_behind(&["--admission-window", "tasks", "--window-tasks", "20"]);
    let h = handler.addrs[0];
    let burst: Vec<_> = (0..30).map(|_| std::thread::spawn(query)).collect();
    for b in burst {
        assert_eq!(b.join().unwrap().status, 200, "nothing is rejected before a miss is known");
    }
    let first = query();
    assert_eq!(first.status, 503, "the last 20 outcomes are mostly misses: {}", first.body);
    assert_eq!(first.header("tailor-rejected"), Some("admission"));
    let mut rejected = 1;
    while query().status == 503 {
        rejected += 1;
        assert!(rejected <= 10, "20 slots are clear after 10 rejected queries of 2 tasks");
    }
    assert!(rejected_total(h) >= rejected);
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
        assert!(rejected_total(h) >= rejected.len() as u64);
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
    let (_servers, handler, query) = two_servers_behind(&["--r-th", "1.0", "--reject-late", "true"]);
    let h = handler.addrs[0];
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
    assert_eq!(metric(h, "tailor_fanout_queries_rejected_total{reason=\"late\"}"), rejected.len() as u64);
    assert_eq!(rejected_total(h), rejected.len() as u64, "the ratio (R_th = 1) rejected nothing");
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

/// Every endpoint the two daemons serve, scraped from the real processes: `/metrics` is
/// valid Prometheus text (promtool) with the counts of what was sent, `/healthz` and
/// `/readyz` answer, `/stats` is gone; and a real Prometheus server scrapes both.
#[test]
fn metrics_endpoints_pass_promtool_and_a_prometheus_server_scrapes_them() {
    use tailor_telemetry::testing::{scrape_metrics, PrometheusServer, Promtool};
    let servers = start(&["servers", "--count", "1", "--policy", "edf", "--service-fixed-ms", "5"]);
    let s = servers.addrs[0];
    let list = s.to_string();
    let handler =
        start(&["handler", "--servers", &list, "--scheme", "tf-edfq", "--slo-ms", "100", "--offline-fixed-ms", "5"]);
    let h = handler.addrs[0];
    for _ in 0..3 {
        let ok = http(h, "POST", "/query", &[("tailor-class", "0".into()), ("tailor-fanout", "1".into())]);
        assert_eq!(ok.status, 200, "{}", ok.body);
    }
    for (addr, series) in [(h, "tailor_fanout_queries_admitted_total"), (s, "tailor_task_server_tasks_served_total")] {
        let scrape = scrape_metrics(addr).unwrap();
        match &scrape.promtool {
            Promtool::Clean => {}
            Promtool::Absent => eprintln!("skipping promtool: not installed (apt-get install prometheus)"),
            Promtool::Problems(p) => panic!("promtool check metrics on {addr}: {p}\n{}", scrape.body),
        }
        assert_eq!(sample_value(&scrape.body, series), Some(3.0), "{}", scrape.body);
        assert_eq!(http(addr, "GET", "/healthz", &[]).status, 200);
        assert_eq!(http(addr, "GET", "/readyz", &[]).status, 200);
        assert_eq!(http(addr, "GET", "/stats", &[]).status, 404);
    }
    assert_eq!(metric(h, "tailor_fanout_query_latency_seconds_count"), 3);

    let Some(prometheus) = PrometheusServer::start(&[h, s]).unwrap() else {
        eprintln!("skipping the Prometheus server check: prometheus is not installed (apt-get install prometheus)");
        return;
    };
    for series in ["tailor_fanout_queries_admitted_total", "tailor_task_server_tasks_served_total"] {
        let found = prometheus.query_until_present(series, Duration::from_secs(30)).unwrap();
        assert_eq!(found[0]["value"][1], "3", "{series}: {found:?}");
    }
}
