"""``EmbeddingsPipeline``: an encoder model (sentence-transformers BERT) turning prompts into
vectors. Prompts are tokenized (truncated to the model's ``max_seq_length``, or to the config's
``max_length`` when it is set), grouped into
batches padded to their longest prompt (the padding masked out of attention and pooling), and
the pooled, normalised vectors come back as float32 numpy rows."""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from max import driver
from max.dtype import DType
from max.graph import DeviceRef, Graph, TensorType
from max.interfaces import EmbeddingsGenerationOutput, TextGenerationInputs
from max.pipelines.lib.config_checks import check_layers, inside, read_json, whole
from max.pipelines.lib.pipeline import pick_device, session_for
from max.pipelines.lib.weights import read_weights


def sentence_transformers_settings(directory: Path | None) -> dict[str, Any]:
    """Pooling mode, normalisation and max_seq_length from a sentence-transformers directory
    (its files checked: a wrong one is a ValueError naming it)."""
    out: dict[str, Any] = {"pooling": "mean", "normalize": False, "max_seq_length": None}
    if directory is None:
        return out
    modules = directory / "modules.json"
    if modules.is_file():
        mods = read_json(modules, list)
        if not all(isinstance(m, dict) and isinstance(m.get("path", ""), str) for m in mods):
            raise ValueError(f"{modules} must list objects with a string path")
        out["normalize"] = any(str(m.get("type", "")).endswith("Normalize") for m in mods)
        for m in mods:
            if str(m.get("type", "")).endswith("Pooling"):
                if m.get("path", "1_Pooling") and not inside(m.get("path", "1_Pooling")):
                    raise ValueError(f"{modules} names a pooling module outside the model directory")
                cfg = directory / m.get("path", "1_Pooling") / "config.json"
                if cfg.is_file():
                    p = read_json(cfg)
                    if p.get("pooling_mode_cls_token"):
                        out["pooling"] = "cls"
                    elif p.get("pooling_mode_max_tokens"):
                        out["pooling"] = "max"
    st = directory / "sentence_bert_config.json"
    if st.is_file():
        length = read_json(st).get("max_seq_length")
        out["max_seq_length"] = None if length is None else whole(length, f"{st.name}'s max_seq_length")
    return out


def check_encoder(config: dict[str, Any], weights: dict[str, Any]) -> None:
    """A BERT config that the weights agree with: heads dividing the width, and exactly the
    layers the checkpoint holds (checked before any module is built)."""
    hidden, heads = config["hidden_size"], config["num_attention_heads"]
    if hidden % heads:
        raise ValueError(f"the model's hidden_size {hidden} is not a multiple of its {heads} attention heads")
    check_layers(weights, config["num_hidden_layers"], r"encoder\.layer\.(\d+)\.")


