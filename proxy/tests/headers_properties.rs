//! The promises of the fuzz target `proxy_headers`, as property tests on stable Rust.

use proptest::prelude::*;
use tailor_core::wire::{self, Key, Keyring, WireStats};
use tailor_core::Context;
use tailor_proxy::headers::{self, from_fuzz_bytes, Trust};

fn interesting() -> impl Strategy<Value = Vec<u8>> {
    // Real header names with arbitrary values mixed with arbitrary bytes.
    let name = prop::sample::select(vec![
        "tailor-context",
        "baggage",
        "Baggage",
        "grpc-timeout",
        "connection",
        "te",
        "content-type",
        "tailor-shed",
        "x",
    ]);
    let value = prop::collection::vec(prop::sample::select(b"1.gdckhim0123456789,;=tailor %-_~ \x7f".to_vec()), 0..60);
    let pair = (name, value).prop_map(|(n, v)| [n.as_bytes(), b"\0", &v, b"\0"].concat());
    (any::<[u8; 8]>(), prop::collection::vec(pair, 0..6), prop::collection::vec(any::<u8>(), 0..40))
        .prop_map(|(now, pairs, noise)| [now.to_vec(), pairs.concat(), noise].concat())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2_000))]
    #[test]
    fn strip_leaves_nothing_and_write_reads_back(data in interesting()) {
        let (mut request, now) = from_fuzz_bytes(&data);
        let key = Key::new("k1", b"0123456789abcdef").unwrap();
        let ring = Keyring::new([key.clone()]).unwrap();
        let stats = WireStats::new();
        for keys in [None, Some(&ring)] {
            let (ctx, _) = headers::inbound(&request, now, Trust { keys, max_age_ns: 10_000_000_000 }, &stats);
            prop_assert!(ctx.gat <= now && ctx.deadline >= ctx.gat);
        }
        let mut response = request.clone();
        headers::strip_response(&mut response);
        prop_assert!(response.keys().all(|n| !n.as_str().starts_with("tailor-")));
        headers::remove_hop_by_hop(&mut request);
        headers::strip_context(&mut request);
        let read = |h: &http::HeaderMap| wire::extract(h.iter().map(|(n, v)| (n.as_str(), v.as_bytes())));
        prop_assert!(matches!(read(&request), Ok(None) | Err(wire::WireError::TooLong)));
        let ctx = Context::stamped(now);
        headers::write_context(&mut request, &ctx, Some(&key));
        let got = read(&request).unwrap().unwrap();
        prop_assert_eq!(got.verify(&ring), Ok(ctx));
    }
}
