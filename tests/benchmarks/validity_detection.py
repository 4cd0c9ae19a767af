"""Live-validity detection benchmark (issue #29): false alarms and delay of the sequential
live-validity detector (:func:`autometrics.evaluators.continuous.sequential.validity_step`), as the
monitor runs it.

    python tests/benchmarks/validity_detection.py [--streams 40] [--runs 40] [--quick]   # a few minutes

Per dataset, drift_detection's ``prepare`` fits an LLM-free evaluator on ~150 labelled rows; as in
the monitor, each new label is measured by its concordance with the labels before the fit (those
150 rows, scored by the evaluator: in-sample) on the evaluator's score, and the first 60 new labels
after the fit are the detector's reference.  New labels are the held-out pool's (row, label) pairs
drawn with replacement, fed in batches of 25 labels (a day's feedback).

- False alarms: ``--streams`` streams of 10,000 labels after the reference, the detector restarted
  (with a fresh reference) after an alarm; alarms per 10,000 labels with an exact Poisson 95 % CI
  against the budget (``--drift-arl``, 1 per 10,000).
- Delay: the reference, 100 unchanged labels, then the feedback changes: ``reversed`` (each label
  mirrored on its scale: people now prefer what they disliked), ``noise`` (labels drawn from their
  marginal, unrelated to the output: automated or careless raters) and ``half_noise`` (half of them
  so).  Delay = labels from the first changed one to the alarm; median, p90 and share detected
  within 50/200/1,000 (horizon 2,000).

Writes results/validity_detection.json.
"""

from __future__ import annotations

import argparse
import copy
import os
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from autometrics.evaluators.continuous.monitor import MonitorConfig  # noqa: E402
from autometrics.evaluators.continuous.sequential import concordance, validity_step  # noqa: E402
from drift_detection import SETTINGS, finish, fmt_delay, fmt_rate, poisson, prepare, summary  # noqa: E402

DATASETS = ["simpeval", "topical_chat", "support_bot", "summeval", "realhumaneval_chat"]
REF_N = MonitorConfig(target="x").validity_reference
TICK, PRE, LENGTH = 25, 100, 10_000
EFFECTS = ["reversed", "noise", "half_noise"]


def labels_after(d: dict, effect: str, idx, rng) -> np.ndarray:
    """The labels of pool rows ``idx`` once the feedback has changed by ``effect`` (one of EFFECTS)."""
    y = d["labels"][idx]
    if effect == "reversed":
        return np.nanmin(d["labels"]) + np.nanmax(d["labels"]) - y
    drawn = rng.choice(d["labels"], len(y))  # "noise": the marginal; "half_noise": half of them so
    return drawn if effect == "noise" else np.where(rng.random(len(y)) < 0.5, drawn, y)


def feed(st: dict, values, seed: int, t0: int = 0) -> int | None:
    """Feed concordance values in ticks; the alarm's label count after the reference (None: none)."""
    times = np.arange(t0, t0 + len(values), dtype=np.int64) + 1
    for i in range(0, len(values), TICK):
        validity_step(st, values[i:i + TICK], times[i:i + TICK], reference_n=REF_N, settings=SETTINGS, seed=seed)
        if st.get("alarm"):
            return st["alarm"]["at"]
    return None


def usable(d: dict) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    ok = np.isfinite(d["asis"]["score"]) & np.isfinite(d["labels"])
    pool = np.isfinite(d["fit_scores"]) & np.isfinite(d["fit_labels"])
    return np.flatnonzero(ok), d["fit_scores"][pool], d["fit_labels"][pool]


def null_validity(d: dict, streams: int, seed: int) -> dict:
    rows, ps, pl = usable(d)
    alarms, watched = 0, 0
    for s in range(streams):
        rng = np.random.default_rng(seed + s)
        left, k = LENGTH, 0
        while left > 0:
            idx = rows[rng.integers(0, len(rows), REF_N + left)]
            v = concordance(d["asis"]["score"][idx], d["labels"][idx], ps, pl)
            st: dict = {}
            at = feed(st, v, seed=(seed + s) * 1000 + k)
            k += 1
            alarms += at is not None
            used = at if at is not None else st.get("n", 0)
            watched += used
            left -= used
            if at is None and used == 0:
                break  # the reference was constant: nothing watched
    return {**poisson(alarms, watched), "streams": streams}


