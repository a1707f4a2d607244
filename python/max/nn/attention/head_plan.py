"""Which attention heads each device of a tensor-parallel group computes.

Query heads come in groups that read one KV head each (grouped-query attention). With at least
as many KV heads as devices, each device takes whole groups, as evenly as can be: its KV heads
and their query heads. With more devices than KV heads, each KV head's query heads are split
over an even share of the devices, and every device of that share holds (a copy of) the KV head.
Either way a device's query heads are a whole number of its KV heads' groups or part of one
group, so its attention reads KV head ``h // (q_heads / kv_heads)`` for local query head ``h``,
as the attention op does. Devices may get unequal shares (SmolLM2's 9 heads over 2 devices)."""

from __future__ import annotations

from max.graph.sharding import even_ranges
from max.nn.kv_cache.cache_params import kv_head_ranges

Range = tuple[int, int]


def head_plan(n_heads: int, n_kv_heads: int, n_devices: int) -> list[tuple[Range, Range]]:
    """Per device: its query heads ``[qs, qe)`` and KV heads ``[ks, ke)``."""
    if n_kv_heads < 1 or n_heads % n_kv_heads:
        raise ValueError(f"{n_heads} attention heads are not a multiple of {n_kv_heads} kv heads")
    if n_devices > n_heads:
        raise ValueError(f"cannot split {n_heads} attention heads over {n_devices} devices")
    group = n_heads // n_kv_heads
    kv = kv_head_ranges(n_kv_heads, n_devices)
    if n_devices <= n_kv_heads:
        return [((ks * group, ke * group), (ks, ke)) for ks, ke in kv]
    plan: list[tuple[Range, Range]] = []
    for h in range(n_kv_heads):
        share = sum(1 for r in kv if r == (h, h + 1))
        if share > group:
            raise ValueError(
                f"cannot split kv head {h}'s {group} query heads over {share} devices "
                f"({n_heads} heads, {n_kv_heads} kv heads, {n_devices} devices)"
            )
        for qs, qe in even_ranges(group, share):
            plan.append(((h * group + qs, h * group + qe), (h, h + 1)))
    return plan


__all__ = ["head_plan"]
