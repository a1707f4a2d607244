"""Stage a graph, compile it and run it: the core loop of max.graph / max.engine.

    python examples/graph_basics.py
"""

import numpy as np

from max import driver, engine
from max.dtype import DType
from max.graph import DeviceRef, Graph, TensorType, ops

device = driver.Accelerator() if driver.accelerator_count() else driver.CPU()
ref = DeviceRef.from_device(device)
with Graph("mlp", input_types=[TensorType(DType.float32, ("batch", 64), ref)]) as g:
    x = g.inputs[0].tensor
    w = ops.constant(np.random.randn(64, 32).astype(np.float32), DType.float32, ref)
    g.output(ops.relu(x @ w + 1.0))          # matmul, bias and relu: one fused kernel on the GPU
model = engine.InferenceSession(devices=[driver.CPU(), device]).load(g)
batch = np.random.randn(4, 64).astype(np.float32)
out = model.execute(driver.Buffer.from_numpy(batch).to(device))[0]
print(out.to(driver.CPU()).to_numpy().shape)   # (4, 32)
