"""conv2d on the GPU through max.engine against torch.nn.functional.conv2d (cuDNN, channels_last,
cudnn.benchmark) in the same process, bf16, NHWC activations and RSCF filters:

* the 23 distinct convolutions of ResNet-50 at batch 32 (benchmarks/data/resnet50_conv_b32.csv)
  and the whole 53-convolution stack (each layer's time times its count);
* the stem (7x7, stride 2) at batch 256, and two large 3x3 layers at batch 1
  (128x128x512 -> 512, 256x256x256 -> 256);
* for each, both of our paths: im2col + GEMM, and the Hopper implicit-GEMM kernel
  (kernels/conv_sm90.cu, knob conv.sm90) where it takes the shape; the faster one is "ours";
* the fused block relu(conv(x, w) + b) + r (one step with the GEMM epilogue, see
  crates/runtime/src/engine/conv_epilogue.rs) against torch eager doing the same math and
  against our convolution alone.

Each shape is checked against cuDNN once before it is timed. Timing is GPU time with the host
out of the way: the calls are queued behind a spin kernel (torch.cuda._sleep) on the stream
they run on, between two CUDA events, so the GPU runs them back to back as it would replay a
CUDA graph — microsecond kernels are not hidden behind launch overhead. torch runs each
convolution as a captured torch.cuda.CUDAGraph; ours runs the plan step by step on the
model's stream (MAX_CUDA_GRAPHS=off: our captured plans copy their inputs and results into
staging buffers, which would add the activations' traffic to every call). Median of 3 rounds.
JSON to benchmarks/results/.

Variants (--variants NAME=SPEC ..., SPEC a tuning spec such as conv.splitk=2,conv.prefetch=0;
see docs/configuration.md) re-time our Hopper path once per spec, applied with
max.tuning.override (the launcher reads the knobs at each call), on every layer, the stack and
the fused blocks, as `v_NAME_us` columns and a stack total per variant; `--layers a,b` keeps
only the named layers (and the fused blocks among them), `--no-large` drops the large set (such
runs write gpu_conv2d_variants-*.json instead). The default run's `sm90_split` / `sm90_padded`
say whether our Hopper path split the reduction or ran on channel-padded copies (from
max.tuning.record_launches). MAX_BENCH_CONV_SM90=0 times the im2col + GEMM path only.

    python benchmarks/gpu_conv2d.py
    python benchmarks/gpu_conv2d.py --variants old=conv.splitk=1,conv.prefetch=0 \
        split2=conv.splitk=2 split4=conv.splitk=4 nofold=conv.fold=0 cols=conv.fold=1 flat_a=conv.tiled_a=0
"""

import argparse

import csv
import os
import sys
import time
from pathlib import Path

os.environ["MAX_CUDA_GRAPHS"] = "off"  # a user setting: read when the engine first needs one

from common import check_tuning, write  # noqa: E402
from gpu_timing import Timer, our_stream  # noqa: E402
from max import driver, engine, tuning  # noqa: E402
from max.dtype import DType  # noqa: E402
from max.graph import DeviceRef, Graph, TensorType, ops  # noqa: E402

DATA = Path(__file__).resolve().parent / "data" / "resnet50_conv_b32.csv"
FUSED = ("s2_1x1_64_256", "s3_3x3_128", "s4_1x1_256_1024")


def layers():
    rows = []
    with open(DATA) as f:
        lines = [ln for ln in f if not ln.startswith("#")]
    for r in csv.DictReader(lines):
        rows.append({k: (r[k] if k == "name" else float(r[k]) if k == "gflop" else int(r[k])) for k in r})
    stem = next(r for r in rows if r["name"].startswith("stem"))
    big = [
        dict(name="stem_7x7_s2_b256", count=1, N=256, H=224, W=224, C=3, K=64, R=7, S=7, stride=2, pad=3),
        dict(name="3x3_128x128x512", count=1, N=1, H=128, W=128, C=512, K=512, R=3, S=3, stride=1, pad=1),
        dict(name="3x3_256x256x256", count=1, N=1, H=256, W=256, C=256, K=256, R=3, S=3, stride=1, pad=1),
    ]
    assert stem["N"] == 32
    return rows, big


def out_hw(L):
    oh = (L["H"] + 2 * L["pad"] - L["R"]) // L["stride"] + 1
    ow = (L["W"] + 2 * L["pad"] - L["S"]) // L["stride"] + 1
    return oh, ow


def flops(L):
    oh, ow = out_hw(L)
    return 2 * L["N"] * oh * ow * L["K"] * L["R"] * L["S"] * L["C"]


