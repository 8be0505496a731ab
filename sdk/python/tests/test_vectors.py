"""The shared wire-format vectors (testdata/context/vectors.json): this codec
must pass every case, exactly as the Rust and Go codecs must. One test per case."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import tailor_context as tc

VECTORS = json.loads((Path(__file__).resolve().parents[3] / "testdata" / "context" / "vectors.json").read_text())


def cases(section):
    cs = VECTORS[section]
    assert cs, section
    return pytest.mark.parametrize("case", cs, ids=[c.get("name") or json.dumps(c) for c in cs])


def ns(v):
    return int(v)


def ns_or_never(v):
    return tc.NEVER if v is None else int(v)


def ctx(j) -> tc.Context:
    return tc.Context(gat=ns(j["gat"]), deadline=ns_or_never(j["deadline"]), class_=j["class"], fanout=j["fanout"], hop=j["hop"])


def data(v) -> bytes:
    """An input: a string, {"hex"} or {"prefix","repeat","times","suffix"}."""
    if isinstance(v, str):
        return v.encode("utf-8")
    if "hex" in v:
        return bytes.fromhex(v["hex"])
    return (v["prefix"] + v["repeat"] * v["times"] + v["suffix"]).encode("utf-8")


def key(key_id: str) -> tc.Key:
    (k,) = [k for k in VECTORS["keys"] if k["id"] == key_id]
    return tc.Key(key_id, bytes.fromhex(k["secret_hex"]))


def expect(case, run):
    """Runs ``run`` (returning a Context or None) against the case's context / error / absent."""
    if "error" in case:
        with pytest.raises(tc.WireError) as e:
            got = run()
            pytest.fail(f"got {got}, want error {case['error']}")
        assert e.value.kind == case["error"]
    elif case.get("absent"):
        assert run() is None
    else:
        assert run() == ctx(case["context"])


def test_error_kinds_are_the_shared_list():
    assert list(tc.ERROR_KINDS) == VECTORS["error_kinds"]
    limits = VECTORS["limits"]
    assert (limits["max_len"], limits["max_baggage_len"]) == (tc.MAX_LEN, tc.MAX_BAGGAGE_LEN)
    assert (limits["max_key_id_len"], limits["min_secret_len"]) == (tc.MAX_KEY_ID_LEN, tc.MIN_SECRET_LEN)
    assert VECTORS["version"] == tc.VERSION


@cases("valid")
def test_valid(case):
    c = ctx(case["context"])
    assert tc.encode(c) == case["value"]
    d = tc.decode(case["value"])
    assert d.context == c and not d.signed


@cases("invalid")
def test_invalid(case):
    expect(case, lambda: tc.decode(data(case["input"])).context)


@cases("signed")
def test_signed(case):
    k = key(case["key"])
    c = ctx(case["context"])
    assert tc.encode_signed(c, k) == case["value"]
    d = tc.decode(case["value"])
    assert d.verify(tc.Keyring([k])) == c
    assert d.encode() == case["value"]


@cases("verify")
def test_verify(case):
    ring = tc.Keyring([key(i) for i in case["keys"]])
    expect(case, lambda: tc.decode(data(case["input"])).verify(ring))


@cases("keys_invalid")
def test_keys_invalid(case):
    with pytest.raises(tc.KeyConfigError) as e:
        tc.Key(case["id"], bytes.fromhex(case["secret_hex"]))
    assert e.value.kind == case["error"]


@cases("baggage_decode")
def test_baggage_decode(case):
    def run():
        d = tc.decode_baggage(data(case["header"]))
        return None if d is None else d.context

    expect(case, run)


@cases("baggage_with")
def test_baggage_with(case):
    assert tc.baggage_with(case["header"], case["value"]) == case["want"]


@cases("baggage_without")
def test_baggage_without(case):
    assert tc.baggage_without(case["header"]) == case["want"]


@cases("extract")
def test_extract(case):
    def run():
        d = tc.extract((name, data(value)) for name, value in case["headers"])
        return None if d is None else d.context

    expect(case, run)


@cases("extract")
def test_extract_with_bytes_names_as_asgi_gives_them(case):
    """Raw ASGI headers are (bytes, bytes): every extract case must give the same
    answer with the names as bytes, as they arrive (ASGI lower-cases them; the
    vectors' mixed case is kept to check the case-insensitive match on bytes)."""

    def run():
        d = tc.extract((name.encode("latin-1"), data(value)) for name, value in case["headers"])
        return None if d is None else d.context

    expect(case, run)


@cases("grpc_timeout_encode")
def test_grpc_timeout_encode(case):
    assert tc.grpc_timeout_encode(ns(case["remaining"])) == case["value"]


@cases("grpc_timeout_decode")
def test_grpc_timeout_decode(case):
    if "error" in case:
        with pytest.raises(tc.WireError) as e:
            tc.grpc_timeout_decode(case["value"])
        assert e.value.kind == case["error"]
    else:
        assert tc.grpc_timeout_decode(case["value"]) == ns(case["ns"])


@cases("grpc_timeout_from_deadline")
def test_grpc_timeout_from_deadline(case):
    assert tc.grpc_timeout_from_deadline(ns_or_never(case["deadline"]), ns(case["now"])) == case["value"]


@cases("grpc_timeout_to_deadline")
def test_grpc_timeout_to_deadline(case):
    if "error" in case:
        with pytest.raises(tc.WireError) as e:
            tc.grpc_timeout_to_deadline(case["value"], ns(case["now"]))
        assert e.value.kind == case["error"]
    else:
        assert tc.grpc_timeout_to_deadline(case["value"], ns(case["now"])) == ns_or_never(case["deadline"])


@cases("clamp")
def test_clamp(case):
    got, clamped = tc.clamp(ctx(case["context"]), ns(case["now"]), ns(case["max_age"]))
    w = case["clamped"]
    assert got == ctx(case["want"])
    assert clamped == tc.Clamped(ns(w["gat_ahead"]), ns(w["gat_stale"]), ns(w["deadline_early"]))


@cases("edge")
def test_edge(case):
    r = case["route"]
    route = tc.EdgeRoute(class_=r["class"], budget=None if r["budget"] is None else ns(r["budget"]))
    assert route.stamp(ns(case["now"])) == ctx(case["want"])
