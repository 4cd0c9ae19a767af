"""``autometrics demo``: the whole continuous-evaluation loop on a fresh machine, no keys.

A small example application (a sentence simplifier, decorated with ``@autometrics.observe``)
replays the built-in SimpEval dataset: its "model" answers with the system outputs recorded in
the dataset, so no LLM is needed to produce traffic.  The demo then

1. replays a first batch of requests and records the human ratings as feedback, refits -> v1;
2. replays a second labelled batch, refits -> v2, which becomes champion only if it beats v1 on
   the newest held-out feedback beyond noise (else it is kept as a rejected candidate);
3. replays the remaining requests without feedback and scores them online with the champion;
4. records late feedback for part of them and checks drift and live validity;
5. pushes scores to Langfuse when ``LANGFUSE_*`` keys are set, writes the dashboard and prints
   where to open it.

Everything goes through the same code as production: ``@observe`` spans and ``feedback()`` into
a SQLite trace store, :class:`~autometrics.evaluators.continuous.monitor.Monitor` jobs under the refit
lock, the dashboard renderer.  Seconds on 2 CPU cores with ``--no-llm``; several minutes on
the LLM path (embedded 0.5B model when installed, small judge budget, fewer rows: ``LLM_DEMO_ROWS``).
"""

from __future__ import annotations

import os
import time
from pathlib import Path

__all__ = ["run_demo", "DEMO_TASK", "DEMO_PROJECT"]

DEMO_TASK = "Simplify a complex English sentence while keeping its meaning"
DEMO_PROJECT = "demo-simpeval"
TARGET = "score"


def _say(quiet: bool, msg: str) -> None:
    if not quiet:
        print(msg, flush=True)


#: rows per phase (labelled first batch, labelled second batch, unlabelled, late-rated) on the
#: LLM path: every row costs one judge call per generated criterion on the local CPU model
LLM_DEMO_ROWS = (30, 20, 20, 20)


def demo_llm_options(size: str):
    """The LLM demo's budget: 1 single-criterion judge and 1 rubric judge from the embedded
    model, one rationale each (the paper's 10/5/1/1 would take hours on 2 cores)."""
    from autometrics.evaluators.judges.options import GeneratorCounts, LLMOptions

    return LLMOptions(llm=f"local:{size}", counts=GeneratorCounts(n_single=1, n_rubric=1, n_example=0, n_optimized=0),
                              rationales=1)


def choose_llm(no_llm: bool) -> tuple[object, str]:
    """(llm options or None, note): the LLM path only when importable and a model is installed
    (the 0.5B model when present: the demo shows the loop, not the best judge)."""
    if no_llm:
        return None, "LLM-free fit (--no-llm): MetricBank metrics + sign-constrained least squares (NNLS)"
    from autometrics.evaluators.continuous.refit import llm_pipeline_status

    ok, why = llm_pipeline_status("embedded")
    if not ok:
        return None, f"note: no local LLM available ({why}); running the LLM-free fit instead (same as --no-llm)"
    from autometrics.evaluators.llm import local as local_llm

    size = "0.5b" if local_llm.model_path("0.5b") is not None else "1.5b"
    if local_llm.model_path(size) is None:
        return None, "note: no local LLM model installed; running the LLM-free fit instead (same as --no-llm)"
    return demo_llm_options(size), (f"LLM pipeline: embedded {size} model, 1 single-criterion + 1 rubric judge, "
                                    f"{sum(LLM_DEMO_ROWS[:3])} requests replayed (measured 13 min on 2 shared cores; --no-llm: seconds)")


class DemoApp:
    """The example application: answers by replaying SimpEval's recorded system outputs.

    ``simplify(sentence, system)`` is the request handler (records no content itself, it only
    returns the answer and the trace id for later feedback); the nested ``model.generate`` span
    records the sentence as input and the simplification as output, like an LLM call would.
    """

    def __init__(self, rows):
        import autometrics

        self._answers = {(r.input, r.system): r.output for r in rows.itertuples()}
        self._system = None

        @autometrics.observe(name="model.generate", operation="chat")
        def generate(sentence: str) -> str:
            autometrics.update_current_span(model=self._system)
            return self._answers[(sentence, self._system)]

        @autometrics.observe(name="simplify", capture_input=False, capture_output=False)
        def simplify(sentence: str, system: str) -> dict:
            self._system = system
            return {"simplified": generate(sentence), "trace_id": autometrics.current_trace_id()}

        self.simplify = simplify