class EmbeddingsPipeline:
    """Prompts in, one embedding each out."""

    def __init__(self, pipeline_config: Any, source: Any, arch: Any, tokenizer: Any) -> None:
        t0 = time.perf_counter()
        self.pipeline_config, self.source, self.architecture, self.tokenizer = pipeline_config, source, arch, tokenizer
        mc = pipeline_config.model
        self.device = pick_device(mc.device_specs)
        self.session = session_for(self.device)
        ref = DeviceRef.from_device(self.device)
        settings = sentence_transformers_settings(source.directory)
        if not pipeline_config.pool_embeddings:
            raise NotImplementedError("per-token embeddings (--no-pool-embeddings) are not supported")
        enc = mc.quantization_encoding
        from max.pipelines.lib.registry import SupportedEncoding

        parsed = SupportedEncoding.parse(enc) if enc is not None else SupportedEncoding.float32
        floats = (SupportedEncoding.float32, SupportedEncoding.bfloat16, SupportedEncoding.float16)
        if parsed not in floats and source.format != "gguf":  # (a GGUF file is refused below)
            raise ValueError(f"--quantization-encoding {parsed.value}: an encoder model runs in float32, bfloat16 or "
                             "float16")
        self.dtype = parsed.dtype
        config = source.config
        limit = int(config.get("max_position_embeddings", 512))
        self.max_seq_length = min(limit, int(settings["max_seq_length"] or limit))
        if pipeline_config.max_length is not None:  # prompts are truncated to it, as to max_seq_length
            if pipeline_config.max_length > limit:
                raise ValueError(f"max_length {pipeline_config.max_length} exceeds the model's {limit} positions")
            self.max_seq_length = int(pipeline_config.max_length)
        self.max_batch_size = int(pipeline_config.max_batch_size or 32)
        if source.format == "gguf":
            raise NotImplementedError(f"{source.model_path}: encoder models (BERT) load from a safetensors directory, "
                                      "not GGUF")
        raw = read_weights(source.weight_files)
        weights = {}
        for name, data in raw.items():
            new = arch.pipeline_model.rename(source.format, name)
            if new is not None:
                weights[new] = data
        check_encoder(config, weights)
        self.vocab_size = int(config["vocab_size"])
        self.hidden_size = int(config["hidden_size"])
        self.module = arch.pipeline_model.build(config, self.dtype, ref, pooling=settings["pooling"],
                                                normalize=settings["normalize"])
        expected = self.module.raw_state_dict()
        missing = [n for n in expected if n not in weights]
        if missing:
            raise ValueError(f"{source.model_path}: the checkpoint lacks {', '.join(missing[:8])}")
        self.module.load_state_dict({n: weights[n] for n in expected})
        types = [TensorType(DType.int64, ["batch", "seq"], ref), TensorType(DType.int64, ["batch", "seq"], ref)]
        with Graph("bert", input_types=types) as g:
            ids, mask = g.inputs
            g.output(self.module(ids.tensor, mask.tensor))
        self.model = self.session.load(g, weights_registry=self.module.state_dict())
        self.load_seconds = time.perf_counter() - t0

    def tokenize(self, prompt: str | Sequence[int]) -> np.ndarray:
        if isinstance(prompt, str):
            ids = self.tokenizer.delegate.encode(prompt, add_special_tokens=True).ids
        else:
            ids = [int(i) for i in prompt]
        if not ids:
            raise ValueError("cannot embed an empty prompt")
        if len(ids) > self.max_seq_length:
            # sentence-transformers truncates to max_seq_length, keeping the final [SEP].
            ids = ids[: self.max_seq_length - 1] + ids[-1:]
        return np.asarray(ids, np.int64)

    def _run(self, batch: list[np.ndarray]) -> np.ndarray:
        width = max(len(x) for x in batch)
        ids = np.zeros((len(batch), width), np.int64)
        mask = np.zeros((len(batch), width), np.int64)
        for i, x in enumerate(batch):
            ids[i, : len(x)] = x
            mask[i, : len(x)] = 1
        bufs = [driver.Buffer.from_numpy(a) for a in (ids, mask)]
        if not self.device.is_host:
            bufs = [b.to(self.device) for b in bufs]
        out = self.model.execute(*bufs)[0]
        return (out if self.device.is_host else out.to(driver.CPU())).to_numpy()

    def encode(self, prompts: Sequence[str | Sequence[int]]) -> np.ndarray:
        """``[len(prompts), hidden]`` float32; prompts of similar length share a batch."""
        tokens = [self.tokenize(p) for p in prompts]
        order = sorted(range(len(tokens)), key=lambda i: len(tokens[i]))
        out = np.zeros((len(tokens), self.hidden_size), np.float32)
        rows: dict[int, np.ndarray] = {}
        for start in range(0, len(order), self.max_batch_size):
            chunk = order[start : start + self.max_batch_size]
            vecs = self._run([tokens[i] for i in chunk])
            for i, v in zip(chunk, vecs):
                rows[i] = v
        if rows:
            out = np.stack([rows[i] for i in range(len(tokens))]).astype(np.float32)
        return out

    def execute(self, inputs: TextGenerationInputs) -> dict[str, EmbeddingsGenerationOutput]:
        """MAX's pipeline interface: request id -> context with ``tokens``."""
        batch = inputs.batch
        vecs = self.encode([ctx.tokens for ctx in batch.values()])
        return {rid: EmbeddingsGenerationOutput(v) for rid, v in zip(batch, vecs)}


__all__ = ["EmbeddingsPipeline", "sentence_transformers_settings"]
