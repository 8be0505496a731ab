//! The sidecar: in front of one local service, it verifies and clamps each request's
//! context (stamping one when missing), queues requests by the core policy and lets at
//! most `c` into the service; its egress listeners re-attach the context to the calls
//! the service makes, from the W3C `baggage` the service forwarded.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use http::{Request, Response};
use hyper::body::Incoming;
use rustc_hash::FxHashMap;
use tailor_core::wire::Key;
use tailor_core::Nanos;
use tailor_runtime::cpu::{monotonic_ns, realtime_ns};

use crate::config::Sidecar;
use crate::forward::{declared_too_large, failed, guarded, shed_response, Body, BodyWatch, Upstreams};
use crate::gate::{Gate, GateConfig, Ticket};
use crate::headers::{self, Inbound, Trust};
use crate::metrics::{GateView, Metrics};

/// One loaded configuration's worth of sidecar: replaced whole on reload.
pub struct SidecarState {
    pub loaded: Sidecar,
    pub gate: Arc<Gate>,
    /// Clients that reach the service over TLS (`[upstream_tls]`); rebuilt on reload, so
    /// new certificates take effect on new upstream connections.
    pub upstream_tls: Option<Upstreams>,
    /// Per egress listener, in config order: clients that reach its next hop over TLS
    /// (`[egress.upstream_tls]`), rebuilt on reload likewise.
    pub egress_tls: Vec<Option<Upstreams>>,
}

/// What outlives reloads: metrics, the upstream connection pools, the requests inside.
#[derive(Clone, Default)]
pub struct Shared {
    pub metrics: Arc<Metrics>,
    pub upstreams: Upstreams,
    pub inside: Arc<Inside>,
    /// Whether the sidecar runs egress listeners (bound at start, so fixed until a
    /// restart): only then can a request call out, and only then is it put in `inside`.
    pub egress_listeners: bool,
}

/// A request's slot in the service: the gate's ticket and when it was admitted. Given
/// back exactly once (the `Option` is taken): by the request's first call out through an
/// egress listener (with `release_on_egress`, the default), by the end of its response, or when the request is dropped (failed
/// upstream, client gone, cancelled), whichever comes first.
struct Slot(Mutex<Option<(Ticket, Nanos)>>);

impl Slot {
    /// Gives the slot back if it is still held; `sample`: the time since admission is a
    /// latency sample for the adaptive limit (the service's own work, done or handed on).
    fn give_back(&self, sample: bool) {
        let taken = self.0.lock().unwrap_or_else(|p| p.into_inner()).take();
        match taken {
            Some((ticket, admitted)) if sample => ticket.finish(monotonic_ns() - admitted),
            _ => {} // a ticket dropped unfinished leaves the gate without a sample
        }
    }
}

/// The requests inside the service, by the (GAT, hop) of the context they were admitted
/// with. When the service calls its next hop through an egress listener with that
/// context, the request's slot is given back: the service now waits on the next tier
/// instead of using its CPU, and holding the slot for the rest of the chain would let
/// only `c` requests into the whole chain below it (the simulator's `admit` gate, which
/// models the sidecar, also covers only the service's own work). `release_on_egress =
/// false` keeps that bound on purpose: the chain's first sidecar then admits whole
/// requests, `c` at a time by GAT (the simulator's `orf` host policy). Two requests inside at
/// once with one (GAT, hop) are possible only with clamped or forged contexts: the later
/// one's call-out then releases only its own slot, and the earlier holds its slot until
/// its response ends.
#[derive(Default)]
pub struct Inside(Mutex<FxHashMap<(Nanos, u32), Arc<Slot>>>);

impl Inside {
    fn map(&self) -> std::sync::MutexGuard<'_, FxHashMap<(Nanos, u32), Arc<Slot>>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Puts an admitted request inside; the returned guard gives its slot back on drop
    /// at the latest. `callable`: whether a call out can give the slot back (egress
    /// listeners run and `release_on_egress`); if not, the request is not put in the map
    /// (no call out can look for it) and only the guard gives the slot back.
    fn enter(self: &Arc<Self>, key: (Nanos, u32), ticket: Ticket, admitted: Nanos, callable: bool) -> Held {
        let slot = Slot(Mutex::new(Some((ticket, admitted))));
        if !callable {
            // Only the guard holds it: no shared allocation.
            return Held::Alone(slot);
        }
        let slot = Arc::new(slot);
        self.map().insert(key, slot.clone());
        Held::InMap { inside: self.clone(), key, slot }
    }

