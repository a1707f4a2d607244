"""Random-weight Llama checkpoints of real shapes for llm_gpu.py, written fast and in bounded memory.

Speed does not depend on the weights' values, so every tensor is a window of a small random pool
(8 MiB) written over and over, straight to the file: a 16 GB Llama-3-8B checkpoint never sits in
memory and costs only the disk's write time.

- `write_safetensors_model(directory, shape)`: a Hugging Face directory: config.json, a bf16
  model.safetensors written by a streaming writer (the format is an 8-byte little-endian header
  length, a JSON header, then the raw tensors back to back), and a word-level tokenizer.json whose
  vocabulary "<unk> w1 w2 ..." has the model's size, so that a prompt of N words is N tokens and
  every generated token prints as text (what `max generate` needs for time to first token).
- `write_gguf_model(path, shape, types)`: a llama GGUF through the gguf package's GGUFWriter
  (metadata and tensor infos), the tensor data appended after it: norms F32, the linear weights,
  token embedding and output in the given GGML block types (random blocks whose f16 scales are
  finite), and a SentencePiece-style ("llama") vocabulary of the model's size in which the
  same prompt words are one token each.
- `streamed_bytes(files)`: the bytes a decode step reads: every weight once, except that an
  untied token embedding is read one row per token, not whole.
"""

from __future__ import annotations

import json
import math
import struct
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

import numpy as np

# Hugging Face config values of the shapes measured. Only the sizes are real.
SHAPES = {
    "smollm2-135m": dict(hidden_size=576, num_hidden_layers=30, num_attention_heads=9, num_key_value_heads=3,
                         intermediate_size=1536, vocab_size=49152, tie_word_embeddings=True, rope_theta=100000.0),
    "llama-3.2-1b": dict(hidden_size=2048, num_hidden_layers=16, num_attention_heads=32, num_key_value_heads=8,
                         intermediate_size=8192, vocab_size=128256, tie_word_embeddings=True, rope_theta=500000.0),
    "llama-3-8b": dict(hidden_size=4096, num_hidden_layers=32, num_attention_heads=32, num_key_value_heads=8,
                       intermediate_size=14336, vocab_size=128256, tie_word_embeddings=False, rope_theta=500000.0),
}
# The smallest shape that keeps every block type whole (Q6_K rows are 256 elements): for running
# the whole benchmark on a CPU.
TINY = dict(hidden_size=256, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
            intermediate_size=512, vocab_size=1024)
MAX_POSITIONS = 8192

POOL_BYTES = 8 << 20
BF16_ONE = 0x3F80
# GGML block types: (elements per block, bytes per block, offsets of the f16 scale fields, the
# scale's standard deviation: small enough that the random model's activations stay finite).
BLOCKS = {
    "Q4_0": (32, 18, (0,), 0.02),
    "Q4_1": (32, 20, (0, 2), 0.02),
    "Q8_0": (32, 34, (0,), 0.002),
    "Q4_K": (256, 144, (0, 2), 2e-4),
    "Q6_K": (256, 210, (208,), 1e-4),
}


def tiny(shape: dict) -> dict:
    """`shape` shrunk to TINY's sizes, keeping its tied/untied output and rope base."""
    return {**shape, **TINY}


# ----------------------------------------------------------------------------------------------
# Tensors
# ----------------------------------------------------------------------------------------------


