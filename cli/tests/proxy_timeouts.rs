//! The `tailor` binary as a sidecar (`c = 1`) against peers that stop halfway: a client
//! that stops reading a large response, and an upstream that sends half its body and then
//! stalls (over HTTP/1.1, and as a gRPC call over h2c). Each is cut off within its
//! `[limits]` timeout, counted, the request's slot and the upstream's connection are
//! given back, and the next request gets through the one slot.

use std::convert::Infallible;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{HeaderValue, Request, Response};
use http_body_util::{BodyExt, Full};
use hyper::body::{Body, Frame, Incoming};
use hyper_util::rt::{TokioExecutor, TokioIo};

mod common;
use common::proxy_proc::{free_port, metric, proxy, tmpdir, wait_for};

/// What the raw HTTP/1.1 upstream saw.
#[derive(Default)]
struct Seen {
    /// Connections on which the proxy stopped taking (or closed) a response.
    cut: AtomicUsize,
}

/// A plain HTTP/1.1 upstream on a real socket, one thread per connection: `/big` streams
/// 256 MiB, `/stall` sends half of a 1000-byte body and then waits for the proxy to close
/// the connection, anything else answers `ok`.
fn raw_upstream() -> (u16, Arc<Seen>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let seen = Arc::new(Seen::default());
    let seen2 = seen.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(stream) = stream else { continue };
            let seen = seen2.clone();
            std::thread::spawn(move || serve_raw(stream, &seen));
        }
    });
    (port, seen)
}

fn serve_raw(mut stream: TcpStream, seen: &Seen) {
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).unwrap_or(0) == 0 {
            return;
        }
        let path = line.split_whitespace().nth(1).unwrap_or("/").to_string();
        loop {
            let mut header = String::new();
            if reader.read_line(&mut header).unwrap_or(0) == 0 {
                return;
            }
            if header.trim_end().is_empty() {
                break;
            }
        }
        match path.as_str() {
            "/big" => {
                let total: usize = 256 << 20;
                let head = format!("HTTP/1.1 200 OK\r\ncontent-length: {total}\r\n\r\n");
                stream.write_all(head.as_bytes()).unwrap();
                let chunk = vec![b'x'; 64 << 10];
                let mut sent = 0;
                while sent < total {
                    if stream.write_all(&chunk).is_err() {
                        seen.cut.fetch_add(1, SeqCst);
                        return;
                    }
                    sent += chunk.len();
                }
                return;
            }
            "/stall" => {
                stream.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 1000\r\n\r\n").unwrap();
                stream.write_all(&[b'y'; 500]).unwrap();
                // Nothing more: the proxy must give up and close this connection.
                let mut rest = [0u8; 64];
                while matches!(reader.read(&mut rest), Ok(n) if n > 0) {}
                seen.cut.fetch_add(1, SeqCst);
                return;
            }
            _ => stream.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok").unwrap(),
        }
    }
}

fn sidecar_config(dir: &Path, listen: u16, upstream: u16, admin: u16, limits: &str) -> PathBuf {
    let path = dir.join("sidecar.toml");
    std::fs::write(
        &path,
        format!(
            "listen = \"127.0.0.1:{listen}\"\nupstream = \"127.0.0.1:{upstream}\"\nadmin = \"127.0.0.1:{admin}\"\n\
             c = 1\n[limits]\n{limits}\n"
        ),
    )
    .unwrap();
    path
}

/// GET `path` on a new connection: the status line and the body bytes that arrived
/// before the connection ended (or `content-length` of them).
fn get(port: u16, path: &str) -> (String, Vec<u8>) {
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    s.write_all(format!("GET {path} HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n").as_bytes()).unwrap();
    let mut reader = BufReader::new(s);
    let mut status = String::new();
    reader.read_line(&mut status).unwrap();
    loop {
        let mut header = String::new();
        reader.read_line(&mut header).unwrap();
        if header.trim_end().is_empty() {
            break;
        }
    }
    let mut body = Vec::new();
    let _ = reader.read_to_end(&mut body);
    (status.trim_end().to_string(), body)
}

#[test]
fn a_client_that_stops_reading_is_closed_and_its_slot_given_back() {
    let tmp = tmpdir("write-timeout");
    let (up, seen) = raw_upstream();
    let (listen, admin) = (free_port(), free_port());
    let cfg = sidecar_config(&tmp.0, listen, up, admin, "client_write_timeout_ms = 500");
    let _sidecar = proxy("sidecar", &cfg, admin);

    // Asks for 256 MiB and reads none of it.
    let mut stuck = TcpStream::connect(("127.0.0.1", listen)).unwrap();
    stuck.write_all(b"GET /big HTTP/1.1\r\nhost: x\r\n\r\n").unwrap();
    wait_for("the big response to start", Duration::from_secs(10), || metric(admin, "tailor_proxy_in_flight") == 1.0);
    let stuck_at = Instant::now();
    wait_for("the write timeout", Duration::from_secs(15), || {
        metric(admin, "tailor_proxy_client_write_timeouts_total") == 1.0
    });
    // Within the timeout of the socket buffers filling up, not at once.
    assert!(stuck_at.elapsed() >= Duration::from_millis(250), "closed after {:?}", stuck_at.elapsed());
    assert_eq!(metric(admin, "tailor_proxy_in_flight"), 0.0, "the slot is given back");
    wait_for("the upstream connection to be closed", Duration::from_secs(10), || seen.cut.load(SeqCst) == 1);
    wait_for("the client connection to be closed", Duration::from_secs(10), || {
        metric(admin, "tailor_proxy_connections_open") == 0.0
    });
    // The one slot serves the next request.
    let (status, body) = get(listen, "/small");
    assert_eq!((status.as_str(), body.as_slice()), ("HTTP/1.1 200 OK", b"ok".as_slice()));
    // What the stuck client gets when it reads at last: part of the body, then the end.
    stuck.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut got = Vec::new();
    let _ = stuck.read_to_end(&mut got);
    assert!(got.len() < 256 << 20, "the response was cut off ({} bytes)", got.len());
}

