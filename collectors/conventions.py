"""The LLM-call fields a fit needs, read from whichever OpenTelemetry convention made the span.

Three conventions describe an LLM call, and a store fed by several instrumentations must read
them alike (the same call gives the same training row whoever recorded it):

- the OpenTelemetry GenAI semantic conventions (ours, the official instrumentations, OpenLLMetry
  since its semconv release): ``gen_ai.input.messages`` / ``gen_ai.output.messages`` (JSON),
  ``gen_ai.request.model``, ``gen_ai.usage.input_tokens`` / ``output_tokens``;
- OpenInference (Arize Phoenix's instrumentations): flattened ``llm.input_messages.N.message.*``
  and ``llm.output_messages.N.message.*``, ``llm.model_name`` (and the request's model inside
  ``llm.invocation_parameters``), ``llm.token_count.prompt`` / ``completion``; its
  ``input.value`` / ``output.value`` hold the raw request and response JSON of an LLM span, so
  they are read only when no message is there;
- OpenLLMetry before that release: flattened ``gen_ai.prompt.N.*`` / ``gen_ai.completion.N.*``,
  ``gen_ai.usage.prompt_tokens`` / ``completion_tokens``, ``llm.request.type``.

The attribute names of OpenInference are those its published ``openinference-semantic-
conventions`` package defines (``SpanAttributes``, ``MessageAttributes``,
``ToolCallAttributes``); they are written out here so reading a span needs no extra package.
"""

from __future__ import annotations

import contextvars
import json
import re

__all__ = ["call_fields", "drop_empty", "trace_fields", "trace_attributes", "TRACE_ATTRIBUTES", "stamp", "open_llm_span",
           "close_llm_span", "client_call_inside"]

# in order of preference: one whole JSON list, then flattened messages, then other tools' text
_INPUT_KEYS = ("gen_ai.input.messages", "gen_ai.prompt", "langfuse.observation.input")
_OUTPUT_KEYS = ("gen_ai.output.messages", "gen_ai.completion", "langfuse.observation.output")
_FLAT = {  # prefix -> (role key, text key, tool-call name key, tool-call arguments key) below each index
    "llm.input_messages.": ("message.role", "message.content", "tool_call.function.name", "tool_call.function.arguments"),
    "llm.output_messages.": ("message.role", "message.content", "tool_call.function.name", "tool_call.function.arguments"),
    "gen_ai.prompt.": ("role", "content", "name", "arguments"),
    "gen_ai.completion.": ("role", "content", "name", "arguments"),
}
_INDEX = re.compile(r"(\d+)\.(.+)")


def flat_messages(a: dict, prefix: str) -> list[dict] | None:
    """Messages spread over ``prefix.N.…`` attributes, as ``[{"role", "content"}]`` in index order
    (a message whose text lies in content parts, or an answer that is a tool call, included)."""
    role_key, text_key, tool_name_key, tool_args_key = _FLAT[prefix]
    msgs: dict[int, dict] = {}
    for k, v in a.items():
        if not k.startswith(prefix):
            continue
        m = _INDEX.fullmatch(k[len(prefix):])
        if m is None:
            continue
        msgs.setdefault(int(m.group(1)), {})[m.group(2)] = v
    if not msgs:
        return None
    out = []
    for i in sorted(msgs):
        fields = msgs[i]
        text = fields.get(text_key)
        if text is None:  # content parts: …message.contents.M.message_content.text (OpenInference)
            parts = sorted((int(mm.group(1)), v) for f, v in fields.items()
                           if (mm := re.fullmatch(r"message\.contents\.(\d+)\.message_content\.text", f)))
            text = "\n".join(str(v) for _, v in parts) if parts else None
        if text is None:  # an answer that is a tool call: …tool_calls.T.<name / arguments>
            calls = sorted({int(mm.group(1)) for f in fields if (mm := re.search(r"tool_calls\.(\d+)\.", f))})
            if calls:
                base = "message.tool_calls" if prefix.startswith("llm.") else "tool_calls"
                text = "\n".join(json.dumps({"tool_call": fields.get(f"{base}.{t}.{tool_name_key}"),
                                             "arguments": fields.get(f"{base}.{t}.{tool_args_key}")}, ensure_ascii=False)
                                 for t in calls)
        out.append({"role": fields.get(role_key), "content": text if text is not None else ""})
    return out


