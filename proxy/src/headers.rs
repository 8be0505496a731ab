//! Header handling: reading, stripping and writing the Tailor context on proxied requests
//! and responses. Everything here is a pure function of the headers and `now`, so it is
//! fuzzed (`fuzz/fuzz_targets/proxy_headers.rs`) and property-tested.

use http::header::{HeaderMap, HeaderName, HeaderValue};
use tailor_core::wire::{self, baggage, grpc_timeout, Key, Keyring, WireError, WireStats};
use tailor_core::{Context, Nanos};

/// Response header naming why the sidecar shed a request.
pub const SHED_HEADER: &str = "tailor-shed";
/// Response header naming why the proxy could not relay a request (`upstream_timeout`,
/// `upstream_connect`, `upstream_closed`, `body_too_large`, `body_timeout`).
pub const ERROR_HEADER: &str = "tailor-error";

/// How the sidecar got a request's context.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Inbound {
    /// Decoded (and verified, when a MAC is required) from the request.
    Carried,
    /// None was carried: stamped at arrival (its deadline from `grpc-timeout`, if any).
    Stamped,
    /// One was carried but rejected (malformed, or failed the MAC): stamped at arrival.
    Rejected(WireError),
}

/// What a sidecar (or an egress listener) trusts about incoming contexts.
#[derive(Clone, Copy)]
pub struct Trust<'a> {
    /// Verify the MAC with these keys; an unsigned or badly signed context is rejected.
    pub keys: Option<&'a Keyring>,
    /// GATs older than this are clamped.
    pub max_age_ns: Nanos,
}

/// The context of a request arriving at a sidecar at `now`: the carried one, verified and
/// clamped; else a fresh stamp. Counted in `stats`. Never fails: a bad context costs the
/// request its place (it is treated as new), never the request itself.
pub fn inbound(headers: &HeaderMap, now: Nanos, trust: Trust<'_>, stats: &WireStats) -> (Context, Inbound) {
    let outcome = wire::extract(headers.iter().map(|(n, v)| (n.as_str(), v.as_bytes())));
    stats.record(&outcome);
    let decoded = match outcome {
        Ok(Some(d)) => d,
        Ok(None) => return (stamped(headers, now, stats), Inbound::Stamped),
        Err(e) => return (Context::stamped(now), Inbound::Rejected(e)),
    };
    let ctx = match trust.keys {
        Some(keys) => match decoded.verify(keys) {
            Ok(ctx) => ctx,
            Err(e) => {
                stats.record_error(e);
                return (Context::stamped(now), Inbound::Rejected(e));
            }
        },
        None => decoded.context,
    };
    let (ctx, clamped) = wire::clamp(ctx, now, trust.max_age_ns);
    stats.record_clamp(&clamped);
    (ctx, Inbound::Carried)
}

/// A fresh context at `now`; a gRPC caller's `grpc-timeout` becomes its deadline (the
/// client's own timeout: it buys urgency only at hops that already trust the caller).
fn stamped(headers: &HeaderMap, now: Nanos, stats: &WireStats) -> Context {
    let mut ctx = Context::stamped(now);
    if let Some(t) = headers.get(grpc_timeout::HEADER) {
        match grpc_timeout::to_deadline(t.as_bytes(), now) {
            Ok(deadline) => ctx.deadline = deadline.max(ctx.gat),
            Err(e) => stats.record_error(e),
        }
    }
    ctx
}

/// Removes every incoming carrier of a context: the `tailor-context` header and the
/// `tailor` member of `baggage` (other members stay). What the edge does to untrusted
/// clients' requests before stamping its own.
pub fn strip_context(headers: &mut HeaderMap) {
    headers.remove(wire::HEADER);
    let joined: Vec<&str> = headers.get_all(baggage::HEADER).iter().filter_map(|v| v.to_str().ok()).collect();
    if joined.is_empty() {
        headers.remove(baggage::HEADER);
        return;
    }
    let rest = baggage::without(&joined.join(","));
    headers.remove(baggage::HEADER);
    if let Some(v) = rest.and_then(|r| HeaderValue::from_str(&r).ok()) {
        headers.insert(baggage::HEADER, v);
    }
}

/// Writes `ctx` into every carrier, signed with `key` when given.
pub fn write_context(headers: &mut HeaderMap, ctx: &Context, key: Option<&Key>) {
    let encoded = match key {
        Some(k) => wire::encode_signed(ctx, k),
        None => wire::encode(ctx),
    };
    tailor_runtime::http::write_encoded(headers, &encoded);
}

