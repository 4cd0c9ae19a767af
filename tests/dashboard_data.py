"""A store for the served dashboard's tests and benchmark: real SimpEval traces (a root span with
user and session, an LLM span with its model) with feedback, one real refit and online scoring,
then, when asked, many more scored traces added in bulk under the same evaluator version (their
scores drawn, not computed: what is tested with them is listing and filtering at scale)."""

from __future__ import annotations

import hashlib

import numpy as np
from monitor_data import simpeval

MODELS = ("gpt-4o-mini", "llama-3.1-8b", "qwen2.5-7b")
__all__ = ["build_served_store", "MODELS"]


def _rows(df, *, t0_ns: int, offset: int, with_feedback, rng) -> tuple[list, list]:
    spans, fb = [], []
    for i, r in enumerate(df.itertuples()):
        k = offset + i
        tid = hashlib.sha256(f"served|{k}".encode()).hexdigest()[:32]
        start = t0_ns + k * 1_000_000
        user, session, model = f"user-{k % 37}", f"conv-{k // 4}", MODELS[k % len(MODELS)]
        spans.append({"trace_id": tid, "span_id": f"{2 * k + 1:016x}", "name": "simplify", "project": "p", "start_time_ns": start,
                      "end_time_ns": start + 800_000, "input": r.input, "output": r.output, "attributes": "{}", "status": "UNSET",
                      "user_id": user, "session_id": session})
        spans.append({"trace_id": tid, "span_id": f"{2 * k + 2:016x}", "parent_span_id": f"{2 * k + 1:016x}",
                      "name": f"chat {model}", "project": "p", "start_time_ns": start + 10_000, "end_time_ns": start + 700_000,
                      "operation": "chat", "model": model, "input_tokens": int(rng.integers(20, 400)),
                      "output_tokens": int(rng.integers(10, 200)), "attributes": "{}", "status": "UNSET", "user_id": user,
                      "session_id": session})
        if with_feedback(k):
            fb.append({"id": f"fb-{tid}", "trace_id": tid, "name": "score", "kind": "numeric", "value": float(r.score),
                       "created_at_ns": start + 1_000})
    return spans, fb


def build_served_store(url: str, extra: int = 0, seed: int = 0) -> dict:
    """Build the store at ``url``; returns {"champion": version dict, "n_scored": scored traces}."""
    from autometrics.collectors.store import TraceStore
    from autometrics.evaluators.continuous.monitor import Monitor, MonitorConfig

    rng = np.random.default_rng(seed)
    store = TraceStore(url)
    df = simpeval()
    spans, fb = _rows(df, t0_ns=1_700_000_000_000_000_000, offset=0, with_feedback=lambda k: k < 220, rng=rng)
    store.write(spans, fb)
    mon = Monitor(store, MonitorConfig(target="score", project="p", settle_seconds=0, n_boot=200,
                                       metrics=["LengthRatio", "OutputLength", "FKGL", "InputSimilarity", "DistinctNGrams"]))
    out = mon.refit()
    assert out.outcome == "promoted", out
    scored = mon.score_new()
    champ = mon.champion()
    if extra:
        base = len(df)
        pool = df.sample(n=min(len(df), 2000), replace=True, random_state=seed).reset_index(drop=True)
        lo, hi = float(df["score"].min()), float(df["score"].max())
        for start in range(0, extra, 20_000):
            n = min(20_000, extra - start)
            chunk = pool.iloc[np.arange(start, start + n) % len(pool)]
            sp, fbk = _rows(chunk, t0_ns=1_700_000_000_000_000_000, offset=base + start, with_feedback=lambda k: k % 10 == 0, rng=rng)
            store.write(sp, fbk)
            roots = sp[::2]
            store.write_scores([{"trace_id": s["trace_id"], "evaluator_id": champ["id"], "project": "p", "target": "score",
                                 "score": float(rng.uniform(lo, hi)), "trace_start_ns": s["start_time_ns"],
                                 "scored_at_ns": s["start_time_ns"] + 5_000_000_000,
                                 "metrics": {"OutputLength": len(s["output"] or "")}, "contributions": {"OutputLength": 0.0},
                                 "rationales": [{"metric": "OutputLength", "contribution": 0.0, "text": "drawn for the scale test"}]}
                                for s in roots])
            scored += n
    store.dispose()
    return {"champion": champ, "n_scored": scored}
