//! The proxy's header handling on arbitrary headers: no panics; after the edge strips a
//! request no context is left, after it writes one exactly that one is read back.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tailor_proxy::headers::{self, Trust};
use tailor_core::wire::{self, Key, Keyring, WireStats};
use tailor_core::Context;

fuzz_target!(|data: &[u8]| {
    let (mut request, now) = tailor_proxy::headers::from_fuzz_bytes(data);
    let key = Key::new("k1", b"0123456789abcdef").unwrap();
    let ring = Keyring::new([key.clone()]).unwrap();
    let stats = WireStats::new();
    for keys in [None, Some(&ring)] {
        let (ctx, _) = headers::inbound(&request, now, Trust { keys, max_age_ns: 10_000_000_000 }, &stats);
        assert!(ctx.gat <= now && ctx.deadline >= ctx.gat);
    }
    let _ = headers::is_grpc(&request);
    let mut response = request.clone();
    headers::strip_response(&mut response);
    assert!(response.keys().all(|n| !n.as_str().starts_with("tailor-")));
    headers::remove_hop_by_hop(&mut request);
    headers::strip_context(&mut request);
    let read = |h: &http::HeaderMap| wire::extract(h.iter().map(|(n, v)| (n.as_str(), v.as_bytes())));
    // Only the other members of an over-long baggage can be left: never a context.
    assert!(matches!(read(&request), Ok(None) | Err(wire::WireError::TooLong)));
    let ctx = Context::stamped(now);
    headers::write_context(&mut request, &ctx, Some(&key));
    let got = read(&request).expect("our own context decodes").expect("and is found");
    assert_eq!(got.verify(&ring), Ok(ctx));
    headers::write_grpc_timeout(&mut request, &ctx, now);
});
