//! The `tailor` binary as edge and sidecar with TLS on every hop, on loopback: a client
//! speaks HTTPS/1.1 and h2 over TLS to the edge, the edge calls the sidecar over TLS, the
//! sidecar calls a TLS upstream (in this test, h1 and h2 by ALPN). Certificates are made
//! here (a throwaway CA, rcgen). Checks the context arrives stamped, gRPC trailers pass,
//! a client without TLS gets a bounded failure, an upstream whose certificate the CA did
//! not sign gets 502 `upstream_tls`, certificates reload on SIGHUP without dropping an open
//! connection (and a bad reload keeps the running ones), and curl as a third-party client.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::pin::Pin;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{HeaderMap, HeaderValue, Request, Response, Version};
use http_body_util::{BodyExt, Empty};
use hyper::body::{Body, Frame, Incoming};
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioIo};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use tailor_telemetry::testing::{sample_value, scrape_metrics, Promtool};

mod common;
use common::proxy_proc::{admin_get, free_port, metric, proxy, tmpdir};

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// A certificate authority that signs certificates for 127.0.0.1.
struct Ca {
    cert: rcgen::Certificate,
    key: rcgen::KeyPair,
}

impl Ca {
    fn new(name: &str) -> Ca {
        let key = rcgen::KeyPair::generate().unwrap();
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        params.distinguished_name.push(rcgen::DnType::CommonName, name);
        Ca { cert: params.self_signed(&key).unwrap(), key }
    }

    /// A leaf certificate and its key, PEM.
    fn leaf(&self) -> (String, String) {
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = rcgen::CertificateParams::new(vec!["127.0.0.1".to_string(), "localhost".to_string()])
            .unwrap()
            .signed_by(&key, &self.cert, &self.key)
            .unwrap();
        (cert.pem(), key.serialize_pem())
    }
}

fn server_config(cert_pem: &str, key_pem: &str) -> Arc<rustls::ServerConfig> {
    let certs = CertificateDer::pem_slice_iter(cert_pem.as_bytes()).collect::<Result<Vec<_>, _>>().unwrap();
    let key = PrivateKeyDer::from_pem_slice(key_pem.as_bytes()).unwrap();
    let mut config = rustls::ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .unwrap();
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Arc::new(config)
}

fn client_config(ca_pem: &str, alpn: &[&[u8]]) -> rustls::ClientConfig {
    let mut roots = rustls::RootCertStore::empty();
    for c in CertificateDer::pem_slice_iter(ca_pem.as_bytes()) {
        roots.add(c.unwrap()).unwrap();
    }
    let mut config = rustls::ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    config
}

/// A body of fixed frames (data, then trailers).
struct Frames(VecDeque<Frame<Bytes>>);

impl Body for Frames {
    type Data = Bytes;
    type Error = Infallible;
    fn poll_frame(mut self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        Poll::Ready(self.0.pop_front().map(Ok))
    }
}

/// A TLS upstream (h1 and h2 by ALPN) that answers with the context and HTTP version it
/// got in `x-seen-context` / `x-seen-version`; gRPC calls get trailers `grpc-status: 0`.
async fn tls_upstream(config: Arc<rustls::ServerConfig>) -> u16 {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let acceptor = tokio_rustls::TlsAcceptor::from(config);
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else { continue };
            let acceptor = acceptor.clone();
            tokio::spawn(async move {
                let Ok(stream) = acceptor.accept(stream).await else { return };
                let svc = hyper::service::service_fn(|req: Request<Incoming>| async move {
                    let ctx = req.headers().get("tailor-context").cloned().unwrap_or(HeaderValue::from_static("none"));
                    let grpc = req.headers().get("content-type").is_some_and(|v| v == "application/grpc");
                    let mut frames = VecDeque::from([Frame::data(Bytes::from_static(b"ok"))]);
                    if grpc {
                        let mut trailers = HeaderMap::new();
                        trailers.insert("grpc-status", HeaderValue::from_static("0"));
                        trailers.insert("grpc-message", HeaderValue::from_static("fine"));
                        frames.push_back(Frame::trailers(trailers));
                    }
                    let mut r = Response::new(Frames(frames));
                    r.headers_mut().insert("x-seen-context", ctx);
                    r.headers_mut()
                        .insert("x-seen-version", HeaderValue::from_str(&format!("{:?}", req.version())).unwrap());
                    if grpc {
                        r.headers_mut().insert("content-type", HeaderValue::from_static("application/grpc"));
                    }
                    Ok::<_, Infallible>(r)
                });
                let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                    .serve_connection(TokioIo::new(stream), svc)
                    .await;
            });
        }
    });
    port
}

