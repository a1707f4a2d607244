"""``max serve``: an OpenAI-compatible HTTP server with continuous batching.

The request path has three layers, each in its own module: the API layer (``app``,
``openai_routes``, ``logprobs``, ``embeddings``, ``schemas``, ``errors``) on the asyncio event
loop, which tokenises, detokenises and formats; the ``scheduler``, which picks each step's batch (continuous
batching, chunked prefill, admission by free KV pages, prefix caching, preemption); and the
model ``worker`` thread, which runs the steps. ``server.run`` starts it all.

The HTTP layers need the ``serve`` extra (FastAPI, uvicorn); they are imported when first
used, so the scheduler and the worker work without it."""

from __future__ import annotations

from typing import Any

__all__ = ["ServeSettings", "build", "run"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from max.serve import server

        return getattr(server, name)
    raise AttributeError(f"module 'max.serve' has no attribute {name!r}")
