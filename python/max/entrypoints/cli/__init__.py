"""The ``max`` command: ``generate`` (stream a model's continuation of a prompt), ``encode``
(embeddings as JSON lines), ``serve`` (an OpenAI-compatible server, see ``serve.py``),
``benchmark`` (load-test a server, see ``benchmark.py``), ``list`` (the supported architectures)
and ``warm-cache`` (load a model once, compiling and caching its GPU kernels). ``python -m max``
is the same command."""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Sequence
from typing import Any

from max.entrypoints.cli.benchmark import add_benchmark_parser, run_benchmark
from max.entrypoints.cli.config_flags import add_config_flags
from max.entrypoints.cli.options import add_model_flags, given_dests, load_messages, pipeline_config
from max.entrypoints.cli.serve import add_serve_parser, run_serve


def _version() -> str:
    try:
        from importlib.metadata import version

        return version("max-engine")
    except Exception:  # noqa: BLE001 - metadata missing in a source checkout
        return "0.1.0"


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="max", description="Run models with the MAX-compatible engine.")
    p.add_argument("--version", action="version", version=f"max {_version()}")
    p.add_argument("--log-level", default="warning", help=argparse.SUPPRESS)
    sub = p.add_subparsers(dest="command", metavar="{benchmark,encode,generate,list,serve,warm-cache}")

    g = sub.add_parser("generate", help="generate text from a prompt (streamed to stdout)",
                       description="Generate text with a local model; prints the continuation as it is produced "
                                   "and a one-line summary (load time, time to first token, tokens/s) on stderr.")
    add_model_flags(g)
    s = g.add_argument_group("prompt and sampling")
    s.add_argument("--prompt", action="append", default=[], help="the prompt (repeat for several prompts)")
    s.add_argument("--chat", action="store_true", help="wrap --prompt as a user message in the chat template")
    s.add_argument("--messages", default=None, help="chat messages as JSON (text or a file)")
    s.add_argument("--system", default=None, help="a system message for --chat")
    s.add_argument("--max-new-tokens", type=int, default=None, help="most tokens to generate")
    s.add_argument("--min-new-tokens", type=int, default=0)
    s.add_argument("--top-k", type=int, default=255, help="sample among the K most likely tokens (1 = greedy)")
    s.add_argument("--top-p", type=float, default=1.0)
    s.add_argument("--min-p", type=float, default=0.0)
    s.add_argument("--temperature", type=float, default=1.0)
    s.add_argument("--seed", type=int, default=None)
    s.add_argument("--frequency-penalty", type=float, default=0.0)
    s.add_argument("--presence-penalty", type=float, default=0.0)
    s.add_argument("--repetition-penalty", type=float, default=1.0)
    s.add_argument("--stop", action="append", default=None, help="a stop string (repeatable)")
    s.add_argument("--stop-token-ids", default=None, help="comma-separated token ids that end generation")
    s.add_argument("--ignore-eos", action="store_true")
    s.add_argument("--num-warmups", type=int, default=0, help="runs before the timed one")
    s.add_argument("--detokenize", action=argparse.BooleanOptionalAction, default=True,
                   help="print text (default) or token ids")
    add_config_flags(g)

    e = sub.add_parser("encode", help="print embeddings, one JSON list per prompt",
                       description="Embed prompts with a local encoder model (e.g. all-MiniLM-L6-v2).")
    add_model_flags(e)
    e.add_argument("--prompt", action="append", default=[], help="text to embed (repeatable)")
    e.add_argument("--num-warmups", type=int, default=0)
    e.add_argument("--pool-embeddings", action=argparse.BooleanOptionalAction, default=True)
    add_config_flags(e)

    lst = sub.add_parser("list", help="list the supported architectures")
    lst.add_argument("--json", action="store_true", help="as JSON")

    w = sub.add_parser("warm-cache", help="load a model once so its kernels are compiled and cached")
    add_model_flags(w)
    add_config_flags(w)
    add_serve_parser(sub)
    add_benchmark_parser(sub)
    return p


