"""Where an LLM's decode steps (or its prefill) spend their GPU time: every kernel the process
runs while the steps run (torch's profiler, which sees our kernels, CUDA graph replays included,
through CUPTI), per device: the host's wall time per step, the time some kernel is running
(busy) and the rest (gaps: launch latency, host work, waits between devices), kernels per step,
and the kernels by total time (launches per step, microseconds per step, mean microseconds),
and one step's kernels in launch order (`--timeline N` prints the first N and the last N), on
one clock for every device: microseconds from the first device's first kernel of the step.
Models are llm_gpu.py's (random weights of real shapes, written by llm_files.py unless kept);
`--gpus 0,1` loads the model tensor-parallel over those GPUs. The round is llm_gpu.py's: `--batch`
fresh prompts of `--prompt` tokens prefilled, then `--steps` decode steps, after two untimed
rounds (a step's CUDA graph is captured on its second run); `--prefill` profiles the prefill of
one `--prompt`-token prompt instead. Text to stdout, JSON to
benchmarks/results/profile_llm-<device>.json (rows of other models and settings kept).

    python benchmarks/profile_llm.py --models llama-3-8b-bf16 [--batch 1] [--prompt 512] [--steps 32]
                                     [--gpus 0,1] [--prefill] [--top 25] [--keep-models DIR]
    python benchmarks/profile_llm.py --tiny   # the flow at tiny shapes on the CPU, no profiler
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

import numpy as np

import llm_gpu
from common import result_path, write


def union_us(spans: list[tuple[float, float]]) -> float:
    """Total length of the union of [start, end) spans (microseconds)."""
    total, end = 0.0, float("-inf")
    for a, b in sorted(spans):
        if b <= end:
            continue
        total += b - max(a, end)
        end = b
    return total


def step_slices(ks: list[tuple[str, float, float]], steps: int) -> list[list[tuple[str, float, float]]]:
    """The kernels of each step in launch order: a step ends with its sampler's kernel
    (`sample_tokens` or `sample_tokens_streamed`, once a step) when there are `steps` of those,
    else every step is len(ks) / steps kernels when that divides; otherwise none."""
    ordered = sorted(ks, key=lambda k: k[1])
    ends = [i for i, k in enumerate(ordered) if k[0].startswith("sample_tokens")]
    if len(ends) == steps and steps:
        starts = [0] + [e + 1 for e in ends[:-1]]
        return [ordered[a:e + 1] for a, e in zip(starts, ends)]
    per = len(ks) // max(steps, 1)
    if per == 0 or per * steps != len(ks):
        return []
    return [ordered[per * i:per * (i + 1)] for i in range(steps)]


def idle_us(one: list[tuple[str, float, float]], since: float) -> float:
    """Time in a step's span (from `since`, the previous step's last end) with no kernel running."""
    idle, end = 0.0, since
    for _, a, b in one:
        idle += max(0.0, a - end)
        end = max(end, b)
    return idle


def timeline(one: list[tuple[str, float, float]], t0: float) -> list[dict]:
    """One step's kernels in launch order: name, start (us from `t0`, the first device's first
    kernel of the step: the devices share CUPTI's clock), duration and the gap since the
    previous kernel ended (negative where they overlap, as programmatic dependent launches do)."""
    out, end = [], one[0][1] if one else 0.0
    for name, a, b in one:
        out.append({"kernel": name, "start_us": round(a - t0, 2), "us": round(b - a, 2), "gap_us": round(a - end, 2)})
        end = max(end, b)
    return out


def adds(slices: list[list[tuple[str, float, float]]], since: list[float]) -> dict[str, float]:
    """Per kernel name, the microseconds its ends moved each step's running end forward (the
    time it added to the step, from `since`, the previous step's last end, for each step):
    with programmatic dependent launches a kernel's span includes its wait for the previous
    one, so the spans overstate what the later kernels cost; these sum to the step's span."""
    out: dict[str, float] = defaultdict(float)
    for one, end in zip(slices, since):
        for name, _, b in one:
            if b > end:
                out[name] += b - end
                end = b
    return out


def windows(slices: list[list[tuple[str, float, float]]]) -> list[tuple[float, float]]:
    """The [start, end) of each step on the first device's clock: from the end of the previous
    step's last kernel (its first kernel for the first step) to the end of its own last one."""
    out, since = [], None
    for one in slices:
        a = one[0][1] if since is None else since
        out.append((a, one[-1][2]))
        since = one[-1][2]
    return out


