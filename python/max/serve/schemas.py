"""Request bodies of the OpenAI routes as pydantic models, their sampling fields turned into
``SamplingParams`` and their log-probability fields into a count of alternatives (out-of-range
values become a 400 naming the field). Unknown fields are accepted and ignored, as OpenAI
clients send fields a server may not know; booleans and numbers must be JSON's (a string is
not coerced), as OpenAI requires."""

from __future__ import annotations

from typing import Any, Literal, Union

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictFloat, StrictInt, field_validator

from max.interfaces import SamplingParams
from max.pipelines.lib.logprobs import TOP_LOGPROBS_LIMIT
from max.pipelines.lib.structured import schema_text
from max.serve.errors import APIError

TokenIds = list[StrictInt]
#: The most messages a chat request may have (more cannot fit any context: each message takes
#: tokens; a model's context is checked after the template renders them).
MAX_MESSAGES = 65536

N_LIMIT = 128  # OpenAI's largest n


class StreamOptions(BaseModel):
    include_usage: StrictBool = False


class _Common(BaseModel):
    """Fields shared by completions and chat completions."""

    model_config = ConfigDict(extra="ignore")

    model: str | None = None
    max_tokens: StrictInt | None = None
    temperature: StrictFloat | None = None
    top_p: StrictFloat | None = None
    top_k: StrictInt | None = None
    min_p: StrictFloat | None = None
    frequency_penalty: StrictFloat | None = None
    presence_penalty: StrictFloat | None = None
    repetition_penalty: StrictFloat | None = None
    seed: StrictInt | None = None
    stop: str | list[str] | None = None
    stop_token_ids: list[StrictInt] | None = None
    response_format: dict[str, Any] | None = None
    ignore_eos: StrictBool = False
    min_tokens: StrictInt = 0
    n: StrictInt = 1
    stream: StrictBool = False
    stream_options: StreamOptions | None = None
    logit_bias: dict[str, float] | None = None
    user: str | None = None

    def limit(self) -> int | None:
        return self.max_tokens

    def limit_name(self) -> str:
        return "max_tokens"

    def sampling_params(self) -> SamplingParams:
        """The request's sampling parameters; a 400 naming the first bad one."""
        if not 1 <= self.n <= N_LIMIT:
            raise APIError(400, f"n must be in [1, {N_LIMIT}], got {self.n}", param="n")
        limit, limit_name = self.limit(), self.limit_name()
        if limit is not None and limit < 1:
            raise APIError(400, f"{limit_name} must be at least 1, got {limit}", param=limit_name)
        if self.min_tokens < 0:
            raise APIError(400, f"min_tokens must be >= 0, got {self.min_tokens}", param="min_tokens")
        if self.temperature is not None and not 0 <= self.temperature <= 2:
            raise APIError(400, f"temperature must be in [0, 2], got {self.temperature}", param="temperature")
        if self.top_k is not None and self.top_k < 1 and self.top_k != -1:
            raise APIError(400, f"top_k must be -1 (all tokens) or positive, got {self.top_k}", param="top_k")
        if self.logit_bias:
            raise APIError(400, "logit_bias is not supported by this server", param="logit_bias")
        if self.stream_options is not None and not self.stream:
            raise APIError(400, "stream_options is only allowed when stream is true", param="stream_options")
        if self.stop_token_ids and any(t < 0 for t in self.stop_token_ids):
            raise APIError(400, "stop_token_ids must be non-negative token ids", param="stop_token_ids")
        stop = [self.stop] if isinstance(self.stop, str) else self.stop
        if stop is not None and len(stop) > 16:
            raise APIError(400, f"at most 16 stop strings, got {len(stop)}", param="stop")
        kw: dict[str, Any] = {
            "temperature": 1.0 if self.temperature is None else self.temperature,
            "top_k": -1 if self.top_k is None else self.top_k,
            "top_p": 1.0 if self.top_p is None else self.top_p,
            "min_p": self.min_p or 0.0,
            "frequency_penalty": self.frequency_penalty or 0.0,
            "presence_penalty": self.presence_penalty or 0.0,
            "repetition_penalty": 1.0 if self.repetition_penalty is None else self.repetition_penalty,
            "max_new_tokens": limit, "min_new_tokens": self.min_tokens, "ignore_eos": self.ignore_eos,
            "stop": stop or None, "stop_token_ids": self.stop_token_ids, "seed": self.seed,
        }
        try:
            return SamplingParams(**kw)
        except ValueError as e:
            field = str(e).split(" ", 1)[0]
            public = {"max_new_tokens": self.limit_name(), "min_new_tokens": "min_tokens"}.get(field, field)
            message = str(e).replace(field, public, 1) if field != public else str(e)
            raise APIError(400, message, param=public if field in kw else None) from None

    def json_schema(self) -> str | None:
        """The JSON schema ``response_format`` asks the answer to follow (``json_object``: any
        JSON object; ``json_schema``: its ``schema``), as JSON text; None for plain text."""
        fmt = self.response_format
        if fmt is None:
            return None
        kind = fmt.get("type")
        if kind == "text":
            return None
        if kind == "json_object":
            return '{"type": "object"}'
        if kind != "json_schema":
            raise APIError(400, f"response_format type must be text, json_object or json_schema, got {kind!r}",
                           param="response_format")
        spec = fmt.get("json_schema")
        schema = spec.get("schema") if isinstance(spec, dict) else None
        if not isinstance(schema, dict):
            raise APIError(400, "response_format json_schema needs json_schema.schema, a JSON schema object",
                           param="response_format")
        try:
            return schema_text(schema)
        except ValueError as e:
            raise APIError(400, str(e), param="response_format") from None


