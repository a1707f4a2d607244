"""Generate text with SmolLM2 (or any supported model) through the pipeline API:
``LLM(PipelineConfig(...))`` loads the model, ``generate`` completes prompts, ``chat`` applies
the model's chat template.

    python examples/smollm2_generate.py PATH/TO/SmolLM2-135M-Instruct.Q4_1.gguf "Your prompt"

The path may also be a Hugging Face model directory (config.json, safetensors, tokenizer.json).
"""

import sys

from max.entrypoints.llm import LLM
from max.interfaces import SamplingParams
from max.pipelines import PipelineConfig


def main() -> None:
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    prompt = sys.argv[2] if len(sys.argv) > 2 else "The capital of France is"
    llm = LLM(PipelineConfig(model_path=sys.argv[1], max_length=512))
    # Greedy decoding (the default sampling is top_k=1).
    (greedy,) = llm.generate([prompt], max_new_tokens=16)
    print("greedy:", greedy)
    # Seeded sampling: the same seed gives the same text.
    params = SamplingParams(top_k=40, temperature=0.8, seed=7)
    print("sampled:", llm.generate([prompt], max_new_tokens=16, sampling_params=params)[0])
    print("chat:", llm.chat([{"role": "user", "content": prompt}], max_new_tokens=16)[0])


if __name__ == "__main__":
    main()
