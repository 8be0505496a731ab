//! Robustness and round-trip properties of the context wire codec, over random
//! and mutated inputs (runs in the normal suite; `fuzz/` has the open-ended
//! coverage-guided version).
//!
//! The promises checked: nothing panics on any input; an accepted value is
//! canonical (re-encoding it gives back the very same bytes); every context
//! survives every carrier exactly; no single-byte change to a signed value
//! verifies; clamping stays in bounds and is idempotent.

use proptest::collection::vec;
use proptest::prelude::*;
use tailor_core::time::NEVER;
use tailor_core::wire::{self, baggage, grpc_timeout, Key, Keyring};
use tailor_core::Context;

fn any_context() -> impl Strategy<Value = Context> {
    // Mix edge values with ordinary ones: the boundaries are where codecs break.
    let ns = prop_oneof![Just(0u64), Just(u64::MAX), Just(u64::MAX - 1), any::<u64>(), 0u64..1_000_000];
    let deadline = prop_oneof![Just(NEVER), Just(NEVER - 1), Just(0u64), any::<u64>()];
    (ns, deadline, any::<u8>(), prop_oneof![Just(u32::MAX), Just(0u32), any::<u32>(), 1u32..100], any::<u8>())
        .prop_map(|(gat, deadline, class, fanout, hop)| Context { gat, deadline, class, fanout, hop })
}

fn test_key() -> Key {
    Key::new("k-test_1", b"0123456789abcdef0123456789abcdef").unwrap()
}

/// One edit of a byte string.
#[derive(Clone, Debug)]
enum Edit {
    Replace(usize, u8),
    Insert(usize, u8),
    Delete(usize),
    /// Copies a chunk of the string to another place (duplicated fields).
    Splice {
        from: usize,
        len: usize,
        to: usize,
    },
}

fn edit() -> impl Strategy<Value = Edit> {
    // Bytes that matter to the grammar are drawn more often than the rest.
    let byte = prop_oneof![
        4 => prop::sample::select(b".0123456789gdckhimx-_~%,; =:".to_vec()),
        1 => any::<u8>(),
    ];
    prop_oneof![
        (any::<usize>(), byte.clone()).prop_map(|(i, b)| Edit::Replace(i, b)),
        (any::<usize>(), byte).prop_map(|(i, b)| Edit::Insert(i, b)),
        any::<usize>().prop_map(Edit::Delete),
        (any::<usize>(), 1usize..24, any::<usize>()).prop_map(|(from, len, to)| Edit::Splice { from, len, to }),
    ]
}

fn apply(s: &mut Vec<u8>, e: &Edit) {
    let n = s.len();
    match *e {
        Edit::Replace(i, b) if n > 0 => s[i % n] = b,
        Edit::Insert(i, b) => s.insert(i % (n + 1), b),
        Edit::Delete(i) if n > 0 => {
            s.remove(i % n);
        }
        Edit::Splice { from, len, to } if n > 0 => {
            let from = from % n;
            let chunk: Vec<u8> = s[from..(from + len).min(n)].to_vec();
            let to = to % (n + 1);
            s.splice(to..to, chunk);
        }
        _ => {}
    }
}

/// Whatever `decode` says about `bytes`, an accepted value is canonical.
fn check_canonical(bytes: &[u8]) -> Result<(), TestCaseError> {
    if let Ok(d) = wire::decode(bytes) {
        let again = d.encode();
        prop_assert_eq!(again.as_bytes(), bytes, "accepted but not canonical");
        prop_assert_eq!(wire::decode(d.encode()), Ok(d));
    }
    Ok(())
}

