"""How call values become GenAI semantic-convention content: the JSON of
``gen_ai.input.messages`` / ``gen_ai.output.messages`` and the model / token-usage / finish-reason
attributes read from what the call returned.

Return values are duck-typed, so no client library is imported here: OpenAI- and LiteLLM-style
chat completions (``choices[0].message.content``, ``usage``, ``finish_reason``), Anthropic-style
messages (``content[].text``, ``stop_reason``), ``dspy.Prediction`` (its output fields) and, for
streams, chat-completion chunks (``choices[0].delta.content``) collected by :class:`StreamText`.
A finish reason is only ever recorded when the response said one: a plain string has none, and a
stream the consumer closed early is marked as such rather than as ``stop``.

Pure functions of their arguments (no OpenTelemetry, no module state), used by the ``@observe``
wrappers in :mod:`autometrics.capture.decorator`.  Every string is cut to the configured
``max_content_chars`` so one huge call cannot blow up a span; values that are not JSON are
recorded as their JSON-able form (pydantic ``model_dump``, ``toDict``) or ``str()``.
"""

from __future__ import annotations

import json
import time

_MAX_CHUNKS = 100_000  # bound memory for endless streams of non-text chunks
_PLAIN_TYPES = (str, int, float, bool, bytes, list, tuple)  # returned as themselves
_PLAIN = frozenset(_PLAIN_TYPES)

# litellm-style "provider/model" prefixes -> GenAI semconv ``gen_ai.provider.name`` values
_PROVIDERS = {
    "openai": "openai", "azure": "azure.ai.openai", "azure_ai": "azure.ai.inference", "anthropic": "anthropic",
    "bedrock": "aws.bedrock", "vertex_ai": "gcp.vertex_ai", "gemini": "gcp.gemini", "cohere": "cohere",
    "mistral": "mistral_ai", "groq": "groq", "deepseek": "deepseek", "perplexity": "perplexity", "xai": "x_ai",
    "watsonx": "ibm.watsonx.ai",
}


def provider_from_model(model: str | None) -> str | None:
    """``gen_ai.provider.name`` from an explicit ``provider/model`` prefix (``"anthropic/claude-3"``).

    Bare model names are not guessed: a local OpenAI-compatible server may serve any name, and a
    wrong provider is worse than none.
    """
    if not isinstance(model, str) or "/" not in model:
        return None
    return _PROVIDERS.get(model.split("/", 1)[0].lower())


def _truncate(s: str, n: int) -> str:
    return s if len(s) <= n else s[:n] + f"...[truncated {len(s) - n} chars]"


def _json_default(o):
    dump = getattr(o, "model_dump", None)  # pydantic objects (openai / litellm responses)
    if callable(dump):
        try:
            return dump(mode="json")
        except Exception:
            pass
    to_dict = getattr(o, "toDict", None)  # dspy.Example / dspy.Prediction
    if callable(to_dict):
        try:
            return to_dict()
        except Exception:
            pass
    return str(o)


def _to_text(value) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, int | float | bool) or value is None:
        return str(value)
    try:
        return json.dumps(value, ensure_ascii=False, default=_json_default)
    except Exception:
        return repr(value)


def _is_chat_messages(value) -> bool:
    return isinstance(value, list) and bool(value) and all(isinstance(m, dict) and "role" in m for m in value)


_dumps_str = json.JSONEncoder(ensure_ascii=False).encode  # one C-accelerated call per content string


def input_messages(value, limit: int) -> str:
    """GenAI-semconv ``gen_ai.input.messages`` JSON for a call's input."""
    if _is_chat_messages(value):
        msgs = []
        for m in value:
            c = m.get("content")
            parts = m["parts"] if isinstance(m.get("parts"), list) else [{"type": "text", "content": _truncate(_to_text(c), limit)}]
            msgs.append({"role": m["role"], "parts": parts})
        return json.dumps(msgs, ensure_ascii=False, default=_json_default)
    return '[{"role":"user","parts":[{"type":"text","content":' + _dumps_str(_truncate(_to_text(value), limit)) + "}]}]"


def output_messages(value, limit: int, finish_reason: str | None = None) -> str:
    """GenAI-semconv ``gen_ai.output.messages`` JSON; ``finish_reason`` only when the response gave one."""
    head = '[{"role":"assistant","parts":[{"type":"text","content":' + _dumps_str(_truncate(_to_text(value), limit)) + "}]"
    if finish_reason:
        return head + ',"finish_reason":' + _dumps_str(str(finish_reason)) + "}]"
    return head + "}]"


def _get(o, k):
    return o.get(k) if isinstance(o, dict) else getattr(o, k, None)


def _usage_attrs(usage, attrs: dict) -> None:
    if usage is None:
        return
    it = _get(usage, "input_tokens")
    if it is None:
        it = _get(usage, "prompt_tokens")
    ot = _get(usage, "output_tokens")
    if ot is None:
        ot = _get(usage, "completion_tokens")
    if isinstance(it, int) and not isinstance(it, bool):
        attrs["gen_ai.usage.input_tokens"] = it
    if isinstance(ot, int) and not isinstance(ot, bool):
        attrs["gen_ai.usage.output_tokens"] = ot


def is_prediction(value) -> bool:
    """A ``dspy.Prediction`` (or subclass), recognised without importing dspy."""
    return any(c.__name__ == "Prediction" and c.__module__.startswith("dspy") for c in type(value).__mro__)


