"""``max serve`` under faults (CPU, SmolLM2): bad requests get OpenAI-style 4xx errors and the
next request works; a client that disconnects mid-stream has its request cancelled and its
pages freed; a burst far beyond capacity is answered or refused with 429/503, none lost or
hung, and the server stays up. The burst size is ``MAX_SERVE_BURST`` (default 1000)."""

from __future__ import annotations

import asyncio
import json
import os
import time
import urllib.request

import openai
import pytest

from models import smollm2_gguf
from serve_util import ServerProcess

BURST = int(os.environ.get("MAX_SERVE_BURST", "1000"))


@pytest.fixture(scope="module")
def server():
    s = ServerProcess(smollm2_gguf(), "--max-length", "256", "--max-batch-size", "4", "--max-queue-size", "8",
                      "--kv-cache-page-size", "16", "--served-model-name", "smollm")
    yield s
    assert s.stop() == 0, s.errors()


def _works(server):
    r = server.client().completions.create(model="smollm", prompt="The sky is", max_tokens=3, temperature=0)
    assert r.choices[0].finish_reason in ("length", "stop") and r.usage.completion_tokens >= 1


def _error(server, exc_type, **kw):
    args = dict(model="smollm", prompt="Hello", max_tokens=4)
    args.update(kw)
    with pytest.raises(exc_type) as info:
        server.client().completions.create(**args)
    err = info.value.body
    assert isinstance(err, dict) and err.get("message") and err.get("type"), err
    _works(server)
    return info.value


def test_malformed_json(server):
    for body in (b"{not json", b'{"prompt": "hi", "max_tokens": "many"}', b'{"max_tokens": 3}', b"[]"):
        status, err = server.post_raw("/v1/completions", body)
        assert status == 400, (body, err)
        assert set(err["error"]) >= {"message", "type", "param", "code"} and err["error"]["message"]
    _works(server)


def test_unknown_model(server):
    e = _error(server, openai.NotFoundError, model="gpt-17")
    assert "gpt-17" in e.message and e.code == "model_not_found"


def test_max_tokens_past_the_context(server):
    e = _error(server, openai.BadRequestError, max_tokens=1000)
    assert "256" in e.message and e.param == "max_tokens"


@pytest.mark.parametrize("bad", [{"temperature": -1}, {"temperature": 3}, {"top_p": 0}, {"top_p": 1.5},
                                 {"max_tokens": 0}, {"n": 0}, {"n": 129}, {"frequency_penalty": 9}, {"seed": -4},
                                 {"extra_body": {"top_k": 0}}, {"extra_body": {"min_p": 2}},
                                 {"logprobs": 6}, {"logprobs": -1}, {"extra_body": {"repetition_penalty": 1e300}},
                                 {"extra_body": {"repetition_penalty": 1e-300}}, {"extra_body": {"top_k": -5}},
                                 {"logit_bias": {"1000": 100}}])
def test_bad_sampling_values(server, bad):
    e = _error(server, openai.BadRequestError, **bad)
    name = next(iter(bad["extra_body"])) if "extra_body" in bad else next(iter(bad))
    assert name in e.message and e.param == name


def test_bad_choice_and_logprob_requests(server):
    # More choices than the server ever holds at once (4 running + 8 queued) could only be
    # refused with 429 forever: a 400 names n instead.
    e = _error(server, openai.BadRequestError, n=13)
    assert e.param == "n" and "12" in e.message
    e = _error(server, openai.BadRequestError, prompt=["a", "b", "c"], n=5)
    assert e.param == "n" and "15" in e.message and "3 prompts x n = 5" in e.message
    # many prompts at n = 1 name the prompts, refused before they are tokenised
    e = _error(server, openai.BadRequestError, prompt=["hi"] * 5000)
    assert e.param == "prompt" and "5000 prompts x n = 1" in e.message
    # The model computes the last position's logits only: no log-probabilities for the prompt.
    e = _error(server, openai.BadRequestError, logprobs=1, echo=True)
    assert e.param == "echo"
    chat = server.client().chat.completions
    msgs = [{"role": "user", "content": "Hi"}]
    for kw in ({"top_logprobs": 2}, {"top_logprobs": 2, "logprobs": False}, {"top_logprobs": 21, "logprobs": True},
               {"top_logprobs": -1, "logprobs": True}):
        with pytest.raises(openai.BadRequestError) as info:
            chat.create(model="smollm", messages=msgs, max_tokens=2, **kw)
        assert info.value.param == "top_logprobs" and "top_logprobs" in info.value.message, kw
    with pytest.raises(openai.BadRequestError) as info:
        chat.create(model="smollm", messages=msgs, max_tokens=2, logprobs=3)  # a bool in chat
    assert info.value.param == "logprobs"
    _works(server)


