"""What copying traces and labels in from another tool shares (Phoenix, Langfuse).

Spans go through :func:`~autometrics.collectors.convert.span_row` like anything captured here, and
labels through the same feedback validation; a copied label's id names the tool, its id there and
its last edit time (:func:`versioned_id`), so copying again stores nothing twice and an edited
label is read as the newer one (the training frame's ``latest`` rule).
"""

from __future__ import annotations

import datetime as dt
import hashlib

__all__ = ["ImportCounts", "iso_ns", "versioned_id", "store_imported", "skip"]

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


def versioned_id(tool: str, item_id: str, edited) -> str:
    """``<tool>:<its id>:<its edit time, digits to the microsecond>``; over 64 characters (a
    feedback id's limit), ``<tool>:<sha256 of both, 48 hex digits>``."""
    stamp = edited.isoformat() if isinstance(edited, dt.datetime) else str(edited or "")
    digits = "".join(ch for ch in stamp.split("+")[0].rstrip("Z") if ch.isdigit())[:20]
    out = f"{tool}:{item_id}:{digits}"
    return out if len(out) <= 64 else f"{tool}:{hashlib.sha256(f'{item_id}|{digits}'.encode()).hexdigest()[:48]}"


def skip(counts: ImportCounts, key: str, reason: str) -> None:
    """Count one label not copied under ``counts[key]`` by reason."""
    counts[key][reason] = counts[key].get(reason, 0) + 1


def store_imported(store, rows: list[dict], feedback: list[dict], counts: ImportCounts, skipped_key: str) -> None:
    """Write the copied spans, then the feedback; a label the store's rules refuse (e.g. a label of
    another kind than the name's) is counted under ``skipped_key`` and the others are kept."""
    if rows:
        store.write(rows, [])
    if feedback:
        from .store.feedback_rules import FeedbackRejected

        try:
            store.write([], feedback)
        except FeedbackRejected as exc:
            bad = {p["index"] for p in exc.problems}
            for p in exc.problems:
                skip(counts, skipped_key, f"{feedback[p['index']]['name']}: {p['code']}")
            feedback = [r for i, r in enumerate(feedback) if i not in bad]
            if feedback:
                store.write([], feedback)
    counts["feedback"] = len(feedback)
