"""tokenizer.json directories (MiniLM against transformers' AutoTokenizer), chat templates
(named, from files, compared with transformers' own apply_chat_template rendering) and the
tokenizer's errors."""

from __future__ import annotations

import asyncio
import json
import os
import shutil

import pytest

pytest.importorskip("tokenizers")
pytest.importorskip("jinja2")

from max.pipelines.tokenizer import (  # noqa: E402
    ChatTemplateError,
    TextTokenizer,
    build_tokenizer_from_gguf,
    read_gguf_metadata,
    render_chat_template,
)

from tokenizer_util import (  # noqa: E402
    _byte_level_metadata,
    _minilm_dir,
    _spm_metadata,
)

# --------------------------------------------------------------------------
# tokenizer.json directories
# --------------------------------------------------------------------------

MINILM_TEXTS = [
    "Hello World, it's me!",
    "naïve café — 中文 don't",
    "  spaced   out\n\tTabs",
    "[CLS] x [SEP] [MASK] unaffable",
    "word " * 200,  # longer than the tokenizer.json truncation (128): nothing is cut
]


@pytest.mark.parametrize("text", MINILM_TEXTS)
def test_minilm_matches_transformers(text):
    transformers = pytest.importorskip("transformers")
    directory = _minilm_dir()
    reference = transformers.AutoTokenizer.from_pretrained(directory)
    tok = TextTokenizer(directory)
    for special in (True, False):
        expected = reference(text, add_special_tokens=special)["input_ids"]
        assert tok.encode_sync(text, add_special_tokens=special).tolist() == expected
    expected = reference(text)["input_ids"]
    assert tok.decode_sync(expected) == reference.decode(expected)
    assert tok.decode_sync(expected, skip_special_tokens=True) == reference.decode(expected, skip_special_tokens=True)


def test_minilm_known_ids():
    tok = TextTokenizer(_minilm_dir())
    expected = [101, 7592, 2088, 1010, 2009, 1005, 1055, 2033, 999, 102]
    assert tok.encode_sync("Hello World, it's me!").tolist() == expected
    assert tok.eos is None and tok.eos_token_ids == set()
    assert tok.special_tokens_map["cls_token"] == "[CLS]"


def _model_dir_with_templates(tmp_path):
    """The MiniLM tokenizer.json plus config files that exercise the template and eos logic."""
    directory = tmp_path / "model"
    directory.mkdir()
    shutil.copy(os.path.join(_minilm_dir(), "tokenizer.json"), directory / "tokenizer.json")
    config = {
        "bos_token": {"content": "[CLS]", "lstrip": False, "__type": "AddedToken"},
        "eos_token": "[SEP]",
        "unk_token": "[UNK]",
        "chat_template": [
            {"name": "default", "template": "CONFIG {{ messages[0]['content'] }}"},
            {"name": "tool_use", "template": "TOOLS {{ tools | length if tools else 0 }}"},
        ],
    }
    (directory / "tokenizer_config.json").write_text(json.dumps(config))
    (directory / "generation_config.json").write_text(json.dumps({"eos_token_id": [102, 100]}))
    return directory


def test_named_templates_from_config(tmp_path):
    directory = _model_dir_with_templates(tmp_path)
    tok = TextTokenizer(str(directory))
    messages = [{"role": "user", "content": "hey"}]
    assert tok.apply_chat_template(messages) == "CONFIG hey"
    assert tok.apply_chat_template(messages, tools=[{"name": "a"}, {"name": "b"}]) == "TOOLS 2"
    assert tok.eos == 102 and tok.eos_token_ids == {102, 100}
    assert tok.bos_token_id == 101
    # The chat_template argument can name a template or be one.
    assert TextTokenizer(str(directory), chat_template="tool_use").apply_chat_template(messages) == "TOOLS 0"
    custom = TextTokenizer(str(directory), chat_template="{{ bos_token }}+{{ messages | length }}")
    assert custom.apply_chat_template(messages) == "[CLS]+1"


def test_jinja_file_wins_over_config(tmp_path):
    directory = _model_dir_with_templates(tmp_path)
    (directory / "chat_template.jinja").write_text("FILE {{ messages[0]['content'] }}\n")
    tok = TextTokenizer(str(directory))
    # Jinja drops one trailing newline of a template, in transformers too.
    assert tok.apply_chat_template([{"role": "user", "content": "x"}]) == "FILE x"
    transformers = pytest.importorskip("transformers")
    reference = transformers.AutoTokenizer.from_pretrained(str(directory))
    assert reference.apply_chat_template([{"role": "user", "content": "x"}], tokenize=False) == "FILE x"


