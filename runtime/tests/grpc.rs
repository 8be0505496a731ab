//! The layers under tonic, on loopback: a 3-tier gRPC chain (edge, two hops) whose
//! servers use `ContextLayer`, `DeadlineFromTimeoutLayer` and `ScheduleLayer`, and whose
//! channels use `InjectLayer` and `TimeoutFromDeadlineLayer`. The edge's GAT reaches
//! tier 3 unchanged, a forged context is replaced at the edge, malformed metadata is
//! counted and served, the deadline maps to and from `grpc-timeout`, and `ScheduleLayer`
//! admits gRPC calls in GAT order.
//!
//! The service is hand-written (what tonic-build generates, for one unary method) over
//! hand-written prost messages, so no `protoc` is needed.

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tailor_core::time::{NANOS_PER_SEC, NEVER};
use tailor_core::wire::{self, grpc_timeout, EdgeRoute, WireError, WireStats};
use tailor_core::{Context, Nanos, PolicySpec};
use tailor_runtime::cpu::realtime_ns;
use tailor_runtime::grpc::{DeadlineFromTimeoutLayer, TimeoutFromDeadline, TimeoutFromDeadlineLayer};
use tailor_runtime::http::{ContextConfig, ContextLayer, Inject, InjectLayer, ScheduleLayer};
use tailor_runtime::{BackendSpec, Scheduler, SchedulerOptions};
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tonic::body::Body;
use tonic::metadata::MetadataValue;
use tonic::transport::server::TcpIncoming;
use tonic::transport::{Channel, Endpoint, Server};
use tonic::{Request, Response, Status};
use tonic_prost::ProstCodec;
use tower::{Service, ServiceBuilder};

mod common;
use common::wait_until;

#[derive(Clone, PartialEq, prost::Message)]
struct Call {}

/// What one tier saw of its request.
#[derive(Clone, PartialEq, prost::Message)]
struct Seen {
    #[prost(uint64, tag = "1")]
    gat: u64,
    #[prost(uint64, tag = "2")]
    deadline: u64,
    #[prost(uint32, tag = "3")]
    hop: u32,
    #[prost(uint32, tag = "4")]
    class: u32,
    /// The tier's clock when the handler ran.
    #[prost(uint64, tag = "5")]
    received: u64,
    #[prost(string, tag = "6")]
    grpc_timeout: String,
    /// `tailor_runtime::current()` in the handler is the request's context.
    #[prost(bool, tag = "7")]
    current_is_request_context: bool,
}

#[derive(Clone, PartialEq, prost::Message)]
struct Trace {
    #[prost(message, repeated, tag = "1")]
    tiers: Vec<Seen>,
}

const CALL: &str = "/tailor.test.Chain/Call";

type Client = tonic::client::Grpc<Inject<TimeoutFromDeadline<Channel>>>;

/// A gRPC server for `service` on an ephemeral loopback port, with the context
/// layers in front and `scheduler` admitting its requests; it stops when the test's
/// runtime ends. Returns the address and the counters of what arrived on the wire.
/// (docs/runtime.md, "gRPC (tonic)", shows this function.)
async fn start_server<S>(config: ContextConfig, scheduler: Scheduler, service: S) -> (SocketAddr, Arc<WireStats>)
where
    S: Service<http::Request<Body>, Response = http::Response<Body>, Error = Infallible, Future: Send>
        + Clone
        + Send
        + 'static,
{
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let context = ContextLayer::new(config);
    let stats = context.stats();
    let layers = ServiceBuilder::new()
        .layer(context.clone())
        .layer(DeadlineFromTimeoutLayer::new(&context))
        .layer(ScheduleLayer::new(scheduler));
    let server = Server::builder().layer(layers.into_inner());
    tokio::spawn(server.serve_with_incoming(service, TcpIncoming::from(listener)));
    (addr, stats)
}

/// A client whose calls, made while serving a request, carry its context one hop
/// further and its deadline as `grpc-timeout`.
fn client(addr: SocketAddr) -> Client {
    let channel = Endpoint::from_shared(format!("http://{addr}")).unwrap().connect_lazy();
    let layers = ServiceBuilder::new().layer(InjectLayer).layer(TimeoutFromDeadlineLayer);
    tonic::client::Grpc::new(layers.service(channel))
}

