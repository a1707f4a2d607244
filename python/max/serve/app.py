"""The ASGI app: the OpenAI routes (``/v1/completions``, ``/v1/chat/completions``,
``/v1/embeddings``, ``/v1/models``), ``/health`` and Prometheus ``/metrics``, OpenAI-style
errors, a middleware counting answered requests by path and status, and one answering 408 to a
request whose body stops arriving and 413 to one too large. The model worker starts with the app and stops with it
(in-flight requests still running then are cancelled)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

from fastapi import FastAPI
from fastapi.responses import JSONResponse, Response

from max.serve.embeddings import embeddings_router
from max.serve.errors import APIError, error_response, install_error_handlers
from max.serve.openai_routes import openai_router
from max.serve.state import ServerState

_KNOWN_PATHS = {"/v1/completions", "/v1/chat/completions", "/v1/embeddings", "/v1/models", "/health",
                "/v1/health", "/metrics"}


class _CountRequests:
    """ASGI middleware: ``maxserve_request_count_total{path, code}`` for every HTTP answer."""

    def __init__(self, app: Any, state: ServerState) -> None:
        self.app, self.state = app, state

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        path = scope.get("path", "")
        path = path if path in _KNOWN_PATHS else ("/v1/models/{id}" if path.startswith("/v1/models/") else "other")

        async def counted(message: dict) -> None:
            if message["type"] == "http.response.start":
                self.state.metrics.requests.labels(path, str(message["status"])).inc()
            await send(message)

        await self.app(scope, receive, counted)


#: Seconds a request body may go without a byte arriving before the request is answered 408.
BODY_IDLE_S = 30.0


def body_limit(max_length: int | None) -> int:
    """Bytes a request body may hold: 64 MiB, or 1 KiB per token of the context where that is
    more (text past 64 characters a token is refused anyway, generation.py)."""
    return max(64 << 20, 1024 * (max_length or 0))


class _BodyDeadline:
    """ASGI middleware: reads a request's body before the app sees it, answering 408 (and closing
    the connection) when `idle_s` seconds pass without a byte of it (a client that sends less
    than its Content-Length, or stalls mid-upload, would otherwise hold its connection and a
    handler forever), and 413 to a body past `max_bytes` (by its Content-Length, or as it
    arrives) before it is held in memory. The app then receives the whole body at once, and the
    client's disconnect after it as before."""

    def __init__(self, app: Any, idle_s: float = BODY_IDLE_S, max_bytes: int = body_limit(None)) -> None:
        self.app, self.idle_s, self.max_bytes = app, idle_s, max_bytes

    async def _refuse(self, scope: dict, receive: Any, send: Any, status: int, message: str, code: str) -> None:
        response = error_response(status, message, code=code)
        response.headers["connection"] = "close"
        await response(scope, receive, send)

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        too_big = f"the request body is larger than {self.max_bytes} bytes"
        declared = dict(scope.get("headers") or []).get(b"content-length", b"")
        if declared.isdigit() and int(declared) > self.max_bytes:
            return await self._refuse(scope, receive, send, 413, too_big, "request_too_large")
        chunks, more, held = [], True, 0
        while more:
            try:
                message = await asyncio.wait_for(receive(), self.idle_s)
            except asyncio.TimeoutError:
                return await self._refuse(scope, receive, send, 408,
                                          f"the request body stopped arriving: nothing for {self.idle_s:g} s",
                                          "request_timeout")
            if message["type"] != "http.request":  # the client left before sending it all
                return None
            chunks.append(message.get("body", b""))
            held += len(chunks[-1])
            if held > self.max_bytes:
                return await self._refuse(scope, receive, send, 413, too_big, "request_too_large")
            more = bool(message.get("more_body", False))
        body, given = b"".join(chunks), False

        async def replay() -> dict:
            nonlocal given
            if not given:
                given = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await self.app(scope, replay, send)


def create_app(state: ServerState, worker: Any = None, body_idle_s: float = BODY_IDLE_S) -> FastAPI:
    """The app serving `state`'s model; `worker` (a ``ModelWorker``) runs while the app does;
    a request body that goes `body_idle_s` seconds without a byte is answered 408, one past
    ``body_limit`` 413."""

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        if worker is not None and not worker.alive:
            worker.start()
        try:
            yield
        finally:
            if state.generation is not None:
                state.generation.accepting = False
            if worker is not None:
                worker.stop()
            if state.embeddings is not None:
                state.embeddings.close()

    app = FastAPI(title="MAX-compatible server", lifespan=lifespan, docs_url=None, redoc_url=None)
    app.state.model_worker = worker
    install_error_handlers(app)
    app.include_router(openai_router(state))
    app.include_router(embeddings_router(state))

    def model_card() -> dict[str, Any]:
        return {"id": state.model_name, "object": "model", "created": state.created, "owned_by": "max",
                "max_model_len": state.max_length}

    @app.get("/v1/models")
    async def models() -> dict[str, Any]:
        return {"object": "list", "data": [model_card()]}

    @app.get("/v1/models/{model_id:path}")
    async def model(model_id: str) -> dict[str, Any]:
        if model_id not in state.aliases:
            raise APIError(404, f"the model {model_id!r} does not exist", param="model", code="model_not_found")
        return model_card()

    @app.get("/health")
    @app.get("/v1/health")
    async def health() -> Response:
        gen = state.generation
        if gen is not None and not gen.worker.alive:
            return JSONResponse({"status": "error", "message": "the model worker is not running"}, status_code=503)
        return JSONResponse({"status": "ok"})

    @app.get("/metrics")
    async def metrics() -> Response:
        return Response(state.metrics.render(), media_type="text/plain; version=0.0.4; charset=utf-8")

    app.add_middleware(_BodyDeadline, idle_s=body_idle_s, max_bytes=body_limit(state.max_length))
    app.add_middleware(_CountRequests, state=state)  # (outermost: counts the 408s too)
    return app


__all__ = ["create_app"]
