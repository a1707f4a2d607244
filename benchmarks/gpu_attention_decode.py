"""Paged decode attention on the GPU at the Llama-3-8B shape (32 query heads, 8 kv heads, head
dim 128, bf16): one new token per sequence against caches of 256 to 16k tokens, batches of 1, 8
and 32, pages of 16, 64 and 128 tokens in shuffled order and a contiguous cache (one page per
sequence), through our graph op (one graph holding a paged_attention op). GPU time per call
(gpu_timing.py: calls back to back behind a spin kernel, as a replayed CUDA graph runs them),
the K/V bytes read per second, and torch's scaled_dot_product_attention on a contiguous cache of
the same shape in the same process as the anchor. Successive timed calls read different copies
of the cache, more of them than the L2 holds. A `wide` row repeats batch 1 at 256 tokens with a
lookup table as wide as 32k tokens (the engine sizes the table by the longest sequence it may
hold; most of the kernel's splits then find nothing). Each result is checked against torch in
float32. `kernel_us` is the attention kernels' own GPU time per call (torch's profiler over a
few calls): what a captured decode step spends on the op, without the per-execute work around
it that `us` includes. Needs a GPU and torch.

    python benchmarks/gpu_attention_decode.py [--quick]
"""

from __future__ import annotations

import itertools
import sys

import numpy as np

from common import write
from gpu_timing import Timer, copy_rate_gbps, our_stream
from max import driver, engine
from max.dtype import DType
from max.graph import BufferType, DeviceRef, Graph, TensorType
from max.nn import kernels

HQ, HKV, D = 32, 8, 128
CONTEXTS = [256, 1024, 4096, 16384]
BATCHES = [1, 8, 32]
LAYOUTS = [16, 64, 128, "contiguous"]
ROTATE_BYTES = 256 << 20  # cache copies cycled through by the timed calls: beyond any L2
MAX_COPIES = 64
WIDE_KEYS = 32768


def _graph(batch: int, cache_shape: tuple, width: int, ref: DeviceRef) -> Graph:
    types = [
        TensorType(DType.bfloat16, [batch, HQ, D], ref),
        BufferType(DType.bfloat16, cache_shape, ref),
        TensorType(DType.uint32, [batch + 1], ref),
        TensorType(DType.uint32, [batch], ref),
        TensorType(DType.uint32, [batch, width], ref),
    ]

    def body(q, cache, offsets, lengths, table):
        return kernels.paged_attention(q, cache, offsets, lengths, table, layer=0, scale=D**-0.5)

    return Graph("decode_attention", body, input_types=types)


def kernel_seconds(call, sync, calls: int = 20) -> float:
    """GPU seconds per call of the attention kernels themselves (the decode form and its merge),
    from torch's profiler."""
    from torch.profiler import ProfilerActivity, profile

    sync()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            call()
        sync()
    ours = [e for e in prof.events() if e.device_type.name == "CUDA"
            and e.name.startswith(("paged_decode", "attention_combine"))]
    return sum(e.device_time for e in ours) / calls * 1e-6


