//! The edge: the entry point of untrusted traffic. It strips any context a client sent,
//! stamps its own (GAT now; class and deadline from the matching route), signs it, maps
//! the deadline to `grpc-timeout`, balances over the route's healthy upstreams and removes
//! Tailor's headers from responses. An optional in-flight cap queues by GAT.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::sync::{Arc, Weak};
use std::time::Duration;

use http::{HeaderMap, Request, Response, StatusCode};
use hyper::body::Incoming;
use tailor_core::wire::EdgeRoute;
use tailor_core::Context;
use tailor_runtime::cpu::{monotonic_ns, realtime_ns};

use crate::config::{Balance, Edge, Order, RouteConfig};
use crate::forward::{declared_too_large, failed, guarded, plain, shed_response, Body, BodyWatch, Upstreams};
use crate::gate::{Gate, GateConfig};
use crate::headers;
use crate::metrics::GateView;
use crate::sidecar::Shared;

/// One upstream address of a route, with its load and health.
pub struct Backend {
    pub addr: SocketAddr,
    outstanding: AtomicUsize,
    healthy: AtomicBool,
}

/// One route: its config and backends.
pub struct Route {
    pub config: RouteConfig,
    pub backends: Vec<Arc<Backend>>,
}

/// One loaded configuration's worth of edge: replaced whole on reload.
pub struct EdgeState {
    pub loaded: Edge,
    pub routes: Vec<Route>,
    pub gate: Option<Arc<Gate>>,
    /// Clients that reach the upstreams over TLS (`[upstream_tls]`).
    pub upstream_tls: Option<Upstreams>,
    rng: AtomicU64,
}

impl EdgeState {
    pub fn new(loaded: Edge) -> Arc<EdgeState> {
        let routes = loaded
            .config
            .routes
            .iter()
            .map(|r| Route {
                config: r.clone(),
                backends: r
                    .upstreams
                    .iter()
                    .map(|&addr| {
                        Arc::new(Backend { addr, outstanding: AtomicUsize::new(0), healthy: AtomicBool::new(true) })
                    })
                    .collect(),
            })
            .collect();
        // The edge stamps every GAT itself, so GAT order is its arrival order: the cap's
        // queue is TailClipper's entry point, served oldest first.
        let gate = loaded.config.max_in_flight.map(|c| {
            Gate::new(GateConfig {
                order: Order::Orf,
                c: Some(c),
                c_max: c,
                max_queue: loaded.config.max_queue,
                shed_cannot_meet: false,
            })
        });
        let upstream_tls = loaded.tls.upstream.as_ref().map(Upstreams::tls);
        Arc::new(EdgeState { loaded, routes, gate, upstream_tls, rng: AtomicU64::new(0x9e37_79b9_7f4a_7c15) })
    }

    /// The first route whose every given condition matches.
    pub fn route(&self, path: &str, headers: &HeaderMap) -> Option<&Route> {
        let host =
            headers.get(http::header::HOST).and_then(|h| h.to_str().ok()).map(|h| h.split(':').next().unwrap_or(h));
        self.routes.iter().find(|r| matches(&r.config, path, host, headers))
    }

    fn pick(&self, route: &Route) -> Arc<Backend> {
        let healthy: Vec<&Arc<Backend>> = route.backends.iter().filter(|b| b.healthy.load(Relaxed)).collect();
        // None healthy: try them all rather than fail every request on a checker's word.
        let pool: Vec<&Arc<Backend>> = if healthy.is_empty() { route.backends.iter().collect() } else { healthy };
        let load = |b: &&Arc<Backend>| b.outstanding.load(Relaxed);
        let chosen = match self.loaded.config.balance {
            Balance::LeastOutstanding => pool.iter().min_by_key(|b| load(b)).copied(),
            Balance::P2c if pool.len() > 1 => {
                let r = self.next_random();
                let a = (r % pool.len() as u64) as usize;
                let mut b = ((r >> 32) % (pool.len() as u64 - 1)) as usize;
                if b >= a {
                    b += 1;
                }
                Some(if load(&pool[b]) < load(&pool[a]) { pool[b] } else { pool[a] })
            }
            Balance::P2c => pool.first().copied(),
        };
        chosen.expect("a route has at least one upstream (checked at load)").clone()
    }

