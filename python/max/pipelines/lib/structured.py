"""Structured output (``PipelineConfig(enable_structured_output=True)``, ``--enable-structured-output``):
a context with a ``json_schema`` may only produce text that the schema accepts.

llguidance compiles the schema into a matcher over the model's tokenizer; before each sampling
step the matcher gives the tokens that may come next (a bit per token of the vocabulary), the
logits of every other token become -inf on the device (``mask``), and the chosen token moves the
matcher on (``advance``). Once the schema's text is complete the request ends; a matcher that
fails (a parser limit a very large schema reaches) ends it as cancelled. Such contexts run one step
per ``execute`` (each step's tokens depend on the previous token, known on the host). Token ids
past the tokenizer's vocabulary (the padding of an embedding table) are never allowed. A
context carries its own matcher (``TextContext.matcher``), so it goes when the context does."""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from typing import Any

import numpy as np

from max import driver, engine
from max.dtype import DType
from max.graph import DeviceRef, Graph, TensorType, ops

log = logging.getLogger("max.pipelines")

#: How the JSON may be laid out: whitespace between tokens, at most 20 characters of it at each
#: place (enough to indent nested objects; unbounded whitespace lets a sampled model pad its
#: answer until max_tokens). A schema's own "x-guidance" options override these.
JSON_OPTIONS = {"whitespace_pattern": r"[\x20\x0A\x0D\x09]{0,20}"}

#: The largest schema text taken (a schema is compiled on the host, per request).
SCHEMA_BYTES_LIMIT = 1 << 20


def _llguidance() -> Any:
    try:
        import llguidance
    except ImportError:
        raise RuntimeError("structured output needs the llguidance package: pip install llguidance") from None
    return llguidance


def schema_text(schema: Any) -> str:
    """A JSON schema (a mapping, or its JSON text) as the text a context carries; ValueError
    when it is neither."""
    if isinstance(schema, (bytes, str)):
        try:
            schema = json.loads(schema)
        except ValueError as e:
            raise ValueError(f"the JSON schema is not valid JSON ({e})") from None
    if not isinstance(schema, dict):
        raise ValueError(f"a JSON schema must be an object, got {type(schema).__name__}")
    text = json.dumps(schema)
    if len(text) > SCHEMA_BYTES_LIMIT:
        raise ValueError(f"the JSON schema is {len(text)} bytes, more than the {SCHEMA_BYTES_LIMIT} taken")
    return text