def _sampling(args: argparse.Namespace) -> Any:
    from max.interfaces import SamplingParams

    stop_ids = None
    if args.stop_token_ids:
        try:
            stop_ids = [int(x) for x in args.stop_token_ids.split(",") if x.strip()]
        except ValueError:
            raise ValueError(f"--stop-token-ids: expected comma-separated integers, got {args.stop_token_ids!r}") from None
    return SamplingParams(
        top_k=args.top_k, top_p=args.top_p, min_p=args.min_p, temperature=args.temperature,
        frequency_penalty=args.frequency_penalty, presence_penalty=args.presence_penalty,
        repetition_penalty=args.repetition_penalty, max_new_tokens=args.max_new_tokens,
        min_new_tokens=args.min_new_tokens, ignore_eos=args.ignore_eos, stop=args.stop, stop_token_ids=stop_ids,
        seed=args.seed, detokenize=args.detokenize,
    )


def _generate(args: argparse.Namespace) -> int:
    from max.pipelines.lib.generate import Generator
    from max.pipelines.lib.pipeline import load_pipeline

    sampling = _sampling(args)
    if not args.prompt and not args.messages:
        raise ValueError("give a --prompt (or --messages)")
    if args.system is not None and not args.chat:
        raise ValueError("--system applies to --chat prompts: add --chat (or put the system message in --messages)")
    _check_warmups(args)
    if args.max_new_tokens is not None and args.max_new_tokens < 0:
        raise ValueError(f"--max-new-tokens must be >= 0, got {args.max_new_tokens}")
    config = pipeline_config(args)
    t0 = time.perf_counter()
    pipeline = load_pipeline(config)
    load = time.perf_counter() - t0
    gen = Generator(pipeline)
    tok = pipeline.tokenizer
    if args.messages or args.chat:
        conversations = []
        if args.messages:
            conversations.append(load_messages(args.messages))
        for prompt in args.prompt:
            msgs = ([{"role": "system", "content": args.system}] if args.system else []) + [{"role": "user", "content": prompt}]
            conversations.append(msgs)
        texts = [tok.apply_chat_template(m) for m in conversations]
        add_special = False
    else:
        texts, add_special = list(args.prompt), True
    for _ in range(max(0, args.num_warmups)):
        gen.run([gen.context(t, sampling, add_special_tokens=add_special) for t in texts])
    ctxs = [gen.context(t, sampling, add_special_tokens=add_special) for t in texts]
    single = len(ctxs) == 1
    out = sys.stdout

    def on_text(ctx: Any, delta: str) -> None:
        if single and args.detokenize:
            out.write(delta)
            out.flush()

    if single and args.detokenize:
        out.write(texts[0] if not (args.messages or args.chat) else "")
        out.flush()
    results = gen.run(ctxs, on_text=on_text)
    for text, r in zip(texts, results):
        if not args.detokenize:
            out.write(" ".join(str(t) for t in r.tokens) + "\n")
        elif single:
            out.write("\n")
        else:
            out.write(json.dumps({"prompt": text, "completion": r.text, "finish_reason": r.finish_reason}) + "\n")
    out.flush()
    st = gen.stats
    ttft = f"{st.first_token_seconds * 1000:.1f} ms" if st.first_token_seconds is not None else "-"
    print(
        f"[max] {pipeline.source.architecture} on {_placement(pipeline)}: load {load:.2f} s | time to first token {ttft} | "
        f"prefill {st.prefill_tokens_per_second:.1f} tok/s ({st.prompt_tokens} tokens) | "
        f"decode {st.decode_tokens_per_second:.1f} tok/s ({st.decode_tokens} tokens)",
        file=sys.stderr,
    )
    return 0


def _check_warmups(args: argparse.Namespace) -> None:
    if args.num_warmups < 0:
        raise ValueError(f"--num-warmups must be >= 0, got {args.num_warmups}")


