//! Every context parser on arbitrary bytes: no panics, exact round trips.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tailor_core::wire::{self, baggage, grpc_timeout};

fuzz_target!(|data: &[u8]| {
    // A value, as a header carries it: accepted means canonical.
    if let Ok(d) = wire::decode(data) {
        assert_eq!(d.encode().as_bytes(), data, "accepted but not canonical");
        assert!(data.iter().all(|&b| wire::is_value_byte(b)));
    }

    // As baggage: a member we read survives rewriting the header around it.
    if let Ok(Some(d)) = baggage::decode(data) {
        if let Ok(header) = std::str::from_utf8(data) {
            let rewritten = baggage::with(Some(header), &d.encode());
            if rewritten.len() <= baggage::MAX_LEN {
                assert_eq!(baggage::decode(&rewritten), Ok(Some(d)), "{rewritten:?}");
            }
            if let Some(rest) = baggage::without(&rewritten) {
                if rest.len() <= baggage::MAX_LEN {
                    assert_eq!(baggage::decode(&rest), Ok(None), "{rest:?}");
                }
            }
        }
    }

    // grpc-timeout: any value it accepts is at most 9 bytes.
    if grpc_timeout::decode(data).is_ok() {
        assert!(data.len() <= 9);
    }

    // A carrier: the same bytes as the dedicated header, and split into two baggage lines.
    let cut = data.first().map_or(0, |&b| b as usize % (data.len() + 1));
    let _ = wire::extract([("tailor-context", data)]);
    let _ = wire::extract([("baggage", &data[..cut]), ("Baggage", &data[cut..])]);
});