class CompletionRequest(_Common):
    """``POST /v1/completions``: a prompt as text, token ids, or a list of either."""

    prompt: Union[str, list[str], TokenIds, list[TokenIds]]
    echo: StrictBool = False
    logprobs: StrictInt | None = None
    suffix: str | None = None

    def logprobs_count(self) -> int | None:
        """How many of the most likely tokens to report at each position (``logprobs``, 0..5),
        or None for no log-probabilities."""
        if self.logprobs is None:
            return None
        if not 0 <= self.logprobs <= 5:
            raise APIError(400, f"logprobs must be in [0, 5], got {self.logprobs}", param="logprobs")
        if self.echo:
            raise APIError(400, "echo with logprobs (log-probabilities of the prompt's tokens) is not supported: "
                                "the model computes logits for the last position only", param="echo")
        return self.logprobs

    def prompts(self) -> list[str | TokenIds]:
        p = self.prompt
        if isinstance(p, str):
            return [p]
        if not p:
            raise APIError(400, "prompt is empty", param="prompt")
        if all(isinstance(x, int) for x in p):
            return [list(p)]  # type: ignore[arg-type]
        return list(p)  # type: ignore[arg-type]


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="allow")

    role: Literal["system", "developer", "user", "assistant", "tool", "function"]
    content: str | list[dict[str, Any]] | None = None
    name: str | None = None


class ChatCompletionRequest(_Common):
    """``POST /v1/chat/completions``."""

    messages: list[ChatMessage] = Field(min_length=1)
    max_completion_tokens: StrictInt | None = None

    @field_validator("messages", mode="before")
    @classmethod
    def _not_too_many(cls, value: Any) -> Any:
        # before the messages are validated one by one (two million of them took 10 s)
        if isinstance(value, list) and len(value) > MAX_MESSAGES:
            raise ValueError(f"{len(value)} messages; at most {MAX_MESSAGES} are taken")
        return value

    logprobs: StrictBool | None = None
    top_logprobs: StrictInt | None = None
    tools: list[dict[str, Any]] | None = None
    tool_choice: str | dict[str, Any] | None = None
    chat_template_kwargs: dict[str, Any] | None = None

    def limit(self) -> int | None:
        return self.max_completion_tokens if self.max_completion_tokens is not None else self.max_tokens

    def limit_name(self) -> str:
        return "max_completion_tokens" if self.max_completion_tokens is not None else "max_tokens"

    def check_unsupported(self) -> None:
        """A 400 for what this server would otherwise silently ignore: forced tool calls
        (``tool_choice`` other than auto or none: tools are shown to the model through its chat
        template, and its answer comes back as text)."""
        if self.tool_choice not in (None, "auto", "none"):
            raise APIError(400, "tool_choice must be 'auto' or 'none': forcing a tool call is not supported",
                           param="tool_choice")

    def logprobs_count(self) -> int | None:
        """How many of the most likely tokens to report at each position (``top_logprobs``,
        0..20, with ``logprobs: true``), or None for no log-probabilities."""
        if self.top_logprobs is not None:
            if not self.logprobs:
                raise APIError(400, "top_logprobs needs logprobs set to true", param="top_logprobs")
            if not 0 <= self.top_logprobs <= TOP_LOGPROBS_LIMIT:
                raise APIError(400, f"top_logprobs must be in [0, {TOP_LOGPROBS_LIMIT}], got {self.top_logprobs}",
                               param="top_logprobs")
        return (self.top_logprobs or 0) if self.logprobs else None

    def plain_messages(self) -> list[dict[str, Any]]:
        """Messages with text content only (a list of text parts is joined); the developer role
        is OpenAI's name for the system message."""
        out = []
        for i, m in enumerate(self.messages):
            content = m.content
            where = f"messages.{i}.content"
            if content is None and m.role in ("system", "developer", "user"):
                raise APIError(400, f"messages[{i}]: a {m.role} message needs content", param=where)
            if isinstance(content, list):
                texts = []
                for part in content:
                    if part.get("type") != "text":
                        raise APIError(400, f"messages[{i}]: content of type {part.get('type')!r} is not supported "
                                            "(text only)", param=where)
                    if not isinstance(part.get("text"), str):
                        raise APIError(400, f"messages[{i}]: a text part needs a string 'text'", param=where)
                    texts.append(part["text"])
                content = "".join(texts)
            role = "system" if m.role == "developer" else m.role
            out.append({"role": role, "content": content or ""})
        return out


class EmbeddingRequest(BaseModel):
    """``POST /v1/embeddings``."""

    model_config = ConfigDict(extra="ignore")

    input: Union[str, list[str], TokenIds, list[TokenIds]]
    model: str | None = None
    encoding_format: Literal["float", "base64"] = "float"
    dimensions: int | None = None
    user: str | None = None

    def inputs(self) -> list[str | TokenIds]:
        x = self.input
        if isinstance(x, str):
            return [x]
        if not x:
            raise APIError(400, "input is empty", param="input")
        if all(isinstance(i, int) for i in x):
            return [list(x)]  # type: ignore[arg-type]
        return list(x)  # type: ignore[arg-type]


__all__ = [
    "N_LIMIT", "ChatCompletionRequest", "ChatMessage", "CompletionRequest", "EmbeddingRequest", "StreamOptions",
]