def llama_tensors(shape: dict) -> Iterator[tuple[str, str, tuple[int, ...], str]]:
    """(Hugging Face name, GGUF name, [out, in] or [n], role) of every tensor, in file order.
    role: "norm", "linear", "embed" or "output"."""
    h, ffn, v = shape["hidden_size"], shape["intermediate_size"], shape["vocab_size"]
    kv = shape["num_key_value_heads"] * (h // shape["num_attention_heads"])
    yield "model.embed_tokens.weight", "token_embd.weight", (v, h), "embed"
    for i in range(shape["num_hidden_layers"]):
        p, g = f"model.layers.{i}.", f"blk.{i}."
        yield p + "input_layernorm.weight", g + "attn_norm.weight", (h,), "norm"
        for hf, gg, dims in (("self_attn.q_proj", "attn_q", (h, h)), ("self_attn.k_proj", "attn_k", (kv, h)),
                             ("self_attn.v_proj", "attn_v", (kv, h)), ("self_attn.o_proj", "attn_output", (h, h))):
            yield p + hf + ".weight", g + gg + ".weight", dims, "linear"
        yield p + "post_attention_layernorm.weight", g + "ffn_norm.weight", (h,), "norm"
        for hf, gg, dims in (("mlp.gate_proj", "ffn_gate", (ffn, h)), ("mlp.up_proj", "ffn_up", (ffn, h)),
                             ("mlp.down_proj", "ffn_down", (h, ffn))):
            yield p + hf + ".weight", g + gg + ".weight", dims, "linear"
    yield "model.norm.weight", "output_norm.weight", (h,), "norm"
    if not shape["tie_word_embeddings"]:
        yield "lm_head.weight", "output.weight", (v, h), "output"


def _bf16_pool(rng: np.random.Generator) -> np.ndarray:
    """POOL_BYTES of bfloat16 N(0, 0.02^2) values (float32 bits truncated), as uint16."""
    x = (rng.standard_normal(POOL_BYTES // 2, dtype=np.float32) * 0.02).view(np.uint32)
    return (x >> 16).astype(np.uint16)


def _block_pool(rng: np.random.Generator, qtype: str) -> np.ndarray:
    """About POOL_BYTES of random `qtype` blocks (uint8 [blocks, block bytes]) with finite f16 scales."""
    _, size, scales, std = BLOCKS[qtype]
    blocks = POOL_BYTES // size
    raw = rng.integers(0, 256, size=(blocks, size), dtype=np.uint8)
    for off in scales:
        raw[:, off : off + 2] = (rng.standard_normal(blocks) * std).astype(np.float16).view(np.uint8).reshape(blocks, 2)
    return raw


def _write_cycled(f: BinaryIO, pool: np.ndarray, nbytes: int, rng: np.random.Generator) -> None:
    """`nbytes` of `pool`'s bytes, cyclically from a random whole element (row) of it."""
    rows = pool.shape[0]
    unit = pool.nbytes // rows
    data = memoryview(pool.reshape(-1).view(np.uint8))
    pos = int(rng.integers(0, rows)) * unit
    while nbytes:
        n = min(nbytes, len(data) - pos)
        f.write(data[pos : pos + n])
        nbytes -= n
        pos = 0


def _pad(f: BinaryIO, alignment: int) -> None:
    f.write(b"\0" * (-f.tell() % alignment))


# ----------------------------------------------------------------------------------------------
# safetensors
# ----------------------------------------------------------------------------------------------


def write_safetensors(path: Path, tensors: list[tuple[str, tuple[int, ...], str]], seed: int = 0) -> int:
    """A bf16 safetensors file of `tensors` [(name, shape, "ones" | "random")]; returns its size."""
    rng = np.random.default_rng(seed)
    header: dict = {"__metadata__": {"format": "pt"}}
    offset = 0
    for name, dims, _ in tensors:
        n = 2 * math.prod(dims)
        header[name] = {"dtype": "BF16", "shape": list(dims), "data_offsets": [offset, offset + n]}
        offset += n
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)  # the data starts 8-byte aligned
    pool = _bf16_pool(rng)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for _, dims, fill in tensors:
            if fill == "ones":
                f.write(np.full(math.prod(dims), BF16_ONE, np.uint16).tobytes())
            else:
                _write_cycled(f, pool, 2 * math.prod(dims), rng)
    return 8 + len(text) + offset


def hf_config(shape: dict) -> dict:
    return {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "rms_norm_eps": 1e-5,
            "max_position_embeddings": MAX_POSITIONS, "torch_dtype": "bfloat16", "hidden_act": "silu",
            "bos_token_id": None, "eos_token_id": None, **shape}


def word_tokenizer(vocab_size: int):
    """A word-level tokenizer: "<unk>" then "w1" ... "w{vocab_size - 1}", split on whitespace."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    vocab = {"<unk>": 0, **{f"w{i}": i for i in range(1, vocab_size)}}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.decoder = decoders.WordPiece(prefix="##", cleanup=False)  # joins words with spaces
    return tok


def prompt_text(tokens: int) -> str:
    """A prompt of exactly `tokens` tokens for word_tokenizer's vocabulary (any size above 100)."""
    return " ".join(f"w{1 + i % 97}" for i in range(tokens))


def write_safetensors_model(directory: Path, shape: dict, seed: int = 0) -> Path:
    """A Hugging Face Llama directory of random bf16 weights (see the module docstring)."""
    directory.mkdir(parents=True, exist_ok=True)
    tensors = [(hf, dims, "ones" if role == "norm" else "random") for hf, _, dims, role in llama_tensors(shape)]
    write_safetensors(directory / "model.safetensors", tensors, seed)
    (directory / "config.json").write_text(json.dumps(hf_config(shape), indent=1))
    word_tokenizer(shape["vocab_size"]).save(str(directory / "tokenizer.json"))
    return directory


def safetensors_bytes(shape: dict) -> int:
    return sum(2 * math.prod(dims) for _, _, dims, _ in llama_tensors(shape))


# ----------------------------------------------------------------------------------------------
# GGUF
# ----------------------------------------------------------------------------------------------


def _tensor_type(role: str, types: dict[str, str]) -> str:
    """The GGML type of a tensor: F32 norms; the output falls back to the embedding's type."""
    if role == "norm":
        return "F32"
    if role == "output":
        return types.get("output", types["embed"])
    return types[role]


def gguf_tensor_bytes(dims: tuple[int, ...], qtype: str) -> int:
    if qtype == "F32":
        return 4 * math.prod(dims)
    epb, size, _, _ = BLOCKS[qtype]
    rows, k = dims
    if k % epb:
        raise ValueError(f"{qtype} needs rows of whole {epb}-element blocks, got {k}")
    return rows * (k // epb) * size


def gguf_bytes(shape: dict, types: dict[str, str]) -> int:
    return sum(gguf_tensor_bytes(dims, _tensor_type(role, types)) for _, _, dims, role in llama_tensors(shape))


def _add_vocabulary(writer, vocab_size: int) -> None:
    """tokenizer.ggml.*: a SentencePiece-style vocabulary of `vocab_size` pieces: <unk> <s> </s>,
    the byte pieces, the pieces that "▁wN" merges from, then "▁w0", "▁w1", ... (so that
    prompt_text's words are one token each)."""
    import gguf

    specials = ["<unk>", "<s>", "</s>"]
    byte_pieces = [f"<0x{b:02X}>" for b in range(256)]
    parts = ["\u2581", "w", *"0123456789", "\u2581w"]
    n_words = vocab_size - len(specials) - len(byte_pieces) - len(parts)
    if n_words < 100:
        raise ValueError(f"a vocabulary of {vocab_size} is too small for the benchmark's prompts")
    tokens = specials + byte_pieces + parts + [f"\u2581w{i}" for i in range(n_words)]
    types = ([gguf.TokenType.UNKNOWN, gguf.TokenType.CONTROL, gguf.TokenType.CONTROL]
             + [gguf.TokenType.BYTE] * 256 + [gguf.TokenType.NORMAL] * (len(parts) + n_words))
    writer.add_tokenizer_model("llama")
    writer.add_token_list(tokens)
    writer.add_token_types(types)
    writer.add_token_scores([0.0] * (len(tokens) - n_words) + [-float(i) for i in range(n_words)])
    writer.add_unk_token_id(0)
    writer.add_bos_token_id(1)
    writer.add_eos_token_id(2)
    writer.add_add_bos_token(True)


def write_gguf_model(path: Path, shape: dict, types: dict[str, str], seed: int = 0) -> Path:
    """A llama GGUF of random blocks: `types` maps "linear", "embed" and optionally "output" (an
    untied model's output projection; default: the embedding's type) to a BLOCKS type."""
    import gguf

    h, heads = shape["hidden_size"], shape["num_attention_heads"]
    tensors = [(name, dims, _tensor_type(role, types)) for _, name, dims, role in llama_tensors(shape)]
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_type(gguf.GGUFType.MODEL)
    writer.add_name("random-" + "-".join(f"{k}-{v}" for k, v in sorted(types.items())).lower())
    writer.add_block_count(shape["num_hidden_layers"])
    writer.add_context_length(MAX_POSITIONS)
    writer.add_embedding_length(h)
    writer.add_feed_forward_length(shape["intermediate_size"])
    writer.add_head_count(heads)
    writer.add_head_count_kv(shape["num_key_value_heads"])
    writer.add_rope_freq_base(shape["rope_theta"])
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_key_length(h // heads)
    writer.add_value_length(h // heads)
    writer.add_rope_dimension_count(h // heads)
    writer.add_vocab_size(shape["vocab_size"])
    file_type = {"Q4_0": gguf.LlamaFileType.MOSTLY_Q4_0, "Q4_1": gguf.LlamaFileType.MOSTLY_Q4_1,
                 "Q8_0": gguf.LlamaFileType.MOSTLY_Q8_0, "Q4_K": gguf.LlamaFileType.MOSTLY_Q4_K_S,
                 "Q6_K": gguf.LlamaFileType.MOSTLY_Q6_K}[types["linear"]]
    writer.add_file_type(file_type)
    writer.add_quantization_version(gguf.GGML_QUANT_VERSION)
    _add_vocabulary(writer, shape["vocab_size"])
    for name, dims, qtype in tensors:
        nbytes = gguf_tensor_bytes(dims, qtype)
        if qtype == "F32":
            writer.add_tensor_info(name, dims, np.dtype(np.float32), nbytes)
        else:
            byte_shape = (dims[0], nbytes // dims[0])
            writer.add_tensor_info(name, byte_shape, np.dtype(np.uint8), nbytes,
                                   raw_dtype=gguf.GGMLQuantizationType[qtype])
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_ti_data_to_file()
    alignment = writer.data_alignment
    writer.close()
    # The data section: each tensor at the next multiple of the alignment, in tensor-info order.
    rng = np.random.default_rng(seed)
    pools = {q: _block_pool(rng, q) for q in {t for _, _, t in tensors} if q != "F32"}
    with open(path, "ab") as f:
        for _, dims, qtype in tensors:
            _pad(f, alignment)
            if qtype == "F32":
                f.write(np.ones(math.prod(dims), np.float32).tobytes())
            else:
                _write_cycled(f, pools[qtype], gguf_tensor_bytes(dims, qtype), rng)
        _pad(f, alignment)
    return path


# ----------------------------------------------------------------------------------------------
# Reading back
# ----------------------------------------------------------------------------------------------

_EMBED = ("model.embed_tokens.weight", "token_embd.weight")
_OUTPUT = ("lm_head.weight", "output.weight")


def streamed_bytes(files: list[Path]) -> int:
    """Bytes a decode step reads from the weights (opened with our loader): all of them, except
    that an untied embedding table is read one row per token (not counted)."""
    from max.pipelines.lib.weights import read_weights, weight_bytes

    weights = read_weights(files)
    total = weight_bytes(weights)
    if any(n in weights for n in _OUTPUT):
        total -= weight_bytes({n: w for n, w in weights.items() if n in _EMBED})
    return total


def check_safetensors(path: Path, tensors: int) -> None:
    """The file opens with the safetensors package and with our loader: `tensors` tensors of the
    same names and shapes, the smallest 2-D one holding the same values in both, and the first
    norm weight reading back as ones."""
    import ml_dtypes  # noqa: F401  (numpy learns bfloat16)
    from safetensors import safe_open

    from max.graph.weights import load_weights

    ours = {n: w.data() for n, w in load_weights([path]).items()}
    with safe_open(str(path), "numpy") as f:
        shapes = {n: tuple(f.get_slice(n).get_shape()) for n in f.keys()}
        if len(ours) != tensors or shapes != {n: tuple(int(d) for d in w.shape) for n, w in ours.items()}:
            raise RuntimeError(f"{path}: our loader and safetensors disagree ({len(ours)} vs {len(shapes)} tensors)")
        small = min((n for n in shapes if len(shapes[n]) == 2), key=lambda n: math.prod(shapes[n]))
        norm = next(n for n in shapes if n.endswith("norm.weight"))
        theirs, ones = f.get_tensor(small), f.get_tensor(norm)
    mine = np.asarray(ours[small].to_buffer().to_numpy())
    if mine.tobytes() != theirs.tobytes() or not np.all(ones.astype(np.float32) == 1):
        raise RuntimeError(f"{path}: {small} or {norm} reads back differently")
