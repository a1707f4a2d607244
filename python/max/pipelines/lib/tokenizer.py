"""MAX's ``max.pipelines.lib.tokenizer`` path to the text tokenizers of ``max.pipelines.tokenizer``."""

from max.pipelines.tokenizer import (
    IdentityPipelineTokenizer,
    TextTokenizer,
    max_tokens_to_generate,
    run_with_default_executor,
)

__all__ = ["IdentityPipelineTokenizer", "TextTokenizer", "max_tokens_to_generate", "run_with_default_executor"]
