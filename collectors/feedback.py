"""Feedback records: validation and normalisation shared by the SDK's ``feedback()``, the
collector's ``POST /v1/feedback`` and the trace store's write path, so a signal is judged by the
same rules whichever path it took.

Kinds: ``thumbs`` (stored 1/0), ``likert`` (an integer rating on a scale, default 1..5),
``numeric`` (a finite number, optionally bounded), ``behavioral`` (an implicit signal such as
copied/regenerated, usually 1 per event), ``categorical`` (a text label) and ``correction`` (an
edited output, later used as a reference).

Why a schema per name: a label column must mean one thing.  A feedback name has one kind (and
scale) per project: declared (:class:`FeedbackSchema` with ``source="declared"``), else fixed
by the first item stored under it ("first-seen").  Later items must fit it; an item without
``kind`` is read *under* the name's kind (``1`` under a thumbs name is thumbs up, not the number
1).  First-seen inference from a value alone, when nothing is declared or stored: True/False or
a thumbs word (up/down, yes/no, good/bad, 👍/👎) -> thumbs; a number -> numeric; other text ->
categorical; null, NaN, objects and lists -> rejected (say ``kind``).  The store applies the
rules in its write transaction (:mod:`autometrics.collectors.store.feedback_rules`), so they
hold for every writer; the SDK and the collector check earlier with what they know.
"""

from __future__ import annotations

import json
import math
import re
import time
import uuid
from dataclasses import dataclass

from ..metricbank.errors import UserError

__all__ = ["make_feedback_row", "FEEDBACK_KINDS", "FeedbackSchema", "FeedbackValueError", "coerce_value", "infer_kind",
           "normalise_kind", "make_schema", "row_fingerprint", "binary_word", "POSITIVE_WORDS",
           "NEGATIVE_WORDS"]

_HEX32 = re.compile(r"^[0-9a-f]{32}$")
_HEX16 = re.compile(r"^[0-9a-f]{16}$")
#: the one vocabulary of binary label words (a thumbs value, a CSV label column), read case-blind
POSITIVE_WORDS = frozenset({"true", "yes", "y", "pass", "passed", "good", "up", "thumbs up", "thumbs_up", "thumbsup", "👍",
                            "+1", "positive", "accept", "accepted", "correct"})
NEGATIVE_WORDS = frozenset({"false", "no", "n", "fail", "failed", "bad", "down", "thumbs down", "thumbs_down", "thumbsdown",
                            "👎", "-1", "negative", "reject", "rejected", "incorrect"})
_KIND_ALIASES = {"behavioural": "behavioral", "thumb": "thumbs", "binary": "thumbs", "score": "numeric", "rating": "likert",
                 "category": "categorical", "label": "categorical", "reference": "correction", "edit": "correction"}
FEEDBACK_KINDS = _KINDS = ("thumbs", "likert", "numeric", "behavioral", "categorical", "correction")
_NUMERIC = ("likert", "numeric", "behavioral")
DEFAULT_LIKERT_SCALE = (1.0, 5.0)
MAX_LABEL_CHARS = 1000
MAX_CORRECTION_CHARS = 1 << 20  # a corrected output (it becomes a reference): as long as a span's longest field
MAX_METADATA_CHARS = 64 << 10  # free-form metadata, as JSON text
MAX_COMMENT_CHARS = 10_000  # a longer comment is kept cut, with a marker saying so (and the row's "truncated")
MAX_SOURCE_CHARS = 200


def clip_marked(text: str, limit: int) -> tuple[str, bool]:
    """(``text`` at most ``limit`` characters, cut?): a cut text ends with a marker saying how long
    it was, so nobody reads a truncated comment as whole."""
    if len(text) <= limit:
        return text, False
    marker = f" [… truncated by autometrics: {len(text):,} characters, the first {{kept:,}} kept]"
    kept = limit
    for _ in range(3):  # the marker's length depends on the number it shows
        kept = max(0, limit - len(marker.format(kept=kept)))
    return text[:kept] + marker.format(kept=kept), True


def _no_nul(value, field: str) -> None:
    """NUL bytes are refused: the stores cannot keep them (Postgres text) and they hide text from
    most tools (C strings end there)."""
    if isinstance(value, str) and "\x00" in value:
        raise FeedbackValueError(f"{field} contains a NUL byte (\\x00) at character {value.index(chr(0))}; remove it "
                                 "(the store cannot keep NUL bytes)", field=field, code="nul_byte")