def max_model(session, L, fused):
    oh, ow = out_hw(L)
    t = [TensorType(DType.bfloat16, (L["N"], L["H"], L["W"], L["C"]), DeviceRef.GPU()),
         TensorType(DType.bfloat16, (L["R"], L["S"], L["C"], L["K"]), DeviceRef.GPU())]
    if fused:
        t += [TensorType(DType.bfloat16, (L["K"],), DeviceRef.GPU()),
              TensorType(DType.bfloat16, (L["N"], oh, ow, L["K"]), DeviceRef.GPU())]

    def fn(x, w, *rest):
        y = ops.conv2d(x, w, stride=(L["stride"],) * 2, padding=(L["pad"],) * 4)
        if fused:
            b, r = rest
            y = ops.relu(y + b) + r
        return y

    model = session.load(Graph("conv", fn, input_types=t))
    return model


def rel_err(torch, ours, ref):
    ours, ref = ours.float(), ref.float()
    return ((ours - ref).abs().max() / ref.abs().max().clamp_min(1e-6)).item()


def parse_variants(items):
    """NAME=SPEC -> {NAME: SPEC}, SPEC a tuning spec ("conv.splitk=2,conv.prefetch=0"; empty: the
    defaults); the Hopper path is forced on under each."""
    out = {}
    for item in items or ():
        name, _, spec = item.partition("=")
        out[name.strip()] = ",".join(filter(None, ["conv.sm90=1", spec.strip()]))
    check_tuning(out.values())
    return out


# Our two conv paths, as tuning specs.
PATHS = {"im2col": "conv.sm90=0", "sm90": "conv.sm90=1"}


