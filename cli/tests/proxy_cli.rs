//! The `tailor` binary as edge and sidecar, on loopback, in front of a plain Python
//! service (`tests/proxy/upstream.py`, standard library only): stamping, stripping,
//! signing, egress, ordering under contention, shedding, reload, drain and /metrics.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

mod common;
use common::proxy_proc::{free_port, metric, proxy, proxy_with_env, tmpdir, Proc};

fn now_ns() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_nanos() as u64
}

fn python() -> Option<String> {
    ["python3", "python"]
        .into_iter()
        .find(|p| Command::new(p).arg("--version").output().is_ok_and(|o| o.status.success()))
        .map(String::from)
}

/// Starts the Python upstream; returns it and its port (from its `READY <port>` line).
fn upstream() -> (Proc, u16) {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/proxy/upstream.py");
    let py = python().expect("python3 is needed for the proxy tests");
    let mut child = Command::new(py).arg(script).stdout(Stdio::piped()).spawn().expect("start upstream.py");
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
    let port = line.trim().strip_prefix("READY ").expect("READY line").parse().unwrap();
    (Proc(child), port)
}

struct Resp {
    status: u16,
    headers: Vec<(String, String)>,
    body: String,
}

impl Resp {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(n, _)| n.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_str())
    }
}

fn request_on(stream: &mut TcpStream, path: &str, headers: &[(&str, &str)], close: bool) -> std::io::Result<Resp> {
    let mut req = format!("GET {path} HTTP/1.1\r\nhost: 127.0.0.1\r\n");
    for (n, v) in headers {
        req.push_str(&format!("{n}: {v}\r\n"));
    }
    if close {
        req.push_str("connection: close\r\n");
    }
    req.push_str("\r\n");
    stream.write_all(req.as_bytes())?;
    let mut reader = BufReader::new(stream.try_clone()?);
    let mut line = String::new();
    reader.read_line(&mut line)?;
    let status = line.split_whitespace().nth(1).and_then(|s| s.parse().ok()).ok_or(std::io::ErrorKind::InvalidData)?;
    let mut headers = Vec::new();
    let mut length = 0;
    loop {
        line.clear();
        reader.read_line(&mut line)?;
        let l = line.trim_end();
        if l.is_empty() {
            break;
        }
        let (n, v) = l.split_once(':').unwrap();
        if n.eq_ignore_ascii_case("content-length") {
            length = v.trim().parse().unwrap();
        }
        headers.push((n.to_string(), v.trim().to_string()));
    }
    let mut body = vec![0; length];
    reader.read_exact(&mut body)?;
    Ok(Resp { status, headers, body: String::from_utf8_lossy(&body).into() })
}

fn get(port: u16, path: &str, headers: &[(&str, &str)]) -> std::io::Result<Resp> {
    let mut s = TcpStream::connect(SocketAddr::from(([127, 0, 0, 1], port)))?;
    s.set_read_timeout(Some(Duration::from_secs(10)))?;
    request_on(&mut s, path, headers, true)
}

/// Waits until `cond` holds, for at most 10 s.
fn wait_for(what: &str, cond: impl FnMut() -> bool) {
    common::proxy_proc::wait_for(what, Duration::from_secs(10), cond);
}

/// The field `key` (e.g. `g`) of an encoded context.
fn field(ctx: &str, key: char) -> Option<String> {
    ctx.split('.').skip(1).find(|f| f.starts_with(key)).map(|f| f[1..].to_string())
}

fn echo_header(body: &str, name: &str) -> Option<String> {
    // The upstream's JSON is flat `{"name": "value", ...}`; no JSON crate needed.
    let key = format!("\"{name}\": \"");
    let start = body.find(&key)? + key.len();
    Some(body[start..start + body[start..].find('"')?].to_string())
}

fn sidecar_config(dir: &Path, name: &str, listen: u16, upstream: u16, admin: u16, extra: &str) -> PathBuf {
    let path = dir.join(format!("{name}.toml"));
    std::fs::write(
        &path,
        format!("listen = \"127.0.0.1:{listen}\"\nupstream = \"127.0.0.1:{upstream}\"\nadmin = \"127.0.0.1:{admin}\"\n{extra}\n"),
    )
    .unwrap();
    path
}

