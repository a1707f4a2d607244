"""``Qwen3ForCausalLM``: the Llama graph with per-head RMSNorm on q and k."""

import dataclasses

from max.pipelines.architectures.llama3.arch import llama_arch
from max.pipelines.lib.config import RopeType

qwen3_arch = dataclasses.replace(
    llama_arch, name="Qwen3ForCausalLM", example_repo_ids=["Qwen/Qwen3-0.6B", "Qwen/Qwen3-8B"],
    rope_type=RopeType.neox, gguf_names=["qwen3"],
)
ARCHITECTURES = [qwen3_arch]