def _placement(pipeline: Any) -> str:
    """Where a text-generation pipeline runs: its device, its tensor-parallel devices, or its
    data-parallel replicas and theirs."""
    replicas = getattr(pipeline, "replicas", None)
    if replicas:
        return f"{len(replicas)} replicas ({'; '.join(_placement(r) for r in replicas)})"
    refs = getattr(pipeline.model, "device_refs", [])
    return ",".join(str(r) for r in refs) if len(refs) > 1 else pipeline.device.label


def _encode(args: argparse.Namespace) -> int:
    import numpy as np

    from max.interfaces import PipelineTask
    from max.pipelines.lib.pipeline import load_pipeline

    if not args.prompt:
        raise ValueError("give at least one --prompt to embed")
    _check_warmups(args)
    config = pipeline_config(args, pool_embeddings=args.pool_embeddings)
    t0 = time.perf_counter()
    pipeline = load_pipeline(config, task=PipelineTask.EMBEDDINGS_GENERATION)
    load = time.perf_counter() - t0
    for _ in range(max(0, args.num_warmups)):
        pipeline.encode(args.prompt)
    t1 = time.perf_counter()
    vectors = pipeline.encode(args.prompt)
    took = time.perf_counter() - t1
    for i, v in enumerate(vectors):
        if not np.isfinite(v).all():
            raise ValueError(f"prompt {i}'s embedding has non-finite values (NaN or infinity), which JSON cannot "
                             "hold: the model's weights or activations overflow")
        sys.stdout.write(json.dumps([float(x) for x in v.reshape(-1)]) + "\n")
    sys.stdout.flush()
    print(f"[max] {pipeline.source.architecture} on {pipeline.device.label}: load {load:.2f} s | "
          f"{len(args.prompt)} prompts embedded in {took * 1000:.1f} ms", file=sys.stderr)
    return 0


def _list(args: argparse.Namespace) -> int:
    from max.pipelines import PIPELINE_REGISTRY

    archs = [PIPELINE_REGISTRY.architectures[n] for n in PIPELINE_REGISTRY.names()]
    if args.json:
        print(json.dumps({"architectures": [
            {"name": a.name, "task": a.task.value, "example_repo_ids": a.example_repo_ids,
             "gguf_architectures": a.gguf_names, "encodings": [e.value for e in a.supported_encodings]}
            for a in archs]}, indent=2))
    else:
        for a in archs:
            gguf = f"  (GGUF: {', '.join(a.gguf_names)})" if a.gguf_names else ""
            print(f"{a.name:24s} {a.task.value:22s} e.g. {', '.join(a.example_repo_ids[:2])}{gguf}")
    return 0


def _warm_cache(args: argparse.Namespace) -> int:
    from max.pipelines.lib.model_source import resolve
    from max.pipelines.lib.pipeline import load_pipeline
    from max.pipelines import PIPELINE_REGISTRY

    config = pipeline_config(args)
    source = resolve(config.model.model_path, config.model.weight_path)
    task = PIPELINE_REGISTRY.architecture_for(source).task
    t0 = time.perf_counter()
    pipeline = load_pipeline(config, task=task)
    warm = getattr(pipeline, "warm_up", None)
    if warm is not None:
        warm()
    print(f"[max] {source.architecture} ready on {pipeline.device.label} in {time.perf_counter() - t0:.2f} s", file=sys.stderr)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 0
    if getattr(args, "config_file", None) is not None:
        args._given = given_dests(parser, argv)
    handlers = {"generate": _generate, "encode": _encode, "list": _list, "warm-cache": _warm_cache,
                "serve": run_serve, "benchmark": run_benchmark}
    try:
        return handlers[args.command](args)
    except KeyboardInterrupt:
        print("\n[max] interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # the reader of stdout left (`max generate ... | head`): stop quietly, and keep Python's
        # own flush at exit from failing on the closed pipe too
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141
    except (ValueError, FileNotFoundError, IsADirectoryError, PermissionError, NotImplementedError, TypeError,
            RuntimeError, MemoryError, KeyError) as e:
        name = type(e).__name__
        msg = e.args[0] if isinstance(e, KeyError) and e.args else str(e)
        print(f"max {args.command}: error: {msg} ({name})", file=sys.stderr)
        return 2


__all__ = ["main"]
