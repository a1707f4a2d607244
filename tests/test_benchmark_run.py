"""``max benchmark``'s per-request timing (max.benchmark.run.send) against a scripted SSE server
on a local socket, so that the times are known: TTFT is the first content chunk, the latency
ends at the last one (not at the usage chunk, ``[DONE]`` or the connection's close, as in
vLLM's benchmark), ITL are the gaps between content chunks, and the token count is the usage's."""

from __future__ import annotations

import asyncio
import json

import pytest

from max.benchmark.run import send


def _event(obj) -> bytes:
    data = obj if isinstance(obj, str) else json.dumps(obj)
    return f"data: {data}\n\n".encode()


async def _scripted(script):
    """A server answering one POST with `script`: (seconds to wait, bytes to send) pairs, each
    sent as one HTTP chunk of a chunked text/event-stream response."""
    async def handle(reader, writer):
        while (await reader.readline()) not in (b"\r\n", b""):
            pass
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n")
        for wait, data in script:
            await asyncio.sleep(wait)
            writer.write(b"%x\r\n%s\r\n" % (len(data), data))
            await writer.drain()
        writer.write(b"0\r\n\r\n")
        await writer.drain()
        writer.close()

    return await asyncio.start_server(handle, "127.0.0.1", 0)


def test_latency_ends_at_the_last_token_not_the_stream(rng):
    gaps = rng.uniform(0.02, 0.05, 3)
    tail = 0.4  # usage and [DONE] arrive late: no part of the request's generation time
    script = [(0.05, _event({"choices": [{"index": 0, "text": "a"}]}))]
    script += [(float(g), _event({"choices": [{"index": 0, "text": t}]})) for g, t in zip(gaps, "bcd")]
    script += [(tail, _event({"choices": [], "usage": {"prompt_tokens": 7, "completion_tokens": 4}})),
               (0.0, _event("[DONE]"))]

    async def go():
        server = await _scripted(script)
        port = server.sockets[0].getsockname()[1]
        async with server:
            return await send(f"http://127.0.0.1:{port}/v1/completions", {"stream": True}, 5, timeout=10)

    r = asyncio.run(go())
    assert r.ok, r.error
    assert (r.output_len, r.prompt_len) == (4, 7)
    assert len(r.itl) == 3
    assert r.itl == pytest.approx(gaps, abs=0.02)
    assert r.latency == pytest.approx(r.ttft + sum(r.itl), abs=1e-9)
    assert r.latency < 0.05 + gaps.sum() + tail / 2
    assert r.tpot == pytest.approx(gaps.sum() / 3, abs=0.02)
