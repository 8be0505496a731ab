//! The admin endpoint served from a real listener, checked with real Prometheus tools.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::{Registry, Unit};
use tailor_telemetry::exposition::OPENMETRICS_CONTENT_TYPE;
use tailor_telemetry::testing::{http_get, sample_value, scrape_metrics, PrometheusServer, Promtool};
use tailor_telemetry::{AdminServer, Readiness};

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct TierLabel {
    tier: String,
}

/// A registry with one family of each kind a Tailor daemon uses, and the
/// atomic a scrape hook turns into a gauge.
fn example_server() -> (AdminServer, Counter, Arc<AtomicU64>) {
    let mut registry = Registry::default();
    let jobs = Counter::default();
    registry.register("tailor_example_jobs", "Jobs admitted.", jobs.clone());
    let procs = Family::<TierLabel, Gauge>::default();
    registry.register("tailor_example_processes", "Processes per tier.", procs.clone());
    procs.get_or_create(&TierLabel { tier: "lc".into() }).set(3);
    let latency = Histogram::new(exponential_buckets(1e-6, 10.0, 6));
    registry.register_with_unit("tailor_example_latency", "Time a job waited.", Unit::Seconds, latency.clone());
    latency.observe(2.5e-4);
    let age = Gauge::<f64, std::sync::atomic::AtomicU64>::default();
    registry.register_with_unit("tailor_example_heartbeat_age", "Since the last beat.", Unit::Seconds, age.clone());
    let age_ns = Arc::new(AtomicU64::new(1_500_000_000));
    let read = age_ns.clone();
    let server = AdminServer::new(Arc::new(registry)).on_scrape(move || {
        age.set(read.load(Ordering::Relaxed) as f64 / 1e9);
    });
    (server, jobs, age_ns)
}

fn require_clean(promtool: &Promtool) {
    match promtool {
        Promtool::Clean => {}
        Promtool::Absent => {
            eprintln!("skipping the promtool check: promtool is not installed (apt-get install prometheus)")
        }
        Promtool::Problems(p) => panic!("promtool check metrics: {p}"),
    }
}

#[test]
fn thread_server_serves_metrics_health_and_readiness() {
    let (server, jobs, age_ns) = example_server();
    let (readiness, ready) = Readiness::flag(false);
    let handle = server.readiness(readiness).spawn("127.0.0.1:0".parse().unwrap()).unwrap();
    let addr = handle.local_addr();

    jobs.inc_by(41);
    jobs.inc();
    age_ns.store(2_000_000_000, Ordering::Relaxed);
    let scrape = scrape_metrics(addr).unwrap();
    require_clean(&scrape.promtool);
    assert_eq!(sample_value(&scrape.body, "tailor_example_jobs_total"), Some(42.0), "{}", scrape.body);
    assert_eq!(sample_value(&scrape.body, "tailor_example_processes{tier=\"lc\"}"), Some(3.0));
    assert_eq!(sample_value(&scrape.body, "tailor_example_heartbeat_age_seconds"), Some(2.0));
    assert_eq!(sample_value(&scrape.body, "tailor_example_latency_seconds_count"), Some(1.0));

    let om = http_get(addr, "/metrics", Some("application/openmetrics-text; version=1.0.0")).unwrap();
    assert_eq!(om.content_type.as_deref(), Some(OPENMETRICS_CONTENT_TYPE));
    assert!(om.body.ends_with("# EOF\n"), "{}", om.body);

    assert_eq!(http_get(addr, "/healthz", None).unwrap().status, 200);
    assert_eq!(http_get(addr, "/readyz", None).unwrap().status, 503);
    ready.set(true);
    assert_eq!(http_get(addr, "/readyz", None).unwrap().status, 200);
    assert_eq!(http_get(addr, "/stats", None).unwrap().status, 404);

    handle.shutdown();
    assert!(http_get(addr, "/healthz", None).is_err(), "the port closes when the handle is shut down");
}

#[tokio::test(flavor = "current_thread")]
async fn tokio_server_serves_metrics_on_the_callers_runtime() {
    let (server, jobs, _) = example_server();
    let handle = server.start("127.0.0.1:0".parse().unwrap()).await.unwrap();
    let addr = handle.local_addr();
    jobs.inc();
    // The blocking client runs off the runtime thread, which serves the request.
    let scrape = tokio::task::spawn_blocking(move || scrape_metrics(addr)).await.unwrap().unwrap();
    require_clean(&scrape.promtool);
    assert_eq!(sample_value(&scrape.body, "tailor_example_jobs_total"), Some(1.0));
    assert!(scrape.body.contains("# TYPE tailor_example_jobs_total counter"));
}

#[test]
fn a_real_prometheus_server_scrapes_the_endpoint() {
    let (server, jobs, _) = example_server();
    let handle = server.spawn("127.0.0.1:0".parse().unwrap()).unwrap();
    jobs.inc_by(7);
    let Some(prometheus) = PrometheusServer::start(&[handle.local_addr()]).unwrap() else {
        eprintln!("skipping: the prometheus server is not installed (apt-get install prometheus)");
        return;
    };
    let series =
        prometheus.query_until_present("tailor_example_jobs_total{job=\"tailor\"}", Duration::from_secs(30)).unwrap();
    assert_eq!(series[0]["value"][1], "7", "{series:?}");
    let up = prometheus.query_until_present("up{job=\"tailor\"}", Duration::from_secs(5)).unwrap();
    assert_eq!(up[0]["value"][1], "1", "{up:?}");
}
