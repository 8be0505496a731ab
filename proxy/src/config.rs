//! The TOML configuration of the edge and the sidecar: serde types, defaults and validation.
//!
//! Unknown keys are rejected; every error names the file and the field. Listen addresses are
//! read once at start; everything else is re-read on SIGHUP (see `serve`).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use serde::Deserialize;
use tailor_core::wire::{Key, Keyring};
use tailor_core::{Nanos, PolicySpec};

use crate::tls::{self, ClientTls};
use crate::ProxyError;

const NANOS_PER_MS: Nanos = 1_000_000;

/// The order a sidecar's queue admits requests in (the core policy it runs).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Order {
    /// Oldest global arrival time first (TailClipper's ORF at a gate: GAT order, no preemption).
    #[default]
    Orf,
    /// Earliest deadline first (TailGuard's EDFQ).
    Edf,
    /// Lowest class first, arrival order within a class.
    Priq,
    /// Local arrival order: what a plain proxy does.
    Fifo,
}

impl Order {
    /// The core policy that gives this order. A proxy cannot preempt a request it has
    /// passed to the service, so ORF's processor sharing among the `c` oldest is the
    /// service's own; the gate's part of ORF is admission in GAT order (`gfifo`).
    pub fn policy(self) -> PolicySpec {
        match self {
            Order::Orf => PolicySpec::Gfifo,
            Order::Edf => PolicySpec::Edf,
            Order::Priq => PolicySpec::Priq,
            Order::Fifo => PolicySpec::Fifo,
        }
    }
}

/// The MAC key: the sidecar verifies contexts with it, the edge and egress sign with it.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MacConfig {
    /// Key id carried in the context (`i`), 1–16 of `A-Z a-z 0-9 - _`.
    pub key_id: String,
    /// File holding the shared secret (at least 16 bytes; surrounding whitespace is trimmed).
    pub secret_file: PathBuf,
    /// Sidecar: treat an unsigned or badly signed context as absent (counted, re-stamped).
    #[serde(default = "yes")]
    pub require: bool,
}

/// An outbound listener the service calls through to reach its next hop.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EgressConfig {
    pub listen: SocketAddr,
    /// The next hop (its edge or sidecar).
    pub upstream: SocketAddr,
    /// The next hop is called over TLS (`[egress.upstream_tls]`, the keys of `[upstream_tls]`).
    pub upstream_tls: Option<UpstreamTlsConfig>,
}

/// A listener's TLS (`[tls]`): it serves HTTPS with this certificate chain and key (PEM
/// files, relative to the config file), offering ALPN `h2` and `http/1.1`. Reloaded on SIGHUP.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TlsConfig {
    /// The certificate chain, the listener's own certificate first.
    pub cert_file: PathBuf,
    /// Its private key (PKCS#8, PKCS#1 or SEC1).
    pub key_file: PathBuf,
    /// Present: every client must present a certificate that chains to a CA of this PEM
    /// file (mutual TLS); a client without one fails the handshake.
    pub client_ca_file: Option<PathBuf>,
}

/// TLS towards upstreams (`[upstream_tls]`): the upstream's certificate must chain to
/// `ca_file`. Reloaded on SIGHUP.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UpstreamTlsConfig {
    /// The CA certificate(s) that sign the upstreams' certificates.
    pub ca_file: PathBuf,
    /// The name the upstream's certificate must carry (and the SNI sent); absent: its IP address.
    pub server_name: Option<String>,
    /// A client certificate chain for mTLS, with `key_file`.
    pub cert_file: Option<PathBuf>,
    pub key_file: Option<PathBuf>,
}

