"""Time to stage a ResNet-50-style graph (about 200 ops: convolutions, bias adds, relus and
residual adds on NHWC activations with a symbolic batch), built from Weights so that no weight
data is copied. Reports the median of repeated builds; writes JSON to benchmarks/results/.

    python benchmarks/graph_staging.py
"""

import platform
import statistics
import sys
import time

from common import write
from max.dtype import DType
from max.graph import DeviceRef, Graph, TensorType, Weight, ops

CPU = DeviceRef.CPU()


class Builder:
    def __init__(self) -> None:
        self.n = 0

    def conv(self, x, c_in, c_out, k, stride=1, relu=True):
        self.n += 1
        w = Weight(f"conv{self.n}.weight", DType.float32, (k, k, c_in, c_out), CPU)
        b = Weight(f"conv{self.n}.bias", DType.float32, (c_out,), CPU)
        pad = k // 2
        y = ops.conv2d(x, w, stride=(stride, stride), padding=(pad, pad, pad, pad)) + b
        return ops.relu(y) if relu else y

    def bottleneck(self, x, c_in, mid, c_out, stride):
        y = self.conv(x, c_in, mid, 1)
        y = self.conv(y, mid, mid, 3, stride)
        y = self.conv(y, mid, c_out, 1, relu=False)
        shortcut = self.conv(x, c_in, c_out, 1, stride, relu=False) if stride != 1 or c_in != c_out else x
        return ops.relu(y + shortcut)


def resnet50_graph() -> Graph:
    b = Builder()
    with Graph("resnet50", input_types=[TensorType(DType.float32, ("batch", 224, 224, 3), CPU)]) as g:
        x = b.conv(g.inputs[0], 3, 64, 7, 2)
        x = ops.max_pool2d(x, 3, stride=2, padding=1)
        c_in = 64
        for mid, blocks, stride in [(64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2)]:
            for i in range(blocks):
                x = b.bottleneck(x, c_in, mid, mid * 4, stride if i == 0 else 1)
                c_in = mid * 4
        x = ops.mean(ops.reshape(x, ("batch", -1, c_in)), axis=1)
        w = Weight("fc.weight", DType.float32, (c_in, 1000), CPU)
        g.output(ops.matmul(ops.reshape(x, ("batch", c_in)), w))
    return g


def main() -> None:
    resnet50_graph()  # warm up imports and caches
    times, ops_count = [], 0
    for _ in range(20):
        start = time.perf_counter()
        g = resnet50_graph()
        times.append(time.perf_counter() - start)
        ops_count = g._ir.num_nodes
    median_ms = statistics.median(times) * 1e3
    rows = [{"graph": "resnet50 (symbolic batch)", "ops": ops_count, "median_ms": round(median_ms, 2),
             "per_op_us": round(median_ms * 1e3 / ops_count, 1), "goal_ms": 50}]
    write("graph_staging", platform.processor() or platform.machine(), rows, " ".join([sys.executable, *sys.argv]))


if __name__ == "__main__":
    main()
