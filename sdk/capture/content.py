"""How call values become GenAI semantic-convention content: the JSON of
``gen_ai.input.messages`` / ``gen_ai.output.messages`` and the model / token-usage attributes
duck-typed from OpenAI- or Anthropic-style response objects.

Pure functions of their arguments (no OpenTelemetry, no module state), used by the ``@observe``
wrappers in :mod:`autometrics.capture.decorator`.  Every string is cut to the configured
``max_content_chars`` so one huge call cannot blow up a span; values that are not JSON are
recorded as ``str()`` / ``repr()`` rather than failing.
"""

from __future__ import annotations

import json


def _truncate(s: str, n: int) -> str:
    return s if len(s) <= n else s[:n] + f"...[truncated {len(s) - n} chars]"


def _to_text(value) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, int | float | bool) or value is None:
        return str(value)
    try:
        return json.dumps(value, ensure_ascii=False, default=str)
    except Exception:
        return repr(value)


def _is_chat_messages(value) -> bool:
    return isinstance(value, list) and bool(value) and all(isinstance(m, dict) and "role" in m for m in value)


_dumps_str = json.JSONEncoder(ensure_ascii=False).encode  # one C-accelerated call per content string


def _input_messages(value, limit: int) -> str:
    """GenAI-semconv ``gen_ai.input.messages`` JSON for a call's input."""
    if _is_chat_messages(value):
        msgs = []
        for m in value:
            c = m.get("content")
            parts = m["parts"] if isinstance(m.get("parts"), list) else [{"type": "text", "content": _truncate(_to_text(c), limit)}]
            msgs.append({"role": m["role"], "parts": parts})
        return json.dumps(msgs, ensure_ascii=False, default=str)
    return '[{"role":"user","parts":[{"type":"text","content":' + _dumps_str(_truncate(_to_text(value), limit)) + "}]}]"


def _output_messages(value, limit: int) -> str:
    return ('[{"role":"assistant","parts":[{"type":"text","content":' + _dumps_str(_truncate(_to_text(value), limit))
            + '}],"finish_reason":"stop"}]')


def _llm_result_fields(result) -> tuple[object, dict]:
    """Duck-typed OpenAI/Anthropic-style responses: (output text or the result, attributes)."""
    attrs: dict = {}
    if result is None or isinstance(result, str | int | float | bool | bytes):
        return result, attrs
    get = (lambda o, k: o.get(k)) if isinstance(result, dict) else getattr
    try:
        usage = get(result, "usage", None) if not isinstance(result, dict) else result.get("usage")
        if usage is not None:
            ug = (lambda k: usage.get(k)) if isinstance(usage, dict) else (lambda k: getattr(usage, k, None))
            it = ug("input_tokens") if ug("input_tokens") is not None else ug("prompt_tokens")
            ot = ug("output_tokens") if ug("output_tokens") is not None else ug("completion_tokens")
            if isinstance(it, int):
                attrs["gen_ai.usage.input_tokens"] = it
            if isinstance(ot, int):
                attrs["gen_ai.usage.output_tokens"] = ot
        model = result.get("model") if isinstance(result, dict) else getattr(result, "model", None)
        if isinstance(model, str) and (attrs or usage is not None):
            attrs["gen_ai.response.model"] = model
        choices = result.get("choices") if isinstance(result, dict) else getattr(result, "choices", None)
        if choices:
            c0 = choices[0]
            msg = c0.get("message") if isinstance(c0, dict) else getattr(c0, "message", None)
            content = (msg.get("content") if isinstance(msg, dict) else getattr(msg, "content", None)) if msg is not None else None
            if isinstance(content, str):
                return content, attrs
    except Exception:
        pass
    return result, attrs
