"""``SmolLM3ForCausalLM`` (Hugging Face SmolLM3, from safetensors or GGUF): the Llama graph with
no rotary embedding in every fourth layer (``no_rope_layers``; llama.cpp's GGUF fixes the
interval at 4)."""

import dataclasses

from max.pipelines.architectures.llama3.arch import llama_arch

smollm3_arch = dataclasses.replace(
    llama_arch, name="SmolLM3ForCausalLM", example_repo_ids=["HuggingFaceTB/SmolLM3-3B"], gguf_names=["smollm3"],
)
ARCHITECTURES = [smollm3_arch]
