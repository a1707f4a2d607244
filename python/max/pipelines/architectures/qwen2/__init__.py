"""``Qwen2ForCausalLM``: the Llama graph with q/k/v biases and half-split rotary embeddings."""

import dataclasses

from max.pipelines.architectures.llama3.arch import llama_arch
from max.pipelines.lib.config import RopeType

qwen2_arch = dataclasses.replace(
    llama_arch, name="Qwen2ForCausalLM", example_repo_ids=["Qwen/Qwen2.5-0.5B-Instruct", "Qwen/Qwen2.5-7B-Instruct"],
    rope_type=RopeType.neox, gguf_names=["qwen2"],
)
ARCHITECTURES = [qwen2_arch]