/// A baggage member of someone else's: key and value from the baggage alphabet, maybe a property.
fn other_member() -> impl Strategy<Value = String> {
    ("[a-z][a-z0-9_*/-]{0,8}", "[!#-+\\--:<-\\[\\]-~]{0,12}", proptest::option::of("[a-z]{1,4}(=[a-z0-9]{0,4})?"))
        .prop_filter("not ours", |(k, _, _)| k != "tailor")
        .prop_map(|(k, v, p)| match p {
            Some(p) => format!("{k}={v};{p}"),
            None => format!("{k}={v}"),
        })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2_000, ..ProptestConfig::default() })]

    #[test]
    fn random_bytes_never_panic_and_accepted_values_are_canonical(bytes in vec(any::<u8>(), 0..200)) {
        check_canonical(&bytes)?;
        let _ = baggage::decode(&bytes);
        let _ = grpc_timeout::decode(&bytes);
        let _ = wire::extract([("tailor-context", &bytes), ("baggage", &bytes)]);
    }

    #[test]
    fn random_unreserved_strings_never_panic(s in "[0-9a-z.~_-]{0,140}") {
        check_canonical(s.as_bytes())?;
    }

    #[test]
    fn mutated_encodings_never_panic_and_stay_canonical(ctx in any_context(), signed in any::<bool>(), edits in vec(edit(), 1..6)) {
        let key = test_key();
        let mut bytes = if signed { wire::encode_signed(&ctx, &key) } else { wire::encode(&ctx) }.as_bytes().to_vec();
        for e in &edits {
            apply(&mut bytes, e);
        }
        check_canonical(&bytes)?;
        let header = [b"a=1,tailor=".as_slice(), &bytes].concat();
        let _ = baggage::decode(&header);
    }

    #[test]
    fn every_context_round_trips_exactly(ctx in any_context()) {
        let enc = wire::encode(&ctx);
        prop_assert!(enc.len() <= 67 && enc.bytes().all(wire::is_value_byte), "{}", enc);
        let dec = wire::decode(enc).unwrap();
        prop_assert_eq!(dec.context, ctx);
        prop_assert_eq!(dec.mac, None);
        prop_assert_eq!(dec.encode(), enc);
    }

    #[test]
    fn signed_contexts_verify_and_no_single_byte_change_does(ctx in any_context(), at in any::<usize>(), to in any::<u8>()) {
        let key = test_key();
        let ring = Keyring::new([key.clone()]).unwrap();
        let enc = wire::encode_signed(&ctx, &key);
        prop_assert!(enc.len() <= wire::MAX_LEN);
        prop_assert_eq!(wire::decode(enc).unwrap().verify(&ring), Ok(ctx));
        let mut bytes = enc.as_bytes().to_vec();
        let at = at % bytes.len();
        prop_assume!(bytes[at] != to);
        bytes[at] = to;
        prop_assert!(wire::decode(&bytes).and_then(|d| d.verify(&ring)).is_err(), "{:?} verified", String::from_utf8_lossy(&bytes));
    }

    #[test]
    fn contexts_survive_baggage_among_other_members(
        ctx in any_context(),
        others in vec(other_member(), 0..6),
        pos in any::<usize>(),
        escape in vec(any::<bool>(), 128),
        ows in "[ \t]{0,2}",
    ) {
        let value = wire::encode(&ctx);
        // Some propagators percent-encode bytes they need not: decoding must not care.
        let escaped: String = value.bytes().zip(escape.iter().cycle()).map(|(b, &e)| if e { format!("%{b:02X}") } else { (b as char).to_string() }).collect();
        let mut members = others.clone();
        members.insert(pos % (others.len() + 1), format!("tailor{ows}={ows}{escaped}{ows};prop"));
        let header = members.join(&format!("{ows},{ows}"));
        prop_assert_eq!(baggage::decode(&header).unwrap().map(|d| d.context), Some(ctx));
        prop_assert_eq!(wire::extract([("baggage", &header)]).unwrap().map(|d| d.context), Some(ctx));

        // Writing replaces only ours; others keep their order and bytes.
        let other = Context { hop: ctx.hop.wrapping_add(1), ..ctx };
        let rewritten = baggage::with(Some(&header), &wire::encode(&other));
        prop_assert_eq!(baggage::decode(&rewritten).unwrap().map(|d| d.context), Some(other));
        prop_assert_eq!(baggage::without(&rewritten), baggage::without(&header));
        let kept = baggage::without(&header).unwrap_or_default();
        prop_assert_eq!(kept, others.join(","));
    }

    #[test]
    fn grpc_timeouts_round_trip_within_one_unit(remaining in prop_oneof![any::<u64>(), 0u64..1_000_000_000_000, Just(u64::MAX)]) {
        let t = grpc_timeout::encode(remaining);
        prop_assert!(t.len() >= 2 && t.len() <= 9, "{}", t);
        let back = grpc_timeout::decode(t.as_bytes()).unwrap();
        let unit = match t.as_bytes()[t.len() - 1] {
            b'n' => 1u64,
            b'u' => 1_000,
            b'm' => 1_000_000,
            b'S' => 1_000_000_000,
            b'M' => 60_000_000_000,
            b'H' => 3_600_000_000_000,
            other => panic!("unit {}", other as char),
        };
        // Rounded up, never down, by less than one unit (unless saturated).
        prop_assert!(back >= remaining, "{} -> {} -> {}", remaining, t, back);
        prop_assert!(back - remaining < unit || back == u64::MAX);
        // The finest unit that fits: one unit finer would need more than 8 digits.
        if unit > 1 {
            let finer = [1u64, 1_000, 1_000_000, 1_000_000_000, 60_000_000_000].into_iter().filter(|&u| u < unit).max().unwrap();
            prop_assert!(remaining.div_ceil(finer) > grpc_timeout::MAX_VALUE);
        }
    }

    #[test]
    fn clamping_is_bounded_and_idempotent(ctx in any_context(), now in any::<u64>(), max_age in prop_oneof![any::<u64>(), 0u64..10_000_000_000]) {
        let (c, report) = wire::clamp(ctx, now, max_age);
        let oldest = now.saturating_sub(max_age);
        prop_assert!(c.gat <= now && c.gat >= oldest);
        prop_assert!(c.deadline >= c.gat);
        prop_assert_eq!((c.class, c.fanout, c.hop), (ctx.class, ctx.fanout, ctx.hop));
        prop_assert_eq!(report.any(), c != ctx);
        if ctx.gat <= now && ctx.gat >= oldest {
            prop_assert_eq!(c.gat, ctx.gat);
        }
        if ctx.deadline == NEVER {
            prop_assert_eq!(c.deadline, NEVER);
        }
        prop_assert_eq!(wire::clamp(c, now, max_age), (c, wire::Clamped::default()));
    }
}