/// The certificate a new TLS connection to `port` is served with.
async fn served_certificate(port: u16, ca_pem: &str) -> Vec<u8> {
    let connector = tokio_rustls::TlsConnector::from(Arc::new(client_config(ca_pem, &[b"http/1.1"])));
    let tcp = tokio::net::TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    let tls = connector.connect(ServerName::try_from("127.0.0.1").unwrap(), tcp).await.unwrap();
    tls.get_ref().1.peer_certificates().unwrap()[0].to_vec()
}

fn der(cert_pem: &str) -> Vec<u8> {
    CertificateDer::from_pem_slice(cert_pem.as_bytes()).unwrap().to_vec()
}

#[test]
fn tls_on_every_hop_with_reload_and_failures() {
    let dir = tmpdir("tls");
    let ca = Ca::new("tailor test CA");
    let ca_pem = ca.cert.pem();
    let (server_pem, server_key) = ca.leaf();
    let write = |name: &str, text: &str| std::fs::write(dir.0.join(name), text).unwrap();
    write("ca.pem", &ca_pem);
    write("server.pem", &server_pem);
    write("server.key", &server_key);
    let rogue_ca = Ca::new("a CA nobody trusts");
    let (rogue_pem, rogue_key) = rogue_ca.leaf();

    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let upstream = rt.block_on(tls_upstream(server_config(&server_pem, &server_key)));
    let rogue = rt.block_on(tls_upstream(server_config(&rogue_pem, &rogue_key)));

    let (sidecar, sidecar_admin, edge, edge_admin) = (free_port(), free_port(), free_port(), free_port());
    let tls = "[tls]\ncert_file = \"server.pem\"\nkey_file = \"server.key\"\n[upstream_tls]\nca_file = \"ca.pem\"\n";
    let sidecar_cfg = dir.0.join("sidecar.toml");
    std::fs::write(
        &sidecar_cfg,
        format!("listen = \"127.0.0.1:{sidecar}\"\nupstream = \"127.0.0.1:{upstream}\"\nadmin = \"127.0.0.1:{sidecar_admin}\"\nc = 4\n{tls}"),
    )
    .unwrap();
    let edge_cfg = dir.0.join("edge.toml");
    std::fs::write(
        &edge_cfg,
        format!(
            "listen = \"127.0.0.1:{edge}\"\nadmin = \"127.0.0.1:{edge_admin}\"\n{tls}[limits]\nheader_read_timeout_ms = 1000\n\
             [[routes]]\nname = \"rogue\"\npath_prefix = \"/rogue\"\nupstreams = [\"127.0.0.1:{rogue}\"]\n\
             [[routes]]\nname = \"main\"\nclass = 1\nslo_ms = 5000\nupstreams = [\"127.0.0.1:{sidecar}\"]\n"
        ),
    )
    .unwrap();
    let _sidecar = proxy("sidecar", &sidecar_cfg, sidecar_admin);
    let edge_proc = proxy("edge", &edge_cfg, edge_admin);

    rt.block_on(async {
        let https = |h2: bool| {
            let b = hyper_rustls::HttpsConnectorBuilder::new()
                // hyper-rustls sets ALPN itself (h2 for the h2 client).
                .with_tls_config(client_config(&ca_pem, &[]))
                .https_only();
            let mut client = Client::builder(TokioExecutor::new());
            if h2 {
                client.http2_only(true);
                client.build::<_, Empty<Bytes>>(b.enable_http2().build())
            } else {
                client.build::<_, Empty<Bytes>>(b.enable_http1().build())
            }
        };
        let url = |path: &str| format!("https://127.0.0.1:{edge}{path}");

        // HTTPS/1.1 and h2 over TLS through edge → sidecar → upstream; the context stamped.
        for (h2, version) in [(false, Version::HTTP_11), (true, Version::HTTP_2)] {
            let r = https(h2).get(url("/echo").parse().unwrap()).await.unwrap();
            assert_eq!(r.status(), 200);
            assert_eq!(r.version(), version);
            assert_eq!(r.headers()["x-seen-version"], format!("{version:?}").as_str(), "same version on every hop");
            let ctx = r.headers()["x-seen-context"].to_str().unwrap().to_string();
            assert!(ctx.starts_with("1.g") && ctx.contains(".c1.") && ctx.contains(".d"), "stamped by the edge: {ctx}");
            assert_eq!(r.into_body().collect().await.unwrap().to_bytes(), "ok");
        }

        // gRPC over TLS: the trailers arrive intact.
        let call = Request::post(url("/helloworld.Greeter/SayHello"))
            .header("content-type", "application/grpc")
            .header("te", "trailers")
            .body(Empty::new())
            .unwrap();
        let r = https(true).request(call).await.unwrap();
        let trailers = r.into_body().collect().await.unwrap().trailers().cloned().expect("trailers arrive");
        assert_eq!(trailers["grpc-status"], "0");
        assert_eq!(trailers["grpc-message"], "fine");

        // An upstream whose certificate the CA did not sign: 502 with the reason.
        let r = https(false).get(url("/rogue").parse().unwrap()).await.unwrap();
        assert_eq!(r.status(), 502);
        assert_eq!(r.headers()["tailor-error"], "upstream_tls");
        let body = r.into_body().collect().await.unwrap().to_bytes();
        let body = String::from_utf8_lossy(&body);
        assert!(body.contains("TLS handshake with the upstream failed") && body.contains("UnknownIssuer"), "{body}");
        assert_eq!(metric(edge_admin, "tailor_proxy_relay_errors_total{kind=\"upstream_tls\"}"), 1.0);
    });

    // No TLS at a TLS listener: a bounded failure, and the edge stays healthy.
    let start = Instant::now();
    let mut plain = TcpStream::connect(("127.0.0.1", edge)).unwrap();
    plain.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    plain.write_all(b"GET /echo HTTP/1.1\r\nhost: x\r\n\r\n").unwrap();
    let mut answer = Vec::new();
    let _ = plain.read_to_end(&mut answer);
    assert!(!answer.starts_with(b"HTTP/"), "no HTTP answer in the clear");
    let mut silent = TcpStream::connect(("127.0.0.1", edge)).unwrap();
    silent.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let _ = silent.read_to_end(&mut answer);
    assert!(start.elapsed() < Duration::from_secs(5), "closed within header_read_timeout_ms: {:?}", start.elapsed());
    assert_eq!(metric(edge_admin, "tailor_proxy_tls_handshake_failures_total"), 2.0);
    assert_eq!(admin_get(edge_admin, "/healthz").unwrap().0, 200);
    // The admin endpoint is the telemetry crate's: its exposition passes promtool.
    for admin in [edge_admin, sidecar_admin] {
        let scrape = scrape_metrics(SocketAddr::from(([127, 0, 0, 1], admin))).unwrap();
        match &scrape.promtool {
            Promtool::Clean => {}
            Promtool::Absent => eprintln!("skipping promtool: not installed (apt-get install prometheus)"),
            Promtool::Problems(p) => panic!("promtool check metrics: {p}\n{}", scrape.body),
        }
        assert!(sample_value(&scrape.body, "tailor_proxy_requests_total").is_some_and(|n| n >= 3.0), "{}", scrape.body);
    }

    // A third-party client: curl over h2 and HTTP/1.1.
    match Command::new("curl").arg("--version").output() {
        Ok(o) if o.status.success() => {
            for (flag, want) in [("--http2", "2 200"), ("--http1.1", "1.1 200")] {
                let out = Command::new("curl")
                    .args(["-sS", flag, "--cacert"])
                    .arg(dir.0.join("ca.pem"))
                    .args(["-o", "/dev/null", "-w", "%{http_version} %{http_code}"])
                    .arg(format!("https://127.0.0.1:{edge}/echo"))
                    .stderr(Stdio::inherit())
                    .output()
                    .unwrap();
                assert_eq!(String::from_utf8_lossy(&out.stdout), want, "curl {flag}");
            }
        }
        _ => eprintln!("skipping the curl check: curl is not installed"),
    }

    // Reload: new certificates for new connections; an open h2 connection keeps working.
    rt.block_on(async {
        let connector = tokio_rustls::TlsConnector::from(Arc::new(client_config(&ca_pem, &[b"h2"])));
        let tcp = tokio::net::TcpStream::connect(("127.0.0.1", edge)).await.unwrap();
        let tls = connector.connect(ServerName::try_from("127.0.0.1").unwrap(), tcp).await.unwrap();
        let (mut open, conn) =
            hyper::client::conn::http2::handshake::<_, _, Empty<Bytes>>(TokioExecutor::new(), TokioIo::new(tls))
                .await
                .unwrap();
        tokio::spawn(conn);
        let get = || Request::get(format!("https://127.0.0.1:{edge}/echo")).body(Empty::new()).unwrap();
        assert_eq!(open.send_request(get()).await.unwrap().status(), 200);
        assert_eq!(served_certificate(edge, &ca_pem).await, der(&server_pem));

        let (new_pem, new_key) = ca.leaf();
        write("server.pem", &new_pem);
        write("server.key", &new_key);
        edge_proc.signal("-HUP");
        let start = Instant::now();
        while served_certificate(edge, &ca_pem).await != der(&new_pem) {
            assert!(start.elapsed() < Duration::from_secs(10), "the new certificate is never served");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert_eq!(open.send_request(get()).await.unwrap().status(), 200, "the open connection survives the reload");

        // A key that does not match: the reload is refused, the running certificate kept.
        write("server.key", &ca.leaf().1);
        edge_proc.signal("-HUP");
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert_eq!(served_certificate(edge, &ca_pem).await, der(&new_pem));
        assert_eq!(open.send_request(get()).await.unwrap().status(), 200);
    });

    // The same mismatch at start: a clear error naming the file and the field.
    let bad_admin = free_port();
    let bad_cfg = dir.0.join("bad.toml");
    std::fs::write(
        &bad_cfg,
        format!(
            "listen = \"127.0.0.1:{}\"\nupstream = \"127.0.0.1:{upstream}\"\nadmin = \"127.0.0.1:{bad_admin}\"\n{tls}",
            free_port()
        ),
    )
    .unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_tailor"))
        .args(["proxy", "sidecar", "--config"])
        .arg(&bad_cfg)
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("bad.toml") && err.contains("`tls.key_file`") && err.contains("does not match"), "{err}");
}