def test_prompt_ten_times_the_context(server):
    e = _error(server, openai.BadRequestError, prompt="lorem ipsum " * 1280, max_tokens=None)
    assert "256" in e.message and e.code == "context_length_exceeded"
    chat = [{"role": "user", "content": "lorem ipsum " * 1280}]
    with pytest.raises(openai.BadRequestError, match="256"):
        server.client().chat.completions.create(model="smollm", messages=chat, max_tokens=4)
    with pytest.raises(openai.BadRequestError, match="token ids"):
        server.client().completions.create(model="smollm", prompt=[1, 2, 10**9], max_tokens=4)
    _works(server)


def test_requests_that_used_to_fail_inside(server):
    """Client mistakes found by probing the server, each a 400 naming its field (they were 500s
    or silently ignored), the server usable after each."""
    client = server.client()
    msgs = [{"role": "user", "content": "Hi"}]
    with pytest.raises(openai.BadRequestError, match="token ids") as info:
        client.completions.create(model="smollm", prompt=[10**20], max_tokens=2)
    assert info.value.param == "prompt"
    with pytest.raises(openai.BadRequestError, match="may not set messages"):
        client.chat.completions.create(model="smollm", messages=msgs, max_tokens=2,
                                       extra_body={"chat_template_kwargs": {"messages": []}})
    with pytest.raises(openai.BadRequestError, match="structured output") as info:
        client.chat.completions.create(model="smollm", messages=msgs, max_tokens=2,
                                       response_format={"type": "json_object"})
    assert info.value.param == "response_format"
    tool = {"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": {}}}}
    with pytest.raises(openai.BadRequestError, match="tool_choice") as info:
        client.chat.completions.create(model="smollm", messages=msgs, max_tokens=2, tools=[tool],
                                       tool_choice="required")
    with pytest.raises(openai.BadRequestError) as info:
        client.chat.completions.create(model="smollm", messages=msgs, max_completion_tokens=-3)
    assert info.value.param == "max_completion_tokens" and "max_completion_tokens" in info.value.message
    with pytest.raises(openai.BadRequestError) as info:
        client.completions.create(model="smollm", prompt="Hi", max_tokens=2, extra_body={"min_tokens": -1})
    assert info.value.param == "min_tokens"
    # text far past the context is refused before it is tokenised (64 characters a token at most)
    status, err = server.post_raw("/v1/completions", b'{"prompt": "' + b"word " * 4000 + b'", "max_tokens": 2}')
    assert status == 400 and err["error"]["code"] == "context_length_exceeded"
    assert "characters" in err["error"]["message"]
    # tool schemas nested 300 levels deep (Python's recursion gave a 500)
    deep = '{"type": "object", "properties": {"a": ' * 300 + '{"type": "object"}' + "}}" * 300
    body = '{"model": "smollm", "max_tokens": 2, "messages": [{"role": "user", "content": "Hi"}], '
    body += '"tools": [{"type": "function", "function": {"name": "f", "parameters": ' + deep + "}}]}"
    status, err = server.post_raw("/v1/chat/completions", body.encode())
    assert status == 400 and "tools is nested more than 64 levels" in err["error"]["message"], err
    # a temperature whose quotients overflow float32 samples greedily (it gave token 0)
    hot = client.completions.create(model="smollm", prompt="The capital of France is", max_tokens=4,
                                    temperature=1e-40)
    cold = client.completions.create(model="smollm", prompt="The capital of France is", max_tokens=4,
                                     temperature=0)
    assert hot.choices[0].text == cold.choices[0].text
    _works(server)