def tau_sources(champion: dict, refits: list) -> str:
    """One line saying which feedback each Kendall τ printed about the champion was computed on:
    its fit (cross-fitted, or its own test split), the newest feedback held out at its refit, and
    the newest feedback of each later refit that compared a challenger with it."""
    st = champion.get("statistics") or {}
    v = champion["version"]
    fit = (st.get("fit") or {}).get("test") or {}
    hold = (st.get("holdout") or {}).get("challenger") or {}
    refit_no = next((k for k, r in enumerate(refits, 1) if r.version == v), None)
    at = f"refit #{refit_no}" if refit_no else "its refit"
    how = "cross-fitted on" if fit.get("method") == "cross-fit" else "on the fit's own test split of"
    parts = [f"{_tau(fit)} {how} the {st.get('n_train', fit.get('n'))} older feedback points v{v} was fitted on",
             f"{_tau(hold)} on the {hold.get('n')} newest points held out at {at}"]
    for k, r in enumerate(refits, 1):
        rs = r.statistics or {}
        if r.version != v and rs.get("champion_version") == v:
            ho = rs.get("holdout") or {}
            parts.append(f"{_tau(ho.get('champion') or {})} on the {ho.get('n')} newest points held out at refit #{k} "
                         f"(v{r.version}: {_tau(ho.get('challenger') or {})} there)")
    live = (st.get("live_validity") or {}).get("window") or {}
    if live.get("tau") is not None:  # the dashboard's headline once it rests on 30 or more points
        parts.append(f"{_tau(live)} on the {live.get('n')} feedback points that arrived after its fit (live, its online scores)")
    return f"the τ of v{v}, by the data each is computed on: " + "; ".join(parts)


def _tau(s: dict) -> str:
    return "–" if s.get("tau") is None else f"{s['tau']:.3f}"


