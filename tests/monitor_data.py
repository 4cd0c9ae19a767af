"""Shared helpers: fill a trace store with SimpEval rows as traces + feedback (no SDK threads)."""

from __future__ import annotations

import hashlib

import numpy as np
import pandas as pd


def simpeval(n: int | None = None, seed: int = 0) -> pd.DataFrame:
    from autometrics.evaluators.data import builtin_dataset_path

    df = pd.read_csv(builtin_dataset_path("simpeval"))
    df = df.sample(frac=1.0, random_state=seed).reset_index(drop=True)
    return df if n is None else df.head(n)


def write_traces(store, rows: pd.DataFrame, *, project="p", t0_ns: int = 1_000_000_000, feedback: bool = True,
                 target="score", fb_t0_ns: int | None = None, value_fn=None) -> list[str]:
    """One trace (one span) per row; feedback ``target`` = the row's score when ``feedback``."""
    span_rows, fb_rows, ids = [], [], []
    for i, r in enumerate(rows.itertuples()):
        tid = hashlib.sha256(f"{r.id}|{t0_ns}|{project}".encode()).hexdigest()[:32]
        ids.append(tid)
        start = t0_ns + i * 1_000_000
        span_rows.append({"trace_id": tid, "span_id": f"{i + 1:016x}", "name": "simplify", "project": project,
                          "start_time_ns": start, "end_time_ns": start + 500_000, "input": r.input, "output": r.output,
                          "attributes": "{}", "status": "UNSET"})
        if feedback:
            v = float(r.score) if value_fn is None else float(value_fn(r))
            fb_rows.append({"id": f"fb-{tid}", "trace_id": tid, "name": target, "kind": "numeric", "value": v,
                            "created_at_ns": (fb_t0_ns or start) + i * 1_000})
    store.write(span_rows, fb_rows)
    return ids


def add_feedback(store, trace_ids, values, *, target="score", t0_ns: int, prefix="late") -> None:
    rows = [{"id": f"{prefix}-{t}", "trace_id": t, "name": target, "kind": "numeric", "value": float(v),
             "created_at_ns": t0_ns + i * 1_000} for i, (t, v) in enumerate(zip(trace_ids, values, strict=True))]
    store.write(feedback_rows=rows)


__all__ = ["simpeval", "write_traces", "add_feedback", "np"]

