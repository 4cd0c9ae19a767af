"""The evaluator as an optimization reward: DSPy GEPA improves a small sentence-simplification
program run by the embedded local LLM, with an AutoMetrics evaluator (fitted on SimpEval's human
ratings) as its metric, while :class:`~autometrics.evaluators.analysis.reward.RewardWatch` tracks the
reward, the drift of the predicted judgments and how many outputs leave the range the evaluator
was validated on (reward hacking).

    python tests/benchmarks/optimize_with_reward.py                 # 0.5B model, 30 metric calls
    python tests/benchmarks/optimize_with_reward.py --model 1.5b --calls 60

Bounded: the budget is GEPA's ``max_metric_calls``; the LLM cache is a fresh temporary file.
Prints the reward per window of calls, the watch's verdict, the program's mean reward on the
validation sentences before and after, LLM calls and wall time; saves
benchmarks/results/optimize_with_reward.json.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

ROOT = Path(__file__).resolve().parents[2]


def main(argv=None) -> int:
    import dspy
    import numpy as np
    from autometrics.evaluators.analysis.reward import RewardWatch
    from autometrics.evaluators.data import builtin_dataset_path, load_dataset
    from autometrics.evaluators.fit import fit_evaluator
    from autometrics.evaluators.llm import local as local_llm
    from autometrics.evaluators.llm.client import LLMCache, LLMClient, LLMConfig, dspy_lm

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="0.5b", choices=sorted(local_llm.MODELS))
    p.add_argument("--calls", type=int, default=30, help="GEPA max_metric_calls")
    p.add_argument("--train", type=int, default=6, help="training sentences for GEPA")
    p.add_argument("--val", type=int, default=6, help="validation sentences")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default=str(ROOT / "tests" / "benchmarks" / "results"))
    args = p.parse_args(argv)
    if local_llm.model_path(args.model) is None:
        print(f"the {args.model} model is not installed: autometrics llm install --model {args.model}", file=sys.stderr)
        return 2
    t0 = time.perf_counter()

    # 1. the reward: an LLM-free evaluator fitted on SimpEval's human ratings (train split only)
    ds = load_dataset(builtin_dataset_path("simpeval"), "score")
    lab = ds.labelled("score")
    fit = fit_evaluator(None, "score", dataset=ds, task="Simplify a complex English sentence while keeping its meaning",
                        seed=args.seed, n_boot=500)
    ev = fit.evaluator
    train_pos, test_pos = lab.split_positions(0.3, args.seed)
    frame = lab.frame
    ref_scores = ev.score_texts([frame["output"].iloc[i] for i in train_pos], [frame["input"].iloc[i] for i in train_pos],
                                [frame["references"].iloc[i] for i in train_pos])["autometrics_score"].to_numpy()
    test = frame.iloc[test_pos].drop_duplicates("input")
    rng = np.random.default_rng(args.seed)
    pick = rng.permutation(len(test))[: args.train + args.val]
    exs = [dspy.Example(sentence=r.input, references=list(r.references)).with_inputs("sentence")
           for r in test.iloc[pick].itertuples()]
    trainset, valset = exs[: args.train], exs[args.train:]
    print(f"reward: {ev.describe()}  (held-out tau {ev.statistics['test']['tau']:.3f}, p {ev.statistics['test']['p_value']:.2g})",
          flush=True)

    # 2. the program and the LLMs (the embedded local model for both the student and GEPA's reflection)
    cache = LLMCache(Path(tempfile.mkdtemp(prefix="autometrics-gepa-")) / "llm-cache.sqlite")
    client = LLMClient(LLMConfig.parse(f"local:{args.model}", timeout=600), cache=cache)

    class Simplify(dspy.Signature):
        """Rewrite the sentence so that it is easier to read, keeping its meaning."""

        sentence: str = dspy.InputField()
        simplified: str = dspy.OutputField()

    program = dspy.Predict(Simplify)
    metric = ev.as_dspy_metric(input_field="sentence", output_field="simplified", reference_field="references")
    watch = RewardWatch(metric, ref_scores, window=max(5, args.calls // 4))

    def mean_reward(prog) -> float:
        vals = []
        with dspy.context(lm=dspy_lm(client, "task", max_tokens=96)):
            for ex in valset:
                try:
                    vals.append(float(metric(ex, prog(sentence=ex.sentence))))
                except Exception as exc:  # an unparseable reply is a missing value, not 0
                    print(f"  (no output for one sentence: {type(exc).__name__})")
        return float(np.mean(vals)) if vals else float("nan")

    before = mean_reward(program)
    print(f"[{time.perf_counter() - t0:6.0f}s] mean reward on {len(valset)} validation sentences before: {before:.3f}", flush=True)
    gepa = dspy.GEPA(metric=watch, max_metric_calls=args.calls, reflection_lm=dspy_lm(client, "reflection", max_tokens=400),
                     reflection_minibatch_size=2, use_merge=False, num_threads=1, seed=args.seed, track_stats=True)
    with dspy.context(lm=dspy_lm(client, "task", max_tokens=96)):
        optimized = gepa.compile(program, trainset=trainset, valset=valset)
    after = mean_reward(optimized)
    local_llm.stop_shared_servers()
    rep = watch.report()
    wall = time.perf_counter() - t0

    print(f"[{wall:6.0f}s] mean reward after: {after:.3f} (before {before:.3f})")
    print("optimized instruction:", optimized.signature.instructions[:400])
    print("\n| calls | mean reward | mean predicted score | outside validated range | drift PSI | drift alert |\n|---|---:|---:|---:|---:|---|")
    for w in rep["windows"]:
        psi = "–" if w["drift_psi"] is None else f"{w['drift_psi']:.2f}"
        print(f"| {w['calls']} | {w['mean_reward']:.3f} | {w['mean_score']:.1f} | {w['out_of_range_share']:.0%} "
              f"{','.join(w['metrics_out_of_range'][:3])} | {psi} | {w['drift_alert']} |")
    print("\nverdict:", rep["verdict"])
    for a in rep["alerts"][1:]:
        print("also:", a)
    usage = client.usage.to_dict()
    print("LLM:", {k: (v["requests"], v["prompt_tokens"], v["completion_tokens"], round(v["seconds"])) for k, v in usage.items()})
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    path = out / "optimize_with_reward.json"
    path.write_text(json.dumps({"model": args.model, "max_metric_calls": args.calls, "train": len(trainset), "val": len(valset),
                                "reward_before": before, "reward_after": after, "wall_seconds": round(wall, 1),
                                "instruction": optimized.signature.instructions, "watch": rep, "llm_usage": usage,
                                "evaluator": ev.describe(), "evaluator_test": ev.statistics["test"]}, indent=2, default=float))
    print(f"saved {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
