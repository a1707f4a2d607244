"""Generate text offline with the Python API (``max.entrypoints.llm.LLM``).

    python examples/generate.py PATH/TO/model.gguf-or-directory "Your prompt"
"""

import sys

from max.entrypoints.llm import LLM
from max.interfaces import SamplingParams
from max.pipelines import PipelineConfig


def main() -> None:
    model = sys.argv[1]
    prompt = sys.argv[2] if len(sys.argv) > 2 else "The capital of France is"
    llm = LLM(PipelineConfig(model_path=model, max_length=1024))
    (greedy,) = llm.generate([prompt], max_new_tokens=32)
    print("greedy:", greedy)
    sampled = llm.generate([prompt], max_new_tokens=32, sampling_params=SamplingParams(top_k=40, temperature=0.8, seed=7))
    print("sampled:", sampled[0])
    print("chat:", llm.chat([{"role": "user", "content": prompt}], max_new_tokens=48)[0])


if __name__ == "__main__":
    main()