/// `tailor proxy sidecar`: one local service behind a policy-ordered gate.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SidecarConfig {
    /// Where clients (the edge, other sidecars' egress) connect.
    pub listen: SocketAddr,
    /// The local service.
    pub upstream: SocketAddr,
    /// Prometheus `/metrics`, `/healthz`, `/readyz`.
    pub admin: Option<SocketAddr>,
    #[serde(default)]
    pub order: Order,
    /// Requests inside the service at once. Absent: adaptive (Vegas), between 1 and `c_max`.
    pub c: Option<usize>,
    /// Upper bound of the adaptive limit.
    #[serde(default = "default_c_max")]
    pub c_max: usize,
    /// Requests waiting at most; beyond it new requests are shed (`queue_full`).
    #[serde(default = "default_max_queue")]
    pub max_queue: usize,
    /// Shed on arrival a request whose deadline cannot be met at its queue position.
    #[serde(default = "yes")]
    pub shed_cannot_meet: bool,
    /// GATs older than this are clamped (a forged or buggy upstream gains at most this much).
    #[serde(default = "default_max_age_ms")]
    pub max_age_ms: u64,
    /// A request gives its slot back when its service calls out through an egress
    /// listener (true: `c` bounds the service's own work), or keeps it until its response
    /// ends (false: `c` bounds the requests in the whole chain below this sidecar, so the
    /// first sidecar of a chain admits whole requests, oldest GAT first).
    #[serde(default = "yes")]
    pub release_on_egress: bool,
    /// How long SIGTERM waits for requests in progress.
    #[serde(default = "default_drain_ms")]
    pub drain_timeout_ms: u64,
    /// Bounds on client connections and relays (`[limits]`).
    #[serde(default)]
    pub limits: Limits,
    pub mac: Option<MacConfig>,
    /// The inbound listener serves HTTPS (egress listeners stay plaintext: they are local).
    pub tls: Option<TlsConfig>,
    /// The local service is called over TLS.
    pub upstream_tls: Option<UpstreamTlsConfig>,
    #[serde(default)]
    pub egress: Vec<EgressConfig>,
}

/// How the edge picks one of a route's upstreams.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Balance {
    /// The healthy upstream with the fewest requests in flight (ties: the first).
    #[default]
    LeastOutstanding,
    /// Two healthy upstreams at random; the one with fewer in flight.
    P2c,
}

/// A header a route matches on.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HeaderMatch {
    pub name: String,
    pub value: String,
}

/// One route of the edge: what it matches, the context it stamps, where it sends.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RouteConfig {
    pub name: String,
    #[serde(default = "default_prefix")]
    pub path_prefix: String,
    pub host: Option<String>,
    pub header: Option<HeaderMatch>,
    /// gRPC service (`package.Service`), matched against the path `/package.Service/Method`.
    pub grpc_service: Option<String>,
    pub grpc_method: Option<String>,
    /// SLO class (0 is served first by `priq`).
    #[serde(default)]
    pub class: u8,
    /// Deadline after arrival; absent: no deadline.
    pub slo_ms: Option<u64>,
    pub upstreams: Vec<SocketAddr>,
}

/// `tailor proxy edge`: the entry point that stamps every request's context.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EdgeConfig {
    pub listen: SocketAddr,
    pub admin: Option<SocketAddr>,
    #[serde(default)]
    pub balance: Balance,
    /// Path the edge GETs on each upstream to check its health; absent: a TCP connect.
    pub health_path: Option<String>,
    #[serde(default = "default_health_ms")]
    pub health_interval_ms: u64,
    /// Optional cap on requests in flight through the edge, queued by GAT beyond it.
    pub max_in_flight: Option<usize>,
    #[serde(default = "default_max_queue")]
    pub max_queue: usize,
    /// Map the deadline to `grpc-timeout` on gRPC requests.
    #[serde(default = "yes")]
    pub grpc_timeout: bool,
    #[serde(default = "default_drain_ms")]
    pub drain_timeout_ms: u64,
    /// Bounds on client connections and relays (`[limits]`).
    #[serde(default)]
    pub limits: Limits,
    pub mac: Option<MacConfig>,
    /// The edge's listener serves HTTPS.
    pub tls: Option<TlsConfig>,
    /// Every route's upstreams are called over TLS.
    pub upstream_tls: Option<UpstreamTlsConfig>,
    pub routes: Vec<RouteConfig>,
}

