"""A ``max serve`` process for the serve tests: started on a free port with the given flags,
ready once it prints "Server ready on http://HOST:PORT", stopped with SIGTERM; plus an OpenAI
client for it and its Prometheus metrics as a dict."""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import max as max_pkg



class ServerProcess:
    """`max serve --model-path MODEL --devices DEVICES --host 127.0.0.1 --port 0 FLAGS...`."""

    def __init__(self, model: Path | str, *flags: str, timeout: float = 300.0, devices: str = "cpu",
                 tuning: str | None = None) -> None:
        env = dict(os.environ)
        if tuning:  # MAX_TUNING entries for the server, after any the caller's environment sets
            env["MAX_TUNING"] = ",".join(x for x in (env.get("MAX_TUNING"), tuning) if x)
        # The server imports the same `max` as this process (a source tree's or an installed one).
        env["PYTHONPATH"] = os.pathsep.join([str(Path(max_pkg.__file__).resolve().parent.parent), env.get("PYTHONPATH", "")])
        self.stderr = tempfile.TemporaryFile()
        cmd = [sys.executable, "-m", "max", "serve", "--model-path", str(model), "--devices", devices,
               "--host", "127.0.0.1", "--port", "0", *flags]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=self.stderr, text=True, env=env)
        self.lines: list[str] = []
        ready = threading.Event()
        self.url = ""

        def read() -> None:
            for line in self.proc.stdout:  # type: ignore[union-attr]
                self.lines.append(line)
                m = re.match(r"Server ready on (http://\S+)", line)
                if m:
                    self.url = m.group(1)
                    ready.set()

        threading.Thread(target=read, daemon=True).start()
        deadline = time.time() + timeout
        while not ready.wait(0.2):
            if self.proc.poll() is not None or time.time() > deadline:
                self.stop()
                raise RuntimeError(f"max serve did not start: {self.errors()}")

    def errors(self) -> str:
        self.stderr.seek(0)
        return self.stderr.read().decode(errors="replace")[-4000:]

    def client(self, **kw):
        from openai import OpenAI

        return OpenAI(base_url=self.url + "/v1", api_key="none", max_retries=0, timeout=kw.pop("timeout", 120), **kw)

    def async_client(self, **kw):
        from openai import AsyncOpenAI

        return AsyncOpenAI(base_url=self.url + "/v1", api_key="none", max_retries=0,
                           timeout=kw.pop("timeout", 120), **kw)

    def greedy_texts(self, model: str, prompts: list[str], max_tokens: int, *, together: bool) -> list[str]:
        """The greedy completion of each prompt: sent one after another, or all at once (so the
        server may batch them)."""
        kw = dict(model=model, max_tokens=max_tokens, temperature=0)
        if not together:
            client = self.client()
            return [client.completions.create(prompt=p, **kw).choices[0].text for p in prompts]

        async def all_at_once():
            ac = self.async_client()
            rs = await asyncio.gather(*(ac.completions.create(prompt=p, **kw) for p in prompts))
            return [r.choices[0].text for r in rs]

        return asyncio.run(all_at_once())

    def get(self, path: str) -> tuple[int, str]:
        try:
            with urllib.request.urlopen(self.url + path, timeout=30) as r:
                return r.status, r.read().decode()
        except urllib.error.HTTPError as e:
            return e.code, e.read().decode()

    def post_raw(self, path: str, body: bytes) -> tuple[int, dict]:
        req = urllib.request.Request(self.url + path, data=body, headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=60) as r:
                return r.status, json.loads(r.read())
        except urllib.error.HTTPError as e:
            return e.code, json.loads(e.read())

    def metrics(self) -> dict[str, float]:
        """Every sample of ``/metrics``: ``name{labels}`` -> value."""
        status, text = self.get("/metrics")
        assert status == 200
        out = {}
        for line in text.splitlines():
            if line and not line.startswith("#"):
                name, value = line.rsplit(" ", 1)
                out[name] = float(value)
        return out

    def wait_for(self, cond, timeout: float = 20.0) -> dict[str, float]:
        """Polls the metrics until `cond(metrics)` holds; the last metrics."""
        deadline = time.time() + timeout
        while True:
            m = self.metrics()
            if cond(m) or time.time() > deadline:
                return m
            time.sleep(0.1)

    def stop(self) -> int | None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode


def smollm_server():
    """The body of a module fixture: a SmolLM2 server (512 positions, batches of 8, 16-token
    pages, served as "smollm"), stopped cleanly at the end."""
    from models import smollm2_gguf

    s = ServerProcess(smollm2_gguf(), "--max-length", "512", "--max-batch-size", "8", "--kv-cache-page-size", "16",
                      "--served-model-name", "smollm")
    yield s
    assert s.stop() == 0, s.errors()


def offline_generator(max_batch_size: int):
    """The same model run in this process (the reference for the server's answers)."""
    from max.driver import DeviceSpec
    from max.pipelines import PipelineConfig
    from max.pipelines.lib.generate import Generator
    from max.pipelines.lib.pipeline import load_pipeline
    from models import smollm2_gguf

    return Generator(load_pipeline(PipelineConfig(model_path=str(smollm2_gguf()), max_length=512,
                                                  max_batch_size=max_batch_size, device_specs=[DeviceSpec.cpu()])))
