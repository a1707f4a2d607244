"""MAX's ``max.pipelines.core``: the request contexts (``TextContext``; ``EmbeddingContext`` for
encoders). The vision, speech and pixel contexts of MAX's multimodal pipelines are not here:
those pipelines are not supported."""

from max.pipelines.lib.context import EmbeddingContext, TextContext

__all__ = ["EmbeddingContext", "TextContext"]
