//! The floor of the sidecar's cost: an HTTP/1.1 relay on the stack the sidecar is built
//! on (tokio's current-thread runtime, hyper's server and its HTTP/1.1 client, a pool of
//! kept-alive upstream connections) and nothing else — no context, no queue, no limit,
//! no metrics, no timers. `benches/sidecar_cost_ab.py --bare` runs it beside nginx and the
//! sidecar: what it costs above nginx is hyper's and tokio's, not Tailor's.
//!
//!     bare_relay --listen 127.0.0.1:8080 --upstream 127.0.0.1:9000

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use clap::Parser;
use http::{Request, Response, Uri};
use hyper::body::Incoming;
use hyper::client::conn::http1::SendRequest;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use tokio::net::{TcpListener, TcpStream};

#[derive(Parser)]
#[command(about = "A bare hyper HTTP/1.1 relay: the sidecar's stack without Tailor (a cost floor)")]
struct Args {
    #[arg(long)]
    listen: SocketAddr,
    #[arg(long)]
    upstream: SocketAddr,
}

/// Idle upstream connections, most recently used last.
#[derive(Clone)]
struct Pool {
    upstream: SocketAddr,
    idle: Arc<Mutex<Vec<SendRequest<Incoming>>>>,
}

impl Pool {
    /// An idle connection that can take a request now (the most recently used first), as
    /// the sidecar's pool picks one; a new connection when none can.
    async fn sender(&self) -> std::io::Result<SendRequest<Incoming>> {
        {
            let mut idle = self.idle.lock().expect("pool lock");
            idle.retain(|s| !s.is_closed());
            if let Some(i) = idle.iter().rposition(|s| s.is_ready()) {
                return Ok(idle.remove(i));
            }
        }
        let io = TokioIo::new(TcpStream::connect(self.upstream).await?);
        io.inner().set_nodelay(true)?;
        let (sender, conn) = hyper::client::conn::http1::handshake(io).await.map_err(std::io::Error::other)?;
        tokio::spawn(conn);
        Ok(sender)
    }

    async fn relay(&self, mut req: Request<Incoming>) -> Result<Response<Incoming>, std::io::Error> {
        let path = req.uri().path_and_query().map_or("/", |p| p.as_str());
        *req.uri_mut() = Uri::try_from(path).map_err(std::io::Error::other)?;
        let mut sender = self.sender().await?;
        let response = sender.send_request(req).await.map_err(std::io::Error::other)?;
        self.idle.lock().expect("pool lock").push(sender);
        Ok(response)
    }
}

fn main() -> std::io::Result<()> {
    let args = Args::parse();
    let pool = Pool { upstream: args.upstream, idle: Arc::new(Mutex::new(Vec::new())) };
    tokio::runtime::Builder::new_current_thread().enable_all().build()?.block_on(async move {
        let listener = TcpListener::bind(args.listen).await?;
        println!("bare relay listening on {}", listener.local_addr()?);
        loop {
            let (stream, _) = listener.accept().await?;
            stream.set_nodelay(true)?;
            let pool = pool.clone();
            tokio::spawn(async move {
                let service = service_fn(move |req| {
                    let pool = pool.clone();
                    async move { pool.relay(req).await }
                });
                let _ =
                    hyper::server::conn::http1::Builder::new().serve_connection(TokioIo::new(stream), service).await;
            });
        }
    })
}
