"""Llama-family decoders."""

from max.pipelines.architectures.llama3.arch import llama_arch

ARCHITECTURES = [llama_arch]
