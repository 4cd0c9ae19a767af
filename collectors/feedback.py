"""Feedback records: validation and normalisation shared by the SDK's ``feedback()`` and the
collector's ``POST /v1/feedback``, so a signal is stored the same way whichever path it took.

Kinds: ``thumbs`` (stored 1/0), ``likert`` and ``numeric`` (a number), ``behavioral`` (an
implicit signal such as copied/regenerated, usually 1 per event), ``categorical`` (a label, kept
as text) and ``correction`` (an edited output, later used as a reference).
"""

from __future__ import annotations

import json
import math
import re
import time
import uuid

__all__ = ["make_feedback_row", "FEEDBACK_KINDS"]

_HEX32 = re.compile(r"^[0-9a-f]{32}$")
_HEX16 = re.compile(r"^[0-9a-f]{16}$")
_POS = {"true", "yes", "y", "up", "thumbs up", "thumbs_up", "👍", "+1", "1", "good", "positive"}
_NEG = {"false", "no", "n", "down", "thumbs down", "thumbs_down", "👎", "-1", "0", "bad", "negative"}
_KIND_ALIASES = {"behavioural": "behavioral", "thumb": "thumbs", "binary": "thumbs", "score": "numeric", "rating": "likert",
                 "category": "categorical", "label": "categorical", "reference": "correction", "edit": "correction"}
FEEDBACK_KINDS = _KINDS = ("thumbs", "likert", "numeric", "behavioral", "categorical", "correction")


def _normalise_feedback(kind: str | None, value):
    """(kind, numeric value, text value) or raise ValueError with the reason."""
    if kind is not None:
        kind = _KIND_ALIASES.get(kind.lower(), kind.lower())
        if kind not in _KINDS:
            raise ValueError(f"unknown feedback kind {kind!r}; use one of {', '.join(_KINDS)}")
    if kind is None:
        if isinstance(value, bool):
            kind = "thumbs"
        elif isinstance(value, int | float):
            kind = "numeric"
        elif isinstance(value, str) and value.strip().lower() in _POS | _NEG:
            kind = "thumbs"
        else:
            kind = "categorical"
    if kind == "thumbs":
        if isinstance(value, bool):
            return kind, float(value), None
        if isinstance(value, int | float) and value in (0, 1, -1):
            return kind, 1.0 if value == 1 else 0.0, None
        key = str(value).strip().lower()
        if key in _POS:
            return kind, 1.0, None
        if key in _NEG:
            return kind, 0.0, None
        raise ValueError(f"thumbs feedback must be True/False, 'up'/'down', 1/0, not {value!r}")
    if kind in ("likert", "numeric", "behavioral"):
        try:
            v = float(value if not isinstance(value, bool) else int(value))
        except (TypeError, ValueError):
            raise ValueError(f"{kind} feedback must be a number, not {value!r}") from None
        if not math.isfinite(v):
            raise ValueError(f"{kind} feedback must be finite, not {value!r}")
        return kind, v, None
    if kind == "categorical":
        return kind, None, str(value)
    return kind, None, (value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str))  # correction: the corrected output (a reference)


def _timestamp_ns(ts) -> int:
    if ts is None:
        return time.time_ns()
    if isinstance(ts, bool) or not isinstance(ts, int | float | str):
        raise ValueError(f"timestamp must be epoch seconds or ISO 8601, not {ts!r}")
    if isinstance(ts, str):
        from datetime import datetime, timezone

        try:
            dt = datetime.fromisoformat(ts.replace("Z", "+00:00"))
        except ValueError:
            raise ValueError(f"timestamp must be epoch seconds or ISO 8601, not {ts!r}") from None
        if dt.tzinfo is None:
            dt = dt.replace(tzinfo=timezone.utc)
        return int(dt.timestamp() * 1e9)
    if not math.isfinite(ts) or ts < 0:
        raise ValueError(f"timestamp must be a finite, non-negative number of seconds, not {ts!r}")
    return int(ts * 1e9)


def make_feedback_row(trace_id, name, value, comment=None, kind=None, span_id=None, source=None, metadata=None, id=None,
                      timestamp=None) -> dict:
    """Validated ``feedback`` row (shared by the SDK and the collector's ``/v1/feedback``).

    Raises ``ValueError`` naming the bad field."""
    if not isinstance(trace_id, str) or not _HEX32.match(trace_id.strip().lower().replace("-", "")):
        raise ValueError(f"trace_id must be 32 hex digits, not {trace_id!r}")
    trace_id = trace_id.strip().lower().replace("-", "")
    if trace_id == "0" * 32:
        raise ValueError("trace_id must not be all zeros")
    if span_id is not None and (not isinstance(span_id, str) or not _HEX16.match(span_id.lower())):
        raise ValueError(f"span_id must be 16 hex digits, not {span_id!r}")
    if not isinstance(name, str) or not name.strip() or len(name) > 200:
        raise ValueError(f"feedback name must be a non-empty string of at most 200 characters, not {name!r}")
    kind, num, text = _normalise_feedback(kind, value)
    if id is not None and (not isinstance(id, str) or not 0 < len(id) <= 64):
        raise ValueError("id must be a string of 1..64 characters")
    return {
        "id": id or uuid.uuid4().hex,
        "trace_id": trace_id,
        "span_id": span_id.lower() if span_id else None,
        "name": name.strip(),
        "kind": kind,
        "value": num,
        "value_text": text,
        "comment": None if comment is None else str(comment)[:10_000],
        "source": None if source is None else str(source)[:200],
        "created_at_ns": _timestamp_ns(timestamp),
        "metadata": json.dumps(metadata, default=str) if metadata is not None else None,
    }
