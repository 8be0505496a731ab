//! The shared wire-format vectors (`testdata/context/vectors.json`): the Rust
//! codec must pass every case, exactly as `sdk/go` and `sdk/python` must.
//!
//! These are golden cases written from the spec (`docs/wire-format.md`), not
//! outputs of this code; see `testdata/context/README.md`. Each section is one
//! test, and every failing case of a section is reported, not just the first.

use std::sync::OnceLock;

use serde_json::Value;
use tailor_core::wire::{self, baggage, grpc_timeout, EdgeRoute, Key, KeyError, Keyring, WireError};
use tailor_core::Context;

fn vectors() -> &'static Value {
    static V: OnceLock<Value> = OnceLock::new();
    V.get_or_init(|| {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../testdata/context/vectors.json");
        let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{path}: {e}"));
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("{path}: {e}"))
    })
}

fn cases(section: &str) -> &'static [Value] {
    let cases = vectors()[section].as_array().unwrap_or_else(|| panic!("no section {section}"));
    assert!(!cases.is_empty(), "section {section} is empty");
    cases
}

/// Runs `check` on every case of `section`; fails listing every case that failed.
fn each(section: &str, check: impl Fn(&Value) -> Result<(), String>) {
    let failures: Vec<String> =
        cases(section).iter().filter_map(|c| check(c).err().map(|e| format!("  {}: {e}", name(c)))).collect();
    assert!(
        failures.is_empty(),
        "{section}: {} of {} cases failed:\n{}",
        failures.len(),
        cases(section).len(),
        failures.join("\n")
    );
}

fn name(case: &Value) -> String {
    case.get("name").and_then(Value::as_str).map(str::to_owned).unwrap_or_else(|| case.to_string())
}

fn ns(v: &Value) -> u64 {
    v.as_str().unwrap_or_else(|| panic!("ns value {v} is not a string")).parse().unwrap()
}

fn ns_or_never(v: &Value) -> u64 {
    if v.is_null() {
        u64::MAX
    } else {
        ns(v)
    }
}

fn context(v: &Value) -> Context {
    Context {
        gat: ns(&v["gat"]),
        deadline: ns_or_never(&v["deadline"]),
        class: v["class"].as_u64().unwrap().try_into().unwrap(),
        fanout: v["fanout"].as_u64().unwrap().try_into().unwrap(),
        hop: v["hop"].as_u64().unwrap().try_into().unwrap(),
    }
}

/// An input as bytes: a string, `{"hex"}` or `{"prefix","repeat","times","suffix"}`.
fn input(v: &Value) -> Vec<u8> {
    match v {
        Value::String(s) => s.as_bytes().to_vec(),
        Value::Object(o) if o.contains_key("hex") => {
            let hex = o["hex"].as_str().unwrap();
            (0..hex.len()).step_by(2).map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap()).collect()
        }
        Value::Object(o) => {
            let mut s = o["prefix"].as_str().unwrap().to_owned();
            s.push_str(&o["repeat"].as_str().unwrap().repeat(o["times"].as_u64().unwrap() as usize));
            s.push_str(o["suffix"].as_str().unwrap());
            s.into_bytes()
        }
        _ => panic!("bad input {v}"),
    }
}

fn secret(hex: &str) -> Vec<u8> {
    input(&serde_json::json!({ "hex": hex }))
}

fn key(id: &str) -> Key {
    let k =
        vectors()["keys"].as_array().unwrap().iter().find(|k| k["id"] == id).unwrap_or_else(|| panic!("no key {id}"));
    Key::new(id, &secret(k["secret_hex"].as_str().unwrap())).unwrap()
}

/// Compares an outcome with a case's `context` / `error` / `absent`.
fn expect(case: &Value, got: Result<Option<Context>, WireError>) -> Result<(), String> {
    let want: Result<Option<Context>, String> = if let Some(e) = case.get("error") {
        Err(e.as_str().unwrap().to_owned())
    } else if case.get("absent").is_some() {
        Ok(None)
    } else {
        Ok(Some(context(&case["context"])))
    };
    let got = got.map_err(|e| e.kind().to_owned());
    if got == want {
        Ok(())
    } else {
        Err(format!("got {got:?}, want {want:?}"))
    }
}

#[test]
fn error_kinds_are_exactly_the_shared_list() {
    let want: Vec<&str> = vectors()["error_kinds"].as_array().unwrap().iter().map(|k| k.as_str().unwrap()).collect();
    let have: Vec<&str> = WireError::ALL.iter().map(|e| e.kind()).collect();
    assert_eq!(have, want);
    for e in WireError::ALL {
        assert_eq!(WireError::from_kind(e.kind()), Some(e));
    }
    let limits = &vectors()["limits"];
    assert_eq!(limits["max_len"], wire::MAX_LEN);
    assert_eq!(limits["max_baggage_len"], baggage::MAX_LEN);
    assert_eq!(limits["max_key_id_len"], wire::MAX_KEY_ID_LEN);
    assert_eq!(limits["min_secret_len"], wire::MIN_SECRET_LEN);
    assert_eq!(vectors()["version"], wire::VERSION);
}

#[test]
fn valid_encodings_both_ways() {
    each("valid", |c| {
        let ctx = context(&c["context"]);
        let value = c["value"].as_str().unwrap();
        let enc = wire::encode(&ctx);
        if enc != value {
            return Err(format!("encode gave {enc}, want {value}"));
        }
        let dec = wire::decode(value).map_err(|e| format!("decode: {e:?}"))?;
        if dec.context != ctx || dec.mac.is_some() {
            return Err(format!("decode gave {dec:?}"));
        }
        Ok(())
    });
}

