"""Screening candidate judges vs scoring every candidate on every row: judge tokens and
held-out Kendall τ for the same candidates, the same data and the same seeds.

    python tests/benchmarks/judge_screening.py                          # simpeval, scripted judges, 3 seeds
    python tests/benchmarks/judge_screening.py --server local:0.5b --rows 80 --seeds 1 --n-noise 2   # the embedded model

Candidates are fixed judge specs (no generation), so both modes see exactly the same judges.
``--server scripted`` (default) answers on the fake OpenAI-compatible server
(tests/scripted_judge_server.py): "Meaning preservation" reads the human label with noise (a
useful judge), "Simplicity" reads it with more noise (a weak one), "Length" scores the output's
word count (what MetricBank already knows), the ``--n-noise`` others are deterministic noise.
With a real model every spec is a real judge.  Each run uses a fresh LLM cache, so every call is
paid for.  Prints per seed and mode: judge tokens (prompt + completion of the score stages),
requests, the held-out τ of the returned evaluator (and of the evaluator with judges before the
LLM-free floor), which judges were kept; then the token ratio and the paired bootstrap 95 %
interval of τ(screened) − τ(all) (the two returned evaluators on the same held-out rows).
Writes tests/benchmarks/results/judge_screening_<data>_<server>.json.
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
DATASETS = Path(os.environ.get("AUTOMETRICS_SHARED", ROOT.parent / "shared")) / "datasets"
sys.path.insert(0, str(ROOT / "tests"))

CRITERIA = {
    "Meaning preservation": "the output keeps every piece of meaning of the input sentence",
    "Simplicity": "the output is easier to read than the input",
    "Length": "the output is short",
}
NOISE = ["Fluency", "Formality", "Tone", "Style", "Politeness", "Creativity", "Humour", "Vividness", "Rhythm", "Warmth"]


def scripted(df, target: str, seed: int = 0):
    """The scripted judges (module docstring): label + noise for the useful and the weak judge."""
    import numpy as np
    from scripted_judge_server import noise_score

    rng = np.random.default_rng(1000 + seed)
    y = df[target].to_numpy(dtype=float)
    z = (y - y.mean()) / y.std()

    def levels(values):
        q = np.quantile(values, [0.2, 0.4, 0.6, 0.8])
        return dict(zip(df["output"], (np.searchsorted(q, values) + 1).tolist(), strict=True))

    useful = levels(z + 0.8 * rng.normal(size=len(z)))
    weak = levels(z + 2.0 * rng.normal(size=len(z)))
    words = levels(df["output"].str.split().str.len().to_numpy(dtype=float) + 0.01 * rng.normal(size=len(z)))

    def script(criterion, output, _input):
        table = {"Meaning preservation": useful, "Simplicity": weak, "Length": words}.get(criterion)
        return table.get(output, 3) if table is not None else noise_score(criterion, output)

    return script


def run_mode(df, target, task, specs, llm, screen: bool, seed: int, top_n: int):
    from autometrics.evaluators.fit import fit_evaluator
    from autometrics.evaluators.judges.options import LLMOptions

    cache = Path(tempfile.mkdtemp(prefix="autometrics-screen-bench-")) / "llm-cache.sqlite"
    opts = LLMOptions(llm=llm, judge_specs=specs, screen=screen, rationales=0, cache=str(cache), retrieve_k=200,
                      exemplar=False, timeout=600)
    t0 = time.perf_counter()
    res = fit_evaluator(df, target, task=task, llm_options=opts, seed=seed, top_n=top_n, n_boot=200)
    wall = time.perf_counter() - t0
    a = res.evaluator.artifact
    usage = a["llm"]["usage"]
    score = [v for k, v in usage.items() if k.startswith("score:")]
    floor = a["llm"]["floor"]
    return res, {
        "judge_tokens": sum(v["prompt_tokens"] + v["completion_tokens"] for v in score),
        "judge_requests": sum(v["requests"] for v in score),
        "tau_returned": a["statistics"]["test"]["tau"],
        "tau_with_judges": (floor.get("with_judges_test") or {}).get("tau"),
        "tau_llm_free": (floor.get("llm_free_test") or {}).get("tau"),
        "returned": a["method"]["returned"],
        "kept": [c["feature"] for c in a["llm"]["candidates"] if c["fate"] in ("kept", "not returned")],
        "fates": {c["feature"]: c["fate"] for c in a["llm"]["candidates"]},
        "rounds": a["llm"]["screening"]["rounds"],
        "seconds": round(wall, 1),
    }


def main(argv=None) -> int:
    import numpy as np
    import pandas as pd
    from autometrics.evaluators.judges.metric import JudgeSpec
    from autometrics.evaluators.stats import bootstrap_taus, paired_interval

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data", default="simpeval")
    p.add_argument("--target", default=None, help="label column (default: the dataset's first label)")
    p.add_argument("--server", default="scripted", help="scripted (fake server) | local:0.5b | local:1.5b | a model string")
    p.add_argument("--rows", type=int, default=None, help="seeded sample of whole input groups (default: all rows)")
    p.add_argument("--seeds", type=int, default=3)
    p.add_argument("--n-noise", type=int, default=5, help="noise criteria besides the three named ones")
    p.add_argument("--top-n", type=int, default=5)
    p.add_argument("--out", default=str(ROOT / "tests" / "benchmarks" / "results"))
    args = p.parse_args(argv)

    meta = json.loads((DATASETS / "datasets.json").read_text())[args.data]
    target = args.target or next(iter(meta["labels"]))
    full = pd.read_csv(DATASETS / meta.get("file", f"{args.data}.csv"))
    if not 0 <= args.n_noise <= len(NOISE):
        p.error(f"--n-noise must be between 0 and {len(NOISE)}")
    names = list(CRITERIA) + NOISE[: args.n_noise]
    specs = [JudgeSpec(kind="single", criterion=n, description=CRITERIA.get(n, f"the output's {n.lower()}"), task=meta["task"])
             for n in names]
    results = []
    for seed in range(args.seeds):
        df = full
        if args.rows and args.rows < len(full):
            from autometrics.evaluators.sampling import sample_groups

            df = full.iloc[sample_groups(full["input"].astype(str).to_numpy(), args.rows, seed)].reset_index(drop=True)
        server = None
        if args.server == "scripted":
            from scripted_judge_server import ScriptedJudgeServer

            server = ScriptedJudgeServer(scripted(df, target, seed)).__enter__()
            llm = f"openai/fake@{server.url}"
        else:
            llm = args.server
        try:
            row = {"seed": seed, "rows": len(df)}
            preds = {}
            for mode, screen in (("screened", True), ("all", False)):
                res, row[mode] = run_mode(df, target, meta["task"], specs, llm, screen, seed, args.top_n)
                preds[mode] = res.test
                print(f"seed {seed} {mode:>8}: {row[mode]['judge_tokens']:>9,} judge tokens, {row[mode]['judge_requests']:>5} "
                      f"requests, τ returned {row[mode]['tau_returned']:.3f} ({row[mode]['returned']}), τ with judges "
                      f"{_f(row[mode]['tau_with_judges'])}, LLM-free {_f(row[mode]['tau_llm_free'])}, kept {row[mode]['kept']}, "
                      f"{row[mode]['seconds']} s", flush=True)
            a, b = preds["screened"], preds["all"]
            assert list(a["id"]) == list(b["id"])  # the same held-out rows
            boots = bootstrap_taus([a["score"].to_numpy(), b["score"].to_numpy()], a["label"].to_numpy(), 2000, seed)
            lo, hi = paired_interval(boots[:, 0], boots[:, 1])
            row["token_ratio"] = row["screened"]["judge_tokens"] / max(1, row["all"]["judge_tokens"])
            row["tau_diff"] = row["screened"]["tau_returned"] - row["all"]["tau_returned"]
            row["tau_diff_ci"] = [lo, hi]
            row["within_noise"] = bool(lo <= 0 <= hi)
            row["not_worse_beyond_noise"] = bool(hi >= 0)
            print(f"seed {seed}: screening used {row['token_ratio']:.1%} of the judge tokens; τ(screened) − τ(all) = "
                  f"{row['tau_diff']:+.3f} [95% CI {lo:+.3f}, {hi:+.3f}]", flush=True)
            results.append(row)
        finally:
            if server is not None:
                server.__exit__(None, None, None)
            if args.server.startswith("local"):
                from autometrics.evaluators.llm import local as local_llm

                local_llm.stop_shared_servers()
    ratios = [r["token_ratio"] for r in results]
    summary = {"mean_token_ratio": float(np.mean(ratios)), "max_token_ratio": float(np.max(ratios)),
               "mean_tau_diff": float(np.mean([r["tau_diff"] for r in results])),
               "within_noise": sum(r["within_noise"] for r in results),
               "not_worse_beyond_noise": sum(r["not_worse_beyond_noise"] for r in results), "seeds": len(results)}
    print(f"\n{args.data}/{target}, {args.server}, {len(specs)} candidates: screening used {summary['mean_token_ratio']:.1%} of "
          f"the judge tokens on average (at most {summary['max_token_ratio']:.1%}); mean τ difference "
          f"{summary['mean_tau_diff']:+.3f}; within noise on {summary['within_noise']} of {summary['seeds']} seeds, not worse "
          f"beyond noise on {summary['not_worse_beyond_noise']}")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    tag = args.server.replace(":", "_").replace("/", "_").split("@")[0]
    path = out / f"judge_screening_{args.data}_{tag}_{len(specs)}c{f'_{args.rows}r' if args.rows else ''}.json"
    path.write_text(json.dumps({"data": args.data, "target": target, "server": args.server, "rows": args.rows,
                                "candidates": names, "seeds": args.seeds, "results": results, "summary": summary,
                                "machine": {"python": platform.python_version(), "cpus": os.cpu_count()},
                                "command": " ".join(["python", "tests/benchmarks/judge_screening.py", *(argv or sys.argv[1:])])},
                               indent=1, default=str) + "\n")
    print(f"wrote {path}")
    return 0


def _f(v) -> str:
    return "–" if v is None else f"{v:.3f}"


if __name__ == "__main__":
    sys.exit(main())