/// A client certificate (for client authentication) signed by `ca`, and its key, PEM.
fn client_leaf(ca: &Ca) -> (String, String) {
    let key = rcgen::KeyPair::generate().unwrap();
    let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    params.distinguished_name.push(rcgen::DnType::CommonName, "a client");
    params.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ClientAuth];
    (params.signed_by(&key, &ca.cert, &ca.key).unwrap().pem(), key.serialize_pem())
}

/// One HTTPS/1.1 GET of `path` on `port` presenting `identity` (certificate and key PEM);
/// the raw answer, or the error that ended the connection.
async fn get_presenting(
    port: u16,
    ca_pem: &str,
    identity: Option<&(String, String)>,
    path: &str,
) -> Result<String, String> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut roots = rustls::RootCertStore::empty();
    roots.add(CertificateDer::from_pem_slice(ca_pem.as_bytes()).unwrap()).unwrap();
    let builder = rustls::ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots);
    let config = match identity {
        None => builder.with_no_client_auth(),
        Some((cert, key)) => builder
            .with_client_auth_cert(
                CertificateDer::pem_slice_iter(cert.as_bytes()).collect::<Result<Vec<_>, _>>().unwrap(),
                PrivateKeyDer::from_pem_slice(key.as_bytes()).unwrap(),
            )
            .unwrap(),
    };
    let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
    let tcp = tokio::net::TcpStream::connect(("127.0.0.1", port)).await.map_err(|e| e.to_string())?;
    let exchange = async {
        let mut tls = connector.connect(ServerName::try_from("127.0.0.1").unwrap(), tcp).await?;
        tls.write_all(format!("GET {path} HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n").as_bytes()).await?;
        let mut answer = Vec::new();
        tls.read_to_end(&mut answer).await?;
        Ok::<_, std::io::Error>(String::from_utf8_lossy(&answer).into_owned())
    };
    match tokio::time::timeout(Duration::from_secs(10), exchange).await {
        Ok(Ok(answer)) if answer.starts_with("HTTP/1.1 ") => Ok(answer),
        Ok(Ok(answer)) => Err(format!("no HTTP answer: {answer:?}")),
        Ok(Err(e)) => Err(e.to_string()),
        Err(_) => Err("no answer within 10 s".into()),
    }
}