fn yes() -> bool {
    true
}
fn default_c_max() -> usize {
    256
}
fn default_max_queue() -> usize {
    1024
}
fn default_max_age_ms() -> u64 {
    10_000
}
fn default_drain_ms() -> u64 {
    10_000
}
fn default_health_ms() -> u64 {
    1_000
}
fn default_prefix() -> String {
    "/".into()
}

impl SidecarConfig {
    pub fn max_age_ns(&self) -> Nanos {
        self.max_age_ms.saturating_mul(NANOS_PER_MS)
    }
}

/// The bounds every listener and relay of a proxy keeps: the `[limits]` table, the same in
/// both roles. The listener bounds (`header_read_timeout_ms`, `max_header_bytes`,
/// `max_connections`) change only on restart, the others on SIGHUP.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Limits {
    /// How long the upstream has to send its response headers; beyond it the client gets
    /// 504 (`tailor-error: upstream_timeout`) and the request leaves the gate.
    pub upstream_timeout_ms: u64,
    /// A connection must deliver a request's headers within this long (slowloris), or it is closed.
    pub header_read_timeout_ms: u64,
    /// An admitted request's body must arrive within this long (a slow client cannot hold
    /// a slot for ever): 408 (`tailor-error: body_timeout`). 0: no limit (long gRPC streams).
    pub body_read_timeout_ms: u64,
    /// Once the upstream's response headers arrived, the longest it may go without sending
    /// more of its body (an upstream that stalls mid-body): the response is cut off
    /// (`upstream_body_timeout`; gRPC gets `DEADLINE_EXCEEDED` trailers). 0: no limit.
    pub upstream_body_timeout_ms: u64,
    /// The longest a client may go without taking any of the response the proxy is
    /// writing to it (a client that stops reading): the connection is closed and the
    /// request leaves the gate. 0: no limit.
    pub client_write_timeout_ms: u64,
    /// Request line and headers at most (HTTP/1.1; the HTTP/2 header list): beyond it 431.
    pub max_header_bytes: usize,
    /// Request body at most: beyond it 413 (`tailor-error: body_too_large`).
    pub max_body_bytes: u64,
    /// Open client connections at most, per listener; beyond it a new connection gets 503
    /// (`tailor-shed: connection_limit`) and is closed.
    pub max_connections: usize,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            upstream_timeout_ms: 30_000,
            header_read_timeout_ms: 10_000,
            body_read_timeout_ms: 30_000,
            upstream_body_timeout_ms: 30_000,
            client_write_timeout_ms: 30_000,
            max_header_bytes: 65_536,
            max_body_bytes: 8 << 20,
            max_connections: 10_000,
        }
    }
}

/// The keys of `[limits]`, which older configs had at the top level.
const LIMIT_KEYS: [&str; 8] = [
    "upstream_timeout_ms",
    "header_read_timeout_ms",
    "body_read_timeout_ms",
    "upstream_body_timeout_ms",
    "client_write_timeout_ms",
    "max_header_bytes",
    "max_body_bytes",
    "max_connections",
];

/// hyper's smallest read buffer: request heads are limited by the buffer's size.
pub const MIN_HEADER_BYTES: usize = 8192;

impl Limits {
    pub fn upstream_timeout(&self) -> Duration {
        Duration::from_millis(self.upstream_timeout_ms)
    }

    pub fn header_read_timeout(&self) -> Duration {
        Duration::from_millis(self.header_read_timeout_ms)
    }

    /// `None`: no limit.
    pub fn body_read_timeout(&self) -> Option<Duration> {
        (self.body_read_timeout_ms > 0).then(|| Duration::from_millis(self.body_read_timeout_ms))
    }

    /// `None`: no limit.
    pub fn upstream_body_timeout(&self) -> Option<Duration> {
        (self.upstream_body_timeout_ms > 0).then(|| Duration::from_millis(self.upstream_body_timeout_ms))
    }

