"""The ``LlamaForCausalLM`` entry of the registry (Llama 2/3.x, SmolLM2; also GGUF files of
llama.cpp's "llama" and "mistral" architectures)."""

from max.interfaces import PipelineTask
from max.pipelines.architectures.llama3.model import LLAMA
from max.pipelines.lib.config import RopeType
from max.pipelines.lib.registry import SupportedArchitecture, SupportedEncoding, WeightsFormat
from max.pipelines.lib.tokenizer_factory import text_tokenizer

ENCODINGS = {e: [] for e in (SupportedEncoding.float32, SupportedEncoding.bfloat16, SupportedEncoding.float16,
                             SupportedEncoding.q4_0, SupportedEncoding.q4_1, SupportedEncoding.q8_0,
                             SupportedEncoding.q4_k, SupportedEncoding.q5_k, SupportedEncoding.q6_k)}

llama_arch = SupportedArchitecture(
    name="LlamaForCausalLM",
    example_repo_ids=["HuggingFaceTB/SmolLM2-135M-Instruct", "meta-llama/Llama-3.2-1B-Instruct",
                      "meta-llama/Llama-3.1-8B-Instruct"],
    default_encoding=SupportedEncoding.bfloat16,
    supported_encodings=ENCODINGS,
    pipeline_model=LLAMA,
    task=PipelineTask.TEXT_GENERATION,
    tokenizer=text_tokenizer,
    default_weights_format=WeightsFormat.safetensors,
    rope_type=RopeType.normal,
    gguf_names=["llama", "mistral"],
)
