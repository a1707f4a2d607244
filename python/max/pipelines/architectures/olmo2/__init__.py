"""``Olmo2ForCausalLM`` (AllenAI OLMo 2, from safetensors or GGUF)."""

import dataclasses

from max.pipelines.architectures.llama3.arch import llama_arch
from max.pipelines.architectures.olmo2.model import OLMO2
from max.pipelines.lib.config import RopeType

olmo2_arch = dataclasses.replace(
    llama_arch, name="Olmo2ForCausalLM",
    example_repo_ids=["allenai/OLMo-2-0425-1B-Instruct", "allenai/OLMo-2-1124-7B-Instruct"],
    pipeline_model=OLMO2, rope_type=RopeType.neox, gguf_names=["olmo2"],
)
ARCHITECTURES = [olmo2_arch]
