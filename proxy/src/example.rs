//! The commented configurations `tailor proxy example edge|sidecar` prints. Tests load
//! them, so every key shown exists and every default is the one the code uses.

/// A sidecar in front of a service on port 8080.
pub const SIDECAR: &str = r#"# tailor proxy sidecar --config sidecar.toml
# In front of one local service: requests wait in the policy's order and at most `c`
# are inside the service at once. Reload with SIGHUP, drain with SIGTERM.

listen = "127.0.0.1:8081"      # where the edge (or other services' egress) connects
upstream = "127.0.0.1:8080"    # the service; HTTP/1.1 or h2c (gRPC), as the request came in
admin = "127.0.0.1:9901"       # /metrics (Prometheus), /healthz, /readyz

order = "orf"                  # orf (oldest GAT first), edf (earliest deadline), priq (class), fifo
# c = 4                        # requests inside the service at once; leave out for the adaptive
c_max = 256                    #   limit (Vegas, from latency; lifted while the gate's queue
                               #   keeps growing and that buys throughput), at most c_max
max_queue = 1024               # waiting requests at most; more are shed (503 / RESOURCE_EXHAUSTED)
shed_cannot_meet = true        # shed on arrival what would miss its deadline at its queue position
max_age_ms = 10000             # older GATs are clamped: what a forged context can gain at most
release_on_egress = true       # a request's slot is given back when the service calls out through
                               #   [[egress]]; false keeps it to the end (c then bounds the chain below)
drain_timeout_ms = 10000       # SIGTERM waits this long for requests in progress

# Bounds (the same table on the edge): what a hung upstream, a slow or hostile client may cost.
[limits]
upstream_timeout_ms = 30000    # response headers from the upstream within this, else 504 (tailor-error: upstream_timeout)
header_read_timeout_ms = 10000 # a request head within this (slowloris), else the connection is closed
body_read_timeout_ms = 30000   # an admitted request's body within this, else 408 (body_timeout); 0: none
upstream_body_timeout_ms = 30000 # the upstream's body may pause this long at most, else it is cut off; 0: none
client_write_timeout_ms = 30000  # a client that takes none of its response this long is closed; 0: none
max_header_bytes = 65536       # request head at most (>= 8192), else 431
max_body_bytes = 8388608       # request body at most, else 413 (tailor-error: body_too_large)
max_connections = 10000        # open client connections per listener; beyond it 503 (tailor-shed: connection_limit)

# [tls]                        # serve HTTPS on `listen` (ALPN h2 and http/1.1); SIGHUP reloads the files
# cert_file = "sidecar.pem"    # certificate chain, PEM, this proxy's certificate first; relative to this file
# key_file = "sidecar.key"     # its private key, PEM
# client_ca_file = "clients.pem" # optional mTLS: clients must present a certificate this CA signed

# [upstream_tls]               # call the service over TLS
# ca_file = "ca.pem"           # the CA(s) that sign the service's certificate
# server_name = "svc.internal" # the name its certificate must carry (and SNI); default: its IP address
# cert_file = "client.pem"     # optional client certificate and key (mTLS)
# key_file = "client.key"

# [mac]                        # verify contexts (an unsigned or bad one is re-stamped and counted)
# key_id = "k1"
# secret_file = "mac.key"      # at least 16 bytes; relative to this file
# require = true

# The service calls its next hop through this listener; forwarding the W3C `baggage`
# header it received (OpenTelemetry does) is all it must do to keep the request's age.
# [[egress]]
# listen = "127.0.0.1:15001"
# upstream = "127.0.0.1:8091"  # the next service's sidecar
# [egress.upstream_tls]        # optional: the next hop speaks TLS (the keys of [upstream_tls])
# ca_file = "ca.pem"
"#;

/// An edge with one HTTP route and one gRPC route.
pub const EDGE: &str = r#"# tailor proxy edge --config edge.toml
# The entry point: strips any context a client sent, stamps GAT (now), class and deadline
# from the first matching route, signs it, balances over healthy upstreams.

listen = "127.0.0.1:8000"
admin = "127.0.0.1:9900"
balance = "least_outstanding"  # or "p2c" (power of two choices)
# health_path = "/healthz"     # GET each upstream every health_interval_ms; leave out for a TCP connect
health_interval_ms = 1000
# max_in_flight = 200          # optional cap; beyond it requests queue oldest first
max_queue = 1024
grpc_timeout = true            # gRPC requests carry the deadline as grpc-timeout
drain_timeout_ms = 10000