#[test]
fn sidecar_stamps_missing_contexts_and_clamps_forged_ones() {
    let tmp = tmpdir("stamp");
    let (_up, up) = upstream();
    let (listen, admin) = (free_port(), free_port());
    let cfg = sidecar_config(&tmp.0, "s", listen, up, admin, "c = 4");
    let _s = proxy("sidecar", &cfg, admin);

    let before = now_ns();
    let r = get(listen, "/echo", &[]).unwrap();
    assert_eq!(r.status, 200);
    let ctx = echo_header(&r.body, "tailor-context").expect("the service sees a stamped context");
    let gat: u64 = field(&ctx, 'g').unwrap().parse().unwrap();
    assert!(gat >= before && gat <= now_ns(), "stamped at arrival: {ctx}");
    assert!(echo_header(&r.body, "baggage").unwrap().contains(&format!("tailor={ctx}")));
    assert_eq!(metric(admin, "tailor_proxy_context_stamped_total"), 1.0);

    // A GAT an hour old gains at most max_age (10 s).
    let old = format!("1.g{}.c0.k1.h1", now_ns() - 3_600_000_000_000);
    let r = get(listen, "/echo", &[("tailor-context", &old)]).unwrap();
    let gat: u64 = field(&echo_header(&r.body, "tailor-context").unwrap(), 'g').unwrap().parse().unwrap();
    assert!(now_ns() - gat < 11_000_000_000, "clamped to max_age");
    assert_eq!(metric(admin, "tailor_proxy_context_clamped_total{field=\"gat_stale\"}"), 1.0);
    let _ = get(listen, "/echo", &[("tailor-context", "not-a-context")]).unwrap();
    assert_eq!(metric(admin, "tailor_proxy_context_errors_total{kind=\"unsupported_version\"}"), 0.0);
    assert_eq!(metric(admin, "tailor_proxy_context_errors_total{kind=\"malformed\"}"), 1.0);
    assert_eq!(metric(admin, "tailor_proxy_upstream_latency_seconds_count"), 3.0);
}

