"""``max serve``: its flags (MAX's names; prefix caching on by default, as in MAX) and the
handler that starts the server."""

from __future__ import annotations

import argparse
from typing import Any

from max.entrypoints.cli.config_flags import add_config_flags
from max.entrypoints.cli.options import add_model_flags, pipeline_config


def add_serve_parser(sub: Any) -> None:
    s = sub.add_parser("serve", help="serve a model over an OpenAI-compatible HTTP API",
                       description="Serve a model with an OpenAI-compatible API (/v1/completions, /v1/chat/completions, "
                                   "/v1/embeddings, /v1/models, /health, /metrics) and continuous batching. Prints "
                                   "'Server ready on http://HOST:PORT' when it accepts requests.")
    add_model_flags(s)
    s.set_defaults(enable_prefix_caching=True)
    g = s.add_argument_group("server")
    g.add_argument("--host", default="0.0.0.0", help="address to listen on (default 0.0.0.0)")
    g.add_argument("--port", type=int, default=8000, help="port to listen on (default 8000; 0 picks a free one)")
    g.add_argument("--served-model-name", default=None, help="the model name clients use (default: --model-path)")
    g.add_argument("--max-queue-size", type=int, default=None,
                   help="requests that may wait beyond the running batch before new ones get 429 "
                        "(default 4 x --max-batch-size)")
    g.add_argument("--shutdown-timeout", type=int, default=30,
                   help="seconds in-flight requests may take to finish after SIGINT/SIGTERM")
    add_config_flags(s)


def run_serve(args: argparse.Namespace) -> int:
    try:
        from max.serve import ServeSettings, run
    except ImportError as e:
        raise RuntimeError(f"max serve needs the serving packages ({e.name} is missing): "
                           "pip install 'max-engine[serve]'") from None

    if not 0 <= args.port < 65536:
        raise ValueError(f"--port must be in [0, 65535], got {args.port}")
    config = pipeline_config(args, served_model_name=args.served_model_name)
    settings = ServeSettings(host=args.host, port=args.port, served_model_name=config.model.served_model_name,
                             max_queue_size=args.max_queue_size, shutdown_timeout=args.shutdown_timeout,
                             log_level=args.log_level)
    return run(config, settings)


__all__ = ["add_serve_parser", "run_serve"]
