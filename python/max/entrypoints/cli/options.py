"""The model flags shared by ``max generate``, ``encode`` and ``warm-cache`` (MAX's names), and
turning parsed flags into a ``PipelineConfig``."""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from max.driver import DeviceSpec
from max.entrypoints.cli.config_flags import config_kwargs


def parse_devices(value: str) -> list[DeviceSpec]:
    """``cpu``, ``gpu`` (the first GPU), ``gpu:0,1`` or ``cpu:0,1`` (simulated devices: the CPU
    standing for several, to try tensor parallelism without GPUs)."""
    v = value.strip().lower()
    if v == "cpu":
        return [DeviceSpec.cpu()]
    if v.startswith("cpu:"):
        try:
            ids = [int(x) for x in v[4:].split(",") if x.strip()]
        except ValueError:
            raise argparse.ArgumentTypeError(f"bad device list {value!r} (expected cpu or cpu:0,1)") from None
        if not ids or len(set(ids)) != len(ids) or any(i < 0 for i in ids):
            raise argparse.ArgumentTypeError(f"bad device list {value!r}")
        return [DeviceSpec.cpu(i) for i in ids]
    if v == "gpu":
        return [DeviceSpec.accelerator(0)]
    if v.startswith("gpu:"):
        try:
            ids = [int(x) for x in v[4:].split(",") if x.strip()]
        except ValueError:
            raise argparse.ArgumentTypeError(f"bad device list {value!r} (expected cpu, gpu or gpu:0,1)") from None
        if not ids or any(i < 0 for i in ids):
            raise argparse.ArgumentTypeError(f"bad device list {value!r}")
        return [DeviceSpec.accelerator(i) for i in ids]
    raise argparse.ArgumentTypeError(f"unknown device {value!r} (expected cpu, gpu or gpu:N)")


