"""``POST /v1/completions`` and ``POST /v1/chat/completions``: OpenAI's response objects, whole
or streamed as server-sent events (``data: {chunk}`` lines, then ``data: [DONE]``), with ``n``
choices per prompt (streamed chunks name their choice's index) and log-probabilities when asked.
A streamed response starts once the first token is there, so that an error before it still gets
its HTTP status; a client that goes away stops its request (streamed: when a write fails; whole:
noticed by polling the connection)."""

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
from max.serve.logprobs import LogProbRenderer
from max.serve.schemas import ChatCompletionRequest, CompletionRequest
from max.serve.state import ServerState


def _sse(obj: Any) -> bytes:
    return b"data: " + json.dumps(obj, separators=(",", ":")).encode() + b"\n\n"


def _usage(prompt: int, completion: int) -> dict[str, int]:
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}


def _retrieve(task: asyncio.Future) -> None:
    """Marks a finished future's outcome as seen: a gather cancelled on a disconnect ends with a
    CancelledError as its exception, which asyncio would otherwise log as never retrieved."""
    if not task.cancelled():
        task.exception()


async def _while_connected(request: Request, coro: Any) -> Any:
    """Awaits `coro`, cancelling it when the client disconnects (then returns None)."""
    task = asyncio.ensure_future(coro)
    try:
        while True:
            done, _ = await asyncio.wait({task}, timeout=0.5)
            if done:
                return task.result()
            if await request.is_disconnected():
                return None
    finally:
        if not task.done():
            task.add_done_callback(_retrieve)
            task.cancel()


async def _merge(streams: list[AsyncIterator[Delta]]) -> AsyncIterator[tuple[int, Delta]]:
    """The deltas of several streams as they come, each with its stream's index; closing it
    closes them all (which cancels their requests)."""
    if len(streams) == 1:
        try:
            async for delta in streams[0]:
                yield 0, delta
        finally:
            await streams[0].aclose()  # type: ignore[attr-defined]
        return
    pending: dict[asyncio.Future[Delta], int] = {}
    try:
        pending = {asyncio.ensure_future(s.__anext__()): i for i, s in enumerate(streams)}
        while pending:
            done, _ = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
            for task in sorted(done, key=lambda t: pending[t]):
                i = pending.pop(task)
                try:
                    delta = task.result()
                except StopAsyncIteration:
                    continue
                pending[asyncio.ensure_future(streams[i].__anext__())] = i
                yield i, delta
    finally:
        for task in pending:
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)
        for s in streams:
            await s.aclose()  # type: ignore[attr-defined]


async def _start_stream(request: Request, deltas: AsyncIterator[tuple[int, Delta]],
                        render: Callable[[int, Delta], list[bytes]], tail: Callable[[], list[bytes]]) -> Response:
    """Waits for the first delta (errors before it keep their status), then streams. A client
    that leaves before the first delta (its request queued, or in a long prefill) has its
    requests cancelled: nothing was sent that would show it left."""
    task = asyncio.ensure_future(deltas.__anext__())
    while True:
        done, _ = await asyncio.wait({task}, timeout=0.5)
        if done:
            first = task.result()
            break
        if await request.is_disconnected():
            task.cancel()  # (the streams' own clean-up cancels their requests)
            await asyncio.gather(task, return_exceptions=True)
            await deltas.aclose()  # type: ignore[attr-defined]
            return Response(status_code=499)

    async def body() -> AsyncIterator[bytes]:
        try:
            for chunk in render(*first):
                yield chunk
            async for i, d in deltas:
                for chunk in render(i, d):
                    yield chunk
        except APIError as e:
            yield _sse(error_body(e.status, e.message))
        finally:
            await deltas.aclose()  # type: ignore[attr-defined]
        for chunk in tail():
            yield chunk
        yield b"data: [DONE]\n\n"

    return StreamingResponse(body(), media_type="text/event-stream",
                             headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})


def _log_probabilities(top: int | None) -> int:
    """``TextContext.log_probabilities`` for a request's count of alternatives (None: off). The
    pipeline reads 0 as "none", so a request for the chosen tokens alone asks for one
    alternative, which the rendering leaves out."""
    return 0 if top is None else max(1, top)


def _admit(svc: GenerationService, n: int, prompts: int = 1) -> None:
    """Admits `prompts` x `n` choices, or refuses them (a 400 naming the argument that asks for
    too many) when the server could never hold them at once."""
    count = n * prompts
    if count > svc.capacity:
        asked = f"{prompts} prompts x n = {n}" if prompts > 1 else f"n = {n}"
        raise APIError(400, f"the request asks for {count} choices in all ({asked}); this server takes at most "
                            f"{svc.capacity} requests at a time", param="prompt" if prompts > n else "n")
    svc.admit(count)