def _first(a: dict, keys) -> object:
    for k in keys:
        v = a.get(k)
        if v is not None:
            return v
    return None


def _has_prefix(a: dict, prefix: str) -> bool:
    for k in a:
        if k.startswith(prefix):
            return True
    return False


def _request_model(a: dict):
    params = a.get("llm.invocation_parameters")
    if isinstance(params, str) and params.strip().startswith("{"):
        try:
            model = json.loads(params).get("model")
        except (ValueError, AttributeError, RecursionError):
            model = None
        if isinstance(model, str) and model:
            return model
    return None


def call_fields(a: dict) -> dict:
    """``input`` and ``output`` (a message list or text, for ``messages_text``), ``model`` (the
    model the request named, else the one that answered), ``input_tokens``, ``output_tokens``,
    ``operation``: whichever convention set them, None where none did."""
    inp = _first(a, _INPUT_KEYS)
    if inp is None:
        inp = flat_messages(a, "llm.input_messages.") or flat_messages(a, "gen_ai.prompt.")
    out = _first(a, _OUTPUT_KEYS)
    if out is None:
        out = flat_messages(a, "llm.output_messages.") or flat_messages(a, "gen_ai.completion.")
    llm_span = a.get("openinference.span.kind") == "LLM"
    if inp is None and not (llm_span and a.get("input.mime_type") == "application/json"):
        inp = a.get("input.value")  # a chain/agent span's input as the app passed it (not a raw LLM request)
    if out is None and not (llm_span and a.get("output.mime_type") == "application/json"):
        out = a.get("output.value")
    model = (a.get("gen_ai.request.model") or _request_model(a) or a.get("gen_ai.response.model") or a.get("llm.model_name")
             or a.get("langfuse.observation.model.name"))
    operation = a.get("gen_ai.operation.name") or a.get("llm.request.type") or ("chat" if llm_span else None)
    return {
        "input": inp,
        "output": out,
        "model": model,
        "input_tokens": _first(a, ("gen_ai.usage.input_tokens", "gen_ai.usage.prompt_tokens", "llm.token_count.prompt")),
        "output_tokens": _first(a, ("gen_ai.usage.output_tokens", "gen_ai.usage.completion_tokens", "llm.token_count.completion")),
        "operation": operation,
    }


def drop_empty(a: dict) -> dict:
    """The attributes without empty values (``""``, an empty list, None): instrumentations such as
    LiteLLM's set dozens of empty ``metadata.*`` keys that say nothing."""
    for v in a.values():
        if v is None or (v.__class__ in _SEQUENCES and not v):
            return {k: v for k, v in a.items() if not (v is None or (v.__class__ in _SEQUENCES and not v))}
    return a


_SEQUENCES = (str, list, tuple)


# --------------------------------------------------------------------------- sessions, users, tags

# where each convention puts them, in order of preference; written by stamp() under every name a
# destination reads: OpenInference / Phoenix (session.id, user.id, tag.tags, metadata), Langfuse
# (langfuse.session.id, langfuse.user.id, langfuse.trace.tags, langfuse.trace.metadata.*), the
# GenAI conventions (gen_ai.conversation.id) and OpenTelemetry's enduser.id
_SESSION_KEYS = ("session.id", "langfuse.session.id", "gen_ai.conversation.id")
_USER_KEYS = ("user.id", "langfuse.user.id", "enduser.id")
_TAG_KEYS = ("tag.tags", "langfuse.trace.tags")
_META_PREFIX = "langfuse.trace.metadata."
_WHO_KEYS = frozenset((*_SESSION_KEYS, *_USER_KEYS, *_TAG_KEYS, "metadata"))

#: what :func:`autometrics.trace_attributes` set for the spans started in this context
TRACE_ATTRIBUTES: contextvars.ContextVar[dict | None] = contextvars.ContextVar("autometrics_trace_attributes", default=None)


def _tags(v) -> list[str]:
    if isinstance(v, str):
        try:
            v = json.loads(v) if v.strip().startswith("[") else [v]
        except ValueError:
            v = [v]
    return [str(t) for t in v] if isinstance(v, (list, tuple)) else []