/// A one-method gRPC service, as tonic-build would generate it.
fn grpc_service<H, F>(
    handler: H,
) -> impl Service<http::Request<Body>, Response = http::Response<Body>, Error = Infallible, Future: Send> + Clone + Send
where
    H: Fn(Request<Call>) -> F + Clone + Send + 'static,
    F: Future<Output = Result<Response<Trace>, Status>> + Send + 'static,
{
    tower::service_fn(move |req: http::Request<Body>| {
        let handler = handler.clone();
        async move {
            if req.uri().path() != CALL {
                return Ok(Status::unimplemented(req.uri().path().to_string()).into_http());
            }
            let mut grpc = tonic::server::Grpc::new(ProstCodec::<Trace, Call>::default());
            Ok(grpc.unary(tower::service_fn(handler), req).await)
        }
    })
}

async fn call(client: &mut Client, req: Request<Call>) -> Result<Trace, Status> {
    client.ready().await.map_err(|e| Status::unavailable(e.to_string()))?;
    let path = http::uri::PathAndQuery::from_static(CALL);
    Ok(client.unary(req, path, ProstCodec::default()).await?.into_inner())
}

fn scheduler(c: usize) -> Scheduler {
    let opts = SchedulerOptions { log: false, ..Default::default() };
    Scheduler::with_options(BackendSpec::Cooperative { policy: PolicySpec::Gfifo, c }, opts).unwrap()
}

/// A tier: reports what it saw, then (if there is a next tier) calls it and appends its trace.
async fn start_tier(config: ContextConfig, next: Option<SocketAddr>) -> (SocketAddr, Arc<WireStats>) {
    let next = next.map(client);
    let handler = move |req: Request<Call>| {
        let next = next.clone();
        async move {
            let ctx = *req.extensions().get::<Context>().ok_or_else(|| Status::internal("no Context in extensions"))?;
            let grpc_timeout = req.metadata().get(grpc_timeout::HEADER).map(|v| v.to_str().unwrap().to_string());
            let mut tiers = vec![Seen {
                gat: ctx.gat,
                deadline: ctx.deadline,
                hop: ctx.hop.into(),
                class: ctx.class.into(),
                received: realtime_ns(),
                grpc_timeout: grpc_timeout.unwrap_or_default(),
                current_is_request_context: tailor_runtime::current() == Some(ctx),
            }];
            if let Some(mut next) = next {
                tiers.extend(call(&mut next, Request::new(Call {})).await?.tiers);
            }
            Ok(Response::new(Trace { tiers }))
        }
    };
    start_server(config, scheduler(4), grpc_service(handler)).await
}

