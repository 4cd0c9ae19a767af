"""Baselines benchmark: the LLM-free methods of ``autometrics benchmark`` (best existing metric,
MetaMetrics-style GBM, frozen-MiniLM regressor, AutoMetrics without LLM) on every target of
every shared human-judgment dataset, on the same grouped seeded splits.

    python tests/benchmarks/baselines.py [--datasets simpeval summeval ...] [--seeds 5] [--max-rows 400]

Each dataset is sampled once (seeded, at most --max-rows labelled rows) and scored once with the
CPU MetricBank; every target and seed reuses those scores (and the MiniLM embeddings).  Prints
one row per dataset/target (held-out Kendall τ, mean ± 95 % t-interval over seeds) and writes
results/baselines.json (every per-seed number) and results/baselines.md (also the Table-2
layout: methods as rows).
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

from autometrics.evaluators.benchmark.baselines import MetricFeatures
from autometrics.evaluators.benchmark.harness import NO_LLM_METHODS, comparison_markdown, run_benchmark

HERE = Path(__file__).resolve().parent
SHARED = Path(os.environ.get("AUTOMETRICS_SHARED", HERE.parents[2] / "shared")) / "datasets"


def jobs() -> dict[str, list[str]]:
    """dataset name -> every target datasets.json lists for it."""
    cards = json.loads((SHARED / "datasets.json").read_text(encoding="utf-8"))
    return {name: list(card.get("labels", {})) for name, card in cards.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    all_jobs = jobs()
    ap.add_argument("--datasets", nargs="*", default=list(all_jobs))
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--max-rows", type=int, default=400)
    ap.add_argument("--test-size", type=float, default=0.3)
    ap.add_argument("--methods", default=",".join(NO_LLM_METHODS))
    ap.add_argument("--out", default=str(HERE / "results" / "baselines.json"))
    args = ap.parse_args()
    methods = [m for m in args.methods.split(",") if m]
    started = time.perf_counter()
    results = []
    for name in args.datasets:
        card = json.loads((SHARED / "datasets.json").read_text(encoding="utf-8"))[name]
        path = SHARED / card["file"]
        features = MetricFeatures(bank="cpu")  # metric scores do not depend on the target: shared by all of them
        for target in all_jobs[name]:
            t0 = time.perf_counter()
            res = run_benchmark(path, target, seeds=args.seeds, methods=methods, max_rows=args.max_rows,
                                test_size=args.test_size, features=features)
            results.append(res)
            cells = ", ".join(f"{m['method']} {m['tau']['mean']:.3f}" for m in res.methods if m["status"] == "ok")
            print(f"  {name}/{target} (n={res.dataset['n_rows']}): {cells}  [{time.perf_counter() - t0:.0f} s]", flush=True)
    total = time.perf_counter() - started
    table = comparison_markdown(results, transpose=True)
    wins = 0
    for r in results:
        ok = {m["method"]: m["tau"]["mean"] for m in r.methods if m["status"] == "ok" and m["tau"]["mean"] is not None}
        others = [v for k, v in ok.items() if k != "autometrics"]
        wins += bool(others) and "autometrics" in ok and ok["autometrics"] >= max(others)
    foot = (f"{args.seeds} grouped splits per target (test {args.test_size:.0%}, grouped by input), at most {args.max_rows} "
            f"labelled rows per dataset (seeded sample); ± is the 95% Student-t interval over seeds; bold = best mean. "
            f"AutoMetrics (no LLM) is best or tied on {wins}/{len(results)} targets. Total {total:.0f} s.")
    print()
    print(table)
    print()
    print(foot)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"seeds": args.seeds, "max_rows": args.max_rows, "test_size": args.test_size,
                               "methods": methods, "total_seconds": round(total, 1),
                               "results": [r.to_dict() for r in results]}, indent=2, ensure_ascii=False) + "\n")
    md = ["# Baselines (LLM-free methods)", "", table, "", foot, "", "## Table 2 layout", "",
          comparison_markdown(results), ""]
    out.with_suffix(".md").write_text("\n".join(md), encoding="utf-8")
    print(f"wrote {out} and {out.with_suffix('.md')}")


if __name__ == "__main__":
    main()
