"""``Gemma2ForCausalLM`` (Gemma 2 text models, from safetensors or GGUF): the Gemma 3 graph
without q/k norms, every other layer sliding, logits soft-capped (gemma3/model.py)."""

import dataclasses

from max.pipelines.architectures.gemma3 import gemma3_arch

gemma2_arch = dataclasses.replace(
    gemma3_arch, name="Gemma2ForCausalLM", example_repo_ids=["google/gemma-2-2b-it", "google/gemma-2-9b-it"],
    gguf_names=["gemma2"],
)
ARCHITECTURES = [gemma2_arch]