#[test]
fn invalid_inputs_name_their_error() {
    each("invalid", |c| expect(c, wire::decode(input(&c["input"])).map(|d| Some(d.context))));
}

#[test]
fn signed_encodings_are_exact() {
    each("signed", |c| {
        let ctx = context(&c["context"]);
        let value = c["value"].as_str().unwrap();
        let key = key(c["key"].as_str().unwrap());
        let enc = wire::encode_signed(&ctx, &key);
        if enc != value {
            return Err(format!("encode_signed gave {enc}, want {value}"));
        }
        let dec = wire::decode(value).map_err(|e| format!("decode: {e:?}"))?;
        let ring = Keyring::new([key]).unwrap();
        match dec.verify(&ring) {
            Ok(got) if got == ctx && dec.encode() == value => Ok(()),
            other => Err(format!("verify gave {other:?}, re-encoded {}", dec.encode())),
        }
    });
}

#[test]
fn verification_outcomes() {
    each("verify", |c| {
        let ring = Keyring::new(c["keys"].as_array().unwrap().iter().map(|id| key(id.as_str().unwrap()))).unwrap();
        let got = wire::decode(input(&c["input"])).and_then(|d| d.verify(&ring)).map(Some);
        expect(c, got)
    });
}

#[test]
fn invalid_keys_are_refused() {
    each("keys_invalid", |c| {
        let got = Key::new(c["id"].as_str().unwrap(), &secret(c["secret_hex"].as_str().unwrap()));
        let want = match c["error"].as_str().unwrap() {
            "invalid_id" => KeyError::InvalidId,
            "short_secret" => KeyError::ShortSecret,
            other => return Err(format!("unknown key error {other}")),
        };
        match got {
            Err(e) if e == want => Ok(()),
            other => Err(format!("got {other:?}")),
        }
    });
}

#[test]
fn baggage_decoding() {
    each("baggage_decode", |c| expect(c, baggage::decode(input(&c["header"])).map(|d| d.map(|d| d.context))));
}

#[test]
fn baggage_with_replaces_only_our_member() {
    each("baggage_with", |c| {
        let got = baggage::with(c["header"].as_str(), c["value"].as_str().unwrap());
        (got == c["want"].as_str().unwrap()).then_some(()).ok_or(format!("got {got:?}"))
    });
}

#[test]
fn baggage_without_strips_our_member() {
    each("baggage_without", |c| {
        let got = baggage::without(c["header"].as_str().unwrap());
        (got.as_deref() == c["want"].as_str()).then_some(()).ok_or(format!("got {got:?}"))
    });
}

#[test]
fn extraction_from_a_carrier() {
    each("extract", |c| {
        let headers: Vec<(String, Vec<u8>)> = c["headers"]
            .as_array()
            .unwrap()
            .iter()
            .map(|h| (h[0].as_str().unwrap().to_owned(), input(&h[1])))
            .collect();
        expect(c, wire::extract(headers).map(|d| d.map(|d| d.context)))
    });
}

#[test]
fn grpc_timeout_encoding() {
    each("grpc_timeout_encode", |c| {
        let got = grpc_timeout::encode(ns(&c["remaining"]));
        (*got == *c["value"].as_str().unwrap()).then_some(()).ok_or(format!("{}: got {got}", c["remaining"]))
    });
}

#[test]
fn grpc_timeout_decoding() {
    each("grpc_timeout_decode", |c| {
        let got = grpc_timeout::decode(c["value"].as_str().unwrap()).map_err(|e| e.kind().to_owned());
        let want = match c.get("error") {
            Some(e) => Err(e.as_str().unwrap().to_owned()),
            None => Ok(ns(&c["ns"])),
        };
        (got == want).then_some(()).ok_or(format!("{}: got {got:?}, want {want:?}", c["value"]))
    });
}

#[test]
fn grpc_timeout_deadlines() {
    each("grpc_timeout_from_deadline", |c| {
        let got = grpc_timeout::from_deadline(ns_or_never(&c["deadline"]), ns(&c["now"]));
        let got = got.as_deref();
        (got == c["value"].as_str()).then_some(()).ok_or(format!("got {got:?}"))
    });
    each("grpc_timeout_to_deadline", |c| {
        let got =
            grpc_timeout::to_deadline(c["value"].as_str().unwrap(), ns(&c["now"])).map_err(|e| e.kind().to_owned());
        let want = match c.get("error") {
            Some(e) => Err(e.as_str().unwrap().to_owned()),
            None => Ok(ns_or_never(&c["deadline"])),
        };
        (got == want).then_some(()).ok_or(format!("got {got:?}, want {want:?}"))
    });
}

#[test]
fn clamping() {
    each("clamp", |c| {
        let (got, clamped) = wire::clamp(context(&c["context"]), ns(&c["now"]), ns(&c["max_age"]));
        let want = context(&c["want"]);
        let w = &c["clamped"];
        let want_clamped = wire::Clamped {
            gat_ahead: ns(&w["gat_ahead"]),
            gat_stale: ns(&w["gat_stale"]),
            deadline_early: ns(&w["deadline_early"]),
        };
        if (got, clamped) == (want, want_clamped) {
            Ok(())
        } else {
            Err(format!("got {got:?} {clamped:?}, want {want:?} {want_clamped:?}"))
        }
    });
}

#[test]
fn edge_stamping() {
    each("edge", |c| {
        let r = &c["route"];
        let route = EdgeRoute {
            class: r["class"].as_u64().unwrap().try_into().unwrap(),
            budget: (!r["budget"].is_null()).then(|| ns(&r["budget"])),
        };
        let got = route.stamp(ns(&c["now"]));
        let want = context(&c["want"]);
        (got == want).then_some(()).ok_or(format!("got {got:?}, want {want:?}"))
    });
}
