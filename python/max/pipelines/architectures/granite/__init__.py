"""``GraniteForCausalLM`` (IBM Granite 3.x dense models): the Llama graph with four multipliers:
the token embeddings', each residual branch's, the attention scale and the logits' divisor."""

import dataclasses

from max.pipelines.architectures.llama3.arch import llama_arch

granite_arch = dataclasses.replace(
    llama_arch, name="GraniteForCausalLM",
    example_repo_ids=["ibm-granite/granite-3.3-2b-instruct", "ibm-granite/granite-3.3-8b-instruct"],
    gguf_names=["granite"],
)
ARCHITECTURES = [granite_arch]
