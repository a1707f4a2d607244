"""``POST /v1/completions`` and ``POST /v1/chat/completions``: OpenAI's response objects, whole
or streamed as server-sent events (``data: {chunk}`` lines, then ``data: [DONE]``). A streamed
response starts once the first token is there, so that an error before it still gets its HTTP
status; a client that goes away stops its request (streamed: when a write fails; whole: noticed
by polling the connection)."""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import AsyncIterator, Callable
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse

from max.serve.errors import APIError, error_body
from max.serve.generation import Delta, GenerationService
from max.serve.schemas import ChatCompletionRequest, CompletionRequest
from max.serve.state import ServerState


def _sse(obj: Any) -> bytes:
    return b"data: " + json.dumps(obj, separators=(",", ":")).encode() + b"\n\n"


def _usage(prompt: int, completion: int) -> dict[str, int]:
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}


async def _while_connected(request: Request, coro: Any) -> Any:
    """Awaits `coro`, cancelling it when the client disconnects (then returns None)."""
    task = asyncio.ensure_future(coro)
    try:
        while True:
            done, _ = await asyncio.wait({task}, timeout=0.5)
            if done:
                return task.result()
            if await request.is_disconnected():
                task.cancel()
                return None
    finally:
        if not task.done():
            task.cancel()


async def _start_stream(deltas: AsyncIterator[Delta], render: Callable[[Delta], list[bytes]],
                        tail: Callable[[], list[bytes]]) -> StreamingResponse:
    """Waits for the first delta (errors before it keep their status), then streams."""
    first = await deltas.__anext__()

    async def body() -> AsyncIterator[bytes]:
        try:
            for chunk in render(first):
                yield chunk
            if first.finish_reason is None:
                async for d in deltas:
                    for chunk in render(d):
                        yield chunk
        except APIError as e:
            yield _sse(error_body(e.status, e.message))
        finally:
            await deltas.aclose()
        for chunk in tail():
            yield chunk
        yield b"data: [DONE]\n\n"

    return StreamingResponse(body(), media_type="text/event-stream",
                             headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})


def openai_router(state: ServerState) -> APIRouter:
    router = APIRouter(prefix="/v1")

    def service(model: str | None) -> GenerationService:
        state.check_model(model)
        return state.require_generation()

    @router.post("/completions", response_model=None)
    async def completions(req: CompletionRequest, request: Request) -> Response:
        svc = service(req.model)
        if req.logprobs:
            raise APIError(400, "logprobs are not supported by this server", param="logprobs")
        if req.suffix:
            raise APIError(400, "suffix is not supported by this server", param="suffix")
        sampling = req.sampling_params()
        prompts = req.prompts()
        if req.stream and len(prompts) > 1:
            raise APIError(400, "streaming takes a single prompt", param="prompt")
        ctxs = [svc.context(await svc.tokenize(p), sampling) for p in prompts]
        echoes = [(p if isinstance(p, str) else svc.tokenizer.decode_sync(p)) if req.echo else "" for p in prompts]
        rid, created, name = f"cmpl-{uuid.uuid4().hex}", int(time.time()), req.model or state.model_name
        svc.admit(len(ctxs))

        def chunk(text: str, reason: str | None, index: int = 0) -> dict[str, Any]:
            return {"id": rid, "object": "text_completion", "created": created, "model": name,
                    "choices": [{"index": index, "text": text, "logprobs": None, "finish_reason": reason}]}

        if req.stream:
            ctx, used = ctxs[0], [0]
            include_usage = bool(req.stream_options and req.stream_options.include_usage)
            started = [False]

            def render(d: Delta) -> list[bytes]:
                used[0] += len(d.token_ids)
                text = d.text
                if not started[0]:
                    started[0], text = True, echoes[0] + text
                return [_sse(chunk(text, d.finish_reason))] if text or d.finish_reason else []

            def tail() -> list[bytes]:
                return [_sse({"id": rid, "object": "text_completion", "created": created, "model": name,
                              "choices": [], "usage": _usage(ctx.prompt_length, used[0])})] if include_usage else []

            return await _start_stream(svc.stream(ctx), render, tail)
        outcomes = await _while_connected(request, asyncio.gather(*(svc.complete(c) for c in ctxs)))
        if outcomes is None:
            return Response(status_code=499)
        body = {"id": rid, "object": "text_completion", "created": created, "model": name,
                "choices": [{"index": i, "text": echoes[i] + o.text, "logprobs": None, "finish_reason": o.finish_reason}
                            for i, o in enumerate(outcomes)],
                "usage": _usage(sum(c.prompt_length for c in ctxs), sum(len(o.token_ids) for o in outcomes))}
        return JSONResponse(body)

    @router.post("/chat/completions", response_model=None)
    async def chat_completions(req: ChatCompletionRequest, request: Request) -> Response:
        svc = service(req.model)
        if req.logprobs or req.top_logprobs:
            raise APIError(400, "logprobs are not supported by this server", param="logprobs")
        sampling = req.sampling_params()
        text = svc.chat_prompt(req.plain_messages(), tools=req.tools, options=req.chat_template_kwargs)
        ctx = svc.context(await svc.tokenize(text, add_special_tokens=False), sampling)
        rid, created, name = f"chatcmpl-{uuid.uuid4().hex}", int(time.time()), req.model or state.model_name
        svc.admit(1)

        def chunk(delta: dict[str, Any], reason: str | None) -> dict[str, Any]:
            return {"id": rid, "object": "chat.completion.chunk", "created": created, "model": name,
                    "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": reason}]}

        if req.stream:
            used, started = [0], [False]
            include_usage = bool(req.stream_options and req.stream_options.include_usage)

            def render(d: Delta) -> list[bytes]:
                used[0] += len(d.token_ids)
                out = []
                if not started[0]:
                    started[0] = True
                    out.append(_sse(chunk({"role": "assistant", "content": ""}, None)))
                if d.text:
                    out.append(_sse(chunk({"content": d.text}, None)))
                if d.finish_reason:
                    out.append(_sse(chunk({}, d.finish_reason)))
                return out

            def tail() -> list[bytes]:
                return [_sse({"id": rid, "object": "chat.completion.chunk", "created": created, "model": name,
                              "choices": [], "usage": _usage(ctx.prompt_length, used[0])})] if include_usage else []

            return await _start_stream(svc.stream(ctx), render, tail)
        outcome = await _while_connected(request, svc.complete(ctx))
        if outcome is None:
            return Response(status_code=499)
        return JSONResponse({
            "id": rid, "object": "chat.completion", "created": created, "model": name,
            "choices": [{"index": 0, "message": {"role": "assistant", "content": outcome.text},
                         "logprobs": None, "finish_reason": outcome.finish_reason}],
            "usage": _usage(ctx.prompt_length, len(outcome.token_ids)),
        })

    return router


__all__ = ["openai_router"]
