"""A BERT-base-like encoder (12 layers, hidden 768, 12 heads, FFN 3072, sequence 128) in
bfloat16 on the GPU, against torch eager running the same math with the same weights, in one
process, at batch 1 and 32. The graph is timed twice: its attention written as matmul, softmax
and matmul (`max_ms`, against torch eager's same ops), and as one
`max.nn.kernels.flash_attention_gpu` (`max_flash_ms`, against torch eager with its fused
attention kernel, scaled_dot_product_attention). JSON to benchmarks/results/.

    python benchmarks/gpu_bert.py
"""

import math
import sys

from common import time_async, write
from max import driver, engine
from max.dtype import DType
from max.graph import DeviceRef, Graph, TensorType, Weight, ops
from max.nn.attention import MHAMaskVariant
from max.nn.kernels import flash_attention_gpu

LAYERS, HIDDEN, HEADS, FFN, SEQ = 12, 768, 12, 3072, 128
HEAD = HIDDEN // HEADS
EPS = 1e-12


def weights(torch):
    g = torch.Generator(device="cuda").manual_seed(0)

    def rand(*shape, scale):
        return (torch.randn(*shape, generator=g, device="cuda") * scale).to(torch.bfloat16)

    w = {}
    for i in range(LAYERS):
        p = f"l{i}."
        w[p + "wqkv"] = rand(HIDDEN, 3 * HIDDEN, scale=1 / math.sqrt(HIDDEN))
        w[p + "bqkv"] = rand(3 * HIDDEN, scale=0.02)
        w[p + "wo"] = rand(HIDDEN, HIDDEN, scale=1 / math.sqrt(HIDDEN))
        w[p + "bo"] = rand(HIDDEN, scale=0.02)
        w[p + "w1"] = rand(HIDDEN, FFN, scale=1 / math.sqrt(HIDDEN))
        w[p + "b1"] = rand(FFN, scale=0.02)
        w[p + "w2"] = rand(FFN, HIDDEN, scale=1 / math.sqrt(FFN))
        w[p + "b2"] = rand(HIDDEN, scale=0.02)
        for n in ("ln1", "ln2"):
            w[p + n + "_g"] = (1 + rand(HIDDEN, scale=0.1).float()).to(torch.bfloat16)
            w[p + n + "_b"] = rand(HIDDEN, scale=0.02)
    return w


def max_graph(batch, w, flash=False):
    gpu = DeviceRef.GPU()

    def W(name):
        t = w[name]
        return Weight(name, DType.bfloat16, tuple(t.shape), gpu)

    def layer(x, p):
        qkv = x @ W(p + "wqkv") + W(p + "bqkv")
        q, k, v = ops.split(qkv, [HIDDEN, HIDDEN, HIDDEN], axis=-1)

        def heads(t):
            return ops.permute(ops.reshape(t, (batch, SEQ, HEADS, HEAD)), [0, 2, 1, 3])

        if flash:
            q, k, v = (ops.reshape(t, (batch, SEQ, HEADS, HEAD)) for t in (q, k, v))
            ctx = flash_attention_gpu(q, k, v, MHAMaskVariant.NULL_MASK, 1 / math.sqrt(HEAD))
            ctx = ops.reshape(ctx, (batch, SEQ, HIDDEN))
        else:
            q, k, v = heads(q), heads(k), heads(v)
            scores = (q @ ops.transpose(k, -1, -2)) * (1 / math.sqrt(HEAD))
            ctx = ops.softmax(scores) @ v
            ctx = ops.reshape(ops.permute(ctx, [0, 2, 1, 3]), (batch, SEQ, HIDDEN))
        x = ops.layer_norm(ctx @ W(p + "wo") + W(p + "bo") + x, W(p + "ln1_g"), W(p + "ln1_b"), EPS)
        h = ops.gelu(x @ W(p + "w1") + W(p + "b1"))
        return ops.layer_norm(h @ W(p + "w2") + W(p + "b2") + x, W(p + "ln2_g"), W(p + "ln2_b"), EPS)

    def fn(x):
        for i in range(LAYERS):
            x = layer(x, f"l{i}.")
        return x

    return Graph(f"bert_b{batch}{'_flash' if flash else ''}", fn, input_types=[TensorType(DType.bfloat16, (batch, SEQ, HIDDEN), gpu)])