class FeedbackValueError(UserError):
    """A feedback item refused: ``field`` is the item's field at fault (``value``, ``kind``,
    ``trace_id``, ...), ``code`` a short reason (``null``, ``not_finite``, ``out_of_scale``,
    ``kind_mismatch``, ...) used to count and log per reason; the message says what to send."""

    def __init__(self, message: str, *, field: str = "value", code: str = "invalid"):
        super().__init__(message)
        self.field = field
        self.code = code


@dataclass(frozen=True)
class FeedbackSchema:
    """The kind and scale of one feedback name.  ``scale``: inclusive (low, high) bounds for
    likert (integers; default 1..5), numeric and behavioral (optional); None for the others.
    ``source``: ``declared`` or ``first-seen`` (fixed by the first stored item)."""

    kind: str
    scale: tuple[float, float] | None = None
    source: str = "declared"

    def describe(self) -> str:
        if self.scale is None:
            return self.kind
        return f"{self.kind} {_fmt(self.scale[0])}..{_fmt(self.scale[1])}"

    def same_rule(self, other: FeedbackSchema) -> bool:
        """Same kind and scale (whatever set them)."""
        return self.kind == other.kind and self.scale == other.scale

    def as_dict(self) -> dict:
        return {"kind": self.kind, "scale": list(self.scale) if self.scale is not None else None, "source": self.source}


