"""Sending the benchmark's requests: each one streamed (so the first token and every chunk are
timed), arrivals spaced by a Poisson process at ``request_rate`` (gamma-distributed gaps with
``burstiness`` as shape; all at once for an infinite rate), at most ``max_concurrency`` in
flight. Token counts come from the server's ``usage``."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import numpy as np

from max.benchmark.client import HTTPStatusError, post_events
from max.benchmark.datasets import BenchRequest
from max.benchmark.report import RequestResult


async def send(url: str, payload: dict[str, Any], prompt_len: int, timeout: float) -> RequestResult:
    """One streamed request and its timings."""
    start = time.perf_counter()
    result = RequestResult(ok=False, prompt_len=prompt_len)
    chunks: list[float] = []
    usage: dict[str, Any] | None = None

    async def consume() -> str:
        nonlocal usage
        async for ev in post_events(url, payload):
            if ev.data == "[DONE]":
                break
            obj = json.loads(ev.data)
            if "error" in obj:
                return str(obj["error"].get("message", obj["error"]))[:200]
            usage = obj.get("usage") or usage
            for choice in obj.get("choices") or []:
                text = choice.get("text") if "text" in choice else (choice.get("delta") or {}).get("content")
                if text:
                    chunks.append(ev.at)
        return ""

    try:
        result.error = await asyncio.wait_for(consume(), timeout)
        if result.error:
            return result
    except HTTPStatusError as e:
        result.error = f"HTTP {e.status}"
        return result
    except (OSError, asyncio.IncompleteReadError, asyncio.TimeoutError, ValueError) as e:
        result.error = f"{type(e).__name__}: {e}"[:200]
        return result
    if not chunks:
        result.error = "no tokens in the answer"
        return result
    result.ok = True
    # Up to the last token, as vLLM's benchmark counts it: the usage chunk, [DONE] and closing the
    # connection that follow are no generation time, and would inflate TPOT (latency - TTFT over
    # the tokens after the first) most for short answers.
    result.latency = chunks[-1] - start
    result.ttft = chunks[0] - start
    result.itl = list(np.diff(chunks))
    result.output_len = int(usage["completion_tokens"]) if usage else len(chunks)
    if usage and usage.get("prompt_tokens") is not None:
        result.prompt_len = int(usage["prompt_tokens"])
    return result


def payload_for(req: BenchRequest, model: str, chat: bool, temperature: float, ignore_eos: bool,
                tokenizer: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"model": model, "max_tokens": req.output_len, "temperature": temperature, "stream": True,
                            "stream_options": {"include_usage": True}, "ignore_eos": ignore_eos}
    if chat:
        text = req.prompt if isinstance(req.prompt, str) else tokenizer.decode_sync(req.prompt)
        body["messages"] = [{"role": "user", "content": text}]
    else:
        body["prompt"] = req.prompt
    return body


async def run_load(url: str, payloads: list[tuple[dict[str, Any], int]], request_rate: float, burstiness: float,
                   max_concurrency: int | None, seed: int, timeout: float) -> tuple[list[RequestResult], float]:
    """Sends every payload; the results in order and the wall time."""
    if request_rate <= 0:
        raise ValueError(f"--request-rate must be positive, got {request_rate}")
    if burstiness <= 0:
        raise ValueError(f"--burstiness must be positive, got {burstiness}")
    if max_concurrency is not None and max_concurrency < 1:
        raise ValueError(f"--max-concurrency must be at least 1, got {max_concurrency}")
    rng = np.random.default_rng(seed)
    gate = asyncio.Semaphore(max_concurrency) if max_concurrency else None

    async def one(payload: dict[str, Any], prompt_len: int) -> RequestResult:
        if gate is None:
            return await send(url, payload, prompt_len, timeout)
        async with gate:
            return await send(url, payload, prompt_len, timeout)

    start = time.perf_counter()
    tasks = []
    for i, (payload, prompt_len) in enumerate(payloads):
        if i and np.isfinite(request_rate):
            await asyncio.sleep(float(rng.gamma(burstiness, 1.0 / (request_rate * burstiness))))
        tasks.append(asyncio.create_task(one(payload, prompt_len)))
    results = list(await asyncio.gather(*tasks))
    return results, time.perf_counter() - start


__all__ = ["payload_for", "run_load", "send"]