def torch_encoder(torch, w, x, sdpa=False):
    F = torch.nn.functional
    b = x.shape[0]
    for i in range(LAYERS):
        p = f"l{i}."
        qkv = x @ w[p + "wqkv"] + w[p + "bqkv"]
        q, k, v = (t.view(b, SEQ, HEADS, HEAD).transpose(1, 2) for t in qkv.split(HIDDEN, dim=-1))
        if sdpa:
            ctx = F.scaled_dot_product_attention(q, k, v)
        else:
            ctx = torch.softmax((q @ k.transpose(-1, -2)) / math.sqrt(HEAD), dim=-1) @ v
        ctx = ctx.transpose(1, 2).reshape(b, SEQ, HIDDEN)
        x = F.layer_norm(ctx @ w[p + "wo"] + w[p + "bo"] + x, (HIDDEN,), w[p + "ln1_g"], w[p + "ln1_b"], EPS)
        h = F.gelu(x @ w[p + "w1"] + w[p + "b1"])
        x = F.layer_norm(h @ w[p + "w2"] + w[p + "b2"] + x, (HIDDEN,), w[p + "ln2_g"], w[p + "ln2_b"], EPS)
    return x


def main() -> None:
    if driver.accelerator_count() == 0:
        print("no GPU: nothing to measure")
        return
    import torch

    gpu = driver.Accelerator()
    session = engine.InferenceSession(devices=[driver.CPU(), gpu])
    w = weights(torch)
    registry = {k: driver.Buffer.from_dlpack(v) for k, v in w.items()}

    def sync():
        torch.cuda.synchronize()
        gpu.synchronize()

    rows = []
    for batch in (1, 32):
        model = session.load(max_graph(batch, w), weights_registry=registry)
        flash = session.load(max_graph(batch, w, flash=True), weights_registry=registry)
        x = torch.randn(batch, SEQ, HIDDEN, device="cuda").to(torch.bfloat16)
        xb = driver.Buffer.from_dlpack(x)
        with torch.inference_mode():
            ref = torch_encoder(torch, w, x).float()

            def err(m):
                return ((torch.from_dlpack(m.execute(xb)[0]).float() - ref).norm() / ref.norm()).item()

            errs = (err(model), err(flash))
            reps = 50 if batch == 1 else 10
            t_ours = time_async(lambda: model.execute(xb), sync, reps=reps)
            t_flash = time_async(lambda: flash.execute(xb), sync, reps=reps)
            t_eager = time_async(lambda: torch_encoder(torch, w, x), sync, reps=reps)
            t_sdpa = time_async(lambda: torch_encoder(torch, w, x, sdpa=True), sync, reps=reps)
        rows.append({"batch": batch, "max_ms": round(t_ours * 1e3, 3), "torch_eager_ms": round(t_eager * 1e3, 3),
                     "speedup_vs_eager": round(t_eager / t_ours, 3), "max_flash_ms": round(t_flash * 1e3, 3),
                     "torch_sdpa_ms": round(t_sdpa * 1e3, 3), "flash_speedup_vs_sdpa": round(t_sdpa / t_flash, 3),
                     "cuda_graphs": model._core.num_cuda_graphs, "rel_err": round(errs[0], 5),
                     "flash_rel_err": round(errs[1], 5)})
        print(rows[-1])
    write("gpu_bert", torch.cuda.get_device_name(), rows, " ".join([sys.executable, *sys.argv]))


if __name__ == "__main__":
    main()
