"""Structured output (``enable_structured_output``, llguidance): a context with a JSON schema
produces text the schema accepts, whatever the sampling, alone or beside plain requests, on
the CPU and on the GPU (where decode calls run several steps: a structured context runs one);
bad schemas and pipelines built without it are clear errors; ``max serve`` takes OpenAI's
``response_format`` (json_object, json_schema), streamed or not."""

from __future__ import annotations

import json

import openai
import pytest

pytest.importorskip("llguidance")

from max.driver import DeviceSpec  # noqa: E402
from max.interfaces import SamplingParams  # noqa: E402
from max.pipelines import PipelineConfig  # noqa: E402
from max.pipelines.lib.generate import Generator  # noqa: E402
from max.pipelines.lib.pipeline import load_pipeline  # noqa: E402
from max.pipelines.lib.structured import schema_text  # noqa: E402
from models import smollm2_gguf  # noqa: E402
from serve_util import ServerProcess  # noqa: E402

PERSON = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 12},
        "age": {"type": "integer", "minimum": 0, "maximum": 120},
        "pet": {"enum": ["cat", "dog", "none"]},
    },
    "required": ["name", "age", "pet"],
    "additionalProperties": False,
}


def _check_person(text: str) -> None:
    obj = json.loads(text)
    assert set(obj) == {"name", "age", "pet"}, text
    assert isinstance(obj["name"], str) and len(obj["name"]) <= 12, text
    assert type(obj["age"]) is int and 0 <= obj["age"] <= 120, text
    assert obj["pet"] in ("cat", "dog", "none"), text


@pytest.fixture(scope="module", params=["cpu", pytest.param("gpu", marks=pytest.mark.gpu)])
def pipeline(request):
    if request.param == "gpu":
        request.getfixturevalue("gpu")  # skips without one
    config = PipelineConfig(model_path=str(smollm2_gguf()), device_specs=[DeviceSpec(0, request.param)],
                            max_length=512, enable_structured_output=True, max_num_steps=4)
    return load_pipeline(config)


def _prompt(pipeline, content: str) -> str:
    return pipeline.tokenizer.apply_chat_template([{"role": "user", "content": content}])


@pytest.mark.parametrize("top_k,seed", [(1, 0), (40, 1), (255, 2), (255, 3)])
def test_the_text_follows_the_schema(pipeline, top_k, seed):
    gen = Generator(pipeline)
    ctx = gen.context(_prompt(pipeline, "Describe a person as JSON."),
                      SamplingParams(top_k=top_k, temperature=1.5, max_new_tokens=120, seed=seed),
                      add_special_tokens=False)
    ctx.json_schema = schema_text(PERSON)
    r = gen.run([ctx])[0]
    assert r.finish_reason == "stop", r.text
    _check_person(r.text)


def test_structured_beside_plain_requests(pipeline):
    gen = Generator(pipeline)
    sp = SamplingParams(top_k=1, max_new_tokens=40, ignore_eos=True)
    plain = gen.context("The capital of France is", sp)
    alone = gen.run([gen.context("The capital of France is", sp)])[0].text
    shaped = gen.context(_prompt(pipeline, "A list of three numbers."), SamplingParams(top_k=1, max_new_tokens=60),
                         add_special_tokens=False)
    shaped.json_schema = schema_text({"type": "array", "items": {"type": "integer"}, "minItems": 3, "maxItems": 3})
    results = gen.run([plain, shaped])
    # (the plain request decodes several steps a call on a GPU; there a batch's rows may take other
    # kernels than one row alone, so near-ties may differ: numerics.batch_invariant fixes that)
    assert results[0].text == alone if pipeline.device.is_host else len(results[0].tokens) == 40
    numbers = json.loads(results[1].text)
    assert len(numbers) == 3 and all(type(n) is int for n in numbers), results[1].text


def test_schema_errors(pipeline):
    for bad, needle in [("[1]", "must be an object"), ("{", "not valid JSON"), (b"7", "must be an object")]:
        with pytest.raises(ValueError, match=needle):
            schema_text(bad)
    with pytest.raises(ValueError, match="not supported"):
        pipeline.grammars.compile(schema_text({"type": "object", "properties": {"a": {"$ref": "#/missing"}}}))
    pipeline.grammars.compile(schema_text(PERSON))


def test_a_pipeline_without_structured_output_refuses_schemas():
    config = PipelineConfig(model_path=str(smollm2_gguf()), device_specs=[DeviceSpec.cpu()], max_length=128)
    pipe = load_pipeline(config)
    assert pipe.grammars is None
    gen = Generator(pipe)
    ctx = gen.context("Hello", SamplingParams(top_k=1, max_new_tokens=4))
    ctx.json_schema = schema_text({"type": "object"})
    with pytest.raises(ValueError, match="enable_structured_output"):
        gen.run([ctx])


def test_a_matcher_in_error_ends_its_request(pipeline):
    """A schema the matcher cannot take that reached the pipeline unchecked ends its request as
    cancelled (only the end of sequence is allowed) instead of failing the step for the whole
    batch; so does a matcher that fails mid-way (a parser limit)."""
    gen = Generator(pipeline)
    ctx = gen.context("Hello", SamplingParams(top_k=1, max_new_tokens=8))
    ctx.json_schema = schema_text({"type": "object", "properties": {"a": {"$ref": "#/missing"}}})
    plain = gen.context("Hello", SamplingParams(top_k=1, max_new_tokens=8, ignore_eos=True))
    bad, ok = gen.run([ctx, plain])
    assert bad.finish_reason == "cancelled" and len(bad.tokens) == 1
    assert len(ok.tokens) == 8