def main() -> None:
    if driver.accelerator_count() == 0:
        print("no GPU: nothing to measure")
        return
    import torch
    import torch.nn.functional as F

    quick = "--quick" in sys.argv
    gpu = driver.Accelerator()

    def sync() -> None:
        torch.cuda.synchronize()
        gpu.synchronize()

    session = engine.InferenceSession(devices=[driver.CPU(), gpu])
    stream, timer = our_stream(gpu), Timer(torch)
    side = torch.cuda.Stream()
    copy_gbps = copy_rate_gbps(gpu, sync)
    ref = DeviceRef.GPU()
    rows = []
    cases = list(itertools.product(CONTEXTS, BATCHES))
    if quick:
        cases = [(256, 1), (4096, 8), (16384, 32)]
    for ctx, batch in cases:
        g = torch.Generator(device="cuda").manual_seed(ctx * 100 + batch)
        # The cache holds ctx - 1 tokens and the new token's key is the last: ctx keys in all.
        kv_bytes = batch * ctx * HKV * D * 2 * 2
        q = torch.randn(batch, HQ, D, device="cuda", generator=g).to(torch.bfloat16)
        k = torch.randn(batch, HKV, ctx, D, device="cuda", generator=g).to(torch.bfloat16)
        v = torch.randn(batch, HKV, ctx, D, device="cuda", generator=g).to(torch.bfloat16)
        want = F.scaled_dot_product_attention(
            q.float()[:, :, None], k.float(), v.float(), enable_gqa=True
        )[:, :, 0]
        base = {"context": ctx, "batch": batch, "kv_MB": round(kv_bytes / 1e6, 1)}
        layouts = [(p, False) for p in LAYOUTS] + ([(16, True)] if (ctx, batch) == (256, 1) else [])
        for layout, wide in layouts:
            ps = ctx if layout == "contiguous" else layout
            per_seq = -(-ctx // ps)
            width = -(-WIDE_KEYS // ps) if wide else per_seq
            pages = batch * per_seq
            # Page p of sequence b holds tokens p*ps .. of it, scattered over the cache.
            if layout == "contiguous":
                perm = torch.arange(pages, device="cuda")
            else:
                perm = torch.randperm(pages, device="cuda", generator=g)
            cache = torch.zeros(pages, 2, 1, ps, HKV, D, device="cuda", dtype=torch.bfloat16)
            padded = per_seq * ps
            for which, src in ((0, k), (1, v)):
                t = torch.zeros(batch, HKV, padded, D, device="cuda", dtype=torch.bfloat16)
                t[:, :, :ctx] = src
                # [b, hkv, per_seq, ps, d] -> [b, per_seq, ps, hkv, d]
                t = t.view(batch, HKV, per_seq, ps, D).permute(0, 2, 3, 1, 4).reshape(pages, ps, HKV, D)
                cache[perm, which, 0] = t
            table = np.zeros((batch, width), np.uint32)
            table[:, :per_seq] = perm.cpu().numpy().reshape(batch, per_seq)
            offsets = np.arange(batch + 1, dtype=np.uint32)
            lengths = np.full(batch, ctx - 1, np.uint32)
            model = session.load(_graph(batch, tuple(cache.shape), width, ref))
            n = max(1, min(MAX_COPIES, ROTATE_BYTES // (cache.numel() * 2)))
            copies = [cache] + [cache.clone() for _ in range(n - 1)]
            indices = [driver.Buffer.from_numpy(a).to(gpu) for a in (offsets, lengths, table)]
            args = [driver.Buffer.from_dlpack(q), *indices]
            bufs = [driver.Buffer.from_dlpack(c) for c in copies]
            (out,) = model.execute(args[0], bufs[0], *args[1:])
            got = torch.from_dlpack(out).float()
            err = ((got - want).abs().max() / want.abs().max()).item()
            cyc = itertools.cycle(bufs)
            t = timer(stream, lambda: model.execute(args[0], next(cyc), *args[1:]))
            kt = kernel_seconds(lambda: model.execute(args[0], next(cyc), *args[1:]), sync)
            label = "contiguous" if layout == "contiguous" else f"page{layout}" + ("_wide" if wide else "")
            rows.append(base | {"layout": label, "table_keys": width * ps, "us": round(t * 1e6, 2),
                                "TBps": round(kv_bytes / t / 1e12, 3),
                                "of_copy_rate": round(kv_bytes / t / 1e9 / copy_gbps, 3),
                                "kernel_us": round(kt * 1e6, 2), "kernel_TBps": round(kv_bytes / kt / 1e12, 3),
                                "rel_err": float(f"{err:.2e}")})
            print(rows[-1], flush=True)
            del bufs, cyc, copies, cache, model
        # torch's SDPA on a contiguous [b, hkv, ctx, d] cache, the same bytes.
        n = max(1, min(MAX_COPIES, ROTATE_BYTES // (2 * k.numel() * 2)))
        kvs = itertools.cycle([(k, v)] + [(k.clone(), v.clone()) for _ in range(n - 1)])
        q4 = q[:, :, None]

        def sdpa():
            kk, vv = next(kvs)
            return F.scaled_dot_product_attention(q4, kk, vv, enable_gqa=True)

        theirs = timer(side, sdpa)
        rows.append(base | {"layout": "torch_sdpa_contiguous", "table_keys": ctx, "us": round(theirs * 1e6, 2),
                            "TBps": round(kv_bytes / theirs / 1e12, 3),
                            "of_copy_rate": round(kv_bytes / theirs / 1e9 / copy_gbps, 3)})
        print(rows[-1], flush=True)
        del kvs, k, v
        torch.cuda.empty_cache()
    for r in rows:
        r["device_copy_GBps"] = round(copy_gbps, 1)
    write("gpu_attention_decode", torch.cuda.get_device_name(), rows, " ".join([sys.executable, *sys.argv]))


if __name__ == "__main__":
    main()