def trace_fields(a: dict) -> dict:
    """``session_id``, ``user_id``, ``tags`` (a list) and ``metadata`` (a dict) of one span's
    attributes, whichever convention set them (None / empty where none did)."""
    if _WHO_KEYS.isdisjoint(a) and not _has_prefix(a, _META_PREFIX):  # most spans: nothing to read
        return {"session_id": None, "user_id": None, "tags": [], "metadata": {}}
    meta: dict = {}
    raw = a.get("metadata")
    if isinstance(raw, str) and raw.strip().startswith("{"):
        try:
            meta.update(json.loads(raw))
        except ValueError:
            pass
    meta.update({k[len(_META_PREFIX):]: v for k, v in a.items() if k.startswith(_META_PREFIX)})
    tags: list[str] = []
    for k in _TAG_KEYS:
        tags += [t for t in _tags(a.get(k)) if t not in tags]
    return {"session_id": _first(a, _SESSION_KEYS), "user_id": _first(a, _USER_KEYS), "tags": tags, "metadata": meta}


def trace_attributes(session_id=None, user_id=None, tags=None, metadata=None) -> dict:
    """Span attributes carrying a session, a user, tags and metadata under every name that
    Phoenix, Langfuse and the GenAI conventions read (values are turned into strings)."""
    out: dict = {}
    if session_id is not None:
        sid = str(session_id)
        out.update({"session.id": sid, "langfuse.session.id": sid, "gen_ai.conversation.id": sid})
    if user_id is not None:
        out.update({"user.id": str(user_id), "langfuse.user.id": str(user_id)})
    if tags:
        out.update({"tag.tags": [str(t) for t in tags], "langfuse.trace.tags": [str(t) for t in tags]})
    if metadata:
        out["metadata"] = json.dumps(metadata, ensure_ascii=False, default=str, sort_keys=True)
        for k, v in metadata.items():
            out[f"{_META_PREFIX}{k}"] = v if isinstance(v, (str, bool, int, float)) else json.dumps(v, default=str)
    return out


def stamp(span) -> None:
    """What our span processors do as a span starts: give it the session, user, tags and metadata
    of its context (set by ``autometrics.trace_attributes``), so every span of the request carries
    them, the LLM client instrumentations' spans included; and tell an ``@observe(model=...)`` call
    that an instrumented client made the real LLM call inside it (:func:`close_llm_span`)."""
    attrs = TRACE_ATTRIBUTES.get()
    if attrs:
        span.set_attributes(attrs)
    if _LLM_SPANS:
        parent = getattr(span, "parent", None)
        if parent is not None and parent.span_id in _LLM_SPANS and _is_client_call(span):
            _LLM_SPANS[parent.span_id] = True


# ``@observe(model=...)`` spans in flight (span id -> an instrumented client call started inside)
_LLM_SPANS: dict[int, bool] = {}
_CLIENT_OPS = frozenset({"chat", "text_completion", "generate_content", "embeddings"})


def _is_client_call(span) -> bool:
    scope = getattr(span, "instrumentation_scope", None)
    if scope is not None and scope.name == "autometrics":
        return False
    a = span.attributes or {}
    return (a.get("gen_ai.operation.name") in _CLIENT_OPS or a.get("openinference.span.kind") == "LLM"
            or "llm.request.type" in a)


def open_llm_span(span_id: int) -> None:
    """An ``@observe(model=...)`` call's span started: watch for a client call inside it."""
    if len(_LLM_SPANS) >= 100_000:  # calls that never ended (a generator dropped unconsumed): forget the oldest
        _LLM_SPANS.pop(next(iter(_LLM_SPANS), None), None)
    _LLM_SPANS[span_id] = False  # single dict operations: atomic under the GIL, no lock


def client_call_inside(span) -> None:
    """An instrumented client that creates its span only after the call (LiteLLM's callback) is
    about to call the LLM inside ``span``: when that is an ``@observe(model=...)`` call, the
    client's span will be the LLM call."""
    if _LLM_SPANS and span is not None:
        sid = span.get_span_context().span_id
        if sid in _LLM_SPANS:
            _LLM_SPANS[sid] = True


def close_llm_span(span_id: int) -> bool:
    """The call ends: whether an instrumented LLM client span started directly inside it (then
    that span is the LLM call, and the observed function's span only wraps it)."""
    return _LLM_SPANS.pop(span_id, False)