/// Sets `grpc-timeout` to the time left before `ctx`'s deadline, keeping a shorter one
/// the caller set. Nothing when there is no deadline.
pub fn write_grpc_timeout(headers: &mut HeaderMap, ctx: &Context, now: Nanos) {
    let Some(ours) = grpc_timeout::from_deadline(ctx.deadline, now) else { return };
    let callers = headers.get(grpc_timeout::HEADER).and_then(|v| grpc_timeout::decode(v.as_bytes()).ok());
    if callers.is_none_or(|t| t > grpc_timeout::decode(ours.as_bytes()).unwrap_or(u64::MAX)) {
        headers.insert(grpc_timeout::HEADER, HeaderValue::from_str(&ours).expect("a grpc-timeout is ASCII"));
    }
}

/// Removes Tailor's headers (`tailor-*`) from a response the edge returns to a client.
pub fn strip_response(headers: &mut HeaderMap) {
    let ours: Vec<HeaderName> = headers.keys().filter(|n| n.as_str().starts_with("tailor-")).cloned().collect();
    for name in ours {
        headers.remove(name);
    }
}

/// The hop-by-hop headers every request loses, as names (a `&str` would be parsed again
/// on every request).
static HOP_BY_HOP: [HeaderName; 6] = [
    http::header::CONNECTION,
    HeaderName::from_static("keep-alive"),
    HeaderName::from_static("proxy-connection"),
    http::header::TRANSFER_ENCODING,
    http::header::UPGRADE,
    http::header::PROXY_AUTHORIZATION,
];

