"""``Sequential``: calls its layers in order, each on the previous one's result. Layers may be
modules or plain functions such as ``ops.relu``; modules are named "layers.0", "layers.1", ...
in the state dict."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from max.nn.layer import LayerList, Module


class Sequential(Module):
    """A chain of layers applied in order."""

    def __init__(self, layers: Sequence[Any]) -> None:
        super().__init__()
        for i, layer in enumerate(layers):
            if not callable(layer):
                raise TypeError(f"Sequential: layers[{i}] is not callable: {layer!r}")
        self.layers = LayerList(layers)

    def __call__(self, x: Any) -> Any:
        for layer in self.layers:
            x = layer(x)
        return x

    def __len__(self) -> int:
        return len(self.layers)

    def __getitem__(self, i: int) -> Any:
        return self.layers[i]


__all__ = ["Sequential"]