    /// The service called out with the context of `key`: its request leaves the gate.
    fn called_out(&self, key: (Nanos, u32)) {
        let slot = self.map().remove(&key);
        if let Some(slot) = slot {
            slot.give_back(true);
        }
    }

    /// Requests inside that have not called out (for tests and metrics).
    pub fn len(&self) -> usize {
        self.map().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// An inbound request's hold on its slot, for as long as the request is being served.
enum Held {
    /// Not in the map: no call out can give the slot back (see [`Inside::enter`]).
    Alone(Slot),
    /// In the map under `key`, shared with a call out that may give it back first.
    InMap { inside: Arc<Inside>, key: (Nanos, u32), slot: Arc<Slot> },
}

impl Held {
    fn release(&self, sample: bool) {
        match self {
            Held::Alone(slot) => slot.give_back(sample),
            Held::InMap { inside, key, slot } => {
                {
                    let mut map = inside.map();
                    if map.get(key).is_some_and(|s| Arc::ptr_eq(s, slot)) {
                        map.remove(key);
                    }
                }
                slot.give_back(sample);
            }
        }
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        self.release(false);
    }
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
        let upstream_tls = loaded.tls.upstream.as_ref().map(Upstreams::tls);
        let egress_tls = loaded.tls.egress.iter().map(|t| t.as_ref().map(Upstreams::tls)).collect();
        SidecarState { loaded, gate, upstream_tls, egress_tls }
    }
}

fn gate_config(s: &Sidecar) -> GateConfig {
    let c = &s.config;
    GateConfig { order: c.order, c: c.c, c_max: c.c_max, max_queue: c.max_queue, shed_cannot_meet: c.shed_cannot_meet }
}

/// Serves one inbound request.
pub async fn inbound(state: Arc<SidecarState>, shared: Arc<Shared>, mut req: Request<Incoming>) -> Response<Body> {
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
    let limits = config.limits;
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
    let key = (ctx.gat, ctx.hop as u32);
    // Dropped with this future if the client goes away before the upstream answers.
    let callable = shared.egress_listeners && config.release_on_egress;
    let held = shared.inside.enter(key, ticket, admitted, callable);
    let upstreams = state.upstream_tls.as_ref().unwrap_or(&shared.upstreams);
    match upstreams.relay(req, config.upstream, &limits).await {
        Ok(response) => {
            metrics.upstream_latency.observe(monotonic_ns() - admitted);
            guarded(response, BodyWatch::new(&limits, grpc, metrics), move |_| held.release(true))
        }
        Err(e) => {
            metrics.relay_failed(&e);
            drop(held);
            tracing::warn!(upstream = %config.upstream, error = %e, "relay failed");
            failed(grpc, &e)
        }
    }
}

/// Serves one outbound request of the service through the egress listener on `listen`:
/// the context it forwarded (in `tailor-context`, or as the `tailor` member of `baggage`)
/// goes to the next hop one hop further, signed when a key is configured. A call that
/// carries no context goes out unchanged. The next hop and its TLS are the running
/// config's for `listen` (they reload); `started` is the next hop the listener was started
/// with, used if a reload removed the listener's entry (its address changes only on restart).
pub async fn egress(
    state: Arc<SidecarState>,
    shared: Arc<Shared>,
    listen: SocketAddr,
    started: SocketAddr,
    mut req: Request<Incoming>,
) -> Response<Body> {
    let now = realtime_ns();
    let config = &state.loaded.config;
    // The local service is trusted: its context is clamped, not verified.
    let trust = Trust { keys: None, max_age_ns: config.max_age_ns() };
    let (ctx, how) = headers::inbound(req.headers(), now, trust, &shared.metrics.wire);
    if how == Inbound::Carried {
        if config.release_on_egress {
            shared.inside.called_out((ctx.gat, ctx.hop as u32));
        }
        let key: Option<&Key> = state.loaded.key.as_ref().map(|(k, _)| k);
        headers::write_context(req.headers_mut(), &ctx.child(), key);
    }
    let grpc = headers::is_grpc(req.headers());
    headers::remove_hop_by_hop(req.headers_mut());
    let entry = config.egress.iter().position(|e| e.listen == listen);
    let upstream = entry.map_or(started, |i| config.egress[i].upstream);
    let upstreams = entry.and_then(|i| state.egress_tls.get(i)?.as_ref()).unwrap_or(&shared.upstreams);
    match upstreams.relay(req, upstream, &config.limits).await {
        Ok(response) => guarded(response, BodyWatch::new(&config.limits, grpc, &shared.metrics), |_| {}),
        Err(e) => {
            shared.metrics.relay_failed(&e);
            failed(grpc, &e)
        }
    }
}

/// What the admin endpoint shows of the sidecar now: its gate.
pub fn gate_view(state: &SidecarState) -> GateView {
    let (queue, in_flight, limit) = state.gate.snapshot();
    GateView { queue, in_flight, limit: Some(limit), limit_floor: state.gate.limit_floor() }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Order;
    use tailor_core::Context;

    fn one_slot_gate() -> Arc<Gate> {
        Gate::new(GateConfig { order: Order::Orf, c: Some(1), c_max: 4, max_queue: 16, shed_cannot_meet: false })
    }

    async fn admit(gate: &Arc<Gate>, gat: Nanos) -> Ticket {
        gate.enter(&Context::stamped(gat), gat + 1).unwrap().wait(tailor_core::time::NEVER).await.unwrap()
    }

    #[tokio::test]
    async fn a_call_out_gives_the_slot_back_once_and_the_response_end_does_not_again() {
        let gate = one_slot_gate();
        let inside = Arc::new(Inside::default());
        let held = inside.enter((10, 0), admit(&gate, 10).await, monotonic_ns(), true);
        assert_eq!(gate.snapshot(), (0, 1, 1));
        let waiting = gate.enter(&Context::stamped(20), 21).unwrap();
        inside.called_out((10, 0));
        assert_eq!(gate.snapshot(), (0, 1, 1), "the waiting request took the freed slot");
        assert!(inside.is_empty());
        inside.called_out((10, 0)); // a second call out of the same request: nothing more
        let next = waiting.wait(tailor_core::time::NEVER).await.unwrap();
        drop(held); // the first request's response ends: its slot was already given back
        assert_eq!(gate.snapshot(), (0, 1, 1), "the second request still holds the only slot");
        drop(next);
        assert_eq!(gate.snapshot(), (0, 0, 1));
    }

    #[tokio::test]
    async fn a_request_that_never_calls_out_gives_its_slot_back_when_dropped() {
        let gate = one_slot_gate();
        let inside = Arc::new(Inside::default());
        let held = inside.enter((10, 0), admit(&gate, 10).await, monotonic_ns(), true);
        held.release(true); // response ended
        assert_eq!(gate.snapshot(), (0, 0, 1));
        assert!(inside.is_empty());
        drop(held);
        // Failed upstream or cancelled request: the guard alone releases it.
        let held = inside.enter((30, 1), admit(&gate, 30).await, monotonic_ns(), true);
        drop(held);
        assert_eq!(gate.snapshot(), (0, 0, 1));
        assert!(inside.is_empty());
        // A stale call-out for a request already gone finds nothing.
        inside.called_out((30, 1));
        assert_eq!(gate.snapshot(), (0, 0, 1));
    }

    #[tokio::test]
    async fn a_request_that_cannot_call_out_stays_out_of_the_map_and_still_gives_its_slot_back() {
        let gate = one_slot_gate();
        let inside = Arc::new(Inside::default());
        let held = inside.enter((10, 0), admit(&gate, 10).await, monotonic_ns(), false);
        assert!(inside.is_empty(), "no egress listener: nothing to look the request up by");
        inside.called_out((10, 0)); // cannot happen without egress listeners; finds nothing anyway
        assert_eq!(gate.snapshot(), (0, 1, 1), "the slot is held until the response ends");
        held.release(true);
        assert_eq!(gate.snapshot(), (0, 0, 1));
        drop(held);
        let held = inside.enter((30, 1), admit(&gate, 30).await, monotonic_ns(), false);
        drop(held); // failed upstream or cancelled: the guard alone gives it back
        assert_eq!(gate.snapshot(), (0, 0, 1));
    }

    #[tokio::test]
    async fn requests_sharing_a_key_release_only_their_own_slot() {
        let gate =
            Gate::new(GateConfig { order: Order::Orf, c: Some(2), c_max: 4, max_queue: 16, shed_cannot_meet: false });
        let inside = Arc::new(Inside::default());
        let first = inside.enter((10, 0), admit(&gate, 10).await, monotonic_ns(), true);
        let second = inside.enter((10, 0), admit(&gate, 10).await, monotonic_ns(), true);
        inside.called_out((10, 0));
        assert_eq!(gate.snapshot(), (0, 1, 2), "one slot given back");
        drop(first);
        assert_eq!(gate.snapshot(), (0, 0, 2));
        drop(second);
        assert_eq!(gate.snapshot(), (0, 0, 2));
    }
}
