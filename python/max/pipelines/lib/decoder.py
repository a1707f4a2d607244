"""Compiling and running a decoder LLM: its graph takes one step of a ragged batch (the new
tokens of every sequence, their row offsets and the paged KV cache inputs) and returns the
float32 logits of each sequence's last token. An architecture supplies the module tree
(``DecoderArchitecture.build``) and the weight names; this file does the rest: activation dtype,
device, KV-cache geometry, weights (memory-mapped, renamed, per-tensor GGUF encodings) and
the compiled model."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from max import driver, engine
from max.driver._upload import upload
from max.dtype import DType
from max.graph import DeviceRef, Graph, TensorType
from max.graph.quantization import QuantizationEncoding
from max.graph.weights import WeightData
from max.nn.comm import Signals
from max.nn.kv_cache import KVCacheParams, PagedCacheValues
from max.nn.transformer import Transformer
from max.pipelines.lib.config_checks import Weights, check_layers


@dataclass
class DecoderSpec:
    """What an architecture's builder gets: the Hugging Face config, the activation dtype, the
    device, the cache parameters, the (renamed) weights and how to read them."""

    config: dict[str, Any]
    dtype: DType
    device: DeviceRef
    kv_params: KVCacheParams
    weights: dict[str, WeightData]
    weights_format: str
    max_seq_len: int
    #: The devices of a tensor-parallel model (None: one device, `device`). Its whole weights
    #: then stay on `device` (the host) and each device receives its pieces at load.
    devices: list[DeviceRef] | None = None

    @property
    def tensor_parallel(self) -> bool:
        """Whether the model is split over several devices."""
        return bool(self.devices) and len(self.devices) > 1  # type: ignore[arg-type]

    def encoding(self, name: str) -> QuantizationEncoding | None:
        """The GGUF block encoding of weight `name` (None for plain floats)."""
        w = self.weights.get(name)
        return None if w is None else w.quantization_encoding

    def has(self, name: str) -> bool:
        return name in self.weights

    def get(self, key: str, default: Any = None) -> Any:
        value = self.config.get(key)
        return default if value is None else value


@dataclass
class DecoderArchitecture:
    """An architecture's parts: weight renaming per format (None drops a tensor), the module
    builder, and the KV geometry ``(kv_heads, head_dim, layers)`` of a config."""

    rename: Callable[[str, str], str | None]
    build: Callable[[DecoderSpec], Transformer]
    kv_geometry: Callable[[dict[str, Any]], tuple[int, int, int]]
    tied_names: tuple[str, str] = ("lm_head.weight", "embed_tokens.weight")


def choose_dtype(fmt: str, config: dict[str, Any], encoding: Any, device: driver.Device,
                 weights: dict[str, WeightData]) -> DType:
    """The activation dtype: an explicit float encoding (``--quantization-encoding bfloat16``
    runs a GGUF model's activations, KV cache and norms in bfloat16 on a GPU, its block products
    reading 16-bit activations and accumulating in float32); float32 for GGUF files and on the
    CPU; otherwise the checkpoint's own dtype."""
    from max.pipelines.lib.registry import SupportedEncoding

    if encoding is not None:
        enc = SupportedEncoding.parse(encoding)
        if enc in (SupportedEncoding.float8_e4m3fn, SupportedEncoding.float4_e2m1fnx2, SupportedEncoding.gptq):
            raise ValueError(f"--quantization-encoding {enc.value}: models with such weights are not supported yet "
                             "(float32, bfloat16, float16, or a GGUF file's block encoding)")
        if enc.quantization_encoding is None:
            return enc.dtype
        if fmt != "gguf":
            raise ValueError(f"--quantization-encoding {enc.value} needs a GGUF file; this model is {fmt}")
        used = {w.quantization_encoding for w in weights.values() if w.quantization_encoding is not None}
        if enc.quantization_encoding not in used:
            names = ", ".join(sorted(e.value for e in used)) or "none (float weights only)"
            raise ValueError(f"--quantization-encoding {enc.value}: the GGUF file's weights are not in it "
                             f"(their block encodings: {names}); a GGUF file is run as it is stored")
        return DType.float32
    if fmt == "gguf" or device.is_host:
        return DType.float32
    stored = config.get("torch_dtype") or config.get("dtype")
    for d in (DType.bfloat16, DType.float16, DType.float32):
        if stored == d.name:
            return d
    floats = [w.dtype for w in weights.values() if w.dtype.is_float()]
    return floats[0] if floats else DType.float32


