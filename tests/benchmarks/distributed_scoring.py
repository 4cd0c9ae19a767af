"""Scoring throughput on Dask against one process, and whether the scores are identical.

Fits an LLM-free evaluator on a shared dataset (``--dataset``, default SimpEval; CPU metrics), then
scores ``--rows`` rows (the dataset's rows
drawn with replacement, unique ids) once in this process (``Evaluator.score``) and on a local Dask
cluster of 1, 2 and 4 worker processes (``evaluators.distributed.score_frame``, the code
``autometrics score --engine dask`` runs).  Cluster start-up is timed apart from scoring; each
configuration is scored ``--repeat`` times after one warm-up (model loading, imports) and the
median is reported, with the speed-up against the single process measured in the same run.
Writes ``results/distributed_scoring.json``.

    python tests/benchmarks/distributed_scoring.py [--rows 100000] [--workers 1,2,4] [--repeat 3]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
SHARED = Path(os.environ.get("AUTOMETRICS_SHARED", HERE.parents[2] / "shared")) / "datasets"
METRICS = "LengthRatio,OutputLength,FKGL,InputSimilarity,DistinctNGrams,LevenshteinRatio,BLEU,chrF++"


def main() -> int:
    import numpy as np
    import pandas as pd
    from autometrics.evaluators.distributed import engine, score_frame
    from autometrics.evaluators.evaluator import Evaluator

    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=100_000)
    ap.add_argument("--workers", default="1,2,4")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--dataset", default="simpeval", help="a shared dataset's name (its CSV in ../shared/datasets)")
    ap.add_argument("--target", default="score")
    ap.add_argument("--out", default=None, help="default results/distributed_scoring.json (simpeval) or _<dataset>.json")
    a = ap.parse_args()
    data = SHARED / f"{a.dataset}.csv"
    tmp = Path(tempfile.mkdtemp(prefix="autometrics-dist-"))
    subprocess.run([sys.executable, "-m", "autometrics._cli.main", "fit", str(data), "--target", a.target, "--no-llm",
                    "--metrics", METRICS, "--n-boot", "50", "--permutations", "0", "--no-progress", "--out", str(tmp / "ev")],
                   check=True, capture_output=True)
    ev = Evaluator.load(tmp / "ev")
    df = pd.read_csv(data)
    rows = df.sample(n=a.rows, replace=True, random_state=0).reset_index(drop=True)
    rows["id"] = [f"row-{i}" for i in range(len(rows))]
    cols = {"reference_cols": ["reference"]} if "reference" in rows.columns else {}

    def timed(fn):
        fn()  # warm-up
        times, out = [], None
        for _ in range(a.repeat):
            t = time.perf_counter()
            out = fn()
            times.append(time.perf_counter() - t)
        return statistics.median(times), out

    single_s, single = timed(lambda: ev.score(rows, **cols))
    result = {"dataset": a.dataset, "target": a.target, "rows": a.rows, "metrics": METRICS.split(","), "selected": [f["feature"] for f in ev.features], "repeat": a.repeat,
              "cores": os.cpu_count(), "single_process_s": round(single_s, 2), "engines": []}
    print(f"{a.rows:,} rows, {len(ev.features)} selected metrics; one process: {single_s:.2f} s "
          f"({a.rows / single_s:,.0f} rows/s); load {os.getloadavg()[0]:.2f}", flush=True)
    for w in [int(x) for x in a.workers.split(",")]:
        t = time.perf_counter()
        with engine(workers=w) as client:
            start_s = time.perf_counter() - t
            secs, out = timed(lambda c=client: score_frame(ev, rows, c, **cols))
        same = bool(np.array_equal(out["autometrics_score"].to_numpy(), single["autometrics_score"].to_numpy(), equal_nan=True))
        cols_same = list(out.columns) == list(single.columns)
        r = {"workers": w, "cluster_start_s": round(start_s, 2), "score_s": round(secs, 2), "rows_per_s": round(a.rows / secs),
             "speedup": round(single_s / secs, 2), "identical_scores": same, "same_columns": cols_same,
             "load_1min": round(os.getloadavg()[0], 2)}
        result["engines"].append(r)
        print(f"dask, {w} worker(s): {secs:.2f} s ({r['rows_per_s']:,} rows/s), speed-up {r['speedup']:.2f}x, cluster start "
              f"{start_s:.1f} s, identical scores: {same}, load {r['load_1min']}", flush=True)
    out = Path(a.out) if a.out else HERE / "results" / ("distributed_scoring.json" if a.dataset == "simpeval"
                                                          else f"distributed_scoring_{a.dataset}.json")
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps(result, indent=1))
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
