"""``Phi3ForCausalLM`` (Phi-3, Phi-3.5 and Phi-4-mini text models, from safetensors or GGUF)."""

import dataclasses

from max.pipelines.architectures.llama3.arch import llama_arch
from max.pipelines.architectures.phi3.model import PHI3
from max.pipelines.lib.config import RopeType

phi3_arch = dataclasses.replace(
    llama_arch, name="Phi3ForCausalLM",
    example_repo_ids=["microsoft/Phi-3-mini-4k-instruct", "microsoft/Phi-3.5-mini-instruct",
                      "microsoft/Phi-4-mini-instruct"],
    pipeline_model=PHI3, rope_type=RopeType.neox, gguf_names=["phi3"],
)
ARCHITECTURES = [phi3_arch]
