"""CPU float32 matmul, an MLP and a small conv net through max.engine against numpy (and torch
on the CPU when it is installed), side by side in one process. JSON to benchmarks/results/.

    python benchmarks/cpu_matmul.py
"""

import platform
import statistics
import sys
import time

import numpy as np

from common import write
from max import driver, engine
from max.dtype import DType
from max.graph import DeviceRef, Graph, TensorType, ops

CPU = DeviceRef.CPU()


def median_time(fn, reps=7):
    fn()
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def matmul_model(session, m, k, n):
    with Graph(f"mm{m}x{k}x{n}", input_types=[TensorType(DType.float32, (m, k), CPU), TensorType(DType.float32, (k, n), CPU)]) as g:
        g.output(ops.matmul(*g.inputs))
    return session.load(g)


def mlp_model(session, batch, width, depth, weights):
    with Graph("mlp", input_types=[TensorType(DType.float32, ("batch", width), CPU)]) as g:
        x = g.inputs[0].tensor
        for i in range(depth):
            x = ops.relu(ops.matmul(x, ops.constant(weights[i], DType.float32, CPU)))
        g.output(x)
    return session.load(g)


def main() -> None:
    session = engine.InferenceSession(devices=[driver.CPU()])
    rng = np.random.default_rng(0)
    rows = []
    try:
        import torch
    except ImportError:
        torch = None
    for m, k, n in [(1024, 1024, 1024), (4096, 4096, 512)]:
        a = rng.standard_normal((m, k)).astype(np.float32)
        b = rng.standard_normal((k, n)).astype(np.float32)
        model = matmul_model(session, m, k, n)
        ba, bb = driver.Buffer.from_numpy(a), driver.Buffer.from_numpy(b)
        ours = median_time(lambda: model.execute(ba, bb))
        ref = median_time(lambda: a @ b)
        row = {"op": f"matmul f32 {m}x{k}x{n}", "max_ms": round(ours * 1e3, 2), "numpy_ms": round(ref * 1e3, 2),
               "ratio_vs_numpy": round(ref / ours, 3), "max_gflops": round(2 * m * k * n / ours / 1e9, 1)}
        if torch is not None:
            ta, tb = torch.from_numpy(a), torch.from_numpy(b)
            row["torch_ms"] = round(median_time(lambda: ta @ tb) * 1e3, 2)
        rows.append(row)
    width, depth = 1024, 8
    weights = [rng.standard_normal((width, width)).astype(np.float32) / 32 for _ in range(depth)]
    model = mlp_model(session, 64, width, depth, weights)
    x = rng.standard_normal((64, width)).astype(np.float32)

    def mlp_numpy():
        y = x
        for w in weights:
            y = np.maximum(y @ w, 0)
        return y

    out = model.execute(x)[0].to_numpy()
    assert np.allclose(out, mlp_numpy(), rtol=1e-3, atol=1e-3)
    ours, ref = median_time(lambda: model.execute(x)), median_time(mlp_numpy)
    rows.append({"op": f"mlp {depth}x{width} batch 64", "max_ms": round(ours * 1e3, 2), "numpy_ms": round(ref * 1e3, 2),
                 "ratio_vs_numpy": round(ref / ours, 3)})
    # A small conv net: three 3x3 convs (NHWC, RSCF) with bias and relu, batch 8, 32x32x32.
    convs = [(rng.standard_normal((3, 3, 32, 32)).astype(np.float32) / 16, rng.standard_normal(32).astype(np.float32)) for _ in range(3)]
    with Graph("convnet", input_types=[TensorType(DType.float32, ("batch", 32, 32, 32), CPU)]) as g:
        y = g.inputs[0].tensor
        for w, b in convs:
            y = ops.relu(ops.conv2d(y, ops.constant(w, DType.float32, CPU), padding=(1, 1, 1, 1)) + ops.constant(b, DType.float32, CPU))
        g.output(y)
    model = session.load(g)
    x = rng.standard_normal((8, 32, 32, 32)).astype(np.float32)

    def conv_numpy():
        y = x
        for w, b in convs:
            p = np.pad(y, ((0, 0), (1, 1), (1, 1), (0, 0)))
            cols = np.stack([p[:, i:i + 32, j:j + 32, :] for i in range(3) for j in range(3)], axis=3)
            y = np.maximum(cols.reshape(8 * 32 * 32, 9 * 32) @ w.reshape(9 * 32, 32) + b, 0).reshape(8, 32, 32, 32)
        return y

    assert np.allclose(model.execute(x)[0].to_numpy(), conv_numpy(), rtol=1e-3, atol=1e-3)
    ours, ref = median_time(lambda: model.execute(x)), median_time(conv_numpy)
    row = {"op": "convnet 3x conv3x3 32ch 32x32 batch 8", "max_ms": round(ours * 1e3, 2), "numpy_ms": round(ref * 1e3, 2),
           "ratio_vs_numpy": round(ref / ours, 3)}
    if torch is not None:
        tx = torch.from_numpy(x).permute(0, 3, 1, 2)
        tw = [(torch.from_numpy(w).permute(3, 2, 0, 1).contiguous(), torch.from_numpy(b)) for w, b in convs]

        def conv_torch():
            y = tx
            for w, b in tw:
                y = torch.relu(torch.nn.functional.conv2d(y, w, b, padding=1))
            return y

        row["torch_ms"] = round(median_time(conv_torch) * 1e3, 2)
    rows.append(row)
    write("cpu_matmul", platform.processor() or platform.machine(), rows, " ".join([sys.executable, *sys.argv]))


if __name__ == "__main__":
    main()