    /// `None`: no limit.
    pub fn client_write_timeout(&self) -> Option<Duration> {
        (self.client_write_timeout_ms > 0).then(|| Duration::from_millis(self.client_write_timeout_ms))
    }

    /// The first key that is out of range, with the fix.
    fn check(&self, file: &Path) -> Result<(), ProxyError> {
        if self.upstream_timeout_ms == 0 {
            return Err(invalid(file, "limits.upstream_timeout_ms", "must be at least 1"));
        }
        if self.header_read_timeout_ms == 0 {
            return Err(invalid(file, "limits.header_read_timeout_ms", "must be at least 1"));
        }
        if self.max_header_bytes < MIN_HEADER_BYTES || self.max_header_bytes > u32::MAX as usize {
            return Err(invalid(
                file,
                "limits.max_header_bytes",
                format!("must be between {MIN_HEADER_BYTES} and 4294967295"),
            ));
        }
        if self.max_connections == 0 {
            return Err(invalid(file, "limits.max_connections", "must be at least 1"));
        }
        Ok(())
    }
}

impl RouteConfig {
    /// Deadline budget in ns.
    pub fn budget_ns(&self) -> Option<Nanos> {
        self.slo_ms.map(|ms| ms.saturating_mul(NANOS_PER_MS))
    }
}

fn invalid(file: &Path, field: impl Into<String>, problem: impl Into<String>) -> ProxyError {
    ProxyError::Config { file: file.to_path_buf(), field: field.into(), problem: problem.into() }
}

fn parse<T: for<'de> Deserialize<'de>>(file: &Path) -> Result<T, ProxyError> {
    let text = std::fs::read_to_string(file)
        .map_err(|e| ProxyError::Io { what: format!("reading {}", file.display()), source: e })?;
    parse_str(file, &text)
}

/// Parses `text` as if read from `file` (for messages).
pub fn parse_str<T: for<'de> Deserialize<'de>>(file: &Path, text: &str) -> Result<T, ProxyError> {
    // The bounds moved under [limits]: say so rather than "unknown field".
    if let Ok(table) = text.parse::<toml::Table>() {
        if let Some(key) = LIMIT_KEYS.iter().find(|k| table.contains_key(**k)) {
            return Err(invalid(file, *key, format!("move `{key}` under [limits] (the six bounds are one table now)")));
        }
    }
    toml::from_str(text).map_err(|e| {
        // toml's message names the key and shows the line; keep it whole.
        // The span is the offending key or value; a missing key spans its whole table.
        let field = e
            .span()
            .and_then(|s| text.get(s))
            .map(str::trim)
            .filter(|t| !t.is_empty() && t.len() <= 64 && !t.contains('\n'))
            .unwrap_or("(table)")
            .to_string();
        invalid(file, field, e.message().to_string() + &location(text, e.span()))
    })
}

fn location(text: &str, span: Option<std::ops::Range<usize>>) -> String {
    match span {
        Some(s) => format!(" (line {})", text[..s.start.min(text.len())].matches('\n').count() + 1),
        None => String::new(),
    }
}

fn keyring(file: &Path, mac: &Option<MacConfig>) -> Result<Option<(Key, Keyring)>, ProxyError> {
    let Some(mac) = mac else { return Ok(None) };
    // A relative secret path is relative to the config file, like every tool that has one.
    let path = tls::beside(file, &mac.secret_file);
    let secret = std::fs::read(&path)
        .map_err(|e| invalid(file, "mac.secret_file", format!("cannot read {}: {e}", path.display())))?;
    let secret = secret.trim_ascii();
    let key = Key::new(&mac.key_id, secret).map_err(|e| invalid(file, "mac", format!("{e}")))?;
    let ring = Keyring::new([key.clone()]).map_err(|e| invalid(file, "mac", format!("{e}")))?;
    Ok(Some((key, ring)))
}

/// The TLS of a loaded config: the listener's server side and the upstreams' client side.
#[derive(Clone, Debug, Default)]
pub struct LoadedTls {
    pub server: Option<Arc<rustls::ServerConfig>>,
    pub upstream: Option<ClientTls>,
    /// Per `[[egress]]` listener, in order: its next hop's client side (sidecar only).
    pub egress: Vec<Option<ClientTls>>,
}

