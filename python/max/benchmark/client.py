"""A small streaming HTTP/1.1 client on asyncio streams (standard library only), enough to POST
a JSON request and time each server-sent event of the answer as it arrives. One connection
per request (``Connection: close``), as a benchmark of a server's own work wants."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit


@dataclass
class Event:
    """One ``data:`` line and when it arrived (``time.perf_counter``)."""

    data: str
    at: float


class HTTPStatusError(RuntimeError):
    def __init__(self, status: int, body: str) -> None:
        super().__init__(f"HTTP {status}: {body[:300]}")
        self.status = status


async def _body_chunks(reader: asyncio.StreamReader, headers: dict[str, str]) -> AsyncIterator[bytes]:
    if headers.get("transfer-encoding", "").lower() == "chunked":
        while True:
            size = int((await reader.readline()).split(b";")[0].strip() or b"0", 16)
            if size == 0:
                return
            data = await reader.readexactly(size)
            await reader.readexactly(2)
            yield data
    elif "content-length" in headers:
        yield await reader.readexactly(int(headers["content-length"]))
    else:
        while chunk := await reader.read(65536):
            yield chunk


async def post_events(url: str, payload: dict[str, Any]) -> AsyncIterator[Event]:
    """POSTs `payload` as JSON; yields the ``data:`` events of the response as they arrive (a
    non-streamed JSON answer comes as one event). Raises ``HTTPStatusError`` for a non-2xx."""
    u = urlsplit(url)
    if u.scheme != "http":
        raise ValueError(f"only http:// URLs are supported, got {url!r}")
    reader, writer = await asyncio.open_connection(u.hostname, u.port or 80)
    try:
        body = json.dumps(payload).encode()
        head = (f"POST {u.path or '/'} HTTP/1.1\r\nHost: {u.netloc}\r\nContent-Type: application/json\r\n"
                f"Accept: text/event-stream\r\nContent-Length: {len(body)}\r\nConnection: close\r\n\r\n")
        writer.write(head.encode() + body)
        await writer.drain()
        status = int((await reader.readline()).split()[1])
        headers: dict[str, str] = {}
        while (line := await reader.readline()) not in (b"\r\n", b"\n", b""):
            k, _, v = line.decode("latin-1").partition(":")
            headers[k.strip().lower()] = v.strip()
        if not 200 <= status < 300:
            text = b"".join([c async for c in _body_chunks(reader, headers)]).decode(errors="replace")
            raise HTTPStatusError(status, text)
        if "text/event-stream" not in headers.get("content-type", ""):
            text = b"".join([c async for c in _body_chunks(reader, headers)]).decode()
            yield Event(text, time.perf_counter())
            return
        pending = b""
        async for chunk in _body_chunks(reader, headers):
            now = time.perf_counter()
            pending += chunk
            while b"\n\n" in pending:
                block, pending = pending.split(b"\n\n", 1)
                for line in block.split(b"\n"):
                    if line.startswith(b"data:"):
                        yield Event(line[5:].strip().decode(), now)
    finally:
        writer.close()


async def get_json(url: str) -> Any:
    u = urlsplit(url)
    reader, writer = await asyncio.open_connection(u.hostname, u.port or 80)
    try:
        writer.write(f"GET {u.path} HTTP/1.1\r\nHost: {u.netloc}\r\nConnection: close\r\n\r\n".encode())
        await writer.drain()
        status = int((await reader.readline()).split()[1])
        headers: dict[str, str] = {}
        while (line := await reader.readline()) not in (b"\r\n", b"\n", b""):
            k, _, v = line.decode("latin-1").partition(":")
            headers[k.strip().lower()] = v.strip()
        text = b"".join([c async for c in _body_chunks(reader, headers)]).decode()
        if status != 200:
            raise HTTPStatusError(status, text)
        return json.loads(text)
    finally:
        writer.close()


__all__ = ["Event", "HTTPStatusError", "get_json", "post_events"]
