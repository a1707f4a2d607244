"""``max serve``: an OpenAI-compatible HTTP server with continuous batching.

The request path has three layers, each in its own module: the API layer (``app``,
``openai_routes``, ``logprobs``, ``embeddings``, ``schemas``, ``errors``) on the asyncio event
loop, which tokenises, detokenises and formats; the ``scheduler``, which picks each step's batch (continuous
batching, chunked prefill, admission by free KV pages, prefix caching, preemption); and the
model ``worker`` thread, which runs the steps. ``server.run`` starts it all."""

from max.serve.server import ServeSettings, build, run

__all__ = ["ServeSettings", "build", "run"]
