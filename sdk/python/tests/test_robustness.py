"""Robustness beyond the vectors: random and mutated inputs never raise anything
but WireError, accepted values are canonical, and contexts round-trip exactly.
Seeded, so a failure reproduces."""

from __future__ import annotations

import random

import pytest

import tailor_context as tc

U64 = 2**64 - 1
KEY = tc.Key("k-test_1", b"0123456789abcdef0123456789abcdef")
GRAMMAR_BYTES = b".0123456789gdckhimx-_~%,; =:"


def random_context(rng: random.Random) -> tc.Context:
    pick = lambda *choices: rng.choice(choices)  # noqa: E731
    return tc.Context(
        gat=pick(0, U64, U64 - 1, rng.getrandbits(64), rng.randrange(10**6)),
        deadline=pick(tc.NEVER, tc.NEVER - 1, 0, rng.getrandbits(64)),
        class_=rng.randrange(256),
        fanout=pick(0, 2**32 - 1, rng.getrandbits(32), rng.randrange(1, 100)),
        hop=rng.randrange(256),
    )


def mutate(rng: random.Random, b: bytearray) -> None:
    byte = rng.choice(GRAMMAR_BYTES) if rng.random() < 0.8 else rng.randrange(256)
    op = rng.randrange(4)
    if op == 0 and b:
        b[rng.randrange(len(b))] = byte
    elif op == 1:
        b.insert(rng.randrange(len(b) + 1), byte)
    elif op == 2 and b:
        del b[rng.randrange(len(b))]
    elif b:
        i = rng.randrange(len(b))
        chunk = b[i : i + rng.randrange(1, 24)]
        j = rng.randrange(len(b) + 1)
        b[j:j] = chunk


def check_canonical(b: bytes) -> None:
    try:
        d = tc.decode(b)
    except tc.WireError as e:
        assert e.kind in tc.ERROR_KINDS
        return
    assert d.encode().encode("ascii") == b, b


@pytest.mark.parametrize("seed", range(4))
def test_random_bytes_never_raise_anything_but_wire_error(seed):
    rng = random.Random(seed)
    for _ in range(2_000):
        b = bytes(rng.randrange(256) for _ in range(rng.randrange(200)))
        check_canonical(b)
        for f in (tc.decode_baggage, tc.grpc_timeout_decode):
            try:
                f(b)
            except tc.WireError:
                pass


@pytest.mark.parametrize("seed", range(4))
def test_mutated_encodings_stay_canonical(seed):
    rng = random.Random(seed)
    accepted = 0
    for _ in range(3_000):
        c = random_context(rng)
        b = bytearray((tc.encode_signed(c, KEY) if rng.random() < 0.3 else tc.encode(c)).encode())
        for _ in range(rng.randrange(1, 6)):
            mutate(rng, b)
        check_canonical(bytes(b))
        try:
            tc.decode(bytes(b))
            accepted += 1
        except tc.WireError:
            pass
    assert accepted > 0, "no mutation was accepted: the canonical check never ran"


def test_every_context_round_trips_and_signatures_catch_any_byte_change():
    rng = random.Random(7)
    ring = tc.Keyring([KEY])
    for _ in range(2_000):
        c = random_context(rng)
        enc = tc.encode(c)
        assert tc.decode(enc).context == c and tc.decode(enc).encode() == enc
        signed = tc.encode_signed(c, KEY)
        assert tc.decode(signed).verify(ring) == c
        b = bytearray(signed.encode())
        i = rng.randrange(len(b))
        new = rng.randrange(256)
        if new == b[i]:
            continue
        b[i] = new
        with pytest.raises(tc.WireError):
            tc.decode(bytes(b)).verify(ring)


def test_grpc_timeouts_round_trip_within_one_unit():
    rng = random.Random(3)
    units = {"n": 1, "u": 10**3, "m": 10**6, "S": 10**9, "M": 60 * 10**9, "H": 3600 * 10**9}
    for remaining in [0, 1, U64] + [rng.getrandbits(rng.randrange(1, 65)) for _ in range(5_000)]:
        t = tc.grpc_timeout_encode(remaining)
        back = tc.grpc_timeout_decode(t)
        assert 2 <= len(t) <= 9
        assert remaining <= back and (back - remaining < units[t[-1]] or back == U64), (remaining, t, back)


def test_stats_count_by_kind():
    s = tc.Stats()
    s.record(False)
    s.record(True)
    try:
        tc.decode("2.x")
    except tc.WireError as e:
        s.record(True, e)
    s.record_clamp(tc.Clamped(gat_stale=5))
    assert (s.accepted, s.absent) == (1, 1)
    assert dict(s.rejected())["unsupported_version"] == 1 and len(s.rejected()) == len(tc.ERROR_KINDS)
    assert dict(s.clamped()) == {"gat_ahead": 0, "gat_stale": 1, "deadline_early": 0}


def test_contexts_reject_values_their_fields_cannot_hold():
    for bad in ({"gat": -1}, {"gat": 2**64}, {"class_": 256}, {"fanout": 2**32}, {"hop": -1}, {"gat": True}):
        with pytest.raises(ValueError):
            tc.Context(**{"gat": 0, **bad})
