"""OpenTelemetry helpers (install the ``otel`` extra): the ``tailor`` baggage member read and
written through the OTel baggage API, for services whose outgoing calls are propagated by
OpenTelemetry rather than by this package's hooks.

::

    with baggage_scope():            # OTel's propagators now carry current().child() as `tailor`
        requests.get(url)            # (instrumented by opentelemetry-instrumentation-requests)
    ctx = from_baggage()             # the context OTel extracted for this request, or None

OTel's W3C propagator percent-decodes values on extraction and our values are RFC 3986
unreserved bytes, which no propagator needs to encode (docs/wire-format.md, "Why this
alphabet"), so the value survives byte for byte.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator, Optional

from opentelemetry import baggage as otel_baggage
from opentelemetry import context as otel_context

from ._baggage import BAGGAGE_KEY
from ._codec import Context, Decoded, decode, encode
from .propagation import current


def with_context(ctx: Context, parent: Optional[otel_context.Context] = None) -> otel_context.Context:
    """An OTel context (default: the current one) whose baggage has ``tailor`` = ``ctx``'s encoding."""
    return otel_baggage.set_baggage(BAGGAGE_KEY, encode(ctx), context=parent)


def from_baggage(otel_ctx: Optional[otel_context.Context] = None) -> Optional[Decoded]:
    """The context in the OTel baggage (default: the current OTel context), or None if it
    has no ``tailor`` member. Raises WireError for a malformed one; clamp what it returns
    (:func:`tailor_context.clamp`) as for any received context."""
    value = otel_baggage.get_baggage(BAGGAGE_KEY, context=otel_ctx)
    return None if value is None else decode(str(value))


@contextmanager
def baggage_scope(parent: Optional[Context] = None) -> Iterator[None]:
    """Attaches an OTel context carrying ``parent.child()`` (default: the request being
    served) for the ``with`` body, so OTel-propagated calls carry it. Outside a request, nothing."""
    parent = current() if parent is None else parent
    if parent is None:
        yield
        return
    token = otel_context.attach(with_context(parent.child()))
    try:
        yield
    finally:
        otel_context.detach(token)
