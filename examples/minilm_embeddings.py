"""Sentence embeddings with all-MiniLM-L6-v2 (a BERT encoder) through the pipeline API, and
a similarity search over them.

    python examples/minilm_embeddings.py PATH/TO/all-MiniLM-L6-v2

The directory holds config.json, model.safetensors and tokenizer.json (a sentence-transformers
checkout: its pooling and normalisation settings are read too).
"""

import sys

import numpy as np

from max.entrypoints.llm import LLM
from max.pipelines import PipelineConfig


def main() -> None:
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    llm = LLM(PipelineConfig(model_path=sys.argv[1]))
    corpus = [
        "A man is eating food.",
        "A man is riding a horse.",
        "The new movie is awesome.",
        "A cheetah is running behind its prey.",
    ]
    vectors = llm.encode(corpus)          # [4, 384] float32, one unit-length row per sentence
    print("embeddings:", vectors.shape, vectors.dtype)
    query = llm.encode(["Someone is having a meal."])[0]
    scores = vectors @ query              # cosine similarities (the rows are normalised)
    for i in np.argsort(-scores):
        print(f"{scores[i]:.3f}  {corpus[i]}")
    assert corpus[int(np.argmax(scores))] == "A man is eating food."


if __name__ == "__main__":
    main()
