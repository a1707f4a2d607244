"""``Gemma3ForCausalLM`` (Gemma 3 text models, from safetensors or GGUF)."""

import dataclasses

from max.pipelines.architectures.gemma3.model import GEMMA3
from max.pipelines.architectures.llama3.arch import llama_arch
from max.pipelines.lib.config import RopeType

gemma3_arch = dataclasses.replace(
    llama_arch, name="Gemma3ForCausalLM", example_repo_ids=["google/gemma-3-1b-it", "google/gemma-3-4b-it"],
    pipeline_model=GEMMA3, rope_type=RopeType.neox, gguf_names=["gemma3"],
)
ARCHITECTURES = [gemma3_arch]