def test_fields_of_the_wrong_type_or_shape(server):
    """Values OpenAI refuses are refused here too (they were coerced or ignored), each a 400
    naming its field."""
    for path, body, param in [
        ("/v1/completions", {"prompt": "Hi", "max_tokens": 2, "stream": "yes"}, "stream"),
        ("/v1/completions", {"prompt": "Hi", "max_tokens": "2"}, "max_tokens"),
        ("/v1/completions", {"prompt": "Hi", "max_tokens": 2, "temperature": "0.5"}, "temperature"),
        ("/v1/completions", {"prompt": "Hi", "max_tokens": 2, "stream_options": {"include_usage": True}},
         "stream_options"),
        ("/v1/chat/completions", {"messages": [{"role": "user", "content": None}], "max_tokens": 2},
         "messages.0.content"),
        ("/v1/chat/completions", {"messages": [{"role": "user", "content": [{"type": "text"}]}], "max_tokens": 2},
         "messages.0.content"),
    ]:
        status, err = server.post_raw(path, json.dumps(body).encode())
        assert status == 400 and err["error"]["param"] == param, (body, err)
    _works(server)


def test_developer_messages_are_system_messages(server):
    client = server.client()
    used = [client.chat.completions.create(model="smollm", max_tokens=1, temperature=0, messages=[
        {"role": role, "content": "You are terse."}, {"role": "user", "content": "Hi"}]).usage.prompt_tokens
        for role in ("system", "developer")]
    assert used[0] == used[1]


@pytest.mark.parametrize("path,body", [
    ("/v1/completions", {"prompt": "Hi", "max_tokens": 3}),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 3}),
])
def test_streams_with_usage_give_every_chunk_a_usage_field(server, path, body):
    body = {**body, "model": "smollm", "stream": True, "stream_options": {"include_usage": True}}
    req = urllib.request.Request(server.url + path, data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=60) as r:
        events = [line[6:] for line in r.read().decode().splitlines() if line.startswith("data: ")]
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    assert all("usage" in c for c in chunks), chunks
    assert all(c["usage"] is None for c in chunks[:-1]) and chunks[-1]["usage"]["completion_tokens"] >= 1


@pytest.mark.parametrize("n", [1, 3])
def test_disconnect_mid_stream_frees_pages(server, n):
    client = server.client()
    stream = client.completions.create(model="smollm", prompt="Write a long story about a dragon.", max_tokens=200,
                                       temperature=0, stream=True, extra_body={"ignore_eos": True}, n=n,
                                       logprobs=2 if n > 1 else None)
    got = [next(iter(stream)) for _ in range(3 * n)]
    assert got[-1].choices[0].finish_reason is None
    busy = server.metrics()
    assert 1 <= busy["maxserve_num_requests_running"] <= n and busy["maxserve_kv_cache_used_pages"] > 0
    stream.close()
    t0 = time.time()
    idle = server.wait_for(lambda m: m["maxserve_kv_cache_used_pages"] == 0 and m["maxserve_num_requests_running"] == 0
                           and m["maxserve_num_requests_in_flight"] == 0, timeout=10)
    assert idle["maxserve_kv_cache_used_pages"] == 0, idle
    assert idle["maxserve_num_requests_running"] == 0 and idle["maxserve_num_requests_in_flight"] == 0
    # Cancelled well before its 200 tokens would have taken.
    assert idle["maxserve_num_output_tokens_total"] - busy["maxserve_num_output_tokens_total"] < 150 * n
    assert time.time() - t0 < 10
    _works(server)


def test_burst_beyond_capacity_is_answered_or_refused(server):
    async def burst():
        client = server.async_client(timeout=300)

        async def one(i):
            try:
                r = await client.completions.create(model="smollm", prompt=f"Request {i}:", max_tokens=2, temperature=0)
                return r.choices[0].finish_reason
            except openai.RateLimitError as e:
                assert e.response.headers.get("retry-after") == "1"
                return 429
            except openai.InternalServerError as e:
                return e.status_code

        return await asyncio.wait_for(asyncio.gather(*(one(i) for i in range(BURST))), timeout=600)

    before = server.metrics()
    outcomes = asyncio.run(burst())
    answered = sum(o in ("length", "stop") for o in outcomes)
    refused = sum(o in (429, 503) for o in outcomes)
    assert answered + refused == BURST, sorted(set(map(str, outcomes)))
    assert answered >= 12 and refused > 0
    m = server.wait_for(lambda m: m["maxserve_num_requests_in_flight"] == 0)
    assert m["maxserve_num_requests_in_flight"] == 0 and m["maxserve_kv_cache_used_pages"] == 0
    assert m["maxserve_requests_rejected_total"] - before["maxserve_requests_rejected_total"] == refused
    assert server.get("/health")[0] == 200
    _works(server)