def _prediction_fields(pred) -> tuple[object, dict, str | None]:
    """A ``dspy.Prediction``: its single output field, or all its fields (recorded as JSON).

    Token usage comes from ``Prediction.get_lm_usage()`` (filled when ``dspy.settings.track_usage``
    is on): exact for this prediction, unlike the LM's shared history.
    """
    fields = pred.toDict()
    value = next(iter(fields.values())) if len(fields) == 1 else fields
    attrs: dict = {}
    try:
        usage = pred.get_lm_usage()
        if isinstance(usage, dict) and usage:
            tot = {"input_tokens": 0, "output_tokens": 0}
            for u in usage.values():
                a: dict = {}
                _usage_attrs(u, a)
                tot["input_tokens"] += a.get("gen_ai.usage.input_tokens", 0)
                tot["output_tokens"] += a.get("gen_ai.usage.output_tokens", 0)
            _usage_attrs(tot, attrs)
            if len(usage) == 1:
                attrs["gen_ai.response.model"] = str(next(iter(usage)))
    except Exception:
        pass
    return value, attrs, None


def result_fields(result) -> tuple[object, dict, str | None]:
    """What a call returned -> (the output value, GenAI attributes, finish reason or None).

    OpenAI/LiteLLM-style completions give ``choices[0].message.content`` (or ``.text``), Anthropic
    messages their text blocks, a ``dspy.Prediction`` its fields; anything else is itself.
    """
    attrs: dict = {}
    if result is None or type(result) in _PLAIN or isinstance(result, _PLAIN_TYPES):
        return result, attrs, None
    try:
        if not isinstance(result, dict) and is_prediction(result):
            return _prediction_fields(result)
        usage = _get(result, "usage")
        _usage_attrs(usage, attrs)
        model = _get(result, "model")
        choices = _get(result, "choices")
        content_blocks = _get(result, "content") if _get(result, "stop_reason") is not None else None
        llm_like = usage is not None or bool(choices) or content_blocks is not None
        if not llm_like:
            return result, attrs, None
        if isinstance(model, str):
            attrs["gen_ai.response.model"] = model
        rid = _get(result, "id")
        if isinstance(rid, str):
            attrs["gen_ai.response.id"] = rid
        if choices and isinstance(choices, list | tuple):
            c0 = choices[0]
            finish = _get(c0, "finish_reason")
            finish = finish if isinstance(finish, str) and finish else None
            msg = _get(c0, "message")
            content = _get(msg, "content") if msg is not None else _get(c0, "text")
            if isinstance(content, str):
                return content, attrs, finish
            return result, attrs, finish
        if isinstance(content_blocks, list):  # Anthropic-style message
            texts = [_get(b, "text") for b in content_blocks if _get(b, "type") == "text"]
            finish = _get(result, "stop_reason")
            if texts and all(isinstance(t, str) for t in texts):
                return "".join(texts), attrs, finish if isinstance(finish, str) else None
    except Exception:
        pass
    return result, attrs, None


_NOT_A_CHUNK = object()


class StreamText:
    """Collects a stream's chunks as they pass to the consumer.

    The output is the joined text when every chunk is a string or a chat-completion chunk
    (OpenAI / LiteLLM ``choices[0].delta.content``), else the list of chunks (as before streams
    were understood).  Chunks also give the finish reason (the last one seen), token usage (the
    final chunk, with ``stream_options={"include_usage": True}``), the response model and id.
    At most 100 000 chunks are kept (an endless stream must not grow memory without bound); the
    recorded text is cut to ``max_content_chars`` like any other output.
    """

    __slots__ = ("items", "textual", "finish_reason", "usage", "model", "response_id", "first_ns", "done", "own_usage")

    def __init__(self):
        self.items: list = []
        self.textual = True
        self.own_usage = True  # False: the usage is an inner observed call's, recorded there
        self.finish_reason = self.usage = self.model = self.response_id = self.first_ns = None
        self.done = False

    def add(self, item) -> None:
        try:
            if self.first_ns is None:
                self.first_ns = time.time_ns()
            text = item if isinstance(item, str) else self._chunk_text(item)
            if text is _NOT_A_CHUNK:
                self.textual = False
                text = item
            if (not isinstance(text, str) or text) and len(self.items) < _MAX_CHUNKS:
                self.items.append(text)
        except Exception:  # an odd chunk must never break the consumer's iteration
            self.textual = False

    def _chunk_text(self, c):
        choices = c.get("choices", _NOT_A_CHUNK) if isinstance(c, dict) else getattr(c, "choices", _NOT_A_CHUNK)
        if choices is _NOT_A_CHUNK or not isinstance(choices, list | tuple):
            return _NOT_A_CHUNK
        usage = _get(c, "usage")
        if usage is not None:
            self.usage = usage
        model, rid = _get(c, "model"), _get(c, "id")
        if isinstance(model, str) and model:
            self.model = model
        if isinstance(rid, str) and rid:
            self.response_id = rid
        if not choices:
            return ""
        c0 = choices[0]
        fr = _get(c0, "finish_reason")
        if isinstance(fr, str) and fr:
            self.finish_reason = fr
        delta = _get(c0, "delta")
        text = _get(delta, "content") if delta is not None else _get(c0, "text")
        return text if isinstance(text, str) else ""

    def result(self) -> tuple[object, dict, str | None]:
        """(output value, attributes, finish reason) of what was streamed so far."""
        attrs: dict = {}
        if self.own_usage:
            _usage_attrs(self.usage, attrs)
        if self.model:
            attrs["gen_ai.response.model"] = self.model
        if self.response_id:
            attrs["gen_ai.response.id"] = self.response_id
        if not self.textual:
            return self.items, attrs, self.finish_reason
        return "".join(self.items), attrs, self.finish_reason
