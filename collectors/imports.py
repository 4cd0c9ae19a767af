"""What copying traces and labels in from another tool shares (Phoenix, Langfuse).

Spans go through :func:`~autometrics.collectors.convert.span_row` like anything captured here, and
labels through the same feedback validation; a copied label's id names the tool, its id there and
its last edit time (:func:`versioned_id`), so copying again stores nothing twice and an edited
label is read as the newer one (the training frame's ``latest`` rule).
"""

from __future__ import annotations

import datetime as dt
import hashlib

__all__ = ["ImportCounts", "iso_ns", "iso_text", "versioned_id", "store_imported", "skip", "IncrementalSource"]

_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)


class ImportCounts(dict):
    """``spans``, ``traces``, ``feedback`` copied and the labels skipped (with their reasons)."""


def iso_ns(ts) -> int | None:
    """Nanoseconds since the epoch of an ISO 8601 time (or a datetime); None for none."""
    if ts is None or ts != ts or ts == "":
        return None
    t = ts if isinstance(ts, dt.datetime) else dt.datetime.fromisoformat(str(ts).replace("Z", "+00:00"))
    if t.tzinfo is None:
        t = t.replace(tzinfo=dt.timezone.utc)
    return (t - _EPOCH) // dt.timedelta(microseconds=1) * 1000


def iso_text(t) -> str | None:
    """A time as ISO 8601 text for a feedback row's ``timestamp`` (None for none or NaT)."""
    if t is None or t != t:
        return None
    return t.isoformat() if isinstance(t, dt.datetime) else str(t)


def versioned_id(tool: str, item_id: str, edited, digits: int = 20) -> str:
    """``<tool>:<its id>:<its edit time, the first ``digits`` digits>``; when that is over 64
    characters (a feedback id's limit), the id part is a hash of it: ``<tool>:<sha256>:<digits>``,
    so two edits of one item always differ by their time."""
    stamp = edited.isoformat() if isinstance(edited, dt.datetime) else str(edited or "")
    when = "".join(ch for ch in stamp.split("+")[0].rstrip("Z") if ch.isdigit())[:digits]
    out = f"{tool}:{item_id}:{when}"
    if len(out) <= 64:
        return out
    room = 64 - len(tool) - len(when) - 2
    return f"{tool}:{hashlib.sha256(str(item_id).encode()).hexdigest()[:room]}:{when}"


def skip(counts: ImportCounts, key: str, reason: str) -> None:
    """Count one label not copied under ``counts[key]`` by reason."""
    counts[key][reason] = counts[key].get(reason, 0) + 1


def store_imported(store, rows: list[dict], feedback: list[dict], counts: ImportCounts, skipped_key: str) -> None:
    """Write the copied spans, then the feedback; a label the store's rules refuse (a label of
    another kind than the name's, an id stored before with another value) is counted under
    ``skipped_key`` and the others are kept."""
    if rows:
        store.write(rows, [])
    from .store.feedback_rules import FeedbackRejected

    while feedback:
        try:
            store.write([], feedback)
            break
        except FeedbackRejected as exc:  # the store names every refused row: drop them, write the rest
            bad = {p["index"] for p in exc.problems}
            if not bad:
                raise
            for p in exc.problems:
                skip(counts, skipped_key, f"{feedback[p['index']]['name']}: {p['code']}")
            feedback = [r for i, r in enumerate(feedback) if i not in bad]
    counts["feedback"] = len(feedback)


class IncrementalSource:
    """A tool the worker reads before each job (``Worker(sources=[...])``): what was added since
    the previous read, less ``overlap_s`` (late spans, read paths that lag), is copied into the
    store under ``project``; copying again stores nothing twice.  Subclasses give
    :meth:`_copy` (the copy since a time, None for everything) and a ``__repr__``."""

    def __init__(self, *, project: str, names=None, overlap_s: float = 600.0):
        self.project = project
        self.names = names
        self.overlap = dt.timedelta(seconds=overlap_s)
        self._since: dt.datetime | None = None

    def _copy(self, store, since: dt.datetime | None) -> dict:
        raise NotImplementedError

    def pull(self, store) -> dict:
        started = dt.datetime.now(dt.timezone.utc)
        counts = self._copy(store, self._since)
        self._since = started - self.overlap
        return {"source": repr(self), **counts}
