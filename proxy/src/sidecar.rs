//! The sidecar: in front of one local service, it verifies and clamps each request's
//! context (stamping one when missing), queues requests by the core policy and lets at
//! most `c` into the service; its egress listeners re-attach the context to the calls
//! the service makes, from the W3C `baggage` the service forwarded.

use std::net::SocketAddr;
use std::sync::Arc;

use http::{Request, Response};
use hyper::body::Incoming;
use tailor_core::wire::Key;
use tailor_runtime::cpu::{monotonic_ns, realtime_ns};

use crate::config::Sidecar;
use crate::forward::{declared_too_large, failed, guarded, shed_response, Body, Upstreams};
use crate::gate::{Gate, GateConfig};
use crate::headers::{self, Inbound, Trust};
use crate::metrics::Metrics;

/// One loaded configuration's worth of sidecar: replaced whole on reload.
pub struct SidecarState {
    pub loaded: Sidecar,
    pub gate: Arc<Gate>,
}

/// What outlives reloads: metrics and the upstream connection pools.
#[derive(Clone, Default)]
pub struct Shared {
    pub metrics: Arc<Metrics>,
    pub upstreams: Upstreams,
}

impl SidecarState {
    /// A state for `loaded`, keeping `previous`'s gate when its settings did not change
    /// (so a reload neither forgets the queue nor lets a second `c` in).
    pub fn new(loaded: Sidecar, previous: Option<&SidecarState>) -> SidecarState {
        let config = gate_config(&loaded);
        let gate = match previous {
            Some(p) if gate_config(&p.loaded) == config => p.gate.clone(),
            _ => Gate::new(config),
        };
        SidecarState { loaded, gate }
    }
}

fn gate_config(s: &Sidecar) -> GateConfig {
    let c = &s.config;
    GateConfig { order: c.order, c: c.c, c_max: c.c_max, max_queue: c.max_queue, shed_cannot_meet: c.shed_cannot_meet }
}

/// Serves one inbound request.
pub async fn inbound(state: Arc<SidecarState>, shared: Shared, mut req: Request<Incoming>) -> Response<Body> {
    let metrics = &shared.metrics;
    metrics.requests.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let now = realtime_ns();
    let config = &state.loaded.config;
    let keys = state.loaded.key.as_ref().filter(|_| config.mac.as_ref().is_some_and(|m| m.require)).map(|(_, r)| r);
    let trust = Trust { keys, max_age_ns: config.max_age_ns() };
    let (ctx, how) = headers::inbound(req.headers(), now, trust, &metrics.wire);
    metrics.inbound(how);
    if let Inbound::Rejected(e) = how {
        tracing::debug!(kind = e.kind(), "context rejected; request stamped as new");
    }
    let grpc = headers::is_grpc(req.headers());
    let limits = config.limits();
    if let Some(refused) = declared_too_large(&req, &limits, grpc) {
        return refused;
    }
    let arrived = monotonic_ns();
    let place = match state.gate.enter(&ctx, now) {
        Ok(p) => p,
        Err(reason) => {
            metrics.shed(reason);
            return shed_response(reason, grpc);
        }
    };
    let ticket = match place.wait(ctx.deadline).await {
        Ok(t) => t,
        Err(reason) => {
            metrics.shed(reason);
            return shed_response(reason, grpc);
        }
    };
    let admitted = monotonic_ns();
    metrics.queue_wait.observe(admitted - arrived);
    // The service sees the context it runs under (in the header and in baggage, which
    // OpenTelemetry-instrumented code forwards on its own calls).
    headers::write_context(req.headers_mut(), &ctx, None);
    headers::remove_hop_by_hop(req.headers_mut());
    match shared.upstreams.relay(req, config.upstream, &limits).await {
        Ok(response) => {
            metrics.upstream_latency.observe(monotonic_ns() - admitted);
            guarded(response, move |_| ticket.finish(monotonic_ns() - admitted))
        }
        Err(e) => {
            metrics.relay_failed(&e);
            drop(ticket);
            tracing::warn!(upstream = %config.upstream, error = %e, "relay failed");
            failed(grpc, &e)
        }
    }
}

/// Serves one outbound request of the service through an egress listener: the context
/// it forwarded (in `tailor-context`, or as the `tailor` member of `baggage`) goes to the
/// next hop one hop further, signed when a key is configured. A call that carries no
/// context goes out unchanged.
pub async fn egress(
    state: Arc<SidecarState>,
    shared: Shared,
    upstream: SocketAddr,
    mut req: Request<Incoming>,
) -> Response<Body> {
    let now = realtime_ns();
    let config = &state.loaded.config;
    // The local service is trusted: its context is clamped, not verified.
    let trust = Trust { keys: None, max_age_ns: config.max_age_ns() };
    let (ctx, how) = headers::inbound(req.headers(), now, trust, &shared.metrics.wire);
    if how == Inbound::Carried {
        let key: Option<&Key> = state.loaded.key.as_ref().map(|(k, _)| k);
        headers::write_context(req.headers_mut(), &ctx.child(), key);
    }
    let grpc = headers::is_grpc(req.headers());
    headers::remove_hop_by_hop(req.headers_mut());
    match shared.upstreams.relay(req, upstream, &config.limits()).await {
        Ok(response) => {
            response.map(|b| http_body_util::BodyExt::boxed_unsync(http_body_util::BodyExt::map_err(b, Into::into)))
        }
        Err(e) => {
            shared.metrics.relay_failed(&e);
            failed(grpc, &e)
        }
    }
}

/// `/metrics`, `/healthz`, `/readyz` of a sidecar.
pub fn admin(state: &SidecarState, shared: &Shared, path: &str, draining: bool) -> Response<Body> {
    crate::serve::admin_response(path, draining, || {
        let (queue, in_flight, limit) = state.gate.snapshot();
        shared.metrics.render(queue, in_flight, Some(limit))
    })
}
