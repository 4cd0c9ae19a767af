"""Validity benchmark: held-out Kendall tau of the LLM-free AutoMetrics evaluator vs the best
single MetricBank metric chosen on the train split, over 5 grouped splits per dataset.

    python tests/benchmarks/validity.py [--datasets simpeval summeval ...] [--seeds 5]

Each dataset is scored once with the whole CPU bank; the 5 splits reuse those scores.  Prints a
Markdown table (mean tau with a 95 % t-interval over seeds) and writes results/validity.json.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np
from autometrics.evaluators.data import load_dataset
from autometrics.evaluators.fit import fit_evaluator, score_metrics
from autometrics.metricbank import default_metrics
from scipy import stats

HERE = Path(__file__).resolve().parent
SHARED = HERE.parents[2] / "shared" / "datasets"

JOBS = {
    "simpeval": ["score"],
    "simpda": ["fluency", "meaning", "simplicity"],
    "summeval": ["coherence", "consistency", "fluency", "relevance"],
    "topical_chat": ["overall"],
    "evalgen_product": ["grade"],
    "realhumaneval_chat": ["copied"],
}


def mean_ci(values) -> tuple[float, float]:
    v = np.asarray([x for x in values if x is not None and np.isfinite(x)], dtype=float)
    if len(v) < 2:
        return (float(v.mean()) if len(v) else float("nan")), float("nan")
    half = stats.t.ppf(0.975, len(v) - 1) * v.std(ddof=1) / np.sqrt(len(v))
    return float(v.mean()), float(half)


def run(datasets: list[str], seeds: int, test_size: float) -> list[dict]:
    rows = []
    for name in datasets:
        targets = JOBS[name]
        t0 = time.perf_counter()
        ds = load_dataset(SHARED / f"{name}.csv", targets)
        bank = default_metrics(with_reference=ds.has_references, with_input=ds.has_input)
        X, meta, notes = score_metrics(bank, ds.outputs, ds.inputs if ds.has_input else None, ds.references)
        score_s = time.perf_counter() - t0
        for target in targets:
            keep = np.flatnonzero(ds.frame[target].notna().to_numpy())
            lab = ds.subset(keep)
            feats = (X.iloc[keep].reset_index(drop=True), meta, notes)
            ev_taus, best_taus, chosen = [], [], []
            for seed in range(seeds):
                res = fit_evaluator(None, target, dataset=lab, features=feats, seed=seed, test_size=test_size, n_boot=0)
                st = res.evaluator.statistics
                ev_taus.append(st["test"]["tau"])
                best = st["best_single_metric"]
                best_taus.append(best["test"]["tau"] if best else None)
                chosen.append(best["feature"] if best else None)
            ev_m, ev_h = mean_ci(ev_taus)
            b_m, b_h = mean_ci(best_taus)
            rows.append(
                {
                    "dataset": name,
                    "target": target,
                    "n": len(lab),
                    "n_metrics": X.shape[1],
                    "evaluator_tau": ev_m,
                    "evaluator_ci95": ev_h,
                    "best_single_tau": b_m,
                    "best_single_ci95": b_h,
                    "best_single_chosen": sorted(set(c for c in chosen if c)),
                    "per_seed_evaluator": ev_taus,
                    "per_seed_best_single": best_taus,
                    "scoring_seconds": round(score_s, 1),
                }
            )
            print(f"  {name}/{target}: evaluator {ev_m:.3f} ± {ev_h:.3f}, best single {b_m:.3f} ± {b_h:.3f}", flush=True)
    return rows


def to_markdown(rows: list[dict]) -> str:
    out = [
        "| dataset | target | n | AutoMetrics (LLM-free) τ | best single metric τ | best single metric (chosen on train) |",
        "|---|---|---:|---:|---:|---|",
    ]
    for r in rows:
        win = "**" if r["evaluator_tau"] >= r["best_single_tau"] else ""
        out.append(
            f"| {r['dataset']} | {r['target']} | {r['n']} | {win}{r['evaluator_tau']:.3f} ± {r['evaluator_ci95']:.3f}{win} | "
            f"{r['best_single_tau']:.3f} ± {r['best_single_ci95']:.3f} | {', '.join(r['best_single_chosen'])} |"
        )
    wins = sum(r["evaluator_tau"] >= r["best_single_tau"] for r in rows)
    out.append("")
    out.append(f"Evaluator ≥ best single metric on {wins}/{len(rows)} targets.")
    return "\n".join(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--datasets", nargs="*", default=list(JOBS))
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--test-size", type=float, default=0.3)
    ap.add_argument("--out", default=str(HERE / "results" / "validity.json"))
    args = ap.parse_args()
    started = time.perf_counter()
    rows = run(args.datasets, args.seeds, args.test_size)
    print()
    print(to_markdown(rows))
    print(f"\n({args.seeds} grouped splits per target, test size {args.test_size}; ± is the 95% t-interval over seeds; "
          f"total {time.perf_counter() - started:.0f} s)")
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps({"seeds": args.seeds, "test_size": args.test_size, "rows": rows}, indent=2))


if __name__ == "__main__":
    main()