def delay_validity(d: dict, runs: int, horizon: int, seed: int) -> dict:
    rows, ps, pl = usable(d)
    out: dict = {"effects": {}, "alarm_before_change": 0, "runs": runs, "horizon": horizon}
    delays = {e: [] for e in EFFECTS}
    for r in range(runs):
        rng = np.random.default_rng(seed + r)
        head = rows[rng.integers(0, len(rows), REF_N + PRE)]
        tail = rows[rng.integers(0, len(rows), horizon)]
        v0 = concordance(d["asis"]["score"][head], d["labels"][head], ps, pl)
        st0: dict = {}
        if feed(st0, v0, seed=(seed + r) * 1000) is not None:
            out["alarm_before_change"] += 1
            continue
        for e in EFFECTS:
            st = copy.deepcopy(st0)  # the same history for every effect
            v = concordance(d["asis"]["score"][tail], labels_after(d, e, tail, np.random.default_rng(seed + r + 7)), ps, pl)
            at = feed(st, v, seed=(seed + r) * 1000, t0=REF_N + PRE)
            delays[e].append(np.inf if at is None else at - PRE)
    for e in EFFECTS:
        out["effects"][e] = summary(delays[e], horizon)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--datasets", nargs="+", default=DATASETS)
    ap.add_argument("--streams", type=int, default=40, help="unchanged streams of 10,000 labels")
    ap.add_argument("--runs", type=int, default=40, help="delay runs per effect")
    ap.add_argument("--horizon", type=int, default=2_000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--quick", action="store_true", help="a smoke run: 2 streams, 4 runs, no JSON")
    ap.add_argument("--out", default=str(HERE / "results" / "validity_detection.json"))
    a = ap.parse_args()
    if a.quick:
        a.streams, a.runs = 2, 4
    t0 = time.perf_counter()
    seeds = {"fit": a.seed, "null": 40_000 + a.seed * 1000, "delay": 50_000 + a.seed * 1000}
    res = {"settings": {"sequential": SETTINGS.to_dict(), "reference_labels": REF_N, "tick": TICK, "pre_change": PRE,
                        "streams": a.streams, "labels_per_stream": LENGTH, "delay_runs": a.runs, "horizon": a.horizon,
                        "seeds": seeds}, "datasets": {}, "load_before": os.getloadavg()}
    print("| dataset | held-out concordance (tau) | false alarms per 10,000 labels [95 % CI] | "
          + " | ".join(f"{e}: median/p90 (% within 50/200/1000)" for e in EFFECTS) + " | alarm before the change |")
    print("|---|---|---|" + "---|" * len(EFFECTS) + "---|")
    for name in a.datasets:
        d = prepare(name, seed=a.seed)
        rows, ps, pl = usable(d)
        ref = concordance(d["asis"]["score"][rows], d["labels"][rows], ps, pl)
        r = {"target": d["target"], "n_fit": d["n_fit"], "n_pool": d["n_pool"], "fit_test_tau": d["fit_test_tau"],
             "held_out_concordance": float(np.nanmean(ref)),
             "null": null_validity(d, a.streams, seeds["null"]),
             "delay": delay_validity(d, a.runs, a.horizon, seeds["delay"]), "load": os.getloadavg()}
        res["datasets"][name] = r
        cells = " | ".join(fmt_delay(r["delay"]["effects"][e], a.horizon) for e in EFFECTS)
        print(f"| {name} ({d['target']}) | {r['held_out_concordance']:.2f} | {fmt_rate(r['null'])} | {cells} | "
              f"{r['delay']['alarm_before_change']} of {a.runs} |", flush=True)
    finish(res, t0, None if a.quick else a.out)


if __name__ == "__main__":
    main()
