//! Context propagation through a real two-hop hyper chain on loopback, over
//! HTTP/1.1 and HTTP/2: the edge strips and stamps, the next hop sees the same
//! GAT one hop further, malformed contexts are counted and still served.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;

use bytes::Bytes;
use http::{Request, Response, Version};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use tailor_core::wire::{EdgeRoute, WireStats};
use tailor_core::Context;
use tailor_runtime::cpu::realtime_ns;
use tailor_runtime::http::{serve, ContextConfig, ContextLayer, InjectLayer};
use tokio::net::TcpListener;
use tower::{Service, ServiceBuilder, ServiceExt};

type HttpClient = Client<HttpConnector, Full<Bytes>>;

fn client(http2: bool) -> HttpClient {
    Client::builder(TokioExecutor::new()).http2_only(http2).build_http()
}

/// Starts `service` on an ephemeral loopback port; it stops when the test's runtime ends.
async fn start<S>(service: S) -> SocketAddr
where
    S: Service<Request<Incoming>, Response = Response<Full<Bytes>>, Error = Infallible> + Clone + Send + 'static,
    S::Future: Send + 'static,
{
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(serve(listener, service, std::future::pending()));
    addr
}

fn describe(ctx: &Context, version: Version) -> String {
    format!("gat={} hop={} class={} version={version:?}", ctx.gat, ctx.hop, ctx.class)
}

/// The second tier: answers with the context it received.
async fn start_tier2() -> (SocketAddr, Arc<WireStats>) {
    let layer = ContextLayer::new(ContextConfig::hop());
    let stats = layer.stats();
    let service = ServiceBuilder::new().layer(layer).service_fn(|req: Request<Incoming>| async move {
        let ctx = *req.extensions().get::<Context>().expect("ContextLayer sets the context");
        Ok::<_, Infallible>(Response::new(Full::new(Bytes::from(describe(&ctx, req.version())))))
    });
    (start(service).await, stats)
}

/// The edge: stamps, then calls tier 2 through a client that injects the context.
async fn start_edge(tier2: SocketAddr, http2: bool) -> SocketAddr {
    let downstream = ServiceBuilder::new().layer(InjectLayer).service(client(http2));
    let route = EdgeRoute { class: 1, budget: None };
    let service = ServiceBuilder::new().layer(ContextLayer::new(ContextConfig::edge(route))).service_fn(
        move |req: Request<Incoming>| {
            let mut downstream = downstream.clone();
            async move {
                let ctx = *req.extensions().get::<Context>().unwrap();
                let call = Request::get(format!("http://{tier2}/")).body(Full::new(Bytes::new())).unwrap();
                let answer = downstream.ready().await.unwrap().call(call).await.unwrap();
                let body = answer.into_body().collect().await.unwrap().to_bytes();
                let text = format!("edge {} | tier2 {}", describe(&ctx, req.version()), String::from_utf8_lossy(&body));
                Ok::<_, Infallible>(Response::new(Full::new(Bytes::from(text))))
            }
        },
    );
    start(service).await
}

async fn get(client: &HttpClient, addr: SocketAddr, headers: &[(&str, &str)]) -> (http::StatusCode, String) {
    let mut req = Request::get(format!("http://{addr}/"));
    for (name, value) in headers {
        req = req.header(*name, *value);
    }
    let resp = client.request(req.body(Full::new(Bytes::new())).unwrap()).await.unwrap();
    let status = resp.status();
    (status, String::from_utf8(resp.into_body().collect().await.unwrap().to_bytes().to_vec()).unwrap())
}

fn field(text: &str, part: usize, key: &str) -> String {
    let part = text.split(" | ").nth(part).unwrap();
    let prefix = format!("{key}=");
    part.split(' ').find_map(|w| w.strip_prefix(&prefix)).unwrap_or_else(|| panic!("no {key} in {part}")).to_string()
}

async fn chain(http2: bool) {
    let version = if http2 { "HTTP/2.0" } else { "HTTP/1.1" };
    let (tier2, tier2_stats) = start_tier2().await;
    let edge = start_edge(tier2, http2).await;
    let client = client(http2);

    // A client forges a very old GAT, in both carriers: the edge must ignore it.
    let before = realtime_ns();
    let forged = "1.g5.c0.k1.h7";
    let (status, text) =
        get(&client, edge, &[("tailor-context", forged), ("baggage", "tailor=1.g5.c0.k1.h7,k=v")]).await;
    let after = realtime_ns();
    assert_eq!(status, 200, "{text}");
    let edge_gat: u64 = field(&text, 0, "gat").parse().unwrap();
    assert!((before..=after).contains(&edge_gat), "edge must stamp a fresh GAT: {text}");
    assert_eq!(field(&text, 0, "hop"), "0", "{text}");
    assert_eq!(field(&text, 0, "class"), "1", "route class: {text}");
    assert_eq!(field(&text, 0, "version"), version, "{text}");
    assert_eq!(field(&text, 1, "gat"), edge_gat.to_string(), "tier 2 sees the edge's GAT: {text}");
    assert_eq!(field(&text, 1, "hop"), "1", "{text}");
    assert_eq!(field(&text, 1, "class"), "1", "{text}");
    assert_eq!(field(&text, 1, "version"), version, "{text}");
    assert_eq!(tier2_stats.accepted(), 1);

    // Malformed context straight to tier 2: counted, and the request is still served.
    let (status, text) = get(&client, tier2, &[("tailor-context", "1.gNOPE")]).await;
    assert_eq!(status, 200);
    assert_eq!(field(&text, 0, "hop"), "0", "served as if it arrived now: {text}");
    assert_eq!(tier2_stats.rejected().map(|(_, n)| n).sum::<u64>(), 1);

    // A context carried only in baggage (an OpenTelemetry-only hop) is read too.
    let gat = realtime_ns() - 1_000_000;
    let (status, text) = get(&client, tier2, &[("baggage", &format!("a=b,tailor=1.g{gat}.c0.k1.h3"))]).await;
    assert_eq!(status, 200);
    assert_eq!((field(&text, 0, "gat"), field(&text, 0, "hop")), (gat.to_string(), "3".to_string()), "{text}");
    assert_eq!(tier2_stats.accepted(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_hop_chain_over_http1() {
    chain(false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_hop_chain_over_http2() {
    chain(true).await;
}