def test_sigterm_lets_in_flight_requests_finish():
    import signal
    import threading

    s = ServerProcess(smollm2_gguf(), "--max-length", "256", "--kv-cache-page-size", "16", "--shutdown-timeout", "60")
    try:
        stream = s.client().completions.create(model=str(smollm2_gguf()), prompt="Once upon a time", max_tokens=40,
                                               temperature=0, stream=True, extra_body={"ignore_eos": True})
        chunks = iter(stream)
        first = next(chunks)
        threading.Timer(0.2, lambda: s.proc.send_signal(signal.SIGTERM)).start()
        rest = list(chunks)
        assert (rest or [first])[-1].choices[0].finish_reason == "length"
        assert s.proc.wait(30) == 0, s.errors()
    finally:
        s.stop()


def test_a_request_body_that_stops_arriving_is_answered_408():
    """The body-deadline middleware (ASGI level, no server): a body that stalls short of its end
    is answered 408 with the connection closed, the app never running; a body in pieces reaches
    the app whole, and the app's later receive() still sees the client's disconnect."""
    import asyncio
    import json

    from max.serve.app import _BodyDeadline

    seen: list[dict] = []

    async def app(scope, receive, send):
        seen.append(await receive())
        seen.append(await receive())
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})

    async def run(messages):
        sent, pending = [], iter(messages)

        async def receive():
            for m in pending:
                return m
            await asyncio.sleep(60)  # a client that sends nothing more

        async def send(m):
            sent.append(m)

        await _BodyDeadline(app, idle_s=0.2)({"type": "http", "method": "POST", "path": "/v1/completions",
                                               "headers": []}, receive, send)
        return sent

    sent = asyncio.run(run([{"type": "http.request", "body": b'{"prompt": ', "more_body": True}]))
    assert sent[0]["status"] == 408 and (b"connection", b"close") in sent[0]["headers"], sent
    assert json.loads(sent[1]["body"])["error"]["code"] == "request_timeout" and not seen
    pieces = [{"type": "http.request", "body": b"ab", "more_body": True},
              {"type": "http.request", "body": b"cd", "more_body": False}, {"type": "http.disconnect"}]
    sent = asyncio.run(run(pieces))
    assert sent[0]["status"] == 200
    assert seen == [{"type": "http.request", "body": b"abcd", "more_body": False}, {"type": "http.disconnect"}]


def test_a_request_body_past_the_limit_is_answered_413():
    """By its Content-Length before a byte is read, or as its pieces pass the limit; a body at
    the limit reaches the app. The limit follows the context (1 KiB a token, 64 MiB at least)."""
    import asyncio
    import json

    from max.serve.app import _BodyDeadline, body_limit

    assert body_limit(None) == body_limit(2048) == 64 << 20 and body_limit(1 << 20) == 1 << 30
    seen: list[dict] = []

    async def app(scope, receive, send):
        seen.append(await receive())
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})

    def run(headers, messages):
        sent, pending = [], iter(messages)

        async def receive():
            return next(pending)

        async def send(m):
            sent.append(m)

        scope = {"type": "http", "method": "POST", "path": "/v1/completions", "headers": headers}
        asyncio.run(_BodyDeadline(app, idle_s=5, max_bytes=10)(scope, receive, send))
        return sent

    sent = run([(b"content-length", b"11")], [])  # nothing read: the iterator is empty
    assert sent[0]["status"] == 413 and (b"connection", b"close") in sent[0]["headers"]
    assert json.loads(sent[1]["body"])["error"]["code"] == "request_too_large"
    chunked = [{"type": "http.request", "body": b"123456", "more_body": True},
               {"type": "http.request", "body": b"78901", "more_body": True}]
    assert run([], chunked)[0]["status"] == 413 and not seen
    sent = run([(b"content-length", b"10")], [{"type": "http.request", "body": b"1234567890", "more_body": False}])
    assert sent[0]["status"] == 200 and seen[-1]["body"] == b"1234567890"


def test_a_request_cancelled_on_disconnect_logs_nothing():
    """A non-streamed request whose client goes away is cancelled: its gather of choices ends
    with a CancelledError that is retrieved, not logged by asyncio as never retrieved."""
    import asyncio
    import gc

    from max.serve.openai_routes import _while_connected

    class Gone:
        async def is_disconnected(self) -> bool:
            return True

    async def main():
        logged = []
        asyncio.get_running_loop().set_exception_handler(lambda loop, ctx: logged.append(ctx))
        gather = asyncio.gather(asyncio.sleep(30), asyncio.sleep(30))
        ident = id(gather)
        out = await _while_connected(Gone(), gather)
        del gather
        await asyncio.sleep(0.05)
        gc.collect()
        await asyncio.sleep(0)
        # (other tests' leftovers may be collected here too: only this gather's count)
        return out, [c["message"] for c in logged if id(c.get("future")) == ident]

    out, logged = asyncio.run(main())
    assert out is None and logged == []


