//! A minimal accept loop: serves a tower service over HTTP/1.1 and HTTP/2 (h2c, prior knowledge).

use std::convert::Infallible;
use std::future::Future;

use bytes::Bytes;
use http::{Request, Response};
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use hyper_util::service::TowerToHyperService;
use tailor_telemetry::AcceptLoop;
use tokio::net::TcpListener;
use tower_service::Service;

/// Serves `service` on every connection `listener` accepts until `shutdown` resolves.
/// hyper-util's auto builder picks HTTP/1.1 or HTTP/2 per connection from its first
/// bytes. Connection errors (a client that hangs up) end that connection only; accept
/// errors back off ([`AcceptLoop`], the accept loop every Tailor server shares).
pub async fn serve<S, B>(listener: TcpListener, service: S, shutdown: impl Future<Output = ()>)
where
    S: Service<Request<Incoming>, Response = Response<B>, Error = Infallible> + Clone + Send + 'static,
    S::Future: Send + 'static,
    B: hyper::body::Body<Data = Bytes> + Send + 'static,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    AcceptLoop::new("http server")
        .run(listener, shutdown, move |stream| {
            let service = TowerToHyperService::new(service.clone());
            async move {
                let _ = auto::Builder::new(TokioExecutor::new()).serve_connection(TokioIo::new(stream), service).await;
            }
        })
        .await
}
