"""A small CNN (convolution, ReLU, max pooling, a dense head) staged with ``max.graph.ops`` on
NHWC images, checked against a numpy reference.

    python examples/cnn.py
"""

import numpy as np

from max import driver, engine
from max.dtype import DType
from max.graph import DeviceRef, Graph, TensorType, ops

device = driver.Accelerator() if driver.accelerator_count() else driver.CPU()
ref = DeviceRef.from_device(device)
rng = np.random.default_rng(0)

# MAX's default layouts: images NHWC, filters RSCF ([height, width, in channels, out channels]).
filt = rng.standard_normal((3, 3, 1, 8)).astype(np.float32) * 0.3
bias = rng.standard_normal(8).astype(np.float32) * 0.1
dense = rng.standard_normal((14 * 14 * 8, 10)).astype(np.float32) * 0.05

with Graph("cnn", input_types=[TensorType(DType.float32, ("batch", 28, 28, 1), ref)]) as graph:
    x = graph.inputs[0].tensor
    w = ops.constant(filt, DType.float32, ref)
    b = ops.constant(bias, DType.float32, ref)
    h = ops.relu(ops.conv2d(x, w, padding=(1, 1, 1, 1), bias=b))   # [batch, 28, 28, 8]
    h = ops.max_pool2d(h, kernel_size=(2, 2), stride=2)            # [batch, 14, 14, 8]
    h = ops.reshape(h, ("batch", 14 * 14 * 8))
    graph.output(h @ ops.constant(dense, DType.float32, ref))      # [batch, 10] logits

model = engine.InferenceSession(devices=[device]).load(graph)
images = rng.random((2, 28, 28, 1)).astype(np.float32)
logits = np.asarray(model.execute(driver.Buffer.from_numpy(images).to(device))[0].to(driver.CPU()))

# numpy reference: the same convolution as a sum over the 3x3 window, then pool and dense.
padded = np.pad(images, ((0, 0), (1, 1), (1, 1), (0, 0)))
conv = sum(
    padded[:, i : i + 28, j : j + 28, :] @ filt[i, j] for i in range(3) for j in range(3)
) + bias
pooled = np.maximum(conv, 0).reshape(2, 14, 2, 14, 2, 8).max(axis=(2, 4))
want = pooled.reshape(2, -1) @ dense
print("predicted classes:", logits.argmax(-1))
print("max difference from numpy:", float(np.abs(logits - want).max()))
assert np.allclose(logits, want, atol=1e-4)
