"""``MistralForCausalLM``: the Llama graph, with every layer's attention limited to the last
``sliding_window`` tokens when the config sets one (Mistral 7B v0.1: 4096; later Mistral and
Mistral-Nemo models set none and attend to the whole sequence)."""

import dataclasses

from max.pipelines.architectures.llama3.arch import llama_arch

mistral_arch = dataclasses.replace(
    llama_arch, name="MistralForCausalLM",
    example_repo_ids=["mistralai/Mistral-7B-Instruct-v0.3", "mistralai/Mistral-Nemo-Instruct-2407"],
    gguf_names=[],  # llama.cpp converts Mistral checkpoints to its "llama" architecture
)
ARCHITECTURES = [mistral_arch]
