"""paged_attention on the GPU at Llama-3-8B's attention shape (32 query heads over 8 kv heads,
head dim 128, bf16), through a graph holding the one op, in two parts:

- prefill: forward TFLOP/s of one prompt (non-causal 8k tokens, causal 2k and 8k) over a paged
  cache of 128-token pages in random order (`ours`: the kernel the call takes by default, the
  wgmma kernel of attention_prefill_sm90.cu on sm_90, named in `ours_kernel`; `pp`: with
  attention.prefill_pingpong=1, the wgmma kernel's ping-pong form; `cp`: with
  attention.prefill_tma=0, the wgmma kernel loading K and V by cp.async rather than TMA; `mma`:
  the mma.sync kernel of attention_prefill.cu, with attention.prefill_wgmma=0), beside torch's
  scaled_dot_product_attention on the same data forced onto its cuDNN and its flash backend
  (k and v repeated to 32 heads beforehand, outside the timing). FLOPs count 4 * d * heads per
  visible (query, key) pair; each result's error against torch's flash output is reported
  (`rel_err_vs_flash`, `pp_rel_err_vs_flash`, `cp_rel_err_vs_flash`, `mma_rel_err_vs_flash`), and `ours_vs_cudnn` is
  cuDNN's time / ours (above 1: faster than cuDNN).
- decode: one new token per sequence at 4k and 16k context, batch 1 and 8: the bandwidth of
  reading K and V (bytes / GPU time, TB/s) over pages of 16, 64 and 128 tokens in random order
  and over a contiguous cache (one page per sequence). Successive calls read different copies
  of the cache, more than the L2 cache holds.

GPU time per call is gpu_timing.py's (calls queued behind a spin kernel: launch overhead is not
measured). Needs a GPU and torch.

    python benchmarks/gpu_attention.py [--prefill-only]
"""

from __future__ import annotations

import itertools
import sys

import numpy as np

from common import write
from gpu_timing import Timer, our_stream
from max import driver, engine, tuning
from max.dtype import DType
from max.graph import BufferType, DeviceRef, Graph, TensorType
from max.nn import kernels

HQ, HKV, D = 32, 8, 128
PREFILL = [("null", 8192), ("causal", 2048), ("causal", 8192)]
DECODE_CONTEXT = [4096, 16384]
DECODE_BATCH = [1, 8]
DECODE_PAGES = [16, 64, 128, None]  # None: one page per sequence (contiguous)
ROTATE_BYTES = 512 << 20  # cache copies cycled through by the timed decode calls


def attention_graph(gpu, cache_shape, width, mask):
    ref = DeviceRef.from_device(gpu)
    types = [
        TensorType(DType.bfloat16, ["t", HQ, D], ref),
        BufferType(DType.bfloat16, cache_shape, ref),
        TensorType(DType.uint32, ["b1"], ref),
        TensorType(DType.uint32, ["b"], ref),
        TensorType(DType.uint32, ["b", width], ref),
    ]

    def body(q, cache, offsets, lengths, table):
        return kernels.paged_attention(q, cache, offsets, lengths, table, layer=0, scale=D**-0.5, mask=mask)

    return Graph("attention", body, input_types=types)


def u32(gpu, x):
    return driver.Buffer.from_numpy(np.ascontiguousarray(x, dtype=np.uint32)).to(gpu)