def test_tokenizer_json_without_post_processor(tmp_path, smollm):
    # A tokenizer.json that adds nothing itself: the config's add_bos_token is honoured.
    smollm.delegate.save(str(tmp_path / "tokenizer.json"))
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({"add_bos_token": True, "eos_token": "<|im_end|>"}))
    (tmp_path / "special_tokens_map.json").write_text(json.dumps({"bos_token": "<|im_start|>"}))
    tok = TextTokenizer(str(tmp_path))
    assert tok.special_tokens_map == {"bos_token": "<|im_start|>", "eos_token": "<|im_end|>"}
    assert tok.encode_sync("Hello").tolist() == [1, 19556]
    assert tok.encode_sync("Hello", add_special_tokens=False).tolist() == [19556]
    assert tok.eos == 2 and tok.eos_token_ids == {2}


# --------------------------------------------------------------------------
# Chat templates, compared with transformers' own rendering
# --------------------------------------------------------------------------

FEATURE_TEMPLATE = """\
{%- set ns = namespace(count=0, system='none') -%}
{%- for message in messages %}
    {%- if message['role'] == 'system' %}
        {%- set ns.system = message['content'] %}
        {%- continue %}
    {%- endif %}
    {%- set ns.count = ns.count + 1 %}
<{{ message['role'] }}>
    {%- if message['content'] is string %}
{{ message['content'] }}
    {%- elif message['content'] is defined %}
        {%- for part in message['content'] %}
            {%- if part['type'] == 'text' %}[{{ part['text'] }}]{% endif %}
        {%- endfor %}
    {%- endif %}
    {%- if message['tool_calls'] is defined %} calls={{ message['tool_calls'] | tojson }}{% endif %}
    {%- if message['reasoning_content'] is defined %} think={{ message['reasoning_content'] }}{% endif %}
    {% if loop.index >= 6 %}{% break %}{% endif %}
{% endfor %}
{% if tools %}
TOOLS:
{{ tools | tojson(indent=2) }}
{{ tools[0] | tojson(separators=(',', ':'), sort_keys=true) }}
{% endif %}
{% if documents %}
    {% for doc in documents %}
DOC {{ doc['title'] }}: {{ doc['text'] }}
    {% endfor %}
{% endif %}
{% generation %}system={{ ns.system }} count={{ ns.count }}{% endgeneration %}
bos={{ bos_token }} eos={{ eos_token }} year={{ strftime_now('%Y') }} think={{ enable_thinking | default(false) }}
{{ {'b': 'ü', 'a': '<&>'} | tojson }} {{ dict(x=1) | tojson }} {{ dict.fromkeys(['k'], 0) | tojson }}
{% if add_generation_prompt %}<assistant>
{% endif %}"""

CHATS = [
    [
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": "What's 2+2? Answer with \"four\" — or 4."},
        {"role": "assistant", "content": "4"},
        {"role": "user", "content": "And in French? 🇫🇷"},
    ],
    [{"role": "user", "content": "Hi"}],
    [
        {"role": "user", "content": [{"type": "text", "text": "part one"}, {"type": "text", "text": "part two"}]},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [{"type": "function", "function": {"name": "get", "arguments": {"city": "Zürich"}}}],
        },
        {"role": "tool", "content": "{\"temp\": 21}"},
        {"role": "assistant", "content": "It is 21°C.", "reasoning_content": "read the tool output"},
    ],
]

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Weather for a city — in °C",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
        },
    }
]


@pytest.fixture(scope="module")
def transformers_chat(smollm):
    """A transformers tokenizer with SmolLM2's special tokens, to render templates with."""
    transformers = pytest.importorskip("transformers")
    from tokenizers import Tokenizer

    backend = Tokenizer.from_str(smollm.delegate.to_str())
    return transformers.PreTrainedTokenizerFast(tokenizer_object=backend, **smollm.special_tokens_map)


@pytest.mark.parametrize("add_generation_prompt", [True, False])
@pytest.mark.parametrize("chat", range(len(CHATS)))
def test_smollm_template_matches_transformers(smollm, smollm_metadata, transformers_chat, chat, add_generation_prompt):
    messages = CHATS[chat]
    if any(not isinstance(m.get("content"), str) for m in messages):
        pytest.skip("SmolLM2's template concatenates content as a string")
    template = smollm_metadata["tokenizer.chat_template"]
    transformers_chat.chat_template = template
    expected = transformers_chat.apply_chat_template(
        messages, tokenize=False, add_generation_prompt=add_generation_prompt
    )
    got = smollm.apply_chat_template(messages, chat_template_options={"add_generation_prompt": add_generation_prompt})
    assert got == expected


