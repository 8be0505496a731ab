"""A minimal ASGI service with Tailor: context propagation and the ordering gate.

    pip install uvicorn httpx            # or: pip install -e 'sdk/python[examples]'
    python3 sdk/python/examples/asgi_service.py --port 8000 [--edge] [--downstream http://127.0.0.1:8001]
    curl -i http://127.0.0.1:8000/      # the reply shows the context this hop saw

Each request's context is read (or stamped, with --edge) and clamped; at most --c
handlers run at once, oldest GAT first; calls to --downstream carry the child context.
"""

import argparse
import asyncio
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

from tailor_context import EdgeRoute, encode  # noqa: E402
from tailor_context.asgi import TailorASGI  # noqa: E402
from tailor_context.gate import AsyncGate  # noqa: E402
from tailor_context.propagation import ContextConfig, current  # noqa: E402


def make_app(downstream):
    async def app(scope, receive, send):
        ctx = current()
        body = f"context {encode(ctx)}\n"
        if downstream:
            import httpx

            from tailor_context.clients import httpx_async_request_hook

            async with httpx.AsyncClient(event_hooks={"request": [httpx_async_request_hook]}) as client:
                r = await client.get(downstream)
            body += f"downstream said: {r.text}"
        await asyncio.sleep(0.001)  # stands for the handler's work
        data = body.encode()
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/plain")]})
        await send({"type": "http.response.body", "body": data})

    return app


def main():
    p = argparse.ArgumentParser(description="a minimal Tailor ASGI service")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--edge", action="store_true", help="stamp every request (this service is the edge)")
    p.add_argument("--budget-ms", type=float, help="the edge's deadline budget")
    p.add_argument("--c", type=int, default=4, help="handlers running at once")
    p.add_argument("--downstream", help="a URL to call per request, with the child context")
    a = p.parse_args()
    budget = None if a.budget_ms is None else int(a.budget_ms * 1e6)
    config = ContextConfig.edge_of(EdgeRoute(budget=budget)) if a.edge else ContextConfig.hop()
    app = TailorASGI(make_app(a.downstream), config, gate=AsyncGate("orf", c=a.c))

    import uvicorn

    uvicorn.run(app, host="127.0.0.1", port=a.port, log_level="warning")


if __name__ == "__main__":
    main()