    fn next_random(&self) -> u64 {
        // xorshift64*: a cheap shared generator; a lost update between threads only repeats a draw.
        let mut x = self.rng.load(Relaxed);
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.rng.store(x, Relaxed);
        x.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// Backends of every route, once each (for health checks).
    fn backends(&self) -> Vec<Arc<Backend>> {
        self.routes.iter().flat_map(|r| r.backends.iter().cloned()).collect()
    }
}

fn matches(r: &RouteConfig, path: &str, host: Option<&str>, headers: &HeaderMap) -> bool {
    if !path.starts_with(&r.path_prefix) {
        return false;
    }
    if r.host.as_deref().is_some_and(|h| host.is_none_or(|got| !got.eq_ignore_ascii_case(h))) {
        return false;
    }
    if let Some(m) = &r.header {
        if headers.get(m.name.as_str()).is_none_or(|v| v.as_bytes() != m.value.as_bytes()) {
            return false;
        }
    }
    if let Some(service) = &r.grpc_service {
        // gRPC paths are `/package.Service/Method`.
        let mut parts = path.trim_start_matches('/').splitn(2, '/');
        let (s, m) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
        if s != service || r.grpc_method.as_deref().is_some_and(|want| want != m) {
            return false;
        }
    }
    true
}

/// Serves one client request.
pub async fn handle(state: Arc<EdgeState>, shared: Arc<Shared>, mut req: Request<Incoming>) -> Response<Body> {
    let metrics = &shared.metrics;
    metrics.requests.fetch_add(1, Relaxed);
    let now = realtime_ns();
    let grpc = headers::is_grpc(req.headers());
    let Some(route) = state.route(req.uri().path(), req.headers()) else {
        return plain(StatusCode::NOT_FOUND, "no route matches this request\n");
    };
    let limits = state.loaded.config.limits;
    if let Some(refused) = declared_too_large(&req, &limits, grpc) {
        return refused;
    }
    let ctx: Context = EdgeRoute { class: route.config.class, budget: route.config.budget_ns() }.stamp(now);
    let h = req.headers_mut();
    headers::strip_context(h);
    headers::write_context(h, &ctx, state.loaded.key.as_ref());
    if grpc && state.loaded.config.grpc_timeout {
        // A shorter timeout the client set itself is kept: it is the client's to give up.
        headers::write_grpc_timeout(h, &ctx, now);
    }
    headers::remove_hop_by_hop(h);
    let arrived = monotonic_ns();
    let ticket = match &state.gate {
        None => None,
        Some(gate) => {
            let waited = match gate.enter(&ctx, now) {
                Ok(place) => place.wait(ctx.deadline).await,
                Err(reason) => Err(reason),
            };
            match waited {
                Ok(t) => Some(t),
                Err(reason) => {
                    metrics.shed(reason);
                    return shed_response(reason, grpc);
                }
            }
        }
    };
    let admitted = monotonic_ns();
    metrics.queue_wait.observe(admitted - arrived);
    let backend = state.pick(route);
    backend.outstanding.fetch_add(1, Relaxed);
    let upstreams = state.upstream_tls.as_ref().unwrap_or(&shared.upstreams);
    match upstreams.relay(req, backend.addr, &limits).await {
        Ok(mut response) => {
            metrics.upstream_latency.observe(monotonic_ns() - admitted);
            headers::strip_response(response.headers_mut());
            guarded(response, BodyWatch::new(&limits, grpc, metrics), move |_| {
                backend.outstanding.fetch_sub(1, Relaxed);
                if let Some(t) = ticket {
                    t.finish(monotonic_ns() - admitted);
                }
            })
        }
        Err(e) => {
            backend.outstanding.fetch_sub(1, Relaxed);
            // Passive check: an upstream that failed (not a client's body) is out until the
            // next check passes.
            if e.is_upstream() {
                backend.healthy.store(false, Relaxed);
            }
            metrics.relay_failed(&e);
            tracing::warn!(upstream = %backend.addr, error = %e, "relay failed");
            failed(grpc, &e)
        }
    }
}

/// Checks every backend of `state` each `health_interval_ms` until the state is replaced
/// (reload) or dropped: a GET of `health_path` answered 2xx, or else a TCP connect.
pub async fn health_checks(state: Weak<EdgeState>) {
    let Some(first) = state.upgrade() else { return };
    let tls = first.loaded.tls.upstream.clone();
    drop(first);
    let scheme = if tls.is_some() { "https" } else { "http" };
    let client = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .build::<_, http_body_util::Empty<bytes::Bytes>>(crate::forward::connector(tls.as_ref(), false));
    loop {
        let Some(s) = state.upgrade() else { return };
        let interval = Duration::from_millis(s.loaded.config.health_interval_ms);
        let path = s.loaded.config.health_path.clone();
        let backends = s.backends();
        drop(s);
        for b in backends {
            let ok = match &path {
                Some(p) => {
                    let uri: http::Uri = match format!("{scheme}://{}{}", b.addr, p).parse() {
                        Ok(u) => u,
                        Err(_) => continue,
                    };
                    matches!(tokio::time::timeout(interval, client.get(uri)).await, Ok(Ok(r)) if r.status().is_success())
                }
                None => {
                    matches!(tokio::time::timeout(interval, tokio::net::TcpStream::connect(b.addr)).await, Ok(Ok(_)))
                }
            };
            if b.healthy.swap(ok, Relaxed) != ok {
                tracing::info!(upstream = %b.addr, healthy = ok, "upstream health changed");
            }
        }
        tokio::time::sleep(interval).await;
    }
}

/// What the admin endpoint shows of the edge now: its cap's queue (if any) and the
/// requests in flight to upstreams.
pub fn gate_view(state: &EdgeState) -> GateView {
    let (queue, in_flight, limit) = state.gate.as_ref().map_or((0, 0, None), |g| {
        let (q, i, l) = g.snapshot();
        (q, i, Some(l))
    });
    let outstanding: usize = state.backends().iter().map(|b| b.outstanding.load(Relaxed)).sum();
    let limit_floor = state.gate.as_ref().and_then(|g| g.limit_floor());
    GateView { queue, in_flight: in_flight.max(outstanding), limit, limit_floor }
}