def prefill_rows(torch, gpu, session, timer, stream, side):
    from torch.nn.attention import SDPBackend, sdpa_kernel

    rows = []
    for mask, tokens in PREFILL:
        ps = 128
        pages = tokens // ps
        q = torch.randn(tokens, HQ, D, device="cuda", dtype=torch.bfloat16)
        k = torch.randn(tokens, HKV, D, device="cuda", dtype=torch.bfloat16)
        v = torch.randn(tokens, HKV, D, device="cuda", dtype=torch.bfloat16)
        # Page i of the sequence lives at page perm[i] of the cache.
        perm = torch.randperm(pages, device="cuda")
        blocks = torch.empty(pages, 2, 1, ps, HKV, D, device="cuda", dtype=torch.bfloat16)
        blocks[perm, 0, 0] = k.view(pages, ps, HKV, D)
        blocks[perm, 1, 0] = v.view(pages, ps, HKV, D)
        model = session.load(attention_graph(gpu, tuple(blocks.shape), pages, mask))
        args = [driver.Buffer.from_dlpack(q), driver.Buffer.from_dlpack(blocks), u32(gpu, [0, tokens]),
                u32(gpu, [0]), u32(gpu, perm.cpu().numpy()[None, :])]
        with tuning.record_launches() as log:
            (out,) = model.execute(*args)
        kernel = [r["kernel"] for r in log.records("attention_prefill")]
        ours = torch.from_dlpack(out).float()
        t = timer(stream, lambda: model.execute(*args))
        pairs = tokens * (tokens + 1) // 2 if mask == "causal" else tokens * tokens
        flops = 4 * D * HQ * pairs
        row = {"part": "prefill", "mask": mask, "tokens": tokens, "ours_kernel": kernel[0] if kernel else None,
               "ours_ms": round(t * 1e3, 3), "ours_TFLOPs": round(flops / t / 1e12, 1)}
        # The other forms: each its own model, loaded, run and timed under its knob.
        others = {}
        forms = [("pp", "attention.prefill_pingpong=1"), ("cp", "attention.prefill_tma=0"),
                 ("mma", "attention.prefill_wgmma=0")]
        for name, spec in forms:
            with tuning.override(spec):
                other = session.load(attention_graph(gpu, tuple(blocks.shape), pages, mask))
                (res,) = other.execute(*args)
                others[name] = torch.from_dlpack(res).float()
                tm = timer(stream, lambda: other.execute(*args))  # noqa: B023 (called at once)
            row |= {f"{name}_ms": round(tm * 1e3, 3), f"{name}_TFLOPs": round(flops / tm / 1e12, 1)}
            del other, res

        tq = q.transpose(0, 1).unsqueeze(0).contiguous()
        tk = k.transpose(0, 1).unsqueeze(0).repeat_interleave(HQ // HKV, dim=1).contiguous()
        tv = v.transpose(0, 1).unsqueeze(0).repeat_interleave(HQ // HKV, dim=1).contiguous()
        causal = mask == "causal"
        flash = None
        for name, backend in [("cudnn", SDPBackend.CUDNN_ATTENTION), ("flash", SDPBackend.FLASH_ATTENTION)]:
            try:
                with sdpa_kernel(backend):
                    run = lambda: torch.nn.functional.scaled_dot_product_attention(tq, tk, tv, is_causal=causal)  # noqa: E731
                    res = run()
                    tt = timer(side, run)
            except RuntimeError as e:
                print(f"torch {name}: {e}".splitlines()[0], file=sys.stderr)
                row |= {f"{name}_ms": None, f"{name}_TFLOPs": None}
                continue
            if name == "flash":
                flash = res[0].transpose(0, 1).float()
            row |= {f"{name}_ms": round(tt * 1e3, 3), f"{name}_TFLOPs": round(flops / tt / 1e12, 1)}
        if flash is not None:
            for key, x in [("rel_err_vs_flash", ours), *((f"{n}_rel_err_vs_flash", x) for n, x in others.items())]:
                row[key] = float(f"{((x - flash).abs().max() / flash.abs().max()).item():.2e}")
        if row.get("cudnn_ms"):
            row["ours_vs_cudnn"] = round(row["cudnn_ms"] / row["ours_ms"], 3)
        rows.append(row)
        print(row, flush=True)
        del model, others, args, out, blocks, q, k, v, tq, tk, tv
    return rows


def decode_rows(torch, gpu, session, timer, stream):
    rows = []
    for ctx, batch, ps in itertools.product(DECODE_CONTEXT, DECODE_BATCH, DECODE_PAGES):
        page = ps or ctx
        per_seq = ctx // page  # pages a sequence uses
        kv_bytes = batch * ctx * HKV * D * 2 * 2  # K and V, bf16
        copies = max(1, -(-ROTATE_BYTES // kv_bytes))
        pages = batch * per_seq * copies
        blocks = torch.randn(pages, 2, 1, page, HKV, D, device="cuda", dtype=torch.bfloat16)
        model = session.load(attention_graph(gpu, tuple(blocks.shape), per_seq, "causal"))
        # Copy c's sequences use a disjoint set of pages (shuffled when paged).
        order = np.random.default_rng(0).permutation(pages) if ps else np.arange(pages)
        tables = [u32(gpu, order[c * batch * per_seq:(c + 1) * batch * per_seq].reshape(batch, per_seq))
                  for c in range(copies)]
        q = driver.Buffer.from_dlpack(torch.randn(batch, HQ, D, device="cuda", dtype=torch.bfloat16))
        cache = driver.Buffer.from_dlpack(blocks)
        offsets, lengths = u32(gpu, np.arange(batch + 1)), u32(gpu, np.full(batch, ctx - 1))
        cyc = itertools.cycle(tables)
        model.execute(q, cache, offsets, lengths, tables[0])
        t = timer(stream, lambda: model.execute(q, cache, offsets, lengths, next(cyc)))
        row = {"part": "decode", "context": ctx, "batch": batch, "page_size": ps or "contiguous",
               "ours_us": round(t * 1e6, 1), "kv_TBps": round(kv_bytes / t / 1e12, 2)}
        rows.append(row)
        print(row, flush=True)
        del model, blocks, cache, tables, cyc
    return rows


def main() -> None:
    if driver.accelerator_count() == 0:
        print("no GPU: nothing to measure")
        return
    import torch

    gpu = driver.Accelerator()
    session = engine.InferenceSession(devices=[driver.CPU(), gpu])
    stream, timer, side = our_stream(gpu), Timer(torch), torch.cuda.Stream()
    rows = prefill_rows(torch, gpu, session, timer, stream, side)
    torch.cuda.empty_cache()
    if "--prefill-only" not in sys.argv:
        rows += decode_rows(torch, gpu, session, timer, stream)
    write("gpu_attention", torch.cuda.get_device_name(), rows, " ".join([sys.executable, *sys.argv]))


if __name__ == "__main__":
    main()