def run_demo(out_dir="autometrics-demo", *, no_llm: bool = False, seed: int = 0, n_boot: int = 500, quiet: bool = False,
             first: int = 120, second: int = 100, late: int = 80, shuffle_feedback: bool = False,
             promote_unvalidated: bool = False) -> dict:
    """Run the demo into ``out_dir`` (its trace store and dashboard are replaced); returns a summary.
    ``shuffle_feedback``: the ratings are moved between inputs (whole inputs at a time) before
    they are recorded, so they carry no signal: the null check of the loop (nothing should be
    promoted, and nothing scored by an evaluator that is not validated)."""
    import autometrics
    import pandas as pd
    from autometrics import capture
    from autometrics.collectors.store import TraceStore
    from autometrics.dashboards.render import write_dashboard
    from autometrics.evaluators.continuous.monitor import Monitor, MonitorConfig
    from autometrics.evaluators.data import builtin_dataset_path
    from autometrics.evaluators.evaluator import Evaluator

    started = time.perf_counter()
    out = Path(out_dir).expanduser().resolve()
    out.mkdir(parents=True, exist_ok=True)
    db = out / "traces.db"
    for suffix in ("", "-wal", "-shm", ".refit.lock"):
        p = Path(str(db) + suffix)
        if p.exists():
            p.unlink()
    llm_config, note = choose_llm(no_llm)
    _say(quiet, note)
    if llm_config is not None:
        first, second, rest, late = (min(a, b) for a, b in zip((first, second, 10**9, late), LLM_DEMO_ROWS, strict=True))
    else:
        rest = None

    rows = pd.read_csv(builtin_dataset_path("simpeval")).sample(frac=1.0, random_state=seed).reset_index(drop=True)
    if shuffle_feedback:
        import numpy as np
        from autometrics.evaluators.validity import group_permutation

        src = group_permutation(rows["input"].astype(str).to_numpy(), np.random.default_rng(seed))
        rows["score"] = rows["score"].to_numpy()[src]
        _say(quiet, "null check: the ratings were moved between inputs, so they carry no signal")
    n = len(rows)
    first, second = min(first, n // 3), min(second, n // 3)
    store = TraceStore(f"sqlite:///{db}")
    capture.configure(store=store, store_url=store.url, project=DEMO_PROJECT, task=DEMO_TASK, flush_interval=0.2,
                      langfuse=os.environ.get("AUTOMETRICS_LANGFUSE", "auto"))
    app = DemoApp(rows)
    monitor = Monitor(store, MonitorConfig(target=TARGET, project=DEMO_PROJECT, task=DEMO_TASK, llm_config=llm_config,
                                           n_boot=n_boot, seed=seed, settle_seconds=0.0, min_feedback=30,
                                           promote_unvalidated=promote_unvalidated))
    summary: dict = {"out": str(out), "store": str(db), "llm": llm_config is not None, "steps": []}

    def replay(part, with_feedback: bool) -> list[str]:
        ids = []
        for r in part.itertuples():
            res = app.simplify(r.input, r.system)
            ids.append(res["trace_id"])
            if with_feedback:
                autometrics.feedback(res["trace_id"], TARGET, float(r.score), kind="numeric", source="simpeval-annotators")
        capture.flush(30.0)
        return ids

    def step(label, fn):
        t = time.perf_counter()
        res = fn()
        secs = time.perf_counter() - t
        summary["steps"].append({"step": label, "seconds": round(secs, 2), "result": str(res)})
        _say(quiet, f"[{secs:5.1f}s] {label}: {res}")
        return res

    a, b, c = rows.iloc[:first], rows.iloc[first:first + second], rows.iloc[first + second:]
    if rest is not None:
        c = c.head(rest)
    step(f"replayed {len(a)} requests with human ratings", lambda: f"{len(replay(a, True))} traces + feedback")
    r1 = step("refit #1", lambda: monitor.refit(force=True))
    step(f"replayed {len(b)} more requests with human ratings", lambda: f"{len(replay(b, True))} traces + feedback")
    r2 = step("refit #2 (challenger vs champion)", lambda: monitor.refit())
    c_ids: list[str] = []
    step(f"replayed {len(c)} requests without ratings", lambda: f"{len(c_ids.extend(replay(c, False)) or c_ids)} traces")
    step("online scoring", lambda: f"{monitor.score_new()} traces scored by the champion")
    late_rows = c.head(late)
    late_ids = c_ids[:late]

    def late_feedback():
        for tid, r in zip(late_ids, late_rows.itertuples(), strict=True):
            autometrics.feedback(tid, TARGET, float(r.score), kind="numeric", source="simpeval-annotators")
        capture.flush(30.0)
        return f"{len(late_ids)} late ratings recorded"

    step("late feedback on scored traces", late_feedback)
    refit_alerts = list(r1.alerts) + list(r2.alerts)
    drift_alerts = step("drift and live-validity check", lambda: monitor.check_drift() or "no new alerts")
    alerts = refit_alerts + (drift_alerts if isinstance(drift_alerts, list) else [])
    _say(quiet, f"{len(alerts)} alert(s) in all: " + (", ".join(a["kind"] for a in alerts) if alerts else "none"))
    from autometrics.collectors.langfuse_client import langfuse_configured

    if langfuse_configured():
        def push():
            from autometrics.dashboards.langfuse_push import LangfusePush, push_pending

            p = LangfusePush()
            res = push_pending(monitor, p)
            p.flush(20.0)
            p.shutdown(5.0)
            return res

        step("pushed to Langfuse", push)
    capture.shutdown(10.0)
    dash = write_dashboard(monitor, out / "dashboard.html", title="AutoMetrics demo (SimpEval)")
    ch = monitor.champion()
    hold = ((ch or {}).get("statistics", {}).get("holdout") or {}).get("challenger") or {}
    summary.update(dashboard=str(dash), refits=[str(r1), str(r2)], alerts=alerts, champion=ch["version"] if ch else None,
                   heldout=hold, seconds=round(time.perf_counter() - started, 1))
    if ch is None:
        _say(quiet, "no champion: no evaluator version was validated, so none scores traces (see the dashboard)")
    if ch:
        v = Evaluator(ch["artifact"]).validity
        _say(quiet, f"champion v{ch['version']}: " + ("validated: " if v["validated"] else "NOT VALIDATED: ") + v["reason"])
        _say(quiet, f"champion: v{ch['version']} — Kendall tau {hold.get('tau', float('nan')):.3f} "
                    f"(95% CI {hold.get('ci_low', float('nan')):.3f} .. {hold.get('ci_high', float('nan')):.3f}, "
                    f"p = {hold.get('p_value', float('nan')):.2g}) on the newest {hold.get('n')} feedback points, held out "
                    "of its fit at its refit")
        _say(quiet, tau_sources(ch, [r1, r2]))
    _say(quiet, f"done in {summary['seconds']:.0f}s. Open the dashboard: {dash.as_uri()}")
    _say(quiet, f"  (or serve it: autometrics dashboard --store sqlite:///{db} --project {DEMO_PROJECT} --target {TARGET} --serve)")
    store.dispose()
    return summary
