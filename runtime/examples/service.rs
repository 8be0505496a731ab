//! A minimal Tailor service in Rust: reads and clamps the request context (or stamps it
//! at the edge), runs the handler's CPU work as a job of the request under the
//! configured backend (ordered by GAT), and forwards the context to an optional next tier.
//!
//! ```text
//! cargo run --release -p tailor-runtime --example service -- --listen 127.0.0.1:8083
//! curl -si -H 'tailor-demand-us: 2000' -H 'tailor-context: 1.g1732272000123456789.c0.k1.h0' http://127.0.0.1:8083/
//! ```
//!
//! Flags: `--listen ADDR` (port 0: any; the bound address is printed as
//! `listening on ADDR`), `--next URL` (call it per request, with the child context),
//! `--edge` (strip incoming contexts and stamp the GAT here), `--index N` (which value
//! of `tailor-demand-us` is this tier's CPU demand, µs; default 0), `--backend JSON`
//! (the runtime's backend as in a config file, default
//! `{"kind":"cooperative","policy":{"kind":"gfifo"},"c":<CPUs>}`; `{"kind":"kernel",
//! "table":"/dev/shm/tailor-sched"}` registers each job with the node's `tailor agent`).
//!
//! The reply's `tailor-seen-gat` header lists the GAT this tier scheduled the request
//! by, then the next tier's: every hop of a chain reports what it saw. Stops on
//! SIGINT or SIGTERM.

use std::convert::Infallible;
use std::io::Write as _;
use std::net::SocketAddr;

use bytes::Bytes;
use http::{HeaderMap, Request, Response, StatusCode, Uri};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper_util::client::legacy::{connect::HttpConnector, Client};
use hyper_util::rt::{TokioExecutor, TokioTimer};
use tailor_core::{Context, EdgeRoute, PolicySpec};
use tailor_runtime::http::{ContextConfig, ContextLayer, Inject, InjectLayer};
use tailor_runtime::{available_cpus, cpu, BackendSpec, Scheduler};
use tower::{ServiceBuilder, ServiceExt as _};

/// Request header with each tier's CPU demand, µs, comma-separated (the demo's convention).
const DEMAND_HEADER: &str = "tailor-demand-us";
/// Response header: the GAT each tier scheduled the request by, this tier first.
const SEEN_GAT_HEADER: &str = "tailor-seen-gat";

struct Args {
    listen: SocketAddr,
    next: Option<Uri>,
    edge: bool,
    index: usize,
    backend: BackendSpec,
}

fn parse_args() -> Result<Args, String> {
    let mut args = Args {
        listen: "127.0.0.1:8083".parse().expect("valid"),
        next: None,
        edge: false,
        index: 0,
        backend: BackendSpec::Cooperative { policy: PolicySpec::Gfifo, c: available_cpus() },
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        if flag == "--edge" {
            args.edge = true;
            continue;
        }
        let value = it.next().ok_or_else(|| format!("{flag} needs a value"))?;
        match flag.as_str() {
            "--listen" => args.listen = value.parse().map_err(|e| format!("--listen {value}: {e}"))?,
            "--next" => args.next = Some(value.parse().map_err(|e| format!("--next {value}: {e}"))?),
            "--index" => args.index = value.parse().map_err(|e| format!("--index {value}: {e}"))?,
            "--backend" => {
                args.backend = serde_json::from_str(&value).map_err(|e| {
                    format!("--backend {value}: {e} (e.g. {{\"kind\":\"kernel\",\"table\":\"/dev/shm/tailor-sched\"}})")
                })?
            }
            other => return Err(format!("unknown flag {other}; see the doc comment of runtime/examples/service.rs")),
        }
    }
    Ok(args)
}

/// This tier's CPU demand (µs): value `index` of `tailor-demand-us`, 0 without the header.
fn demand_us(headers: &HeaderMap, index: usize) -> Result<u64, String> {
    let Some(value) = headers.get(DEMAND_HEADER) else { return Ok(0) };
    let text = value.to_str().map_err(|_| format!("header `{DEMAND_HEADER}` is not ASCII"))?;
    let field = text.split(',').nth(index).ok_or_else(|| {
        format!("header `{DEMAND_HEADER}: {text}` has no value for tier {index}; give one µs value per tier")
    })?;
    field
        .trim()
        .parse()
        .map_err(|_| format!("header `{DEMAND_HEADER}`: `{}` is not a whole number of µs", field.trim()))
}

type Downstream = Inject<Client<HttpConnector, Full<Bytes>>>;