def summarize(kernels: list[tuple[int, str, float, float]], steps: int, wall_s: float, top: int) -> list[dict]:
    """Per device, from (device, name, start us, end us) of every kernel: a dict with the wall
    time, busy time, gaps and kernel count per step, the `top` kernels by time, and the
    timeline of one step (see timeline). The first device's steps end at its sampler's kernel;
    another device's step is what it started within the same window of time."""
    by_dev: dict[int, list[tuple[str, float, float]]] = defaultdict(list)
    for dev, name, a, b in kernels:
        by_dev[dev].append((name, a, b))
    out, spans = [], None
    for dev in sorted(by_dev):
        ks = by_dev[dev]
        if spans is None:
            first = step_slices(ks, steps)
            spans = windows(first)
        ordered = sorted(ks, key=lambda k: k[1])
        slices = ([[k for k in ordered if a <= k[1] < b] for a, b in spans] if dev != min(by_dev) else first)
        busy = union_us([(a, b) for _, a, b in ks]) / steps
        wall = wall_s * 1e6 / steps
        per: dict[str, list[float]] = defaultdict(list)
        for name, a, b in ks:
            per[name].append(b - a)
        ranked = sorted(per.items(), key=lambda kv: -sum(kv[1]))
        # the step after the middle one (the middle one is often the first of an execute of
        # several steps, waiting on the host)
        pick = 0 if steps == 1 else steps // 2 + 1
        pairs = [(one, prev[-1][2]) for prev, one in zip(slices, slices[1:]) if prev and one]
        added = adds([one for one, _ in pairs], [end for _, end in pairs])
        n_added = max(len(pairs), 1)
        one = slices[pick] if len(slices) > pick else []
        out.append({
            "device": dev, "wall_us_per_step": round(wall, 1), "busy_us_per_step": round(busy, 1),
            "gaps_us_per_step": round(wall - busy, 1), "kernels_per_step": round(len(ks) / steps, 1),
            "kernel_us_per_step": round(sum(b - a for _, a, b in ks) / steps, 1),
            "top": [{"kernel": name, "per_step": round(len(d) / steps, 2), "us_per_step": round(sum(d) / steps, 2),
                     "mean_us": round(sum(d) / len(d), 2)} for name, d in ranked[:top]],
            "adds": [{"kernel": name, "us_per_step": round(v / n_added, 2)}
                     for name, v in sorted(added.items(), key=lambda kv: -kv[1])[:top]],
            # the time each step's GPU sat idle (from the previous step's last kernel)
            "idle_us_by_step": [round(idle_us(one, prev[-1][2]), 1)
                                for prev, one in zip(slices, slices[1:]) if prev and one],
            "timeline": timeline(one, spans[pick][0] if len(spans) > pick else 0.0),
        })
    return out


def show(row: dict, lines: int = 0) -> None:
    what = f"{row['model']} {row['measure']} tp={row['tp']} batch={row['batch']} prompt={row['prompt']}"
    for d in row["devices"]:
        print(f"\n{what}, device {d['device']}: {d['wall_us_per_step']:.1f} us per step on the host's clock, GPU busy "
              f"{d['busy_us_per_step']:.1f} us (kernels {d['kernel_us_per_step']:.1f} us, {d['kernels_per_step']:.1f} "
              f"launches), gaps {d['gaps_us_per_step']:.1f} us")
        print(f"  {'us/step':>9} {'per step':>8} {'mean us':>8}  kernel")
        for k in d["top"]:
            print(f"  {k['us_per_step']:9.2f} {k['per_step']:8.2f} {k['mean_us']:8.2f}  {k['kernel'][:110]}")
        if d["adds"]:
            print("  us/step each kernel added to the step's span (its end past every earlier end):")
            print("   " + ", ".join(f"{k['kernel'][:40]} {k['us_per_step']:.1f}" for k in d["adds"]))
        if d["idle_us_by_step"]:
            print("  idle us by step:", " ".join(f"{v:.0f}" for v in d["idle_us_by_step"]))
        if lines and d["timeline"]:
            tl = d["timeline"]
            print(f"  one step in launch order (first and last {lines}): start us, us, gap us, kernel")
            for i, k in enumerate(tl):
                if i == lines and len(tl) > 2 * lines:
                    print(f"  ... {len(tl) - 2 * lines} more")
                if i < lines or i >= len(tl) - lines:
                    print(f"  {k['start_us']:9.2f} {k['us']:8.2f} {k['gap_us']:8.2f}  {k['kernel'][:100]}")


@contextlib.contextmanager
def profiled(sink: list, sync):
    """Collects (device, name, start us, end us) of every kernel run inside the block."""
    from torch.profiler import ProfilerActivity, profile

    sync()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        yield
        sync()
    for e in prof.events():
        if e.device_type.name == "CUDA":
            sink.append((int(e.device_index), e.name, float(e.time_range.start), float(e.time_range.end)))