#[test]
fn client_certificates_are_required_when_a_client_ca_is_set() {
    let dir = tmpdir("mtls");
    let ca = Ca::new("tailor test CA");
    let clients = Ca::new("tailor clients CA");
    let (server_pem, server_key) = ca.leaf();
    let write = |name: &str, text: &str| std::fs::write(dir.0.join(name), text).unwrap();
    write("ca.pem", &ca.cert.pem());
    write("clients.pem", &clients.cert.pem());
    write("server.pem", &server_pem);
    write("server.key", &server_key);
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let upstream = rt.block_on(tls_upstream(server_config(&server_pem, &server_key)));

    let (sidecar, admin) = (free_port(), free_port());
    let cfg = dir.0.join("sidecar.toml");
    std::fs::write(
        &cfg,
        format!(
            "listen = \"127.0.0.1:{sidecar}\"\nupstream = \"127.0.0.1:{upstream}\"\nadmin = \"127.0.0.1:{admin}\"\n\
             [tls]\ncert_file = \"server.pem\"\nkey_file = \"server.key\"\nclient_ca_file = \"clients.pem\"\n\
             [upstream_tls]\nca_file = \"ca.pem\"\n"
        ),
    )
    .unwrap();
    let _sidecar = proxy("sidecar", &cfg, admin);
    let ca_pem = ca.cert.pem();
    rt.block_on(async {
        // No certificate, or one another CA signed: the handshake is refused, no request served.
        let refused = get_presenting(sidecar, &ca_pem, None, "/echo").await;
        assert!(refused.is_err(), "a client without a certificate was served: {refused:?}");
        let stranger = client_leaf(&Ca::new("a CA nobody trusts"));
        let refused = get_presenting(sidecar, &ca_pem, Some(&stranger), "/echo").await;
        assert!(refused.is_err(), "a client with an untrusted certificate was served: {refused:?}");
        // A certificate the clients' CA signed: served, the context stamped.
        let answer = get_presenting(sidecar, &ca_pem, Some(&client_leaf(&clients)), "/echo").await.unwrap();
        assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
        assert!(answer.to_ascii_lowercase().contains("x-seen-context: 1.g"), "{answer}");
    });
    assert_eq!(metric(admin, "tailor_proxy_tls_handshake_failures_total"), 2.0);
    assert_eq!(metric(admin, "tailor_proxy_requests_total"), 1.0);

    // A client CA file that holds no certificate: refused at start, naming file and field.
    write("empty.pem", "no PEM here\n");
    let bad = dir.0.join("bad.toml");
    let text = std::fs::read_to_string(&cfg)
        .unwrap()
        .replace("client_ca_file = \"clients.pem\"", "client_ca_file = \"empty.pem\"");
    std::fs::write(&bad, text.replace(&format!("127.0.0.1:{sidecar}"), &format!("127.0.0.1:{}", free_port()))).unwrap();
    let out =
        Command::new(env!("CARGO_BIN_EXE_tailor")).args(["proxy", "sidecar", "--config"]).arg(&bad).output().unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("bad.toml") && err.contains("`tls.client_ca_file`") && err.contains("empty.pem"), "{err}");
}