fn request(metadata: &[(&'static str, &str)]) -> Request<Call> {
    let mut req = Request::new(Call {});
    for &(name, value) in metadata {
        req.metadata_mut().insert(name, MetadataValue::try_from(value).unwrap());
    }
    req
}

fn rejected(stats: &WireStats) -> u64 {
    stats.rejected().map(|(_, n)| n).sum()
}

/// The time left to `deadline` that a tier's `grpc-timeout` stands for: sent at or
/// before `seen.received`, rounded up, so it reaches at least to the deadline.
fn assert_timeout_reaches(seen: &Seen, deadline: Nanos, at_most: Nanos) {
    let timeout = grpc_timeout::decode(&seen.grpc_timeout).unwrap_or_else(|e| panic!("{seen:?}: {e:?}"));
    assert!(timeout > 0 && timeout <= at_most, "{seen:?}: {timeout} ns");
    let reaches = seen.received + timeout;
    assert!(
        reaches >= deadline && reaches - deadline < NANOS_PER_SEC,
        "{seen:?}: timeout {timeout} ns, deadline {deadline}"
    );
}

const BUDGET: Nanos = 2 * NANOS_PER_SEC;

async fn start_chain() -> (SocketAddr, (SocketAddr, Arc<WireStats>), Arc<WireStats>) {
    let (tier3, tier3_stats) = start_tier(ContextConfig::hop(), None).await;
    let (tier2, tier2_stats) = start_tier(ContextConfig::hop(), Some(tier3)).await;
    let route = EdgeRoute { class: 2, budget: Some(BUDGET) };
    let (edge, _) = start_tier(ContextConfig::edge(route), Some(tier2)).await;
    (edge, (tier2, tier2_stats), tier3_stats)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_tier_chain_carries_the_edge_gat_and_replaces_a_forged_one() {
    let (edge, (_, tier2_stats), tier3_stats) = start_chain().await;
    let mut client = client(edge);

    // A client forges a very old GAT in both carriers and asks for 30 s by grpc-timeout.
    let mut req = request(&[("tailor-context", "1.g5.c0.k1.h7"), ("baggage", "tailor=1.g5.c0.k1.h7,k=v")]);
    req.set_timeout(Duration::from_secs(30));
    let before = realtime_ns();
    let trace = call(&mut client, req).await.unwrap();
    let after = realtime_ns();

    let [edge, tier2, tier3] = <[Seen; 3]>::try_from(trace.tiers).unwrap();
    assert!((before..=after).contains(&edge.gat), "the edge stamps a fresh GAT: {edge:?}");
    assert_eq!((edge.hop, edge.class), (0, 2), "{edge:?}");
    assert!(!edge.grpc_timeout.is_empty(), "the client's grpc-timeout reached the edge: {edge:?}");
    assert_eq!(edge.deadline, edge.gat + BUDGET, "the route's budget, not the client's timeout: {edge:?}");
    for (hop, tier) in [(1, &tier2), (2, &tier3)] {
        assert_eq!(tier.gat, edge.gat, "the edge's GAT arrives unchanged: {tier:?}");
        assert_eq!((tier.hop, tier.class), (hop, 2), "{tier:?}");
        // Exactly the edge's: taken from the context, not re-derived from the grpc-timeout that came along.
        assert_eq!(tier.deadline, edge.deadline, "{tier:?}");
        assert_timeout_reaches(tier, edge.deadline, BUDGET);
    }
    for tier in [&edge, &tier2, &tier3] {
        assert!(tier.current_is_request_context, "{tier:?}");
    }
    for stats in [&tier2_stats, &tier3_stats] {
        assert_eq!((stats.accepted(), stats.absent(), rejected(stats)), (1, 0, 0));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_metadata_is_counted_and_the_call_served() {
    let (_, (tier2, stats), _) = start_chain().await;
    let mut client = client(tier2);

    let cases: [(&[(&str, &str)], WireError); 3] = [
        (&[("tailor-context", "1.gNOPE.c0.k1.h0")], WireError::InvalidNumber),
        (&[("baggage", "k=v,tailor=1.g5.c0")], WireError::MissingField),
        // No context, so the grpc-timeout would set the deadline: it is malformed instead.
        (&[("grpc-timeout", "5x")], WireError::Malformed),
    ];
    for (n, (metadata, kind)) in cases.into_iter().enumerate() {
        let before = realtime_ns();
        let trace = call(&mut client, request(metadata)).await.unwrap_or_else(|s| panic!("{metadata:?}: {s:?}"));
        let after = realtime_ns();
        let [tier2, tier3] = <[Seen; 2]>::try_from(trace.tiers).unwrap();
        assert!((before..=after).contains(&tier2.gat), "served as if it arrived now: {metadata:?} {tier2:?}");
        assert_eq!((tier2.hop, tier2.deadline), (0, NEVER), "{metadata:?} {tier2:?}");
        assert_eq!((tier3.gat, tier3.hop), (tier2.gat, 1), "and propagated: {metadata:?} {tier3:?}");
        assert_eq!(stats.rejected_of(kind), 1, "{metadata:?}");
        assert_eq!(rejected(&stats), n as u64 + 1, "{metadata:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grpc_timeout_becomes_the_deadline_only_without_a_context() {
    let (_, (tier2, _), _) = start_chain().await;
    let mut client = client(tier2);

    // No Tailor context, a gRPC deadline (encoded by tonic, decoded by core): the deadline.
    let timeout = Duration::from_millis(1500);
    let mut req = request(&[]);
    req.set_timeout(timeout);
    let [tier2_seen, tier3_seen] = <[Seen; 2]>::try_from(call(&mut client, req).await.unwrap().tiers).unwrap();
    let given = tier2_seen.deadline - tier2_seen.gat;
    assert!(given >= timeout.as_nanos() as u64 && given < timeout.as_nanos() as u64 + NANOS_PER_SEC, "{tier2_seen:?}");
    assert_eq!((tier3_seen.gat, tier3_seen.deadline, tier3_seen.hop), (tier2_seen.gat, tier2_seen.deadline, 1));
    assert_timeout_reaches(&tier3_seen, tier2_seen.deadline, timeout.as_nanos() as u64);

    // A Tailor context without a deadline wins over the grpc-timeout.
    let gat = realtime_ns() - 1_000_000;
    let ctx = wire::encode(&Context::stamped(gat));
    let mut req = request(&[("tailor-context", ctx.as_str())]);
    req.set_timeout(timeout);
    let [tier2_seen, tier3_seen] = <[Seen; 2]>::try_from(call(&mut client, req).await.unwrap().tiers).unwrap();
    assert_eq!((tier2_seen.gat, tier2_seen.deadline), (gat, NEVER), "{tier2_seen:?}");
    assert_eq!(tier3_seen.grpc_timeout, "", "no deadline, no grpc-timeout sent: {tier3_seen:?}");
}

/// `schedule_layer.rs`'s ordering test, through tonic: one place (c = 1), a young call
/// holds it, older ones queue in scrambled order; one gives up while waiting (its
/// client drops the call, the server sees the stream reset); the rest enter oldest first.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn schedule_layer_admits_grpc_calls_in_gat_order() {
    let sched = scheduler(1);
    let entered = Arc::new(Mutex::new(Vec::<u64>::new()));
    let release = Arc::new(Semaphore::new(0));
    let handler = {
        let (entered, release) = (entered.clone(), release.clone());
        move |req: Request<Call>| {
            let (entered, release) = (entered.clone(), release.clone());
            async move {
                let gat = req.extensions().get::<Context>().unwrap().gat;
                entered.lock().unwrap().push(gat);
                release.acquire().await.unwrap().forget();
                Ok(Response::new(Trace { tiers: vec![Seen { gat, ..Default::default() }] }))
            }
        }
    };
    let (addr, stats) = start_server(ContextConfig::hop(), sched.clone(), grpc_service(handler)).await;
    let client = client(addr);
    // Recent GATs, so that the hop's clamp (10 s) leaves them as they are.
    let base = realtime_ns() - 5 * NANOS_PER_SEC;
    let send = |gat: u64| {
        let mut client = client.clone();
        let ctx = wire::encode(&Context::stamped(gat));
        let req = request(&[("tailor-context", ctx.as_str())]);
        tokio::spawn(async move { call(&mut client, req).await.unwrap().tiers[0].gat })
    };

    let young = send(base + 4 * NANOS_PER_SEC);
    wait_until("the young call inside", || entered.lock().unwrap().len() == 1).await;
    let mut waiting = Vec::new();
    for (k, ms) in [500u64, 300, 100, 400, 200].into_iter().enumerate() {
        let gat = base + ms * 1_000_000;
        waiting.push((gat, send(gat)));
        wait_until("the call to queue", || sched.waiting() == k + 1).await;
    }
    let (_, gone) = waiting.remove(2); // GAT base + 100 ms: the oldest, gone while waiting
    gone.abort();
    let _ = gone.await;
    // The server dropped the call on the client's RST_STREAM. (It stays in `waiting()`
    // until its turn: the policy only sees a waiting job leave once it dispatches it.)
    wait_until("the server to drop the cancelled call", || sched.stats().completed == 1).await;

    for _ in 0..5 {
        release.add_permits(1);
    }
    assert_eq!(young.await.unwrap(), base + 4 * NANOS_PER_SEC);
    for (gat, task) in waiting {
        assert_eq!(task.await.unwrap(), gat);
    }
    let order: Vec<u64> = entered.lock().unwrap().iter().map(|gat| (gat - base) / 1_000_000).collect();
    assert_eq!(order, [4_000, 200, 300, 400, 500], "admitted in GAT order; the cancelled call never entered");
    assert_eq!((sched.waiting(), stats.accepted(), rejected(&stats)), (0, 6, 0));
}
