"""A two-layer MLP built from ``max.nn`` graph layers, loaded with numpy weights and checked
against numpy.

    python examples/mlp.py
"""

import numpy as np

from max import driver, engine
from max.dtype import DType
from max.graph import DeviceRef, Graph, TensorType, ops
from max.nn import legacy as nn

device = driver.Accelerator() if driver.accelerator_count() else driver.CPU()
ref = DeviceRef.from_device(device)

# Layers declare their weights; the values are supplied at load time (load_state_dict).
mlp = nn.Sequential([nn.Linear(16, 32, DType.float32, ref, has_bias=True), nn.Linear(32, 4, DType.float32, ref)])
rng = np.random.default_rng(0)
weights = {
    name: rng.standard_normal([int(d) for d in w.shape]).astype(np.float32) * 0.3
    for name, w in mlp.raw_state_dict().items()
}
mlp.load_state_dict(weights)

# Staging the graph: the layers' ops are recorded, checked and typed as they are called.
with Graph("mlp", input_types=[TensorType(DType.float32, ("batch", 16), ref)]) as graph:
    x = graph.inputs[0].tensor
    graph.output(ops.softmax(mlp(x)))

session = engine.InferenceSession(devices=[device])
model = session.load(graph, weights_registry=mlp.state_dict())

batch = rng.standard_normal((8, 16)).astype(np.float32)
probs = model.execute(driver.Buffer.from_numpy(batch).to(device))[0]
got = np.asarray(probs.to(driver.CPU()))

# The same network in numpy (Linear computes x @ W.T + b, W being [out, in]).
h = batch @ weights["layers.0.weight"].T + weights["layers.0.bias"]
logits = h @ weights["layers.1.weight"].T
want = np.exp(logits - logits.max(-1, keepdims=True))
want /= want.sum(-1, keepdims=True)
print("class probabilities of the first row:", np.round(got[0], 3))
print("max difference from numpy:", float(np.abs(got - want).max()))
assert np.allclose(got, want, atol=1e-5)
