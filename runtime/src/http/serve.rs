//! A minimal accept loop: serves a tower service over HTTP/1.1 and HTTP/2 (h2c, prior knowledge).

use std::convert::Infallible;
use std::future::Future;

use bytes::Bytes;
use http::{Request, Response};
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tower_service::Service;

/// Serves `service` on every connection `listener` accepts until `shutdown` resolves.
/// hyper-util's auto builder picks HTTP/1.1 or HTTP/2 per connection from its first
/// bytes. Connection errors (a client that hangs up) end that connection only.
pub async fn serve<S, B>(listener: TcpListener, service: S, shutdown: impl Future<Output = ()>)
where
    S: Service<Request<Incoming>, Response = Response<B>, Error = Infallible> + Clone + Send + 'static,
    S::Future: Send + 'static,
    B: hyper::body::Body<Data = Bytes> + Send + 'static,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    tokio::pin!(shutdown);
    loop {
        let stream = tokio::select! {
            _ = &mut shutdown => return,
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                // Out of descriptors and the like: keep serving the connections we have.
                Err(_) => { tokio::time::sleep(std::time::Duration::from_millis(5)).await; continue; }
            },
        };
        let _ = stream.set_nodelay(true);
        let service = TowerToHyperService::new(service.clone());
        tokio::spawn(async move {
            let _ = auto::Builder::new(TokioExecutor::new()).serve_connection(TokioIo::new(stream), service).await;
        });
    }
}