def test_more_client_mistakes_are_400s(server):
    """Found by probing: each was a 500, ran, or held the server up."""
    client = server.client()
    t0 = time.time()
    with pytest.raises(openai.BadRequestError, match="300 messages cannot fit") as info:  # (rendered at once before)
        client.chat.completions.create(model="smollm", max_tokens=2, messages=[{"role": "user", "content": ""}] * 300)
    assert info.value.param == "messages" and time.time() - t0 < 10
    status, err = server.post_raw("/v1/chat/completions", json.dumps(
        {"max_tokens": 2, "messages": [{"role": "user", "content": ""}] * 70000}).encode())
    assert status == 400 and "at most 65536" in err["error"]["message"] and err["error"]["param"] == "messages", err
    for kwargs in [{"tools": 5}, {"documents": True}]:
        with pytest.raises(openai.BadRequestError, match="cannot render the chat template") as info:
            client.chat.completions.create(model="smollm", max_tokens=2, messages=[{"role": "user", "content": "Hi"}],
                                           extra_body={"chat_template_kwargs": kwargs})
        assert info.value.param == "messages"
    for body, param in [({"prompt": [True, False]}, "prompt"), ({"prompt": [1.0, 2.0]}, "prompt"),
                        ({"prompt": "Hi", "stop_token_ids": [True]}, "stop_token_ids")]:
        status, err = server.post_raw("/v1/completions", json.dumps({"max_tokens": 2, **body}).encode())
        assert status == 400 and err["error"]["param"].startswith(param), (body, err)
    _works(server)


def test_a_stream_whose_client_leaves_while_queued_is_cancelled():
    s = ServerProcess(smollm2_gguf(), "--max-length", "4096", "--max-batch-size", "1", "--max-queue-size", "1")
    busy = None
    try:
        busy = s.client().completions.create(model=str(smollm2_gguf()), prompt="Go", max_tokens=4000, stream=True,
                                             extra_body={"ignore_eos": True})
        next(iter(busy))  # (it holds the only place in the batch for a while)
        with pytest.raises(openai.APITimeoutError):  # queued behind the busy one: no first token yet
            for _ in s.client(timeout=1).completions.create(model=str(smollm2_gguf()), prompt="Queued",
                                                           max_tokens=50, stream=True):
                pass
        # (the queue's gauge follows at the worker's next step)
        m = s.wait_for(lambda m: m["maxserve_num_requests_in_flight"] == 1 and m["maxserve_num_requests_queued"] == 0,
                       timeout=10)
        assert m["maxserve_num_requests_in_flight"] == 1 and m["maxserve_num_requests_queued"] == 0, m
        assert m["maxserve_num_requests_running"] == 1, m  # (the busy one is still going)
    finally:
        if busy is not None:
            busy.close()
        assert s.stop() == 0, s.errors()


def test_sigterm_past_the_shutdown_timeout_aborts_the_rest():
    """Requests still running when the shutdown timeout ends finish as aborted: a stream gets
    its last chunk and [DONE], a whole response its JSON; the server exits 0 and logs nothing."""
    import signal
    import threading

    s = ServerProcess(smollm2_gguf(), "--max-length", "512", "--shutdown-timeout", "1")
    try:
        whole: list = []
        t = threading.Thread(target=lambda: whole.append(s.client().completions.create(
            model=str(smollm2_gguf()), prompt="Go", max_tokens=480, extra_body={"ignore_eos": True})))
        t.start()
        chunks = iter(s.client().completions.create(model=str(smollm2_gguf()), prompt="Once upon a time",
                                                    max_tokens=480, stream=True, extra_body={"ignore_eos": True}))
        next(chunks)
        s.wait_for(lambda m: m["maxserve_num_requests_running"] == 2, timeout=30)
        s.proc.send_signal(signal.SIGTERM)
        rest = list(chunks)
        t.join(60)
        assert rest[-1].choices[0].finish_reason == "abort"
        assert whole and whole[0].choices[0].finish_reason == "abort"
        assert s.proc.wait(30) == 0
        assert "Traceback" not in s.errors(), s.errors()
    finally:
        s.stop()
