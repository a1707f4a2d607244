"""The eager API: ``max.tensor.Tensor`` runs each op as it is called, ``max.functional`` holds
the ops, ``max.nn`` modules hold parameters, and ``F.functional`` fuses a function into one
compiled graph.

    python examples/eager.py
"""

import numpy as np

from max import functional as F
from max import random
from max.nn import Linear
from max.tensor import Tensor

x = Tensor.constant([[1.0, -2.0], [3.0, 4.0]])
y = F.relu(x @ x.T + 1)              # runs now; each op is a small graph, compiled once and cached
print("relu(x @ x.T + 1) =", y.to_numpy().tolist())

random.set_seed(0)                   # seeded random tensors (drawn on the host)
layer = Linear(2, 3)                 # an eager module: random weights, forward on Tensors
out = layer(x)
print("Linear(2, 3) on a [2, 2] tensor gives shape", [int(d) for d in out.shape])

# One fused graph per call: the linear layer, the relu and the row sums compile together
# (reductions run over the last axis by default and keep it: the result is [2, 1]).
step = F.functional(lambda t: F.relu(layer(t)).sum())
total = step(x)
assert isinstance(total, Tensor)
print("fused result:", total.to_numpy().ravel().tolist())

# The eager result matches numpy on the layer's own parameters.
bias = layer.bias                    # a Tensor (Linear(..., bias=False) has the int 0 here)
assert isinstance(bias, Tensor)
w, b = layer.weight.to_numpy(), bias.to_numpy()
want = np.maximum(x.to_numpy() @ w.T + b, 0).sum(axis=-1)
assert np.allclose(total.to_numpy().ravel(), want, rtol=1e-5)
