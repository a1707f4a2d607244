"""The offline Python API (MAX's ``max.entrypoints.llm.LLM``)::

    from max.entrypoints.llm import LLM
    from max.pipelines import PipelineConfig

    llm = LLM(PipelineConfig(model_path="SmolLM2-135M-Instruct.Q4_1.gguf"))
    print(llm.generate(["The capital of France is"], max_new_tokens=20))

``generate`` takes text prompts (or token-id lists) and returns the generated texts; a
``SamplingParams`` chooses how tokens are picked (default greedy here, for reproducible
offline runs; its own ``max_new_tokens``, when set, wins over the argument's). ``chat``
applies the model's chat template first. For embedding models
(``BertModel``), ``encode`` returns one vector per prompt."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from max.interfaces import PipelineTask, SamplingParams
from max.pipelines import PIPELINE_REGISTRY, PipelineConfig
from max.pipelines.lib.generate import GenerationResult, Generator
from max.pipelines.lib.model_source import resolve
from max.pipelines.lib.pipeline import load_pipeline


def _prompt_list(prompts: Any) -> list[Any]:
    """`prompts` as a list of prompts (strings or lists of token ids); TypeError otherwise."""
    def is_ids(p: Any) -> bool:
        return isinstance(p, (list, tuple, np.ndarray)) and all(isinstance(t, (int, np.integer)) for t in p)

    if isinstance(prompts, str) or (is_ids(prompts) and len(prompts) > 0):
        return [prompts]
    if isinstance(prompts, (list, tuple)) and all(isinstance(p, str) or is_ids(p) for p in prompts):
        return list(prompts)
    raise TypeError(f"LLM.generate: prompts must be a string, a list of token ids, or a list of either; got "
                    f"{type(prompts).__name__}")


def _with_limit(sampling_params: SamplingParams | None, max_new_tokens: int | None) -> SamplingParams:
    """The sampling parameters of a call: `sampling_params` (default greedy) with its own
    max_new_tokens, or `max_new_tokens` where it sets none."""
    sp = sampling_params or SamplingParams(top_k=1)
    if sp.max_new_tokens is None and max_new_tokens is not None:
        sp = SamplingParams(**{**sp.__dict__, "max_new_tokens": max_new_tokens})
    return sp


class LLM:
    """A model loaded once, for generating text (or embeddings) from Python."""

    def __init__(self, pipeline_config: PipelineConfig) -> None:
        if not isinstance(pipeline_config, PipelineConfig):
            raise TypeError(f"LLM: expected a PipelineConfig, got {type(pipeline_config).__name__}")
        self.pipeline_config = pipeline_config
        mc = pipeline_config.model
        source = resolve(mc.model_path, mc.weight_path)
        self.task = PIPELINE_REGISTRY.architecture_for(source).task
        self._pipeline = load_pipeline(pipeline_config, task=self.task)
        self.last_results: list[GenerationResult] = []

    @property
    def tokenizer(self) -> Any:
        """The pipeline's tokenizer."""
        return self._pipeline.tokenizer

    def _generator(self) -> Generator:
        if self.task != PipelineTask.TEXT_GENERATION:
            raise ValueError(f"{self.pipeline_config.model_path} is an embedding model: use encode()")
        return Generator(self._pipeline)

    def generate(
        self,
        prompts: str | Sequence[str] | Sequence[Sequence[int]],
        max_new_tokens: int | None = 100,
        use_tqdm: bool = True,
        sampling_params: SamplingParams | None = None,
    ) -> list[str]:
        """The text each prompt continues with; a prompt is a string or a list of token ids
        (``prompts`` one prompt or a list of them)."""
        prompts = _prompt_list(prompts)
        sp = _with_limit(sampling_params, max_new_tokens)
        gen = self._generator()
        ctxs = [gen.context(p, sp) for p in prompts]
        self.last_results = gen.run(ctxs)
        self.last_stats = gen.stats
        return [r.text for r in self.last_results]

    def chat(self, messages: Sequence[dict[str, Any]] | Sequence[Sequence[dict[str, Any]]], max_new_tokens: int | None = 100,
             sampling_params: SamplingParams | None = None) -> list[str]:
        """The assistant's reply to each conversation (the chat template applied)."""
        convs = [messages] if messages and isinstance(messages[0], dict) else messages
        prompts = [self.tokenizer.apply_chat_template(list(c)) for c in convs]
        gen = self._generator()
        sp = _with_limit(sampling_params, max_new_tokens)
        ctxs = [gen.context(p, sp, add_special_tokens=False) for p in prompts]
        self.last_results = gen.run(ctxs)
        return [r.text for r in self.last_results]

    def encode(self, prompts: str | Sequence[str]) -> np.ndarray:
        """One embedding per prompt, ``[len(prompts), hidden]`` float32."""
        if self.task != PipelineTask.EMBEDDINGS_GENERATION:
            raise ValueError(f"{self.pipeline_config.model_path} is a text-generation model, not an embedding model")
        if isinstance(prompts, str):
            prompts = [prompts]
        return self._pipeline.encode(list(prompts))


__all__ = ["LLM"]