def test_structured_requests_under_the_serving_scheduler(pipeline):
    """Structured requests scheduled as the server does, one removed mid-way: each other one's
    text follows the schema, and each context carries its own matcher (nothing is kept per
    request beside it)."""
    from max.interfaces import TextGenerationInputs
    from max.serve.scheduler import Scheduler

    gen = Generator(pipeline)
    sched = Scheduler(pipeline.kv_manager, 4, 512)
    ctxs = []
    for i in range(3):
        ctx = gen.context(_prompt(pipeline, f"Person number {i} as JSON."), SamplingParams(top_k=1, max_new_tokens=80),
                          add_special_tokens=False)
        ctx.json_schema = schema_text(PERSON)
        sched.add(ctx)
        ctxs.append(ctx)
    for step in range(200):
        if not sched.has_work:
            break
        batch = sched.schedule()
        outs = pipeline.execute(TextGenerationInputs([{c.request_id: c for c in batch}]))
        if step == 2:
            assert len({id(c.matcher) for c in ctxs}) == 3 and None not in {c.matcher for c in ctxs}
            sched.remove(ctxs[1].request_id)
        for c in batch:
            if c.request_id in outs and outs[c.request_id].is_done:
                sched.finish(c)
    assert not sched.has_work and pipeline.kv_manager.get_num_used_pages() == 0
    for c in (ctxs[0], ctxs[2]):
        _check_person(pipeline.tokenizer.decode_sync(c.generated_tokens, skip_special_tokens=True))


@pytest.fixture(scope="module")
def server():
    s = ServerProcess(smollm2_gguf(), "--max-length", "512", "--max-batch-size", "4", "--served-model-name", "smollm",
                      "--enable-structured-output")
    yield s
    assert s.stop() == 0, s.errors()


def test_serve_response_format(server):
    client = server.client()
    msgs = [{"role": "user", "content": "Describe a person as JSON."}]
    fmt = {"type": "json_schema", "json_schema": {"name": "person", "schema": PERSON, "strict": True}}
    r = client.chat.completions.create(model="smollm", messages=msgs, max_tokens=120, response_format=fmt, n=2,
                                       seed=5, temperature=1.2)
    for choice in r.choices:
        assert choice.finish_reason == "stop"
        _check_person(choice.message.content)
    text = "".join(c.choices[0].delta.content or "" for c in client.chat.completions.create(
        model="smollm", messages=msgs, max_tokens=120, response_format=fmt, stream=True) if c.choices)
    _check_person(text)
    r = client.chat.completions.create(model="smollm", messages=msgs, max_tokens=120, response_format=fmt,
                                       logprobs=True, top_logprobs=2)
    _check_person(r.choices[0].message.content)  # (the schema's end, a text token, keeps its log-probability)
    assert "".join(t.token for t in r.choices[0].logprobs.content) == r.choices[0].message.content
    r = client.chat.completions.create(model="smollm", messages=msgs, max_tokens=200, temperature=0,
                                       response_format={"type": "json_object"})
    # (any object: it may run to max_tokens; when the object ends, the answer does)
    text = r.choices[0].message.content
    assert text.lstrip().startswith("{"), text
    assert r.choices[0].finish_reason == "length" or isinstance(json.loads(text), dict), r.choices[0]
    for fmt, needle in [({"type": "json_schema", "json_schema": {"name": "x"}}, "json_schema.schema"),
                        ({"type": "json_schema", "json_schema": {"schema": {"$ref": "#/nope"}}}, "not supported"),
                        ({"type": "yaml"}, "must be text, json_object or json_schema")]:
        with pytest.raises(openai.BadRequestError, match=needle) as info:
            client.chat.completions.create(model="smollm", messages=msgs, max_tokens=4, response_format=fmt)
        assert info.value.param == "response_format"
    r = client.completions.create(model="smollm", prompt=["A number:", "Another:"], max_tokens=8,
                                  extra_body={"response_format": {"type": "json_schema", "json_schema": {
                                      "schema": {"type": "integer", "minimum": 0, "maximum": 999}}}})
    for choice in r.choices:
        assert choice.finish_reason == "stop" and 0 <= json.loads(choice.text) <= 999, choice
    wide = {"type": "object", "additionalProperties": False,
            "properties": {f"p{i}": {"type": "string"} for i in range(1000)}}
    r = client.chat.completions.create(model="smollm", messages=msgs, max_tokens=40, response_format={
        "type": "json_schema", "json_schema": {"schema": wide}})
    if r.choices[0].finish_reason == "stop":  # (else the parser's limit ended it: never "stop" with bad JSON)
        json.loads(r.choices[0].message.content)
    else:
        assert r.choices[0].finish_reason in ("abort", "length"), r.choices[0]
    r = client.chat.completions.create(model="smollm", messages=msgs, max_tokens=3, response_format={"type": "text"})
    assert r.choices[0].finish_reason in ("length", "stop")