def test_smollm_template_text(smollm):
    got = smollm.apply_chat_template([{"role": "user", "content": "Hi"}])
    assert got == (
        "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n"
        "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
    )


@pytest.fixture(scope="module")
def smollm_feature(smollm_metadata):
    return TextTokenizer.from_gguf_metadata(smollm_metadata, chat_template=FEATURE_TEMPLATE)


@pytest.mark.parametrize("add_generation_prompt", [True, False])
@pytest.mark.parametrize("chat", range(len(CHATS)))
@pytest.mark.parametrize("with_extras", [False, True])
def test_feature_template_matches_transformers(
    smollm_feature, transformers_chat, chat, add_generation_prompt, with_extras
):
    messages = CHATS[chat]
    extras = {}
    tools = None
    if with_extras:
        extras = {
            "documents": [{"title": "Doc A", "text": "alpha"}, {"title": "Doc B", "text": "ünïcode"}],
            "enable_thinking": True,
        }
        tools = TOOLS
    transformers_chat.chat_template = FEATURE_TEMPLATE
    expected = transformers_chat.apply_chat_template(
        messages, tools=tools, tokenize=False, add_generation_prompt=add_generation_prompt, **extras
    )
    got = smollm_feature.apply_chat_template(
        messages, tools=tools, chat_template_options={"add_generation_prompt": add_generation_prompt, **extras}
    )
    assert got == expected


def test_render_directly():
    out = render_chat_template(
        "{% for m in messages %}{{ m.role }}:{{ m.content }}|{% endfor %}{{ extra }}",
        [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b", "tool_calls": None}],
        special_tokens={"bos_token": "<s>"},
        extra="!",
    )
    assert out == "user:a|assistant:b|!"


# --------------------------------------------------------------------------
# Errors
# --------------------------------------------------------------------------


@pytest.mark.parametrize("template, needle", [
    ("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}", "more than 1000000 range"),
    ("{{ 'xy ' * 30000000 }}", "repeats a sequence"),
    ("{% set ns = namespace(s='ab') %}{% for i in range(30) %}{% set ns.s = ns.s + ns.s %}{% endfor %}", "joins"),
    ("{{ 7 ** 100000000 }}", "power"),
    ("{{ (((7 ** 60) ** 60) ** 60) ** 60 }}", "65536 bits"),
    ("{{ 'a'|center(100000000) }}", "pads a string with center"),
    ("{{ 'x'|indent(100000000) }}", "indents a string"),
    ("{{ ('a' * 100000)|replace('a', 'a' * 1000) }}", "replaces text"),
    ("{% set ns = namespace(s='ab') %}{% for i in range(30) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}", "with ~"),
    ("{{ 'a'.ljust(10**9) }}", "unsafe"),
    ("{{ '%1000000000s'|format('a') }}", "formats to a width"),
    ("{% for i in range(99999) %}{{ 'abcdefghijk' }}{% endfor %}", "characters of"),
])
def test_templates_cannot_build_huge_things(template, needle):
    """Model files are untrusted: a template's loops, sizes and output are bounded, and what
    passes a bound is a clear error (not a hang or an out-of-memory abort)."""
    with pytest.raises(ChatTemplateError, match=needle):
        render_chat_template(template, [{"role": "user", "content": "hi"}])
    # bounded, not refused: a million range items in all, strings up to a million characters
    ok = "{% for i in range(1000) %}{% for j in range(999) %}{% endfor %}{% endfor %}{{ 'ab' * 500000 }}"
    assert len(render_chat_template(ok, [{"role": "user", "content": "hi"}])) == 1_000_000


def test_deeply_nested_inputs_are_refused():
    """Tools, documents, template variables or messages nested past 64 levels raise a
    ChatTemplateError naming the argument (they overflowed Python's recursion before)."""
    deep: dict = {"a": 1}
    for _ in range(600):
        deep = {"a": deep}
    tools = [{"type": "function", "function": {"name": "f", "parameters": deep}}]
    user = [{"role": "user", "content": "hi"}]
    with pytest.raises(ChatTemplateError, match="tools is nested more than 64 levels deep"):
        render_chat_template("{{ messages[0].content }}", user, tools=tools)
    with pytest.raises(ChatTemplateError, match="chat_template_kwargs is nested more than 64"):
        render_chat_template("{{ x }}", user, x=deep)
    with pytest.raises(ChatTemplateError, match="a message is nested"):
        render_chat_template("{{ messages[0].content }}", [{"role": "user", "content": "hi", "meta": deep}])
    ok: dict = {"a": 1}
    for _ in range(40):
        ok = {"a": ok}
    assert render_chat_template("{{ x.a.a.a }}", user, x=ok) == "{'a': " * 38 + "1" + "}" * 38


def test_bounded_filters_and_operators_still_work():
    """The size-checked filters and ``~`` give what Jinja's own give, and a long message is not
    refused: the limit grows with the inputs."""
    out = render_chat_template(
        "{{ messages[0].content|replace('a', 'b') }}|{{ messages[0].content|replace('a', 'b', 1) }}|"
        "{{ 'x'|center(5) }}|{{ 'a\nb'|indent(2, true) }}|{{ '%3s'|format('ab') }}|{{ 'a' ~ 1 ~ none }}",
        [{"role": "user", "content": "a a"}])
    assert out == "b b|b a|  x  |  a\n  b| ab|a1None"
    long = [{"role": "user", "content": "x" * 1_500_000}]
    qwen_style = "{{ '<|im_start|>' + messages[0]['content'] + '<|im_end|>' }}{{ messages[0]['content']|indent(4) }}"
    assert len(render_chat_template(qwen_style, long)) == 3_000_022  # (indent leaves the first line)


def test_unsupported_tokenizer_models():
    for model in ("bert", "t5", "rwkv"):
        metadata = dict(_spm_metadata(), **{"tokenizer.ggml.model": model})
        with pytest.raises(ValueError, match=repr(model)):
            build_tokenizer_from_gguf(metadata)


def test_unsupported_pre_tokenizer():
    with pytest.raises(ValueError, match="not-a-real-pre"):
        build_tokenizer_from_gguf(_byte_level_metadata("not-a-real-pre"))


def test_missing_vocabulary():
    with pytest.raises(ValueError, match="tokenizer.ggml.model"):
        build_tokenizer_from_gguf({"general.architecture": "llama"})
    with pytest.raises(ValueError, match="tokenizer.ggml.tokens"):
        build_tokenizer_from_gguf({"tokenizer.ggml.model": "gpt2"})
    metadata = _byte_level_metadata("gpt-2")
    del metadata["tokenizer.ggml.merges"]
    with pytest.raises(ValueError, match="merges"):
        build_tokenizer_from_gguf(metadata)


def test_missing_files(tmp_path):
    with pytest.raises(FileNotFoundError, match=str(tmp_path)):
        TextTokenizer(str(tmp_path))
    missing = tmp_path / "nope"
    with pytest.raises(FileNotFoundError, match="nope"):
        TextTokenizer(str(missing))
    with pytest.raises(FileNotFoundError, match="absent.gguf"):
        read_gguf_metadata(tmp_path / "absent.gguf")
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"not a gguf file at all")
    with pytest.raises(ValueError, match="bad.gguf"):
        TextTokenizer(str(bad))