#[test]
fn egress_calls_a_tls_next_hop() {
    let dir = tmpdir("egress-tls");
    let ca = Ca::new("tailor test CA");
    let (server_pem, server_key) = ca.leaf();
    std::fs::write(dir.0.join("ca.pem"), ca.cert.pem()).unwrap();
    let rogue = Ca::new("a CA nobody trusts");
    let (rogue_pem, rogue_key) = rogue.leaf();
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let next = rt.block_on(tls_upstream(server_config(&server_pem, &server_key)));
    let impostor = rt.block_on(tls_upstream(server_config(&rogue_pem, &rogue_key)));

    let (sidecar, admin, egress, egress_rogue, service) =
        (free_port(), free_port(), free_port(), free_port(), free_port());
    let cfg = dir.0.join("sidecar.toml");
    let hop = |listen: u16, to: u16| {
        format!("[[egress]]\nlisten = \"127.0.0.1:{listen}\"\nupstream = \"127.0.0.1:{to}\"\n[egress.upstream_tls]\nca_file = \"ca.pem\"\n")
    };
    std::fs::write(
        &cfg,
        format!(
            "listen = \"127.0.0.1:{sidecar}\"\nupstream = \"127.0.0.1:{service}\"\nadmin = \"127.0.0.1:{admin}\"\n{}{}",
            hop(egress, next),
            hop(egress_rogue, impostor)
        ),
    )
    .unwrap();
    let _sidecar = proxy("sidecar", &cfg, admin);
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos();
    let carried = format!("1.g{now}.c2.k1.h3");
    // The service calls out in plaintext, forwarding only `baggage`; the next hop gets TLS.
    let call = |port: u16| {
        let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let req =
            format!("GET /next HTTP/1.1\r\nhost: x\r\nbaggage: user=7,tailor={carried}\r\nconnection: close\r\n\r\n");
        s.write_all(req.as_bytes()).unwrap();
        let mut answer = String::new();
        s.read_to_string(&mut answer).unwrap();
        answer.to_ascii_lowercase()
    };
    let answer = call(egress);
    assert!(answer.starts_with("http/1.1 200"), "{answer}");
    assert!(answer.contains(&format!("x-seen-context: 1.g{now}.c2.k1.h4")), "one hop further over TLS: {answer}");
    // A next hop whose certificate the CA did not sign: 502 with the reason.
    let answer = call(egress_rogue);
    assert!(answer.starts_with("http/1.1 502") && answer.contains("tailor-error: upstream_tls"), "{answer}");
    assert!(answer.contains("unknownissuer"), "{answer}");
}