def check_vocabulary(weights: dict[str, WeightData]) -> None:
    """The output projection, when the checkpoint has its own, covers the embedding's vocabulary."""
    emb, head = weights.get("embed_tokens.weight"), weights.get("lm_head.weight")
    if emb is None:
        raise ValueError("the checkpoint lacks the token embedding (embed_tokens.weight)")
    if not emb.shape or int(emb.shape[0]) < 1:
        raise ValueError(f"the token embedding has no rows (shape {list(emb.shape)})")
    if head is not None and (not head.shape or int(head.shape[0]) != int(emb.shape[0])):
        rows = int(head.shape[0]) if head.shape else 0
        raise ValueError(f"the output projection lm_head.weight has {rows} rows, the token embedding "
                         f"{int(emb.shape[0])} (its vocabulary)")


class DecoderModel:
    """A compiled decoder and its KV cache geometry."""

    def __init__(
        self,
        arch: DecoderArchitecture,
        source: Any,
        raw_weights: dict[str, WeightData],
        session: engine.InferenceSession,
        device: driver.Device | Sequence[driver.Device],
        *,
        encoding: Any,
        max_seq_len: int,
        page_size: int,
        cache_dtype: DType | None = None,
    ) -> None:
        self.arch = arch
        self.source = source
        self.config = source.config
        self.devices = list(device) if isinstance(device, (list, tuple)) else [device]
        self.device = self.devices[0]
        self.device_refs = device_refs(self.devices)
        self.device_ref = self.device_refs[0]
        tp = len(self.devices) > 1
        self.signals = Signals(self.device_refs) if tp else None
        self._signal_buffers = self.signals.buffers() if self.signals else []
        fmt = source.format
        weights = Weights()
        for name, data in raw_weights.items():
            new = arch.rename(fmt, name)
            if new is not None:
                weights[new] = data
        self.dtype = choose_dtype(fmt, self.config, encoding, self.device, weights)
        kv_heads, head_dim, layers = arch.kv_geometry(self.config)
        check_layers(weights, layers)
        check_vocabulary(weights)
        self.kv_params = KVCacheParams(
            dtype=cache_dtype or self.dtype,
            n_kv_heads=kv_heads,
            head_dim=head_dim,
            num_layers=layers,
            devices=list(self.device_refs),
            page_size=page_size,
        )
        self.max_seq_len = max_seq_len
        home = DeviceRef.CPU() if tp else self.device_ref
        spec = DecoderSpec(self.config, self.dtype, home, self.kv_params, weights, fmt, max_seq_len,
                           devices=list(self.device_refs) if tp else None)
        self.module = arch.build(spec)
        embedding = getattr(self.module, "embed_tokens", None)
        self.vocab_size = int(getattr(embedding, "vocab_size", 1 << 62))
        self._load_state(weights)
        self.graph = self._graph()
        self.model = session.load(self.graph, weights_registry=self.module.state_dict())

    def _load_state(self, weights: dict[str, WeightData]) -> None:
        expected = self.module.raw_state_dict()
        missing = [n for n in expected if n not in weights]
        if missing:
            shown = ", ".join(missing[:8]) + (" ..." if len(missing) > 8 else "")
            raise ValueError(f"{self.source.model_path}: the checkpoint lacks weights this architecture needs: {shown}")
        self.module.load_state_dict({n: weights[n] for n in expected}, strict=True)

    def _graph(self) -> Graph:
        """Inputs: tokens and row offsets, then each device's cache inputs, then the signal
        buffers of a tensor-parallel model. A tensor-parallel model takes the tokens and the
        offsets on every device and returns the logits on every device: each device samples
        its own copy of the next tokens (``ReplicatedSampler``), so no device waits for another
        one's sampler, or for a copy from it, to start a step."""
        refs = list(self.device_refs) if self.signals else [self.device_ref]
        n = len(refs)
        symbols = self.kv_params.get_symbolic_inputs()
        types = [
            *(TensorType(DType.int64, ["total_seq_len"], r) for r in refs),
            *(TensorType(DType.uint32, ["input_row_offsets_len"], r) for r in refs),
            *[t for per_device in symbols for t in per_device],
            *(self.signals.input_types() if self.signals else []),
        ]
        with Graph(type(self.module).__name__.lower(), input_types=types) as g:
            tokens = [v.tensor for v in g.inputs[:n]]
            offsets = [v.tensor for v in g.inputs[n : 2 * n]]
            rest = g.inputs[2 * n :]
            caches = [PagedCacheValues.from_values(rest[5 * i : 5 * i + 5]) for i in range(len(symbols))]
            if self.signals is None:
                (logits, *_rest) = self.module(tokens[0], caches[0], offsets[0])
                g.output(logits)
            else:
                signals = [v.buffer for v in rest[5 * len(symbols) :]]
                g.output(*self.module(tokens, signals, caches, input_row_offsets=offsets, every_device=True))
        return g

    def execute(self, tokens: np.ndarray | driver.Buffer | Sequence[driver.Buffer], offsets: np.ndarray,
                cache_inputs: Sequence[driver.Buffer]) -> driver.Buffer:
        """The logits ``[batch, vocab]`` (on the model's first device) of one step."""
        return self.execute_all(tokens, offsets, cache_inputs)[0]

    def execute_all(self, tokens: np.ndarray | driver.Buffer | Sequence[driver.Buffer],
                    offsets: np.ndarray | Sequence[driver.Buffer],
                    cache_inputs: Sequence[driver.Buffer], reuse_results: bool = False) -> list[driver.Buffer]:
        """The logits of one step on each device of the model (one buffer on one device).
        Token ids from the host are checked here: a captured decode graph's embedding lookup
        cannot report a bad one. Ids already on the devices are the sampler's (a multi-step
        decode; one buffer per device, or one on the first device, copied to the others) and in
        range by construction; their row offsets may be on the devices too (one buffer per
        device: a multi-step decode moves every step's inputs there in one copy). With
        `reuse_results`, the logits may be buffers the model's next step overwrites
        (``Model._execute_reusing``): for a caller that queues their sampling first."""
        devices = self.devices if self.signals else [self.device]
        if isinstance(tokens, np.ndarray):
            if not isinstance(offsets, np.ndarray):
                raise TypeError("row offsets of host token ids must be a host array")
            if tokens.size and (int(tokens.min()) < 0 or int(tokens.max()) >= self.vocab_size):
                bad = int(tokens[(tokens < 0) | (tokens >= self.vocab_size)][0])
                raise ValueError(f"token id {bad} is outside the model's vocabulary of {self.vocab_size}")
            pairs = [upload([tokens, offsets], d) for d in devices]
            ids, offs = [p[0] for p in pairs], [p[1] for p in pairs]
        else:
            ids = list(tokens) if isinstance(tokens, (list, tuple)) else [tokens]
            ids += [ids[0].to(d) for d in devices[len(ids):]]
            if isinstance(offsets, np.ndarray):
                offs = [upload([offsets], d)[0] for d in devices]
            elif len(offsets) == len(devices):
                offs = list(offsets)
            else:
                raise ValueError(f"{len(offsets)} copies of the row offsets for {len(devices)} devices")
        run = self.model._execute_reusing if reuse_results else self.model.execute
        return list(run(*ids, *offs, *cache_inputs, *self._signal_buffers))


def device_refs(devices: Sequence[driver.Device]) -> list[DeviceRef]:
    """Graph devices for a model's devices: several host devices stand for as many simulated
    devices (``cpu:0``, ``cpu:1``, ...; how tensor parallelism is tested without GPUs)."""
    if len(devices) > 1 and all(d.is_host for d in devices):
        return [DeviceRef.CPU(i) for i in range(len(devices))]
    refs = [DeviceRef.from_device(d) for d in devices]
    for i, r in enumerate(refs):
        if r in refs[:i]:
            raise ValueError(f"device {r} is listed twice")
    return refs


__all__ = ["DecoderArchitecture", "DecoderModel", "DecoderSpec", "choose_dtype", "device_refs"]