def run_layer(torch, F, session, gpu, stream, timer, L, fused=False, variants=None):
    g = torch.Generator(device="cuda").manual_seed(0)
    oh, ow = out_hw(L)
    x = torch.randn(L["N"], L["H"], L["W"], L["C"], device="cuda", generator=g).to(torch.bfloat16)
    w = (torch.randn(L["R"], L["S"], L["C"], L["K"], device="cuda", generator=g)
         / (L["R"] * L["S"] * L["C"]) ** 0.5).to(torch.bfloat16)
    tx = x.permute(0, 3, 1, 2)  # NCHW view of NHWC memory: channels_last
    tw = w.permute(3, 2, 0, 1).contiguous(memory_format=torch.channels_last)
    args = [x, w]
    if fused:
        b = torch.randn(L["K"], device="cuda", generator=g).to(torch.bfloat16)
        r = torch.randn(L["N"], oh, ow, L["K"], device="cuda", generator=g).to(torch.bfloat16)
        tr = r.permute(0, 3, 1, 2)
        args += [b, r]
    model = max_model(session, L, fused)
    bufs = [driver.Buffer.from_dlpack(a) for a in args]
    if fused:
        ref = torch.relu(F.conv2d(tx, tw, b, stride=L["stride"], padding=L["pad"])) + tr
        report = model._plan_report(*bufs)
        assert "conv[conv2d+bias+relu+residual]" in report, report
    else:
        ref = F.conv2d(tx, tw, stride=L["stride"], padding=L["pad"])
    ref = ref.permute(0, 2, 3, 1)
    # Both conv paths, chosen per call by the knob conv.sm90: im2col + GEMM, and the Hopper
    # kernel (when it takes the shape: the launch record says). MAX_BENCH_CONV_SM90=0 skips the latter.
    paths, flags = {}, {}
    for path in PATHS if os.environ.get("MAX_BENCH_CONV_SM90", "1") != "0" else ("im2col",):
        with tuning.override(PATHS[path]):
            torch.cuda.synchronize()
            with tuning.record_launches() as launches:
                (out,) = model.execute(*bufs)
                gpu.synchronize()
            sm90 = launches.last("conv_sm90")
            if path == "sm90":
                if sm90 is None:
                    continue
                flags = {"sm90_padded": launches.count("conv_sm90_pad") > 0, "sm90_split": sm90["splits"] > 1}
            err = rel_err(torch, torch.from_dlpack(out), ref)
            assert err < 3e-2, f"{L['name']} ({path}): differs from cuDNN by {err:.3g} of the largest value"
            del out
            paths[path] = (timer(stream, lambda: model.execute(*bufs)), err)
    # Our Hopper path again under each variant's knobs (only where it takes the shape).
    timed_variants = {}
    if "sm90" in paths:
        for vname, spec in (variants or {}).items():
            with tuning.override(spec):
                torch.cuda.synchronize()
                (out,) = model.execute(*bufs)
                gpu.synchronize()
                err = rel_err(torch, torch.from_dlpack(out), ref)
                assert err < 3e-2, f"{L['name']} (variant {vname}): differs from cuDNN by {err:.3g} of the largest value"
                del out
                timed_variants[vname] = timer(stream, lambda: model.execute(*bufs))
    del ref
    best = min(paths, key=lambda k: paths[k][0])
    t_ours, err = paths[best]
    row = {"name": L["name"], "count": L["count"], "n": L["N"], "hw": f"{L['H']}x{L['W']}", "c": L["C"],
           "k": L["K"], "rs": f"{L['R']}x{L['S']}", "stride": L["stride"], "rel_err": float(f"{err:.2e}"), "path": best,
           "im2col_us": round(paths["im2col"][0] * 1e6, 1),
           "sm90_us": round(paths["sm90"][0] * 1e6, 1) if "sm90" in paths else None, **flags}
    for vname, t in timed_variants.items():
        row[f"v_{vname}_us"] = round(t * 1e6, 1)
    side = torch.cuda.Stream()
    if fused:
        def eager():
            y = F.conv2d(tx, tw, b, stride=L["stride"], padding=L["pad"])
            torch.relu_(y)
            y.add_(tr)

        t_torch = timer(side, eager)
        row.update(max_fused_us=round(t_ours * 1e6, 1), torch_eager_us=round(t_torch * 1e6, 1),
                   ratio_vs_eager=round(t_torch / t_ours, 3))
        return row, (t_ours, timed_variants)
    F.conv2d(tx, tw, stride=L["stride"], padding=L["pad"])  # cudnn.benchmark picks its algorithm
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.stream(side):
        F.conv2d(tx, tw, stride=L["stride"], padding=L["pad"])
        side.synchronize()
        with torch.cuda.graph(graph, stream=side):
            F.conv2d(tx, tw, stride=L["stride"], padding=L["pad"])
    t_torch = timer(side, graph.replay)
    fl = flops(L)
    row.update(max_us=round(t_ours * 1e6, 1), cudnn_us=round(t_torch * 1e6, 1),
               max_tflops=round(fl / t_ours / 1e12, 1), cudnn_tflops=round(fl / t_torch / 1e12, 1),
               ratio=round(t_torch / t_ours, 3))
    del graph
    return row, (t_ours, t_torch, timed_variants)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--variants", nargs="*", default=[], help="NAME=SPEC ..., SPEC a tuning spec (conv.splitk=2,conv.fold=0)")
    ap.add_argument("--layers", default="", help="comma-separated layer names to keep")
    ap.add_argument("--no-large", action="store_true", help="skip the large set")
    args = ap.parse_args()
    variants = parse_variants(args.variants)
    keep = set(filter(None, args.layers.split(",")))
    if driver.accelerator_count() == 0:
        print("no GPU: nothing to measure")
        return
    import torch
    import torch.nn.functional as F

    torch.backends.cudnn.benchmark = True
    start = time.perf_counter()
    gpu = driver.Accelerator()
    session = engine.InferenceSession(devices=[driver.CPU(), gpu])
    stream, timer = our_stream(gpu), Timer(torch)
    resnet, big = layers()
    if keep:
        resnet = [L for L in resnet if L["name"] in keep]
        big = [L for L in big if L["name"] in keep]
    if args.no_large:
        big = []
    rows, times = [], {}
    for group, ls in (("resnet50_b32", resnet), ("large", big)):
        for L in ls:
            row, times[L["name"]] = run_layer(torch, F, session, gpu, stream, timer, L, variants=variants)
            rows.append({"set": group, **row})
            print(rows[-1], flush=True)
            torch.cuda.empty_cache()
    ours = sum(L["count"] * times[L["name"]][0] for L in resnet)
    theirs = sum(L["count"] * times[L["name"]][1] for L in resnet)
    total = sum(L["count"] * flops(L) for L in resnet)
    if resnet:
        stack = {"set": "resnet50_b32_stack", "name": f"{sum(L['count'] for L in resnet)} convs",
                 "max_us": round(ours * 1e6, 1), "cudnn_us": round(theirs * 1e6, 1),
                 "max_tflops": round(total / ours / 1e12, 1), "cudnn_tflops": round(total / theirs / 1e12, 1),
                 "ratio": round(theirs / ours, 3)}
        for vname in variants:
            # a layer the Hopper path does not take counts with our best time
            t = sum(L["count"] * times[L["name"]][2].get(vname, times[L["name"]][0]) for L in resnet)
            stack[f"v_{vname}_us"] = round(t * 1e6, 1)
        rows.append(stack)
        print(rows[-1], flush=True)
    for name in FUSED:
        L = next((L for L in resnet if L["name"] == name), None)
        if L is None:
            continue
        row, (t_fused, fused_variants) = run_layer(torch, F, session, gpu, stream, timer, L, fused=True,
                                                   variants=variants)
        conv = times[name][0]
        row.update(max_conv_us=round(conv * 1e6, 1), epilogue_cost=round(t_fused / conv - 1, 3))
        for vname, t in fused_variants.items():
            conv_v = times[name][2].get(vname)
            if conv_v:
                row[f"v_{vname}_epilogue_cost"] = round(t / conv_v - 1, 3)
        rows.append({"set": "fused_block", **row})
        print(rows[-1], flush=True)
    print(f"total {time.perf_counter() - start:.1f} s")
    # A partial or variant run keeps the full run's results file.
    name = "gpu_conv2d" if not (keep or args.no_large or variants) else "gpu_conv2d_variants"
    write(name, torch.cuda.get_device_name(), rows, " ".join([sys.executable, *sys.argv]))


if __name__ == "__main__":
    main()
