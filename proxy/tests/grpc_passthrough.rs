//! gRPC through the sidecar over h2c: trailers (`grpc-status`, `grpc-message`) arrive
//! intact, and a shed call gets a trailers-only `DEADLINE_EXCEEDED`.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, HeaderValue, Request, Response};
use http_body_util::{BodyExt, Empty};
use hyper::body::{Body, Frame, Incoming};
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::net::TcpListener;

/// A body of fixed frames (data, then trailers).
struct Frames(VecDeque<Frame<Bytes>>);

impl Body for Frames {
    type Data = Bytes;
    type Error = Infallible;
    fn poll_frame(mut self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        Poll::Ready(self.0.pop_front().map(Ok))
    }
}

/// A gRPC-shaped h2c server: echoes the `tailor-context` it got in a data frame, then
/// trailers `grpc-status: 0`, `grpc-message: fine`.
async fn upstream() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let (stream, _) = listener.accept().await.unwrap();
            tokio::spawn(async move {
                let svc = service_fn(|req: Request<Incoming>| async move {
                    let ctx = req.headers().get("tailor-context").map(|v| v.as_bytes().to_vec()).unwrap_or_default();
                    let mut trailers = HeaderMap::new();
                    trailers.insert("grpc-status", HeaderValue::from_static("0"));
                    trailers.insert("grpc-message", HeaderValue::from_static("fine"));
                    let frames = Frames(VecDeque::from([Frame::data(Bytes::from(ctx)), Frame::trailers(trailers)]));
                    let mut r = Response::new(frames);
                    r.headers_mut().insert("content-type", HeaderValue::from_static("application/grpc"));
                    Ok::<_, Infallible>(r)
                });
                let _ = hyper::server::conn::http2::Builder::new(TokioExecutor::new())
                    .serve_connection(TokioIo::new(stream), svc)
                    .await;
            });
        }
    });
    addr
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grpc_trailers_pass_through_and_shed_calls_are_trailers_only() {
    let up = upstream().await;
    let listen = tailor_telemetry::testing::free_port();
    let dir = std::env::temp_dir().join(format!("tailor-proxy-grpc-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let cfg = dir.join("sidecar.toml");
    std::fs::write(&cfg, format!("listen = \"127.0.0.1:{listen}\"\nupstream = \"{up}\"\nc = 2\n")).unwrap();
    tokio::spawn(tailor_proxy::serve::run_sidecar(cfg));
    let client =
        hyper_util::client::legacy::Client::builder(TokioExecutor::new()).http2_only(true).build_http::<Empty<Bytes>>();
    let call = |ctx: Option<String>| {
        let mut req = Request::post(format!("http://127.0.0.1:{listen}/helloworld.Greeter/SayHello"))
            .header("content-type", "application/grpc")
            .header("te", "trailers");
        if let Some(c) = ctx {
            req = req.header("tailor-context", c);
        }
        client.request(req.body(Empty::new()).unwrap())
    };
    // Ready when it accepts.
    let mut tries = 0;
    let response = loop {
        match call(None).await {
            Ok(r) => break r,
            Err(_) if tries < 200 => {
                tries += 1;
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            Err(e) => panic!("sidecar never answered: {e}"),
        }
    };
    assert_eq!(response.version(), http::Version::HTTP_2);
    let collected = response.into_body().collect().await.unwrap();
    let trailers = collected.trailers().cloned().expect("trailers arrive");
    assert_eq!(trailers.get("grpc-status").unwrap(), "0");
    assert_eq!(trailers.get("grpc-message").unwrap(), "fine");
    let ctx = String::from_utf8(collected.to_bytes().to_vec()).unwrap();
    assert!(ctx.starts_with("1.g"), "the service got the stamped context: {ctx:?}");

    // Deadline already passed: shed before the service, as gRPC expects it.
    let expired = "1.g10.d20.c0.k1.h1".to_string();
    let response = call(Some(expired)).await.unwrap();
    assert_eq!(response.headers().get("grpc-status").unwrap(), "4");
    assert_eq!(response.headers().get("tailor-shed").unwrap(), "deadline_expired");
    assert!(response.into_body().collect().await.unwrap().to_bytes().is_empty());
    let _ = std::fs::remove_dir_all(dir);
}