#[test]
fn an_upstream_that_stalls_mid_body_is_cut_off_within_the_timeout() {
    let tmp = tmpdir("stall");
    let (up, seen) = raw_upstream();
    let (listen, admin) = (free_port(), free_port());
    let cfg = sidecar_config(&tmp.0, listen, up, admin, "upstream_body_timeout_ms = 500");
    let _sidecar = proxy("sidecar", &cfg, admin);

    let start = Instant::now();
    let (status, body) = get(listen, "/stall");
    let took = start.elapsed();
    assert_eq!(status, "HTTP/1.1 200 OK");
    assert_eq!(body.len(), 500, "the half the upstream sent, then the connection ends");
    assert!(took >= Duration::from_millis(400) && took < Duration::from_secs(5), "cut off after {took:?}");
    assert_eq!(metric(admin, "tailor_proxy_relay_errors_total{kind=\"upstream_body_timeout\"}"), 1.0);
    assert_eq!(metric(admin, "tailor_proxy_in_flight"), 0.0);
    wait_for("the upstream connection to be closed", Duration::from_secs(10), || seen.cut.load(SeqCst) == 1);
    let (status, body) = get(listen, "/small");
    assert_eq!((status.as_str(), body.as_slice()), ("HTTP/1.1 200 OK", b"ok".as_slice()));
}

/// A response body that sends one data frame and then nothing, for ever.
struct HalfThenSilence(bool);

impl Body for HalfThenSilence {
    type Data = Bytes;
    type Error = Infallible;
    fn poll_frame(mut self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        if self.0 {
            return Poll::Pending;
        }
        self.0 = true;
        Poll::Ready(Some(Ok(Frame::data(Bytes::from_static(b"\0\0\0\0\x05hello")))))
    }
}

#[test]
fn a_grpc_upstream_that_stalls_mid_stream_ends_the_call_with_deadline_exceeded() {
    let tmp = tmpdir("grpc-stall");
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    // An h2c gRPC upstream whose response stream stops after its first message.
    let up = rt.block_on(async {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else { continue };
                tokio::spawn(async move {
                    let svc = hyper::service::service_fn(|_req: Request<Incoming>| async {
                        let mut r = Response::new(HalfThenSilence(false));
                        r.headers_mut().insert("content-type", HeaderValue::from_static("application/grpc"));
                        Ok::<_, Infallible>(r)
                    });
                    let _ = hyper::server::conn::http2::Builder::new(TokioExecutor::new())
                        .serve_connection(TokioIo::new(stream), svc)
                        .await;
                });
            }
        });
        port
    });
    let (listen, admin) = (free_port(), free_port());
    let cfg = sidecar_config(&tmp.0, listen, up, admin, "upstream_body_timeout_ms = 500");
    let _sidecar = proxy("sidecar", &cfg, admin);

    rt.block_on(async {
        let stream = tokio::net::TcpStream::connect(("127.0.0.1", listen)).await.unwrap();
        let (mut send, conn) =
            hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(stream)).await.unwrap();
        tokio::spawn(conn);
        let req = Request::post(format!("http://127.0.0.1:{listen}/pkg.Svc/Stream"))
            .header("content-type", "application/grpc")
            .header("te", "trailers")
            .body(Full::new(Bytes::from_static(b"\0\0\0\0\0")))
            .unwrap();
        let start = Instant::now();
        let response = send.send_request(req).await.unwrap();
        assert_eq!(response.status(), 200);
        let collected = tokio::time::timeout(Duration::from_secs(5), response.into_body().collect())
            .await
            .expect("the call ends within the timeout")
            .expect("ended with trailers, not a reset");
        let took = start.elapsed();
        assert!(took >= Duration::from_millis(400), "ended after {took:?}");
        let trailers = collected.trailers().cloned().expect("trailers");
        assert_eq!(trailers.get("grpc-status").unwrap(), "4", "DEADLINE_EXCEEDED: {trailers:?}");
        assert_eq!(trailers.get("tailor-error").unwrap(), "upstream_body_timeout");
        assert_eq!(collected.to_bytes().as_ref(), b"\0\0\0\0\x05hello", "the message that did arrive");
    });
    assert_eq!(metric(admin, "tailor_proxy_relay_errors_total{kind=\"upstream_body_timeout\"}"), 1.0);
    assert_eq!(metric(admin, "tailor_proxy_in_flight"), 0.0);
}