class Grammars:
    """The matchers of a pipeline's structured contexts, and the graph that masks their logits."""

    def __init__(self, tokenizer: Any, vocab_size: int, session: engine.InferenceSession,
                 devices: Sequence[driver.Device]) -> None:
        ll = _llguidance()
        delegate = getattr(tokenizer, "delegate", None)
        if delegate is None or not hasattr(delegate, "to_str"):
            raise NotImplementedError("structured output needs a tokenizer of the tokenizers library (tokenizer.json "
                                      "or a GGUF's vocabulary)")
        eos = sorted(getattr(tokenizer, "eos_token_ids", None) or [])
        if not eos and tokenizer.eos is not None:
            eos = [tokenizer.eos]
        if not eos:
            raise ValueError("structured output needs the tokenizer's end-of-sequence token, and it has none")
        self.vocab_size = int(vocab_size)
        self._tokenizer = ll.LLTokenizer(delegate.to_str(), n_vocab=self.vocab_size, eos_token=eos)
        self._ll = ll
        self._eos = eos
        self._devices = list(devices)
        self._mask = [self._mask_model(session, d) for d in self._devices]

    @staticmethod
    def _mask_model(session: engine.InferenceSession, device: driver.Device) -> engine.Model:
        ref = DeviceRef.from_device(device)
        types = [TensorType(DType.float32, ["rows", "vocab"], ref), TensorType(DType.bool, ["rows", "vocab"], ref)]
        with Graph("grammar_mask", input_types=types) as g:
            logits, allowed = (v.tensor for v in g.inputs)
            g.output(ops.where(allowed, logits, ops.constant(-np.inf, DType.float32, ref)))
        return session.load(g)

    def compile(self, schema: str) -> Any:
        """A matcher for `schema` (JSON text), compiled here (the server calls this off its event
        loop and hands the matcher to the context, ``TextContext.set_matcher``, so the model's
        thread never compiles a schema); ValueError naming what is wrong with it."""
        m = self._ll.LLMatcher(self._tokenizer, self._grammar(schema), log_level=0)
        if m.is_error():
            raise ValueError(f"the JSON schema is not supported: {m.get_error()}")
        return m

    def _grammar(self, schema: str) -> str:
        try:
            return self._ll.LLMatcher.grammar_from_json_schema(schema, defaults=JSON_OPTIONS)
        except Exception as e:  # noqa: BLE001 - llguidance's own error type, re-raised as a ValueError
            raise ValueError(f"the JSON schema is not supported: {e}") from None

    def matcher(self, ctx: Any) -> Any:
        """`ctx`'s matcher (it lives on the context: ``ctx.matcher``), compiled now from its
        schema when it has none yet. A schema it cannot take (callers compile schemas first)
        gives a matcher in its error state, which allows only the end of sequence: the request
        ends (``advance``) instead of the step failing for the whole batch."""
        if ctx.matcher is None:
            try:
                grammar = self._grammar(ctx.json_schema)
            except ValueError:
                grammar = self._ll.LLMatcher.grammar_from_lark("start: /[/")  # (an error state)
            ctx.set_matcher(self._ll.LLMatcher(self._tokenizer, grammar, log_level=0))
        return ctx.matcher

    def mask(self, logits: Any, ctxs: Sequence[Any], rows: Sequence[int]) -> Any:
        """`logits` (one buffer, or one per device) with every token the contexts' matchers do
        not allow next set to -inf in their rows (`rows[i]` for `ctxs[i]`)."""
        from llguidance.numpy import fill_next_token_bitmask

        copies = logits if isinstance(logits, (list, tuple)) else [logits]
        n, vocab = (int(s) for s in copies[0].shape)
        allowed = np.ones((n, vocab), np.bool_)
        words = (self.vocab_size + 31) // 32
        bits = np.zeros((1, words), np.int32)
        for ctx, row in zip(ctxs, rows):
            if ctx.json_schema is None:
                continue
            m = self.matcher(ctx)
            bits[:] = 0
            fill_next_token_bitmask(m, bits, 0)
            unpacked = np.unpackbits(bits.view(np.uint8), bitorder="little")[:vocab].astype(np.bool_)
            if not unpacked.any():  # a matcher that is done or failed: only the end of sequence
                unpacked[[t for t in self._eos if t < vocab]] = True
            allowed[row] = unpacked
        out = []
        for d, model, x in zip(self._devices, self._mask, copies):
            mask = driver.Buffer.from_numpy(allowed)
            out.append(model.execute(x, mask if d.is_host else mask.to(d))[0])
        return out if isinstance(logits, (list, tuple)) else out[0]

    def advance(self, ctx: Any, tokens: Sequence[int]) -> str | None:
        """Moves `ctx`'s matcher past its new `tokens`: None while the schema's text goes on,
        "done" once it is complete (the request then ends), "error" when the matcher failed
        (a limit of its parser, such as its items per row, reached by a large schema: the
        request ends as cancelled, its text incomplete)."""
        m = self.matcher(ctx)
        for t in tokens:
            if not m.consume_token(int(t)):
                break
        if m.is_error():
            log.warning("structured output: request %s stopped: %s", ctx.request_id, m.get_error())
            return "error"
        return "done" if m.is_stopped() else None

__all__ = ["Grammars", "SCHEMA_BYTES_LIMIT", "schema_text"]