#[test]
fn edge_strips_stamps_and_signs_sidecar_verifies_egress_carries_it_on() {
    let tmp = tmpdir("edge");
    std::fs::write(tmp.0.join("mac.key"), "0123456789abcdef0123456789abcdef\n").unwrap();
    let mac = "[mac]\nkey_id = \"k1\"\nsecret_file = \"mac.key\"\n";
    let (_a, svc_a) = upstream();
    let (_b, svc_b) = upstream();
    let (side_a, admin_a, egress_a) = (free_port(), free_port(), free_port());
    let (side_b, admin_b) = (free_port(), free_port());
    let (edge, edge_admin, dead) = (free_port(), free_port(), free_port());
    let egress = format!("[[egress]]\nlisten = \"127.0.0.1:{egress_a}\"\nupstream = \"127.0.0.1:{side_b}\"\n");
    let cfg_a = sidecar_config(&tmp.0, "a", side_a, svc_a, admin_a, &format!("c = 2\n{mac}\n{egress}"));
    let cfg_b = sidecar_config(&tmp.0, "b", side_b, svc_b, admin_b, &format!("c = 2\n{mac}"));
    let edge_cfg = tmp.0.join("edge.toml");
    std::fs::write(
        &edge_cfg,
        format!(
            "listen = \"127.0.0.1:{edge}\"\nadmin = \"127.0.0.1:{edge_admin}\"\nhealth_interval_ms = 50\nbalance = \"p2c\"\n{mac}\n\
             [[routes]]\nname = \"gold\"\npath_prefix = \"/\"\nheader = {{ name = \"x-tier\", value = \"gold\" }}\nclass = 0\nslo_ms = 250\nupstreams = [\"127.0.0.1:{side_a}\", \"127.0.0.1:{dead}\"]\n\
             [[routes]]\nname = \"rest\"\nclass = 3\nupstreams = [\"127.0.0.1:{side_a}\"]\n"
        ),
    )
    .unwrap();
    let _sa = proxy("sidecar", &cfg_a, admin_a);
    let _sb = proxy("sidecar", &cfg_b, admin_b);
    let _e = proxy("edge", &edge_cfg, edge_admin);

    // The route with a dead upstream: the health check takes it out.
    wait_for("the dead upstream to be marked unhealthy", || {
        get(edge, "/echo", &[("x-tier", "gold")]).is_ok_and(|r| r.status == 200)
    });
    for _ in 0..20 {
        assert_eq!(get(edge, "/echo", &[("x-tier", "gold")]).unwrap().status, 200, "only healthy upstreams are picked");
    }

    // A client forges an old GAT in both carriers; the edge replaces it.
    let forged = "1.g1.c0.k1.h0";
    let before = now_ns();
    let r = get(
        edge,
        "/echo",
        &[("x-tier", "gold"), ("tailor-context", forged), ("baggage", &format!("user=7,tailor={forged}"))],
    )
    .unwrap();
    assert_eq!(r.status, 200);
    assert!(r.header("tailor-context").is_none(), "the edge strips Tailor headers from responses");
    let ctx = echo_header(&r.body, "tailor-context").unwrap();
    let gat: u64 = field(&ctx, 'g').unwrap().parse().unwrap();
    assert!(gat >= before, "the forged GAT never gets through: {ctx}");
    let deadline: u64 = field(&ctx, 'd').unwrap().parse().unwrap();
    assert_eq!(deadline - gat, 250_000_000, "deadline from the route's slo_ms");
    assert_eq!(field(&ctx, 'c').as_deref(), Some("0"));
    // The edge signed it: sidecar A (which requires a MAC) accepted it as carried. The
    // service itself sees the context unsigned (it is inside the trust boundary).
    assert_eq!(field(&ctx, 'i'), None);
    assert!(echo_header(&r.body, "baggage").unwrap().starts_with("user=7,tailor="), "other baggage is kept");
    assert_eq!(metric(admin_a, "tailor_proxy_mac_failures_total"), 0.0);

    // The other route: class 3, no deadline.
    let r = get(edge, "/echo", &[]).unwrap();
    let ctx = echo_header(&r.body, "tailor-context").unwrap();
    assert_eq!((field(&ctx, 'c').as_deref(), field(&ctx, 'd')), (Some("3"), None));

    // Bypassing the edge with an unsigned context: counted, re-stamped.
    let r = get(side_a, "/echo", &[("tailor-context", forged)]).unwrap();
    let gat: u64 = field(&echo_header(&r.body, "tailor-context").unwrap(), 'g').unwrap().parse().unwrap();
    assert!(gat >= before);
    assert_eq!(metric(admin_a, "tailor_proxy_mac_failures_total"), 1.0);

    // Service A calls B through its egress forwarding only `baggage`: B's sidecar
    // verifies the re-signed context and B sees the same GAT, one hop further.
    let r = get(edge, &format!("/call?to={side_b}"), &[("x-tier", "gold")]).unwrap();
    assert_eq!(r.status, 200);
    let direct = echo_header(&r.body, "tailor-context");
    // /call goes to B's sidecar directly (not through egress): B re-stamps (no MAC).
    assert!(direct.is_some());
    let r = get(edge, &format!("/call?to={egress_a}"), &[("x-tier", "gold")]).unwrap();
    assert_eq!(r.status, 200, "{}", r.body);
    let at_b = echo_header(&r.body, "tailor-context").unwrap();
    assert_eq!(field(&at_b, 'h').as_deref(), Some("1"), "one hop further: {at_b}");
    assert_eq!(
        field(&at_b, 'd').map(|d| d.parse::<u64>().unwrap() - field(&at_b, 'g').unwrap().parse::<u64>().unwrap()),
        Some(250_000_000)
    );
    assert_eq!(metric(admin_b, "tailor_proxy_context_accepted_total"), 2.0);
    assert_eq!(metric(admin_b, "tailor_proxy_mac_failures_total"), 1.0, "only the direct, unsigned call failed");
}