def openai_router(state: ServerState) -> APIRouter:
    router = APIRouter(prefix="/v1")

    def service(model: str | None) -> GenerationService:
        state.check_model(model)
        return state.require_generation()

    @router.post("/completions", response_model=None)
    async def completions(req: CompletionRequest, request: Request) -> Response:
        svc = service(req.model)
        if req.suffix:
            raise APIError(400, "suffix is not supported by this server", param="suffix")
        sampling = req.sampling_params()
        top = req.logprobs_count()
        prompts = req.prompts()
        if req.stream and len(prompts) > 1:
            raise APIError(400, "streaming takes a single prompt", param="prompt")
        if len(prompts) * req.n > svc.capacity:  # (before tokenizing them all)
            _admit(svc, req.n, len(prompts))
        schema = req.json_schema()
        first = await svc.compile_schema(schema)
        matchers = [first] + [None if first is None else first.deep_copy() for _ in prompts[1:]]
        ctxs = [svc.context(await svc.tokenize(p), sampling, _log_probabilities(top)) for p in prompts]
        for ctx, matcher in zip(ctxs, matchers):
            ctx.json_schema = schema
            ctx.set_matcher(matcher)
        echoes = [(p if isinstance(p, str) else svc.tokenizer.decode_sync(p)) if req.echo else "" for p in prompts]
        rid, created, name = f"cmpl-{uuid.uuid4().hex}", int(time.time()), req.model or state.model_name
        n = req.n
        _admit(svc, n, len(ctxs))
        # Choice i is choice i % n of prompt i // n.
        streams = [s for ctx in ctxs for s in svc.choices(ctx, n)]
        lps = [LogProbRenderer(svc.tokenizer, top) if top is not None else None for _ in streams]
        prompt_tokens = sum(c.prompt_length for c in ctxs)

        def choice(i: int, text: str, reason: str | None, logprobs: Any) -> dict[str, Any]:
            r = lps[i]
            return {"index": i, "text": text, "logprobs": None if r is None else r.completion(logprobs),
                    "finish_reason": reason}

        if req.stream:
            used, started = [0], [False] * len(streams)
            include_usage = bool(req.stream_options and req.stream_options.include_usage)

            def render(i: int, d: Delta) -> list[bytes]:
                used[0] += len(d.token_ids)
                text = d.text
                if not started[i]:
                    started[i], text = True, echoes[i // n] + text
                if not (text or d.finish_reason or (lps[i] is not None and d.logprobs)):
                    return []
                return [_sse({"id": rid, "object": "text_completion", "created": created, "model": name,
                              "choices": [choice(i, text, d.finish_reason, d.logprobs)],
                              **({"usage": None} if include_usage else {})})]

            def tail() -> list[bytes]:
                return [_sse({"id": rid, "object": "text_completion", "created": created, "model": name,
                              "choices": [], "usage": _usage(prompt_tokens, used[0])})] if include_usage else []

            return await _start_stream(request, _merge(streams), render, tail)
        outcomes = await _while_connected(request, asyncio.gather(*(svc.complete(s) for s in streams)))
        if outcomes is None:
            return Response(status_code=499)
        body = {"id": rid, "object": "text_completion", "created": created, "model": name,
                "choices": [choice(i, echoes[i // n] + o.text, o.finish_reason, o.logprobs)
                            for i, o in enumerate(outcomes)],
                "usage": _usage(prompt_tokens, sum(len(o.token_ids) for o in outcomes))}
        return JSONResponse(body)

    @router.post("/chat/completions", response_model=None)
    async def chat_completions(req: ChatCompletionRequest, request: Request) -> Response:
        svc = service(req.model)
        req.check_unsupported()
        sampling = req.sampling_params()
        top = req.logprobs_count()
        schema = req.json_schema()
        matcher = await svc.compile_schema(schema)
        text = await svc.chat_prompt(req.plain_messages(), tools=req.tools, options=req.chat_template_kwargs)
        ctx = svc.context(await svc.tokenize(text, add_special_tokens=False), sampling, _log_probabilities(top))
        ctx.json_schema = schema
        ctx.set_matcher(matcher)
        rid, created, name = f"chatcmpl-{uuid.uuid4().hex}", int(time.time()), req.model or state.model_name
        _admit(svc, req.n)
        streams = svc.choices(ctx, req.n)
        lps = [LogProbRenderer(svc.tokenizer, top) if top is not None else None for _ in streams]

        def logprobs(i: int, items: Any) -> dict[str, Any] | None:
            r = lps[i]
            return None if r is None else r.chat(items)

        # (stream_options come with stream only); every chunk but the last then has "usage": null
        include_usage = bool(req.stream_options and req.stream_options.include_usage)

        def chunk(i: int, delta: dict[str, Any], reason: str | None, lp: Any = None) -> dict[str, Any]:
            return {"id": rid, "object": "chat.completion.chunk", "created": created, "model": name,
                    "choices": [{"index": i, "delta": delta, "logprobs": lp, "finish_reason": reason}],
                    **({"usage": None} if include_usage else {})}

        if req.stream:
            used, started = [0], [False] * len(streams)

            def render(i: int, d: Delta) -> list[bytes]:
                used[0] += len(d.token_ids)
                out = []
                if not started[i]:
                    started[i] = True
                    out.append(_sse(chunk(i, {"role": "assistant", "content": ""}, None)))
                if d.text or (lps[i] is not None and d.logprobs):
                    out.append(_sse(chunk(i, {"content": d.text}, None, logprobs(i, d.logprobs))))
                if d.finish_reason:
                    out.append(_sse(chunk(i, {}, d.finish_reason)))
                return out

            def tail() -> list[bytes]:
                return [_sse({"id": rid, "object": "chat.completion.chunk", "created": created, "model": name,
                              "choices": [], "usage": _usage(ctx.prompt_length, used[0])})] if include_usage else []

            return await _start_stream(request, _merge(streams), render, tail)
        outcomes = await _while_connected(request, asyncio.gather(*(svc.complete(s) for s in streams)))
        if outcomes is None:
            return Response(status_code=499)
        return JSONResponse({
            "id": rid, "object": "chat.completion", "created": created, "model": name,
            "choices": [{"index": i, "message": {"role": "assistant", "content": o.text},
                         "logprobs": logprobs(i, o.logprobs), "finish_reason": o.finish_reason}
                        for i, o in enumerate(outcomes)],
            "usage": _usage(ctx.prompt_length, sum(len(o.token_ids) for o in outcomes)),
        })

    return router


__all__ = ["openai_router"]
