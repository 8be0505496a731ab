"""The OTel helpers with the real opentelemetry-api: OTel's own W3C baggage propagator
carries the context both ways, and our extract() agrees with it."""

from __future__ import annotations

import pytest

pytest.importorskip("opentelemetry.baggage", reason="pip install opentelemetry-api (CI installs it: .ci/run)")
from opentelemetry.baggage.propagation import W3CBaggagePropagator  # noqa: E402

from tailor_context import NEVER, Context, baggage_with, encode, extract  # noqa: E402
from tailor_context.otel import baggage_scope, from_baggage, with_context  # noqa: E402
from tailor_context.propagation import serving  # noqa: E402


def test_otel_propagation_carries_the_child_context_our_extract_reads():
    parent = Context(1_732_272_000_123_456_789, 1_732_272_000_125_456_789, 1, 4, 2)
    carrier: dict = {}
    with serving(parent), baggage_scope():
        W3CBaggagePropagator().inject(carrier)
    assert extract(carrier.items()).context == parent.child()


def test_a_baggage_header_we_write_is_read_back_through_otel():
    ctx = Context(5, NEVER, 0, 1, 3)
    header = baggage_with("userId=alice,region=eu", encode(ctx))
    otel_ctx = W3CBaggagePropagator().extract({"baggage": header})
    assert from_baggage(otel_ctx).context == ctx
    assert from_baggage(W3CBaggagePropagator().extract({"baggage": "userId=alice"})) is None
    assert from_baggage(with_context(ctx)).context == ctx


def test_outside_a_request_the_scope_adds_nothing():
    carrier: dict = {}
    with baggage_scope():
        W3CBaggagePropagator().inject(carrier)
    assert "baggage" not in carrier