/// Sends `GET /work?ms=ms` with `x-id` (and a context with `gat`, if given) on a thread.
fn work(port: u16, id: &'static str, ms: u64, gat: Option<u64>) -> std::thread::JoinHandle<Resp> {
    std::thread::spawn(move || {
        let ctx = gat.map(|g| format!("1.g{g}.c0.k1.h1"));
        let mut headers = vec![("x-id", id)];
        if let Some(c) = &ctx {
            headers.push(("tailor-context", c.as_str()));
        }
        get(port, &format!("/work?ms={ms}"), &headers).unwrap()
    })
}

fn start_order(order: &str) -> String {
    let tmp = tmpdir(&format!("order-{order}"));
    let (_up, up) = upstream();
    let (listen, admin) = (free_port(), free_port());
    let cfg = sidecar_config(&tmp.0, "s", listen, up, admin, &format!("c = 1\norder = \"{order}\""));
    let _s = proxy("sidecar", &cfg, admin);
    let now = now_ns();
    let blocker = work(listen, "blocker", 300, None);
    wait_for("the blocker to be inside", || metric(admin, "tailor_proxy_in_flight") == 1.0);
    let young = work(listen, "young", 1, Some(now - 1_000_000_000));
    wait_for("young to queue", || metric(admin, "tailor_proxy_queue_length") == 1.0);
    let old = work(listen, "old", 1, Some(now - 5_000_000_000));
    wait_for("old to queue", || metric(admin, "tailor_proxy_queue_length") == 2.0);
    for h in [blocker, young, old] {
        assert_eq!(h.join().unwrap().status, 200);
    }
    assert!(metric(admin, "tailor_proxy_queue_wait_seconds_count") >= 3.0);
    get(up, "/log", &[]).unwrap().body
}