[limits]                       # bounds as in `tailor proxy example sidecar`
upstream_timeout_ms = 30000
header_read_timeout_ms = 10000
body_read_timeout_ms = 30000
upstream_body_timeout_ms = 30000
client_write_timeout_ms = 30000
max_header_bytes = 65536
max_body_bytes = 8388608
max_connections = 10000

# [tls]                        # HTTPS for clients, as in `tailor proxy example sidecar`
# cert_file = "edge.pem"
# key_file = "edge.key"
# [upstream_tls]               # every route's upstreams over TLS
# ca_file = "ca.pem"

# [mac]
# key_id = "k1"
# secret_file = "mac.key"

[[routes]]
name = "checkout"
path_prefix = "/checkout"      # every condition given must match; the first route that does wins
# host = "shop.example.com"
# header = { name = "x-tier", value = "gold" }
class = 0
slo_ms = 200                   # deadline = arrival + 200 ms; leave out for none
upstreams = ["127.0.0.1:8081"]

[[routes]]
name = "greeter"
grpc_service = "helloworld.Greeter"
# grpc_method = "SayHello"
class = 1
slo_ms = 500
upstreams = ["127.0.0.1:8082", "127.0.0.1:8083"]
"#;

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;
    use crate::config::{parse_str, Edge, EdgeConfig, Sidecar, SidecarConfig};

    #[test]
    fn examples_load() {
        let f = Path::new("example.toml");
        let s: SidecarConfig = parse_str(f, SIDECAR).unwrap();
        Sidecar::check(f, s).unwrap();
        let e: EdgeConfig = parse_str(f, EDGE).unwrap();
        let e = Edge::check(f, e).unwrap();
        assert_eq!(e.config.routes.len(), 2);
        // The example shows the defaults the code uses.
        let bare: SidecarConfig = parse_str(f, "listen = \"127.0.0.1:1\"\nupstream = \"127.0.0.1:2\"").unwrap();
        let shown: SidecarConfig = parse_str(f, SIDECAR).unwrap();
        assert_eq!(bare.limits, shown.limits);
        assert_eq!(e.config.limits, shown.limits);
    }

    #[test]
    fn errors_name_the_file_and_the_field() {
        let f = Path::new("/etc/tailor/sidecar.toml");
        let bad = SIDECAR.replace("c_max = 256", "c_max = 256\nslice = 3");
        let err = parse_str::<SidecarConfig>(f, &bad).unwrap_err().to_string();
        assert!(err.contains("/etc/tailor/sidecar.toml") && err.contains("slice"), "{err}");
        let err = parse_str::<SidecarConfig>(f, "listen = \"127.0.0.1:1\"").unwrap_err().to_string();
        assert!(err.contains("upstream"), "{err}");
        let zero: SidecarConfig = parse_str(f, &SIDECAR.replace("# c = 4 ", "c = 0 ")).unwrap();
        let err = Sidecar::check(f, zero).unwrap_err().to_string();
        assert!(err.contains("`c`") && err.contains("at least 1"), "{err}");
        let small: SidecarConfig =
            parse_str(f, &SIDECAR.replace("max_header_bytes = 65536", "max_header_bytes = 100")).unwrap();
        let err = Sidecar::check(f, small).unwrap_err().to_string();
        assert!(err.contains("`limits.max_header_bytes`") && err.contains("8192"), "{err}");
        // A bound at the top level, where older configs had it: where it goes now.
        let old = "listen = \"127.0.0.1:1\"\nupstream = \"127.0.0.1:2\"\nmax_body_bytes = 10\n";
        let err = parse_str::<SidecarConfig>(f, old).unwrap_err().to_string();
        assert!(err.contains("`max_body_bytes`") && err.contains("move `max_body_bytes` under [limits]"), "{err}");
        let typo = SIDECAR.replace("max_connections = 10000", "max_conns = 10000");
        let err = parse_str::<SidecarConfig>(f, &typo).unwrap_err().to_string();
        assert!(err.contains("max_conns") && err.contains("unknown field"), "{err}");
        let e: EdgeConfig = parse_str(f, &EDGE.replace("upstreams = [\"127.0.0.1:8081\"]", "upstreams = []")).unwrap();
        let err = Edge::check(f, e).unwrap_err().to_string();
        assert!(err.contains("routes[0].upstreams"), "{err}");
    }
}
