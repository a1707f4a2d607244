"""``BertModel`` sentence encoders (sentence-transformers: mean pooling, normalisation)."""

from types import SimpleNamespace

from max.interfaces import PipelineTask
from max.pipelines.architectures.bert.model import BertEncoder, rename
from max.pipelines.lib.registry import SupportedArchitecture, SupportedEncoding, WeightsFormat
from max.pipelines.lib.tokenizer_factory import text_tokenizer

BERT = SimpleNamespace(build=BertEncoder, rename=rename)

bert_arch = SupportedArchitecture(
    name="BertModel",
    example_repo_ids=["sentence-transformers/all-MiniLM-L6-v2", "sentence-transformers/all-mpnet-base-v2"],
    default_encoding=SupportedEncoding.float32,
    supported_encodings={SupportedEncoding.float32: [], SupportedEncoding.bfloat16: []},
    pipeline_model=BERT,
    task=PipelineTask.EMBEDDINGS_GENERATION,
    tokenizer=text_tokenizer,
    default_weights_format=WeightsFormat.safetensors,
)
ARCHITECTURES = [bert_arch]