def _fmt(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else repr(float(x))


def normalise_kind(kind) -> str:
    """The canonical kind for ``kind`` (aliases such as ``behavioural``, ``rating``); raises for an unknown one."""
    if not isinstance(kind, str):
        raise FeedbackValueError(f"kind must be a string, one of {', '.join(_KINDS)}, not {kind!r}", field="kind", code="unknown_kind")
    k = _KIND_ALIASES.get(kind.strip().lower(), kind.strip().lower())
    if k not in _KINDS:
        raise FeedbackValueError(f"unknown feedback kind {kind!r}; use one of {', '.join(_KINDS)}", field="kind", code="unknown_kind")
    return k


def make_schema(kind, scale=None, *, source: str = "declared") -> FeedbackSchema:
    """A validated :class:`FeedbackSchema` (likert without ``scale``: 1..5); raises ValueError naming the fix."""
    kind = normalise_kind(kind)
    if scale is None:
        return FeedbackSchema(kind, DEFAULT_LIKERT_SCALE if kind == "likert" else None, source)
    if kind not in _NUMERIC:  # the kinds that take a scale (bounds)
        raise FeedbackValueError(f"{kind} feedback takes no scale (only likert, numeric and behavioral do)", field="scale",
                                 code="bad_scale")
    try:
        lo, hi = (float(x) for x in scale)
    except (TypeError, ValueError):
        raise FeedbackValueError(f"scale must be (low, high), not {scale!r}", field="scale", code="bad_scale") from None
    if not (math.isfinite(lo) and math.isfinite(hi) and lo < hi):
        raise FeedbackValueError(f"scale must be finite with low < high, not {scale!r}", field="scale", code="bad_scale")
    if kind == "likert" and not (lo.is_integer() and hi.is_integer()):
        raise FeedbackValueError(f"a likert scale has integer ends, e.g. (1, 5), not {scale!r}", field="scale", code="bad_scale")
    return FeedbackSchema(kind, (lo, hi), source)


def infer_kind(value) -> str:
    """First-seen inference (nothing declared or stored for the name, no ``kind`` given)."""
    if isinstance(value, bool):
        return "thumbs"
    if isinstance(value, int | float):
        if not math.isfinite(value):
            raise FeedbackValueError(f"value must be a finite number, not {value!r}", code="not_finite")
        return "numeric"
    if isinstance(value, str):
        key = value.strip().lower()
        if not key:
            raise FeedbackValueError("value is an empty string; send a label, a number or True/False", code="empty")
        return "thumbs" if binary_word(key) is not None else "categorical"
    if value is None:
        raise FeedbackValueError("value is null; send a value (or no feedback item at all)", code="null")
    raise FeedbackValueError(f"a {type(value).__name__} is not a feedback value without kind='correction'; send a number, "
                             "True/False or a text label", code="wrong_type")


def _number(value, kind: str, name: str) -> float:
    if value is None:
        raise FeedbackValueError(f"value is null; {kind} feedback {name!r} needs a number", code="null")
    if isinstance(value, bool):
        raise FeedbackValueError(f"True/False is not a {kind} value for {name!r}; send a number", code="wrong_type")
    if isinstance(value, str):
        try:
            v = float(value.strip())
        except ValueError:
            raise FeedbackValueError(f"{kind} feedback {name!r} must be a number, not {value!r}", code="wrong_type") from None
    elif isinstance(value, int | float):
        v = float(value)
    else:
        raise FeedbackValueError(f"a {type(value).__name__} is not a {kind} value for {name!r}; send a number", code="wrong_type")
    if not math.isfinite(v):
        raise FeedbackValueError(f"{kind} feedback {name!r} must be a finite number, not {value!r}", code="not_finite")
    return v


def binary_word(text: str) -> float | None:
    """1.0 / 0.0 for a binary label word (``yes``, ``pass``, ``thumbs up``, ``+1``, ``1``, ...; see
    :data:`POSITIVE_WORDS`), None for any other text."""
    key = str(text).strip().lower()
    if key in POSITIVE_WORDS or key == "1":
        return 1.0
    if key in NEGATIVE_WORDS or key == "0":
        return 0.0
    return None


def coerce_value(value, schema: FeedbackSchema, name: str = "feedback") -> tuple[float | None, str | None]:
    """(numeric value, text value) of ``value`` read under ``schema``, or FeedbackValueError with the reason."""
    kind = schema.kind
    if kind == "thumbs":
        if isinstance(value, bool):
            return float(value), None
        if isinstance(value, int | float) and value in (0, 1):
            return float(value), None
        if isinstance(value, str):
            word = binary_word(value)
            if word is not None:
                return word, None
        if value is None:
            raise FeedbackValueError(f"value is null; thumbs feedback {name!r} needs True/False, 'up'/'down', 'pass'/'fail' or 1/0", code="null")
        raise FeedbackValueError(f"thumbs feedback {name!r} must be True/False, 'up'/'down', 'pass'/'fail' or 1/0, not {value!r}", code="not_thumbs")
    if kind in _NUMERIC:
        if kind == "behavioral" and isinstance(value, bool):
            v = float(value)  # "copied": True (the event happened)
        else:
            v = _number(value, kind, name)
        lo, hi = schema.scale if schema.scale is not None else (None, None)
        if kind == "likert" and not v.is_integer():
            raise FeedbackValueError(f"likert feedback {name!r} must be a whole number on its scale {_fmt(lo)}..{_fmt(hi)}, "
                                     f"not {value!r}", code="not_integer")
        if lo is not None and not lo <= v <= hi:
            how = "declared" if schema.source == "declared" else (
                "the default; declare another with feedback_schema(..., scale=(low, high))" if kind == "likert" else "first seen")
            raise FeedbackValueError(f"{kind} feedback {name!r} must be within {_fmt(lo)}..{_fmt(hi)} ({how}), not {value!r}",
                                     code="out_of_scale")
        return v, None
    if kind == "categorical":
        if isinstance(value, str) and value.strip():
            if len(value) > MAX_LABEL_CHARS:
                raise FeedbackValueError(f"categorical label for {name!r} is over {MAX_LABEL_CHARS} characters", code="too_long")
            return None, value
        if value is None:
            raise FeedbackValueError(f"value is null; categorical feedback {name!r} needs a text label", code="null")
        raise FeedbackValueError(f"categorical feedback {name!r} needs a non-empty text label, not {value!r}", code="wrong_type")
    # correction: the corrected output (a reference), text or JSON
    if value is None or (isinstance(value, str) and not value.strip()):
        raise FeedbackValueError(f"correction {name!r} needs the corrected output, not {value!r}", code="null")
    if isinstance(value, float) and not math.isfinite(value):
        raise FeedbackValueError(f"correction {name!r} must not be {value!r}", code="not_finite")
    if isinstance(value, str):
        text = value
    else:
        try:
            text = json.dumps(value, ensure_ascii=False, allow_nan=False)
        except (TypeError, ValueError):
            raise FeedbackValueError(f"correction {name!r} must be text or JSON, not a {type(value).__name__}",
                                     code="wrong_type") from None
    if len(text) > MAX_CORRECTION_CHARS:
        raise FeedbackValueError(f"correction {name!r} is {len(text):,} characters, over the {MAX_CORRECTION_CHARS:,} limit",
                                 code="too_long")
    return None, text


def _timestamp_ns(ts) -> int:
    if ts is None:
        return time.time_ns()
    if isinstance(ts, bool) or not isinstance(ts, int | float | str):
        raise FeedbackValueError(f"timestamp must be epoch seconds or ISO 8601, not {ts!r}", field="timestamp", code="bad_timestamp")
    if isinstance(ts, str):
        from datetime import datetime, timezone

        try:
            dt = datetime.fromisoformat(ts.replace("Z", "+00:00"))
        except ValueError:
            raise FeedbackValueError(f"timestamp must be epoch seconds or ISO 8601, not {ts!r}", field="timestamp",
                                     code="bad_timestamp") from None
        if dt.tzinfo is None:
            dt = dt.replace(tzinfo=timezone.utc)
        return int(dt.timestamp() * 1e9)
    if not math.isfinite(ts) or ts < 0:
        raise FeedbackValueError(f"timestamp must be a finite, non-negative number of seconds, not {ts!r}", field="timestamp",
                                 code="bad_timestamp")
    return int(ts * 1e9)


def make_feedback_row(trace_id, name, value, comment=None, kind=None, span_id=None, source=None, metadata=None, id=None,
                      timestamp=None, *, project: str | None = None, schema: FeedbackSchema | None = None) -> dict:
    """Validated ``feedback`` row (shared by the SDK and the collector's ``/v1/feedback``).

    ``schema``: what the caller knows of the name's kind and scale (declared, or read from the
    store); the value is read under it, and an explicit ``kind`` must match it.  Without one, the
    value is read under ``kind``, or the kind is inferred (first-seen rule).  Besides the table's
    columns the row carries ``kind_inferred`` and ``raw_value`` (no ``kind`` was given: the store
    reads ``raw_value`` again under the name's stored kind), ``project`` (when given) and
    ``schema`` (a declared schema, so the store learns the declaration).

    Raises :class:`FeedbackValueError` (a ValueError) naming the bad field."""
    if not isinstance(trace_id, str) or not _HEX32.match(trace_id.strip().lower().replace("-", "")):
        raise FeedbackValueError(f"trace_id must be 32 hex digits, not {trace_id!r}", field="trace_id", code="bad_trace_id")
    trace_id = trace_id.strip().lower().replace("-", "")
    for field, v in (("name", name), ("id", id), ("source", source), ("comment", comment), ("value", value)):
        _no_nul(v, field)
    if trace_id == "0" * 32:
        raise FeedbackValueError("trace_id must not be all zeros", field="trace_id", code="bad_trace_id")
    if span_id is not None and (not isinstance(span_id, str) or not _HEX16.match(span_id.lower())):
        raise FeedbackValueError(f"span_id must be 16 hex digits, not {span_id!r}", field="span_id", code="bad_span_id")
    if not isinstance(name, str) or not name.strip() or len(name) > 200:
        raise FeedbackValueError(f"feedback name must be a non-empty string of at most 200 characters, not {name!r}", field="name",
                                 code="bad_name")
    name = name.strip()
    if id is not None and (not isinstance(id, str) or not 0 < len(id) <= 64):
        raise FeedbackValueError("id must be a string of 1..64 characters", field="id", code="bad_id")
    given = normalise_kind(kind) if kind is not None else None
    if schema is not None and given is not None and given != schema.kind:
        raise FeedbackValueError(f"feedback {name!r} is {schema.describe()} ({schema.source}), not {given}; use another name for "
                                 f"{given} feedback", field="kind", code="kind_mismatch")
    if schema is None:
        schema = make_schema(given or infer_kind(value), source="first-seen")
    num, text = coerce_value(value, schema, name)
    meta = None
    if metadata is not None:
        meta = json.dumps(metadata, default=str)
        if len(meta) > MAX_METADATA_CHARS:
            raise FeedbackValueError(f"metadata is {len(meta):,} characters as JSON, over the {MAX_METADATA_CHARS:,} limit",
                                     field="metadata", code="too_long")
    comment, cut_comment = (None, False) if comment is None else clip_marked(str(comment), MAX_COMMENT_CHARS)
    source = None if source is None else str(source)
    if len(source or "") > MAX_SOURCE_CHARS:
        raise FeedbackValueError(f"source is {len(source):,} characters, over the {MAX_SOURCE_CHARS} limit", field="source",
                                 code="too_long")
    row = {
        "id": id or uuid.uuid4().hex,
        "trace_id": trace_id,
        "span_id": span_id.lower() if span_id else None,
        "name": name,
        "kind": schema.kind,
        "value": num,
        "value_text": text,
        "comment": comment,
        "source": source,
        "created_at_ns": _timestamp_ns(timestamp),
        "metadata": meta,
    }
    if cut_comment:  # not a column: the SDK and the collector count it and say so
        row["truncated"] = ["comment"]
    if given is None:
        row["kind_inferred"] = True
        row["raw_value"] = value  # a JSON scalar here: other values were refused above (or are corrections)
    if project is not None:
        row["project"] = str(project)[:200]
    if schema.source == "declared":
        row["schema"] = {"kind": schema.kind, "scale": list(schema.scale) if schema.scale is not None else None}
    return row


def row_fingerprint(row: dict) -> tuple:
    """What makes two rows with one ``id`` the same feedback (a retry) rather than a conflict:
    trace, name, kind and value.  Comment, source, span and time may differ between retries."""
    v = row.get("value")
    return (row.get("trace_id"), row.get("name"), row.get("kind"), None if v is None else float(v), row.get("value_text"))
