"""Outgoing HTTP calls carry the current request's child context: hooks for ``requests``
and ``httpx`` (neither is imported until used; install the ``requests`` or ``httpx`` extra).

::

    session = instrument_requests(requests.Session())
    client = httpx.Client(event_hooks={"request": [httpx_request_hook]})
    aclient = httpx.AsyncClient(event_hooks={"request": [httpx_async_request_hook]})

Calls made while serving a request (:func:`tailor_context.current`) get ``tailor-context``
and the ``tailor`` member of ``baggage`` set to ``current().child()``, replacing whatever
the caller put there; calls made outside any request go out untouched.
"""

from __future__ import annotations

from typing import Any

from .propagation import inject


def instrument_requests(session: Any) -> Any:
    """Makes every adapter of a ``requests.Session`` inject the context on send (its own
    settings, such as retries, are kept). Adapters mounted later are not covered: mount
    them first. Returns the session."""
    for adapter in session.adapters.values():
        if getattr(adapter, "_tailor_instrumented", False):
            continue
        send = adapter.send

        def send_with_context(request, *args, _send=send, **kwargs):
            inject(request.headers)
            return _send(request, *args, **kwargs)

        adapter.send = send_with_context
        adapter._tailor_instrumented = True
    return session


def httpx_request_hook(request: Any) -> None:
    """An ``httpx.Client`` request event hook."""
    inject(request.headers)


async def httpx_async_request_hook(request: Any) -> None:
    """An ``httpx.AsyncClient`` request event hook."""
    inject(request.headers)