def add_model_flags(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("model")
    g.add_argument("--model-path", "--model", dest="model_path", default=None,
                   help="a local Hugging Face model directory or a .gguf file (required, here or in --config-file)")
    g.add_argument("--config-file", default=None,
                   help="a YAML file of PipelineConfig settings (max_length: 4096, ...); flags given win over it")
    g.add_argument("--weight-path", action="append", default=[], help="weight files to use instead of the directory's")
    g.add_argument("--quantization-encoding", default=None,
                   help="float32, bfloat16, float16 (safetensors), or the GGUF file's block encoding")
    g.add_argument("--devices", type=parse_devices, default=None,
                   help="cpu, gpu, gpu:N or gpu:0,1 (tensor parallel over those GPUs); default: the first GPU, "
                        "else the CPU")
    g.add_argument("--data-parallel-degree", type=int, default=1,
                   help="model replicas: --devices split into this many equal groups, each running a copy of "
                        "the model (tensor-parallel over its group) with its own KV cache")
    g.add_argument("--max-length", type=int, default=None, help="longest sequence (prompt + generated tokens)")
    g.add_argument("--max-batch-size", type=int, default=None, help="most sequences in one step")
    g.add_argument("--max-batch-input-tokens", type=int, default=8192, help="token budget of one step (chunked prefill)")
    g.add_argument("--enable-chunked-prefill", action=argparse.BooleanOptionalAction, default=True)
    g.add_argument("--enable-overlap-scheduler", action=argparse.BooleanOptionalAction, default=None,
                   help="queue each decode call's next step before reading its tokens back "
                        "(default: on for GPUs)")
    g.add_argument("--kv-cache-page-size", type=int, default=128, help="tokens per KV-cache page")
    g.add_argument("--kv-cache-format", default=None, choices=["float32", "bfloat16", "float16", "float8_e4m3fn"],
                   help="the KV cache's dtype (default: the activations'); float8_e4m3fn is not supported yet")
    g.add_argument("--enable-prefix-caching", action=argparse.BooleanOptionalAction, default=False)
    g.add_argument("--device-memory-utilization", type=float, default=0.9,
                   help="fraction of free GPU memory the KV cache may use")
    g.add_argument("--chat-template", default=None, help="a chat template (text or a file) instead of the model's")
    g.add_argument("--custom-architectures", action="append", default=[],
                   help="a module (or path:module) whose ARCHITECTURES list is registered")
    g.add_argument("--trust-remote-code", action=argparse.BooleanOptionalAction, default=False)


def pipeline_config(args: argparse.Namespace, **extra: Any) -> Any:
    """The ``PipelineConfig`` of parsed model flags (and `extra` keyword arguments, named as their
    flags' dests). With ``--config-file``, the file's settings win over the flags' defaults and
    the flags given on the command line (``args._given``, see given_dests) win over the file."""
    from max.pipelines import PipelineConfig
    from max.pipelines.lib.config_file import read_config_file

    kw: dict[str, Any] = {
        "model_path": args.model_path,
        "weight_path": [Path(p) for p in args.weight_path],
        "quantization_encoding": args.quantization_encoding,
        "device_specs": args.devices or [],
        "data_parallel_degree": args.data_parallel_degree,
        "max_length": args.max_length,
        "max_batch_size": args.max_batch_size,
        "max_batch_input_tokens": args.max_batch_input_tokens,
        "enable_chunked_prefill": args.enable_chunked_prefill,
        "enable_overlap_scheduler": args.enable_overlap_scheduler,
        "kv_cache_page_size": args.kv_cache_page_size,
        "kv_cache_format": args.kv_cache_format,
        "enable_prefix_caching": args.enable_prefix_caching,
        "device_memory_utilization": args.device_memory_utilization,
        "chat_template": args.chat_template,
        "custom_architectures": args.custom_architectures,
        "trust_remote_code": args.trust_remote_code,
        **extra,
    }
    more = config_kwargs(args)
    section = more.pop("section_name", None)
    if args.config_file is not None:  # (read here, once: its keys decide which defaults it overrides)
        from_file = read_config_file(args.config_file, section)
        from_file.pop("config_file", None)
        from_file.pop("section_name", None)
        given: set[str] = getattr(args, "_given", set())
        dest = {"device_specs": "devices"}
        kw = {**from_file, **{k: v for k, v in kw.items() if dest.get(k, k) in given or k not in from_file}}
    elif args.model_path is None:
        raise ValueError("give --model-path (a model directory or a .gguf file)")
    elif section is not None:
        raise ValueError("--section-name needs a --config-file")
    config = PipelineConfig(**{**kw, **more})
    if args.config_file is not None:
        config.config_file, config.section_name = str(args.config_file), section
    if not config.model.model_path:
        raise ValueError(f"give --model-path, or model_path in --config-file {args.config_file!r}")
    return config


def given_dests(parser: argparse.ArgumentParser, argv: Sequence[str] | None) -> set[str]:
    """The dests that `argv` sets explicitly, as opposed to the parsers' defaults: `argv` parsed
    again with every default (of `parser` and its subcommands' parsers) suppressed."""
    parsers = [parser]
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            parsers.extend(action.choices.values())
    saved = [(p, p._defaults, [(a, a.default) for a in p._actions]) for p in parsers]
    try:
        for p in parsers:
            p._defaults = {}
            for a in p._actions:
                a.default = argparse.SUPPRESS
        ns, _ = parser.parse_known_args(argv)
    finally:
        for p, defaults, actions in saved:
            p._defaults = defaults
            for a, default in actions:
                a.default = default
    return set(vars(ns))


def load_messages(value: str) -> list[dict[str, Any]]:
    """Chat messages from JSON text or a JSON file: a list of {"role", "content"} objects."""
    from max.pipelines.lib.tokenizer_factory import looks_like_path

    p = Path(value).expanduser()
    text = p.read_text() if len(value) < 4096 and p.is_file() else value
    if text is value and not value.lstrip().startswith(("[", "{")) and looks_like_path(value):
        raise ValueError(f"--messages: no such file {value!r} (and not JSON text)")
    try:
        messages = json.loads(text)
    except ValueError as e:
        raise ValueError(f"--messages: not valid JSON ({e})") from None
    if not isinstance(messages, list) or not all(isinstance(m, dict) and "role" in m and "content" in m for m in messages):
        raise ValueError('--messages: expected a JSON list of {"role": ..., "content": ...} objects')
    return [{**m, "content": _text_of(m["content"], i)} for i, m in enumerate(messages)]


def _text_of(content: Any, i: int) -> Any:
    """A message's content as text: a list of OpenAI-style text parts joined (as the server
    does); other content as it is."""
    if not isinstance(content, list):
        return content
    texts = []
    for part in content:
        if not (isinstance(part, dict) and part.get("type") == "text" and isinstance(part.get("text"), str)):
            raise ValueError(f"--messages: message {i}: content parts must be {{\"type\": \"text\", \"text\": ...}} "
                             f"(text only), got {str(part)[:80]}")
        texts.append(part["text"])
    return "".join(texts)