/// Hop-by-hop headers (RFC 9110 §7.6.1) and those named by `Connection`: not forwarded.
/// `te: trailers` stays, gRPC needs it.
pub fn remove_hop_by_hop(headers: &mut HeaderMap) {
    // Most requests carry none of them: one pass over the names (comparing a standard
    // name is comparing a number) instead of a hashed lookup per candidate.
    let any = headers.keys().any(|n| n == http::header::TE || HOP_BY_HOP.contains(n));
    if !any {
        return;
    }
    let named: Vec<HeaderName> = headers
        .get_all(http::header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .filter_map(|n| HeaderName::from_bytes(n.trim().as_bytes()).ok())
        .collect();
    for name in named {
        headers.remove(name);
    }
    for name in &HOP_BY_HOP {
        headers.remove(name);
    }
    if headers.get(http::header::TE).is_some_and(|v| !v.as_bytes().eq_ignore_ascii_case(b"trailers")) {
        headers.remove(http::header::TE);
    }
}

/// Whether the request is gRPC (`content-type: application/grpc[+proto|...]`).
pub fn is_grpc(headers: &HeaderMap) -> bool {
    headers.get(http::header::CONTENT_TYPE).is_some_and(|v| v.as_bytes().starts_with(b"application/grpc"))
}

/// Headers and a clock from arbitrary bytes, for the fuzz target and the property tests:
/// the first 8 bytes are `now`, the rest `name\0value\0` pairs (pairs that are not valid
/// header names or values are skipped, as hyper would have refused them).
pub fn from_fuzz_bytes(data: &[u8]) -> (HeaderMap, Nanos) {
    let mut now = [0u8; 8];
    let cut = data.len().min(8);
    now[..cut].copy_from_slice(&data[..cut]);
    let mut headers = HeaderMap::new();
    let mut parts = data[cut..].split(|&b| b == 0);
    while let (Some(name), Some(value)) = (parts.next(), parts.next()) {
        if let (Ok(n), Ok(v)) = (HeaderName::from_bytes(name), HeaderValue::from_bytes(value)) {
            headers.append(n, v);
        }
    }
    // Keep `now` a plausible clock (below 2^62 ns, year 2116) so saturating math is tested, not overflow.
    (headers, u64::from_le_bytes(now) >> 2)
}

#[cfg(test)]
mod tests {
    use super::*;
    use tailor_core::wire::Key;

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (n, v) in pairs {
            h.append(HeaderName::from_bytes(n.as_bytes()).unwrap(), HeaderValue::from_str(v).unwrap());
        }
        h
    }

    const MAX_AGE: Nanos = 10_000_000_000;

    #[test]
    fn carried_contexts_are_clamped_and_missing_ones_stamped() {
        let stats = WireStats::new();
        let trust = Trust { keys: None, max_age_ns: MAX_AGE };
        let now = 100_000_000_000;
        let (ctx, how) = inbound(&headers(&[("tailor-context", "1.g1.c0.k1.h1")]), now, trust, &stats);
        assert_eq!((ctx.gat, how), (now - MAX_AGE, Inbound::Carried));
        let (ctx, how) = inbound(&headers(&[("grpc-timeout", "5m")]), now, trust, &stats);
        assert_eq!((ctx.gat, ctx.deadline, how), (now, now + 5_000_000, Inbound::Stamped));
        let (_, how) = inbound(&headers(&[("tailor-context", "junk")]), now, trust, &stats);
        assert_eq!(how, Inbound::Rejected(WireError::Malformed));
        assert_eq!((stats.accepted(), stats.absent()), (1, 1));
    }

    #[test]
    fn mac_is_required_when_keys_are_given() {
        let key = Key::new("k1", b"0123456789abcdef0123").unwrap();
        let ring = Keyring::new([key.clone()]).unwrap();
        let stats = WireStats::new();
        let trust = Trust { keys: Some(&ring), max_age_ns: MAX_AGE };
        let ctx = Context::stamped(50);
        let mut h = HeaderMap::new();
        write_context(&mut h, &ctx, Some(&key));
        assert_eq!(inbound(&h, 60, trust, &stats), (ctx, Inbound::Carried));
        write_context(&mut h, &ctx, None);
        assert_eq!(inbound(&h, 60, trust, &stats).1, Inbound::Rejected(WireError::MissingMac));
        assert_eq!(stats.rejected_of(WireError::MissingMac), 1);
    }

    #[test]
    fn strip_removes_every_carrier_and_keeps_other_baggage() {
        let mut h = headers(&[
            ("tailor-context", "1.g1.c0.k1.h0"),
            ("baggage", "a=1,tailor=1.g1.c0.k1.h0"),
            ("baggage", "b=2"),
        ]);
        strip_context(&mut h);
        assert!(h.get("tailor-context").is_none());
        assert_eq!(h.get("baggage").unwrap(), "a=1,b=2");
        let mut only = headers(&[("baggage", "tailor=1.g1.c0.k1.h0")]);
        strip_context(&mut only);
        assert!(only.get("baggage").is_none());
    }

    #[test]
    fn grpc_timeout_keeps_the_shorter_one() {
        let mut ctx = Context::stamped(0);
        ctx.deadline = 10_000_000;
        let mut h = headers(&[("grpc-timeout", "1m")]);
        write_grpc_timeout(&mut h, &ctx, 0);
        assert_eq!(h.get("grpc-timeout").unwrap(), "1m");
        let mut h = headers(&[("grpc-timeout", "1S")]);
        write_grpc_timeout(&mut h, &ctx, 0);
        assert_eq!(h.get("grpc-timeout").unwrap(), "10000000n");
    }

    #[test]
    fn responses_lose_tailor_headers_and_requests_hop_by_hop_ones() {
        let mut h = headers(&[("tailor-context", "x"), ("tailor-shed", "queue_full"), ("content-type", "a")]);
        strip_response(&mut h);
        assert_eq!(h.len(), 1);
        let mut h = headers(&[("connection", "close, x-secret"), ("x-secret", "1"), ("te", "trailers"), ("a", "b")]);
        remove_hop_by_hop(&mut h);
        assert_eq!(h.len(), 2, "{h:?}");
    }

    /// Each hop-by-hop header alone is found (the one pass that decides whether to look
    /// further must see every one of them), and a request with none keeps every header.
    #[test]
    fn every_hop_by_hop_header_alone_is_removed_and_other_headers_stay() {
        for name in
            ["connection", "keep-alive", "proxy-connection", "transfer-encoding", "upgrade", "proxy-authorization"]
        {
            let mut h = headers(&[(name, "x"), ("a", "b")]);
            remove_hop_by_hop(&mut h);
            assert_eq!(h.len(), 1, "{name}: {h:?}");
            assert!(h.contains_key("a"));
        }
        let mut h = headers(&[("te", "gzip"), ("a", "b")]);
        remove_hop_by_hop(&mut h);
        assert!(!h.contains_key("te") && h.contains_key("a"), "{h:?}");
        let kept =
            [("te", "trailers"), ("host", "h"), ("content-type", "a"), ("baggage", "k=v"), ("x-keep-alive-ish", "1")];
        let mut h = headers(&kept);
        remove_hop_by_hop(&mut h);
        assert_eq!(h.len(), kept.len(), "{h:?}");
    }
}