def load(path: Path, max_length: int, batch: int, gpus: list[int] | None, **config: str):
    from max.driver import DeviceSpec
    from max.pipelines import PipelineConfig
    from max.pipelines.lib.pipeline import load_pipeline

    specs = [DeviceSpec.cpu()] if gpus is None else [DeviceSpec.accelerator(i) for i in gpus]
    return load_pipeline(PipelineConfig(model_path=str(path), max_length=max_length, max_batch_size=batch,
                                        device_specs=specs, **config))


def profile_model(name: str, tmp: Path, args) -> dict:
    model = llm_gpu.MODELS[name]
    if args.tiny:
        model = llm_gpu.Model(model.name, model.shape, model.types)
    path = llm_gpu.model_path(model, tmp, args.tiny)
    if llm_gpu.prepare(model, path, args.tiny) is None:
        raise SystemExit(f"{name}: no room to write it")
    gpus = None if args.tiny else args.gpus
    from max import tuning

    knobs, config = llm_gpu.split_settings(args.settings)
    with tuning.override(knobs or None):
        return profile_loaded(name, load(path, args.prompt + args.steps + 8, args.batch, gpus, **config), gpus, args)


def profile_loaded(name: str, p, gpus: list[int] | None, args) -> dict:
    p.warm_up()
    if gpus is None:
        sync = lambda: None  # noqa: E731
    else:
        import torch

        from max import driver

        devs = [driver.Accelerator(i) for i in gpus]

        def sync() -> None:
            for i, d in zip(gpus, devs):
                torch.cuda.synchronize(i)
                d.synchronize()

    rng = np.random.default_rng(args.batch * 1000 + args.prompt)
    batch, steps = (1, 0) if args.prefill else (args.batch, args.steps)
    for _ in range(2):
        llm_gpu.run_round(p, batch, args.prompt, steps, rng)
    kernels: list = []
    ctx = contextlib.nullcontext() if gpus is None else profiled(kernels, sync)
    pre, dec = llm_gpu.run_round(p, batch, args.prompt, steps, rng,
                                 prefill_ctx=ctx if args.prefill else None, decode_ctx=None if args.prefill else ctx)
    del p
    return {"model": name, "measure": "prefill" if args.prefill else "decode", "tp": len(gpus or [0]),
            "settings": args.settings,
            "batch": batch, "prompt": args.prompt, "steps": 1 if args.prefill else steps,
            "wall_ms": round((pre if args.prefill else dec) * 1e3, 3),
            "devices": summarize(kernels, 1 if args.prefill else steps, pre if args.prefill else dec, args.top)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default="llama-3-8b-bf16", help=f"comma-separated, of {', '.join(llm_gpu.MODELS)}")
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--prompt", type=int, default=None, help="prompt tokens (default 512; --tiny 16)")
    ap.add_argument("--steps", type=int, default=None, help="decode steps profiled (default 32; --tiny 2)")
    ap.add_argument("--prefill", action="store_true", help="profile the prefill of one prompt instead")
    ap.add_argument("--gpus", default="0", help="GPU ordinals; several: tensor-parallel")
    ap.add_argument("--top", type=int, default=25, help="kernels listed per device")
    ap.add_argument("--timeline", type=int, default=0, help="print this many kernels of one step in launch order")
    ap.add_argument("--keep-models", type=Path, default=None, help="write (or find) the models here and keep them")
    ap.add_argument("--tiny", action="store_true", help="tiny shapes on the CPU, without the profiler")
    ap.add_argument("--settings", default="", help="tuning knobs and pipeline settings as llm_gpu.py's --compare "
                    "variants take them, e.g. kv_cache_format=bfloat16,attention.splits=4")
    args = ap.parse_args()
    args.gpus = [int(g) for g in args.gpus.split(",") if g]
    args.prompt = args.prompt or (16 if args.tiny else 512)
    args.steps = args.steps or (2 if args.tiny else 32)
    rows = []
    with tempfile.TemporaryDirectory() as t:
        tmp = args.keep_models or Path(t)
        tmp.mkdir(parents=True, exist_ok=True)
        for name in [m for m in args.models.split(",") if m]:
            t0 = time.perf_counter()
            row = profile_model(name, tmp, args)
            show(row, args.timeline)
            print(f"({time.perf_counter() - t0:.1f} s)", flush=True)
            rows.append(row)
    if args.tiny:
        return
    import torch

    device = torch.cuda.get_device_name()
    key = lambda r: (r["model"], r["measure"], r["tp"], r["batch"], r["prompt"], r.get("settings", ""))  # noqa: E731
    try:
        old = json.loads(result_path("profile_llm", device).read_text()).get("rows", [])
    except (OSError, ValueError):
        old = []
    mine = {key(r) for r in rows}
    write("profile_llm", device, [r for r in old if key(r) not in mine] + rows,
          " ".join(["python benchmarks/profile_llm.py", *sys.argv[1:]]), table=False)


if __name__ == "__main__":
    main()
