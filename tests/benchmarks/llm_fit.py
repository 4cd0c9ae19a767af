"""Full AutoMetrics fit with the embedded local LLM: cost and held-out τ, one call per criterion
vs all single criteria in one call (issue #3's benchmark).

    python tests/benchmarks/llm_fit.py                                   # evalgen_product, 1.5B, paper counts
    python tests/benchmarks/llm_fit.py --model 0.5b --rows 40 --counts quick

Prints and saves (benchmarks/results/llm_fit_<data>_<model>.json): wall time per stage, judge
calls, prompt tokens sent and prompt tokens the local server actually evaluated (the rest
came from its prefix cache: judge prompts put the example first and the criterion last), completion
tokens, held-out Kendall τ of the fit, and the same for the multi-criterion mode on the same rows.
The LLM cache is a fresh temporary file, so every call is really made.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

ROOT = Path(__file__).resolve().parents[2]
DATASETS = ROOT.parent / "shared" / "datasets"


def main(argv=None) -> int:
    import pandas as pd
    from autometrics.evaluators.fit import fit_evaluator
    from autometrics.evaluators.judges.generate import PAPER_COUNTS, QUICK_COUNTS, GeneratorCounts
    from autometrics.evaluators.judges.options import LLMOptions
    from autometrics.evaluators.llm import local as local_llm

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data", default="evalgen_product")
    p.add_argument("--target", default=None, help="label column (default: the dataset's first label)")
    p.add_argument("--model", default="1.5b", choices=sorted(local_llm.MODELS))
    p.add_argument("--rows", type=int, default=None, help="seeded subset of rows (default: all)")
    p.add_argument("--counts", default="paper", help="paper | quick | 'single,rubric,example,optimized' e.g. 10,5,1,0")
    p.add_argument("--no-multi", action="store_true", help="skip the multi-criterion comparison")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--cache", default=None, help="LLM cache file to resume an interrupted run (default: a fresh temporary "
                   "file; cached calls cost nothing and are not counted as sent or evaluated tokens)")
    p.add_argument("--out", default=str(ROOT / "tests" / "benchmarks" / "results"))
    args = p.parse_args(argv)

    meta = json.loads((DATASETS / "datasets.json").read_text())[args.data]
    target = args.target or next(iter(meta["labels"]))
    df = pd.read_csv(DATASETS / meta.get("file", f"{args.data}.csv"))
    if args.rows and args.rows < len(df):
        df = df.sample(args.rows, random_state=args.seed).reset_index(drop=True)
    if args.counts == "paper":
        counts = PAPER_COUNTS
    elif args.counts == "quick":
        counts = QUICK_COUNTS
    else:
        s, r, e, o = (int(x) for x in args.counts.split(","))
        counts = GeneratorCounts(n_single=s, n_rubric=r, n_example=e, n_optimized=o)
    if local_llm.model_path(args.model) is None:
        print(f"the {args.model} model is not installed: autometrics llm install --model {args.model}", file=sys.stderr)
        return 2

    cache = Path(args.cache) if args.cache else Path(tempfile.mkdtemp(prefix="autometrics-bench-")) / "llm-cache.sqlite"
    opts = LLMOptions(llm=f"local:{args.model}", counts=counts, cache=str(cache), compare_multi=not args.no_multi,
                              rationales=1)
    print(f"{args.data}/{target}: {len(df)} rows, model {args.model}, counts {counts}", flush=True)
    t0 = time.perf_counter()
    res = fit_evaluator(df, target, task=meta["task"], llm_options=opts, seed=args.seed,
                          echo=lambda m: print(f"[{time.perf_counter() - t0:7.1f}s] {m}", flush=True))
    wall = time.perf_counter() - t0
    local_llm.stop_shared_servers()
    a = res.evaluator.artifact
    usage = a["llm"]["usage"]
    judge_stages = {k: v for k, v in usage.items() if k.startswith("score:") and k != "score:multi"}
    judge = {k: sum(v[k] for v in judge_stages.values()) for k in ("requests", "calls", "prompt_tokens", "completion_tokens", "seconds")}
    pc = a["llm"].get("scoring_prefix_cache") or {}
    multi = a["llm"].get("multi_vs_single")
    summary = {
        "data": args.data, "target": target, "rows": len(df), "model": args.model, "counts": a["method"]["generator_counts"],
        "wall_seconds": round(wall, 1), "fit_seconds_without_multi": None,
        "held_out_tau": a["statistics"]["test"]["tau"], "held_out_ci": a["statistics"]["test"].get("ci"),
        "n_test": a["statistics"]["test"].get("n"),
        "judges": len(a["generated"]), "selected": [f["feature"] for f in a["features"]],
        "judge_scoring": {**judge, "prompt_tokens_evaluated": pc.get("prompt_tokens_evaluated"),
                          "evaluated_share": pc.get("evaluated_share")},
        "stages": {k: {x: v[x] for x in ("requests", "calls", "prompt_tokens", "completion_tokens", "seconds", "parse_failures")}
                   for k, v in usage.items()},
        "multi_vs_single": multi, "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
        "notes": a["warnings"],
    }
    if multi:
        summary["fit_seconds_without_multi"] = round(wall - multi["cost_multi"]["seconds"], 1)

    print(f"\nwall {wall:.0f} s (fit without the multi-mode comparison: {summary['fit_seconds_without_multi']} s); "
          f"held-out tau {summary['held_out_tau']}")
    print("| stage | requests | prompt tok | completion tok | s | unparsed |\n|---|---:|---:|---:|---:|---:|")
    for k, v in summary["stages"].items():
        print(f"| {k} | {v['requests']} | {v['prompt_tokens']} | {v['completion_tokens']} | {v['seconds']:.0f} | {v['parse_failures']} |")
    js = summary["judge_scoring"]
    print(f"\njudge scoring, one call per criterion: {js['requests']} calls, {js['prompt_tokens']} prompt tokens sent, "
          f"{js['prompt_tokens_evaluated']} evaluated by the server (share {js['evaluated_share']}), "
          f"{js['completion_tokens']} completion tokens, {js['seconds']:.0f} s")
    if multi:
        cm = multi["cost_multi"]
        print(f"multi-criterion ({len(multi['criteria'])} single criteria per call, all rows): {cm['requests']} calls, "
              f"{cm['prompt_tokens']} prompt tokens sent, {cm.get('prompt_tokens_evaluated')} evaluated, "
              f"{cm['completion_tokens']} completion tokens, {cm['seconds']:.0f} s, {cm['parse_failures']} unparsed")
        cs = multi["cost_single"]
        print(f"single criteria one call each (same rows): {cs['requests']} calls, {cs['prompt_tokens']} prompt tokens sent, "
              f"{cs['seconds']:.0f} s")
        print(f"held-out tau of the fit: per-criterion {multi.get('tau_test_fit_single')}, one-call {multi.get('tau_test_fit_multi')}")
        for c in multi["criteria"]:
            print(f"  {c['feature']}: tau test {c['tau_test_single']} (per criterion) vs {c['tau_test_multi']} (one call)")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"llm_fit_{args.data}_{args.model}.json"
    path.write_text(json.dumps(summary, indent=2, default=float))
    print(f"\nsaved {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