fn reply(status: StatusCode, seen: Option<String>, body: String) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(Bytes::from(body)));
    *r.status_mut() = status;
    if let Some(seen) = seen.and_then(|s| s.parse().ok()) {
        r.headers_mut().insert(SEEN_GAT_HEADER, seen);
    }
    r
}

/// One request: burn its demand as a job of its context, then call the next tier.
async fn handle(
    req: Request<Incoming>,
    sched: Scheduler,
    index: usize,
    next: Option<(Uri, Downstream)>,
) -> Result<Response<Full<Bytes>>, Infallible> {
    // ContextLayer put the extracted and clamped (or stamped) context here.
    let ctx = *req.extensions().get::<Context>().expect("ContextLayer runs first");
    let demand_ns = match demand_us(req.headers(), index) {
        Ok(us) => us.saturating_mul(1_000),
        Err(message) => return Ok(reply(StatusCode::BAD_REQUEST, None, message + "\n")),
    };
    // On a thread of the scheduler's pool, admitted (or prioritised) by the GAT.
    if let Err(e) = sched.spawn(ctx, move |_permit| cpu::burn_cpu(demand_ns)).await {
        return Ok(reply(StatusCode::SERVICE_UNAVAILABLE, None, format!("{e}\n")));
    }
    let mut seen = ctx.gat.to_string();
    if let Some((uri, client)) = next {
        // InjectLayer adds the child context (hop + 1) to the call.
        let mut call = Request::get(uri.clone());
        if let Some(demand) = req.headers().get(DEMAND_HEADER) {
            call = call.header(DEMAND_HEADER, demand);
        }
        let call = call.body(Full::new(Bytes::new())).expect("valid uri and headers");
        let response = match client.oneshot(call).await {
            Ok(r) => r,
            Err(e) => return Ok(reply(StatusCode::BAD_GATEWAY, None, format!("next tier {uri}: {e}\n"))),
        };
        let status = response.status();
        if let Some(below) = response.headers().get(SEEN_GAT_HEADER).and_then(|v| v.to_str().ok()) {
            seen = format!("{seen},{below}");
        }
        let _ = response.into_body().collect().await;
        if !status.is_success() {
            return Ok(reply(StatusCode::BAD_GATEWAY, Some(seen), format!("next tier {uri}: status {status}\n")));
        }
    }
    Ok(reply(StatusCode::OK, Some(seen), format!("gat {} hop {}\n", ctx.gat, ctx.hop)))
}

fn main() {
    let args = match parse_args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("service: {e}");
            std::process::exit(2);
        }
    };
    let sched = match Scheduler::new(args.backend.clone()) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("service: backend: {e}");
            std::process::exit(2);
        }
    };
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("a tokio runtime");
    // Under the kernel backend the I/O thread runs above the jobs, so a saturated node
    // still accepts (and an older request can still arrive and preempt).
    if let Err(e) = sched.io_thread_started() {
        eprintln!("service: the I/O thread keeps its policy: {e}");
    }
    let config =
        if args.edge { ContextConfig::edge(EdgeRoute { class: 0, budget: None }) } else { ContextConfig::hop() };
    let mut connector = HttpConnector::new();
    connector.set_nodelay(true);
    let client: Downstream = ServiceBuilder::new().layer(InjectLayer).service(
        Client::builder(TokioExecutor::new())
            .pool_max_idle_per_host(usize::MAX)
            // Without a timer hyper-util never closes an idle connection: a burst's
            // connections to the next tier would stay open for the life of the process.
            .pool_idle_timeout(std::time::Duration::from_secs(10))
            .pool_timer(TokioTimer::new())
            .build(connector),
    );
    let next = args.next.map(|uri| (uri, client));
    let (index, handler_sched) = (args.index, sched.clone());
    let service = ServiceBuilder::new()
        .layer(ContextLayer::new(config))
        .service(tower::service_fn(move |req| handle(req, handler_sched.clone(), index, next.clone())));
    rt.block_on(async {
        let listener = match tokio::net::TcpListener::bind(args.listen).await {
            Ok(l) => l,
            Err(e) => {
                eprintln!("service: binding {}: {e}", args.listen);
                std::process::exit(2);
            }
        };
        let addr = listener.local_addr().expect("a bound socket has an address");
        let mut out = std::io::stdout().lock();
        let _ = writeln!(out, "listening on {addr} ({})", sched.describe());
        let _ = out.flush();
        drop(out);
        let mut term =
            tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).expect("SIGTERM handler");
        let shutdown = async move {
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {}
                _ = term.recv() => {}
            }
        };
        tailor_runtime::http::serve(listener, service, shutdown).await;
    });
    // The scheduler restores every thread it changed when the last handle drops.
    sched.io_thread_stopped();
}
