//! Common random numbers on real sockets: a seeded query is the same input
//! under every queue policy (in-process handlers and task servers, real
//! loopback HTTP, the precise timer thread).
//!
//! Checks that (1) a task server draws a task's service time from the
//! `tailor-work-seed` it is sent, whatever its policy and its own stream, and
//! refuses a malformed seed with the header's name; (2) two handlers of
//! different schemes, each over its own servers of a different queue policy,
//! give a seeded query the same servers and the same work, while unseeded
//! queries draw from each side's own streams. Nothing asserts a time.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;
use std::time::Duration;

use tailor_core::dist::Dist;
use tailor_core::policy::PolicySpec;
use tailor_core::tailguard::SloClass;
use tailor_fanout::handler::QuerySpec;
use tailor_fanout::{Handler, HandlerConfig, PreciseTimer, Queuing, Scheme, TaskServer, TaskServerConfig};

const SERVERS: usize = 6;
const MEAN_SERVICE_NS: f64 = 2e6;

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("tokio runtime")
}

/// `SERVERS` task servers queuing by `policy`, each with its own draw stream (`own_seed` + i).
async fn servers(timer: &Arc<PreciseTimer>, policy: PolicySpec, own_seed: u64) -> Vec<TaskServer> {
    let mut v = Vec::new();
    for i in 0..SERVERS {
        let cfg = TaskServerConfig {
            policy: policy.clone(),
            service: Dist::exp_ns(MEAN_SERVICE_NS),
            scale: 1.0,
            max_queue: 1000,
            seed: own_seed + i as u64,
        };
        v.push(TaskServer::spawn(cfg, timer.clone(), "127.0.0.1:0".parse().unwrap()).await.expect("task server"));
    }
    v
}

fn handler(scheme: Scheme, servers: &[TaskServer], seed: u64) -> Arc<Handler> {
    Handler::new(HandlerConfig {
        scheme,
        queuing: Queuing::AtServers,
        classes: vec![SloClass { p: 0.99, slo_ns: 1_000_000_000 }],
        servers: servers.iter().map(|s| s.addr).collect(),
        server_weights: Vec::new(),
        class_server_weights: Vec::new(),
        offline: Arc::new(Dist::exp_ns(MEAN_SERVICE_NS)),
        offline_per_server: Vec::new(),
        admission: None,
        refresh: Duration::from_millis(250),
        min_samples: f64::INFINITY,
        seed,
        query_timeout_slos: None,
    })
    .expect("handler")
}

/// POST /task with the given extra header; (status, tailor-service-ns or the body).
fn post_task(addr: SocketAddr, header: Option<(&str, &str)>) -> (u16, String) {
    let mut s = TcpStream::connect(addr).expect("connect");
    let mut req = format!("POST /task HTTP/1.1\r\nhost: {addr}\r\ncontent-length: 0\r\nconnection: close\r\n");
    if let Some((n, v)) = header {
        req += &format!("{n}: {v}\r\n");
    }
    req += "\r\n";
    s.write_all(req.as_bytes()).expect("send");
    let mut raw = String::new();
    s.read_to_string(&mut raw).expect("read");
    let status = raw.split(' ').nth(1).unwrap().parse().unwrap();
    let service = raw
        .lines()
        .find_map(|l| l.strip_prefix("tailor-service-ns: "))
        .map(|v| v.trim().to_string())
        .unwrap_or_else(|| raw.split_once("\r\n\r\n").map(|(_, b)| b.to_string()).unwrap_or_default());
    (status, service)
}

#[test]
fn a_task_server_draws_the_work_from_the_seed_it_is_sent() {
    let rt = runtime();
    let (edf, fifo) = rt.block_on(async {
        let timer = Arc::new(PreciseTimer::start().expect("timer thread"));
        (servers(&timer, PolicySpec::Edf, 100).await, servers(&timer, PolicySpec::Fifo, 200).await)
    });
    let (a, b) = (edf[0].addr, fifo[0].addr);
    let seeded = |addr, seed: &str| {
        let (status, service) = post_task(addr, Some(("tailor-work-seed", seed)));
        assert_eq!(status, 200, "{service}");
        service.parse::<u64>().expect("a service time")
    };
    let draws: Vec<u64> = (0..20).map(|q| seeded(a, &q.to_string())).collect();
    for (q, &want) in draws.iter().enumerate() {
        // Another server, another policy, another own stream: the same work.
        assert_eq!(seeded(b, &q.to_string()), want, "work seed {q}");
    }
    // Seeds are draws, not one value: 20 exponential draws are not all equal.
    assert!(draws.iter().any(|&d| d != draws[0]), "{draws:?}");
    // Without a seed each server draws from its own stream.
    let own_a: Vec<String> = (0..5).map(|_| post_task(a, None).1).collect();
    let own_b: Vec<String> = (0..5).map(|_| post_task(b, None).1).collect();
    assert_ne!(own_a, own_b, "unseeded draws come from each server's own stream");
    // A malformed seed: 400 naming the header and the fix, nothing served.
    let (status, body) = post_task(a, Some(("tailor-work-seed", "-3")));
    assert_eq!(status, 400);
    assert!(body.contains("header tailor-work-seed") && body.contains("omit the header"), "{body}");
}

#[test]
fn a_seeded_query_gets_the_same_servers_and_work_under_every_scheme() {
    let rt = runtime();
    rt.block_on(async {
        let timer = Arc::new(PreciseTimer::start().expect("timer thread"));
        let (edf, fifo) = (servers(&timer, PolicySpec::Edf, 100).await, servers(&timer, PolicySpec::Fifo, 200).await);
        // Different handler seeds: their own streams differ.
        let tf = handler(Scheme::TfEdfq, &edf, 1);
        let ff = handler(Scheme::Fifo, &fifo, 2);
        let query = |h: &Arc<Handler>, seed| {
            let h = h.clone();
            async move {
                let o = h.query(QuerySpec { class: 0, fanout: 1, slo_ns: None, seed }).await.expect("query");
                (o.slowest.server, o.slowest.service_ns)
            }
        };
        let mut servers_hit = std::collections::BTreeSet::new();
        for q in 0..24u64 {
            let (a, b) = (query(&tf, Some(q)).await, query(&ff, Some(q)).await);
            assert_eq!(a, b, "query seed {q}: (server, service ns) under TF-EDFQ and FIFO");
            servers_hit.insert(a.0);
        }
        assert!(servers_hit.len() >= 3, "24 seeded queries over {SERVERS} servers hit only {servers_hit:?}");
        // Unseeded queries draw from each handler's and server's own stream.
        let mut differ = 0;
        for _ in 0..12 {
            differ += u32::from(query(&tf, None).await != query(&ff, None).await);
        }
        assert!(differ > 0, "12 unseeded queries had identical servers and work on both sides");
    });
}
