"""A quantized GGUF Llama on the GPU computes in float32 by default and in bfloat16 with
``--quantization-encoding bfloat16`` (activations, KV cache, norms, attention; block products
with f32 accumulation): the two agree on the greedy tokens wherever the choice is
clear, with teacher-forced logits within bf16's precision (the pattern of
test_tensor_parallel.py's assert_greedy_agrees)."""

import numpy as np
import pytest

from max.driver import DeviceSpec
from max.dtype import DType
from max.interfaces import SamplingParams
from max.pipelines import PipelineConfig
from max.pipelines.lib.generate import Generator
from max.pipelines.lib.pipeline import load_pipeline
from reference.checkpoints import write_checkpoint
from test_tensor_parallel import assert_greedy_agrees


@pytest.mark.gpu
@pytest.mark.parametrize("quant", ["Q4_0", "Q8_0"])
def test_gguf_on_gpu_bf16_agrees_with_float32(gpu, tmp_path, quant):
    ckpt = write_checkpoint(directory=tmp_path, seed=7, arch="llama", gguf_quant=quant)
    kw = dict(model_path=str(ckpt["gguf"]), max_length=64, kv_cache_page_size=16,
              device_specs=[DeviceSpec.accelerator(gpu.id)])
    bf16 = load_pipeline(PipelineConfig(quantization_encoding="bfloat16", **kw))
    f32 = load_pipeline(PipelineConfig(**kw))
    assert bf16.model.dtype == DType.bfloat16 and f32.model.dtype == DType.float32
    sp = SamplingParams(top_k=1, max_new_tokens=16, ignore_eos=True)
    prompt = np.random.default_rng(3).integers(5, ckpt["config"]["vocab_size"], 12).tolist()
    gen = Generator(f32)
    tokens = list(gen.run([gen.context(prompt, sp)])[0].tokens)
    decisive = assert_greedy_agrees(f32, bf16, prompt, tokens, rel=3e-2)
    assert len(decisive) >= len(tokens) // 2, (decisive, tokens)