impl LoadedTls {
    fn load(file: &Path, server: &Option<TlsConfig>, upstream: &Option<UpstreamTlsConfig>) -> Result<Self, ProxyError> {
        Ok(LoadedTls {
            server: server.as_ref().map(|t| tls::server(file, "tls", t)).transpose()?,
            upstream: upstream.as_ref().map(|t| tls::client(file, "upstream_tls", t)).transpose()?,
            egress: Vec::new(),
        })
    }
}

/// A loaded sidecar configuration with its key and certificates.
#[derive(Clone, Debug)]
pub struct Sidecar {
    pub config: SidecarConfig,
    pub key: Option<(Key, Keyring)>,
    pub tls: LoadedTls,
}

/// A loaded edge configuration with its key and certificates.
#[derive(Clone, Debug)]
pub struct Edge {
    pub config: EdgeConfig,
    pub key: Option<Key>,
    pub tls: LoadedTls,
}

impl Sidecar {
    pub fn load(file: &Path) -> Result<Sidecar, ProxyError> {
        Sidecar::check(file, parse(file)?)
    }

    pub fn check(file: &Path, config: SidecarConfig) -> Result<Sidecar, ProxyError> {
        if config.c == Some(0) {
            return Err(invalid(file, "c", "must be at least 1 (or leave it out for the adaptive limit)"));
        }
        if config.c_max == 0 || config.c_max > 4096 {
            return Err(invalid(file, "c_max", "must be between 1 and 4096"));
        }
        if config.max_queue == 0 {
            return Err(invalid(file, "max_queue", "must be at least 1"));
        }
        config.limits.check(file)?;
        let key = keyring(file, &config.mac)?;
        let mut tls = LoadedTls::load(file, &config.tls, &config.upstream_tls)?;
        tls.egress = config
            .egress
            .iter()
            .enumerate()
            .map(|(i, e)| e.upstream_tls.as_ref().map(|t| tls::client(file, &format!("egress[{i}].upstream_tls"), t)))
            .map(Option::transpose)
            .collect::<Result<_, _>>()?;
        Ok(Sidecar { config, key, tls })
    }
}

impl Edge {
    pub fn load(file: &Path) -> Result<Edge, ProxyError> {
        Edge::check(file, parse(file)?)
    }

    pub fn check(file: &Path, config: EdgeConfig) -> Result<Edge, ProxyError> {
        if config.routes.is_empty() {
            return Err(invalid(file, "routes", "at least one [[routes]] table is needed"));
        }
        for (i, r) in config.routes.iter().enumerate() {
            if r.upstreams.is_empty() {
                return Err(invalid(file, format!("routes[{i}].upstreams"), "list at least one address"));
            }
            if !r.path_prefix.starts_with('/') {
                return Err(invalid(file, format!("routes[{i}].path_prefix"), "must start with `/`"));
            }
            if r.grpc_method.is_some() && r.grpc_service.is_none() {
                return Err(invalid(file, format!("routes[{i}].grpc_method"), "needs grpc_service too"));
            }
            if let Some(h) = &r.header {
                if http::HeaderName::from_bytes(h.name.as_bytes()).is_err() {
                    return Err(invalid(file, format!("routes[{i}].header.name"), "not a valid header name"));
                }
            }
        }
        if config.max_in_flight == Some(0) {
            return Err(invalid(file, "max_in_flight", "must be at least 1 (or leave it out for no cap)"));
        }
        if config.health_interval_ms == 0 {
            return Err(invalid(file, "health_interval_ms", "must be at least 1"));
        }
        config.limits.check(file)?;
        let key = keyring(file, &config.mac)?.map(|(k, _)| k);
        let tls = LoadedTls::load(file, &config.tls, &config.upstream_tls)?;
        Ok(Edge { config, key, tls })
    }
}
