"""Do the LLM judges earn their tokens under a wall-clock budget? 

For each dataset and seed, one full AutoMetrics fit with the embedded judge and ``--budget``
(default paper counts: 10 single, 5 rubric, 1 example, 1 optimized judge, 2 code metrics and the
nearest-exemplar candidate; the budget plan cuts them to fit), on a grouped split.  Recorded per
run, from the artifact: the held-out τ of the LLM-free evaluator (the floor, same split) and of
the evaluator with judges (both on the same held-out rows, with their bootstrap CIs), which one
was returned, LLM tokens, wall time, and every candidate's fate.

    python tests/benchmarks/judge_budget.py                                   # 3 datasets x 3 seeds, 1.5B, 20 min
    python tests/benchmarks/judge_budget.py --budget 10m --seeds 0 --data simpeval

Datasets: evalgen_product (all 100 labels), simpeval and topical_chat ("overall") cut to about
``--rows`` labelled rows of whole groups (``fit --max-rows``); realhumaneval_chat ("copied", long
code questions and answers) on request.  Every call is really made (a
fresh LLM cache per run).  Prints a table and saves results/judge_budget_<model>_<budget>.json.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

ROOT = Path(__file__).resolve().parents[2]
DATASETS = ROOT.parent / "shared" / "datasets"
TARGETS = {"evalgen_product": "grade", "simpeval": "score", "topical_chat": "overall", "realhumaneval_chat": "copied"}


def _duration(text: str) -> float:
    from autometrics._cli.checks import duration

    return duration(text)


def one_run(name: str, seed: int, *, model: str, budget: float, rows: int | None) -> dict:
    import pandas as pd
    from autometrics.evaluators.fit import fit_evaluator
    from autometrics.evaluators.judges.options import PAPER_COUNTS, LLMOptions

    meta = json.loads((DATASETS / "datasets.json").read_text())[name]
    df = pd.read_csv(DATASETS / meta.get("file", f"{name}.csv"))
    cache = Path(tempfile.mkdtemp(prefix="autometrics-judge-budget-")) / "llm-cache.sqlite"
    opts = LLMOptions(llm=f"local:{model}", counts=PAPER_COUNTS, budget_seconds=budget, cache=str(cache))
    timeline: list[list] = []  # [seconds since the fit started, log line]
    t0 = time.perf_counter()

    def echo(line: str) -> None:
        timeline.append([round(time.perf_counter() - t0, 1), line])

    res = fit_evaluator(df, TARGETS[name], task=meta.get("task"), llm_options=opts, seed=seed, n_boot=1000,
                        max_rows=rows if name != "evalgen_product" else None, echo=echo)
    wall = time.perf_counter() - t0
    a = res.evaluator.artifact
    floor = a["llm"]["floor"]
    usage = a["llm"]["usage"]["total"]

    def tau(st):
        return None if not st else {"tau": st.get("tau"), "ci": [st.get("ci_low"), st.get("ci_high")], "n": st.get("n"),
                                    "p": st.get("p_value")}

    return {"data": name, "target": TARGETS[name], "seed": seed, "n_labelled": a["dataset"]["n_labelled"],
            "n_train": a["dataset"]["n_train"], "returned": a["method"]["returned"], "why": floor.get("why"),
            "llm_free": tau(floor.get("llm_free_test")), "with_judges": tau(floor.get("with_judges_test")),
            "tokens": usage["prompt_tokens"] + usage["completion_tokens"], "calls": usage.get("requests"),
            "wall_seconds": round(wall, 1), "plan": (a["llm"].get("budget") or {}).get("plan"),
            "budget_spent": (a["llm"].get("budget") or {}).get("spent"),
            "budget_seconds": budget, "within_budget": wall <= budget,
            "stopped": a["llm"]["screening"].get("stopped"), "judge_tokens": (a["llm"].get("tokens") or {}).get("judging"),
            "candidates": [{k: c.get(k) for k in ("feature", "kind", "fate", "detail", "gain", "tau", "tokens", "weight",
                                                   "screening", "about_output")}
                           for c in a["llm"]["candidates"]],
            "features": [f["feature"] for f in a["features"]],
            "usage_by_stage": {k: {f: v[f] for f in ("calls", "cache_hits", "prompt_tokens", "completion_tokens", "seconds")}
                               for k, v in a["llm"]["usage"].items()},
            "timeline": timeline[-60:]}


def _mean(xs) -> float:
    xs = [x for x in xs if x is not None]
    return statistics.fmean(xs) if xs else float("nan")


def _fmt(v) -> str:
    return "–" if v is None else f"{v:+.3f}"


def summarise(runs: list[dict]) -> list[str]:
    out = ["| data | seed | rows | LLM-free τ | with judges τ | returned | kept candidates | tokens | wall s | stopped early |",
           "|---|---:|---:|---:|---:|---|---|---:|---:|---|"]
    for r in runs:
        kept = [c["feature"] for c in r["candidates"] if c["fate"] in ("kept", "not returned")]
        out.append(f"| {r['data']} | {r['seed']} | {r['n_labelled']} | {_fmt((r['llm_free'] or {}).get('tau'))} | "
                   f"{_fmt((r['with_judges'] or {}).get('tau'))} | {r['returned']} | {', '.join(kept) or '–'} | "
                   f"{r['tokens']:,} | {r['wall_seconds']:.0f} | {r.get('stopped') or 'no'} |")
    for name in dict.fromkeys(r["data"] for r in runs):
        sub = [r for r in runs if r["data"] == name]
        diffs = [((r["with_judges"] or {}).get("tau") or (r["llm_free"] or {}).get("tau") or 0.0)
                 - ((r["llm_free"] or {}).get("tau") or 0.0) for r in sub]
        returned = [(r["with_judges"] or {}).get("tau") if r["returned"] == "with-judges" else (r["llm_free"] or {}).get("tau")
                    for r in sub]
        free = [(r["llm_free"] or {}).get("tau") for r in sub]
        out.append(f"{name}: mean held-out τ returned {_mean(returned):+.3f} vs "
                   f"LLM-free {_mean(free):+.3f}; with-judges minus LLM-free per "
                   f"seed {', '.join(f'{d:+.3f}' for d in diffs)}")
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data", nargs="+", default=["evalgen_product", "simpeval", "topical_chat"], choices=list(TARGETS))
    p.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    p.add_argument("--model", default="1.5b")
    p.add_argument("--budget", default="20m", help="wall-clock budget per fit (20m, 600s)")
    p.add_argument("--rows", type=int, default=72, help="labelled rows (whole groups) of simpeval and topical_chat")
    p.add_argument("--out", default=str(ROOT / "tests" / "benchmarks" / "results"))
    args = p.parse_args(argv)
    budget = _duration(args.budget)
    path = Path(args.out) / f"judge_budget_{args.model}_{args.budget}.json"
    runs = json.loads(path.read_text())["runs"] if path.exists() else []
    done = {(r["data"], r["seed"]) for r in runs}
    for seed in args.seeds:  # seed-major: an interrupted run has every dataset for the first seeds
        for name in args.data:
            if (name, seed) in done:
                continue
            print(f"{name} seed {seed}: fitting with budget {args.budget} ...", flush=True)
            runs.append(one_run(name, seed, model=args.model, budget=budget, rows=args.rows))
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps({"settings": {"model": args.model, "budget": args.budget, "rows": args.rows,
                                                     "cpus": os.cpu_count(), "python": platform.python_version()},
                                        "runs": runs}, indent=1))
            print("\n".join(summarise(runs[-1:])[2:3]), flush=True)
    print("\n".join(summarise(runs)))
    print(f"saved {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