#[test]
fn with_one_slot_the_older_request_is_admitted_first() {
    assert_eq!(start_order("orf"), r#"["blocker", "old", "young"]"#);
    assert_eq!(start_order("fifo"), r#"["blocker", "young", "old"]"#, "fifo: arrival order");
}

#[test]
fn sheds_expired_unmeetable_and_overflowing_requests_with_a_reason() {
    let tmp = tmpdir("shed");
    let (_up, up) = upstream();
    let (listen, admin) = (free_port(), free_port());
    let cfg = sidecar_config(&tmp.0, "s", listen, up, admin, "c = 1\nmax_queue = 1");
    let _s = proxy("sidecar", &cfg, admin);

    let now = now_ns();
    let expired = format!("1.g{}.d{}.c0.k1.h1", now - 2_000_000, now - 1_000_000);
    let r = get(listen, "/echo", &[("tailor-context", &expired)]).unwrap();
    assert_eq!((r.status, r.header("tailor-shed")), (503, Some("deadline_expired")));
    let r = get(listen, "/echo", &[("tailor-context", &expired), ("content-type", "application/grpc")]).unwrap();
    assert_eq!((r.status, r.header("grpc-status")), (200, Some("4")), "gRPC: trailers-only DEADLINE_EXCEEDED");

    let blocker = work(listen, "blocker", 600, None);
    wait_for("the blocker to be inside", || metric(admin, "tailor_proxy_in_flight") == 1.0);
    // Waits, and is shed when its deadline passes in the queue.
    let soon = std::thread::spawn(move || {
        let n = now_ns();
        let ctx = format!("1.g{n}.d{}.c0.k1.h1", n + 100_000_000);
        get(listen, "/echo", &[("tailor-context", &ctx)]).unwrap()
    });
    wait_for("it to queue", || metric(admin, "tailor_proxy_queue_length") == 1.0);
    let r = get(listen, "/echo", &[("content-type", "application/grpc")]).unwrap();
    assert_eq!((r.header("tailor-shed"), r.header("grpc-status")), (Some("queue_full"), Some("8")));
    let r = soon.join().unwrap();
    assert_eq!((r.status, r.header("tailor-shed")), (503, Some("deadline_expired")));
    assert_eq!(blocker.join().unwrap().status, 200);
    assert_eq!(metric(admin, "tailor_proxy_shed_total{reason=\"deadline_expired\"}"), 3.0);
    assert_eq!(metric(admin, "tailor_proxy_shed_total{reason=\"queue_full\"}"), 1.0);
    assert_eq!(metric(admin, "tailor_proxy_queue_length"), 0.0);
}

#[test]
fn reload_keeps_connections_and_drain_finishes_requests_in_progress() {
    reload_and_drain("reload", &[]);
}

/// One worker thread runs tokio's current-thread scheduler (`cli/src/proxy.rs`): the same
/// relaying, reload and drain on the one thread.
#[test]
fn with_one_worker_thread_the_sidecar_relays_reloads_and_drains_alike() {
    reload_and_drain("one-thread", &[("TOKIO_WORKER_THREADS", "1")]);
}

fn reload_and_drain(name: &str, env: &[(&str, &str)]) {
    let tmp = tmpdir(name);
    let (_up, up) = upstream();
    let (listen, admin) = (free_port(), free_port());
    let cfg = sidecar_config(&tmp.0, "s", listen, up, admin, "c = 1");
    let mut s = proxy_with_env("sidecar", &cfg, admin, env);
    assert_eq!(metric(admin, "tailor_proxy_concurrency_limit"), 1.0);

    let mut conn = TcpStream::connect(("127.0.0.1", listen)).unwrap();
    assert_eq!(request_on(&mut conn, "/echo", &[], false).unwrap().status, 200);
    sidecar_config(&tmp.0, "s", listen, up, admin, "c = 3");
    s.signal("-HUP");
    wait_for("the new limit", || metric(admin, "tailor_proxy_concurrency_limit") == 3.0);
    assert_eq!(request_on(&mut conn, "/echo", &[], false).unwrap().status, 200, "same connection after reload");
    // A broken config is reported and the running one kept.
    std::fs::write(&cfg, "listen = 1").unwrap();
    s.signal("-HUP");
    assert_eq!(request_on(&mut conn, "/echo", &[], false).unwrap().status, 200);
    assert_eq!(metric(admin, "tailor_proxy_concurrency_limit"), 3.0);
    drop(conn);

    let slow = work(listen, "slow", 400, None);
    wait_for("the slow request to be inside", || metric(admin, "tailor_proxy_in_flight") == 1.0);
    s.signal("-TERM");
    assert_eq!(slow.join().unwrap().status, 200, "a request in progress finishes during the drain");
    let start = Instant::now();
    let status = loop {
        if let Some(st) = s.0.try_wait().unwrap() {
            break st;
        }
        assert!(start.elapsed() < Duration::from_secs(10), "the sidecar did not exit after draining");
        std::thread::sleep(Duration::from_millis(10));
    };
    assert!(status.success(), "{status}");
    assert!(TcpStream::connect(("127.0.0.1", listen)).is_err(), "no longer accepting");
}

#[test]
fn example_configs_print_and_a_bad_config_names_file_and_field() {
    for which in ["edge", "sidecar"] {
        let out = Command::new(env!("CARGO_BIN_EXE_tailor")).args(["proxy", "example", which]).output().unwrap();
        assert!(out.status.success());
        assert!(String::from_utf8(out.stdout).unwrap().contains("listen ="));
    }
    let tmp = tmpdir("bad");
    let cfg = tmp.0.join("bad.toml");
    std::fs::write(&cfg, "listen = \"127.0.0.1:1\"\nupstream = \"127.0.0.1:2\"\nconcurrency = 4\n").unwrap();
    let out =
        Command::new(env!("CARGO_BIN_EXE_tailor")).args(["proxy", "sidecar", "--config"]).arg(&cfg).output().unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(err.contains("bad.toml") && err.contains("concurrency"), "{err}");
}