def test_prompt_too_long(smollm_metadata):
    tok = TextTokenizer.from_gguf_metadata(smollm_metadata, max_length=4)
    assert tok.encode_sync("Hello world").tolist() == [19556, 905]
    with pytest.raises(ValueError, match=r"(?s)7 tokens.*4 tokens"):
        tok.encode_sync("Hello world! 123")
    with pytest.raises(ValueError, match="5 tokens"):
        asyncio.run(tok.encode([1, 2, 3, 4, 5]))


@pytest.mark.parametrize(
    "template, match",
    [
        ("{% for m in messages %}{{ m.content }", "syntax error"),
        ("{% if messages[0].role != 'system' %}{{ raise_exception('need a system message') }}{% endif %}",
         "need a system message"),
        ("{{ messages[0].content + 1 }}", "TypeError"),
        ("{{ messages.__class__.__mro__ }}", "chat template"),
    ],
)
def test_broken_templates(template, match):
    with pytest.raises(ValueError, match=match):
        TextTokenizer.from_gguf_metadata(_spm_metadata(), chat_template=template).apply_chat_template(
            [{"role": "user", "content": "hi"}]
        )
    with pytest.raises(ChatTemplateError):
        render_chat_template(template, [{"role": "user", "content": "hi"}])


def test_no_template(smollm_metadata):
    metadata = {k: v for k, v in smollm_metadata.items() if k != "tokenizer.chat_template"}
    tok = TextTokenizer.from_gguf_metadata(metadata)
    with pytest.raises(ValueError, match="no chat template"):
        tok.apply_chat_template([{"role": "user", "content": "hi"}])
    with pytest.raises(ValueError, match="empty"):
        render_chat_template("x", [])


def test_the_documented_module_path_names_the_same_tokenizers():
    import max.pipelines.lib.tokenizer as documented
    import max.pipelines.tokenizer as ours

    for name in ("TextTokenizer", "IdentityPipelineTokenizer", "max_tokens_to_generate", "run_with_default_executor"):
        assert getattr(documented, name) is getattr(ours, name)
